/**
 * What several replicas of the gateway share, behind one interface: task records, the spent
 * requestState ids, the registry of live replicas, task status changes as they happen, and the
 * per-user upstream grants (src/store/grants.ts, their tokens sealed), the remembered approvals
 * (src/store/approvals.ts). In
 * memory (the default) it serves one replica; on Redis (`store.kind: "redis"`) every replica sees
 * the same (src/store/redis.ts).
 *
 * Per replica, whatever the store: parked calls and their upstream sessions, running tasks' calls,
 * legacy sessions, rate and concurrency limits.
 */
import { LRUCache } from 'lru-cache';
import { MemoryRememberedApprovals, type RememberedApprovals } from './approvals.js';
import { MemoryGrantStore, type GrantStore } from './grants.js';
import { MemoryTaskStore, type TaskRecord, type TaskStore } from './tasks.js';

/** Spent requestState ids (single use of every sealed state, MCP 2026-07-28 basic/patterns/mrtr §Server rules 4). */
export interface SpentStates {
  /** Whether `jti` was spent already. @throws StoreUnavailable when the shared store cannot be reached. */
  isSpent(jti: string): Promise<boolean>;
  /**
   * Spends `jti` until `expMs` (epoch ms) plus a minute; resolves false when it was spent already.
   * Atomic across replicas: of two replicas spending the same id at once, exactly one gets true.
   * @throws StoreUnavailable when the shared store cannot be reached.
   */
  spend(jti: string, expMs: number): Promise<boolean>;
  /**
   * When the ledger began to remember (epoch ms), for a ledger that forgets on restart (the
   * memory store); absent for one that outlives the process (Redis). A state sealed before it could
   * have been spent already without the ledger knowing.
   */
  readonly rememberedSinceMs?: number;
}

/**
 * Whether a state sealed at `iat` (seconds since the epoch) predates what `ledger` remembers, so
 * it cannot be told unspent: with the memory store, a state sealed before the gateway restarted.
 * Such a state is refused like a spent one (-32602), which keeps `requestState` single-use across
 * restarts.
 */
export function predatesLedger(ledger: SpentStates, iat: number | undefined): boolean {
  return ledger.rememberedSinceMs !== undefined && (iat ?? 0) < Math.floor(ledger.rememberedSinceMs / 1000);
}

/** A replica as the registry knows it. */
export interface ReplicaInfo {
  id: string;
  /** Base URL other replicas forward to, for example http://10.0.0.7:8787. */
  url: string;
}

/** The registry of live replicas: each writes a heartbeat; one that stops is gone after the dead time. */
export interface ReplicaRegistry {
  /** Writes this replica's heartbeat (its id and URL), valid for `ttlMs`. */
  heartbeat(self: ReplicaInfo, ttlMs: number): Promise<void>;
  /**
   * The replica `id` when it is alive (its heartbeat is current), else undefined.
   * @throws StoreUnavailable when the registry cannot be read: not a sign that the replica is gone.
   */
  lookup(id: string): Promise<ReplicaInfo | undefined>;
  /** Removes this replica's entry (clean stop). */
  leave(id: string): Promise<void>;
}

/** The shared store of a gateway. */
export interface SharedStore {
  readonly kind: 'memory' | 'redis';
  readonly tasks: TaskStore;
  readonly spent: SpentStates;
  readonly replicas: ReplicaRegistry;
  /** Per-user upstream grants and registered OAuth clients (their secrets sealed by the caller). */
  readonly grants: GrantStore;
  /** Approvals users asked to remember (docs/approvals.md), by the approval policy's key. */
  readonly approvals: RememberedApprovals;
  /** Tells every replica about a task record whose status changed (for `subscriptions/listen`). */
  publishTask(record: TaskRecord): Promise<void>;
  /** Calls `listener` with task records other replicas published. */
  onTask(listener: (record: TaskRecord) => void): void;
  /**
   * Undefined when usable, else why not (for `/readyz`). Cheap enough to poll: Redis reuses the
   * answer of its read-and-write probe for a second.
   */
  unavailable(): Promise<string | undefined>;
  /**
   * Calls `listener` each time the store becomes reachable: its first connection and every
   * reconnection (what was written before may be gone, such as the heartbeat on a restarted Redis).
   * The in-memory store is always reachable and never calls it.
   */
  onReachable(listener: () => void): void;
  close(): Promise<void>;
}

/**
 * The call or task a request refers to is held by another replica (named by its id): the front
 * door forwards the request there over the internal hop.
 */
export class HeldElsewhere extends Error {
  override name = 'HeldElsewhere';
  constructor(readonly replica: string) {
    super(`held by replica ${replica}`);
  }
}

/** The shared store could not be reached: what needs it fails fast with -32603 `store-unavailable`. */
export class StoreUnavailable extends Error {
  override name = 'StoreUnavailable';
}

/** Spent ids in memory (one replica): lru-cache, each until its state expired. */
export class MemorySpentStates implements SpentStates {
  private readonly spentIds: LRUCache<string, true>;
  readonly rememberedSinceMs = Date.now();

  /** @param maxEntries most spent ids remembered (the oldest are forgotten first). */
  constructor(maxEntries = 1_000_000) {
    // maxSize, not max: lru-cache allocates `max` slots up front (a fifth of a second at every start for a million).
    this.spentIds = new LRUCache<string, true>({ maxSize: maxEntries, sizeCalculation: () => 1, ttlAutopurge: false });
  }

  async isSpent(jti: string): Promise<boolean> {
    return this.spentIds.has(jti);
  }

  async spend(jti: string, expMs: number): Promise<boolean> {
    if (this.spentIds.has(jti)) return false;
    this.spentIds.set(jti, true, { ttl: Math.max(1, expMs - Date.now()) + 60_000 });
    return true;
  }
}

/** One replica in memory: the store everything defaults to. */
export class MemoryStore implements SharedStore {
  readonly kind = 'memory' as const;
  readonly tasks: TaskStore;
  readonly spent = new MemorySpentStates();
  readonly grants: GrantStore = new MemoryGrantStore();
  readonly approvals: RememberedApprovals = new MemoryRememberedApprovals();
  private self: ReplicaInfo | undefined;
  readonly replicas: ReplicaRegistry = {
    heartbeat: async (self) => void (this.self = self),
    lookup: async (id) => (this.self?.id === id ? this.self : undefined),
    leave: async () => void (this.self = undefined),
  };

  constructor(maxTaskRecords: number) {
    this.tasks = new MemoryTaskStore(maxTaskRecords);
  }

  async publishTask(): Promise<void> {}
  onTask(): void {}
  async unavailable(): Promise<string | undefined> {
    return undefined;
  }
  onReachable(): void {}
  async close(): Promise<void> {}
}
