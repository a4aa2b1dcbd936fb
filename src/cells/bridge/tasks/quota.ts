/**
 * Bounds on the task records this replica holds for callers (tasks extension,
 * io.modelcontextprotocol/tasks): how many records one principal may hold at once, how many
 * bytes of results (and errors) those records may keep, and how many all records together may.
 * Without them one caller could fill the gateway's memory with large results, or push other
 * callers' records out of the store's least-recently-used bound.
 *
 * A record is counted from its creation until the task store reports it gone (`TaskStore.onExpire`:
 * its `ttlMs` ended, or it was dropped); its bytes are those of its `result` or `error` as JSON
 * (UTF-8). Counts are kept per replica (each counts the tasks it created).
 */

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

export class TaskQuota {
  private readonly held = new Map<string, Held>();
  private readonly by = new Map<string, Holding>();
  /** Bytes all counted records keep. */
  private total = 0;

  constructor(readonly limits: TaskQuotaLimits) {}

  /** True when `principal` may create one more task. */
  admits(principal: string): boolean {
    return (this.by.get(principal)?.records ?? 0) < this.limits.maxRecordsPerPrincipal;
  }

  /** Counts a new record of `principal`, until {@link drop}. */
  hold(taskId: string, principal: string): void {
    if (this.held.has(taskId)) return;
    this.held.set(taskId, { principal, bytes: 0 });
    const h = this.by.get(principal) ?? { records: 0, bytes: 0 };
    h.records++;
    this.by.set(principal, h);
  }

  /**
   * Whether record `taskId` may keep `bytes` of result: undefined (and counted) when the
   * principal's records stay within `maxResultBytesPerPrincipal`, and all records within
   * `maxResultBytes`, with it; else the name of the setting it would exceed. A record not counted
   * here is let through.
   */
  charge(taskId: string, bytes: number): 'maxResultBytesPerPrincipal' | 'maxResultBytes' | undefined {
    const held = this.held.get(taskId);
    if (!held) return undefined;
    const h = this.by.get(held.principal)!;
    const delta = bytes - held.bytes;
    if (h.bytes + delta > this.limits.maxResultBytesPerPrincipal) return 'maxResultBytesPerPrincipal';
    if (this.total + delta > this.limits.maxResultBytes) return 'maxResultBytes';
    h.bytes += delta;
    this.total += delta;
    held.bytes = bytes;
    return undefined;
  }

  /** Stops counting record `taskId` (the store reported it gone, or it was never stored). */
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
