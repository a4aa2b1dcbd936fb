/**
 * Real upstream behaviour: a cancelled call that keeps running upstream, sessions the upstream
 * forgot (reaped, restarted), long silences, older revisions, a child that fails to start, an
 * upstream that dies under a parked call, a server without listChanged or with the legacy
 * resource-not-found code, and a server that asks for roots at session start.
 */
import { mkdtempSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Agent, getGlobalDispatcher, setGlobalDispatcher, type Dispatcher } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelope, listen, memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FIXTURE, FixtureLog, fixtureStdio, startFixtureHttp } from '../helpers/fixture.js';
import { spawnListening, type SpawnedServer } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';

const gateways: TestGateway[] = [];
const servers: SpawnedServer[] = [];
async function gateway(raw: Record<string, unknown>, opts?: Parameters<typeof startGateway>[1]): Promise<TestGateway> {
  const g = await startGateway(raw, opts);
  gateways.push(g);
  return g;
}
async function fixtureHttp(env: Record<string, string>, port = '0'): Promise<SpawnedServer & { config: Record<string, unknown> }> {
  const srv = await spawnListening(['--import', 'tsx', FIXTURE, 'http'], { PORT: port, ...env });
  servers.push(srv);
  return { ...srv, config: { transport: 'streamable-http', url: `http://127.0.0.1:${srv.port}/mcp` } };
}
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
  await Promise.all(servers.map((s) => s.stop()));
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const slow = (ms: number) => ({ name: 'slow', arguments: { ms, steps: 1 } });
const elicit = { elicitation: {} };

/** A tools/call the test can abort (closing the connection cancels the call). */
function callAbortable(url: string, params: Record<string, unknown>, caps: Record<string, unknown>, signal: AbortSignal): Promise<unknown> {
  return fetch(url, {
    method: 'POST',
    signal,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': String(params.name),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 'abortable', method: 'tools/call', params: { ...params, _meta: envelope(caps) } }),
  }).catch(() => undefined);
}

const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };

/**
 * Ways a call ends at the gateway while its tool goes on upstream. `start` begins the call of
 * `slow_then_ask` (it ignores cancellation and asks for a name about 500 ms after the call ended
 * here, while the session that carried it is held out of use) and returns once the gateway ended the call.
 */
