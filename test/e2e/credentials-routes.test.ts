/**
 * Per-user upstream credentials, the gateway's own parts, against real peers (an oidc-provider
 * authorization server with RFC 8693, a protected v1 SDK upstream, headless chromium): the token
 * exchange and its cache, the consent routes (`/oauth/start`, `/oauth/callback`) and the callers'
 * grant routes (`/oauth/grants`), refresh and revocation, every failing check of the callback, and
 * grants shared by two replicas on Redis with no token in clear.
 */
import { decodeJwt } from 'jose';
import { createClient } from 'redis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { HeldToken } from '../../src/credentials/types.js';
import { GatewayError } from '../../src/protocol/errors.js';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import {
  callerIdp,
  connectWithToken,
  consentInBrowser,
  startOAuthPeers,
  whoami,
  type AuthServer,
  type CallerIdp,
  type OAuthPeers,
  type ProtectedUpstream,
} from '../helpers/oauth.js';

let peers: OAuthPeers;
let as: AuthServer;
let upstream: ProtectedUpstream;
let idp: CallerIdp;

beforeAll(async () => {
  peers = await startOAuthPeers({ accessTokenTtlSec: 300 });
  ({ idp, as, upstream } = peers);
});
afterAll(async () => peers?.close());

/** A gateway config with an `oauth` upstream `up` (client registered dynamically) and a `tokenExchange` upstream `tx`. */
function config(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return peers.gatewayConfig({ up: peers.upstreamConfig('oauth'), tx: peers.upstreamConfig('tokenExchange') }, extra);
}

/** What the upstream says about `token` (its `sub` and `aud`), through a real MCP session. */
async function upstreamSees(token: string): Promise<Record<string, unknown>> {
  const client = await connectWithToken(upstream.url, token);
  try {
    return await whoami(client);
  } finally {
    await client.close();
  }
}

/** The caller principal the gateway's jwt auth makes of `sub`. */
const principalOf = (sub: string) => `${idp.issuer}#${sub}`;

describe('token exchange (RFC 8693)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    const cfg = config();
    // The same upstream with an audience and scope asked, and the gateway's own token as actor_token.
    const tx = (cfg.upstreams as Record<string, any>).tx;
    const actorToken = await idp.mint('the-gateway', { ttlSec: 3600 });
    const txa = { ...tx, credentials: { ...tx.credentials, audience: upstream.url, scope: 'mcp', actorToken } };
    gw = await startGateway({ ...cfg, upstreams: { ...(cfg.upstreams as object), txa } });
  });
  afterAll(async () => gw?.close());

  it('exchanges each principal’s JWT once for a token of its own subject and the upstream’s audience, then serves it from the cache', async () => {
    as.clearRecords();
    const ex = gw.gateway.exchanger;
    const alice = { principal: principalOf('alice'), token: await idp.mint('alice') };
    const bob = { principal: principalOf('bob'), token: await idp.mint('bob') };
    const [a1, a2] = await Promise.all([ex.token('tx', alice), ex.token('tx', alice)]);
    const a3 = await ex.token('tx', alice);
    expect(a1.accessToken).toBe(a2.accessToken);
    expect(a3.accessToken).toBe(a1.accessToken);
    expect(as.records.exchanges).toHaveLength(1);
    const b = await ex.token('tx', bob);
    expect(as.records.exchanges.map((e) => e.subject)).toEqual(['alice', 'bob']);
    expect(decodeJwt(a1.accessToken)).toMatchObject({ sub: 'alice', aud: upstream.url });
    expect(await upstreamSees(a1.accessToken)).toMatchObject({ sub: 'alice' });
    expect(await upstreamSees(b.accessToken)).toMatchObject({ sub: 'bob' });
  });

  it('sends the configured audience, scope and actor_token', async () => {
    as.clearRecords();
    const t = await gw.gateway.exchanger.token('txa', { principal: principalOf('alice'), token: await idp.mint('alice') });
    expect(as.records.exchanges).toEqual([
      expect.objectContaining({ subject: 'alice', audience: upstream.url, actor: 'the-gateway', scope: 'mcp' }),
    ]);
    expect(await upstreamSees(t.accessToken)).toMatchObject({ sub: 'alice' });
  });

  it('gives -32603 upstream-authorization naming the endpoint while it is down, and works once it is back', async () => {
    const carol = { principal: principalOf('carol'), token: await idp.mint('carol') };
    await as.down();
    let failure: unknown;
    try {
      await gw.gateway.exchanger.token('tx', carol);
    } catch (e) {
      failure = e;
    } finally {
      await as.up();
    }
    expect(failure).toBeInstanceOf(GatewayError);
    const g = failure as GatewayError;
    expect(g.code).toBe(-32603);
    expect(g.data).toEqual({ upstream: 'tx', reason: 'upstream-authorization' });
    expect(g.message).toContain(as.tokenEndpoint);
    expect(g.message).toContain('cannot be reached');
    expect(g.message).not.toContain(carol.token);
    const t = await gw.gateway.exchanger.token('tx', carol);
    expect(await upstreamSees(t.accessToken)).toMatchObject({ sub: 'carol' });
  });

  it('names the OAuth error code when the endpoint refuses the subject token, never the token', async () => {
    const stranger = await callerIdp({ issuer: 'https://other-idp.test' });
    const token = await stranger.mint('mallory');
    const err = (await gw.gateway.exchanger.token('tx', { principal: 'x', token }).catch((e) => e)) as GatewayError;
    expect(err.data).toEqual({ upstream: 'tx', reason: 'upstream-authorization' });
    expect(err.message).toMatch(/error invalid_grant/);
    expect(err.message).not.toContain(token);
  });
});

