/**
 * The consent gate of legacy client sessions (src/router/consent-gate.ts): the official v1 SDK
 * client (2025-11-25) through the gateway in front of the legacy fixture (Streamable HTTP, and
 * stdio), with an `UpstreamCredentials` policy of the test's own standing in for the real one
 * (test/e2e/legacy-credentials.test.ts runs the same flows with the real policy, a real
 * authorization server and chromium).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConsentRequired, type CredentialCaller, type GrantWait, type UpstreamCredentials } from '../../src/credentials/types.js';
import type { UpstreamCredential } from '../../src/upstream/credential.js';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { elicitingClient } from '../helpers/v1client.js';
import { fixtureStdio, FixtureLog, startFixtureHttp, startModernHttp } from '../helpers/fixture.js';
import type { SpawnedServer } from '../helpers/processes.js';

/**
 * A stand-in policy: `consent` upstreams need a grant the test gives (`grant`), others exchange a
 * token per principal; every token is `tok-<principal>-<n>`.
 */
class TestCredentials implements UpstreamCredentials {
  readonly held = new Map<string, string>();
  readonly refusedFor: string[] = [];
  readonly links: string[] = [];
  private n = 0;
  constructor(private readonly consent: Set<string>) {}
  perCaller(): boolean {
    return true;
  }
  needsConsent(upstream: string): boolean {
    return this.consent.has(upstream);
  }
  grant(principal: string): string {
    const token = `tok-${principal}-${++this.n}`;
    this.held.set(principal, token);
    return token;
  }
  async resolve(upstream: string, caller: CredentialCaller): Promise<UpstreamCredential> {
    let token = this.held.get(caller.principal);
    if (!token && this.consent.has(upstream)) {
      const url = `http://127.0.0.1:1/oauth/start?link=${caller.principal}-${++this.n}`;
      this.links.push(url);
      throw new ConsentRequired(upstream, url, `el-${this.n}`, `Upstream '${upstream}' needs your consent: open the link, then retry`);
    }
    token ??= this.grant(caller.principal);
    return { key: token, headers: { authorization: `Bearer ${token}` }, env: { FIXTURE_TOKEN: token } };
  }
  async refused(_upstream: string, principal: string): Promise<void> {
    this.refusedFor.push(principal);
    this.held.delete(principal);
  }
  async waitForGrant(_upstream: string, principal: string, ms: number, signal?: AbortSignal): Promise<GrantWait> {
    const end = Date.now() + ms;
    while (!this.held.has(principal) && Date.now() < end && !signal?.aborted) await new Promise((r) => setTimeout(r, 10));
    return this.held.has(principal) ? { granted: true } : { granted: false, why: 'no grant in time' };
  }
  async grants() {
    return [];
  }
  async revoke(): Promise<boolean> {
    return false;
  }
}

const auth = {
  mode: 'apiKeys',
  keys: [
    { principal: 'alice', key: 'key-of-alice-0123456789' },
    { principal: 'bob', key: 'key-of-bob-0123456789ab' },
  ],
};
const keyOf = (principal: string) => ({
  authorization: `Bearer key-of-${principal}-${principal === 'bob' ? '0123456789ab' : '0123456789'}`,
});

/** A v1 SDK client of `principal`; `url` mode declared or not; its elicitation handler is `onElicit`. */
async function v1Client(url: string, principal: string, urlMode: boolean, onElicit: (p: any) => Promise<Record<string, unknown>>) {
  return elicitingClient(url, keyOf(principal), urlMode, onElicit);
}

/** A gateway of `upstreams` whose per-user credentials are `creds`, waiting 5 s for a grant. */
async function gatedGateway(upstreams: Record<string, unknown>, creds: UpstreamCredentials): Promise<TestGateway> {
  const gw = await startGateway({ auth, upstreams, credentials: { consentWaitMs: 5000 } });
  (gw.gateway.router as { credentials?: UpstreamCredentials }).credentials = creds;
  return gw;
}

const textOf = (r: any) => (r.content as { text: string }[]).map((c) => c.text).join('');