const CANCEL_TRIGGERS: {
  name: string;
  /** The upstream transports it runs on. */
  on: ('stdio' | 'http')[];
  gateway?: Record<string, unknown>;
  upstream?: Record<string, unknown>;
  start(url: string, gw: TestGateway): Promise<void>;
}[] = [
  {
    name: 'the client closes the call',
    on: ['stdio', 'http'],
    async start(url) {
      const ac = new AbortController();
      const cancelled = callAbortable(url, { name: 'slow_then_ask', arguments: { ms: 700 } }, elicit, ac.signal);
      await sleep(200);
      ac.abort();
      await cancelled;
      // Long enough for the cancelled call's session to have come back to the pool, were it reused.
      await sleep(250);
    },
  },
  {
    name: 'timeouts.requestMs fires',
    on: ['http'],
    upstream: { timeouts: { requestMs: 300 } },
    async start(url) {
      const r = await rpc(url, 'tools/call', { name: 'slow_then_ask', arguments: { ms: 800 } }, { caps: elicit });
      expect(r.body.error).toMatchObject({ data: { reason: 'timeout' } });
    },
  },
  {
    name: 'the parked call expires',
    on: ['stdio'],
    gateway: { requestState: { ttlMs: 400 } },
    async start(url, gw) {
      // It asks first (the call parks, the client never answers), then works on after the expiry.
      const r = await rpc(url, 'tools/call', { name: 'slow_then_ask', arguments: { ms: 500, askFirst: true } }, { caps: elicit });
      expect(r.body.result.resultType).toBe('input_required');
      expect(await eventually(() => gw.gateway.bridge.parkedCount === 0, 3000)).toBe(true);
    },
  },
  {
    name: 'tasks/cancel',
    on: ['stdio'],
    upstream: { tasks: { taskAfterMs: 100 } },
    async start(url) {
      const created = await rpc(url, 'tools/call', { name: 'slow_then_ask', arguments: { ms: 700 } }, { caps: { ...TASKS, ...elicit } });
      const { taskId } = created.body.result;
      expect(created.body.result.resultType).toBe('task');
      const cancel = await rpc(url, 'tasks/cancel', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
      expect(cancel.body.result).toEqual({ resultType: 'complete' });
    },
  },
];

describe('a cancelled call that keeps running upstream', () => {
  const cases = CANCEL_TRIGGERS.flatMap((trigger) => trigger.on.map((kind) => [trigger.name, kind, trigger] as const));
  it.each(cases)(
    '%s, on %s: its later question is refused upstream and never reaches the next call of the same principal',
    async (_, kind, trigger) => {
      const log = new FixtureLog();
      const srv = kind === 'http' ? await startFixtureHttp('http', log) : undefined;
      if (srv) servers.push(srv);
      const gw = await gateway({
        ...trigger.gateway,
        upstreams: { f: { ...(srv ? srv.config : fixtureStdio(log)), ...trigger.upstream } },
      });
      const url = gw.url('f');
      // A warm session the cancelled call will run on.
      expect((await rpc(url, 'tools/call', slow(10), { caps: elicit })).body.result.content[0].text).toBe('slept 10ms');

      await trigger.start(url, gw);
      // The next call runs while the cancelled tool asks (progress every 100 ms keeps a short requestMs alive).
      const next = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 1500, steps: 15 } }, { caps: elicit });
      expect(next.body.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'slept 1500ms' }] });
      // The cancellation reached the upstream, and the late question got an error there, never an
      // answer: on stdio the gateway refuses it; over Streamable HTTP it goes on the POST stream of
      // the cancelled request, which the gateway dropped with the cancellation, and fails when the
      // gateway closes that upstream session.
      expect(log.of('notification-cancelled').length).toBeGreaterThan(0);
      expect(await eventually(() => log.of('elicit-error', 'slow_then_ask').length === 1, 3000)).toBe(true);
      const refused = /arrived outside any client request|client request already ended/;
      expect(log.of('elicit-error', 'slow_then_ask')[0]!.message).toMatch(
        kind === 'stdio' ? refused : new RegExp(`${refused.source}|Connection closed`),
      );
      expect(log.of('elicit-result', 'slow_then_ask').filter((e) => e.result?.action !== 'cancel')).toEqual([]);
    },
  );
});

/** Starts `slow` (400 ms) and closes the request once the upstream has it, which cancels the call. */
async function abandonSlowCall(url: string, log: FixtureLog): Promise<void> {
  const ac = new AbortController();
  const cancelled = callAbortable(url, slow(400), {}, ac.signal);
  // The first call spawns the child: on a loaded machine that alone can take seconds.
  expect(await eventually(() => log.of('call', 'slow').length === 1, 20_000)).toBe(true);
  ac.abort();
  await cancelled;
}

describe('a cancelled call the upstream answers anyway', () => {
  it('gives its stdio session back: the next call runs in the same process', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: { ...fixtureStdio(log, { FIXTURE_IGNORE_CANCEL: '1' }), maxSessions: 1 } } });
    const url = gw.url('f');
    await abandonSlowCall(url, log);
    const callId = log.of('call', 'slow')[0]!.requestId;
    expect(await eventually(() => log.of('notification-cancelled').some((e) => e.requestId === callId))).toBe(true);
    // The upstream finishes at 400 ms and answers: the call is over there, the session is quiet.
    const next = await rpc(url, 'tools/call', slow(10));
    expect(next.body.result.content[0].text).toBe('slept 10ms');
    const pids = new Set(log.of('call', 'slow').map((e) => e.pid));
    expect(pids.size).toBe(1);
  });

  it(
    'without an answer the session is closed and replaced in the background: the next call runs warm in a new process',
    async () => {
      const log = new FixtureLog();
      const gw = await gateway({ upstreams: { f: { ...fixtureStdio(log), maxSessions: 1 } } });
      const url = gw.url('f');
      await abandonSlowCall(url, log);
      // A second process is started and initialized before any call asks for it (the wait covers a
      // new child's start on a loaded machine: about 3 s alone, past 8 s under a full test run).
      expect(
        await eventually(() => log.of('initialized').length === 2 && gw.gateway.upstreams.get('f')!.pool.stats().idle === 1, 20_000),
      ).toBe(true);
      const next = await rpc(url, 'tools/call', slow(10));
      expect(next.body.result.content[0].text).toBe('slept 10ms');
      expect(new Set(log.of('call', 'slow').map((e) => e.pid)).size).toBe(2);
    },
    scaled(40_000),
  );
});

