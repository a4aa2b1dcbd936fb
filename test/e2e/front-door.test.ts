/**
 * The front door and the CLI around it, against real processes and sockets on 127.0.0.1.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, request as undiciRequest } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startCli, type CliGateway } from '../helpers/cli.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { envelope, everythingStdio, memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { UnknownPaths } from '../../src/http/unknown-paths.js';
import { ROOT } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';

/** What a raw TCP client saw: the bytes the server sent, and when the server closed, in ms after the first write. */
interface RawResult {
  response: string;
  closedAfterMs: number;
}

/** Sends `payload` on a fresh TCP connection, then nothing more; resolves when the server closes the connection. */
function rawSend(port: number, payload: string, giveUpMs = 10_000): Promise<RawResult> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let response = '';
    let started = 0;
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`server kept the connection open for ${giveUpMs} ms; got: ${JSON.stringify(response)}`));
    }, giveUpMs);
    socket.on('connect', () => {
      started = performance.now();
      socket.write(payload);
    });
    socket.on('data', (d) => (response += d.toString()));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ response, closedAfterMs: performance.now() - started });
    });
  });
}

const head = (port: number, extra: string) =>
  `POST /mcp/f HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n${extra}`;

/** Calls the fixture's `slow` tool (`ms`, one step) over `agent`; resolves with the status and the JSON body. */
async function callSlow(agent: Agent, url: string, ms: number, id: string | number): Promise<{ status: number; body: any }> {
  const r = await undiciRequest(url, {
    method: 'POST',
    dispatcher: agent,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': 'slow',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id,
      method: 'tools/call',
      params: { name: 'slow', arguments: { ms, steps: 1 }, _meta: envelope() },
    }),
  });
  return { status: r.statusCode, body: (await r.body.json()) as any };
}

/**
 * POSTs to `url` over `agent` (whose sockets may be bound to one source address) and resolves
 * with the status: a 2026-07-28 `server/discover` request, or a notification (202, which uses no
 * upstream, so only the front door's speed matters).
 */
async function postVia(agent: Agent, url: string, kind: 'discover' | 'notification', authorization?: string): Promise<number> {
  const method = kind === 'discover' ? 'server/discover' : 'notifications/initialized';
  const message = kind === 'discover' ? { jsonrpc: '2.0', id: 1, method, params: { _meta: envelope() } } : { jsonrpc: '2.0', method };
  const res = await undiciRequest(url, {
    method: 'POST',
    dispatcher: agent,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': method,
      ...(authorization ? { authorization } : {}),
    },
    body: JSON.stringify(message),
  });
  await res.body.text();
  return res.statusCode;
}

/** Runs `count` tasks, at most `parallel` at a time. */
async function pool<T>(count: number, parallel: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const results: T[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: parallel }, async () => {
      while (next < count) {
        const i = next++;
        results[i] = await task(i);
      }
    }),
  );
  return results;
}

describe('LOG_LEVEL', () => {
  it('an unknown LOG_LEVEL → exit 2 with a one-line message naming it, no stack trace', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'mrtr-loglevel-')), 'gateway.config.json');
    writeFileSync(file, JSON.stringify({ upstreams: { f: fixtureStdio() } }));
    const r = await new Promise<{ code: number | null; stderr: string; stdout: string }>((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', 'src/main.ts', '--config', file, '--port', '0'],
        { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'loud' }, timeout: 20_000 },
        (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? null) : 0, stdout, stderr }),
      );
    });
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(
      /^mrtr-gateway: LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent \(in any case\), got 'loud'$/m,
    );
    expect(r.stderr).not.toContain('    at ');
    expect(r.stdout).toBe('');
  });
});

