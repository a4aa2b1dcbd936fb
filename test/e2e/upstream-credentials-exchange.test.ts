/**
 * RFC 8693 token exchange upstream credentials (docs/security.md, "Upstream credentials"), against
 * real peers: an oidc-provider authorization server with token exchange, a protected v1 SDK
 * upstream over Streamable HTTP that records whose token each request carries, and the stdio
 * fixture whose `whoami` reads its token from its environment. Each principal's upstream requests
 * carry a token of its own subject and the upstream's audience, exchanged once and cached; a token
 * endpoint that is down is a clear error until it is back; on stdio each principal has a child of its own;
 * a 2026-07-28 upstream (v2 SDK) gets each caller's token from its era probe on, and one that
 * refuses a token has it dropped.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { McpServer, createMcpHandler } from '@modelcontextprotocol/server';
import { createLocalJWKSet, decodeJwt, jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { scaled } from '../helpers/budget.js';
import { eventually, modernStdio } from '../helpers/fixture.js';
import { elicitingClient } from '../helpers/v1client.js';
import {
  protectedStdio,
  startOAuthPeers,
  type AuthServer,
  type CallerIdp,
  type OAuthPeers,
  type ProtectedUpstream,
} from '../helpers/oauth.js';

const STDIO_AUDIENCE = 'urn:test:stdio-upstream';

let peers: OAuthPeers;
let idp: CallerIdp;
let as: AuthServer;
let upstream: ProtectedUpstream;
let gw: TestGateway;
/** A 2026-07-28 upstream that checks bearer tokens; `audience` is what it accepts (its URL, unless a test changes it). */
let modern: { url: string; audience: string; seen: { sub: string; aud: unknown; method: string | null }[]; server: ServerType };

/** Starts the 2026-07-28 upstream: a v2 SDK server whose tool `hello` answers "hello", behind a bearer check. */
async function startModernProtected(): Promise<typeof modern> {
  const keys = createLocalJWKSet(as.jwks);
  const handler = createMcpHandler(() => {
    const s = new McpServer({ name: 'modern-protected', version: '1.0.0' });
    s.registerTool('hello', { description: 'Says hello' }, async () => ({ content: [{ type: 'text', text: 'hello' }] }));
    return s;
  });
  const state = { url: '', audience: '', seen: [] as typeof modern.seen, server: undefined as unknown as ServerType };
  const fetch = async (req: Request) => {
    const token = /^Bearer (\S+)$/.exec(req.headers.get('authorization') ?? '')?.[1];
    try {
      const { payload } = await jwtVerify(token ?? '', keys, { issuer: as.issuer, audience: state.audience });
      state.seen.push({ sub: String(payload.sub), aud: payload.aud, method: req.headers.get('mcp-method') });
    } catch {
      return new Response(JSON.stringify({ error: 'invalid_token' }), { status: 401, headers: { 'www-authenticate': 'Bearer' } });
    }
    return handler.fetch(req);
  };
  await new Promise<void>((resolve) => {
    state.server = serve({ fetch, port: 0, hostname: '127.0.0.1' }, () => resolve());
  });
  state.url = `http://127.0.0.1:${(state.server.address() as AddressInfo).port}/mcp`;
  state.audience = state.url;
  return state;
}

beforeAll(async () => {
  peers = await startOAuthPeers();
  ({ idp, as, upstream } = peers);
  modern = await startModernProtected();
  const exchange = peers.credentials('tokenExchange');
  gw = await startGateway({
    auth: idp.auth,
    upstreams: {
      modern: { transport: 'streamable-http', url: modern.url, protocol: 'auto', credentials: exchange },
      modernGranted: {
        transport: 'streamable-http',
        url: modern.url,
        protocol: 'auto',
        credentials: { mode: 'oauth', authorizationServer: as.issuer, resource: modern.url },
      },
      api: {
        transport: 'streamable-http',
        url: upstream.url,
        protocol: 'legacy',
        credentials: exchange,
        cache: { scope: 'public', ttlMs: 1000 },
      },
      local: {
        ...protectedStdio('UPSTREAM_TOKEN'),
        protocol: 'legacy',
        idleSessionMs: 1500,
        credentials: { ...exchange, audience: STDIO_AUDIENCE, env: 'UPSTREAM_TOKEN' },
      },
      modernLocal: {
        ...modernStdio(),
        protocol: '2026-07-28',
        credentials: { ...exchange, audience: STDIO_AUDIENCE, env: 'UPSTREAM_TOKEN' },
      },
      probed: {
        ...protectedStdio('UPSTREAM_TOKEN'),
        protocol: 'auto',
        credentials: { ...exchange, audience: STDIO_AUDIENCE, env: 'UPSTREAM_TOKEN' },
      },
    },
  });
}, scaled(60_000));