describe('a call waiting for a session', () => {
  it('leaves the queue when its client goes away, and never runs upstream', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: { ...fixtureStdio(log), maxSessions: 1 } } });
    const url = gw.url('f');
    const busy = rpc(url, 'tools/call', slow(800));
    await eventually(() => log.of('call', 'slow').length === 1);
    const ac = new AbortController();
    const queued = callAbortable(url, { name: 'echo_after_ask', arguments: { tag: 'abandoned' } }, elicit, ac.signal);
    const pool = gw.gateway.upstreams.get('f')!.pool;
    expect(await eventually(() => pool.stats().waiting === 1)).toBe(true);
    ac.abort();
    await queued;
    expect(await eventually(() => pool.stats().waiting === 0, 2000)).toBe(true);
    expect((await busy).body.result.content[0].text).toBe('slept 800ms');
    await sleep(300);
    expect(log.events().filter((e) => e.tag === 'abandoned' || e.tool === 'echo_after_ask')).toEqual([]);
  });
});

describe('sessions the upstream forgot', () => {
  /**
   * Calls `slow` (20 ms) with client capabilities `caps`, keeping its text (or its error). A
   * capability set that was never used for a tools/call misses the tool cache, so the gateway
   * lists the tools on its own first.
   */
  const caller =
    (url: string, texts: string[]) =>
    async (caps: Record<string, unknown> = {}) => {
      const r = await rpc(url, 'tools/call', slow(20), { caps });
      texts.push(r.body.result?.content?.[0]?.text ?? JSON.stringify(r.body.error));
    };
  /** Opens an upstream session for the view of `caps` without filling the tool cache. */
  const openView = async (url: string, caps: Record<string, unknown>) => {
    expect((await rpc(url, 'server/discover', {}, { caps })).body.result?.resultType).toBe('complete');
  };
  const sampling = { sampling: {} };

  it('an upstream that reaps idle sessions after 1 s: calls before and after the reaping all succeed, tool cache misses included', async () => {
    const log = new FixtureLog();
    const srv = await fixtureHttp({ FIXTURE_REAP_IDLE_MS: '1000', FIXTURE_LOG: log.file });
    const gw = await gateway({ upstreams: { f: { ...srv.config, maxSessions: 6 } } });
    const url = gw.url('f');
    const texts: string[] = [];
    const call = caller(url, texts);
    await Promise.all([call(), call(), call()]);
    // Sessions of two more views, whose tool listings the gateway has not made yet.
    await openView(url, elicit);
    await openView(url, sampling);
    const listings = () => log.events().filter((e) => e.event === 'http' && e.rpcMethod === 'tools/list').length;
    expect(listings()).toBe(1);
    for (const caps of [elicit, sampling]) {
      await sleep(1500);
      // The first call of the view lists the tools on that view's reaped session, then runs on it.
      await Promise.all([call(caps), call(), call()]);
      await call();
    }
    expect(texts).toHaveLength(11);
    expect(texts.filter((t) => t !== 'slept 20ms')).toEqual([]);
    // Each of the two views listed its tools after the reaping.
    expect(listings()).toBeGreaterThanOrEqual(3);
    // New upstream sessions were initialized after the reaping.
    expect(log.of('initialized').length).toBeGreaterThan(5);
  });

  it('an upstream without a GET stream that reaps sessions and then restarts on the same port: 0 calls fail, tool cache misses included', async () => {
    const log = new FixtureLog();
    const env = { FIXTURE_REAP_IDLE_MS: '1000', FIXTURE_NO_GET: '1', FIXTURE_LOG: log.file };
    let srv = await fixtureHttp(env);
    const port = String(srv.port);
    const { log: gatewayLog, lines } = memoryLogger('info');
    const gw = await gateway({ upstreams: { f: { ...srv.config, maxSessions: 6 } } }, { log: gatewayLog });
    const url = gw.url('f');
    const texts: string[] = [];
    const call = caller(url, texts);
    await Promise.all([call(), call(), call()]);
    await openView(url, elicit);
    await sleep(1500); // every session reaped: the next calls meet 404 on a known session id
    await Promise.all([call(elicit), call(), call()]);
    await call();
    await openView(url, sampling);
    await call();
    srv.child.kill('SIGKILL');
    await new Promise((r) => srv.child.once('exit', r));
    srv = await fixtureHttp(env, port);
    await Promise.all([call(sampling), call(), call()]);
    for (let i = 0; i < 8; i++) await call();
    // A client's own tools/list after the restart, on the sampling view's session the restart made stale again.
    await sleep(1500);
    const listed = await rpc(url, 'tools/list', {}, { caps: sampling });
    expect(listed.body.result?.tools?.some((t: { name: string }) => t.name === 'slow')).toBe(true);
    await call(sampling);
    expect(texts).toHaveLength(20);
    expect(texts.filter((t) => t !== 'slept 20ms')).toEqual([]);
    // The 404s were answered by initializing again, not by failing calls.
    expect(lines().filter((l) => /no longer knows the session \(404\)/.test(l.msg)).length).toBeGreaterThanOrEqual(3);
    expect(log.of('initialized').length).toBeGreaterThan(6);
  });

  it("what the gateway sends on its own meets a forgotten session too: a listener's resources/subscribe and a 2025-11-25 upstream task", async () => {
    const log = new FixtureLog();
    const srv = await fixtureHttp({
      FIXTURE_REAP_IDLE_MS: '1000',
      FIXTURE_NO_GET: '1',
      FIXTURE_SUBSCRIBE: '1',
      FIXTURE_TASKS: '1',
      FIXTURE_LOG: log.file,
    });
    const gw = await gateway({ upstreams: { f: { ...srv.config, maxSessions: 1 } } });
    const url = gw.url('f');
    const task = () => rpc(url, 'tools/call', { name: 'slow_task', arguments: { ms: 50 } });
    expect((await task()).body.result?.content).toEqual([{ type: 'text', text: 'task slept 50ms' }]);
    await sleep(1500); // the one session is reaped: its next request meets 404
    const second = await task();
    expect(second.body.result?.content ?? second.body.error).toEqual([{ type: 'text', text: 'task slept 50ms' }]);
    expect(log.of('task-created')).toHaveLength(2);

    await sleep(1500);
    const uri = 'fixture://plain/1';
    const stream = await listen(url, { resourceSubscriptions: [uri] });
    try {
      const ack = await stream.next();
      expect(ack?.params?.notifications, JSON.stringify(stream.messages)).toEqual({ resourceSubscriptions: [uri] });
      expect(log.of('subscribe').map((e) => e.uri)).toEqual([uri]);
    } finally {
      stream.close();
    }
    expect(await eventually(() => log.of('unsubscribe').length === 1)).toBe(true);
    expect(log.of('initialized')).toHaveLength(3);
  });
});

