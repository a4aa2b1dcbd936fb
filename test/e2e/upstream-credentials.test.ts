/**
 * Per-user OAuth upstream credentials for 2026-07-28 clients (docs/security.md, "Upstream
 * credentials"), against real peers: an oidc-provider authorization server, a protected v1 SDK
 * upstream that verifies its tokens (issuer, audience, expiry) and records who called, headless
 * chromium as the user. The first call gets a URL-mode `input_required` round; consent in the
 * browser; the retry runs with the user's own token; refresh without a round; revocation, a wrong
 * audience and bad consent states; federation.
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { listen, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually } from '../helpers/fixture.js';
import { describeWith } from '../helpers/installed.js';
import { scaled } from '../helpers/budget.js';
import {
  consentInBrowser,
  startProtectedUpstream,
  startOAuthPeers,
  type AuthServer,
  type CallerIdp,
  type OAuthPeers,
  type ProtectedUpstream,
} from '../helpers/oauth.js';

const URL_CAPS = { elicitation: { url: {} } };
/** Access token lifetime: a token is refreshed this long minus 30 s (the early refresh) after it was issued. */
const TTL_SEC = 40;

let peers: OAuthPeers;
let idp: CallerIdp;
let as: AuthServer;
let upstream: ProtectedUpstream;
/** An upstream that accepts only tokens for another audience. */
let strict: ProtectedUpstream;
let gw: TestGateway;

beforeAll(async () => {
  peers = await startOAuthPeers({ accessTokenTtlSec: TTL_SEC });
  ({ idp, as, upstream } = peers);
  strict = await startProtectedUpstream({ issuer: as.issuer, jwksUri: as.jwksUri, audience: 'https://someone-else.example/mcp' });
  gw = await startGateway({
    auth: idp.auth,
    federation: { enabled: true, prefixes: { gh: 'gh_' } },
    upstreams: {
      gh: peers.upstreamConfig('oauth', { protocol: 'legacy' }),
      strict: { ...peers.upstreamConfig('oauth', { protocol: 'legacy' }), url: strict.url },
    },
  });
}, scaled(60_000));

afterAll(async () => {
  await gw?.close();
  await strict?.close();
  await peers?.close();
});

/** A call of `tool` on `url` as `who` (a JWT), with the caller's clientCapabilities `caps`. */
async function call(url: string, who: string, tool: string, extra: Record<string, unknown> = {}, caps: Record<string, unknown> = URL_CAPS) {
  return rpc(url, 'tools/call', { name: tool, arguments: {}, ...extra }, { caps, headers: { authorization: `Bearer ${who}` } });
}

/** The consent round of `body`: its URL and requestState (and checks its shape). */
function consentRound(body: any): { url: string; requestState: string } {
  expect(body.result).toMatchObject({
    resultType: 'input_required',
    inputRequests: { authorization: { method: 'elicitation/create', params: { mode: 'url' } } },
  });
  const params = body.result.inputRequests.authorization.params;
  expect(params).not.toHaveProperty('elicitationId');
  expect(typeof params.message).toBe('string');
  return { url: params.url, requestState: body.result.requestState };
}

const accept = { authorization: { action: 'accept' } };

