/**
 * Upstream sessions: warm reuse, capability mirroring in initialize, the maxSessions bound, a
 * crashing stdio child, a lost Streamable HTTP upstream, per-hop protocol version headers.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio, startFixtureHttp } from '../helpers/fixture.js';
import { spawnListening } from '../helpers/processes.js';
import { FIXTURE } from '../helpers/fixture.js';
import { scaled } from '../helpers/budget.js';

const gateways: TestGateway[] = [];
async function gateway(raw: Record<string, unknown>): Promise<TestGateway> {
  const g = await startGateway(raw);
  gateways.push(g);
  return g;
}
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
});

const slow = (ms = 10) => ({ name: 'slow', arguments: { ms, steps: 1 } });

describe('upstream sessions', () => {
  it('reuses one warm stdio session for sequential calls (no process per call)', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: fixtureStdio(log) } });
    for (let i = 0; i < 5; i++) {
      const r = await rpc(gw.url('f'), 'tools/call', slow());
      expect(r.body.result.content[0].text).toBe('slept 10ms');
    }
    expect(log.of('initialized')).toHaveLength(1);
    expect(new Set(log.events().map((e) => e.pid)).size).toBe(1);
  });

  it('closes a session idle for idleSessionMs; one used again before that stays open', async () => {
    const log = new FixtureLog();
    const mem = memoryLogger('info');
    const gw = await startGateway({ upstreams: { f: { ...fixtureStdio(log), idleSessionMs: 600 } } }, { log: mem.log });
    gateways.push(gw);
    const pool = gw.gateway.upstreams.get('f')!.pool;
    expect((await rpc(gw.url('f'), 'tools/call', slow())).body.result.content[0].text).toBe('slept 10ms');
    // Used again every 300 ms for 1.2 s: never idle for 600 ms, the same process throughout.
    for (let i = 0; i < 4; i++) {
      await new Promise((r) => setTimeout(r, 300));
      expect((await rpc(gw.url('f'), 'tools/call', slow())).body.result.content[0].text).toBe('slept 10ms');
    }
    expect(log.of('initialized')).toHaveLength(1);
    expect(pool.stats()).toMatchObject({ total: 1, idle: 1 });
    // Then left alone: closed about 600 ms later, and its process ends.
    const idleSince = Date.now();
    expect(await eventually(() => pool.stats().total === 0, 3000)).toBe(true);
    expect(Date.now() - idleSince).toBeGreaterThanOrEqual(500);
    expect(mem.lines().some((l) => l.msg === 'idle upstream session closed')).toBe(true);
    // The next call opens a new one.
    expect((await rpc(gw.url('f'), 'tools/call', slow())).body.result.content[0].text).toBe('slept 10ms');
    expect(log.of('initialized')).toHaveLength(2);
  });

  it('mirrors the client capabilities into initialize, one session per capability set', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: fixtureStdio(log) } });
    await rpc(gw.url('f'), 'tools/call', slow(), { caps: {} });
    await rpc(gw.url('f'), 'tools/call', slow(), { caps: { elicitation: {}, sampling: { tools: {} }, roots: {} } });
    await rpc(gw.url('f'), 'tools/call', slow(), { caps: { elicitation: { url: {} } } });
    const inits = log.of('initialized').map((e) => e.capabilities);
    expect(inits).toEqual([
      {},
      { elicitation: { form: {} }, sampling: { tools: {} }, roots: { listChanged: true } },
      { elicitation: { url: {} } },
    ]);
    expect(log.of('initialized').every((e) => e.clientInfo.name === 'mrtr-gateway')).toBe(true);
  });

  it('declares only the kinds the input policy allows, whatever the client supports', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: { ...fixtureStdio(log), input: { allow: ['elicitation'] } } } });
    await rpc(gw.url('f'), 'tools/call', slow(), { caps: { elicitation: {}, sampling: {}, roots: {} } });
    expect(log.of('initialized')[0]!.capabilities).toEqual({ elicitation: { form: {} } });
  });

  it('bounds sessions by maxSessions: a call that finds none free within queueMs gets -32603 busy, and others still complete', async () => {
    const gw = await gateway({ upstreams: { f: { ...fixtureStdio(), maxSessions: 1, timeouts: { queueMs: 300 } } } });
    const first = await rpc(gw.url('f'), 'tools/call', { name: 'ask_name', arguments: {} }, { caps: { elicitation: {} } });
    expect(first.body.result.resultType).toBe('input_required');
    const started = Date.now();
    const second = await rpc(gw.url('f'), 'tools/call', slow(), { caps: { elicitation: {} } });
    expect(second.body.error.code).toBe(-32603);
    expect(second.body.error.data).toEqual({ upstream: 'f', reason: 'busy' });
    // With auth none every caller is one principal: the message names the bound that applies.
    expect(second.body.error.message).toBe(
      "All 1 sessions of upstream 'f' stayed busy for 300 ms, with calls in flight, parked waiting for input, running as tasks or holding subscriptions/listen streams; raise maxSessions or retry later",
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    const done = await rpc(
      gw.url('f'),
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Q' } } },
      },
      { caps: { elicitation: {} } },
    );
    expect(done.body.result.content[0].text).toBe('Hello, Q!');
    const third = await rpc(gw.url('f'), 'tools/call', slow(), { caps: { elicitation: {} } });
    expect(third.body.result.content[0].text).toBe('slept 10ms');
  });

  it('notices a crashed stdio child: the call fails at once with -32603 crashed, the next call gets a fresh process', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: fixtureStdio(log) } });
    await rpc(gw.url('f'), 'tools/call', slow());
    const started = Date.now();
    const crashed = await rpc(gw.url('f'), 'tools/call', { name: 'crash', arguments: {} });
    expect(Date.now() - started).toBeLessThan(scaled(3000));
    expect(crashed.body.error.code).toBe(-32603);
    expect(crashed.body.error.data).toEqual({ upstream: 'f', reason: 'crashed' });
    const next = await rpc(gw.url('f'), 'tools/call', slow());
    expect(next.body.result.content[0].text).toBe('slept 10ms');
    expect(new Set(log.of('initialized').map((e) => e.pid)).size).toBe(2);
  });

  it('an idle stdio child that dies leaves the pool at once: no dead session is counted idle', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: fixtureStdio(log) } });
    await rpc(gw.url('f'), 'tools/call', slow());
    const pool = gw.gateway.upstreams.get('f')!.pool;
    expect(pool.stats()).toMatchObject({ total: 1, idle: 1 });
    process.kill(log.of('initialized')[0]!.pid as number, 'SIGKILL');
    expect(await eventually(() => pool.stats().total === 0 && pool.stats().idle === 0)).toBe(true);
  });

  it('an unreachable Streamable HTTP upstream: -32603 unreachable, the message gives the cause', async () => {
    const srv = await startFixtureHttp('http');
    const url = srv.config.url as string;
    await srv.stop();
    const gw = await gateway({ upstreams: { down: { transport: 'streamable-http', url } } });
    const r = await rpc(gw.url('down'), 'tools/list');
    expect(r.body.error.code).toBe(-32603);
    expect(r.body.error.data).toEqual({ upstream: 'down', reason: 'unreachable' });
    expect(r.body.error.message).toMatch(/ECONNREFUSED/);
  });

  it('fails with -32603 unreachable when the upstream command does not exist', async () => {
    const gw = await gateway({ upstreams: { f: { transport: 'stdio', command: '/nonexistent/mcp-server-xyz' } } });
    const r = await rpc(gw.url('f'), 'tools/list');
    expect(r.body.error.code).toBe(-32603);
    expect(r.body.error.data).toEqual({ upstream: 'f', reason: 'unreachable' });
    expect(r.body.error.message).toContain("'f'");
  });

  it.each(['legacy', 'auto', '2026-07-28'] as const)(
    'a stdio child that exits at once (protocol %s) is -32603 unreachable, the message quoting its stderr',
    async (protocol) => {
      const script = "process.stderr.write('Error: missing API_KEY\\n'); process.exit(3)";
      const gw = await gateway({ upstreams: { f: { transport: 'stdio', command: process.execPath, args: ['-e', script], protocol } } });
      const r = await rpc(gw.url('f'), 'tools/list');
      expect(r.body.error.code).toBe(-32603);
      expect(r.body.error.data).toMatchObject({ upstream: 'f', reason: 'unreachable', stderr: ['Error: missing API_KEY'] });
      expect(r.body.error.message).toMatch(/^Upstream 'f' could not be started or reached: .*; the process said: Error: missing API_KEY$/);
    },
  );

  it('notices a lost Streamable HTTP upstream: the call in flight fails at once, and after a restart the next call gets a fresh session', async () => {
    const log = new FixtureLog();
    const srv = await startFixtureHttp('http', log);
    try {
      const gw = await gateway({ upstreams: { f: srv.config } });
      expect((await rpc(gw.url('f'), 'tools/call', slow())).body.result.content[0].text).toBe('slept 10ms');
      const inflight = rpc(gw.url('f'), 'tools/call', slow(20_000));
      await new Promise((r) => setTimeout(r, 300));
      const killedAt = Date.now();
      srv.child.kill('SIGKILL');
      const failed = await inflight;
      expect(Date.now() - killedAt).toBeLessThan(scaled(3000));
      expect(failed.body.error.code).toBe(-32603);
      expect(failed.body.error.data.upstream).toBe('f');

      const again = await spawnListening(['--import', 'tsx', FIXTURE, 'http'], { PORT: String(srv.port), FIXTURE_LOG: log.file });
      try {
        const next = await rpc(gw.url('f'), 'tools/call', slow());
        expect(next.body.result?.content[0].text).toBe('slept 10ms');
      } finally {
        await again.stop();
      }
    } finally {
      await srv.stop();
    }
  });

  it('sends the protocol version negotiated upstream on each upstream hop, never the client 2026-07-28 header', async () => {
    const log = new FixtureLog();
    const srv = await startFixtureHttp('http', log);
    try {
      const gw = await gateway({ upstreams: { f: srv.config } });
      await rpc(gw.url('f'), 'tools/call', slow());
      // The era probe (server/discover) is a 2026-07-28 request by design; everything else is the legacy hop.
      const posts = log
        .of('http')
        .filter((e) => e.httpMethod === 'POST' && e.rpcMethod && e.rpcMethod !== 'initialize' && e.rpcMethod !== 'server/discover');
      expect(posts.length).toBeGreaterThan(0);
      expect(posts.every((e) => e.protocolVersion === '2025-11-25')).toBe(true);
      expect(posts.some((e) => e.mcpMethodHeader === 'tools/call' && e.protocolVersion === '2026-07-28')).toBe(false);
    } finally {
      await srv.stop();
    }
  });
});