describe('the upstream HTTP hop takes its limits from config', () => {
  // undici's global dispatcher (what Node's fetch and undici's request use unless told otherwise)
  // is made to cut any response silent for 1 s: the gateway's hop must not be subject to it.
  let saved: Dispatcher;
  let lowered: Agent;
  /** The test client's own requests are not. */
  const client = new Agent({ headersTimeout: 0, bodyTimeout: 0 });
  beforeAll(() => {
    saved = getGlobalDispatcher();
    lowered = new Agent({ headersTimeout: 1000, bodyTimeout: 1000 });
    setGlobalDispatcher(lowered);
  });
  afterAll(async () => {
    setGlobalDispatcher(saved);
    await Promise.all([lowered.close(), client.close()]);
  });

  it.each([
    ['a JSON response: no headers for 2 s', { FIXTURE_JSON: '1' }],
    ['an SSE response: headers at once, then a body silent for 2 s', {}],
  ])('%s: cut at requestMs=500, complete at requestMs=5000 although the global dispatcher cuts at 1 s', async (_, env) => {
    const srv = await fixtureHttp(env);
    // The lowered limits are in force: the SDK's own transport on the global fetch is cut.
    const sdk = new Client({ name: 'direct', version: '1' });
    await sdk.connect(new StreamableHTTPClientTransport(new URL(String(srv.config.url))));
    // (A cut SSE stream is not answered at all: the SDK's own 4 s limit ends the wait.)
    const direct = await sdk.callTool({ name: 'slow', arguments: { ms: 2000, steps: 1 } }, undefined, { timeout: 4000 }).then(
      () => 'completed',
      (e: Error) => e.message,
    );
    await sdk.close().catch(() => {});
    expect(direct).not.toBe('completed');

    const short = await gateway({ upstreams: { f: { ...srv.config, timeouts: { requestMs: 500 } } } });
    // A warm session, so that the timing below is the call's alone.
    expect((await rpc(short.url('f'), 'tools/call', slow(10), { dispatcher: client })).body.result?.content?.[0]?.text).toBe('slept 10ms');
    const started = Date.now();
    const cut = await rpc(short.url('f'), 'tools/call', slow(2000), { dispatcher: client });
    const elapsed = Date.now() - started;
    // The gateway's own limit, not the 1 s cut (which would be a lost session, not a timeout).
    expect(cut.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'timeout' } });
    expect(cut.body.error.message).toContain('requestMs=500');
    expect(elapsed).toBeGreaterThanOrEqual(450);
    expect(elapsed).toBeLessThan(scaled(1400));

    const long = await gateway({ upstreams: { f: { ...srv.config, timeouts: { requestMs: 5000 } } } });
    const ok = await rpc(long.url('f'), 'tools/call', slow(2000), { dispatcher: client });
    expect(ok.body.result?.content?.[0]?.text ?? JSON.stringify(ok.body)).toBe('slept 2000ms');
  });
});

