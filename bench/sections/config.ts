/** Gateway settings shared by the benchmark's gateways. */
import { parseConfig } from '../../src/config/load.js';

/**
 * Limits lifted for load: the default per-principal rate limit (50 requests/s, burst 100) and
 * concurrency limit (64) would turn a throughput benchmark into a benchmark of the limiter; every
 * benchmark request comes from the same anonymous principal.
 */
export const benchLimits = {
  rateLimit: { requestsPerSecond: 1_000_000, burst: 1_000_000 },
  maxConcurrentPerPrincipal: 100_000,
  maxParked: 100_000,
};

/** True when the gateway's config schema accepts `key: value` on an upstream. */
function upstreamAccepts(key: string, value: unknown): boolean {
  try {
    parseConfig({ upstreams: { probe: { transport: 'stdio', command: 'node', [key]: value } } }, {});
    return true;
  } catch {
    return false;
  }
}

/**
 * Session bounds of a benchmark upstream: `maxSessions: n`; where the gateway also has a
 * per-principal session bound (`maxSessionsPerPrincipal`), that bound is lifted. All benchmark
 * calls come from one anonymous principal, and a call beyond the per-principal bound is refused
 * at once rather than queued for a free session, so the bound would turn concurrency above it
 * into errors.
 */
export function sessions(n: number): Record<string, number> {
  const unbounded = 1_000_000;
  return { maxSessions: n, ...(upstreamAccepts('maxSessionsPerPrincipal', unbounded) ? { maxSessionsPerPrincipal: unbounded } : {}) };
}
