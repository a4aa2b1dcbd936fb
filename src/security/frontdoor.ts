/**
 * DNS-rebinding protection (Host and Origin checks) and per-principal limits: a token-bucket rate
 * limit and a concurrency limit.
 */
import { LRUCache } from 'lru-cache';

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
    this.hosts = (allowedHosts ?? [...LOOPBACK_HOSTS, listenHost.includes(':') && !listenHost.startsWith('[') ? `[${listenHost}]` : listenHost]).map((h) =>
      h.toLowerCase(),
    );
    this.origins = allowedOrigins?.map((o) => o.toLowerCase().replace(/\/$/, ''));
  }

  /** Why the request is refused (for a 403), or undefined when Host and Origin are acceptable. */
  check(host: string | null | undefined, origin: string | null | undefined): string | undefined {
    if (!host) return 'missing Host header';
    const h = host.trim().toLowerCase();
    if (!this.hosts.includes(h) && !this.hosts.includes(hostOnly(h))) return `Host '${host}' is not allowed`;
    if (origin && origin !== 'null') {
      const o = origin.trim().toLowerCase().replace(/\/$/, '');
      if (this.origins) {
        if (!this.origins.includes(o)) return `Origin '${origin}' is not allowed`;
      } else {
        let url: URL;
        try {
          url = new URL(o);
        } catch {
          return `Origin '${origin}' is not a valid origin`;
        }
        if (!/^https?:$/.test(url.protocol) || !isLoopback(url.hostname)) return `Origin '${origin}' is not allowed`;
      }
    } else if (origin === 'null') {
      return "Origin 'null' is not allowed";
    }
    return undefined;
  }
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Per-principal token bucket (`requestsPerSecond` refill, `burst` size) and in-flight limit. */
export class PrincipalLimiter {
  private readonly buckets = new LRUCache<string, Bucket>({ max: 100_000 });
  private readonly inFlight = new Map<string, number>();

  constructor(
    private readonly requestsPerSecond: number,
    private readonly burst: number,
    private readonly maxConcurrent: number,
  ) {}

  /**
   * Takes one token for `principal`. Returns 0 when allowed, or the seconds to wait before a
   * token is available (for `Retry-After`).
   */
  take(principal: string, now = Date.now()): number {
    const b = this.buckets.get(principal) ?? { tokens: this.burst, at: now };
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.requestsPerSecond);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      this.buckets.set(principal, b);
      return 0;
    }
    this.buckets.set(principal, b);
    return Math.max(1, Math.ceil((1 - b.tokens) / this.requestsPerSecond));
  }

  /** Starts a request for `principal`; returns a release function, or undefined at the limit. */
  enter(principal: string): (() => void) | undefined {
    const n = this.inFlight.get(principal) ?? 0;
    if (n >= this.maxConcurrent) return undefined;
    this.inFlight.set(principal, n + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const left = (this.inFlight.get(principal) ?? 1) - 1;
      if (left <= 0) this.inFlight.delete(principal);
      else this.inFlight.set(principal, left);
    };
  }
}