describe('the two time budgets of a call', () => {
  it('progress renews requestMs, and totalMs still ends a call that never stops sending it', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: { ...fixtureStdio(log), timeouts: { requestMs: 400, totalMs: 1200 } } } });
    const url = gw.url('f');
    expect((await rpc(url, 'tools/call', slow(10))).body.result.content[0].text).toBe('slept 10ms');
    // Progress every 100 ms: a call three times longer than requestMs completes.
    const renewed = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 1000, steps: 10 } });
    expect(renewed.body.result?.content?.[0]?.text ?? JSON.stringify(renewed.body)).toBe('slept 1000ms');
    // Progress every 100 ms for 4 s: totalMs cuts it.
    const started = Date.now();
    const cut = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 4000, steps: 40 } });
    const elapsed = Date.now() - started;
    expect(cut.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'timeout' } });
    expect(cut.body.error.message).toContain('totalMs=1200');
    expect(elapsed).toBeGreaterThanOrEqual(1150);
    expect(elapsed).toBeLessThan(scaled(3000));
    // Without progress, requestMs cuts first.
    const silent = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 1000, steps: 1 } });
    expect(silent.body.error.message).toContain('requestMs=400');
  });
});

describe('capabilities fitted to the upstream revision', () => {
  const everything = { elicitation: { form: {}, url: {} }, sampling: { tools: {}, context: {} }, roots: {} };

  it('a 2025-06-18 server gets no 2025-11-25 field in initialize from its second session on', async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { f: fixtureStdio(log, { FIXTURE_PROTOCOL: '2025-06-18' }) } });
    expect((await rpc(gw.url('f'), 'tools/call', slow(10), { caps: everything })).body.result.content[0].text).toBe('slept 10ms');
    expect((await rpc(gw.url('f'), 'tools/call', slow(10), { caps: everything })).body.result.content[0].text).toBe('slept 10ms');
    const sessions = log.of('initialize-wire');
    expect(sessions).toHaveLength(2);
    // The first session could not know the revision yet; the second declares only 2025-06-18 fields.
    expect(sessions[0]!.capabilities).toEqual({ ...everything, roots: { listChanged: true } });
    expect(sessions[1]!.capabilities).toEqual({ elicitation: {}, sampling: {}, roots: { listChanged: true } });
  });

  it('with protocolVersion pinned, the first session asks for that revision and declares only its fields', async () => {
    const log = new FixtureLog();
    const gw = await gateway({
      upstreams: { f: { ...fixtureStdio(log, { FIXTURE_PROTOCOL: '2025-06-18' }), protocolVersion: '2025-06-18' } },
    });
    expect((await rpc(gw.url('f'), 'tools/call', slow(10), { caps: everything })).body.result.content[0].text).toBe('slept 10ms');
    expect(log.of('initialize-wire').map((e) => [e.protocolVersion, e.capabilities])).toEqual([
      ['2025-06-18', { elicitation: {}, sampling: {}, roots: { listChanged: true } }],
    ]);
  });

  it('a 2024-11-05 server is never declared elicitation', async () => {
    const log = new FixtureLog();
    const gw = await gateway({
      upstreams: { f: { ...fixtureStdio(log, { FIXTURE_PROTOCOL: '2024-11-05' }), protocolVersion: '2024-11-05' } },
    });
    await rpc(gw.url('f'), 'tools/call', slow(10), { caps: everything });
    expect(log.of('initialize-wire')[0]!.capabilities).toEqual({ sampling: {}, roots: { listChanged: true } });
  });
});

