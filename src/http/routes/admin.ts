/**
 * The admin endpoints, mounted at `/admin` when `admin.enabled` is true (otherwise they do not
 * exist and answer 404):
 *
 * - `GET /admin`: the admin page (HTML, reloads itself every `admin.refreshSeconds`);
 * - `GET /admin/api/upstreams`, `/admin/api/parked`, `/admin/api/tasks`, `/admin/api/sessions`,
 *   `/admin/api/census`, `/admin/api/dropped`: the same data as JSON (shapes in src/admin/view.ts);
 * - with an `oauth` upstream: `GET /admin/api/grants` (`{"grants": [GrantInfo…]}`, no token),
 *   `DELETE /admin/api/grants/NAME?principal=P` (204, or 404 when P holds no grant for NAME), and
 *   the page's revoke form, `POST /admin/grants/revoke` (`upstream`, `principal`; 303 back to the page).
 *
 * Access, in this order: the Host/Origin check of the MCP endpoints (403), the same
 * authentication (401, or 403 for a JWT without a required scope), then the admin's own rule:
 * the principal must be listed in `admin.principals` (403 otherwise); with `auth.mode: "none"`,
 * where every caller is `anonymous`, the client must also connect from a loopback address (403
 * otherwise). Responses are never cached (`Cache-Control: no-store`) and may not be framed. The revoke
 * form's POST passes the Origin check when its Origin is the page's own (scheme and Host), so a
 * page of another site cannot revoke (CSRF).
 */
import { getConnInfo } from '@hono/node-server/conninfo';
import type { HttpBindings } from '@hono/node-server';
import { Hono, type Context } from 'hono';
import { renderPage } from '../../admin/page.js';
import {
  censusView,
  droppedView,
  parkedView,
  Redactor,
  sessionsView,
  tasksView,
  upstreamsView,
  type AdminSources,
} from '../../admin/view.js';
import type { GatewayConfig } from '../../config/schema.js';
import type { GrantInfo } from '../../credentials/types.js';
import type { Logger } from '../../observability/log.js';
import { AuthError, principalHash, type Authenticator } from '../../security/auth.js';
import { isLoopback, type OriginGuard } from '../frontdoor.js';

/** The TCP peer address of the request as Node reports it, or undefined when unknown. */
function remoteAddress(c: Context): string | undefined {
  try {
    return getConnInfo(c).remote.address;
  } catch {
    return undefined;
  }
}

/**
 * The admin's address rule. With `auth.mode: "none"` every caller is `anonymous`, so only a client
 * connected from a loopback address (127.0.0.0/8 or `::1`, IPv4-mapped IPv6 forms such as
 * `::ffff:127.0.0.1` included) may see the admin endpoints. The address is the TCP peer's;
 * `X-Forwarded-For` and the like are not read. Other auth modes have no address rule.
 * @param remote the peer address as Node reports it; undefined (unknown) is refused.
 * @returns the message of the 403 refusal, or undefined when the address is allowed.
 */
export function adminAddressRefusal(authMode: string, remote: string | undefined): string | undefined {
  if (authMode !== 'none') return undefined;
  const address = remote?.replace(/^::ffff:/i, '');
  if (address && address !== 'localhost' && isLoopback(address)) return undefined;
  return 'Forbidden: without authentication the admin page is served to loopback clients only';
}

const SECURITY_HEADERS: Record<string, string> = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
};

/** Every admin endpoint, by its full path. */
const ENDPOINTS = [
  '/admin',
  '/admin/api/upstreams',
  '/admin/api/parked',
  '/admin/api/tasks',
  '/admin/api/sessions',
  '/admin/api/census',
  '/admin/api/dropped',
  '/admin/api/grants',
];

const refusal = (status: 401 | 403 | 404 | 405, message: string, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify({ error: message }), {
    status,
    headers: { 'content-type': 'application/json', ...SECURITY_HEADERS, ...headers },
  });

/** What the admin endpoints are built from. */
export interface AdminDeps {
  cfg: GatewayConfig;
  log: Logger;
  /** This replica's id and the shared store's kind (`memory` or `redis`), shown at the top of the page. */
  replica: string;
  storeKind: 'memory' | 'redis';
  /** The live state the views read (src/admin/view.ts); the secrets of `cfg` are removed from its text. */
  sources: Omit<AdminSources, 'redactor'>;
  /** The front door's own: the admin endpoints accept exactly the credentials and hosts the MCP endpoints accept. */
  auth: Authenticator;
  guard: OriginGuard;
  /** The per-user grants (absent: no `oauth` upstream). */
  grants?: {
    grants(upstream?: string): Promise<GrantInfo[]>;
    revoke(upstream: string, principal: string): Promise<boolean>;
  };
}

