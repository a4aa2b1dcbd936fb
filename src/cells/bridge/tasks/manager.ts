/**
 * The task front end of the Exchange (tasks extension `io.modelcontextprotocol/tasks`, SEP-2663).
 *
 * A task mirrors one Exchange: `working`, `input_required` (with its outstanding `inputRequests`),
 * then `completed` (the tool result inline), `failed` (a JSON-RPC error) or `cancelled`.
 * `tasks/update` answers input requests, `tasks/cancel` cancels the Exchange upstream.
 */
import { randomBytes } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { TaskQuota } from './quota.js';
import type { Exchange } from '../exchange.js';
import { invalidResponse } from '../responses.js';
import { invalidParams, shutdownFailure, upstreamFailed, type GatewayError } from '../../../protocol/errors.js';
import type { InputRequest } from '../../../protocol/wire.js';
import type { TaskEnd } from '../../../protocol/connection.js';
import { TASK_NOT_FOUND } from '../../../protocol/tasks.js';
import type { Logger } from '../../../observability/log.js';
import { startTaskSpan, taskStatus, type Traced } from '../../../observability/tracing.js';
import { isTerminal, type TaskRecord, type TaskStatus, type TaskStore } from '../../../store/tasks.js';
import { HeldElsewhere, type SharedStore } from '../../../store/shared.js';

interface LiveTask {
  exchange: Exchange;
  /** Input requests show once no new one arrived for this long (concurrent requests form one set). */
  batchWindowMs: number;
  batchTimer?: NodeJS.Timeout;
  cancelRequested: boolean;
  unsubscribe: () => void;
  /** Serializes store writes for this task; never rejects. */
  chain: Promise<void>;
  /** Whether the last write failed (the store was unreachable); it is tried again. */
  unwritten: boolean;
  retryTimer?: NodeJS.Timeout;
  /** Who runs it, the tool, when it was created (ISO 8601) and the status last written. */
  caller: TaskCaller;
  tool?: string;
  createdAt: string;
  status: TaskStatus;
  /** The record's `ttlMs` and `pollIntervalMs` (ms), for the last word on a task whose record is gone. */
  ttlMs: number;
  pollIntervalMs: number;
  /** The task's span, while tracing. */
  trace?: Traced;
  /** Told once when the task ends (its audit line); `performance.now()` at its creation. */
  onEnd?: (end: TaskEnd) => void;
  startedMs: number;
}

/** A task whose call runs in this process, as {@link TaskManager.runningTasks} reports it. */
export interface RunningTask {
  taskId: string;
  upstream: string;
  /** The principal that created it (raw: hash it before showing it). */
  principal: string;
  tool?: string;
  status: TaskStatus;
  statusMessage?: string;
  /** ISO 8601. */
  createdAt: string;
  /** The input requests waiting for the client, by key. */
  inputs: Record<string, InputRequest>;
}

/** Wait before writing a task's status again after the store could not take it, in ms. */
const STORE_RETRY_MS = 1000;

/** Most task statuses remembered for {@link TaskManager.statusCounts}. */
const MAX_STATUSES = 100_000;

/** Where a task request comes from: who asks, through which upstream endpoint. */
export interface TaskCaller {
  principal: string;
  upstream: string;
}

/** The DetailedTask wire shape of a record (SEP-2663), without `resultType`. */
export function detailedTask(r: TaskRecord): Record<string, unknown> {
  const t: Record<string, unknown> = {
    taskId: r.taskId,
    status: r.status,
    ...(r.statusMessage !== undefined ? { statusMessage: r.statusMessage } : {}),
    createdAt: r.createdAt,
    lastUpdatedAt: r.lastUpdatedAt,
    ttlMs: r.ttlMs,
    pollIntervalMs: r.pollIntervalMs,
  };
  if (r.status === 'input_required') t.inputRequests = r.inputRequests ?? {};
  if (r.status === 'completed') t.result = r.result ?? {};
  if (r.status === 'failed') t.error = r.error;
  return t;
}

/** Runs tasks over Exchanges and answers tasks/get, tasks/update and tasks/cancel. */
export class TaskManager {
  private readonly store: TaskStore;
  private readonly live = new Map<string, LiveTask>();
  private readonly listeners = new Set<(record: TaskRecord) => void>();
  /** The last status of each task this replica created or updated, until its record's ttlMs. */
  private readonly statuses = new LRUCache<string, TaskStatus>({ max: MAX_STATUSES, ttlAutopurge: true });
  /** Called with each status a task reaches (its first status included). */
  onStatus: ((status: TaskStatus) => void) | undefined;

