/**
 * The HTTP front door: MCP 2026-07-28 Streamable HTTP, POST only, one endpoint per upstream at
 * `POST /mcp/NAME`, and with `federation.enabled` the federated endpoint `POST /mcp`, served by the
 * federation layer (src/federation/federation.ts) in front of the same router. It talks to the
 * router only through {@link McpRouter} (src/http/router-port.ts); everything else it uses comes
 * in {@link AppDeps}. `createApp` wires the routes, each module of src/http/routes/ registering its
 * own: the MCP endpoints (routes/mcp.ts, served by src/http/mcp-request.ts), the legacy clients'
 * endpoints (routes/legacy.ts), the protected resource metadata (routes/metadata.ts), the
 * operations endpoints (routes/operations.ts), the internal hop of replicas (routes/replica-hop.ts),
 * the consent and grant routes of per-user credentials (routes/credentials.ts) and the admin
 * endpoints (routes/admin.ts). The middleware in front of the MCP endpoints is in
 * src/http/admission.ts; what the routes share is the {@link Door} (src/http/door.ts).
 */
import { Hono, type Context } from 'hono';
import type { IncomingMessage } from 'node:http';
import type { GatewayConfig } from '../config/schema.js';
import type { MrtrBridge } from '../cells/bridge/mrtr.js';
import type { TaskManager } from '../cells/bridge/tasks/manager.js';
import { ErrorCode, quoted } from '../protocol/errors.js';
import type { Census } from '../observability/census.js';
import type { DroppedEntries } from '../observability/dropped.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import type { Sampler } from '../sampling/sampler.js';
import type { Authenticator, Caller } from '../security/auth.js';
import type { Federation } from '../federation/federation.js';
import { admission } from './admission.js';
import { corsMiddleware } from './cors.js';
import { AuditLog } from '../observability/audit.js';
import { clientAddress, type AppEnv, type Door, type Readiness } from './door.js';
import type { LocalSlots } from '../store/limiters.js';
import type { CallerLimiter, CallerLimits, OriginGuard } from './frontdoor.js';
import type { UpstreamLimits } from './upstream-limits.js';
import { headerOf } from './headers.js';
import type { LegacySessions } from './legacy-sessions.js';
import { asGatewayError } from './refusals.js';
import type { HopHolder } from './replicas.js';
import type { McpRouter } from './router-port.js';
import { adminApp } from './routes/admin.js';
import { credentialRoutes, type CredentialRoutesPort } from './routes/credentials.js';
import { legacyRoutes } from './routes/legacy.js';
import { mcpMethodFallback, mcpRoutes } from './routes/mcp.js';
import { metadataRoutes } from './routes/metadata.js';
import { operationsRoutes } from './routes/operations.js';
import { replicaHopRoutes } from './routes/replica-hop.js';
import { errorResponse } from './sse.js';
import { UnknownPaths } from './unknown-paths.js';

/**
 * What the front door is built from, every part already built (src/wiring.ts builds them once):
 * the router (through {@link McpRouter}), the config, the logger, the lower-layer objects it reads,
 * and the front door's own long-lived parts. `createApp` constructs nothing long-lived.
 */