describe('the consent gate of legacy sessions, on the fixture over Streamable HTTP', () => {
  let upstream: SpawnedServer & { config: Record<string, unknown> };
  let gw: TestGateway;
  const log = new FixtureLog();
  const refusedFile = join(mkdtempSync(join(tmpdir(), 'refused-')), 'tokens');
  const creds = new TestCredentials(new Set(['oauth']));
  /** The Authorization headers of the upstream's tools/call requests, in order. */
  const callTokens = () =>
    log
      .of('http')
      .filter((e) => e.rpcMethod === 'tools/call')
      .map((e) => e.authorization);

  beforeAll(async () => {
    upstream = await startFixtureHttp('http', log, { FIXTURE_REFUSED_FILE: refusedFile });
    gw = await gatedGateway({ oauth: upstream.config, exchange: upstream.config }, creds);
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.stop();
  });

  it('a client with url mode: its first call asks consent in url mode, completes with its token, the next asks nothing', async () => {
    const asked: any[] = [];
    const { client, completed } = await v1Client(gw.url('oauth'), 'alice', true, async (p) => {
      asked.push(p);
      creds.grant('apikey:alice');
      return { action: 'accept' };
    });
    expect(client.getServerVersion()).toEqual({ name: 'oauth', version: 'unknown' });
    const r = await client.callTool({ name: 'env_token', arguments: {} });
    expect(textOf(r)).toBe('(unset)');
    expect(asked).toEqual([
      {
        mode: 'url',
        message: "Upstream 'oauth' needs your consent: open the link, then retry",
        url: creds.links.at(-1),
        elicitationId: expect.stringMatching(/^el-/),
      },
    ]);
    expect(completed).toEqual([asked[0].elicitationId]);
    expect(callTokens().at(-1)).toBe(`Bearer ${creds.held.get('apikey:alice')}`);
    // The upstream got the client's own initialize (replayed) and its initialized.
    const rpc = log.of('http').map((e) => e.rpcMethod);
    expect(rpc).toContain('initialize');
    expect(rpc).toContain('notifications/initialized');
    await client.callTool({ name: 'env_token', arguments: {} });
    expect(asked).toHaveLength(1);
    await client.close();
  });

  it('decline: the call gets -32603 upstream-authorization; the session stays and its next call asks again', async () => {
    let answer = 'decline';
    const { client } = await v1Client(gw.url('oauth'), 'bob', true, async () => {
      if (answer === 'accept') creds.grant('apikey:bob');
      return { action: answer };
    });
    const refused = await client.callTool({ name: 'env_token', arguments: {} }).catch((e: McpError) => e);
    expect(refused).toBeInstanceOf(McpError);
    expect((refused as McpError).code).toBe(-32603);
    expect((refused as McpError).data).toEqual({ upstream: 'oauth', reason: 'upstream-authorization' });
    expect((refused as McpError).message).toContain('the user chose decline');
    answer = 'accept';
    expect(textOf(await client.callTool({ name: 'env_token', arguments: {} }))).toBe('(unset)');
    await client.close();
    creds.held.delete('apikey:bob');
  });

  it('a client without url mode gets -32042 with the consent URL; its retry after the consent goes through', async () => {
    const { client } = await v1Client(gw.url('oauth'), 'bob', false, async () => ({ action: 'decline' }));
    const first = await client.callTool({ name: 'env_token', arguments: {} }).catch((e: McpError) => e);
    expect((first as McpError).code).toBe(-32042);
    const [elicitation] = ((first as McpError).data as { elicitations: any[] }).elicitations;
    expect(elicitation).toEqual({ mode: 'url', message: expect.any(String), url: creds.links.at(-1), elicitationId: expect.any(String) });
    const token = creds.grant('apikey:bob');
    expect(textOf(await client.callTool({ name: 'env_token', arguments: {} }))).toBe('(unset)');
    expect(callTokens().at(-1)).toBe(`Bearer ${token}`);
    await client.close();
  });

  it('an HTTP+SSE client (2024-11-05) gets -32042 too; its retry after the consent goes through with its token', async () => {
    creds.held.delete('apikey:bob');
    const client = new Client({ name: 'consent-sse', version: '1.0.0' });
    const headers = keyOf('bob');
    await client.connect(
      new SSEClientTransport(new URL(`${gw.url('oauth')}/sse`), {
        requestInit: { headers },
        eventSourceInit: { fetch: (u, init) => fetch(u, { ...init, headers: { ...(init?.headers as object), ...headers } }) },
      }),
    );
    const first = (await client.callTool({ name: 'env_token', arguments: {} }).catch((e: unknown) => e)) as McpError;
    expect(first.code).toBe(-32042);
    const token = creds.grant('apikey:bob');
    expect(textOf(await client.callTool({ name: 'env_token', arguments: {} }))).toBe('(unset)');
    expect(callTokens().at(-1)).toBe(`Bearer ${token}`);
    await client.close();
  });

  it('calls sent together while the gate opens are queued in order and all answered, after one consent', async () => {
    creds.held.delete('apikey:alice');
    let asked = 0;
    const { client } = await v1Client(gw.url('oauth'), 'alice', true, async () => {
      asked++;
      creds.grant('apikey:alice');
      return { action: 'accept' };
    });
    const calls = await Promise.all([
      client.callTool({ name: 'env_token', arguments: {} }),
      client.listTools(),
      client.callTool({ name: 'env_token', arguments: {} }),
    ]);
    expect(asked).toBe(1);
    expect(textOf(calls[0])).toBe('(unset)');
    expect(calls[1].tools.map((t) => t.name)).toContain('env_token');
    expect(textOf(calls[2])).toBe('(unset)');
    await client.close();
  });

  it('a token the upstream refuses later: -32603 upstream-authorization, the grant is dropped, the next call asks again', async () => {
    creds.held.delete('apikey:alice');
    let asked = 0;
    const { client } = await v1Client(gw.url('oauth'), 'alice', true, async () => {
      asked++;
      creds.grant('apikey:alice');
      return { action: 'accept' };
    });
    await client.callTool({ name: 'env_token', arguments: {} });
    const revoked = creds.held.get('apikey:alice')!;
    writeFileSync(refusedFile, `${revoked}\n`);
    const refused = await client.callTool({ name: 'env_token', arguments: {} }).catch((e: McpError) => e);
    expect((refused as McpError).code).toBe(-32603);
    expect((refused as McpError).data).toEqual({ upstream: 'oauth', reason: 'upstream-authorization' });
    expect((refused as McpError).message).toContain('HTTP 401');
    expect((refused as McpError).message).not.toContain(revoked);
    expect(creds.refusedFor).toContain('apikey:alice');
    expect(textOf(await client.callTool({ name: 'env_token', arguments: {} }))).toBe('(unset)');
    expect(asked).toBe(2);
    expect(callTokens().at(-1)).toBe(`Bearer ${creds.held.get('apikey:alice')}`);
    await client.close();
  });

  it('a per-caller upstream without consent: each principal’s upstream requests carry its own token', async () => {
    const alice = await v1Client(gw.url('exchange'), 'alice', false, async () => ({ action: 'decline' }));
    const bob = await v1Client(gw.url('exchange'), 'bob', false, async () => ({ action: 'decline' }));
    const before = log.of('http').length;
    await alice.client.callTool({ name: 'env_token', arguments: {} });
    await bob.client.callTool({ name: 'env_token', arguments: {} });
    const seen = log
      .of('http')
      .slice(before)
      .filter((e) => e.rpcMethod === 'tools/call')
      .map((e) => e.authorization);
    expect(seen).toEqual([`Bearer ${creds.held.get('apikey:alice')}`, `Bearer ${creds.held.get('apikey:bob')}`]);
    await alice.client.close();
    await bob.client.close();
  });
});