  /**
   * @param shared the shared store the records live in, and the registry that tells whether the
   *   replica running a task is alive.
   * @param replica this replica's id, written into each task record it creates.
   */
  constructor(
    private readonly shared: SharedStore,
    private readonly log: Logger,
    private readonly replica = 'local',
    /** Per-principal bounds on the records this replica creates (unbounded when absent). */
    private readonly quota = new TaskQuota({
      maxRecordsPerPrincipal: Infinity,
      maxResultBytesPerPrincipal: Infinity,
      maxResultBytes: Infinity,
    }),
  ) {
    this.store = shared.tasks;
    // Status changes of tasks other replicas run, for listen streams here.
    shared.onTask((record) => {
      if (record.replica === this.replica) return;
      for (const l of this.listeners) l(record);
    });
    // Writes that failed while the store was unreachable are made as soon as it is back.
    shared.onReachable(() => {
      for (const [taskId, live] of this.live) if (live.unwritten) this.sync(taskId);
    });
    this.store.onExpire((taskId, why) => {
      this.quota.drop(taskId);
      const live = this.live.get(taskId);
      if (!live) return;
      this.release(taskId, live);
      const expired = why === 'expired';
      const message = expired
        ? 'The task expired (its ttlMs ended) before it finished'
        : 'The task record was dropped to make room (tasks.maxRecords) before it finished';
      this.log.info(
        { taskId },
        expired ? 'task expired while running: cancelling upstream' : 'task record dropped while running: cancelling upstream',
      );
      taskStatus(live.trace, 'expired', undefined, true);
      live.exchange.cancel(upstreamFailed(live.exchange.upstream, 'cancelled', message));
      this.statuses.delete(taskId);
      // The last word to listen streams following it: the record itself is gone.
      const now = new Date().toISOString();
      const last: TaskRecord = {
        taskId,
        principal: live.caller.principal,
        upstream: live.caller.upstream,
        replica: this.replica,
        status: 'cancelled',
        statusMessage: `${message}; the call was cancelled upstream`,
        createdAt: live.createdAt,
        lastUpdatedAt: now,
        ttlMs: live.ttlMs,
        pollIntervalMs: live.pollIntervalMs,
      };
      this.onStatus?.('cancelled');
      this.ended(taskId, live, 'cancelled');
      for (const l of this.listeners) l(last);
    });
  }

  /** True when `principal` may hold one more task record (`tasks.maxRecordsPerPrincipal`; fleet-wide on Redis). */
  admits(principal: string): Promise<boolean> {
    return this.quota.admits(principal);
  }

  /** 200 / -32603 `busy`: the caller holds `tasks.maxRecordsPerPrincipal` records. */
  recordsFull(upstream: string): GatewayError {
    const max = this.quota.limits.maxRecordsPerPrincipal;
    return upstreamFailed(
      upstream,
      'busy',
      `This caller holds ${max} task records, the most tasks.maxRecordsPerPrincipal allows; a record is kept until its ttlMs ends: wait for earlier tasks to expire`,
    );
  }

  /** Number of tasks whose Exchange is still running in this process. */
  get running(): number {
    return this.live.size;
  }

  /**
   * Tasks by status: those this replica created or updated whose record has not expired (with a
   * shared store, other replicas' tasks are counted where they run).
   */
  statusCounts(): Record<TaskStatus, number> {
    const out: Record<TaskStatus, number> = { working: 0, input_required: 0, completed: 0, failed: 0, cancelled: 0 };
    for (const status of this.statuses.values()) out[status]++;
    return out;
  }

  /** The tasks whose call runs in this process, oldest first (a read-only view for the admin page). */
  runningTasks(): RunningTask[] {
    return [...this.live]
      .map(([taskId, live]) => ({
        taskId,
        upstream: live.caller.upstream,
        principal: live.caller.principal,
        ...(live.tool !== undefined ? { tool: live.tool } : {}),
        status: live.status,
        ...(live.exchange.statusMessage !== undefined ? { statusMessage: live.exchange.statusMessage } : {}),
        createdAt: live.createdAt,
        inputs: live.exchange.outstanding(),
      }))
      .sort((a, b) => a.createdAt.localeCompare(b.createdAt));
  }

