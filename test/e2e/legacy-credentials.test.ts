/**
 * Legacy clients (the official v1 SDK client, 2025-11-25) on upstreams with per-user credentials,
 * against real peers: an oidc-provider authorization server with RFC 8693, a protected v1 SDK
 * upstream that verifies its tokens, and headless chromium walking the consent. The consent gate
 * (src/router/consent-gate.ts) asks in url mode, or answers -32042 to a client without it; a
 * `tokenExchange` upstream gets each caller's own exchanged token.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { elicitingClient } from '../helpers/v1client.js';
import { describeWith } from '../helpers/installed.js';
import {
  consentInBrowser,
  protectedStdio,
  startOAuthPeers,
  type CallerIdp,
  type OAuthPeers,
  type ProtectedUpstream,
} from '../helpers/oauth.js';

let peers: OAuthPeers;
let upstream: ProtectedUpstream;
let idp: CallerIdp;
let gw: TestGateway;

beforeAll(async () => {
  peers = await startOAuthPeers({ accessTokenTtlSec: 300 });
  ({ idp, upstream } = peers);
  const exchange = peers.credentials('tokenExchange');
  gw = await startGateway(
    peers.gatewayConfig(
      {
        up: peers.upstreamConfig('oauth'),
        tx: peers.upstreamConfig('tokenExchange'),
        local: {
          ...protectedStdio('UPSTREAM_TOKEN'),
          protocol: 'legacy',
          credentials: { ...exchange, audience: 'urn:test:stdio-upstream', env: 'UPSTREAM_TOKEN' },
        },
      },
      { credentials: { consentWaitMs: 30_000 }, federation: { enabled: true } },
    ),
  );
});
afterAll(async () => {
  await gw?.close();
  await peers?.close();
});

/**
 * The v1 SDK client of user `sub` (its JWT for the gateway) at `upstreamName`, declaring url-mode
 * elicitation or not; `onElicit` answers the gateway's `elicitation/create`.
 */
async function legacyClient(sub: string, upstreamName: string, urlMode: boolean, onElicit: (p: any) => Promise<Record<string, unknown>>) {
  const url = upstreamName === '*' ? `${gw.base}/mcp` : gw.url(upstreamName);
  return elicitingClient(url, { authorization: `Bearer ${await idp.mint(sub)}` }, urlMode, onElicit);
}

/** What the upstream's `whoami` tool says about the token it got. */
async function whoami(client: Client, name = 'whoami'): Promise<Record<string, unknown>> {
  const r = await client.callTool({ name, arguments: {} });
  return JSON.parse((r.content as { text: string }[])[0]!.text) as Record<string, unknown>;
}

/** The subjects of the upstream's accepted `tools/call` requests since `from`. */
const callSubjects = (from: number) =>
  upstream.requests
    .slice(from)
    .filter((r) => r.method === 'tools/call')
    .map((r) => r.sub);

describeWith(['chromium'], 'a legacy client on an oauth upstream (Debian chromium)', () => {
  it('url mode: the first call asks consent with elicitation/create, the call runs with the user’s token, the next asks nothing', async () => {
    const asked: any[] = [];
    const { client, completed } = await legacyClient('alice', 'up', true, async (params) => {
      asked.push(params);
      const landed = await consentInBrowser(params.url, { login: 'alice' });
      expect(landed.status).toBe(200);
      return { action: 'accept' };
    });
    const from = upstream.requests.length;
    expect(await whoami(client)).toEqual({ sub: 'alice', aud: upstream.resource });
    expect(asked).toEqual([
      {
        mode: 'url',
        message: expect.stringContaining("'up'"),
        url: expect.stringMatching(/\/oauth\/start\?/),
        elicitationId: expect.any(String),
      },
    ]);
    expect(new URL(asked[0].url).origin).toBe(gw.base);
    expect(completed).toEqual([asked[0].elicitationId]);
    expect(callSubjects(from)).toEqual(['alice']);
    expect(await whoami(client)).toMatchObject({ sub: 'alice' });
    expect(asked).toHaveLength(1);
    await client.close();
  });

  it('the user denies access at the authorization server: the call ends at once with the reason, not after consentWaitMs', async () => {
    const { client } = await legacyClient('dora', 'up', true, async (params) => {
      const landed = await consentInBrowser(params.url, { login: 'dora', deny: true });
      expect(landed.status).toBe(400);
      return { action: 'accept' };
    });
    const started = Date.now();
    const err = await client.callTool({ name: 'whoami', arguments: {} }).catch((e: unknown) => e);
    // consentWaitMs is 30 s in this file: the denial recorded at the callback ends the wait.
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(err).toBeInstanceOf(McpError);
    expect((err as McpError).code).toBe(-32603);
    expect((err as McpError).message).toMatch(/access was denied/);
    expect((err as McpError).data).toMatchObject({ upstream: 'up', reason: 'upstream-authorization' });
    await client.close();
  });

  it('without url mode: -32042 with the consent URL; after the consent in the browser the retry goes through', async () => {
    const { client } = await legacyClient('bob', 'up', false, async () => ({ action: 'decline' }));
    const first = (await client.callTool({ name: 'whoami', arguments: {} }).catch((e: unknown) => e)) as McpError;
    expect(first).toBeInstanceOf(McpError);
    expect(first.code).toBe(-32042);
    const elicitations = (first.data as { elicitations: { mode: string; url: string; elicitationId: string }[] }).elicitations;
    expect(elicitations).toEqual([
      { mode: 'url', message: expect.any(String), url: expect.any(String), elicitationId: expect.any(String) },
    ]);
    expect((await consentInBrowser(elicitations[0]!.url, { login: 'bob' })).status).toBe(200);
    const from = upstream.requests.length;
    expect(await whoami(client)).toEqual({ sub: 'bob', aud: upstream.resource });
    expect(callSubjects(from)).toEqual(['bob']);
    await client.close();
  });
});