describe('a stdio upstream that fails to start', () => {
  it('reports the last lines of its stderr in the error data and the log', async () => {
    const { log, lines } = memoryLogger();
    const gw = await gateway(
      { upstreams: { f: { transport: 'stdio', command: process.execPath, args: ['/nonexistent/typo-server.js'] } } },
      { log },
    );
    const r = await rpc(gw.url('f'), 'tools/list');
    expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'unreachable' } });
    expect(r.body.error.data.stderr.join('\n')).toContain('Cannot find module');
    expect(r.body.error.message).toContain('Cannot find module');
    const line = lines().find((l) => l.msg === 'upstream session failed to open');
    expect(line?.stderr.join('\n')).toContain('/nonexistent/typo-server.js');
  });
});

describe('a parked call whose upstream dies', () => {
  it.each(['stdio', 'http'] as const)('on %s: leaves the parked set at once, and its retry gets the failure', async (kind) => {
    const log = new FixtureLog();
    let srv = kind === 'http' ? await fixtureHttp({ FIXTURE_LOG: log.file }) : undefined;
    const gw = await gateway({ upstreams: { f: { ...(srv ? srv.config : fixtureStdio(log)), maxParked: 1 } } });
    const url = gw.url('f');
    const first = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: elicit });
    expect(first.body.result.resultType).toBe('input_required');
    expect(gw.gateway.bridge.parkedCount).toBe(1);
    if (srv) {
      // The upstream restarts: the parked call's stream breaks and its session is gone there.
      const port = String(srv.port);
      srv.child.kill('SIGKILL');
      await new Promise((r) => srv!.child.once('exit', r));
      expect(await eventually(() => gw.gateway.bridge.parkedCount === 0, 2000)).toBe(true);
      srv = await fixtureHttp({ FIXTURE_LOG: log.file }, port);
    } else {
      process.kill(log.of('call', 'ask_name')[0]!.pid as number, 'SIGKILL');
      expect(await eventually(() => gw.gateway.bridge.parkedCount === 0, 2000)).toBe(true);
    }
    const metrics = await (await fetch(`${gw.base}/metrics`)).text();
    expect(metrics).toMatch(/mrtr_parked_calls\{upstream="f"\} 0/);
    // The slot is free: another eliciting call parks instead of getting parked-limit.
    const other = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: elicit });
    expect(other.body.result?.resultType, JSON.stringify(other.body)).toBe('input_required');
    const retry = await rpc(
      url,
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Q' } } },
      },
      { caps: elicit },
    );
    expect(retry.body.error).toMatchObject({
      code: -32603,
      data: { upstream: 'f', reason: kind === 'stdio' ? 'crashed' : 'session-lost' },
    });
  });
});