export interface AppDeps {
  router: McpRouter;
  cfg: GatewayConfig;
  log: Logger;
  metrics: Metrics;
  /** The federation layer behind `POST /mcp`: given when `federation.enabled`, else undefined. */
  federation: Federation | undefined;
  /** For the relays of legacy sessions: the deprecation census and the sampler of upstreams' sampling requests. */
  census: Census;
  sampler: Sampler;
  /** What the internal hop checks a forwarded request against: this replica's id, the requestState sealer, the task records. */
  hop: HopHolder;
  /** What the admin page shows besides the upstreams and legacy sessions. */
  storeKind: 'memory' | 'redis';
  parked: Pick<MrtrBridge, 'parkedByUpstream' | 'parkedCalls'>;
  tasks: Pick<TaskManager, 'statusCounts' | 'runningTasks'>;
  dropped: Pick<DroppedEntries, 'snapshot'>;
  /** Checks the callers' credentials (`auth`); the admin endpoints use the same. */
  auth: Authenticator;
  /** The Host/Origin check (`http.allowedHosts`, `http.allowedOrigins`). */
  guard: OriginGuard;
  /** How callers are told apart for the limits: by principal, or by client address. */
  limits: CallerLimits;
  /** Rate and concurrency limits per caller (`limits.rateLimit`, `maxConcurrentPerPrincipal`). */
  limiter: CallerLimiter;
  /** Open `subscriptions/listen` streams per caller (`limits.maxListensPerPrincipal`), per replica. */
  listens: LocalSlots;
  /** Per-caller rate limits of each upstream and its tools (`upstreams.NAME.limits`). */
  upstreamLimits: UpstreamLimits;
  /** The sessions of legacy clients. */
  legacy: LegacySessions;
  /** The consent routes and the callers' own grants: given when an upstream uses `credentials.mode: "oauth"`. */
  credentials?: CredentialRoutesPort;
  /** True once the gateway drains (the one drain flag): new MCP work gets 503 / -32603 "gateway shutting down". */
  draining(): boolean;
  /** What `GET /readyz` reports (before the drain's own "shutting down"). */
  readiness(): Promise<Readiness>;
  /** The audit trail: the front door writes the lines of requests a limit refused (429). Default: none. */
  audit?: AuditLog;
}

/** The HTTP front door. */
export interface FrontDoor {
  app: Hono<AppEnv>;
  /**
   * Waits up to `ms` for requests in flight, and for `held()` (work held elsewhere that a retry may
   * still need: parked calls, tasks) to reach 0. Resolves with how many are still in flight or held.
   */
  settle(ms: number, held?: () => number): Promise<number>;
}

/** The {@link Door} of `deps`: its parts and the helpers the routes share. */
function doorOf(deps: AppDeps): Door {
  const { router, cfg, log, federation, limits } = deps;
  const limitKey = (c: Context, caller: Caller) => (limits.keyedBy === 'principal' ? caller.principal : `address:${clientAddress(c)}`);
  const baseUrl = (c: Context) =>
    cfg.http.publicUrl?.replace(/\/$/, '') ??
    `${new URL(c.req.url).protocol}//${c.req.header('host') ?? `${cfg.listen.host}:${cfg.listen.port}`}`;
  return {
    router,
    cfg,
    log,
    metrics: deps.metrics,
    audit: deps.audit ?? AuditLog.off,
    federation,
    auth: deps.auth,
    guard: deps.guard,
    legacy: deps.legacy,
    hop: deps.hop,
    limiter: deps.limiter,
    listens: deps.listens,
    upstreamLimits: deps.upstreamLimits,
    inflight: new Set(),
    draining: deps.draining,
    readiness: deps.readiness,
    limitKey,
    sessionCaller: (c) => ({ ...c.get('caller'), owner: limitKey(c, c.get('caller')), requestId: c.get('requestId') }),
    baseUrl,
    metadataUrl: (c, name) => `${baseUrl(c)}/.well-known/oauth-protected-resource/mcp${name === undefined ? '' : `/${name}`}`,
    forbidden: (reason, logged, headers) => {
      log.warn({ ...logged, reason }, 'request refused by Host/Origin check');
      return errorResponse(null, { code: ErrorCode.InvalidRequest, message: `Forbidden: ${reason}` }, 403, headers);
    },
    servedPaths: () => [...(federation ? ['/mcp'] : []), ...[...router.upstreams.keys()].map((n) => `/mcp/${n}`)],
  };
}

/**
 * Builds the front door. Routes:
 * - `POST /mcp/:name`: MCP 2026-07-28 (Host/Origin check → auth → rate and concurrency limits →
 *   body limit → JSON-RPC). Other methods on it: 405 with `Allow: POST`, except CORS preflights
 *   (`OPTIONS`): 204 for an allowed origin, 403 otherwise (see `corsMiddleware`).
 * - `POST /mcp` (with `federation.enabled`): the same for the federated upstreams together, for
 *   2026-07-28 clients and for legacy Streamable HTTP clients (`initialize`, then `Mcp-Session-Id`;
 *   GET and DELETE with it). The old HTTP+SSE transport is served per upstream only.
 * - `GET /.well-known/oauth-protected-resource/mcp/:name` (and `/mcp` with federation): RFC 9728
 *   protected resource metadata (with CORS headers for allowed origins; 403 for a Host not allowed).
 * - `GET /healthz`, `GET /readyz`, `GET /metrics` (Prometheus text).
 * - with an `oauth` upstream: `GET /oauth/start`, `GET /oauth/callback`, `GET /oauth/grants`,
 *   `DELETE /oauth/grants/NAME` (src/http/routes/credentials.ts).
 * - with `admin.enabled`: `GET /admin` and `GET /admin/api/…` (src/http/routes/admin.ts), behind the
 *   Host/Origin check, the same authentication and `admin.principals`.
 * - anything else: 404 with a JSON-RPC error body.
 */