describeWith(['chromium'], 'per-user OAuth grants for a 2026-07-28 client (Debian chromium)', () => {
  it(
    'asks for consent once, runs the retry with the user token, refreshes without a round, asks again after revocation',
    async () => {
      const alice = await idp.mint('alice');
      const first = await call(gw.url('gh'), alice, 'whoami');
      expect(first.status).toBe(200);
      const round = consentRound(first.body);
      expect(round.url.startsWith(`${gw.base}/oauth/start?`)).toBe(true);
      expect(upstream.requests).toEqual([]);

      const outcome = await consentInBrowser(round.url, { login: 'alice' });
      expect(outcome.status).toBe(200);

      const retry = await call(gw.url('gh'), alice, 'whoami', { inputResponses: accept, requestState: round.requestState });
      expect(retry.body.result).toMatchObject({ resultType: 'complete' });
      expect(JSON.parse(retry.body.result.content[0].text)).toEqual({ sub: 'alice', aud: upstream.resource });
      expect(upstream.requests.every((r) => r.sub === 'alice' && r.aud === upstream.resource)).toBe(true);

      // The same state again: spent.
      const replayed = await call(gw.url('gh'), alice, 'whoami', { inputResponses: accept, requestState: round.requestState });
      expect(replayed.body.error).toMatchObject({ code: -32602 });

      // The next call asks nothing.
      const next = await call(gw.url('gh'), alice, 'echo', { arguments: { text: 'hi' } });
      expect(next.body.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'hi' }] });

      // Once the access token is about to expire, the next call refreshes it, without a round.
      const firstExp = upstream.requests[0]!.tokenExpMs;
      expect(as.records.refreshes).toEqual([]);
      await eventually(() => Date.now() > firstExp - 29_000, TTL_SEC * 1000, 200);
      const later = await call(gw.url('gh'), alice, 'whoami');
      expect(later.body.result).toMatchObject({ resultType: 'complete' });
      expect(as.records.refreshes.map((r) => r.sub)).toEqual(['alice']);
      expect(upstream.requests.at(-1)!.tokenExpMs).toBeGreaterThan(firstExp);

      // Revoked by its principal: a new consent round.
      const revoked = await fetch(`${gw.base}/oauth/grants/gh`, { method: 'DELETE', headers: { authorization: `Bearer ${alice}` } });
      expect(revoked.status).toBe(204);
      consentRound((await call(gw.url('gh'), alice, 'whoami')).body);
    },
    scaled(120_000),
  );

  it(
    'a federated call gets the same round and its retry on /mcp runs with the user token',
    async () => {
      const bob = await idp.mint('bob');
      const first = await call(`${gw.base}/mcp`, bob, 'gh_whoami');
      const round = consentRound(first.body);
      expect((await consentInBrowser(round.url, { login: 'bob' })).status).toBe(200);
      const retry = await call(`${gw.base}/mcp`, bob, 'gh_whoami', { inputResponses: accept, requestState: round.requestState });
      expect(retry.body.result).toMatchObject({ resultType: 'complete' });
      expect(JSON.parse(retry.body.result.content[0].text)).toEqual({ sub: 'bob', aud: upstream.resource });
    },
    scaled(60_000),
  );

  it(
    'the official 2026-07-28 client connects, is asked through its elicitation handler, and its retry gets the result',
    async () => {
      const kim = await idp.mint('kim');
      const asked: Record<string, unknown>[] = [];
      const client = new Client(
        { name: 'consent-e2e', version: '1.0.0' },
        { capabilities: URL_CAPS as never, versionNegotiation: { mode: { pin: '2026-07-28' } } },
      );
      client.setRequestHandler('elicitation/create', async (req) => {
        asked.push(req.params as Record<string, unknown>);
        const outcome = await consentInBrowser(String((req.params as { url: string }).url), { login: 'kim' });
        return { action: outcome.status === 200 ? 'accept' : 'cancel' } as never;
      });
      const transport = new StreamableHTTPClientTransport(new URL(gw.url('gh')), {
        requestInit: { headers: { authorization: `Bearer ${kim}` } },
      });
      await client.connect(transport);
      try {
        const r = (await client.callTool({ name: 'whoami', arguments: {} })) as { content: { text: string }[] };
        expect(JSON.parse(r.content[0]!.text)).toEqual({ sub: 'kim', aud: upstream.resource });
        expect(asked).toHaveLength(1);
        expect(asked[0]).toMatchObject({ mode: 'url' });
      } finally {
        await client.close();
      }
    },
    scaled(60_000),
  );

  it('subscriptions/listen holds a session with the user token; without a grant: -32603 with the consent link', async () => {
    const bob = await idp.mint('bob');
    upstream.clear();
    const sub = await listen(gw.url('gh'), { toolsListChanged: true }, { headers: { authorization: `Bearer ${bob}` } });
    expect(sub.status).toBe(200);
    expect(await sub.next(scaled(5000))).toMatchObject({ method: 'notifications/subscriptions/acknowledged' });
    sub.close();
    expect(upstream.requests.length).toBeGreaterThan(0);
    expect(upstream.requests.every((r) => r.sub === 'bob')).toBe(true);

    const ivan = await idp.mint('ivan');
    const refused = await listen(gw.url('gh'), { toolsListChanged: true }, { headers: { authorization: `Bearer ${ivan}` } });
    expect(refused.messages[0].error).toMatchObject({ code: -32603, data: { upstream: 'gh', reason: 'upstream-authorization' } });
    expect(refused.messages[0].error.data.url.startsWith(`${gw.base}/oauth/start?`)).toBe(true);
  });

  it(
    'a token the upstream refuses (another audience): -32603 upstream-authorization, the grant dropped, then a new round',
    async () => {
      const carol = await idp.mint('carol');
      const round = consentRound((await call(gw.url('strict'), carol, 'whoami')).body);
      expect((await consentInBrowser(round.url, { login: 'carol' })).status).toBe(200);
      const grants = await (await fetch(`${gw.base}/oauth/grants`, { headers: { authorization: `Bearer ${carol}` } })).json();
      expect(grants.grants.map((g: { upstream: string }) => g.upstream)).toEqual(['strict']);

      const retry = await call(gw.url('strict'), carol, 'whoami', { inputResponses: accept, requestState: round.requestState });
      expect(retry.body.error).toMatchObject({ code: -32603, data: { upstream: 'strict', reason: 'upstream-authorization' } });
      expect(retry.body.error.message).toContain("refused the user's token (HTTP 401)");
      expect(JSON.stringify(retry.body)).not.toMatch(/eyJ/);
      expect(strict.refusals.length).toBeGreaterThan(0);

      const grantsOf = async () =>
        (await (await fetch(`${gw.base}/oauth/grants`, { headers: { authorization: `Bearer ${carol}` } })).json()).grants;
      expect(await grantsOf()).toEqual([]);
      const again = consentRound((await call(gw.url('strict'), carol, 'whoami')).body);

      // The same on subscriptions/listen.
      expect((await consentInBrowser(again.url, { login: 'carol' })).status).toBe(200);
      expect(await grantsOf()).toHaveLength(1);
      const sub = await listen(gw.url('strict'), { toolsListChanged: true }, { headers: { authorization: `Bearer ${carol}` } });
      expect(sub.messages[0].error).toMatchObject({ code: -32603, data: { upstream: 'strict', reason: 'upstream-authorization' } });
      expect(await grantsOf()).toEqual([]);
    },
    scaled(60_000),
  );
});