  /**
   * Turns a running Exchange into a task: stores the record (durably, before returning) and
   * returns the flat CreateTaskResult (`resultType: "task"`). Never carries `requestState`.
   * `opts.tool` names the tool for the admin view and the task's span; `opts.onEnd` is called once
   * when this replica sees the task end (`completed`, `failed`, `cancelled`; a record gone counts as
   * `cancelled`).
   */
  async create(
    exchange: Exchange,
    caller: TaskCaller,
    opts: { ttlMs: number; pollIntervalMs: number; batchWindowMs: number; tool?: string; onEnd?: (end: TaskEnd) => void },
  ): Promise<Record<string, unknown>> {
    const startedMs = performance.now();
    const now = new Date().toISOString();
    const record: TaskRecord = {
      taskId: randomBytes(16).toString('base64url'),
      principal: caller.principal,
      upstream: caller.upstream,
      replica: this.replica,
      status: 'working',
      createdAt: now,
      lastUpdatedAt: now,
      ttlMs: opts.ttlMs,
      pollIntervalMs: opts.pollIntervalMs,
    };
    // The router checked admits() before the call started; calls that became tasks meanwhile may have filled the place.
    if (!(await this.quota.hold(record.taskId, caller.principal, record.ttlMs))) throw this.recordsFull(caller.upstream);
    await this.apply(record, exchange, false, opts.batchWindowMs);
    try {
      await this.store.create(record);
    } catch (e) {
      this.quota.drop(record.taskId);
      throw e;
    }
    const trace = startTaskSpan({
      taskId: record.taskId,
      upstream: caller.upstream,
      method: exchange.method,
      name: opts.tool,
      ttlMs: opts.ttlMs,
    });
    taskStatus(trace, record.status);
    const live: LiveTask = {
      exchange,
      batchWindowMs: opts.batchWindowMs,
      cancelRequested: false,
      unsubscribe: () => {},
      chain: Promise.resolve(),
      unwritten: false,
      caller: { principal: caller.principal, upstream: caller.upstream },
      tool: opts.tool,
      createdAt: now,
      status: record.status,
      ttlMs: opts.ttlMs,
      pollIntervalMs: opts.pollIntervalMs,
      trace,
      onEnd: opts.onEnd,
      startedMs,
    };
    this.live.set(record.taskId, live);
    this.statuses.set(record.taskId, record.status, { ttl: record.ttlMs });
    live.unsubscribe = exchange.onChange(() => this.sync(record.taskId));
    this.sync(record.taskId);
    this.log.info({ taskId: record.taskId, upstream: caller.upstream }, 'task created');
    this.onStatus?.(record.status);
    const { inputRequests: _i, result: _r, error: _e, ...task } = detailedTask(record);
    return { resultType: 'task', ...task };
  }

  /** Computes the record's status from the Exchange; returns whether anything changed. */
  private async apply(record: TaskRecord, exchange: Exchange, cancelRequested: boolean, batchWindowMs: number): Promise<boolean> {
    let status: TaskStatus;
    let result: Record<string, unknown> | undefined;
    let error: TaskRecord['error'];
    let inputRequests: TaskRecord['inputRequests'];
    const o = exchange.outcome;
    if (o) {
      if (cancelRequested) status = 'cancelled';
      else if ('result' in o) {
        status = 'completed';
        const { resultType: _rt, ...rest } = o.result;
        result = rest;
      } else {
        status = 'failed';
        error = o.error.toJSON();
      }
      const kept = result ?? error;
      const bytes = kept ? Buffer.byteLength(JSON.stringify(kept)) : 0;
      const over = kept ? await this.quota.charge(record.taskId, bytes) : undefined;
      if (over) {
        const whose = over === 'maxResultBytes' ? "the gateway's task records" : "this caller's task records";
        const what = result ? 'result' : 'error';
        status = 'failed';
        result = undefined;
        error = upstreamFailed(
          exchange.upstream,
          'busy',
          `The tool ran, but the task's ${what} (${bytes} bytes) was not kept: ${whose} would hold more than tasks.${over} (${this.quota.limits[over]} bytes); earlier records are freed when their ttlMs ends`,
        ).toJSON();
      }
    } else {
      inputRequests = exchange.outstanding();
      // Concurrent server-initiated requests show together, once the batch window has passed.
      const settled = exchange.msSinceLastInput >= batchWindowMs;
      const asking = Object.keys(inputRequests).length > 0;
      status = asking && (settled || record.status === 'input_required') ? 'input_required' : 'working';
      if (status === 'working') inputRequests = undefined;
    }
    const statusMessage = exchange.statusMessage;
    const changed =
      status !== record.status ||
      statusMessage !== record.statusMessage ||
      JSON.stringify(Object.keys(inputRequests ?? {})) !== JSON.stringify(Object.keys(record.inputRequests ?? {}));
    if (!changed) return false;
    record.status = status;
    record.statusMessage = statusMessage;
    record.inputRequests = inputRequests;
    record.result = result;
    record.error = error;
    record.lastUpdatedAt = new Date().toISOString();
    return true;
  }

