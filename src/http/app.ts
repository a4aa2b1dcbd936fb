/**
 * The HTTP front door: MCP 2026-07-28 Streamable HTTP, POST only, one endpoint per upstream at
 * `POST /mcp/NAME`, and with `federation.enabled` the federated endpoint `POST /mcp`, served by the
 * federation layer (src/federation/federation.ts) in front of the same router. Responses are
 * `application/json`, or `text/event-stream` once an upstream progress notification has to reach
 * a client that sent `_meta.progressToken` and accepts SSE.
 * Closing that stream (or the connection) cancels the call upstream. `subscriptions/listen` is
 * answered with its own long-lived SSE stream (src/http/listen.ts).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { getConnInfo } from '@hono/node-server/conninfo';
import { Hono, type Context, type MiddlewareHandler } from 'hono';
import type { HttpBindings } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { Gateway } from '../router/router.js';
import { ErrorCode, GatewayError, methodNotFound, quoted, upstreamFailed } from '../protocol/errors.js';
import { idOf, parseJsonRpc, validateRequest } from '../protocol/envelope.js';
import { META_LOG_LEVEL, META_PROTOCOL_VERSION, SERVED_METHODS, type RequestId } from '../protocol/wire.js';
import { ClientConnection } from '../protocol/connection.js';
import type { ProgressParams } from '../protocol/connection.js';
import type { Logger } from '../observability/log.js';
import { endSpan, startServerSpan, traceIds, tracingActive, within, type Traced } from '../observability/tracing.js';
import { AuthError, AuthUnavailable, Authenticator, principalHash, type Caller } from '../security/auth.js';
import { corsMiddleware } from './cors.js';
import { CallerLimiter, OriginGuard, callerLimits } from './frontdoor.js';
import { uniqueId } from '../observability/ids.js';
import { eraOf, LegacySessions, type Era, type SessionCaller } from './legacy-sessions.js';
import { readBody, type BodyRead } from './body.js';
import { checkPostMedia, withMcpAccept } from './media.js';
import { addResponseHeaders, applyResponseHeaders, headerOf, requestHeaders, responseHeadersFor } from './headers.js';
import {
  FORWARD_FEDERATED,
  FORWARD_PREFIX,
  SECRET_HEADER,
  PRINCIPAL_HEADER,
  forwardToReplica,
  forwardedPrincipal,
  hopRefusal,
  secretMatches,
  type HopRefusalReason,
} from './replicas.js';
import { FEDERATED_LABEL, Federation, type FederationContext } from '../federation/federation.js';
import type { ValidatedRequest } from '../protocol/envelope.js';
import type { ListenHandle } from '../router/subscriptions.js';
import { HeldElsewhere, StoreUnavailable } from '../store/shared.js';
import { serveListen } from './listen.js';
import { UnknownPaths } from './unknown-paths.js';
import { adminApp } from './admin.js';
import { errorResponse, jsonHeaders, sseStream, type SseStream } from './sse.js';

function asGatewayError(e: unknown, log: Logger): GatewayError {
  if (e instanceof GatewayError) return e;
  if (e instanceof StoreUnavailable) {
    log.warn({ err: e.message }, 'request failed: the shared store is unavailable');
    // The store's address and error stay in the log: they tell a caller nothing it can act on.
    return new GatewayError(ErrorCode.InternalError, 'The shared store of the gateway cannot be reached; retry shortly', {
      reason: 'store-unavailable',
    });
  }
  log.error({ err: e instanceof Error ? { message: e.message, stack: e.stack } : String(e) }, 'unexpected error');
  return new GatewayError(ErrorCode.InternalError, 'Internal gateway error');
}

/** The client's address (the socket's remote address), or `unknown` once the socket is gone. */
function clientAddress(c: Context): string {
  try {
    return getConnInfo(c).remote.address ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/** The client's address and port, when the socket is still there (for the request's span). */
function clientEndpoint(c: Context): { address?: string; port?: number } | undefined {
  try {
    const { address, port } = getConnInfo(c).remote;
    return { address, port };
  } catch {
    return undefined;
  }
}

/** The SERVER span of a 2026-07-28 request (its parent from `params._meta`, else the HTTP headers). */
function serverSpanOf(
  c: Context,
  rpc: { id?: RequestId; method: string; params?: Record<string, unknown> },
  upstream: string,
): Traced | undefined {
  const rawMeta = rpc.params?._meta;
  const meta = rawMeta && typeof rawMeta === 'object' && !Array.isArray(rawMeta) ? (rawMeta as Record<string, unknown>) : undefined;
  return startServerSpan({
    method: rpc.method,
    params: rpc.params,
    upstream,
    id: rpc.id,
    protocolVersion: typeof meta?.[META_PROTOCOL_VERSION] === 'string' ? (meta[META_PROTOCOL_VERSION] as string) : undefined,
    meta,
    headers: c.req.raw.headers,
    client: clientEndpoint(c),
    inputRounds: true,
  });
}

/**
 * True when the request's body stopped arriving: the client aborted the upload, sent a malformed
 * (chunked) body, or stalled past `limits.requestReadTimeoutMs`. A client error, not the gateway's.
 */
function uploadBroken(c: Context): boolean {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return !!incoming && !incoming.complete && (incoming.destroyed || !!incoming.errored);
}

/** True when `value` nests arrays/objects deeper than `max` (the walk stops `max` levels down). */
export function deeperThan(value: unknown, max: number, depth = 1): boolean {
  if (value === null || typeof value !== 'object') return false;
  if (depth > max) return true;
  if (Array.isArray(value)) {
    for (const child of value) if (child !== null && typeof child === 'object' && deeperThan(child, max, depth + 1)) return true;
    return false;
  }
  for (const key in value) {
    const child = (value as Record<string, unknown>)[key];
    if (child !== null && typeof child === 'object' && deeperThan(child, max, depth + 1)) return true;
  }
  return false;
}

/** Per-request values the front door hands to the MCP handler. */
interface RequestVars {
  caller: Caller;
  requestId: string;
  /** Takes one of the caller's `limits.maxListensPerPrincipal` places; its release, or undefined when none is left. */
  enterListen: () => (() => void) | undefined;
  /** Settles when the request's work (including a streamed response) is over. */
  work?: Promise<unknown>;
  /** Set when the answer is a 404 for a path the gateway does not serve (logged by {@link UnknownPaths}). */
  unknownPath?: true;
}

/** The HTTP front door and its shutdown hook. */
export interface FrontDoor {
  app: Hono<{ Variables: RequestVars; Bindings: HttpBindings }>;
  /** The sessions of legacy clients. */
  legacy: LegacySessions;
  /** The federation layer behind `POST /mcp` (undefined unless `federation.enabled`). */
  federation: Federation | undefined;
  /**
   * Stops taking new MCP work (new calls get 503 / -32603 "gateway shutting down"; retries of calls
   * parked here and `tasks/*` requests are still served, see {@link Gateway.drain}) and waits up to
   * `graceMs` for requests in flight, parked calls and tasks running here to finish. Resolves
   * with how many are still in flight or held.
   */
  drain(graceMs: number): Promise<number>;
  /** Waits up to `ms` for requests in flight to finish. */
  settle(ms: number): Promise<number>;
}

/**
 * Builds the front door for `gateway`. Routes:
 * - `POST /mcp/:name`: MCP 2026-07-28 (Host/Origin check → auth → rate and concurrency limits →
 *   body limit → JSON-RPC). Other methods on it: 405 with `Allow: POST`, except CORS preflights
 *   (`OPTIONS`): 204 for an allowed origin, 403 otherwise (see `corsMiddleware`).
 * - `POST /mcp` (with `federation.enabled`): the same for the federated upstreams together, for
 *   2026-07-28 clients and for legacy Streamable HTTP clients (`initialize`, then `Mcp-Session-Id`;
 *   GET and DELETE with it). The old HTTP+SSE transport is served per upstream only.
 * - `GET /.well-known/oauth-protected-resource/mcp/:name` (and `/mcp` with federation): RFC 9728
 *   protected resource metadata (with CORS headers for allowed origins; 403 for a Host not allowed).
 * - `GET /healthz`, `GET /readyz`, `GET /metrics` (Prometheus text).
 * - with `admin.enabled`: `GET /admin` and `GET /admin/api/…` (src/http/admin.ts), behind the
 *   Host/Origin check, the same authentication and `admin.principals`.
 * - anything else: 404 with a JSON-RPC error body.
 */
export function createApp(gateway: Gateway, log: Logger): FrontDoor {
  const cfg = gateway.cfg;
  const app = new Hono<{ Variables: RequestVars; Bindings: HttpBindings }>();
  const federation = cfg.federation.enabled ? new Federation(gateway, log.child({ component: 'federation' })) : undefined;
  const maxBody = cfg.limits.maxBodyBytes;
  const auth = new Authenticator(cfg.auth);
  const guard = new OriginGuard(cfg.listen.host, cfg.http.allowedHosts, cfg.http.allowedOrigins);
  // Rate and concurrency limits per principal, or per client address when auth does not identify callers.
  const limits = callerLimits(cfg);
  const limiter = new CallerLimiter(limits);
  // Open subscriptions/listen streams per caller (a listen stops counting as in flight once it streams).
  const listens = new CallerLimiter({ requestsPerSecond: undefined, burst: 0, maxConcurrent: cfg.limits.maxListensPerPrincipal });
  const limitKey = (c: Context, caller: Caller) => (limits.keyedBy === 'principal' ? caller.principal : `address:${clientAddress(c)}`);
  const inflight = new Set<Promise<unknown>>();
  /**
   * The `track` of {@link handleMcp}: the work of a request counts as in flight (the drain and the
   * settle before the connections close wait for it) until it ends and, when answered whole, until
   * its response of `c` is written out; a streamed response of `c` keeps its concurrency slot until then.
   */
  const trackIn =
    (c?: Context): WorkTracker =>
    (work) => {
      c?.set('work', work);
      inflight.add(work);
      return (streamed) => {
        const outgoing = streamed ? undefined : (c?.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
        if (outgoing && !outgoing.writableFinished && !outgoing.destroyed) {
          // The answer is handed to the server after this: a stop closing connections now would drop it.
          const written = new Promise<void>((r) => {
            outgoing.once('finish', r);
            outgoing.once('close', r);
          });
          inflight.add(written);
          void written.then(() => inflight.delete(written));
        }
        inflight.delete(work);
        // Answered whole: the front door releases the slot once the response is handed over.
        if (!streamed) c?.set('work', undefined);
      };
    };
  let draining = false;
  const legacy = new LegacySessions(
    gateway,
    log,
    (upstream, principal, r) => {
      const durationMs = Math.round(r.durationMs * 10) / 10;
      log.info(
        {
          upstream,
          method: quoted(r.method),
          name: quoted(r.name),
          principal: principalHash(principal),
          durationMs,
          outcome: r.outcome,
          code: r.code,
          reason: r.reason,
          era: 'legacy',
        },
        'request',
      );
      gateway.metrics.requests.inc({
        upstream,
        method: (SERVED_METHODS as readonly string[]).includes(r.method) ? r.method : 'other',
        outcome: r.code !== undefined ? String(r.code) : r.outcome,
      });
    },
    federation,
  );
  gateway.onClose(() => legacy.close());
  const sessionCaller = (c: Context): SessionCaller => ({
    ...c.get('caller'),
    owner: limitKey(c, c.get('caller')),
    requestId: c.get('requestId'),
  });

  const baseUrl = (c: Context) =>
    cfg.http.publicUrl?.replace(/\/$/, '') ??
    `${new URL(c.req.url).protocol}//${c.req.header('host') ?? `${cfg.listen.host}:${cfg.listen.port}`}`;
  /** The protected resource metadata URL of `/mcp/NAME`, or of the federated `/mcp` (name undefined). */
  const metadataUrl = (c: Context, name: string | undefined) =>
    `${baseUrl(c)}/.well-known/oauth-protected-resource/mcp${name === undefined ? '' : `/${name}`}`;

  /** 403 / -32600 `Forbidden: …` for a request the Host/Origin check refused, logged with `logged`. */
  const forbidden = (reason: string, logged: Record<string, unknown>, headers?: Record<string, string>) => {
    log.warn({ ...logged, reason }, 'request refused by Host/Origin check');
    return errorResponse(null, { code: ErrorCode.InvalidRequest, message: `Forbidden: ${reason}` }, 403, headers);
  };
  const cors = corsMiddleware(guard, (c, reason) => forbidden(reason, { preflight: true }));
  const servedPaths = () => [...(federation ? ['/mcp'] : []), ...[...gateway.upstreams.keys()].map((n) => `/mcp/${n}`)];
  const unknownPaths = new UnknownPaths(log, servedPaths);
  app.use('*', async (c, next) => {
    await next();
    if (c.get('unknownPath')) unknownPaths.note(c.req.method, c.req.path);
  });
  app.use('/mcp/:name', cors);
  app.use('/mcp/:name/sse', cors);
  app.use('/mcp/:name/message', cors);
  app.use('/.well-known/oauth-protected-resource/mcp/:name', cors);
  if (federation) {
    app.use('/mcp', cors);
    app.use('/.well-known/oauth-protected-resource/mcp', cors);
  }

  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.get('/readyz', async (c) => {
    const r = await gateway.readiness();
    return c.json({ ...r, ...(draining ? { ready: false, reason: 'shutting down' } : {}) }, r.ready && !draining ? 200 : 503);
  });
  app.get('/metrics', async () => {
    const { body, contentType } = await gateway.metrics.render();
    return new Response(body, { headers: { 'content-type': contentType } });
  });
  // The metadata names URLs built from Host when http.publicUrl is not set: only an allowed Host
  // gets it, so a forged Host cannot make the gateway advertise another resource.
  const metadataHost: MiddlewareHandler = async (c, next) => {
    const refused = guard.check(headerOf(c, 'host'), undefined);
    if (refused) return forbidden(refused, {}, { vary: 'Host' });
    await next();
    // Whether the answer is the metadata or a 403 depends on Host, whatever publicUrl says.
    c.header('vary', 'Host', { append: true });
  };
  app.use('/.well-known/oauth-protected-resource/mcp/:name', metadataHost);
  if (federation) app.use('/.well-known/oauth-protected-resource/mcp', metadataHost);
  app.get('/.well-known/oauth-protected-resource/mcp/:name', (c) => {
    const name = c.req.param('name');
    if (!gateway.upstreams.has(name)) return unknownUpstream(c, gateway, name, null);
    return c.json({
      resource: `${baseUrl(c)}/mcp/${name}`,
      ...(auth.authorizationServers.length ? { authorization_servers: auth.authorizationServers } : {}),
      bearer_methods_supported: ['header'],
      ...(auth.scopes.length ? { scopes_supported: auth.scopes } : {}),
      resource_name: `mrtr-gateway upstream ${name}`,
    });
  });
  if (federation) {
    app.get('/.well-known/oauth-protected-resource/mcp', (c) =>
      c.json({
        resource: `${baseUrl(c)}/mcp`,
        ...(auth.authorizationServers.length ? { authorization_servers: auth.authorizationServers } : {}),
        bearer_methods_supported: ['header'],
        ...(auth.scopes.length ? { scopes_supported: auth.scopes } : {}),
        resource_name: 'mrtr-gateway federated upstreams',
      }),
    );
  }

  const frontDoor: MiddlewareHandler<{ Variables: RequestVars; Bindings: HttpBindings }> = async (c, next) => {
    const given = headerOf(c, 'x-request-id');
    const requestId = given !== undefined && /^[\w.:-]{1,128}$/.test(given) ? given : uniqueId();
    // During the drain only what may resume work held here goes on (the router decides from the body).
    if (draining && !(c.req.method === 'POST' && DRAIN_METHODS.has(headerOf(c, 'mcp-method') ?? ''))) return refuseDraining(requestId);
    const refused = guard.check(headerOf(c, 'host'), headerOf(c, 'origin'));
    if (refused) return forbidden(refused, { requestId }, { 'x-request-id': requestId });
    // Undefined on the federated endpoint.
    const name = c.req.param('name');
    let caller: Caller;
    try {
      const found = auth.authenticate(headerOf(c, 'authorization'));
      caller = found instanceof Promise ? await found : found;
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
    const key = limitKey(c, caller);
    const wait = limiter.take(key);
    if (wait > 0) {
      gateway.metrics.rateLimited.inc({ limit: 'rate' });
      return errorResponse(null, { code: ErrorCode.InvalidRequest, message: `Rate limit exceeded; retry after ${wait} s` }, 429, {
        'retry-after': String(wait),
        'x-request-id': requestId,
      });
    }
    const leave = limiter.enter(key);
    if (!leave) {
      gateway.metrics.rateLimited.inc({ limit: 'concurrency' });
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
  app.use('/mcp/:name', frontDoor);
  app.use('/mcp/:name/sse', frontDoor);
  app.use('/mcp/:name/message', frontDoor);
  if (federation) app.use('/mcp', frontDoor);

  app.post('/mcp/:name', (c) =>
    handleMcp(c, gateway, log, c.get('caller'), c.get('requestId'), trackIn(c), (era, body) => {
      const sessionId = c.req.header('mcp-session-id');
      if (era === 'legacy-initialize') return legacy.initialize(c.req.param('name')!, sessionCaller(c), withMcpAccept(c.req.raw), body);
      if (!sessionId)
        return errorResponse(null, { code: ErrorCode.ServerError, message: 'Bad Request: Mcp-Session-Id header is required' }, 400);
      return legacy.handle(c.req.param('name')!, sessionCaller(c), sessionId, withMcpAccept(c.req.raw), body);
    }),
  );
  if (federation) {
    app.post('/mcp', (c) =>
      handleMcp(
        c,
        gateway,
        log,
        c.get('caller'),
        c.get('requestId'),
        trackIn(c),
        (era, body) => {
          const sessionId = c.req.header('mcp-session-id');
          if (era === 'legacy-initialize') return legacy.initialize(FEDERATED_LABEL, sessionCaller(c), withMcpAccept(c.req.raw), body);
          if (!sessionId)
            return errorResponse(null, { code: ErrorCode.ServerError, message: 'Bad Request: Mcp-Session-Id header is required' }, 400);
          return legacy.handle(FEDERATED_LABEL, sessionCaller(c), sessionId, withMcpAccept(c.req.raw), body);
        },
        undefined,
        federation,
      ),
    );
    // A legacy session's standalone SSE stream (GET) and its end (DELETE); without a session, 405.
    app.all('/mcp', (c) => {
      const sessionId = c.req.header('mcp-session-id');
      if (sessionId && (c.req.method === 'GET' || c.req.method === 'DELETE'))
        return legacy.handle(FEDERATED_LABEL, sessionCaller(c), sessionId, c.req.raw);
      return methodNotAllowed(c.req.method, '/mcp');
    });
  }
  // A legacy session's standalone SSE stream (GET) and its end (DELETE).
  app.on(['GET', 'DELETE'], '/mcp/:name', async (c, next) => {
    const sessionId = c.req.header('mcp-session-id');
    if (!sessionId || !gateway.upstreams.has(c.req.param('name'))) return next();
    return legacy.handle(c.req.param('name'), sessionCaller(c), sessionId, c.req.raw);
  });
  // The internal hop of replicas sharing a store: a request another replica authenticated, for a call held here.
  const forwardedIn = async (c: Context<{ Variables: RequestVars; Bindings: HttpBindings }>) => {
    const principal = forwardedPrincipal(c.req.header(PRINCIPAL_HEADER));
    if (!secretMatches(cfg.replicas.secret, c.req.header(SECRET_HEADER)) || principal === undefined) return c.notFound();
    const auth = c.req.header('authorization');
    const token = auth && /^Bearer /i.test(auth) ? auth.replace(/^Bearer\s+/i, '') : undefined;
    const requestId = /^[\w.:-]{1,128}$/.test(c.req.header('x-request-id') ?? '') ? c.req.header('x-request-id')! : uniqueId();
    const upstream = c.req.param('name');
    // Only what forwarding exists for, for the principal the state or task belongs to.
    const refuse = (reason: HopRefusalReason, method: string | undefined) => {
      gateway.metrics.forwardRefused.inc({ reason });
      log.warn(
        { requestId, upstream: upstream ?? FEDERATED_LABEL, method: quoted(method), principal: principalHash(principal), reason },
        'forwarded request refused by the internal hop',
      );
    };
    const admit: HopGate = async (method, params) => {
      const refused = await hopRefusal(
        { replica: gateway.replica, sealer: gateway.sealer, tasks: gateway.store.tasks },
        upstream,
        method,
        params,
        principal,
      );
      if (!refused) return undefined;
      refuse(refused.reason, method);
      return refused.error;
    };
    return handleMcp(
      c,
      gateway,
      log,
      { principal, token },
      requestId,
      trackIn(),
      // A legacy session request (initialize, a batch, a session's request) is never forwarded.
      (_era, body) => {
        refuse('method', (body as { method?: string } | undefined)?.method);
        return errorResponse(
          null,
          {
            code: ErrorCode.InvalidRequest,
            message: 'Forbidden: the internal hop takes no legacy session requests; legacy sessions are not forwarded between replicas',
          },
          403,
        );
      },
      admit,
      federation,
    );
  };
  app.post(`${FORWARD_PREFIX}:name`, forwardedIn);
  if (federation) app.post(FORWARD_FEDERATED, forwardedIn);

  // The old HTTP+SSE transport (2024-11-05) for clients that speak only that.
  app.get('/mcp/:name/sse', async (c) => {
    if (!gateway.upstreams.has(c.req.param('name'))) return unknownUpstream(c, gateway, c.req.param('name'), null);
    return (await legacy.openSse(c.req.param('name'), sessionCaller(c), c.env.outgoing)) ?? RESPONSE_ALREADY_SENT;
  });
  app.post('/mcp/:name/message', async (c) => {
    if (!gateway.upstreams.has(c.req.param('name'))) return unknownUpstream(c, gateway, c.req.param('name'), null);
    const read = await readBody(c, maxBody);
    const refused = bodyNotRead(read, maxBody) ?? mediaRefused(c, { accept: false });
    if (refused) return refused;
    const parsed = jsonBody(read, cfg.limits.maxJsonDepth);
    if (parsed instanceof Response) return parsed;
    return legacy.postSse(c.req.param('name'), sessionCaller(c), c.req.query('sessionId') ?? '', c.env.incoming.headers, parsed.body);
  });
  /** Any other method on an HTTP+SSE path of a configured upstream: 405 with `Allow: allow`. */
  const onlyMethod = (allow: string, hint: string) => (c: Context) =>
    gateway.upstreams.has(c.req.param('name')!)
      ? methodNotAllowed(c.req.method, c.req.path, allow, `${c.req.method} is not supported on ${c.req.path}; ${hint}`)
      : unknownUpstream(c, gateway, c.req.param('name')!, null);
  app.all(
    '/mcp/:name/message',
    onlyMethod('POST', "the HTTP+SSE transport (2024-11-05) takes the client's messages as POST to the endpoint its SSE stream names"),
  );
  app.all(
    '/mcp/:name/sse',
    onlyMethod('GET', 'open the HTTP+SSE stream (2024-11-05) with GET, then POST messages to the endpoint it names'),
  );
  app.all('/mcp/:name', (c) =>
    gateway.upstreams.has(c.req.param('name'))
      ? methodNotAllowed(c.req.method, c.req.path)
      : unknownUpstream(c, gateway, c.req.param('name'), null),
  );
  if (cfg.admin.enabled) app.route('/admin', adminApp(gateway, legacy, auth, guard, log));
  // Operations endpoints answer GET (and HEAD) only.
  for (const path of ['/healthz', '/readyz', '/metrics']) {
    app.all(path, (c) =>
      errorResponse(null, { code: ErrorCode.MethodNotFound, message: `${c.req.method} is not supported on ${path}; use GET` }, 405, {
        allow: 'GET, HEAD',
      }),
    );
  }
  app.notFound((c) => {
    c.set('unknownPath', true);
    const names = servedPaths().join(', ');
    const adminOff =
      !cfg.admin.enabled && (c.req.path === '/admin' || c.req.path.startsWith('/admin/'))
        ? ' (the admin page is off: set admin.enabled to true to serve it)'
        : '';
    // The upstreams' names are told only to a request for an allowed Host (not to a rebound name).
    const served = guard.check(headerOf(c, 'host'), undefined) === undefined ? `; this gateway serves ${names}` : '';
    return errorResponse(
      null,
      { code: ErrorCode.MethodNotFound, message: `No endpoint at ${quoted(c.req.path)}${adminOff}${served}` },
      404,
    );
  });
  app.onError((e, c) => {
    if (uploadBroken(c)) {
      // Usually nobody is left to read this answer; when someone is, it is a client error.
      log.debug({ err: (e as Error).message }, 'request body not received');
      return errorResponse(null, { code: ErrorCode.InvalidRequest, message: 'The request body could not be read' }, 400);
    }
    const g = asGatewayError(e, log);
    return errorResponse(null, g.toJSON(), g.httpStatus);
  });

  const settle = async (ms: number) => {
    const deadline = Date.now() + ms;
    while (inflight.size && Date.now() < deadline) {
      await Promise.race([Promise.all([...inflight]), new Promise((r) => setTimeout(r, Math.max(0, deadline - Date.now())))]);
    }
    return inflight.size;
  };
  return {
    app,
    legacy,
    federation,
    settle,
    drain: async (graceMs) => {
      draining = true;
      gateway.drain();
      // Parked calls and tasks held here are work in flight too: their retries may still come.
      const deadline = Date.now() + graceMs;
      while ((inflight.size || gateway.heldWork) && Date.now() < deadline) {
        // Polled: held work ends without a promise to wait on.
        const tick = new Promise((r) => setTimeout(r, Math.min(50, Math.max(0, deadline - Date.now()))));
        await (inflight.size ? Promise.race([Promise.all([...inflight]), tick]) : tick);
      }
      return inflight.size + gateway.heldWork;
    },
  };
}

/** Methods (by the `Mcp-Method` header) that may resume work held here, so the drain lets them reach the router. */
const DRAIN_METHODS = new Set(['tools/call', 'prompts/get', 'resources/read', 'tasks/get', 'tasks/update', 'tasks/cancel']);

/** The header that ends the connection after the response: every 503 of the drain carries it, so clients reconnect elsewhere. */
const CLOSE = { connection: 'close' } as const;

/**
 * 503 / -32603 "gateway shutting down" with `Connection: close`: the answer to new work during the
 * drain, with the request's JSON-RPC `id` when the body was read (else null).
 */
function refuseDraining(requestId: string, id: RequestId | null = null): Response {
  return errorResponse(id, { code: ErrorCode.InternalError, message: 'gateway shutting down' }, 503, {
    ...CLOSE,
    'x-request-id': requestId,
  });
}

/** What the request log line and the metrics need to know about one request. */
interface RequestLog {
  log: Logger;
  gateway: Gateway;
  requestId: string;
  upstream: string;
  principal: string;
  started: number;
  timing: { upstreamMs: number };
  /** The request's span, while tracing. */
  trace?: Traced;
}

/** The `data.reason` of a gateway error (`cancelled`, `timeout`, `busy` …), for the request log line. */
function reasonOf(e: GatewayError | undefined): string | undefined {
  const reason = (e?.data as { reason?: unknown } | undefined)?.reason;
  return typeof reason === 'string' ? reason : undefined;
}

function record(r: RequestLog, method: string, name: string | undefined, outcome: { error?: GatewayError; resultType?: string }): void {
  const totalMs = performance.now() - r.started;
  const durationMs = Math.round(totalMs * 10) / 10;
  const upstreamMs = Math.round(r.timing.upstreamMs * 10) / 10;
  const result = outcome.error ? 'error' : (outcome.resultType ?? 'complete');
  if (r.log.isLevelEnabled('info')) {
    r.log.info(
      {
        requestId: r.requestId,
        upstream: r.upstream,
        method: quoted(method),
        name: quoted(name),
        principal: principalHash(r.principal),
        durationMs,
        upstreamMs,
        outcome: result,
        code: outcome.error?.code,
        reason: reasonOf(outcome.error),
        ...traceIds(r.trace),
      },
      'request',
    );
  }
  const known = (SERVED_METHODS as readonly string[]).includes(method) ? method : 'other';
  r.gateway.metrics.observeRequest(
    r.upstream,
    known,
    outcome.error ? String(outcome.error.code) : result,
    r.timing.upstreamMs / 1000,
    Math.max(0, totalMs - r.timing.upstreamMs) / 1000,
  );
}

/** Who serves the MCP requests of a route: one upstream's router, or the federation layer. */
interface McpTarget {
  /** `upstream` in the request log line and the metrics: the upstream's name, or `*` on the federated endpoint. */
  label: string;
  /** The upstream in the path of the internal hop to another replica; undefined on the federated endpoint. */
  upstream: string | undefined;
  handle(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>>;
  listen(req: ValidatedRequest, who: { principal: string; token?: string }): Promise<ListenHandle>;
}

/** The target of `/mcp/NAME` (undefined for an unknown upstream), or of the federated `/mcp` (name undefined). */
function targetOf(gateway: Gateway, federation: Federation | undefined, name: string | undefined): McpTarget | undefined {
  if (name === undefined) {
    return (
      federation && {
        label: FEDERATED_LABEL,
        upstream: undefined,
        handle: (req, ctx) => federation.handle(req, ctx),
        listen: (req, who) => federation.listen(req, who),
      }
    );
  }
  if (!gateway.upstreams.has(name)) return undefined;
  return {
    label: name,
    upstream: name,
    handle: (req, ctx) => gateway.handle(name, req, ctx),
    listen: (req, who) => gateway.listen(name, req, who),
  };
}

async function handleMcp(
  c: Context,
  gateway: Gateway,
  log: Logger,
  caller: Caller,
  requestId: string,
  track: WorkTracker,
  legacy: (era: Exclude<Era, 'modern'>, body: unknown) => Response | Promise<Response>,
  hop?: HopGate,
  federation?: Federation,
): Promise<Response> {
  // A request that came over the internal hop is never forwarded again.
  const forwarded = hop !== undefined;
  // Undefined on the federated endpoint.
  const name: string | undefined = c.req.param('name');
  const target = targetOf(gateway, federation, name);
  const rl: RequestLog = {
    log,
    gateway,
    requestId,
    upstream: target?.label ?? name ?? FEDERATED_LABEL,
    principal: caller.principal,
    started: performance.now(),
    timing: { upstreamMs: 0 },
  };
  const maxBody = gateway.cfg.limits.maxBodyBytes;
  const pendingRead = readBody(c, maxBody);
  const read = pendingRead instanceof Promise ? await pendingRead : pendingRead;
  if ('broken' in read) log.debug({ requestId, err: read.broken.message }, 'request body not received');
  const unread = bodyNotRead(read, maxBody);
  if (unread) return unread;
  if (!target) {
    let id: RequestId | null = null;
    if ('text' in read) {
      try {
        id = idOf(JSON.parse(read.text));
      } catch {
        // No usable id.
      }
    }
    return unknownUpstream(c, gateway, name ?? '', id);
  }
  const refused = mediaRefused(c);
  if (refused) return refused;
  const parsed = jsonBody(read, gateway.cfg.limits.maxJsonDepth);
  if (parsed instanceof Response) return parsed;
  const { body, text } = parsed;
  const id = idOf(body);
  const era = eraOf(body, headerOf(c, 'mcp-session-id'));
  if (era !== 'modern' && gateway.isDraining) return refuseDraining(requestId, id);
  if (era !== 'modern') return legacy(era, body);
  let rpc;
  try {
    rpc = parseJsonRpc(body);
  } catch (e) {
    const g = asGatewayError(e, log);
    return errorResponse(id, g.toJSON(), g.httpStatus);
  }
  if (hop) {
    let refused: GatewayError | undefined;
    try {
      refused = await hop(rpc.method, rpc.params as Record<string, unknown> | undefined);
    } catch (e) {
      refused = asGatewayError(e, log);
    }
    if (refused) return errorResponse(rpc.id ?? null, refused.toJSON(), refused.httpStatus);
  }
  if (rpc.id === undefined) {
    // Notifications carry nothing the gateway acts on over HTTP (cancellation is closing the stream).
    return new Response(null, { status: 202 });
  }
  const reqId = rpc.id;
  if (tracingActive()) rl.trace = serverSpanOf(c, rpc, target.label);
  let validated;
  try {
    validated = validateRequest({ ...rpc, id: reqId }, requestHeaders(c));
  } catch (e) {
    const g = asGatewayError(e, log);
    record(rl, rpc.method, undefined, { error: g });
    endSpan(rl.trace, { error: g });
    return errorResponse(reqId, g.toJSON(), g.httpStatus);
  }

  if (validated.method === 'subscriptions/listen') {
    // The internal hop between replicas counts nothing here: the replica the client reached did.
    const enter = c.get('enterListen') as RequestVars['enterListen'] | undefined;
    const leave = enter ? enter() : () => {};
    if (!leave) {
      const max = gateway.cfg.limits.maxListensPerPrincipal;
      const g = new GatewayError(
        ErrorCode.InvalidRequest,
        `Too many subscriptions/listen streams open for this caller (limit ${max}, limits.maxListensPerPrincipal); close one first`,
        undefined,
        429,
      );
      gateway.metrics.rateLimited.inc({ limit: 'listens' });
      record(rl, 'subscriptions/listen', undefined, { error: g });
      endSpan(rl.trace, { error: g });
      return errorResponse(reqId, g.toJSON(), 429, { 'retry-after': '1' });
    }
    return within(rl.trace, () =>
      serveListen(
        c,
        () => target.listen(validated, { principal: caller.principal, token: caller.token }),
        validated,
        log,
        (outcome) => {
          record(rl, 'subscriptions/listen', undefined, outcome);
          endSpan(rl.trace, outcome.error ? { error: outcome.error } : { result: { resultType: outcome.resultType ?? 'complete' } });
        },
        leave,
      ),
    );
  }

  const progressToken = validated.progressToken;
  // The client accepts SSE (checked above): progress goes on an SSE stream when it sent a progressToken,
  // and so do the log messages of the request (2026-07-28 `_meta` logLevel).
  const wantsSse = progressToken !== undefined;
  const wantsLogs = validated.meta[META_LOG_LEVEL] !== undefined;
  const callName = (validated.params.name ?? validated.params.uri) as string | undefined;

  return new Promise<Response>((resolveResponse) => {
    const connection = new ClientConnection();
    // The client went away: the response closed before it was finished. The listener goes when the
    // call ends (the connection can outlive the request, with keep-alive).
    const stopWatching = onClientGone(c, () => connection.close());
    let sse: SseStream | undefined;
    const stream = (message: unknown) => {
      if (!sse) {
        sse = sseStream();
        sse.closed.catch(() => connection.close());
        resolveResponse(sse.response);
      }
      sse.send(message).catch(() => connection.close());
    };
    const onProgress = wantsSse
      ? (p: ProgressParams) => stream({ jsonrpc: '2.0', method: 'notifications/progress', params: { ...p, progressToken } })
      : undefined;
    const onNotification = wantsLogs
      ? (n: { method: string; params?: Record<string, unknown> }) => {
          if (n.method === 'notifications/message') stream({ jsonrpc: '2.0', method: n.method, params: n.params ?? {} });
        }
      : undefined;

    const failed = (e: unknown): Answer => {
      const g = asGatewayError(e, log);
      record(rl, validated.method, callName, { error: g });
      endSpan(rl.trace, { error: g });
      return { message: { jsonrpc: '2.0', id: reqId, error: g.toJSON() }, status: g.httpStatus };
    };
    // Settles with the answer, never rejects.
    const work: Promise<Answer> = within(rl.trace, () =>
      target.handle(validated, {
        principal: caller.principal,
        token: caller.token,
        connection,
        onProgress,
        onNotification,
        timing: rl.timing,
        paramHeaders: validated.paramHeaders,
      }),
    ).then(
      (result): Answer => {
        record(rl, validated.method, callName, { resultType: result.resultType as string });
        endSpan(rl.trace, { result });
        return { message: { jsonrpc: '2.0', id: reqId, result }, status: 200 };
      },
      (e): Answer | Promise<Answer> => {
        if (!(e instanceof HeldElsewhere)) return failed(e);
        // The call lives on another replica: it answers, over the internal hop.
        const held = e;
        return (
          forwarded
            ? Promise.resolve(undefined)
            : within(rl.trace, () => forwardHeld(gateway, held.replica, target.upstream, text, c.req.raw.headers, caller.principal))
        ).then((relayed): Answer => {
          if (relayed) {
            record(rl, validated.method, callName, { resultType: 'forwarded' });
            endSpan(rl.trace, { forwarded: relayed.status });
            gateway.metrics.forwarded.inc({ outcome: String(relayed.status) });
            return { forwarded: relayed, message: undefined, status: relayed.status };
          }
          gateway.metrics.forwarded.inc({ outcome: 'replica-gone' });
          return failed(
            upstreamFailed(
              target.label,
              'replica-gone',
              'The replica holding this call stopped; start the call again without requestState',
            ),
          );
        }, failed);
      },
    );
    const ended = track(work);
    void work.then((done) => {
      stopWatching();
      ended(sse !== undefined);
      if (done.forwarded) return resolveResponse(done.forwarded);
      if (sse) sse.send(done.message).then(sse.end, () => {});
      else
        resolveResponse(
          new Response(JSON.stringify(done.message), {
            status: done.status,
            headers: responseHeadersFor(c, done.status === 503 && gateway.isDraining ? { ...jsonHeaders, ...CLOSE } : jsonHeaders),
          }),
        );
    });
  });
}

/**
 * The check of a request that came over the internal hop, by its method and raw params: undefined
 * when it may be served, else the error to answer (see `hopRefusal`).
 */
type HopGate = (method: string, params: Record<string, unknown> | undefined) => Promise<GatewayError | undefined>;

/** The answer to a 2026-07-28 request: a JSON-RPC message and its HTTP status, or the response another replica gave. */
interface Answer {
  message: unknown;
  status: number;
  forwarded?: Response;
}

/**
 * Registers the work of one request (a promise that never rejects) as in flight; returns the
 * function to call when it has ended, saying whether its answer was streamed (the response went
 * out before the work ended).
 */
type WorkTracker = (work: Promise<unknown>) => (streamed: boolean) => void;

/**
 * Calls `gone` when the client closes the connection before its response is finished (at once when it
 * has already); returns the function that stops watching. On @hono/node-server it watches the Node
 * response (cheap); else the request's abort signal.
 */
function onClientGone(c: Context, gone: () => void): () => void {
  const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
  if (outgoing) {
    const closed = () => {
      if (!outgoing.writableFinished) gone();
    };
    // Closed already (while the token was checked or the body read): 'close' will not come again.
    if (outgoing.destroyed) {
      closed();
      return () => {};
    }
    outgoing.once('close', closed);
    return () => void outgoing.off('close', closed);
  }
  const signal = c.req.raw.signal;
  if (signal.aborted) {
    gone();
    return () => {};
  }
  signal.addEventListener('abort', gone, { once: true });
  return () => signal.removeEventListener('abort', gone);
}

/**
 * Forwards a request to the live replica `replica` (for upstream `name`, or the federated endpoint).
 * @returns the owner's response, or undefined when it is gone (no heartbeat, or unreachable).
 * @throws StoreUnavailable when the registry cannot be read: whether the owner lives is not known,
 *   and the call may well still be held there (-32603 `store-unavailable`, not `replica-gone`).
 */
async function forwardHeld(
  gateway: Gateway,
  replica: string,
  name: string | undefined,
  body: string,
  headers: Headers,
  principal: string,
): Promise<Response | undefined> {
  const secret = gateway.cfg.replicas.secret;
  const owner = secret ? await gateway.replicaInfo(replica) : undefined;
  if (!owner || !secret || owner.id === gateway.replica) return undefined;
  return forwardToReplica(owner, name, body, headers, principal, secret);
}

/**
 * 405 / -32601 with `Allow: allow` for a method the MCP endpoint `path` does not serve. The default
 * message is that of `/mcp/NAME`: GET and DELETE need a legacy session's `Mcp-Session-Id`; any
 * other method is not served at all.
 */
function methodNotAllowed(method: string, path: string, allow = 'POST', message?: string): Response {
  message ??=
    method === 'GET' || method === 'DELETE'
      ? `${method} on ${path} needs the Mcp-Session-Id of a legacy session; MCP 2026-07-28 uses POST only`
      : `${method} is not supported on ${path}; it serves POST, and GET and DELETE within a legacy session (Mcp-Session-Id)`;
  return errorResponse(null, { code: ErrorCode.MethodNotFound, message }, 405, { allow });
}

/** 413 / -32600 for a body past `maxBodyBytes`, 400 / -32600 for one that could not be read (the client went away or stalled); else undefined. */
function bodyNotRead(read: BodyRead, maxBody: number): Response | undefined {
  if ('tooLarge' in read)
    return errorResponse(null, { code: ErrorCode.InvalidRequest, message: `Request body exceeds the limit of ${maxBody} bytes` }, 413, {
      connection: 'close',
    });
  if ('broken' in read) return errorResponse(null, { code: ErrorCode.InvalidRequest, message: 'The request body could not be read' }, 400);
  return undefined;
}

/** The 415 / 406 (-32000) of {@link checkPostMedia} for `c`'s headers, or undefined when they pass. */
function mediaRefused(c: Context, opts?: { accept?: boolean }): Response | undefined {
  const refused = checkPostMedia(
    { accept: headerOf(c, 'accept'), contentType: headerOf(c, 'content-type'), contentEncoding: headerOf(c, 'content-encoding') },
    opts,
  );
  return refused && errorResponse(null, { code: ErrorCode.ServerError, message: refused.message }, refused.status, refused.headers);
}

/**
 * The JSON value of an MCP POST body whose size and media type passed their checks, and its text.
 * @returns the value, or the refusal: 400 / -32700 when the body is not UTF-8 or not JSON, 400 /
 *   -32600 (with the body's `id`) when it nests arrays and objects deeper than `maxDepth`
 *   (`limits.maxJsonDepth`).
 */
function jsonBody(read: BodyRead, maxDepth: number): { body: unknown; text: string } | Response {
  // What is left once bodyNotRead passed the read: text, or bytes that are not UTF-8.
  if (!('text' in read)) {
    return errorResponse(
      null,
      { code: ErrorCode.ParseError, message: 'Parse error: the body is not valid UTF-8 (JSON must be UTF-8 encoded)' },
      400,
    );
  }
  let body: unknown;
  try {
    body = JSON.parse(read.text);
  } catch (e) {
    return errorResponse(
      null,
      { code: ErrorCode.ParseError, message: `Parse error: the body is not valid JSON (${(e as Error).message})` },
      400,
    );
  }
  if (deeperThan(body, maxDepth)) {
    return errorResponse(
      idOf(body),
      { code: ErrorCode.InvalidRequest, message: `The body nests deeper than limits.maxJsonDepth=${maxDepth}` },
      400,
    );
  }
  return { body, text: read.text };
}

function unknownUpstream(c: Context, gateway: Gateway, name: string, id: RequestId | null): Response {
  c.set('unknownPath', true);
  const err = methodNotFound(`Unknown upstream '${quoted(name)}'; this gateway serves: ${[...gateway.upstreams.keys()].join(', ')}`);
  return errorResponse(id, err.toJSON(), 404);
}
