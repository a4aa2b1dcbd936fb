/**
 * RFC 8693 token exchange upstream credentials (docs/security.md, "Upstream credentials"), against
 * real peers: an oidc-provider authorization server with token exchange, a protected v1 SDK
 * upstream over Streamable HTTP that records whose token each request carries, and the stdio
 * fixture whose `whoami` reads its token from its environment. Each principal's upstream requests
 * carry a token of its own subject and the upstream's audience, exchanged once and cached; a token
 * endpoint that is down is a clear error until it is back; on stdio each principal has a child of its own.
 */
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { scaled } from '../helpers/budget.js';
import { eventually } from '../helpers/fixture.js';
import {
  callerIdp,
  protectedStdio,
  startAuthServer,
  startProtectedUpstream,
  type AuthServer,
  type CallerIdp,
  type ProtectedUpstream,
} from '../helpers/oauth.js';

const STDIO_AUDIENCE = 'urn:test:stdio-upstream';

let idp: CallerIdp;
let as: AuthServer;
let upstream: ProtectedUpstream;
let gw: TestGateway;

beforeAll(async () => {
  idp = await callerIdp();
  as = await startAuthServer({ subjectIssuer: idp });
  upstream = await startProtectedUpstream({ issuer: as.issuer, jwksUri: as.jwksUri });
  const exchange = { mode: 'tokenExchange', tokenEndpoint: as.tokenEndpoint, ...as.exchangeClient };
  gw = await startGateway({
    auth: idp.auth,
    upstreams: {
      api: { transport: 'streamable-http', url: upstream.url, protocol: 'legacy', credentials: exchange },
      local: {
        ...protectedStdio('UPSTREAM_TOKEN'),
        protocol: 'legacy',
        idleSessionMs: 1500,
        credentials: { ...exchange, audience: STDIO_AUDIENCE, env: 'UPSTREAM_TOKEN' },
      },
    },
  });
}, scaled(60_000));

afterAll(async () => {
  await gw?.close();
  await upstream?.close();
  await as?.close();
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
});
