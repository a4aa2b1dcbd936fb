/**
 * DNS-rebinding protection (Host and Origin checks) and per-caller limits: a token-bucket rate
 * limit and a concurrency limit, keyed by principal when auth identifies callers and by client
 * address when it does not (`auth.mode: "none"`).
 */
import { LRUCache } from 'lru-cache';
import { DEFAULT_REQUESTS_PER_SECOND, type GatewayConfig } from '../config/schema.js';

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

interface Bucket {
  tokens: number;
  at: number;
}

/** The per-caller limits in effect for a configuration. */
export interface CallerLimits {
  /** What a caller is: the authenticated principal, or the client's address (auth `none`). */
  keyedBy: 'principal' | 'address';
  /** Token bucket refill rate in requests per second; undefined when there is no rate limit. */
  requestsPerSecond: number | undefined;
  /** Token bucket size, in requests. */
  burst: number;
  /** Most requests of one caller in flight at once. */
  maxConcurrent: number;
}

/**
 * The rate and concurrency limits that apply under `cfg.auth`:
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
 * Per-caller token bucket (`requestsPerSecond` refill, `burst` size; no rate limit when
 * `requestsPerSecond` is undefined) and in-flight limit (`maxConcurrent`). A caller is any string
 * key: a principal or a client address (see {@link callerLimits}). Buckets of up to 100000 keys
 * are kept (least recently used dropped).
 */
export class CallerLimiter {
  // maxSize, not max: lru-cache allocates `max` slots up front, at every start.
  private readonly buckets = new LRUCache<string, Bucket>({ maxSize: 100_000, sizeCalculation: () => 1 });
  private readonly inFlight = new Map<string, number>();
  private readonly requestsPerSecond: number | undefined;
  private readonly burst: number;
  private readonly maxConcurrent: number;

  constructor(limits: Omit<CallerLimits, 'keyedBy'>) {
    ({ requestsPerSecond: this.requestsPerSecond, burst: this.burst, maxConcurrent: this.maxConcurrent } = limits);
  }

  /**
   * Takes one token for `key`. Returns 0 when allowed (always, without a rate limit), or the
   * whole seconds to wait before a token is available (for `Retry-After`, at least 1).
   */
  take(key: string, now = Date.now()): number {
    if (this.requestsPerSecond === undefined) return 0;
    const b = this.buckets.get(key) ?? { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.requestsPerSecond);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      this.buckets.set(key, b);
      return 0;
    }
    this.buckets.set(key, b);
    return Math.max(1, Math.ceil((1 - b.tokens) / this.requestsPerSecond));
  }

  /** Starts a request for `key`; returns a release function (idempotent), or undefined at the limit. */
  enter(key: string): (() => void) | undefined {
    const n = this.inFlight.get(key) ?? 0;
    if (n >= this.maxConcurrent) return undefined;
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