/** GET /oauth/grants (or DELETE /oauth/grants/NAME) as `sub`. */
async function grantsRoute(gw: TestGateway, sub: string, method = 'GET', name?: string): Promise<Response> {
  return fetch(`${gw.base}/oauth/grants${name ? `/${name}` : ''}`, {
    method,
    headers: { authorization: `Bearer ${await idp.mint(sub)}` },
  });
}

/** Opens a consent link without a browser: the redirect to the authorization server and the flow's cookie. */
async function startFlow(gw: TestGateway, sub: string): Promise<{ state: string; cookie: string; location: URL }> {
  const { url } = await gw.gateway.userGrants.consentLink('up', principalOf(sub));
  const res = await fetch(url, { redirect: 'manual' });
  expect(res.status).toBe(302);
  const location = new URL(res.headers.get('location')!);
  const setCookie = res.headers.get('set-cookie')!;
  expect(setCookie).toMatch(/HttpOnly/i);
  expect(setCookie).toMatch(/SameSite=Lax/i);
  expect(setCookie).toMatch(/Path=\/oauth/);
  return { state: location.searchParams.get('state')!, cookie: setCookie.split(';')[0]!, location };
}

/** GET /oauth/callback with `params`, sending `cookie` when given. */
async function callback(gw: TestGateway, params: Record<string, string>, cookie?: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`${gw.base}/oauth/callback?${new URLSearchParams(params)}`, { headers: cookie ? { cookie } : {} });
  return { status: res.status, body: await res.text() };
}