describe('what a legacy server declares and answers, as 2026-07-28 clients get it', () => {
  it('a server that declares no listChanged: server/discover advertises none and subscriptions/listen acknowledges no list changes', async () => {
    const gw = await gateway({ upstreams: { plain: fixtureStdio(undefined, { FIXTURE_NO_LIST_CHANGED: '1' }), usual: fixtureStdio() } });
    const plain = (await rpc(gw.url('plain'), 'server/discover')).body.result.capabilities;
    expect([plain.tools, plain.prompts, plain.resources]).toEqual([{}, {}, {}]);
    // The same server declaring listChanged (the v1 SDK McpServer's default): passed on.
    const usual = (await rpc(gw.url('usual'), 'server/discover')).body.result.capabilities;
    expect([usual.tools, usual.prompts, usual.resources]).toEqual([{ listChanged: true }, { listChanged: true }, { listChanged: true }]);
    const stream = await listen(gw.url('plain'), { toolsListChanged: true, promptsListChanged: true, resourcesListChanged: true });
    try {
      const ack = await stream.next();
      expect(ack?.method, JSON.stringify(stream.messages)).toBe('notifications/subscriptions/acknowledged');
      expect(ack.params.notifications).toEqual({});
    } finally {
      stream.close();
    }
  });

  it('a legacy -32002 for an unknown resource reaches the client as -32602 with data.uri (SEP-2164)', async () => {
    const gw = await gateway({ upstreams: { f: fixtureStdio() } });
    const uri = 'fixture://plain/missing';
    const r = await rpc(gw.url('f'), 'resources/read', { uri });
    expect(r.body.error).toEqual({ code: -32602, message: 'Resource not found', data: { uri } });
    expect((await rpc(gw.url('f'), 'resources/read', { uri: 'fixture://plain/7' })).body.result.contents[0].text).toBe('note 7');
  });
});

describe('a server that asks for roots right after initialized', () => {
  it('server-filesystem: every pooled session reports the configured roots, whichever request opened it', async () => {
    const configured = realpathSync(mkdtempSync(join(tmpdir(), 'mrtr-roots-configured-')));
    const commandLine = realpathSync(mkdtempSync(join(tmpdir(), 'mrtr-roots-argv-')));
    const server = fileURLToPath(new URL('../../node_modules/@modelcontextprotocol/server-filesystem/dist/index.js', import.meta.url));
    const gw = await gateway({
      upstreams: {
        fs: {
          transport: 'stdio',
          command: process.execPath,
          args: [server, commandLine],
          roots: [{ uri: `file://${configured}`, name: 'configured' }],
          maxSessions: 8,
        },
      },
    });
    const url = gw.url('fs');
    const discover = await rpc(url, 'server/discover');
    expect(discover.body.result.resultType).toBe('complete');
    const list = (caps: Record<string, unknown>) => rpc(url, 'tools/call', { name: 'list_allowed_directories', arguments: {} }, { caps });
    // Clients that declare no roots (a client that declares roots is asked for its own: test/e2e/client-roots.test.ts).
    const answers = await Promise.all([list({}), list({}), list({ sampling: {} }), list({ sampling: {} }), list({ elicitation: {} })]);
    for (const a of answers) {
      const text = a.body.result?.content?.[0]?.text ?? JSON.stringify(a.body);
      expect(text).toContain(configured);
      expect(text).not.toContain(commandLine);
    }
    expect(gw.gateway.upstreams.get('fs')!.pool.stats().total).toBeGreaterThanOrEqual(3);
  });
});
