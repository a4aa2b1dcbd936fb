/**
 * Task records of the tasks extension (io.modelcontextprotocol/tasks, SEP-2663) and the store
 * interface they go through. The default store keeps records in memory (lru-cache, per-record TTL
 * and a size bound).
 */
import { LRUCache } from 'lru-cache';
import type { JsonRpcErrorObject } from '../protocol/errors.js';
import type { InputRequest } from '../protocol/wire.js';

/** Task status (SEP-2663 TaskStatus). `completed`, `failed` and `cancelled` are terminal. */
export type TaskStatus = 'working' | 'input_required' | 'completed' | 'failed' | 'cancelled';

/** A stored task: the DetailedTask fields plus who owns it. */
export interface TaskRecord {
  taskId: string;
  /** Principal that created the task; other principals see it as unknown. */
  principal: string;
  /** Upstream the task runs on. */
  upstream: string;
  /** Replica whose process runs the call behind the task (with a shared store). */
  replica?: string;
  status: TaskStatus;
  statusMessage?: string;
  /** ISO 8601. */
  createdAt: string;
  /** ISO 8601. */
  lastUpdatedAt: string;
  /** Integer ms from creation. */
  ttlMs: number;
  /** Integer ms. */
  pollIntervalMs: number;
  /** Outstanding input requests while `input_required`. */
  inputRequests?: Record<string, InputRequest>;
  /** The tool result, when `completed`. */
  result?: Record<string, unknown>;
  /** The JSON-RPC error, when `failed`. */
  error?: JsonRpcErrorObject;
}

/** True for `completed`, `failed` and `cancelled`. */
export function isTerminal(status: TaskStatus): boolean {
  return status === 'completed' || status === 'failed' || status === 'cancelled';
}

/**
 * Where task records live. `create` resolves only once the record is durable: a `get` from any
 * replica sharing the store then finds it.
 */
export interface TaskStore {
  create(record: TaskRecord): Promise<void>;
  get(taskId: string): Promise<TaskRecord | undefined>;
  /** Replaces the record; resolves false when it no longer exists (expired). */
  put(record: TaskRecord): Promise<boolean>;
  /**
   * Called with the id of each record that goes away by itself: `expired` (its `ttlMs` ended) or
   * `dropped` (evicted to make room for others). A store calls it for every record created through
   * it in this process.
   */
  onExpire(listener: (taskId: string, why: 'expired' | 'dropped') => void): void;
}

/** In-memory store: lru-cache with each record's `ttlMs` and a bound of `maxRecords`. */
export class MemoryTaskStore implements TaskStore {
  private readonly cache: LRUCache<string, TaskRecord>;
  private readonly listeners: ((taskId: string, why: 'expired' | 'dropped') => void)[] = [];

  constructor(maxRecords: number) {
    this.cache = new LRUCache<string, TaskRecord>({
      // maxSize, not max: lru-cache allocates `max` slots up front, at every start.
      maxSize: maxRecords,
      sizeCalculation: () => 1,
      ttlAutopurge: true,
      dispose: (_value, key, reason) => {
        if (reason === 'expire' || reason === 'evict') for (const l of this.listeners) l(key, reason === 'expire' ? 'expired' : 'dropped');
      },
    });
  }

  async create(record: TaskRecord): Promise<void> {
    this.cache.set(record.taskId, record, { ttl: record.ttlMs });
  }

  async get(taskId: string): Promise<TaskRecord | undefined> {
    return this.cache.get(taskId);
  }

  async put(record: TaskRecord): Promise<boolean> {
    if (!this.cache.has(record.taskId)) return false;
    this.cache.set(record.taskId, record, { noUpdateTTL: true });
    return true;
  }

  onExpire(listener: (taskId: string, why: 'expired' | 'dropped') => void): void {
    this.listeners.push(listener);
  }

  /** Number of records held. */
  get size(): number {
    return this.cache.size;
  }
}
