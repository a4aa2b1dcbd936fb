/**
 * The per-user credential routes (docs/security.md, "Upstream credentials"), registered when an
 * upstream uses `credentials.mode: "oauth"`:
 *
 * - `GET /oauth/start?link=…`: the consent link a URL-mode input request carries. Opens the sealed
 *   link, sets the flow's cookie (HttpOnly, SameSite=Lax, Path=/oauth) and redirects (302) to the
 *   authorization server (src/credentials/consent.ts).
 * - `GET /oauth/callback`: the one redirect URI. Checks the state, the cookie and the server's
 *   answer, exchanges the code, stores the grant and answers a small page; any failed check answers
 *   a 400 page naming it, and nothing is stored.
 * - `GET /oauth/grants`: the caller's own grants as JSON (`{"grants": [GrantInfo…]}`, no token).
 * - `DELETE /oauth/grants/NAME`: the caller revokes their grant for upstream NAME: 204, or 404 JSON
 *   `{"error": …}` when they hold none (naming an upstream the gateway does not have as such).
 *
 * The two browser routes check Host (403 for one not allowed; a top-level navigation carries no
 * Origin, and the callback comes from the authorization server's page); the principal comes from
 * the sealed link and state. The grant routes sit behind the MCP endpoints' admission (Host/Origin,
 * authentication, limits). Pages are never cached and send no Referer (the URLs carry the link and code).
 */
import type { Context, Hono } from 'hono';
import { getCookie, setCookie, deleteCookie } from 'hono/cookie';
import { html } from 'hono/html';
import { ConsentProblem, type ConsentStart } from '../../credentials/consent.js';
import type { GrantInfo } from '../../credentials/types.js';
import { quoted } from '../../protocol/errors.js';
import { principalHash } from '../../security/auth.js';
import { StoreUnavailable } from '../../store/shared.js';
import { admission } from '../admission.js';
import type { AppEnv, Door } from '../door.js';
import { headerOf } from '../headers.js';

/** What the credential routes use (src/wiring.ts hands it over). */
export interface CredentialRoutesPort {
  /** The consent start and callback. */
  consent: {
    start(link: string | undefined): Promise<ConsentStart>;
    callback(params: URLSearchParams, cookies: Record<string, string>): Promise<{ upstream: string; principal: string; cookie: string }>;
  };
  /** The grants held (of `upstream` only, when given), without tokens. */
  grants(upstream?: string): Promise<GrantInfo[]>;
  /** Removes (and revokes at the server) `principal`'s grant for `upstream`; false when there was none. */
  revoke(upstream: string, principal: string): Promise<boolean>;
}

const PAGE_HEADERS: Record<string, string> = {
  'cache-control': 'no-store',
  'referrer-policy': 'no-referrer',
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
};

/** A small HTML page with `title` and `message`, with `status`. */
function page(c: Context, status: 200 | 400 | 403 | 502 | 503, title: string, message: string): Response | Promise<Response> {
  const body = html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <title>${title}</title>
        <style>
          body {
            font:
              16px/1.5 system-ui,
              sans-serif;
            margin: 3em auto;
            max-width: 36em;
            color: #1d1d1f;
          }
        </style>
      </head>
      <body>
        <h1>${title}</h1>
        <p>${message}</p>
      </body>
    </html>`;
  for (const [k, v] of Object.entries(PAGE_HEADERS)) c.header(k, v);
  return c.html(body, status);
}

/** Registers the credential routes on `app`. */
export function credentialRoutes(app: Hono<AppEnv>, door: Door, port: CredentialRoutesPort): void {
  const { guard, log } = door;
  const hostRefused = (c: Context<AppEnv>) => {
    const refused = guard.check(headerOf(c, 'host'), undefined);
    if (refused) log.warn({ reason: refused }, 'request refused by Host/Origin check');
    return refused && page(c, 403, 'Forbidden', refused);
  };
  const failed = (c: Context<AppEnv>, e: unknown) => {
    if (e instanceof ConsentProblem) {
      if (e.cookie) deleteCookie(c, e.cookie, { path: '/oauth' });
      return page(c, e.status, 'Access was not granted', e.message);
    }
    if (e instanceof StoreUnavailable) return page(c, 503, 'Try again shortly', 'The gateway cannot reach its shared store now.');
    throw e;
  };

  app.get('/oauth/start', async (c) => {
    const refused = hostRefused(c);
    if (refused) return refused;
    if (door.draining()) return page(c, 503, 'Try again shortly', 'The gateway is shutting down.');
    try {
      const { location, cookie } = await port.consent.start(c.req.query('link'));
      setCookie(c, cookie.name, cookie.value, {
        path: '/oauth',
        httpOnly: true,
        sameSite: 'Lax',
        maxAge: cookie.maxAgeSec,
        secure: cookie.secure,
      });
      for (const [k, v] of Object.entries(PAGE_HEADERS)) c.header(k, v);
      return c.redirect(location, 302);
    } catch (e) {
      return failed(c, e);
    }
  });

  app.get('/oauth/callback', async (c) => {
    const refused = hostRefused(c);
    if (refused) return refused;
    try {
      const done = await port.consent.callback(new URL(c.req.url).searchParams, getCookie(c));
      deleteCookie(c, done.cookie, { path: '/oauth' });
      return page(c, 200, 'Access granted', `The gateway may now use ${done.upstream} on your behalf. You can close this window.`);
    } catch (e) {
      return failed(c, e);
    }
  });

  const admit = admission(door);
  app.use('/oauth/grants', admit);
  app.use('/oauth/grants/:name', admit);
  app.get('/oauth/grants', async (c) => {
    const principal = c.get('caller').principal;
    const mine = (await port.grants()).filter((g) => g.principal === principal);
    c.header('cache-control', 'no-store');
    return c.json({ grants: mine });
  });
  app.delete('/oauth/grants/:name', async (c) => {
    const principal = c.get('caller').principal;
    const name = c.req.param('name');
    c.header('cache-control', 'no-store');
    if (!(await port.revoke(name, principal))) {
      const known = Object.hasOwn(door.cfg.upstreams, name);
      const error = known ? `You hold no grant for upstream '${quoted(name)}'` : `This gateway has no upstream '${quoted(name)}'`;
      return c.json({ error }, 404);
    }
    log.info({ upstream: name, principal: principalHash(principal) }, 'grant revoked by its principal');
    return c.body(null, 204);
  });
}