/** The admin sub-app, to mount at `/admin`. */
export function adminApp({ cfg, log, replica, storeKind, auth, guard, grants, ...deps }: AdminDeps): Hono<{ Bindings: HttpBindings }> {
  const allowed = cfg.admin.principals ? new Set(cfg.admin.principals) : undefined;
  const sources: AdminSources = { ...deps.sources, redactor: new Redactor(cfg) };
  const app = new Hono<{ Bindings: HttpBindings }>();

  app.use('*', async (c, next) => {
    const origin = c.req.header('origin');
    // The page's own revoke form: its Origin is the page's (scheme and Host).
    const own = origin !== undefined && origin === `${new URL(c.req.url).protocol}//${c.req.header('host')}`;
    const refused = guard.check(c.req.header('host'), own && c.req.method === 'POST' ? undefined : origin);
    if (refused) {
      log.warn({ reason: refused, admin: true }, 'request refused by Host/Origin check');
      return refusal(403, `Forbidden: ${refused}`);
    }
    let principal: string;
    try {
      principal = (await auth.authenticate(c.req.header('authorization'))).principal;
    } catch (e) {
      if (!(e instanceof AuthError)) throw e;
      log.info({ status: e.status, reason: e.message, admin: true }, 'request refused by auth');
      const params = ['realm="mrtr-gateway admin"', ...(e.error ? [`error="${e.error}"`] : [])];
      return refusal(e.status, e.message, { 'www-authenticate': `Bearer ${params.join(', ')}` });
    }
    const byAddress = adminAddressRefusal(cfg.auth.mode, remoteAddress(c));
    if (byAddress) {
      log.warn({ admin: true }, 'admin refused: without authentication only loopback clients may see it');
      return refusal(403, byAddress);
    }
    if (allowed && !allowed.has(principal)) {
      log.warn({ admin: true, principal: principalHash(principal) }, 'admin refused: principal not in admin.principals');
      return refusal(403, 'Forbidden: this principal is not allowed on the admin page (admin.principals)');
    }
    await next();
    for (const [k, v] of Object.entries(SECURITY_HEADERS)) c.res.headers.set(k, v);
  });

  app.get('/', async (c) =>
    c.html(
      renderPage({
        ...(grants ? { grants: await grants.grants() } : {}),
        replica,
        store: storeKind,
        now: new Date().toISOString(),
        refreshSeconds: cfg.admin.refreshSeconds,
        upstreams: upstreamsView(sources),
        parked: parkedView(sources),
        tasks: tasksView(sources),
        sessions: sessionsView(sources),
        census: censusView(sources),
        dropped: droppedView(sources),
      }),
    ),
  );
  app.get('/api/upstreams', (c) => c.json({ upstreams: upstreamsView(sources) }));
  app.get('/api/parked', (c) => c.json({ parked: parkedView(sources) }));
  app.get('/api/tasks', (c) => c.json(tasksView(sources)));
  app.get('/api/sessions', (c) => c.json({ sessions: sessionsView(sources) }));
  app.get('/api/census', (c) => c.json(censusView(sources)));
  app.get('/api/dropped', (c) => c.json({ dropped: droppedView(sources) }));
  if (grants) grantRoutes(app, grants, log);
  app.all('*', (c) => {
    const path = c.req.path;
    if (ENDPOINTS.includes(path)) return refusal(405, `${c.req.method} is not supported on ${path}; use GET`, { allow: 'GET, HEAD' });
    return refusal(404, `No admin endpoint at ${c.req.path}; the admin endpoints are ${ENDPOINTS.join(', ')}`);
  });
  return app;
}

/** The grants' JSON endpoints and the page's revoke form (see the file header). */
function grantRoutes(app: Hono<{ Bindings: HttpBindings }>, grants: NonNullable<AdminDeps['grants']>, log: Logger): void {
  const revoke = async (upstream: string, principal: string) => {
    const done = await grants.revoke(upstream, principal);
    if (done) log.info({ admin: true, upstream, principal: principalHash(principal) }, 'grant revoked on the admin page');
    return done;
  };
  app.get('/api/grants', async (c) => c.json({ grants: await grants.grants() }));
  app.delete('/api/grants/:name', async (c) => {
    const principal = c.req.query('principal');
    if (!principal) return refusal(404, 'Name the grant: DELETE /admin/api/grants/NAME?principal=PRINCIPAL');
    if (!(await revoke(c.req.param('name'), principal))) return refusal(404, 'No such grant');
    return c.body(null, 204);
  });
  app.post('/grants/revoke', async (c) => {
    const form = await c.req.parseBody();
    const { upstream, principal } = form;
    if (typeof upstream !== 'string' || typeof principal !== 'string') return refusal(404, 'Name the grant: upstream and principal');
    await revoke(upstream, principal);
    return c.redirect('/admin#grants', 303);
  });
}
