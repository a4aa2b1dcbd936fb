/**
 * Per-caller rate limits of one upstream (`upstreams.NAME.limits.rateLimit`) and of its tools
 * (`upstreams.NAME.limits.tools.TOOL`), on top of the front door's `limits.rateLimit`. They apply
 * on `/mcp/NAME` once the body is read, for 2026-07-28 and legacy clients alike (the tool is
 * `params.name` of a `tools/call`), and on the federated `/mcp` to each request the federation
 * layer routes to one member (through the {@link MemberGate} the request carries down), but not on
 * the internal hop (the replica the client reached counted the request). Counted like the caller
 * limits (src/store/limiters.ts): fleet-wide on Redis, per replica in memory, keyed by caller and
 * upstream (and tool), so `/mcp/NAME` and `/mcp` count together.
 */
import type { Context } from 'hono';
import type { GatewayConfig } from '../config/schema.js';
import { idOf } from '../protocol/envelope.js';
import { argumentsDigest, audited } from '../observability/audit.js';
import { ErrorCode, GatewayError } from '../protocol/errors.js';
import type { MemberGate } from '../federation/federation.js';
import { WindowLimiter, type LimiterSource, type StoreFallback } from '../store/limiters.js';
import type { AppEnv, Door } from './door.js';
import { rateWindow } from './frontdoor.js';
import { errorResponse } from './sse.js';

/** A request refused by an upstream or tool limit: 429 with `Retry-After: retryAfterSec`. */
export interface LimitRefusal {
  /** Whole seconds until the caller's window ends, at least 1. */
  retryAfterSec: number;
  /** What the client reads: which limit, of which upstream (and tool). */
  message: string;
  /** The `limit` label of `mrtr_rate_limited_total`. */
  limit: 'upstream' | 'tool';
}

/**
 * A request refused by an upstream or tool limit, as thrown through the federation layer: HTTP 429
 * with -32600 and the refusal's message; the front door adds `Retry-After: refusal.retryAfterSec`.
 */
export class RateLimited extends GatewayError {
  constructor(readonly refusal: LimitRefusal) {
    super(ErrorCode.InvalidRequest, refusal.message, undefined, 429);
  }
}

/** One request as the limits see it: its method, and the tool's name of a `tools/call`. */
interface Counted {
  method: string;
  params?: unknown;
}

type Rate = { requestsPerSecond: number; burst?: number | undefined };

/** The answer of {@link UpstreamLimits.check} for an upstream without limits (made once). */
const NOT_LIMITED: Promise<undefined> = Promise.resolve(undefined);

/** The configured upstream and tool rate limits. */
export class UpstreamLimits {
  private readonly upstreams = new Map<string, WindowLimiter>();
  private readonly tools = new Map<string, Map<string, WindowLimiter>>();

  constructor(upstreams: GatewayConfig['upstreams'], source: LimiterSource, fallback: StoreFallback) {
    const limiter = (name: string, rate: Rate, label: string) => {
      const { points, durationSec } = rateWindow(rate.requestsPerSecond, rate.burst ?? Math.ceil(rate.requestsPerSecond));
      return new WindowLimiter(source, name, points, durationSec, fallback, label);
    };
    for (const [name, up] of Object.entries(upstreams)) {
      if (up.limits.rateLimit) this.upstreams.set(name, limiter(`upstream:${name}`, up.limits.rateLimit, 'upstream'));
      const tools = Object.entries(up.limits.tools);
      if (tools.length) this.tools.set(name, new Map(tools.map(([tool, rate]) => [tool, limiter(`tool:${name}:${tool}`, rate, 'tool')])));
    }
  }

  /**
   * Counts the requests of `body` (a JSON-RPC message or a batch) from caller `key` to `upstream`:
   * one per request for the upstream's limit, then one per `tools/call` for its tool's limit. Responses and notifications count nothing.
   * @returns undefined when allowed, else the first refusal.
   */
  check(upstream: string, body: unknown, key: string): Promise<LimitRefusal | undefined> {
    // Most upstreams have no limits of their own: nothing of the body is looked at then.
    if (!this.upstreams.has(upstream) && !this.tools.has(upstream)) return NOT_LIMITED;
    return this.take(upstream, (Array.isArray(body) ? body : [body]).filter(isRequest), key);
  }

