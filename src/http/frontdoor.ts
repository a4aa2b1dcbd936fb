/**
 * DNS-rebinding protection (Host and Origin checks) and per-caller limits: a rate limit and a
 * concurrency limit, keyed by principal when auth identifies callers and by client address when it
 * does not (`auth.mode: "none"`), counted per replica or fleet-wide (src/store/limiters.ts).
 */
import { DEFAULT_REQUESTS_PER_SECOND, type GatewayConfig } from '../config/schema.js';
import { FleetSlots, WindowLimiter, type LimiterSource, type Release, type StoreFallback } from '../store/limiters.js';

const LOOPBACK_HOSTS = ['localhost', '127.0.0.1', '[::1]'];

/** True for loopback listen addresses (localhost, 127.0.0.0/8, ::1). */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

function hostOnly(hostHeader: string): string {
  const v = hostHeader.trim().toLowerCase();
  if (v.startsWith('[')) return v.slice(0, v.indexOf(']') + 1);
  const i = v.lastIndexOf(':');
  return i >= 0 ? v.slice(0, i) : v;
}

/** Checks Host and Origin headers against configured or loopback defaults. */
export class OriginGuard {
  private readonly hosts: string[];
  private readonly origins: string[] | undefined;

  /**
   * @param allowedHosts `host` or `host:port` entries; default loopback names plus `listenHost`.
   * @param allowedOrigins exact origins; default any http(s) origin on a loopback host.
   */
  constructor(listenHost: string, allowedHosts?: string[], allowedOrigins?: string[]) {
    this.hosts = (
      allowedHosts ?? [...LOOPBACK_HOSTS, listenHost.includes(':') && !listenHost.startsWith('[') ? `[${listenHost}]` : listenHost]
    ).map((h) => h.toLowerCase());
    this.origins = allowedOrigins?.map((o) => o.toLowerCase().replace(/\/$/, ''));
  }

  /** Why the request is refused (for a 403), or undefined when Host and Origin are acceptable. */
  check(host: string | null | undefined, origin: string | null | undefined): string | undefined {
    if (!host) return 'missing Host header';
    const h = host.trim().toLowerCase();
    if (!this.hosts.includes(h) && !this.hosts.includes(hostOnly(h))) return `Host '${host}' is not allowed`;
    if (origin === null || origin === undefined || origin === '') return undefined;
    return this.originRefusal(origin);
  }

  /**
   * True when `origin` (an `Origin` header value) may call: listed in `allowedOrigins` (exact,
   * case and a trailing `/` ignored), or by default an http(s) origin on a loopback host.
   * `null` is never allowed. Used for the 403 check and for CORS.
   */
  originAllowed(origin: string): boolean {
    return this.originRefusal(origin) === undefined;
  }

  private originRefusal(origin: string): string | undefined {
    if (origin === 'null') return "Origin 'null' is not allowed";
    const o = origin.trim().toLowerCase().replace(/\/$/, '');
    if (this.origins) return this.origins.includes(o) ? undefined : `Origin '${origin}' is not allowed`;
    let url: URL;
    try {
      url = new URL(o);
    } catch {
      return `Origin '${origin}' is not a valid origin`;
    }
    if (!/^https?:$/.test(url.protocol) || !isLoopback(url.hostname)) return `Origin '${origin}' is not allowed`;
    return undefined;
  }
}

/** The per-caller limits in effect for a configuration. */
export interface CallerLimits {
  /** What a caller is: the authenticated principal, or the client's address (auth `none`). */
  keyedBy: 'principal' | 'address';
  /** Long-run rate in requests per second; undefined when there is no rate limit. */
  requestsPerSecond: number | undefined;
  /** Requests allowed at once within the rate (see {@link rateWindow}). */
  burst: number;
  /** Most requests of one caller in flight at once. */
  maxConcurrent: number;
}

/**
 * The rate limits that apply under `cfg.auth`:
 * - `apiKeys`, `jwt`: keyed by principal; rate `limits.rateLimit.requestsPerSecond`, default
 *   {@link DEFAULT_REQUESTS_PER_SECOND}.
 * - `none`: every caller is the one principal `anonymous`, so the limits are keyed by client
 *   address; no rate limit unless `limits.rateLimit.requestsPerSecond` is set.
 *
 * `burst` and `maxConcurrentPerPrincipal` apply per key in both cases.
 */
export function callerLimits(cfg: Pick<GatewayConfig, 'auth' | 'limits'>): CallerLimits {
  const identified = cfg.auth.mode !== 'none';
  const configured = cfg.limits.rateLimit.requestsPerSecond;
  return {
    keyedBy: identified ? 'principal' : 'address',
    requestsPerSecond: configured ?? (identified ? DEFAULT_REQUESTS_PER_SECOND : undefined),
    burst: cfg.limits.rateLimit.burst,
    maxConcurrent: cfg.limits.maxConcurrentPerPrincipal,
  };
}

/**
 * The fixed window a rate of `requestsPerSecond` with `burst` is counted in: `durationSec` is
 * `burst / requestsPerSecond` rounded to whole seconds (at least 1), and `points`, the requests
 * allowed per window, `requestsPerSecond × durationSec` rounded (at least 1). So the long-run rate
 * is `requestsPerSecond`, about `burst` requests may come at once, and over any T seconds a caller
 * gets at most `points × (⌈T / durationSec⌉ + 1)`.
 */
export function rateWindow(requestsPerSecond: number, burst: number): { points: number; durationSec: number } {
  const durationSec = Math.max(1, Math.round(burst / requestsPerSecond));
  return { points: Math.max(1, Math.round(requestsPerSecond * durationSec)), durationSec };
}

/**
 * Per-caller rate limit (see {@link rateWindow}; none when `requestsPerSecond` is undefined) and
 * in-flight limit (`maxConcurrent`), counted in the shared store: per replica on the memory
 * store, for the whole fleet on Redis, per replica again while Redis fails (see
 * src/store/limiters.ts). A caller is any string key: a principal or a client address (see
 * {@link callerLimits}).
 */
export class CallerLimiter {
  private readonly rate: WindowLimiter | undefined;
  private readonly slots: FleetSlots;

  constructor(limits: Omit<CallerLimits, 'keyedBy'>, store: LimiterSource & { kind: 'memory' | 'redis' }, fallback: StoreFallback) {
    const { requestsPerSecond, burst, maxConcurrent } = limits;
    if (requestsPerSecond !== undefined) {
      const { points, durationSec } = rateWindow(requestsPerSecond, burst);
      this.rate = new WindowLimiter(store, 'rate', points, durationSec, fallback);
    }
    this.slots = new FleetSlots(store, store.kind === 'redis', 'concurrency', maxConcurrent, fallback);
  }

  /**
   * Counts one request of `key`. Resolves 0 when allowed (always, without a rate limit), or the
   * whole seconds until the caller's window ends (for `Retry-After`, at least 1).
   */
  async take(key: string): Promise<number> {
    if (!this.rate) return 0;
    const taken = await this.rate.take(key);
    return taken.allowed ? 0 : Math.max(1, Math.ceil(taken.retryAfterMs / 1000));
  }

  /** Starts a request for `key`; resolves its release function (idempotent), or undefined at the limit. */
  enter(key: string): Promise<Release | undefined> {
    return this.slots.enter(key);
  }
}