it('a client without elicitation.url gets -32021 naming the capability (HTTP 400)', async () => {
  const dave = await idp.mint('dave');
  const r = await call(gw.url('gh'), dave, 'whoami', {}, { elicitation: { form: {} } });
  expect(r.status).toBe(400);
  expect(r.body.error).toMatchObject({ code: -32021, data: { requiredCapabilities: { elicitation: { url: {} } } } });
});

it('a list without a grant: -32603 upstream-authorization with the consent link, saying to call a tool; discover is answered', async () => {
  const erin = await idp.mint('erin');
  const r = await rpc(gw.url('gh'), 'tools/list', {}, { headers: { authorization: `Bearer ${erin}` } });
  expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'gh', reason: 'upstream-authorization' } });
  expect(r.body.error.message).toContain('call one of its tools to be asked');
  expect(r.body.error.data.url.startsWith(`${gw.base}/oauth/start?`)).toBe(true);

  // server/discover, which clients ask when they connect, is answered: with tools, and how to be asked.
  const d = await rpc(gw.url('gh'), 'server/discover', {}, { headers: { authorization: `Bearer ${erin}` } });
  expect(d.body.result).toMatchObject({ resultType: 'complete', supportedVersions: ['2026-07-28'], capabilities: { tools: {} }, ttlMs: 0 });
  expect(d.body.result.instructions).toContain(`${gw.base}/oauth/start?`);
});

it('a malformed answer to the consent round gets -32602 naming its key, and leaves the state usable', async () => {
  const heidi = await idp.mint('heidi');
  const round = consentRound((await call(gw.url('gh'), heidi, 'whoami')).body);
  for (const answer of ['x', { action: 'maybe' }]) {
    const bad = await call(gw.url('gh'), heidi, 'whoami', { inputResponses: { authorization: answer }, requestState: round.requestState });
    expect(bad.body.error).toMatchObject({ code: -32602, message: expect.stringContaining('inputResponses["authorization"]') });
  }
  const declined = await call(gw.url('gh'), heidi, 'whoami', {
    inputResponses: { authorization: { action: 'decline' } },
    requestState: round.requestState,
  });
  expect(declined.body.result).toMatchObject({ resultType: 'complete', isError: true });
});

it('a consent state that is forged, of another principal, for other arguments, or declined is refused or answered', async () => {
  const frank = await idp.mint('frank');
  const grace = await idp.mint('grace');
  const forged = await call(gw.url('gh'), frank, 'whoami', { inputResponses: accept, requestState: 'not-a-state' });
  expect(forged.body.error).toMatchObject({ code: -32602 });

  const round = consentRound((await call(gw.url('gh'), frank, 'whoami')).body);
  const foreign = await call(gw.url('gh'), grace, 'whoami', { inputResponses: accept, requestState: round.requestState });
  expect(foreign.body.error).toMatchObject({ code: -32602 });
  const otherArgs = await call(gw.url('gh'), frank, 'echo', { arguments: { text: 'x' }, requestState: round.requestState });
  expect(otherArgs.body.error).toMatchObject({ code: -32602 });

  // Not finished: a new round; declined: a tool error, not another round.
  const unfinished = await call(gw.url('gh'), frank, 'whoami', { inputResponses: accept, requestState: round.requestState });
  const again = consentRound(unfinished.body);
  const declined = await call(gw.url('gh'), frank, 'whoami', {
    inputResponses: { authorization: { action: 'decline' } },
    requestState: again.requestState,
  });
  expect(declined.body.result).toMatchObject({ resultType: 'complete', isError: true });
  expect(declined.body.result.content[0].text).toContain("declined authorizing upstream 'gh'");
});