  /**
   * The gate of the requests the federated `/mcp` routes to one member for caller `key`: counts
   * each as {@link check} counts a request on `/mcp/NAME` (`params.name`: the member's own tool name).
   * @param refused called with the `limit` of each refusal (the metric).
   * @returns a gate that rejects with {@link RateLimited} (429 / -32600) when a limit refuses.
   */
  gate(key: string, refused: (limit: LimitRefusal['limit']) => void): MemberGate {
    return async (upstream, method, params) => {
      const refusal = await this.take(upstream, [{ method, params }], key);
      if (!refusal) return;
      refused(refusal.limit);
      throw new RateLimited(refusal);
    };
  }

  /** Counts `requests` (one body's) of caller `key` to `upstream`: undefined when allowed, else the first refusal. */
  private async take(upstream: string, requests: readonly Counted[], key: string): Promise<LimitRefusal | undefined> {
    if (!requests.length) return undefined;
    const whole = this.upstreams.get(upstream);
    if (whole) {
      // Each request of a body (a legacy client's batch) counts, as it reaches the upstream.
      const taken = await whole.take(key, requests.length);
      if (!taken.allowed) return refusal(taken.retryAfterMs, `Rate limit of upstream ${upstream} exceeded for this caller`, 'upstream');
    }
    const tools = this.tools.get(upstream);
    if (!tools) return undefined;
    for (const m of requests) {
      const name = m.method === 'tools/call' ? (m.params as { name?: unknown } | undefined)?.name : undefined;
      const limit = typeof name === 'string' ? tools.get(name) : undefined;
      if (!limit) continue;
      const taken = await limit.take(key);
      if (!taken.allowed)
        return refusal(taken.retryAfterMs, `Rate limit of tool ${name} on upstream ${upstream} exceeded for this caller`, 'tool');
    }
    return undefined;
  }
}

/** How the client of a body speaks, for the audit lines of its refused requests. */
export interface LimitedOrigin {
  /** `2026-07-28`, or the legacy revision of the client's session (`legacy` when not known). */
  era: string;
  transport: 'streamable-http' | 'sse';
  /** `performance.now()` when the request arrived. */
  started: number;
}

/**
 * The 429 (`-32600`, `Retry-After` in seconds) for `body` (a JSON-RPC message or batch) of the
 * request `c` to `upstream` when an upstream or tool limit refuses it (counted in
 * `mrtr_rate_limited_total{limit}`; each audited request of the body gets a `refused` audit line),
 * else undefined.
 */
export async function upstreamLimited(
  door: Pick<Door, 'upstreamLimits' | 'metrics' | 'limitKey' | 'audit'>,
  c: Context<AppEnv>,
  upstream: string,
  body: unknown,
  origin: LimitedOrigin,
): Promise<Response | undefined> {
  const refused = await door.upstreamLimits.check(upstream, body, door.limitKey(c, c.get('caller')));
  if (!refused) return undefined;
  door.metrics.rateLimited.inc({ limit: refused.limit });
  if (door.audit.enabled) {
    for (const m of (Array.isArray(body) ? body : [body]).filter(isRequest)) {
      if (!audited(m.method)) continue;
      const params = typeof m.params === 'object' && m.params !== null ? (m.params as Record<string, unknown>) : undefined;
      const name = params?.name ?? params?.uri;
      door.audit.record({
        principal: c.get('caller').principal,
        upstream,
        method: m.method,
        name: typeof name === 'string' ? name : undefined,
        argsDigest: argumentsDigest(m.method, params),
        outcome: 'refused',
        code: ErrorCode.InvalidRequest,
        durationMs: performance.now() - origin.started,
        ...(origin.era === '2026-07-28' ? { requestId: c.get('requestId') } : {}),
        rpcId: typeof m.id === 'string' || typeof m.id === 'number' ? m.id : undefined,
        era: origin.era,
        transport: origin.transport,
      });
    }
  }
  return errorResponse(Array.isArray(body) ? null : idOf(body), new RateLimited(refused).toJSON(), 429, retryAfter(refused));
}

/** The `Retry-After` header of a refusal. */
export function retryAfter(refused: LimitRefusal): Record<string, string> {
  return { 'retry-after': String(refused.retryAfterSec) };
}

function refusal(retryAfterMs: number, what: string, limit: LimitRefusal['limit']): LimitRefusal {
  const retryAfterSec = Math.max(1, Math.ceil(retryAfterMs / 1000));
  return { retryAfterSec, message: `${what}; retry after ${retryAfterSec} s`, limit };
}

function isRequest(m: unknown): m is Counted & { id: unknown } {
  return typeof m === 'object' && m !== null && typeof (m as { method?: unknown }).method === 'string' && 'id' in m;
}