describeWith(['chromium'], 'consent, refresh and revocation of a per-user grant (Debian chromium)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway(config());
  });
  afterAll(async () => gw?.close());

  it('stores the grant at the callback, lists it without a token, refreshes an expired one, and revokes it', async () => {
    as.clearRecords();
    const alice = principalOf('alice');
    const grants = gw.gateway.userGrants;
    expect(await grants.accessToken('up', alice)).toBeUndefined();
    const { url } = await grants.consentLink('up', alice);
    expect(url.startsWith(`${gw.base}/oauth/start?link=`)).toBe(true);
    const outcome = await consentInBrowser(url, { login: 'alice' });
    expect(outcome.url.startsWith(`${gw.base}/oauth/callback?`)).toBe(true);
    expect(outcome.status).toBe(200);
    expect(outcome.body).toContain('You can close this window');
    expect(as.records.registrations).toEqual([{ clientId: expect.any(String), redirectUris: [`${gw.base}/oauth/callback`] }]);

    const held = (await grants.accessToken('up', alice))!;
    expect(await upstreamSees(held.accessToken)).toMatchObject({ sub: 'alice', aud: upstream.url });
    const listed = await grantsRoute(gw, 'alice');
    const text = await listed.text();
    expect(JSON.parse(text)).toEqual({
      grants: [
        {
          upstream: 'up',
          principal: alice,
          refreshable: true,
          createdAtMs: expect.any(Number),
          expiresAtMs: expect.any(Number),
          scope: expect.any(String),
        },
      ],
    });
    expect(text).not.toContain(held.accessToken);
    expect(await (await grantsRoute(gw, 'bob')).json()).toEqual({ grants: [] });
    expect(outcome.body).not.toContain(held.accessToken);

    // Expired: refreshed without asking.
    const store = gw.gateway.store.grants;
    const before = (await store.get('up', alice))!;
    await store.put({ ...before, expiresAtMs: Date.now() - 1000 });
    // Two calls at once share one refresh.
    const [refreshed, same] = (await Promise.all([grants.accessToken('up', alice), grants.accessToken('up', alice)])) as HeldToken[];
    expect(same).toEqual(refreshed);
    expect(as.records.refreshes).toHaveLength(1);
    expect(refreshed.accessToken).not.toBe(held.accessToken);
    expect(await upstreamSees(refreshed.accessToken)).toMatchObject({ sub: 'alice' });
    expect(await grants.accessToken('up', alice)).toEqual(refreshed);

    // Revoked by its principal: gone here and at the server.
    const revoked = await grantsRoute(gw, 'alice', 'DELETE', 'up');
    expect(revoked.status).toBe(204);
    expect(as.records.revocations.length).toBeGreaterThan(0);
    expect(await grants.accessToken('up', alice)).toBeUndefined();
    const again = await grantsRoute(gw, 'alice', 'DELETE', 'up');
    expect(again.status).toBe(404);
    expect(await again.json()).toEqual({ error: expect.stringContaining("no grant for upstream 'up'") });
  });

  it('drops the grant when its refresh is refused, so the caller is asked again', async () => {
    const dave = principalOf('dave');
    const grants = gw.gateway.userGrants;
    const outcome = await consentInBrowser((await grants.consentLink('up', dave)).url, { login: 'dave' });
    expect(outcome.status).toBe(200);
    const store = gw.gateway.store.grants;
    const first = (await store.get('up', dave))!;
    await store.put({ ...first, expiresAtMs: Date.now() - 1000 });
    // The token endpoint down: a clear error, and the grant is kept for later.
    await as.down();
    const err = (await grants
      .accessToken('up', dave)
      .catch((e) => e)
      .finally(() => as.up())) as GatewayError;
    expect(err).toBeInstanceOf(GatewayError);
    expect(err.data).toEqual({ upstream: 'up', reason: 'upstream-authorization' });
    expect(err.message).toContain('cannot be reached');
    expect(await grants.accessToken('up', dave)).toBeDefined();
    // The first refresh token was rotated away: using it again is refused (invalid_grant).
    await store.put({ ...first, expiresAtMs: Date.now() - 1000 });
    expect(await grants.accessToken('up', dave)).toBeUndefined();
    expect(await store.get('up', dave)).toBeUndefined();
  });
});