afterAll(async () => {
  await gw?.close();
  modern?.server.close();
  await peers?.close();
});

/** `whoami` of upstream `name` as `jwt`: the parsed JSON text, or the error. */
async function whoami(name: string, jwt: string): Promise<{ result?: Record<string, any>; error?: any }> {
  const r = await rpc(gw.url(name), 'tools/call', { name: 'whoami', arguments: {} }, { headers: { authorization: `Bearer ${jwt}` } });
  if (r.body.error) return { error: r.body.error };
  return { result: JSON.parse(r.body.result.content[0].text) };
}

describe('token exchange (RFC 8693)', () => {
  it('each principal reaches the upstream with a token of its own subject and the upstream audience, exchanged once', async () => {
    const tokens = { bob: await idp.mint('bob'), carol: await idp.mint('carol') };
    for (let i = 0; i < 3; i++) {
      for (const [who, jwt] of Object.entries(tokens))
        expect((await whoami('api', jwt)).result).toEqual({ sub: who, aud: upstream.resource });
    }
    expect(upstream.requests.length).toBeGreaterThan(0);
    for (const r of upstream.requests) expect(r.aud).toBe(upstream.resource);
    expect(new Set(upstream.requests.map((r) => r.sub))).toEqual(new Set(['bob', 'carol']));
    const exchanges = as.records.exchanges.filter((e) => e.audience === upstream.resource);
    expect(exchanges.map((e) => e.subject).sort()).toEqual(['bob', 'carol']);
  });

  it('answers of an upstream that got the caller token are private to the caller, whatever cache.scope says', async () => {
    const auth = { authorization: `Bearer ${await idp.mint('bob')}` };
    for (const method of ['tools/list', 'server/discover']) {
      const r = await rpc(gw.url('api'), method, {}, { headers: auth });
      expect(r.body.result).toMatchObject({ resultType: 'complete', cacheScope: 'private' });
    }
  });

  it('the token endpoint down: -32603 upstream-authorization, never a token; back: the call works', async () => {
    const dave = await idp.mint('dave');
    await as.down();
    try {
      const down = await whoami('api', dave);
      expect(down.error).toMatchObject({ code: -32603, data: { upstream: 'api', reason: 'upstream-authorization' } });
      expect(JSON.stringify(down.error)).not.toContain(dave);
    } finally {
      await as.up();
    }
    expect((await whoami('api', dave)).result).toEqual({ sub: 'dave', aud: upstream.resource });
  });
});