describe('the consent gate in front of the reverse bridge (a 2026-07-28 upstream over Streamable HTTP)', () => {
  let upstream: SpawnedServer & { config: Record<string, unknown> };
  let gw: TestGateway;
  const log = new FixtureLog();
  const refusedFile = join(mkdtempSync(join(tmpdir(), 'refused-')), 'tokens');
  const creds = new TestCredentials(new Set(['modern']));
  const tokens = () =>
    log
      .of('http')
      .filter((e) => e.mcpMethodHeader === 'tools/call')
      .map((e) => e.authorization);

  beforeAll(async () => {
    upstream = await startModernHttp(log, { FIXTURE_REFUSED_FILE: refusedFile, FIXTURE_EXTRA_TOOLS: '["plain"]' });
    gw = await gatedGateway({ modern: { ...upstream.config, protocol: '2026-07-28' } }, creds);
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.stop();
  });

  it('asks consent, then every upstream request carries the token; a refused token is dropped and the next call asks again', async () => {
    let asked = 0;
    const { client, completed } = await v1Client(gw.url('modern'), 'alice', true, async () => {
      asked++;
      creds.grant('apikey:alice');
      return { action: 'accept' };
    });
    expect(textOf(await client.callTool({ name: 'plain', arguments: {} }))).toBe('plain');
    expect(asked).toBe(1);
    expect(completed).toHaveLength(1);
    const first = creds.held.get('apikey:alice')!;
    expect(tokens()).toEqual([`Bearer ${first}`]);
    writeFileSync(refusedFile, `${first}\n`);
    const refused = (await client.callTool({ name: 'plain', arguments: {} }).catch((e: unknown) => e)) as McpError;
    expect(refused.code).toBe(-32603);
    expect(refused.data).toEqual({ upstream: 'modern', reason: 'upstream-authorization' });
    expect(creds.refusedFor).toEqual(['apikey:alice']);
    expect(textOf(await client.callTool({ name: 'plain', arguments: {} }))).toBe('plain');
    expect(asked).toBe(2);
    expect(tokens().at(-1)).toBe(`Bearer ${creds.held.get('apikey:alice')}`);
    await client.close();
  });
});