describe('callback checks: nothing is stored', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    const cfg = config();
    // The authorization server, resource and scopes configured: nothing to discover from the upstream.
    const up2 = {
      transport: 'streamable-http',
      url: upstream.url,
      credentials: { mode: 'oauth', authorizationServer: as.issuer, resource: upstream.url, scopes: ['mcp'] },
    };
    gw = await startGateway({ ...cfg, upstreams: { ...(cfg.upstreams as object), up2 } });
  });
  afterAll(async () => gw?.close());
  const nothingStored = async () => expect(await gw.gateway.store.grants.list()).toEqual([]);

  it('redirects the consent link to the authorization endpoint with PKCE S256, state, resource and scope', async () => {
    const { location } = await startFlow(gw, 'erin');
    expect(location.origin).toBe(as.issuer);
    expect(Object.fromEntries(location.searchParams)).toMatchObject({
      response_type: 'code',
      redirect_uri: `${gw.base}/oauth/callback`,
      code_challenge_method: 'S256',
      code_challenge: expect.stringMatching(/^[A-Za-z0-9_-]{43}$/),
      resource: upstream.url,
    });
  });

  it('uses a configured authorization server, resource and scopes without asking the upstream', async () => {
    upstream.clear();
    const { url } = await gw.gateway.userGrants.consentLink('up2', principalOf('erin'));
    const res = await fetch(url, { redirect: 'manual' });
    expect(res.status).toBe(302);
    const location = new URL(res.headers.get('location')!);
    expect(location.origin).toBe(as.issuer);
    expect(Object.fromEntries(location.searchParams)).toMatchObject({ resource: upstream.url, scope: 'mcp' });
    expect(upstream.refusals).toEqual([]);
  });

  it('refuses a forged or missing state with a 400 page', async () => {
    expect(await callback(gw, { code: 'x', state: 'forged' })).toMatchObject({ status: 400, body: expect.stringContaining('state') });
    const { state, cookie } = await startFlow(gw, 'erin');
    const altered = `${state.slice(0, -2)}${state.endsWith('AA') ? 'BB' : 'AA'}`;
    expect((await callback(gw, { code: 'x', state: altered }, cookie)).status).toBe(400);
    expect((await callback(gw, { code: 'x' }, cookie)).status).toBe(400);
    await nothingStored();
  });

  it('refuses a callback without the flow’s cookie, or with the cookie of another flow (another principal’s sign-in)', async () => {
    const mine = await startFlow(gw, 'erin');
    const theirs = await startFlow(gw, 'mallory');
    const missing = await callback(gw, { code: 'x', state: theirs.state, iss: as.issuer });
    expect(missing).toMatchObject({ status: 400, body: expect.stringContaining('not started in this browser') });
    const other = await callback(gw, { code: 'x', state: theirs.state, iss: as.issuer }, mine.cookie);
    expect(other).toMatchObject({ status: 400, body: expect.stringContaining('not started in this browser') });
    await nothingStored();
  });

  it('names the server’s error (access_denied), then refuses the same state again as replayed', async () => {
    const { state, cookie } = await startFlow(gw, 'erin');
    const denied = await callback(gw, { error: 'access_denied', state, iss: as.issuer }, cookie);
    expect(denied).toMatchObject({ status: 400, body: expect.stringContaining('access was denied') });
    const replayed = await callback(gw, { code: 'x', state, iss: as.issuer }, cookie);
    expect(replayed).toMatchObject({ status: 400, body: expect.stringContaining('used already') });
    await nothingStored();
  });

  it('refuses a code the authorization server does not accept', async () => {
    const { state, cookie } = await startFlow(gw, 'erin');
    const res = await callback(gw, { code: 'not-a-code', state, iss: as.issuer }, cookie);
    expect(res).toMatchObject({ status: 400, body: expect.stringContaining('invalid_grant') });
    await nothingStored();
  });

  it('refuses a callback without a code, or with its state or code repeated, naming the sign-in response, not the token endpoint', async () => {
    for (const extra of ['', '&code=x&code=y', '&code=x&state=again']) {
      const { state, cookie } = await startFlow(gw, 'erin');
      const q = `state=${encodeURIComponent(state)}&iss=${encodeURIComponent(as.issuer)}${extra.replace('again', encodeURIComponent(state))}`;
      const res = await fetch(`${gw.base}/oauth/callback?${q}`, { headers: { cookie } });
      expect(res.status).toBe(400);
      const body = await res.text();
      expect(body).toContain('The sign-in response is not valid');
      expect(body).not.toContain('token endpoint');
    }
    await nothingStored();
  });

  it('answers 502 naming the token endpoint when it cannot be reached at the callback', async () => {
    const { state, cookie } = await startFlow(gw, 'erin');
    await as.down();
    let res: { status: number; body: string };
    try {
      res = await callback(gw, { code: 'x', state, iss: as.issuer }, cookie);
    } finally {
      await as.up();
    }
    expect(res).toMatchObject({ status: 502, body: expect.stringContaining(`${as.tokenEndpoint} cannot be reached`) });
    await nothingStored();
  });

  it('refuses an expired state', async () => {
    const { state, cookie } = await startFlow(gw, 'erin');
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.now() + 600_000 + 1000);
      const res = await callback(gw, { code: 'x', state, iss: as.issuer }, cookie);
      expect(res).toMatchObject({ status: 400, body: expect.stringContaining('expired') });
    } finally {
      vi.useRealTimers();
    }
    await nothingStored();
  });

  it('refuses a forged or expired consent link', async () => {
    const forged = await fetch(`${gw.base}/oauth/start?link=abc`, { redirect: 'manual' });
    expect(forged.status).toBe(400);
    expect(await forged.text()).toContain('not valid');
    const { url } = await gw.gateway.userGrants.consentLink('up', principalOf('erin'));
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      vi.setSystemTime(Date.now() + 600_000 + 1000);
      const res = await fetch(url, { redirect: 'manual' });
      expect(res.status).toBe(400);
      expect(await res.text()).toContain('expired');
    } finally {
      vi.useRealTimers();
    }
  });

  it('answers DELETE /oauth/grants/NAME with a 404 naming an unknown upstream as such, and 401 without authentication', async () => {
    const unknown = await grantsRoute(gw, 'erin', 'DELETE', 'nope');
    expect(unknown.status).toBe(404);
    expect(await unknown.json()).toEqual({ error: "This gateway has no upstream 'nope'" });
    const none = await grantsRoute(gw, 'erin', 'DELETE', 'up');
    expect(await none.json()).toEqual({ error: "You hold no grant for upstream 'up'" });
    expect((await fetch(`${gw.base}/oauth/grants/up`, { method: 'DELETE' })).status).toBe(401);
  });

  it('answers GET /oauth/grants only to an authenticated caller', async () => {
    const res = await fetch(`${gw.base}/oauth/grants`);
    expect(res.status).toBe(401);
    expect(res.headers.get('www-authenticate')).toMatch(/^Bearer /);
  });
});

