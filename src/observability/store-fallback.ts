/**
 * What a fleet-wide limit does when the shared store (Redis) cannot be reached: it fails open to
 * this replica's memory count (N replicas then allow up to N times the limit), counts each such
 * check in `mrtr_limits_store_fallback_total{limit}`, and logs one warning per limit at most every
 * {@link FALLBACK_LOG_EVERY_MS}, not one per request.
 */
import type { Logger } from './log.js';

/** The fleet-wide limits, as the `limit` label names them. */
export type FleetLimit = 'rate' | 'concurrency' | 'sampling-budget' | 'task-quota';

/** Least time between two fallback warnings of one limit, in ms. */
export const FALLBACK_LOG_EVERY_MS = 60_000;

/** Reports checks of fleet-wide limits that fell back to the per-replica memory count. */
export class StoreFallback {
  /** When each limit last logged (epoch ms). */
  private readonly logged = new Map<FleetLimit, number>();

  /**
   * @param log where the warning goes.
   * @param count called once per check that fell back (increments the metric).
   */
  constructor(
    private readonly log: Logger,
    private readonly count: (limit: FleetLimit) => void,
  ) {}

  /** One check of `limit` counted in memory because the store failed with `err`. */
  report(limit: FleetLimit, err: unknown): void {
    this.count(limit);
    const now = Date.now();
    if (now - (this.logged.get(limit) ?? -Infinity) < FALLBACK_LOG_EVERY_MS) return;
    this.logged.set(limit, now);
    this.log.warn(
      { limit, err: err instanceof Error ? err.message : String(err) },
      'shared store unreachable: limit counted per replica (in memory) until it is back',
    );
  }
}