export function createApp(deps: AppDeps): FrontDoor {
  const door = doorOf(deps);
  const { cfg, log, federation, router, legacy, inflight } = door;
  const app = new Hono<AppEnv>();
  const unknownPaths = new UnknownPaths(log, door.servedPaths);
  app.use('*', async (c, next) => {
    await next();
    if (c.get('unknownPath')) unknownPaths.note(c.req.method, c.req.path);
  });
  const mcpPaths = ['/mcp/:name', '/mcp/:name/sse', '/mcp/:name/message', ...(federation ? ['/mcp'] : [])];
  const metadataPaths = [
    '/.well-known/oauth-protected-resource/mcp/:name',
    ...(federation ? ['/.well-known/oauth-protected-resource/mcp'] : []),
  ];
  const cors = corsMiddleware(door.guard, (c, reason) => door.forbidden(reason, { preflight: true }));
  for (const path of [...mcpPaths, ...metadataPaths]) app.use(path, cors);
  operationsRoutes(app, door);
  metadataRoutes(app, door);
  const admit = admission(door);
  for (const path of mcpPaths) app.use(path, admit);
  // In this order: the POSTs of the MCP endpoints, then the legacy routes on the same paths, then 405.
  mcpRoutes(app, door);
  legacyRoutes(app, door);
  replicaHopRoutes(app, door);
  mcpMethodFallback(app, door);
  if (deps.credentials) credentialRoutes(app, door, deps.credentials);
  if (cfg.admin.enabled) {
    const sources = {
      upstreams: router.upstreams,
      parked: deps.parked,
      tasks: deps.tasks,
      census: deps.census,
      dropped: deps.dropped,
      legacy,
    };
    const admin = {
      cfg,
      log,
      replica: door.hop.replica,
      storeKind: deps.storeKind,
      sources,
      auth: door.auth,
      guard: door.guard,
      grants: deps.credentials,
    };
    app.route('/admin', adminApp(admin));
  }
  app.notFound(notFound(door));
  app.onError((e, c) => {
    if (uploadBroken(c)) {
      // Usually nobody is left to read this answer; when someone is, it is a client error.
      log.debug({ err: (e as Error).message }, 'request body not received');
      return errorResponse(null, { code: ErrorCode.InvalidRequest, message: 'The request body could not be read' }, 400);
    }
    const g = asGatewayError(e, log);
    return errorResponse(null, g.toJSON(), g.httpStatus);
  });

  const settle = async (ms: number, held: () => number = () => 0) => {
    const deadline = Date.now() + ms;
    while ((inflight.size || held()) && Date.now() < deadline) {
      // Polled: held work ends without a promise to wait on.
      const tick = new Promise((r) => setTimeout(r, Math.min(50, Math.max(0, deadline - Date.now()))));
      await (inflight.size ? Promise.race([Promise.all([...inflight]), tick]) : tick);
    }
    return inflight.size + held();
  };
  return { app, settle };
}

/**
 * True when the request's body stopped arriving: the client aborted the upload, sent a malformed
 * (chunked) body, or stalled past `limits.requestReadTimeoutMs`. A client error, not the gateway's.
 */
function uploadBroken(c: Context): boolean {
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  return !!incoming && !incoming.complete && (incoming.destroyed || !!incoming.errored);
}

/** The 404 (-32601) of a path the gateway does not serve; it names the MCP endpoints to a request for an allowed Host. */
function notFound({ cfg, guard, servedPaths }: Door): (c: Context<AppEnv>) => Response {
  return (c) => {
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
  };
}
