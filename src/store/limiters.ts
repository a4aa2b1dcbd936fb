/**
 * Limits counted in the shared store, with rate-limiter-flexible: on the memory store per replica,
 * on Redis for the whole fleet (`<prefix>limit:<name>:<key>`, the library's counter with an expiry).
 *
 * - {@link WindowLimiter}: at most `points` per fixed window of `durationSec` per key (a rate).
 * - {@link FleetSlots}: at most `max` in flight per key (a concurrency limit): a counter increased on
 *   enter and decreased on leave. On Redis the counter lives {@link SLOT_WINDOW_S} from its first
 *   use and then starts again from 0, so slots a crashed replica never released are free again
 *   within that time (and a request held longer stops counting when its window ends).
 * - {@link LocalSlots}: the same, exact, in this replica's memory.
 *
 * When Redis cannot be reached (or does not answer within its `connectTimeoutMs`), each fails open
 * to a per-replica count in memory: the request is counted there instead, {@link StoreFallback}
 * counts it (`mrtr_limits_store_fallback_total`) and logs one warning when the fallback begins (and
 * at most one a minute while it lasts), and one info line when the store counts again.
 */
import { RateLimiterMemory, RateLimiterRes, type RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Logger } from '../observability/log.js';

/** How long a fleet-wide in-flight counter lives before it starts again from 0, in seconds. */
export const SLOT_WINDOW_S = 60;
/** Least time between two warnings of one fallback that goes on, in ms. */
export const FALLBACK_LOG_MS = 60_000;

/** What makes rate-limiter-flexible limiters counted in a store (`SharedStore.windowLimiter`). */
export interface LimiterSource {
  /**
   * A limiter of `points` per fixed window of `durationSec` (whole seconds, ≥ 1) for each key, its
   * keys under `name`. Its `consume` rejects with a `RateLimiterRes` when over, or with an Error when
   * the store cannot be reached.
   */
  windowLimiter(name: string, points: number, durationSec: number): RateLimiterAbstract;
}

/** A release function: ends one request's slot. Idempotent. */
export type Release = () => void;

/**
 * Notes requests counted in memory because the shared store failed: calls `count(limit)` for
 * each, logs a warning when the fallback begins (and at most once per `everyMs` while it goes
 * on), and an info line once the store counts again.
 */
export class StoreFallback {
  private down = false;
  private warnedAt = -Infinity;

  /** @param count counts one request counted in memory, by limit name (`mrtr_limits_store_fallback_total{limit}`). */
  constructor(
    private readonly log: Logger,
    private readonly count: (limit: string) => void,
    private readonly everyMs = FALLBACK_LOG_MS,
  ) {}

  /** A request of `limit` is counted per replica in memory because the store failed with `err`. */
  fellBack(limit: string, err: unknown): void {
    this.count(limit);
    const now = performance.now();
    if (this.down && now - this.warnedAt < this.everyMs) return;
    this.down = true;
    this.warnedAt = now;
    this.log.warn(
      { limit, err: err instanceof Error ? err.message : String(err) },
      'shared store unreachable: limits counted per replica in memory until it is back',
    );
  }

  /** The store counted a request again. */
  counted(): void {
    if (!this.down) return;
    this.down = false;
    this.log.info('shared store reachable: limits counted fleet-wide again');
  }
}

/** What {@link WindowLimiter.take} answers: allowed, or refused with the wait until the window ends. */
export type Taken = { allowed: true } | { allowed: false; retryAfterMs: number };

/** At most `points` per fixed window of `durationSec` per key, in the store; in memory while the store fails. */
export class WindowLimiter {
  private readonly shared: RateLimiterAbstract;
  private readonly local: RateLimiterMemory;

  /**
   * @param name the limit's name: the keys' namespace in the store, and the `limit` label of the fallback metric.
   * @param durationSec whole seconds, at least 1.
   */
  constructor(
    source: LimiterSource,
    readonly name: string,
    readonly points: number,
    readonly durationSec: number,
    private readonly fallback: StoreFallback,
  ) {
    this.shared = source.windowLimiter(name, points, durationSec);
    this.local = new RateLimiterMemory({ keyPrefix: name, points, duration: durationSec });
  }

  /** Counts `points` for `key` (default 1). */
  async take(key: string, points = 1): Promise<Taken> {
    try {
      await this.shared.consume(key, points);
      this.fallback.counted();
      return { allowed: true };
    } catch (e) {
      if (e instanceof RateLimiterRes) return { allowed: false, retryAfterMs: e.msBeforeNext };
      this.fallback.fellBack(this.name, e);
    }
    try {
      await this.local.consume(key, points);
      return { allowed: true };
    } catch (e) {
      if (e instanceof RateLimiterRes) return { allowed: false, retryAfterMs: e.msBeforeNext };
      throw e;
    }
  }
}

/** At most `max` requests in flight per key, in this replica's memory, exactly. */
export class LocalSlots {
  private readonly inFlight = new Map<string, number>();

  constructor(readonly max: number) {}

  /** Starts a request for `key`; its release, or undefined at the limit. */
  enter(key: string): Release | undefined {
    const n = this.inFlight.get(key) ?? 0;
    if (n >= this.max) return undefined;
    this.inFlight.set(key, n + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.inFlight.get(key) ?? 1) - 1;
      if (left <= 0) this.inFlight.delete(key);
      else this.inFlight.set(key, left);
    };
  }
}

/**
 * At most `max` requests in flight per key over every replica sharing the store (see the file
 * header for the counter's life); on the memory store, or while Redis fails, {@link LocalSlots}.
 * A release that cannot reach the store leaves its slot taken until the counter starts again.
 */
export class FleetSlots {
  private readonly shared: RateLimiterAbstract | undefined;
  private readonly local: LocalSlots;

  /** @param shared false on the memory store: counted in memory only. */
  constructor(
    source: LimiterSource,
    shared: boolean,
    readonly name: string,
    readonly max: number,
    private readonly fallback: StoreFallback,
  ) {
    this.local = new LocalSlots(max);
    this.shared = shared ? source.windowLimiter(name, max, SLOT_WINDOW_S) : undefined;
  }

  /** Starts a request for `key`; its release, or undefined at the limit. */
  async enter(key: string): Promise<Release | undefined> {
    const shared = this.shared;
    if (!shared) return this.local.enter(key);
    let endsAt: number;
    try {
      const res = await shared.consume(key, 1);
      endsAt = performance.now() + res.msBeforeNext;
      this.fallback.counted();
    } catch (e) {
      if (e instanceof RateLimiterRes) {
        // The refused request was counted too: take it back.
        void shared.reward(key, 1).catch(() => {});
        return undefined;
      }
      this.fallback.fellBack(this.name, e);
      return this.local.enter(key);
    }
    let done = false;
    return () => {
      if (done) return;
      done = true;
      // A counter that started again since no longer holds this request.
      if (performance.now() < endsAt) void shared.reward(key, 1).catch(() => {});
    };
  }
}