describeWith(['redis-server', 'chromium'], 'grants shared by two replicas on Redis', () => {
  let redis: TestRedis;
  let a: TestGateway;
  let b: TestGateway;
  beforeAll(async () => {
    redis = await startRedis();
    const shared = { store: { kind: 'redis', url: redis.url }, replicas: { secret: 'a-replica-hop-secret-of-32-characters-or-more' } };
    a = await startGateway(config(shared));
    b = await startGateway(config(shared));
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await redis?.stop();
  });

  it('serves on replica B the grant stored through replica A’s callback, and keeps no token in clear', async () => {
    const frank = principalOf('frank');
    const outcome = await consentInBrowser((await a.gateway.userGrants.consentLink('up', frank)).url, { login: 'frank' });
    expect(outcome.status).toBe(200);
    expect(await b.gateway.userGrants.waitForGrant('up', frank, 5000)).toEqual({ granted: true });
    const held = (await b.gateway.userGrants.accessToken('up', frank))!;
    expect(await upstreamSees(held.accessToken)).toMatchObject({ sub: 'frank' });
    expect(await (await grantsRoute(b, 'frank')).json()).toMatchObject({ grants: [{ upstream: 'up', principal: frank }] });

    // Expired, and asked on both replicas at once: one refresh, both get its token.
    as.clearRecords();
    const stored = (await a.gateway.store.grants.get('up', frank))!;
    await a.gateway.store.grants.put({ ...stored, expiresAtMs: Date.now() - 1000 });
    const [onA, onB] = (await Promise.all([
      a.gateway.userGrants.accessToken('up', frank),
      b.gateway.userGrants.accessToken('up', frank),
    ])) as HeldToken[];
    expect(as.records.refreshes).toHaveLength(1);
    // The other replica did not use the refresh token too (the server may then revoke the grant).
    expect(as.records.tokenErrors).toEqual([]);
    expect(onB).toEqual(onA);
    expect(await upstreamSees(onA.accessToken)).toMatchObject({ sub: 'frank' });

    const client = createClient({ url: redis.url });
    await client.connect();
    try {
      const values: string[] = [];
      for await (const batch of client.scanIterator()) {
        for (const key of [batch].flat()) {
          const type = await client.type(key);
          if (type === 'hash') values.push(...Object.values(await client.hGetAll(key)));
          else if (type === 'string') values.push((await client.get(key)) ?? '');
        }
      }
      expect(values.length).toBeGreaterThan(0);
      for (const token of [held.accessToken, onA.accessToken]) {
        expect(values.join('\n')).not.toContain(token);
        expect(values.join('\n')).not.toContain(token.split('.')[2]!);
      }
    } finally {
      await client.quit();
    }
  });
});

