/**
 * The list cache of 2026-07-28 upstreams (src/upstream/list-cache.ts) and the caching hints the
 * gateway sends: a `tools/list` answered from the cache within the upstream's `ttlMs` (the upstream
 * counts its requests in its log), dropped on a list change an open listen brings, never shared
 * across principals when `private`; served to legacy clients through the reverse bridge; the
 * merged hints of `/mcp`; `ttlMs: 0` on a legacy upstream's list nobody listens to; the metric and
 * the admin page; a forwarded token answered only from what the upstream answered to that token
 * (every caller being `anonymous` without `auth`).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALICE, BOB, envelope, listen, rpc, startGateway, TWO_KEYS, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio, startModernHttp } from '../helpers/fixture.js';

/** The envelope of a client named `name` (the fixture lists `hello_<name>` for it). */
const as = (name: string) => envelope({}, { 'io.modelcontextprotocol/clientInfo': { name, version: '1.0.0' } });
const names = (r: { body: any }) => (r.body.result.tools as { name: string }[]).map((t) => t.name);

describe('the list cache of 2026-07-28 upstreams', () => {
  let priv: Awaited<ReturnType<typeof startModernHttp>>;
  let pub: Awaited<ReturnType<typeof startModernHttp>>;
  let gw: TestGateway;
  const privLog = new FixtureLog();
  const pubLog = new FixtureLog();
  /** `tools/list` requests the upstream of `log` received. */
  const listed = (log: FixtureLog) => log.of('http').filter((e) => e.mcpMethodHeader === 'tools/list').length;

  beforeAll(async () => {
    [priv, pub] = await Promise.all([
      startModernHttp(privLog, { FIXTURE_LIST_CACHE: JSON.stringify({ ttlMs: 60_000, cacheScope: 'private' }) }),
      startModernHttp(pubLog, { FIXTURE_LIST_CACHE: JSON.stringify({ ttlMs: 30_000, cacheScope: 'public' }) }),
    ]);
    gw = await startGateway({
      auth: TWO_KEYS,
      admin: { enabled: true, principals: ['apikey:alice'] },
      federation: { enabled: true, prefixes: { priv: 'p_', pub: 'q_' } },
      upstreams: { priv: { ...priv.config, protocol: '2026-07-28' }, pub: { ...pub.config, protocol: '2026-07-28' } },
    });
  });
  afterAll(async () => {
    await gw?.close();
    await Promise.all([priv?.stop(), pub?.stop()]);
  });

  it('answers tools/list from the cache within ttlMs: one upstream request for two client calls, the second with the ttlMs left', async () => {
    const first = await rpc(gw.url('priv'), 'tools/list', {}, { headers: ALICE, meta: as('alice-app') });
    expect(first.body.result).toMatchObject({ resultType: 'complete', ttlMs: 60_000, cacheScope: 'private' });
    const second = await rpc(gw.url('priv'), 'tools/list', {}, { headers: ALICE, meta: as('alice-app') });
    expect(listed(privLog)).toBe(1);
    expect(names(second)).toEqual(names(first));
    expect(names(second)).toContain('hello_alice-app');
    expect(second.body.result.cacheScope).toBe('private');
    expect(second.body.result.ttlMs).toBeGreaterThan(0);
    expect(second.body.result.ttlMs).toBeLessThanOrEqual(60_000);
  });

  it('never shares a private list across principals; a public one is shared', async () => {
    const before = listed(privLog);
    const bob = await rpc(gw.url('priv'), 'tools/list', {}, { headers: BOB, meta: as('bob-app') });
    expect(names(bob)).toContain('hello_bob-app');
    expect(names(bob)).not.toContain('hello_alice-app');
    expect(listed(privLog)).toBe(before + 1);
    // Each principal is answered from its own entry.
    const alice = await rpc(gw.url('priv'), 'tools/list', {}, { headers: ALICE, meta: as('alice-app') });
    const bobAgain = await rpc(gw.url('priv'), 'tools/list', {}, { headers: BOB, meta: as('bob-app') });
    expect(names(alice)).not.toContain('hello_bob-app');
    expect(names(bobAgain)).not.toContain('hello_alice-app');
    expect(listed(privLog)).toBe(before + 1);

    await rpc(gw.url('pub'), 'tools/list', {}, { headers: ALICE, meta: as('alice-app') });
    const shared = await rpc(gw.url('pub'), 'tools/list', {}, { headers: BOB, meta: as('bob-app') });
    expect(shared.body.result.cacheScope).toBe('public');
    expect(listed(pubLog)).toBe(1);
  });

  it('a list change an open listen brings drops the kept list: the next tools/list goes upstream and has the new tool', async () => {
    await rpc(gw.url('priv'), 'tools/list', {}, { headers: ALICE, meta: as('alice-app') });
    const before = listed(privLog);
    const kept = await rpc(gw.url('priv'), 'tools/list', {}, { headers: ALICE, meta: as('alice-app') });
    expect(listed(privLog)).toBe(before);
    expect(names(kept)).not.toContain('listed_1');
    const s = await listen(gw.url('priv'), { toolsListChanged: true }, { headers: ALICE });
    expect((await s.next()).params.notifications).toEqual({ toolsListChanged: true });
    const added = await rpc(gw.url('priv'), 'tools/call', { name: 'add_listed_tool', arguments: {} }, { headers: ALICE });
    expect(added.body.result.content[0].text).toBe('listed_1');
    expect((await s.next()).method).toBe('notifications/tools/list_changed');
    s.close();
    for (const [who, client] of [
      [ALICE, 'alice-app'],
      [BOB, 'bob-app'],
    ] as const) {
      const r = await rpc(gw.url('priv'), 'tools/list', {}, { headers: who, meta: as(client) });
      expect(names(r)).toContain('listed_1');
      expect(r.body.result.ttlMs).toBe(60_000);
    }
    expect(listed(privLog)).toBe(before + 2);
  });

  it('answers a legacy client (reverse bridge) from the same cache, server/discover included', async () => {
    await rpc(gw.url('priv'), 'tools/list', {}, { headers: BOB, meta: as('bob-app') });
    const client = new Client({ name: 'legacy-app', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(gw.url('priv')), { requestInit: { headers: BOB } }));
    const discovers = privLog.of('http').filter((e) => e.mcpMethodHeader === 'server/discover').length;
    const before = listed(privLog);
    const a = await client.listTools();
    const b = await client.listTools();
    await client.close();
    // Bob's kept list (same principal, same client capabilities sent upstream): nothing went upstream.
    expect(a.tools.map((t) => t.name)).toContain('hello_bob-app');
    expect(b.tools.map((t) => t.name)).toEqual(a.tools.map((t) => t.name));
    expect(listed(privLog)).toBe(before);
    // A second session's initialize is answered from the kept server/discover.
    const again = new Client({ name: 'legacy-app', version: '1.0.0' });
    await again.connect(new StreamableHTTPClientTransport(new URL(gw.url('priv')), { requestInit: { headers: BOB } }));
    await again.close();
    expect(privLog.of('http').filter((e) => e.mcpMethodHeader === 'server/discover').length).toBe(discovers);
  });

  it('on /mcp the merged list has the smallest ttlMs of its parts, private when any part is', async () => {
    const merged = await rpc(`${gw.base}/mcp`, 'tools/list', {}, { headers: ALICE, meta: as('alice-app') });
    expect(merged.body.result.tools.map((t: { name: string }) => t.name)).toEqual(
      expect.arrayContaining(['p_hello_alice-app', 'q_hello_alice-app']),
    );
    expect(merged.body.result.cacheScope).toBe('private');
    expect(merged.body.result.ttlMs).toBeGreaterThan(0);
    expect(merged.body.result.ttlMs).toBeLessThanOrEqual(30_000);
  });

  it('counts hits and misses in mrtr_list_cache_requests_total and shows the hit rate on the admin page', async () => {
    const metrics = await (await fetch(`${gw.base}/metrics`)).text();
    const count = (upstream: string, result: string) =>
      Number(
        new RegExp(`mrtr_list_cache_requests_total\\{upstream="${upstream}",method="tools/list",result="${result}"\\} (\\d+)`).exec(
          metrics,
        )?.[1] ?? 0,
      );
    expect(count('priv', 'hit')).toBeGreaterThanOrEqual(4);
    expect(count('priv', 'miss')).toBe(listed(privLog));
    const { upstreams } = await (await fetch(`${gw.base}/admin/api/upstreams`, { headers: ALICE })).json();
    const view = upstreams.find((u: { name: string }) => u.name === 'priv');
    expect(view.listCache.hits).toBeGreaterThanOrEqual(count('priv', 'hit'));
    expect(view.listCache.entries).toBeGreaterThan(0);
    const page = await (await fetch(`${gw.base}/admin`, { headers: ALICE })).text();
    const { hits, misses } = view.listCache;
    expect(page).toContain(`${Math.round((100 * hits) / (hits + misses))} % (${hits} of ${hits + misses})`);
  });
});