describeWith(['chromium'], 'legacy clients on the federated /mcp with an oauth member (Debian chromium)', () => {
  it('lists leave the member out until consent; a call asks in url mode with an elicitationId, waits for the grant, then runs as the user', async () => {
    const asked: any[] = [];
    let browsed: Promise<{ status: number }> | undefined;
    // As a client does: accept at once (the user opens the URL), the consent completes afterwards.
    const { client, completed } = await legacyClient('erin', '*', true, async (params) => {
      asked.push(params);
      browsed = consentInBrowser(params.url, { login: 'erin' });
      return { action: 'accept' };
    });
    const before = (await client.listTools()).tools.map((t) => t.name);
    expect(before).toContain('tx_whoami');
    expect(before).not.toContain('up_whoami');
    const from = upstream.requests.length;
    expect(await whoami(client, 'up_whoami')).toEqual({ sub: 'erin', aud: upstream.resource });
    expect(asked).toEqual([
      { mode: 'url', message: expect.any(String), url: expect.stringMatching(/\/oauth\/start\?/), elicitationId: expect.any(String) },
    ]);
    expect((await browsed)!.status).toBe(200);
    expect(completed).toEqual([asked[0].elicitationId]);
    expect(callSubjects(from)).toEqual(['erin']);
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('up_whoami');
    await client.close();
  });

  it('a client without url mode gets -32042 with the consent URL; its retry after the consent goes through', async () => {
    const { client } = await legacyClient('frank', '*', false, async () => ({ action: 'decline' }));
    const first = (await client.callTool({ name: 'up_whoami', arguments: {} }).catch((e: unknown) => e)) as McpError;
    expect(first).toBeInstanceOf(McpError);
    expect(first.code).toBe(-32042);
    const [elicitation] = (first.data as { elicitations: { url: string }[] }).elicitations;
    expect(elicitation).toEqual({ mode: 'url', message: expect.any(String), url: expect.any(String), elicitationId: expect.any(String) });
    expect((await consentInBrowser(elicitation!.url, { login: 'frank' })).status).toBe(200);
    expect(await whoami(client, 'up_whoami')).toEqual({ sub: 'frank', aud: upstream.resource });
    await client.close();
  });
});

describe('legacy clients on a tokenExchange upstream', () => {
  it('each client’s upstream requests carry its own exchanged token', async () => {
    const carol = await legacyClient('carol', 'tx', false, async () => ({ action: 'decline' }));
    const dave = await legacyClient('dave', 'tx', false, async () => ({ action: 'decline' }));
    const from = upstream.requests.length;
    expect(await whoami(carol.client)).toEqual({ sub: 'carol', aud: upstream.resource });
    expect(await whoami(dave.client)).toEqual({ sub: 'dave', aud: upstream.resource });
    expect(await whoami(carol.client)).toMatchObject({ sub: 'carol' });
    expect(callSubjects(from)).toEqual(['carol', 'dave', 'carol']);
    await carol.client.close();
    await dave.client.close();
  });

  it('on a stdio upstream each session has its own child with its own exchanged token in its environment', async () => {
    const carol = await legacyClient('carol', 'local', false, async () => ({ action: 'decline' }));
    const dave = await legacyClient('dave', 'local', false, async () => ({ action: 'decline' }));
    const c = await whoami(carol.client);
    const d = await whoami(dave.client);
    expect(c).toMatchObject({ sub: 'carol', aud: 'urn:test:stdio-upstream' });
    expect(d).toMatchObject({ sub: 'dave', aud: 'urn:test:stdio-upstream' });
    expect(c.pid).not.toBe(d.pid);
    await carol.client.close();
    await dave.client.close();
  });
});