describeWith(['chromium'], 'the admin page lists the grants and revokes one (Debian chromium for the consent)', () => {
  let gw: TestGateway;
  const ops = async () => ({ authorization: `Bearer ${await idp.mint('ops')}` });
  beforeAll(async () => {
    gw = await startGateway(config({ admin: { enabled: true, principals: [principalOf('ops')] } }));
  });
  afterAll(async () => gw?.close());

  it('shows principal, upstream, expiry and refreshability but no token, and revokes through its form (same origin only)', async () => {
    as.clearRecords();
    const gina = principalOf('gina');
    const outcome = await consentInBrowser((await gw.gateway.userGrants.consentLink('up', gina)).url, { login: 'gina' });
    expect(outcome.status).toBe(200);
    const token = (await gw.gateway.userGrants.accessToken('up', gina))!.accessToken;

    const page = await (await fetch(`${gw.base}/admin`, { headers: await ops() })).text();
    expect(page).toContain('Per-user grants');
    expect(page).toContain(gina);
    expect(page).toMatch(/<form method="post" action="\/admin\/grants\/revoke">/);
    expect(page).not.toContain(token);
    const api = await (await fetch(`${gw.base}/admin/api/grants`, { headers: await ops() })).json();
    expect(api).toEqual({ grants: [expect.objectContaining({ upstream: 'up', principal: gina, refreshable: true })] });
    expect(JSON.stringify(api)).not.toContain(token);
    // Only admins.
    const asGina = await fetch(`${gw.base}/admin/api/grants`, { headers: { authorization: `Bearer ${await idp.mint('gina')}` } });
    expect(asGina.status).toBe(403);

    const form = new URLSearchParams({ upstream: 'up', principal: gina });
    const post = (origin: string) =>
      fetch(`${gw.base}/admin/grants/revoke`, {
        method: 'POST',
        redirect: 'manual',
        body: form,
        headers: { ...{ 'content-type': 'application/x-www-form-urlencoded', origin } },
      });
    const foreign = await fetch(`${gw.base}/admin/grants/revoke`, {
      method: 'POST',
      redirect: 'manual',
      body: form,
      headers: { ...(await ops()), 'content-type': 'application/x-www-form-urlencoded', origin: 'https://evil.example' },
    });
    expect(foreign.status).toBe(403);
    expect(await gw.gateway.userGrants.accessToken('up', gina)).toBeDefined();
    expect((await post(gw.base)).status).toBe(401);
    const revoked = await fetch(`${gw.base}/admin/grants/revoke`, {
      method: 'POST',
      redirect: 'manual',
      body: form,
      headers: { ...(await ops()), 'content-type': 'application/x-www-form-urlencoded', origin: gw.base },
    });
    expect(revoked.status).toBe(303);
    expect(revoked.headers.get('location')).toBe('/admin#grants');
    expect(await gw.gateway.userGrants.accessToken('up', gina)).toBeUndefined();
    expect(as.records.revocations.length).toBeGreaterThan(0);
    const gone = await fetch(`${gw.base}/admin/api/grants/up?principal=${encodeURIComponent(gina)}`, {
      method: 'DELETE',
      headers: await ops(),
    });
    expect(gone.status).toBe(404);
  });
});