describe("the list cache of a 2026-07-28 upstream that gets each caller's own token (forwardAuthorization, no auth)", () => {
  let srv: Awaited<ReturnType<typeof startModernHttp>>;
  let gw: TestGateway;
  const log = new FixtureLog();
  /** `method` requests the upstream received with `token`. */
  const asked = (method: string, token: string) =>
    log.of('http').filter((e) => e.mcpMethodHeader === method && e.authorization === `Bearer ${token}`).length;
  const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

  beforeAll(async () => {
    const refusedFile = `${log.file}.refused`;
    writeFileSync(refusedFile, 'revoked-token\n');
    srv = await startModernHttp(log, {
      FIXTURE_LIST_CACHE: JSON.stringify({ ttlMs: 60_000, cacheScope: 'private' }),
      FIXTURE_REFUSED_FILE: refusedFile,
    });
    gw = await startGateway({ upstreams: { fwd: { ...srv.config, protocol: '2026-07-28', forwardAuthorization: true } } });
  });
  afterAll(async () => {
    await gw?.close();
    await srv?.stop();
  });

  it('a kept private list serves only the token it was fetched with: a revoked token is refused upstream, another token gets its own list', async () => {
    const a = await rpc(gw.url('fwd'), 'tools/list', {}, { headers: bearer('token-of-A'), meta: as('userA') });
    expect(names(a)).toContain('hello_userA');
    // The same token again: from the cache.
    const again = await rpc(gw.url('fwd'), 'tools/list', {}, { headers: bearer('token-of-A'), meta: as('userA') });
    expect(names(again)).toEqual(names(a));
    expect(asked('tools/list', 'token-of-A')).toBe(1);

    const revoked = await rpc(gw.url('fwd'), 'tools/list', {}, { headers: bearer('revoked-token'), meta: as('userB') });
    expect(revoked.body.result).toBeUndefined();
    // A refused credential, not a protocol failure: the upstream's era and everyone's kept lists stay.
    expect(revoked.body.error.data?.reason).not.toBe('protocol');
    expect(revoked.body.error.message).not.toContain('legacy server');
    expect(asked('tools/list', 'revoked-token')).toBe(1);
    const kept = await rpc(gw.url('fwd'), 'tools/list', {}, { headers: bearer('token-of-A'), meta: as('userA') });
    expect(names(kept)).toEqual(names(a));
    expect(asked('tools/list', 'token-of-A')).toBe(1);

    const c = await rpc(gw.url('fwd'), 'tools/list', {}, { headers: bearer('token-of-C'), meta: as('userC') });
    expect(names(c)).toContain('hello_userC');
    expect(names(c)).not.toContain('hello_userA');
    expect(asked('tools/list', 'token-of-C')).toBe(1);
  });

  it("a legacy session's initialize is answered from a kept server/discover only for the token it was fetched with", async () => {
    const session = async (token: string) => {
      const client = new Client({ name: 'legacy-app', version: '1.0.0' });
      await client.connect(new StreamableHTTPClientTransport(new URL(gw.url('fwd')), { requestInit: { headers: bearer(token) } }));
      const server = client.getServerVersion()?.name;
      const tools = await client.listTools().catch((e: Error) => e);
      await client.close();
      return { server, tools };
    };
    expect((await session('token-of-A')).server).toBe('modern-fixture');
    const discovers = asked('server/discover', 'token-of-A');
    expect((await session('token-of-A')).server).toBe('modern-fixture');
    expect(asked('server/discover', 'token-of-A')).toBe(discovers);
    // The revoked token's initialize went upstream (refused there), not to token-of-A's kept answer.
    const revoked = await session('revoked-token');
    expect(revoked.server).not.toBe('modern-fixture');
    expect(revoked.tools).toBeInstanceOf(Error);
    expect(asked('server/discover', 'revoked-token')).toBeGreaterThan(0);
  });
});

describe('caching hints of a legacy upstream', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        changing: { ...fixtureStdio(), cache: { ttlMs: 30_000 } },
        fixed: { ...fixtureStdio(undefined, { FIXTURE_NO_LIST_CHANGED: '1' }), cache: { ttlMs: 30_000 } },
      },
    });
  });
  afterAll(() => gw?.close());

  it('ttlMs 0 on a list the upstream declared listChanged for while the caller listens to none of its changes; cache.ttlMs otherwise', async () => {
    const ttl = async (name: string) => (await rpc(gw.url(name), 'tools/list')).body.result.ttlMs;
    expect(await ttl('fixed')).toBe(30_000);
    expect(await ttl('changing')).toBe(0);
    const s = await listen(gw.url('changing'), { toolsListChanged: true });
    expect((await s.next()).params.notifications).toEqual({ toolsListChanged: true });
    expect(await ttl('changing')).toBe(30_000);
    // A listen for another list's changes does not count.
    expect((await rpc(gw.url('changing'), 'prompts/list')).body.result.ttlMs).toBe(0);
    s.close();
    await expect.poll(() => ttl('changing')).toBe(0);
  });
});