  /**
   * Queues a write of the task's current status (from its Exchange) to the store, after the writes
   * queued before it. A write that fails (the store is unreachable) leaves the chain usable: it is
   * tried again after {@link STORE_RETRY_MS} and as soon as the store is reachable again.
   */
  private sync(taskId: string): void {
    const live = this.live.get(taskId);
    if (!live) return;
    clearTimeout(live.retryTimer);
    live.retryTimer = undefined;
    live.chain = live.chain
      .then(() => this.write(taskId, live))
      .then(
        () => void (live.unwritten = false),
        (e) => {
          if (!live.unwritten) this.log.warn({ taskId, err: (e as Error).message }, 'task status not written to the store: trying again');
          live.unwritten = true;
          if (this.live.get(taskId) !== live) return;
          clearTimeout(live.retryTimer);
          live.retryTimer = setTimeout(() => this.sync(taskId), STORE_RETRY_MS);
          live.retryTimer.unref();
        },
      );
  }

  /** One store write of {@link sync}: reads the record, applies the Exchange to it, writes and announces it. */
  private async write(taskId: string, live: LiveTask): Promise<void> {
    const record = await this.store.get(taskId);
    if (!record || isTerminal(record.status)) {
      // Gone (expired, or a Redis restarted empty) or ended elsewhere: nothing left to write.
      if (live.exchange.outcome) {
        this.release(taskId, live);
        // Unless this replica wrote that end itself (a second write queued after it), it is news here.
        if (!isTerminal(live.status)) this.endedElsewhere(taskId, live, record);
      }
      return;
    }
    const before = record.status;
    const wait = live.batchWindowMs - live.exchange.msSinceLastInput;
    if (!live.exchange.outcome && wait > 0) {
      clearTimeout(live.batchTimer);
      live.batchTimer = setTimeout(() => this.sync(taskId), wait);
    }
    if (!(await this.apply(record, live.exchange, live.cancelRequested, live.batchWindowMs))) return;
    if (!(await this.store.put(record))) {
      // The record went away between the read and the write.
      if (live.exchange.outcome) {
        this.release(taskId, live);
        this.endedElsewhere(taskId, live, undefined);
      }
      return;
    }
    if (record.status !== before) taskStatus(live.trace, record.status, record.error, isTerminal(record.status));
    if (isTerminal(record.status)) {
      this.release(taskId, live);
      this.ended(taskId, live, record.status, record.error);
    }
    live.status = record.status;
    if (this.statuses.has(taskId)) this.statuses.set(taskId, record.status, { noUpdateTTL: true });
    if (record.status !== before) this.onStatus?.(record.status);
    for (const l of this.listeners) l(record);
    if (this.shared.kind !== 'memory')
      await this.shared.publishTask(record).catch((e) => this.log.warn({ taskId, err: (e as Error).message }, 'task status not published'));
  }

  /**
   * Records the end of a task this replica did not write: its status as found (another replica
   * marked it), or, with no record left, the task is dropped from the counts and its span ends
   * `expired`.
   */
  private endedElsewhere(taskId: string, live: LiveTask, record: TaskRecord | undefined): void {
    taskStatus(live.trace, record?.status ?? 'expired', record?.error, true);
    this.ended(taskId, live, record?.status ?? 'cancelled', record?.error);
    if (!record) {
      this.statuses.delete(taskId);
      return;
    }
    live.status = record.status;
    if (this.statuses.has(taskId)) this.statuses.set(taskId, record.status, { noUpdateTTL: true });
    this.onStatus?.(record.status);
  }

  /** Tells the task's `onEnd`, once, that it ended with `status` (a terminal one). */
  private ended(taskId: string, live: LiveTask, status: TaskStatus, error?: TaskRecord['error']): void {
    const onEnd = live.onEnd;
    if (!onEnd || !isTerminal(status)) return;
    live.onEnd = undefined;
    const durationMs = performance.now() - live.startedMs;
    onEnd({ taskId, status: status as TaskEnd['status'], ...(error ? { error } : {}), durationMs });
  }

  /** Stops following a task: its final status is written, or it has no record left to write to. */
  private release(taskId: string, live: LiveTask): void {
    if (this.live.get(taskId) === live) this.live.delete(taskId);
    live.unsubscribe();
    clearTimeout(live.batchTimer);
    clearTimeout(live.retryTimer);
  }