describe('stdio upstream with per-user credentials', () => {
  it('two principals get two children, each with its own exchanged token in its environment, reaped once idle', async () => {
    const seen: Record<string, any>[] = [];
    for (const who of ['erin', 'frank']) {
      const jwt = await idp.mint(who);
      const a = (await whoami('local', jwt)).result!;
      const b = (await whoami('local', jwt)).result!;
      expect(a.sub).toBe(who);
      expect(decodeJwt(a.token)).toMatchObject({ iss: as.issuer, sub: who, aud: STDIO_AUDIENCE });
      // Reused: the same child for the same principal.
      expect(b.pid).toBe(a.pid);
      seen.push(a);
    }
    expect(seen[0]!.pid).not.toBe(seen[1]!.pid);
    expect(seen[0]!.token).not.toBe(seen[1]!.token);
    const running = (pid: number) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    };
    expect(await eventually(() => seen.every((s) => !running(s.pid)), 10_000)).toBe(true);
  });

  it('a 2026-07-28 stdio upstream (one child for every caller) refuses calls and subscriptions alike', async () => {
    const headers = { authorization: `Bearer ${await idp.mint('hank')}` };
    const refusal = { code: -32603, data: { upstream: 'modernLocal', reason: 'upstream-authorization' } };
    const r = await rpc(gw.url('modernLocal'), 'tools/call', { name: 'echo', arguments: { text: 'x' } }, { headers });
    expect(r.body.error).toMatchObject(refusal);
    const sub = await listen(gw.url('modernLocal'), { toolsListChanged: true }, { headers });
    sub.close();
    expect(sub.messages[0]?.error).toMatchObject(refusal);
  });

  it('with protocol auto, the era probe child (configured env only) is not the first caller child', async () => {
    const got = (await whoami('probed', await idp.mint('gina'))).result!;
    expect(got.sub).toBe('gina');
    expect(decodeJwt(got.token)).toMatchObject({ sub: 'gina', aud: STDIO_AUDIENCE });
  });
});

describe('the era of an upstream probed without the caller credential', () => {
  it('a 401 to a legacy session of a caller without a grant is not remembered as the legacy era', async () => {
    const { client } = await elicitingClient(
      gw.url('modernGranted'),
      { authorization: `Bearer ${await idp.mint('ida')}` },
      false,
      async () => ({ action: 'cancel' }),
    );
    await client.close();
    expect(gw.gateway.upstreams.get('modernGranted')!.settledEra()).toBeUndefined();
  });
});

describe('a 2026-07-28 upstream with token exchange', () => {
  it('gets each caller token from the era probe on; a refused token is dropped and exchanged again', async () => {
    const call = async (jwt: string) =>
      (await rpc(gw.url('modern'), 'tools/call', { name: 'hello', arguments: {} }, { headers: { authorization: `Bearer ${jwt}` } })).body;
    const grace = await idp.mint('grace');
    expect((await call(grace)).result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'hello' }] });
    expect(modern.seen.map((s) => [s.method, s.sub])).toEqual([
      ['server/discover', 'grace'],
      ['tools/call', 'grace'],
    ]);
    expect(modern.seen.every((s) => s.aud === modern.url)).toBe(true);

    const heidi = await idp.mint('heidi');
    expect((await call(heidi)).result).toMatchObject({ resultType: 'complete' });
    const exchanged = () => as.records.exchanges.filter((e) => e.subject === 'heidi' && e.audience === modern.url).length;
    expect(exchanged()).toBe(1);
    modern.audience = 'https://someone-else.example/mcp';
    const refused = await call(heidi);
    expect(refused.error).toMatchObject({ code: -32603, data: { upstream: 'modern', reason: 'upstream-authorization' } });
    expect(refused.error.message).toContain("refused the user's token (HTTP 401)");
    modern.audience = modern.url;
    expect((await call(heidi)).result).toMatchObject({ resultType: 'complete' });
    expect(exchanged()).toBe(2);
  });
});

describe('an HTTP+SSE upstream that refuses the exchanged token', () => {
  it('-32603 upstream-authorization, and the next call exchanges again', async () => {
    const refusing = createServer((_req, res) => res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"' }).end());
    await new Promise<void>((r) => refusing.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(refusing.address() as AddressInfo).port}/sse`;
    const g = await startGateway({
      auth: idp.auth,
      upstreams: {
        old: { transport: 'sse', url, credentials: peers.credentials('tokenExchange') },
      },
    });
    try {
      const judy = await idp.mint('judy');
      const exchanged = () => as.records.exchanges.filter((e) => e.subject === 'judy').length;
      for (const n of [1, 2]) {
        const r = await rpc(g.url('old'), 'tools/list', {}, { headers: { authorization: `Bearer ${judy}` } });
        expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'old', reason: 'upstream-authorization' } });
        expect(exchanged()).toBe(n);
      }
    } finally {
      await g.close();
      refusing.close();
    }
  });
});
