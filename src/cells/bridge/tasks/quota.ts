/**
 * Bounds on the task records held for callers (tasks extension, io.modelcontextprotocol/tasks):
 * how many records one principal may hold at once, how many bytes of results (and errors) those
 * records may keep, and how many all records together may. Without them one caller could fill the
 * gateway's memory with large results, or push other callers' records out of the store's
 * least-recently-used bound.
 *
 * A record is counted from its creation until it is gone: its `ttlMs` ended, or the task store
 * reports it gone (`TaskStore.onExpire`: dropped); its bytes are those of its `result` or `error`
 * as JSON (UTF-8). With the in-memory store each replica counts the tasks it created. With the Redis
 * store the counts are fleet-wide (src/store/counters.ts), a record leaving them when its Redis
 * record expires; the counts are mirrored in memory, and when Redis cannot be reached a check uses
 * this replica's memory count (fail open) and `fallback` is told.
 */
import type { SharedRecordQuota } from '../../../store/counters.js';
import type { StoreFallback } from '../../../store/limiters.js';

/** What one principal holds. */
interface Holding {
  records: number;
  bytes: number;
}

/** One counted record. */
interface Held {
  principal: string;
  bytes: number;
}

/** The bounds (`tasks.maxRecordsPerPrincipal`, `tasks.maxResultBytesPerPrincipal`, `tasks.maxResultBytes`). */
export interface TaskQuotaLimits {
  maxRecordsPerPrincipal: number;
  /** In bytes. */
  maxResultBytesPerPrincipal: number;
  /** In bytes, all principals together. */
  maxResultBytes: number;
}

/** A setting a result would exceed. */
export type ResultBound = 'maxResultBytesPerPrincipal' | 'maxResultBytes';

/** Where the counts are shared (the Redis store), and where a check counted in memory is reported. */
export interface SharedQuotaOptions {
  quota: SharedRecordQuota;
  /** Told of each check counted in memory instead (`task-quota`), and when Redis counts again. */
  fallback: StoreFallback;
}

/** The records this replica created, in memory. */
class LocalQuota {
  private readonly held = new Map<string, Held>();
  private readonly by = new Map<string, Holding>();
  /** Bytes all counted records keep. */
  private total = 0;

  constructor(readonly limits: TaskQuotaLimits) {}

  admits(principal: string): boolean {
    return (this.by.get(principal)?.records ?? 0) < this.limits.maxRecordsPerPrincipal;
  }

  hold(taskId: string, principal: string): void {
    if (this.held.has(taskId)) return;
    this.held.set(taskId, { principal, bytes: 0 });
    const h = this.by.get(principal) ?? { records: 0, bytes: 0 };
    h.records++;
    this.by.set(principal, h);
  }

  /** As {@link TaskQuota.charge}; with `force` the bytes are counted whatever the bounds say. */
  charge(taskId: string, bytes: number, force = false): ResultBound | undefined {
    const held = this.held.get(taskId);
    if (!held) return undefined;
    const h = this.by.get(held.principal)!;
    const delta = bytes - held.bytes;
    if (!force && h.bytes + delta > this.limits.maxResultBytesPerPrincipal) return 'maxResultBytesPerPrincipal';
    if (!force && this.total + delta > this.limits.maxResultBytes) return 'maxResultBytes';
    h.bytes += delta;
    this.total += delta;
    held.bytes = bytes;
    return undefined;
  }

  drop(taskId: string): void {
    const held = this.held.get(taskId);
    if (!held) return;
    this.held.delete(taskId);
    this.total -= held.bytes;
    const h = this.by.get(held.principal)!;
    h.bytes -= held.bytes;
    if (--h.records <= 0) this.by.delete(held.principal);
  }
}

/** The task bounds of `tasks.*` (see the file header): per replica, or fleet-wide with `shared`. */
export class TaskQuota {
  private readonly local: LocalQuota;

  /** @param shared the fleet-wide counts (Redis store); without it, this replica's only. */
  constructor(
    readonly limits: TaskQuotaLimits,
    private readonly shared?: SharedQuotaOptions,
  ) {
    this.local = new LocalQuota(limits);
  }

  /** Runs `remote` on the shared counts; undefined when there are none or Redis failed (reported). */
  private async remote<T>(op: (q: SharedRecordQuota) => Promise<T>): Promise<T | undefined> {
    if (!this.shared) return undefined;
    try {
      const answer = await op(this.shared.quota);
      this.shared.fallback.counted();
      return answer;
    } catch (e) {
      this.shared.fallback.fellBack('task-quota', e);
      return undefined;
    }
  }

  /** True when `principal` may create one more task (`tasks.maxRecordsPerPrincipal`). */
  async admits(principal: string): Promise<boolean> {
    const max = this.limits.maxRecordsPerPrincipal;
    return (await this.remote((q) => q.admits(principal, max))) ?? this.local.admits(principal);
  }

  /**
   * Counts a new record `taskId` of `principal`, kept for `ttlMs`, until {@link drop} or its ttl
   * ends, unless the principal holds `tasks.maxRecordsPerPrincipal` records already (checked and
   * counted in one step on Redis). Resolves whether it is counted.
   */
  async hold(taskId: string, principal: string, ttlMs: number): Promise<boolean> {
    const max = this.limits.maxRecordsPerPrincipal;
    const shared = await this.remote((q) => q.hold(taskId, principal, ttlMs, max));
    if (shared === false || (shared === undefined && !this.local.admits(principal))) return false;
    this.local.hold(taskId, principal);
    return true;
  }

  /**
   * Whether record `taskId` may keep `bytes` of result: undefined (and counted) when the
   * principal's records stay within `maxResultBytesPerPrincipal`, and all records within
   * `maxResultBytes`, with it; else the name of the setting it would exceed. A record not counted
   * here is let through.
   */
  async charge(taskId: string, bytes: number): Promise<ResultBound | undefined> {
    const { maxResultBytesPerPrincipal: perPrincipal, maxResultBytes: total } = this.limits;
    const shared = await this.remote(async (q) => ({ over: await q.charge(taskId, bytes, perPrincipal, total) }));
    if (!shared) return this.local.charge(taskId, bytes);
    if (!shared.over) this.local.charge(taskId, bytes, true);
    return shared.over;
  }

  /** Stops counting record `taskId` (it is gone, or was never stored). */
  drop(taskId: string): void {
    this.local.drop(taskId);
    void this.remote((q) => q.drop(taskId));
  }
}