describe('request read timeout and broken uploads (CLI, limits.requestReadTimeoutMs: 2000)', () => {
  let gw: CliGateway;
  beforeAll(async () => {
    gw = await startCli({ limits: { requestReadTimeoutMs: 2000 }, upstreams: { f: fixtureStdio() } }, undefined, { LOG_LEVEL: 'debug' });
  });
  afterAll(async () => {
    gw?.child.kill('SIGTERM');
    await gw?.exited;
  });

  const errorLines = () => gw.logs.filter((l) => l.level >= 50);

  it('headers and half a body, then a stall: 408 and the connection closed about 2 s after the request started', async () => {
    const r = await rawSend(gw.port, head(gw.port, 'Content-Length: 100\r\n\r\n{"jsonrpc":"2.0","id":1,"method":"tools/list",'));
    expect(r.response).toMatch(/^HTTP\/1\.1 408 /);
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(1900);
    expect(r.closedAfterMs).toBeLessThan(scaled(3200));
  });

  it('half the headers, then a stall: 408 and the connection closed about 2 s after the request started', async () => {
    const r = await rawSend(gw.port, `POST /mcp/f HTTP/1.1\r\nHost: 127.0.0.1:${gw.port}\r\nContent-Ty`);
    expect(r.response).toMatch(/^HTTP\/1\.1 408 /);
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(1900);
    expect(r.closedAfterMs).toBeLessThan(scaled(3200));
  });

  it('a chunked body that stalls: closed about 2 s after the request started, logged below warn', async () => {
    const r = await rawSend(gw.port, head(gw.port, 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"jso\r\n'));
    expect(r.closedAfterMs).toBeGreaterThanOrEqual(1900);
    expect(r.closedAfterMs).toBeLessThan(scaled(3200));
    expect(await eventually(() => gw.logs.filter((l) => l.msg === 'request body not received').length > 0)).toBe(true);
    expect(errorLines()).toEqual([]);
  });

  it('a malformed chunked body gets 400; it is logged at debug level, never as an error', async () => {
    const before = gw.logs.filter((l) => l.msg === 'request body not received').length;
    const r = await rawSend(gw.port, head(gw.port, 'Transfer-Encoding: chunked\r\n\r\n5\r\n{"jso\r\nZZ\r\nnot a chunk\r\n'));
    expect(r.response).toMatch(/^HTTP\/1\.1 400 /);
    expect(r.closedAfterMs).toBeLessThan(scaled(1000));
    expect(await eventually(() => gw.logs.filter((l) => l.msg === 'request body not received').length > before)).toBe(true);
    const line = gw.logs.filter((l) => l.msg === 'request body not received').at(-1)!;
    expect(line.level).toBe(20);
    await new Promise((r2) => setTimeout(r2, 200));
    expect(errorLines()).toEqual([]);
    expect(gw.logs.filter((l) => l.msg === 'unexpected error')).toEqual([]);
  });

  it('a complete request on a fresh connection is still served', async () => {
    const r = await rpc(`${gw.base}/mcp/f`, 'tools/list');
    expect(r.status).toBe(200);
  });
});

describe('limits with auth none: keyed by client address', () => {
  const agents: Agent[] = [];
  /** An HTTP client whose connections come from `localAddress`. */
  const from = (localAddress: string, connections = 32) => {
    const agent = new Agent({ localAddress, connections });
    agents.push(agent);
    return agent;
  };
  afterAll(async () => {
    await Promise.all(agents.map((a) => a.close()));
  });

  describe('default limits', () => {
    let gw: TestGateway;
    beforeAll(async () => {
      // Two upstream sessions, opened before the timed part: requests queue for them.
      gw = await startGateway({ upstreams: { f: { ...fixtureStdio(), maxSessions: 2 } } });
      const warm = from('127.0.0.3');
      expect(await Promise.all([postVia(warm, gw.url('f'), 'discover'), postVia(warm, gw.url('f'), 'discover')])).toEqual([200, 200]);
    });
    afterAll(() => gw?.close());

    it('300 requests within about a second from one client are all served (no rate limit by default)', async () => {
      const agent = from('127.0.0.1');
      const started = performance.now();
      const statuses = await pool(300, 16, () => postVia(agent, gw.url('f'), 'discover'));
      const elapsed = performance.now() - started;
      expect(
        statuses.filter((s) => s !== 200),
        `${elapsed.toFixed(0)} ms for 300 requests`,
      ).toEqual([]);
      // Fast enough that 50 per second with a burst of 100 would have refused some: it lets
      // 300 through only over 4 s.
      expect(elapsed).toBeLessThan(scaled(4000));
    });
  });

  describe('default concurrency limit (64 in flight per client address)', () => {
    let gw: TestGateway;
    const call = (agent: Agent, ms: number, id: string) => callSlow(agent, gw.url('f'), ms, id);
    beforeAll(async () => {
      // One upstream session: the calls after the first wait for it, in flight all the while.
      gw = await startGateway({ upstreams: { f: { ...fixtureStdio(), maxSessions: 1, timeouts: { queueMs: 60_000 } } } });
      expect(await postVia(from('127.0.0.3'), gw.url('f'), 'discover')).toBe(200);
    });
    afterAll(() => gw?.close());

    it(
      '64 requests in flight from one address are served, the 65th gets 429, another address is served meanwhile',
      async () => {
        const a = from('127.0.0.1', 80);
        const b = from('127.0.0.2');
        const first = call(a, 2000, 'first');
        const pool = gw.gateway.upstreams.get('f')!.pool;
        expect(await eventually(() => pool.stats().leased === 1)).toBe(true);
        const queued = Array.from({ length: 63 }, (_, i) => call(a, 10, `queued-${i}`));
        expect(await eventually(() => pool.stats().waiting === 63)).toBe(true);
        const beyond = await call(a, 10, 'beyond');
        expect(beyond.status).toBe(429);
        expect(beyond.body.error.message).toMatch(/in flight/);
        const other = call(b, 10, 'other');
        const answers = await Promise.all([first, ...queued, other]);
        expect(answers.map((r) => r.status).filter((s) => s !== 200)).toEqual([]);
        expect(answers[0]!.body.result.content[0].text).toBe('slept 2000ms');
        expect(answers.slice(1).filter((r) => r.body.result.content[0].text !== 'slept 10ms')).toEqual([]);
      },
      scaled(60_000),
    );
  });

  describe('a configured rate limit (1 per second, burst 5)', () => {
    let gw: TestGateway;
    beforeAll(async () => {
      gw = await startGateway({ limits: { rateLimit: { requestsPerSecond: 1, burst: 5 } }, upstreams: { f: fixtureStdio() } });
      // Opens the upstream session from a third address, so the timed requests are quick.
      expect(await postVia(from('127.0.0.3'), gw.url('f'), 'discover')).toBe(200);
    });
    afterAll(() => gw?.close());

    it('applies to each client address separately', async () => {
      const a = from('127.0.0.1');
      const b = from('127.0.0.2');
      const fromA = await pool(10, 1, () => postVia(a, gw.url('f'), 'discover'));
      expect(fromA.slice(0, 5)).toEqual([200, 200, 200, 200, 200]);
      expect(fromA.filter((s) => s === 429).length).toBeGreaterThanOrEqual(3);
      const fromB = await pool(5, 1, () => postVia(b, gw.url('f'), 'discover'));
      expect(fromB).toEqual([200, 200, 200, 200, 200]);
    });
  });

  describe('a configured concurrency limit (1)', () => {
    let gw: TestGateway;
    beforeAll(async () => {
      gw = await startGateway({ limits: { maxConcurrentPerPrincipal: 1 }, upstreams: { f: fixtureStdio() } });
    });
    afterAll(() => gw?.close());

    it('applies to each client address separately', async () => {
      const a = from('127.0.0.1');
      const b = from('127.0.0.2');
      const post = (agent: Agent, ms: number) => callSlow(agent, gw.url('f'), ms, ms);
      const slow = post(a, 1500);
      await new Promise((r) => setTimeout(r, 300));
      const [secondFromA, fromB] = await Promise.all([post(a, 10), post(b, 10)]);
      expect(secondFromA.status).toBe(429);
      expect(secondFromA.body.error.message).toMatch(/in flight/);
      expect(fromB.status).toBe(200);
      expect(fromB.body.result.content[0].text).toBe('slept 10ms');
      expect((await slow).body.result.content[0].text).toBe('slept 1500ms');
    });
  });
});

describe('limits with auth apiKeys: keyed by principal', () => {
  const KEY = 'key-of-alice-0123456789';
  const agents: Agent[] = [];
  afterAll(async () => {
    await Promise.all(agents.map((a) => a.close()));
  });

  it('the default rate limit (50 per second, burst 100) holds for one principal', async () => {
    const gw = await startGateway({
      auth: { mode: 'apiKeys', keys: [{ principal: 'alice', key: KEY }] },
      upstreams: { f: fixtureStdio() },
    });
    try {
      const agent = new Agent({ connections: 32 });
      agents.push(agent);
      const statuses = await pool(300, 16, () => postVia(agent, gw.url('f'), 'notification', `Bearer ${KEY}`));
      expect(statuses.filter((s) => s === 429).length).toBeGreaterThan(0);
      expect(statuses.filter((s) => s === 202).length).toBeGreaterThanOrEqual(100);
    } finally {
      await gw.close();
    }
  });

  it('one principal calling from two addresses shares one bucket', async () => {
    const gw = await startGateway({
      auth: { mode: 'apiKeys', keys: [{ principal: 'alice', key: KEY }] },
      limits: { rateLimit: { requestsPerSecond: 1, burst: 5 } },
      upstreams: { f: fixtureStdio() },
    });
    try {
      const a = new Agent({ localAddress: '127.0.0.1' });
      const b = new Agent({ localAddress: '127.0.0.2' });
      agents.push(a, b);
      const fromA = await pool(5, 1, () => postVia(a, gw.url('f'), 'notification', `Bearer ${KEY}`));
      expect(fromA).toEqual([202, 202, 202, 202, 202]);
      const fromB = await pool(3, 1, () => postVia(b, gw.url('f'), 'notification', `Bearer ${KEY}`));
      expect(fromB.filter((s) => s === 429).length).toBeGreaterThanOrEqual(2);
    } finally {
      await gw.close();
    }
  });
});

describe('shutdown (CLI)', () => {
  /** GET on a new connection (no keep-alive pool), so it shows whether the gateway still accepts connections. */
  const getFresh = (url: string) =>
    new Promise<{ status: number; body: any }>((resolve, reject) => {
      const req = httpRequest(url, { agent: false }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }));
      });
      req.on('error', reject);
      req.end();
    });

  it(
    'keeps listening while a call is in flight: /readyz 503, /healthz 200, new MCP requests 503; the call completes and the process exits 0',
    async () => {
      const log = new FixtureLog();
      const gw = await startCli({ shutdownGraceMs: 10_000, upstreams: { f: fixtureStdio(log) } });
      const call = rpc(`${gw.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 2500, steps: 1 } });
      expect(await eventually(() => log.of('call', 'slow').length > 0, 15_000)).toBe(true);
      gw.child.kill('SIGTERM');
      expect(await eventually(() => gw.logs.some((l) => /^stopping/.test(l.msg)), 5000)).toBe(true);

      const ready = await getFresh(`${gw.base}/readyz`);
      expect(ready.status).toBe(503);
      expect(ready.body).toMatchObject({ ready: false, reason: 'shutting down' });
      expect((await getFresh(`${gw.base}/healthz`)).status).toBe(200);
      const refused = await rpc(`${gw.base}/mcp/f`, 'tools/list');
      expect(refused.status).toBe(503);
      expect(refused.body.error).toMatchObject({ code: -32603, message: 'gateway shutting down' });

      const r = await call;
      expect(r.body.result.content[0].text).toBe('slept 2500ms');
      expect(await gw.exited).toEqual({ code: 0, signal: null });
    },
    scaled(30_000),
  );

  it(
    'during the drain a retry of a parked call is accepted and completes, one needing a new round gets shutting-down, new calls get 503',
    async () => {
      const CAPS = { elicitation: {}, sampling: {} };
      const gw = await startCli({ shutdownGraceMs: 10_000, upstreams: { f: fixtureStdio() } });
      const url = `${gw.base}/mcp/f`;
      const asked = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: CAPS });
      const rounds = await rpc(url, 'tools/call', { name: 'three_rounds', arguments: {} }, { caps: CAPS });
      expect([asked.body.result.resultType, rounds.body.result.resultType]).toEqual(['input_required', 'input_required']);
      gw.child.kill('SIGTERM');
      expect(await eventually(() => gw.logs.some((l) => /^stopping/.test(l.msg)), 5000)).toBe(true);

      const fresh = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } });
      expect(fresh.status).toBe(503);
      expect(fresh.body.error).toMatchObject({ code: -32603, message: 'gateway shutting down' });

      const answered = await rpc(
        url,
        'tools/call',
        {
          name: 'ask_name',
          arguments: {},
          requestState: asked.body.result.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Kim' } } },
        },
        { caps: CAPS },
      );
      expect(answered.status).toBe(200);
      expect(answered.body.result.content[0].text).toBe('Hello, Kim!');

      // three_rounds asks a sample next: no new parked state during the drain.
      const next = await rpc(
        url,
        'tools/call',
        {
          name: 'three_rounds',
          arguments: {},
          requestState: rounds.body.result.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content: { topic: 'tea' } } },
        },
        { caps: CAPS },
      );
      expect(next.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'shutting-down' } });
      expect(next.body.error.message).toMatch(/asks for client input.*shutting down/);
      // Nothing is parked any more: the drain ends without waiting out the grace period.
      const exited = Date.now();
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      expect(Date.now() - exited).toBeLessThan(scaled(8000));
    },
    scaled(40_000),
  );

  it(
    'during the drain tasks/update answers a task held here; the task completes upstream before the process exits 0',
    async () => {
      const TASKS_AND_ELICIT = { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: {} };
      const log = new FixtureLog();
      const gw = await startCli({ shutdownGraceMs: 10_000, upstreams: { f: { ...fixtureStdio(log), tasks: { taskAfterMs: 200 } } } });
      const url = `${gw.base}/mcp/f`;
      const created = await rpc(url, 'tools/call', { name: 'slow_then_ask', arguments: { ms: 300 } }, { caps: TASKS_AND_ELICIT });
      const { taskId } = created.body.result;
      expect(created.body.result.resultType).toBe('task');
      const status = async () =>
        (await rpc(url, 'tasks/get', { taskId }, { caps: TASKS_AND_ELICIT, headers: { 'mcp-name': taskId } })).body.result;
      expect(await eventually(async () => (await status()).status === 'input_required', 10_000)).toBe(true);
      gw.child.kill('SIGTERM');
      expect(await eventually(() => gw.logs.some((l) => /^stopping/.test(l.msg)), 5000)).toBe(true);

      const upd = await rpc(
        url,
        'tasks/update',
        { taskId, inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Marie' } } } },
        { caps: TASKS_AND_ELICIT, headers: { 'mcp-name': taskId } },
      );
      expect(upd.body.result).toEqual({ resultType: 'complete' });
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      expect(log.of('elicit-result', 'slow_then_ask').map((e) => e.result)).toEqual([{ action: 'accept', content: { name: 'Marie' } }]);
      // The drain ended when the task did, not with the grace period (which would cancel it).
      expect(gw.logs.some((l) => /grace period over/.test(l.msg))).toBe(false);
    },
    scaled(40_000),
  );
});

describe('CORS preflights over plain HTTP', () => {
  let gw: TestGateway;
  const ALLOWED = 'http://app.example:8080';
  beforeAll(async () => {
    gw = await startGateway({ http: { allowedOrigins: [ALLOWED] }, upstreams: { f: fixtureStdio() } });
  });
  afterAll(() => gw?.close());

  const preflight = (origin: string, requestHeaders = 'content-type,mcp-method,mcp-protocol-version') =>
    fetch(gw.url('f'), {
      method: 'OPTIONS',
      headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': requestHeaders },
    });

  it('an allowed origin gets 204 with the methods, the MCP and W3C Trace Context headers and the requested Mcp-Param-* headers', async () => {
    const res = await preflight(ALLOWED, 'content-type,mcp-method,mcp-param-region,traceparent,tracestate,x-other');
    expect(res.status).toBe(204);
    expect(res.headers.get('access-control-allow-origin')).toBe(ALLOWED);
    expect(res.headers.get('access-control-allow-methods')).toBe('POST, GET, DELETE');
    const allowed = res.headers.get('access-control-allow-headers')!.split(', ');
    for (const h of [
      'content-type',
      'accept',
      'authorization',
      'mcp-protocol-version',
      'mcp-method',
      'mcp-name',
      'mcp-session-id',
      'last-event-id',
      'traceparent',
      'tracestate',
      'mcp-param-region',
    ])
      expect(allowed).toContain(h);
    expect(allowed).not.toContain('x-other');
    expect(res.headers.get('vary')).toMatch(/Origin/);
  });

  it('an origin that is not allowed gets 403 and no CORS headers', async () => {
    const res = await preflight('http://127.0.0.1:9');
    expect(res.status).toBe(403);
    expect(res.headers.get('access-control-allow-origin')).toBeNull();
    expect(res.headers.get('access-control-allow-methods')).toBeNull();
    expect(res.headers.get('access-control-allow-headers')).toBeNull();
  });

  it('a POST from an allowed origin carries Access-Control-Allow-Origin and the exposed headers; one from another origin gets 403 without them', async () => {
    const ok = await rpc(gw.url('f'), 'server/discover', {}, { headers: { origin: ALLOWED } });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('access-control-allow-origin')).toBe(ALLOWED);
    expect(ok.headers.get('access-control-expose-headers')).toBe(
      'mcp-session-id, mcp-protocol-version, www-authenticate, x-request-id, retry-after',
    );
    const no = await rpc(gw.url('f'), 'server/discover', {}, { headers: { origin: 'https://evil.example' } });
    expect(no.status).toBe(403);
    expect(no.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('OPTIONS that is not a preflight, or PUT, gets 405 / -32601 saying which methods the endpoint serves', async () => {
    for (const method of ['OPTIONS', 'PUT']) {
      const res = await fetch(gw.url('f'), { method });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow')).toBe('POST');
      const body = (await res.json()) as any;
      expect(body).toEqual({
        jsonrpc: '2.0',
        id: null,
        error: {
          code: -32601,
          message: `${method} is not supported on /mcp/f; it serves POST, and GET and DELETE within a legacy session (Mcp-Session-Id)`,
        },
      });
    }
  });

  it('GET without a session gets 405 / -32601 saying it needs a legacy session', async () => {
    const res = await fetch(gw.url('f'), { method: 'GET', headers: { accept: 'text/event-stream' } });
    expect(res.status).toBe(405);
    expect(((await res.json()) as any).error).toEqual({
      code: -32601,
      message: 'GET on /mcp/f needs the Mcp-Session-Id of a legacy session; MCP 2026-07-28 uses POST only',
    });
  });
});

describe('requests to paths the gateway does not serve', () => {
  let gw: TestGateway;
  const mem = memoryLogger('info');
  const notFoundLines = () => mem.lines().filter((l) => l.status === 404);
  beforeAll(async () => {
    gw = await startGateway({ upstreams: { everything: everythingStdio } }, { log: mem.log });
  });
  afterAll(async () => {
    await gw?.close();
  });

  it('a 404 is logged at info with the paths served (a client pointed at /mcp instead of /mcp/NAME), once per path', async () => {
    for (let i = 0; i < 2; i++) {
      const r = await rpc(`${gw.base}/mcp`, 'tools/list');
      expect(r.status).toBe(404);
    }
    expect(notFoundLines()).toEqual([
      expect.objectContaining({
        level: 30,
        method: 'POST',
        path: '/mcp',
        status: 404,
        served: ['/mcp/everything'],
        msg: 'no endpoint at /mcp (404); this gateway serves /mcp/everything; each path is logged once',
      }),
    ]);
    // An upstream that is not configured is a path the gateway does not serve too.
    expect((await rpc(`${gw.base}/mcp/everythin`, 'tools/list')).status).toBe(404);
    expect(notFoundLines().map((l) => l.path)).toEqual(['/mcp', '/mcp/everythin']);
  });

  it('a scanner cannot flood the log: at most 10 lines a minute; the next line counts the requests left out', async () => {
    await Promise.all(Array.from({ length: 30 }, (_, i) => fetch(`${gw.base}/scan-${i}`).then((r) => r.text())));
    expect(notFoundLines().length).toBe(10);

    const own = memoryLogger('info');
    const paths = new UnknownPaths(own.log, () => ['/mcp/a']);
    for (let i = 0; i < 15; i++) paths.note('GET', `/p${i}`, 1_000);
    expect(own.lines().length).toBe(10);
    paths.note('GET', '/later', 61_000);
    expect(own.lines().at(-1)).toMatchObject({ path: '/later', notLogged: 5 });
  });
});