describe('the consent gate in front of approvals (src/router/approval-relay.ts), on the fixture over Streamable HTTP', () => {
  let upstream: SpawnedServer & { config: Record<string, unknown> };
  let gw: TestGateway;
  const log = new FixtureLog();
  const refusedFile = join(mkdtempSync(join(tmpdir(), 'refused-')), 'tokens');
  const creds = new TestCredentials(new Set(['approved']));
  const callTokens = () =>
    log
      .of('http')
      .filter((e) => e.rpcMethod === 'tools/call')
      .map((e) => e.authorization);

  beforeAll(async () => {
    upstream = await startFixtureHttp('http', log, { FIXTURE_REFUSED_FILE: refusedFile });
    gw = await gatedGateway({ approved: { ...upstream.config, approvals: { tools: ['env_token'] } } }, creds);
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.stop();
  });

  it('consent first, then the approval form; decline runs nothing, accept runs the call with the token; after a refused token both are asked again', async () => {
    const asked: string[] = [];
    const answers = ['decline', 'accept', 'accept', 'accept'];
    const { client } = await v1Client(gw.url('approved'), 'alice', true, async (p) => {
      asked.push(p.mode);
      if (p.mode === 'url') creds.grant('apikey:alice');
      return { action: p.mode === 'url' ? 'accept' : answers.shift()! };
    });
    const declined = await client.callTool({ name: 'env_token', arguments: {} });
    expect(declined.isError).toBe(true);
    expect(asked).toEqual(['url', 'form']);
    expect(callTokens()).toEqual([]);
    expect((await client.callTool({ name: 'env_token', arguments: {} })).isError).toBeFalsy();
    expect(asked).toEqual(['url', 'form', 'form']);
    const first = creds.held.get('apikey:alice')!;
    expect(callTokens()).toEqual([`Bearer ${first}`]);
    // The upstream refuses the token of an approved call: the gate closes the relay; the next call asks consent, then approval, again.
    writeFileSync(refusedFile, `${first}\n`);
    const refused = (await client.callTool({ name: 'env_token', arguments: {} }).catch((e: unknown) => e)) as McpError;
    expect(refused.code).toBe(-32603);
    expect(asked).toEqual(['url', 'form', 'form', 'form']);
    expect((await client.callTool({ name: 'env_token', arguments: {} })).isError).toBeFalsy();
    expect(asked).toEqual(['url', 'form', 'form', 'form', 'url', 'form']);
    expect(callTokens().at(-1)).toBe(`Bearer ${creds.held.get('apikey:alice')}`);
    await client.close();
  });
});

describe('a legacy session first on a protected upstream of unknown era (protocol auto)', () => {
  let upstream: SpawnedServer & { config: Record<string, unknown> };
  let gw: TestGateway;
  const creds = new TestCredentials(new Set());

  beforeAll(async () => {
    upstream = await startModernHttp(undefined, { FIXTURE_REQUIRE_BEARER: '1', FIXTURE_EXTRA_TOOLS: '["plain"]' });
    gw = await startGateway({ auth, upstreams: { modern: { ...upstream.config, protocol: 'auto' } } });
    (gw.gateway.router as { credentials?: UpstreamCredentials }).credentials = creds;
  });
  afterAll(async () => {
    await gw?.close();
    await upstream?.stop();
  });

  it("probes the era with the caller's credential, so the upstream is found 2026-07-28 and served by the reverse bridge", async () => {
    const { client } = await v1Client(gw.url('modern'), 'alice', false, async () => ({ action: 'decline' }));
    expect(gw.legacy.list().map((s) => s.relay)).toEqual(['reverse']);
    expect(textOf(await client.callTool({ name: 'plain', arguments: {} }))).toBe('plain');
    await client.close();
  });
});

describe('the consent gate on a stdio upstream', () => {
  let gw: TestGateway;
  const creds = new TestCredentials(new Set(['oauth']));
  beforeAll(async () => {
    gw = await gatedGateway({ oauth: fixtureStdio() }, creds);
  });
  afterAll(async () => {
    await gw?.close();
  });

  it("each session's own child gets its principal's token in its environment", async () => {
    const grantOnAsk = (principal: string) => async () => {
      creds.grant(principal);
      return { action: 'accept' };
    };
    const alice = await v1Client(gw.url('oauth'), 'alice', true, grantOnAsk('apikey:alice'));
    const bob = await v1Client(gw.url('oauth'), 'bob', true, grantOnAsk('apikey:bob'));
    expect(textOf(await alice.client.callTool({ name: 'env_token', arguments: {} }))).toBe(creds.held.get('apikey:alice'));
    expect(textOf(await bob.client.callTool({ name: 'env_token', arguments: {} }))).toBe(creds.held.get('apikey:bob'));
    await alice.client.close();
    await bob.client.close();
  });
});