  /**
   * The task, if `caller` may see it.
   * @throws GatewayError -32602 {@link TASK_NOT_FOUND} for unknown, expired or foreign ids.
   */
  async get(taskId: unknown, caller: TaskCaller): Promise<TaskRecord> {
    if (typeof taskId !== 'string' || taskId.length === 0) throw invalidParams('params.taskId must be a non-empty string');
    const live = this.live.get(taskId);
    if (live) await live.chain;
    const record = await this.store.get(taskId);
    if (!record || record.principal !== caller.principal || record.upstream !== caller.upstream) throw invalidParams(TASK_NOT_FOUND);
    if (!isTerminal(record.status) && !live && (await this.ownerGone(record))) return this.failOrphan(record);
    return record;
  }

  /** True when another replica runs the task and its heartbeat has stopped. */
  private async ownerGone(record: TaskRecord): Promise<boolean> {
    if (!record.replica || record.replica === this.replica || this.shared.kind === 'memory') return false;
    return (await this.shared.replicas.lookup(record.replica)) === undefined;
  }

  /** Marks a task whose replica stopped as failed, with that reason, and tells the listeners. */
  private async failOrphan(record: TaskRecord): Promise<TaskRecord> {
    const failed: TaskRecord = {
      ...record,
      status: 'failed',
      statusMessage: 'The replica running this task stopped',
      inputRequests: undefined,
      error: upstreamFailed(record.upstream, 'replica-gone', 'The replica running this task stopped; start the call again').toJSON(),
      lastUpdatedAt: new Date().toISOString(),
    };
    if (await this.store.put(failed)) {
      this.log.warn({ taskId: record.taskId, replica: record.replica }, 'task failed: the replica running it stopped');
      this.onStatus?.('failed');
      for (const l of this.listeners) l(failed);
      await this.shared.publishTask(failed).catch(() => {});
    }
    return failed;
  }

  /**
   * For a task another replica runs: throws {@link HeldElsewhere} to have the request forwarded,
   * or, when that replica stopped, marks the task failed and throws -32603 `replica-gone`.
   */
  private async elsewhere(record: TaskRecord): Promise<never> {
    if (await this.ownerGone(record)) {
      await this.failOrphan(record);
      throw upstreamFailed(record.upstream, 'replica-gone', 'The replica running this task stopped; the task failed. Start the call again');
    }
    throw new HeldElsewhere(record.replica!);
  }

  /**
   * tasks/update: delivers `inputResponses` for outstanding keys (partial sets allowed; other keys
   * ignored).
   * @throws GatewayError -32602 for an unknown task, or a malformed value for an outstanding key
   *   (nothing is delivered then).
   */
  async update(taskId: unknown, caller: TaskCaller, inputResponses: unknown): Promise<void> {
    const record = await this.get(taskId, caller);
    if (inputResponses === null || typeof inputResponses !== 'object' || Array.isArray(inputResponses)) {
      throw invalidParams('tasks/update: params.inputResponses must be an object mapping input keys to responses');
    }
    const live = this.live.get(taskId as string);
    if (!live && !isTerminal(record.status) && record.replica && record.replica !== this.replica) await this.elsewhere(record);
    if (!live) return;
    const answers = inputResponses as Record<string, unknown>;
    const deliver: [string, Record<string, unknown>][] = [];
    for (const [key, value] of Object.entries(answers)) {
      const request = live.exchange.pendingRequest(key);
      if (!request) continue;
      const problem = invalidResponse(request, value);
      if (problem) throw invalidParams(`inputResponses["${key}"] ${problem}`, { key });
      deliver.push([key, value as Record<string, unknown>]);
    }
    for (const [key, value] of deliver) live.exchange.answer(key, value);
  }

  /**
   * tasks/cancel: cancels a running task upstream (`notifications/cancelled` with the upstream's
   * request id) and marks it `cancelled`; a finished task is left as it is.
   * @throws GatewayError -32602 for an unknown task.
   */
  async cancel(taskId: unknown, caller: TaskCaller): Promise<void> {
    const record = await this.get(taskId, caller);
    const live = this.live.get(taskId as string);
    if (!live && !isTerminal(record.status) && record.replica && record.replica !== this.replica) await this.elsewhere(record);
    if (!live || live.exchange.outcome) return;
    live.cancelRequested = true;
    live.exchange.cancel(upstreamFailed(live.exchange.upstream, 'cancelled', 'The task was cancelled by the client'));
    this.sync(taskId as string);
    await live.chain;
  }

  /** Calls `listener` with each task record whose status changed; returns an unsubscribe function. */
  subscribe(listener: (record: TaskRecord) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Cancels every running task (shutdown). */
  cancelAll(): void {
    for (const [id, live] of this.live) {
      live.cancelRequested = true;
      live.exchange.cancel(shutdownFailure(live.exchange.upstream));
      this.sync(id);
    }
  }
}
