/**
 * The middleware in front of every MCP endpoint (`/mcp/NAME`, its HTTP+SSE paths, and `/mcp` with
 * federation), in this order: the request id (`X-Request-Id` when usable, else a new one), the
 * drain (503 for new work), the Host/Origin check (403), authentication (401, or 403 for a JWT
 * without a required scope; 503 while the issuer keys cannot be fetched), then the caller's rate
 * and concurrency limits (429). It sets the request's variables (`RequestVars`) and, when the request
 * ends, releases its concurrency slot (a streamed response keeps it until its work ends).
 */
import type { Context, MiddlewareHandler } from 'hono';
import { ErrorCode } from '../protocol/errors.js';
import { uniqueId } from '../observability/ids.js';
import { audited } from '../observability/audit.js';
import { decodeHeaderValue } from '../protocol/envelope.js';
import { AuthError, AuthUnavailable, type Caller } from '../security/auth.js';
import { FEDERATED_LABEL } from '../federation/federation.js';
import type { AppEnv, Door } from './door.js';
import { addResponseHeaders, applyResponseHeaders, headerOf } from './headers.js';
import { DRAIN_METHODS, refuseDraining } from './refusals.js';
import { errorResponse } from './sse.js';

/** The admission middleware of the MCP endpoints. */
export function admission(door: Door): MiddlewareHandler<AppEnv> {
  const { guard, limiter, listens, cfg } = door;
  return async (c, next) => {
    const started = performance.now();
    const given = headerOf(c, 'x-request-id');
    const requestId = given !== undefined && /^[\w.:-]{1,128}$/.test(given) ? given : uniqueId();
    // During the drain only what may resume work held here goes on (the router decides from the body).
    if (door.draining() && !(c.req.method === 'POST' && DRAIN_METHODS.has(headerOf(c, 'mcp-method') ?? '')))
      return refuseDraining(requestId);
    const refused = guard.check(headerOf(c, 'host'), headerOf(c, 'origin'));
    if (refused) return door.forbidden(refused, { requestId }, { 'x-request-id': requestId });
    const caller = await authenticated(door, c, requestId);
    if (caller instanceof Response) return caller;
    const key = door.limitKey(c, caller);
    const wait = await limiter.take(key);
    if (wait > 0) {
      door.metrics.rateLimited.inc({ limit: 'rate' });
      auditLimited(door, c, requestId, caller.principal, started);
      return errorResponse(null, { code: ErrorCode.InvalidRequest, message: `Rate limit exceeded; retry after ${wait} s` }, 429, {
        'retry-after': String(wait),
        'x-request-id': requestId,
      });
    }
    const leave = await limiter.enter(key);
    if (!leave) {
      door.metrics.rateLimited.inc({ limit: 'concurrency' });
      auditLimited(door, c, requestId, caller.principal, started);
      return errorResponse(
        null,
        {
          code: ErrorCode.InvalidRequest,
          message: `Too many requests in flight for this caller (limit ${cfg.limits.maxConcurrentPerPrincipal})`,
        },
        429,
        {
          'retry-after': '1',
          'x-request-id': requestId,
        },
      );
    }
    c.set('caller', caller);
    c.set('requestId', requestId);
    c.set('enterListen', () => listens.enter(key));
    addResponseHeaders(c, { 'x-request-id': requestId });
    try {
      await next();
      applyResponseHeaders(c);
    } finally {
      // A streamed response keeps its concurrency slot until the work behind it ends.
      const work = c.get('work');
      if (work) void work.then(leave);
      else leave();
    }
  };
}

/**
 * The audit line of a request a limit refused (429, code -32600) before its body was read, when its
 * `Mcp-Method` header names a method that gets one (2026-07-28 clients send it; `Mcp-Name` gives the name).
 */
function auditLimited(door: Door, c: Context<AppEnv>, requestId: string, principal: string, started: number): void {
  const method = headerOf(c, 'mcp-method')?.trim();
  if (!door.audit.enabled || !method || !audited(method)) return;
  const rawName = headerOf(c, 'mcp-name');
  let name: string | undefined;
  try {
    name = rawName === undefined ? undefined : decodeHeaderValue(rawName.trim());
  } catch {
    // Not a usable header value: the line goes without a name.
  }
  door.audit.record({
    principal,
    upstream: c.req.param('name') ?? FEDERATED_LABEL,
    method,
    name,
    outcome: 'refused',
    code: ErrorCode.InvalidRequest,
    durationMs: performance.now() - started,
    requestId,
    era: headerOf(c, 'mcp-protocol-version')?.trim() || '2026-07-28',
    transport: 'streamable-http',
  });
}

/**
 * The caller of `c`'s `Authorization`, or the refusal: 401 / 403 (-32600) with `WWW-Authenticate`
 * naming the protected resource metadata, or 503 (-32603) while the issuer keys cannot be fetched.
 */
async function authenticated({ auth, log, metadataUrl }: Door, c: Context<AppEnv>, requestId: string): Promise<Caller | Response> {
  // Undefined on the federated endpoint.
  const name = c.req.param('name');
  try {
    const found = auth.authenticate(headerOf(c, 'authorization'));
    return found instanceof Promise ? await found : found;
  } catch (e) {
    if (e instanceof AuthUnavailable) {
      log.warn(
        { requestId, upstream: name ?? FEDERATED_LABEL, err: e.message },
        'request not authenticated: the issuer keys cannot be fetched',
      );
      return errorResponse(
        null,
        { code: ErrorCode.InternalError, message: `The gateway cannot check access tokens now: ${e.message}; retry shortly` },
        503,
        { 'retry-after': '5', 'x-request-id': requestId },
      );
    }
    if (!(e instanceof AuthError)) throw e;
    const params = [`resource_metadata="${metadataUrl(c, name)}"`];
    if (e.error) params.push(`error="${e.error}"`, `error_description="${e.message.replace(/"/g, "'")}"`);
    if (e.scope) params.push(`scope="${e.scope}"`);
    log.info({ requestId, upstream: name ?? FEDERATED_LABEL, status: e.status, reason: e.message }, 'request refused by auth');
    return errorResponse(null, { code: ErrorCode.InvalidRequest, message: e.message }, e.status, {
      'www-authenticate': `Bearer ${params.join(', ')}`,
      'x-request-id': requestId,
    });
  }
}
