/**
 * Shutdown of the CLI gateway (docs/operations.md, "Signals and exit codes"): with the default
 * settings a parked call does not hold the stop past a container's stop timeout, calls in flight to
 * 2026-07-28 upstreams are answered -32603 "gateway shutting down" at the end of the grace period,
 * stdio children of both eras end (SIGKILL for those that ignore SIGTERM), every 503 of the
 * drain closes its connection, and a Redis store that was never reachable does not hold the stop.
 */
import { mkdtempSync, readFileSync, writeFileSync, existsSync } from 'node:fs';
import { Agent, createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { rpc } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { alive, startCli, type CliGateway } from '../helpers/cli.js';
import { freePort } from '../helpers/infra.js';
import { scaled } from '../helpers/budget.js';

/**
 * A stdio upstream written for these tests. It appends its pid to `PID_FILE` and every line it
 * reads to `PID_FILE.in`; `MODE=legacy` answers `initialize` and `tools/list` as a 2025-06-18
 * server, `MODE=modern` answers `tools/list` as a 2026-07-28 one, `SILENT=1` answers nothing but the
 * `server/discover` a pinned 2026-07-28 upstream is started with, and
 * `IGNORE_TERM=1` ignores SIGTERM (and the end of stdin).
 */
const STUB = `
import { appendFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
const file = process.env.PID_FILE;
appendFileSync(file, process.pid + '\\n');
if (process.env.IGNORE_TERM) {
  process.on('SIGTERM', () => {});
  setInterval(() => {}, 1000);
}
createInterface({ input: process.stdin }).on('line', (line) => {
  appendFileSync(file + '.in', line + '\\n');
  const m = JSON.parse(line);
  if (m.id === undefined || m.method === undefined) return;
  if (process.env.SILENT && m.method !== 'server/discover') return;
  const legacy = process.env.MODE === 'legacy';
  const result =
    m.method === 'initialize'
      ? { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'stub', version: '1.0.0' } }
      : m.method === 'server/discover'
        ? { resultType: 'complete', supportedVersions: ['2026-07-28'], capabilities: { tools: {} } }
      : m.method === 'tools/list'
        ? legacy ? { tools: [] } : { resultType: 'complete', tools: [] }
        : {};
  process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: m.id, result }) + '\\n');
});
`;

const dir = mkdtempSync(join(tmpdir(), 'mrtr-shutdown-'));
const script = join(dir, 'stub.mjs');
writeFileSync(script, STUB);
let files = 0;

/** The pid readers of the stubs made for the running test, for reaping after it. */
const stubPids: (() => number[])[] = [];

/** A stdio upstream running the stub with `env`, and the file its pids go to. */
function stub(
  env: Record<string, string>,
  protocol: string,
): { config: Record<string, unknown>; pids: () => number[]; lines: () => string[] } {
  const file = join(dir, `pids-${files++}`);
  const read = (f: string) => (existsSync(f) ? readFileSync(f, 'utf8').split('\n').filter(Boolean) : []);
  const pids = () => read(file).map(Number);
  // Whatever happens in the test, every child it started is killed after it (some ignore SIGTERM).
  stubPids.push(pids);
  return {
    config: { transport: 'stdio', command: process.execPath, args: [script], env: { PID_FILE: file, ...env }, protocol },
    pids,
    lines: () => read(`${file}.in`),
  };
}

/**
 * A Streamable HTTP server on 127.0.0.1 that answers the `server/discover` a pinned 2026-07-28
 * upstream is started with, and reads every other request and never answers it (`requests`, and
 * `closed` counts those whose connection closed).
 */
async function silentHttp(): Promise<{ server: Server; url: string; requests: IncomingMessage[]; closed: () => number }> {
  const requests: IncomingMessage[] = [];
  let closed = 0;
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (d) => (body += d));
    req.on('end', () => {
      const m = JSON.parse(body || '{}');
      if (m.method === 'server/discover') {
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            jsonrpc: '2.0',
            id: m.id,
            result: { resultType: 'complete', supportedVersions: ['2026-07-28'], capabilities: { tools: {} } },
          }),
        );
        return;
      }
      requests.push(req);
      res.on('close', () => closed++);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, requests, closed: () => closed };
}

/** POSTs a request with node:http on a keep-alive connection, to see the response's own `Connection` header. */
function rawPost(
  url: string,
  body: Record<string, unknown>,
  method: string,
  name?: string,
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: any }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      url,
      {
        method: 'POST',
        agent: new Agent({ keepAlive: true }),
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2026-07-28',
          'mcp-method': method,
          ...(name ? { 'mcp-name': name } : {}),
        },
      },
      (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

const ENVELOPE = {
  'io.modelcontextprotocol/protocolVersion': '2026-07-28',
  'io.modelcontextprotocol/clientCapabilities': {},
  'io.modelcontextprotocol/clientInfo': { name: 'shutdown-test', version: '1.0.0' },
};

const started: CliGateway[] = [];
const servers: Server[] = [];
const pidsToReap: number[] = [];
afterEach(() => {
  for (const pids of stubPids.splice(0)) pidsToReap.push(...pids());
  for (const g of started.splice(0)) if (g.child.exitCode === null && g.child.signalCode === null) g.child.kill('SIGKILL');
  for (const s of servers.splice(0)) (s.closeAllConnections(), s.close());
  for (const pid of pidsToReap.splice(0)) if (alive(pid)) process.kill(pid, 'SIGKILL');
});

const stoppingLogged = (gw: CliGateway) => eventually(() => gw.logs.some((l) => /^stopping/.test(l.msg)), 5000);

describe('the default shutdownGraceMs', () => {
  it(
    "fits Docker's 10 s stop timeout: with a call parked for its client's answer, SIGTERM ends in exit code 0 well within 10 s",
    async () => {
      const gw = await startCli({ upstreams: { f: fixtureStdio() } });
      started.push(gw);
      // A 2026-07-28 client that gets its input_required round and never retries.
      const asked = await rpc(`${gw.base}/mcp/f`, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: { elicitation: {} } });
      expect(asked.body.result.resultType).toBe('input_required');
      const exitAt = new Promise<number>((r) => gw.child.once('exit', () => r(performance.now())));
      const t0 = performance.now();
      gw.child.kill('SIGTERM');
      const ms = (await exitAt) - t0;
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      // Docker's own stop timeout: not scaled, a slow host gets no more time from Docker.
      expect(ms).toBeLessThan(10_000);
      expect(gw.logs.find((l) => /^stopping/.test(l.msg))).toMatchObject({ graceMs: 8000 });
      expect(gw.logs.some((l) => l.msg === 'stopped')).toBe(true);
    },
    scaled(40_000),
  );
});

describe('a Redis store that was never reachable', () => {
  it(
    'does not hold the stop: SIGTERM ends in exit code 0 at once, not when shutdownGraceMs runs out',
    async () => {
      const port = await freePort();
      const gw = await startCli({
        store: { kind: 'redis', url: `redis://127.0.0.1:${port}`, connectTimeoutMs: 200 },
        replicas: { secret: 'replica-secret-0123456789abcdefghij' },
        upstreams: { f: fixtureStdio() },
      });
      started.push(gw);
      expect((await fetch(`${gw.base}/readyz`)).status).toBe(503);
      const exitAt = new Promise<number>((r) => gw.child.once('exit', () => r(performance.now())));
      const t0 = performance.now();
      gw.child.kill('SIGTERM');
      const ms = (await exitAt) - t0;
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      expect(gw.logs.some((l) => l.msg === 'stopped')).toBe(true);
      expect(gw.logs.filter((l) => /^shutdownGraceMs over/.test(l.msg))).toEqual([]);
      // The default shutdownGraceMs is 8 s.
      expect(ms).toBeLessThan(4000);
    },
    scaled(40_000),
  );
});

describe('shutdown of 2026-07-28 upstreams', () => {
  it(
    'calls still running at the end of the grace period get -32603 "gateway shutting down" (stdio and Streamable HTTP); the HTTP call is cancelled upstream and the child ends',
    async () => {
      const silent = stub({ MODE: 'modern', SILENT: '1' }, '2026-07-28');
      const http = await silentHttp();
      servers.push(http.server);
      const gw = await startCli({
        shutdownGraceMs: 2000,
        upstreams: { ms: silent.config, mh: { transport: 'streamable-http', url: http.url, protocol: '2026-07-28' } },
      });
      started.push(gw);
      const calls = [rpc(`${gw.base}/mcp/ms`, 'tools/list'), rpc(`${gw.base}/mcp/mh`, 'tools/list')];
      expect(await eventually(() => silent.lines().some((l) => l.includes('"tools/list"')) && http.requests.length === 1, 15_000)).toBe(
        true,
      );
      const [pid] = silent.pids();
      pidsToReap.push(pid!);
      gw.child.kill('SIGTERM');
      for (const r of await Promise.all(calls)) {
        expect(r.status).toBe(200);
        expect(r.body.error).toMatchObject({ code: -32603, message: 'gateway shutting down', data: { reason: 'shutting-down' } });
      }
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      for (const upstream of ['ms', 'mh'])
        expect(gw.logs.some((l) => l.msg === 'request' && l.upstream === upstream && l.code === -32603)).toBe(true);
      expect(gw.logs.some((l) => l.msg === 'stopped')).toBe(true);
      expect(alive(pid!)).toBe(false);
      expect(await eventually(() => http.closed() === 1, 2000)).toBe(true);
    },
    scaled(40_000),
  );

  it(
    'a stdio child with nothing in flight ends with the gateway',
    async () => {
      const up = stub({ MODE: 'modern' }, '2026-07-28');
      const gw = await startCli({ upstreams: { m: up.config } });
      started.push(gw);
      const r = await rpc(`${gw.base}/mcp/m`, 'tools/list');
      expect(r.body.result).toMatchObject({ resultType: 'complete', tools: [] });
      const [pid] = up.pids();
      pidsToReap.push(pid!);
      gw.child.kill('SIGTERM');
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      expect(alive(pid!)).toBe(false);
    },
    scaled(30_000),
  );
});

describe('stdio children that end by themselves while the gateway stops', () => {
  it(
    "(a terminal's Ctrl-C reaches them with the gateway) are logged at info as ending while it stops, not as a session that died; their calls in flight end as the shutdown's",
    async () => {
      const legacy = stub({ MODE: 'legacy' }, 'legacy');
      const modern = stub({ MODE: 'modern', SILENT: '1' }, '2026-07-28');
      const log = new FixtureLog();
      const gw = await startCli({
        shutdownGraceMs: 10_000,
        upstreams: { leg: legacy.config, mod: modern.config, slow: { ...fixtureStdio(log), protocol: 'legacy' } },
      });
      started.push(gw);
      expect((await rpc(`${gw.base}/mcp/leg`, 'tools/list')).body.result).toMatchObject({ resultType: 'complete', tools: [] });
      // Held in flight, so that the drain waits while the children go.
      const held = rpc(`${gw.base}/mcp/mod`, 'tools/list');
      const slow = rpc(`${gw.base}/mcp/slow`, 'tools/call', { name: 'slow', arguments: { ms: 20_000, steps: 1 } });
      expect(
        await eventually(() => modern.lines().some((l) => l.includes('"tools/list"')) && log.of('call', 'slow').length === 1, 15_000),
      ).toBe(true);
      const pids = [...legacy.pids(), ...modern.pids(), log.of('call', 'slow')[0]!.pid as number];
      expect(pids).toHaveLength(3);
      pidsToReap.push(...pids);
      gw.child.kill('SIGINT');
      expect(await stoppingLogged(gw)).toBe(true);
      for (const pid of pids) process.kill(pid, 'SIGINT');
      for (const r of await Promise.all([held, slow]))
        expect(r.body.error).toMatchObject({ code: -32603, message: 'gateway shutting down', data: { reason: 'shutting-down' } });
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      for (const upstream of ['leg', 'slow'])
        expect(gw.logs.filter((l) => l.msg === 'upstream session ended while the gateway stops' && l.upstream === upstream)).toHaveLength(
          1,
        );
      expect(
        gw.logs.filter((l) => l.msg === 'modern upstream process exited while the gateway stops' && l.upstream === 'mod'),
      ).toHaveLength(1);
      expect(gw.logs.filter((l) => l.level >= 40 && /died|exited/.test(l.msg))).toEqual([]);
    },
    scaled(40_000),
  );
});

describe('an upstream in its first start', () => {
  it(
    'a call waiting for the child to start gets -32603 "gateway shutting down" before the gateway exits',
    async () => {
      const log = new FixtureLog();
      const slow = { ...fixtureStdio(log, { FIXTURE_START_DELAY_MS: '30000' }), protocol: 'legacy', timeouts: { firstStartMs: 60_000 } };
      const gw = await startCli({ shutdownGraceMs: 3000, upstreams: { s: slow } });
      started.push(gw);
      const call = rpc(`${gw.base}/mcp/s`, 'tools/list');
      expect(await eventually(() => log.of('process-start').length === 1, 15_000)).toBe(true);
      pidsToReap.push(log.of('process-start')[0]!.pid as number);
      gw.child.kill('SIGTERM');
      const r = await call;
      expect(r.body.error).toMatchObject({ code: -32603, message: 'gateway shutting down', data: { reason: 'shutting-down' } });
      expect(await gw.exited).toEqual({ code: 0, signal: null });
    },
    scaled(40_000),
  );
});

describe('stdio children that ignore SIGTERM', () => {
  it(
    'get SIGKILL 2 s after SIGTERM, or sooner when shutdownGraceMs ends first, legacy and 2026-07-28 alike; none outlives the gateway',
    async () => {
      const legacy = stub({ MODE: 'legacy', IGNORE_TERM: '1' }, 'legacy');
      const modern = stub({ MODE: 'modern', SILENT: '1', IGNORE_TERM: '1' }, '2026-07-28');
      const gw = await startCli({ shutdownGraceMs: 300, upstreams: { leg: legacy.config, mod: modern.config } });
      started.push(gw);
      const listed = await rpc(`${gw.base}/mcp/leg`, 'tools/list');
      expect(listed.body.result).toMatchObject({ resultType: 'complete', tools: [] });
      const parked = rpc(`${gw.base}/mcp/mod`, 'tools/list');
      expect(await eventually(() => modern.lines().some((l) => l.includes('"tools/list"')), 15_000)).toBe(true);
      const pids = [...legacy.pids(), ...modern.pids()];
      expect(pids).toHaveLength(2);
      pidsToReap.push(...pids);
      gw.child.kill('SIGTERM');
      expect((await parked).body.error).toMatchObject({ code: -32603, message: 'gateway shutting down' });
      expect(await gw.exited).toEqual({ code: 0, signal: null });
      for (const pid of pids) expect(alive(pid)).toBe(false);
      // The modern child was told which request the shutdown cancelled.
      expect(modern.lines().some((l) => l.includes('notifications/cancelled'))).toBe(true);
    },
    scaled(40_000),
  );
});

describe('the 503 of the drain', () => {
  it(
    'carries Connection: close and the request id, from the router and for a legacy initialize',
    async () => {
      const CAPS = { elicitation: {} };
      const gw = await startCli({ shutdownGraceMs: 6000, upstreams: { f: fixtureStdio() } });
      started.push(gw);
      const url = `${gw.base}/mcp/f`;
      const asked = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: CAPS });
      expect(asked.body.result.resultType).toBe('input_required');
      gw.child.kill('SIGTERM');
      expect(await stoppingLogged(gw)).toBe(true);

      const fresh = await rawPost(
        url,
        { jsonrpc: '2.0', id: 'fresh-1', method: 'tools/call', params: { name: 'slow', arguments: { ms: 10, steps: 1 }, _meta: ENVELOPE } },
        'tools/call',
        'slow',
      );
      expect(fresh.status).toBe(503);
      expect(fresh.headers.connection).toBe('close');
      expect(fresh.body).toMatchObject({ id: 'fresh-1', error: { code: -32603, message: 'gateway shutting down' } });

      const init = await rawPost(
        url,
        {
          jsonrpc: '2.0',
          id: 7,
          method: 'initialize',
          params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'old', version: '1' } },
        },
        'tools/call',
      );
      expect(init.status).toBe(503);
      expect(init.headers.connection).toBe('close');
      expect(init.body).toMatchObject({ id: 7, error: { code: -32603, message: 'gateway shutting down' } });
      expect(await gw.exited).toEqual({ code: 0, signal: null });
    },
    scaled(40_000),
  );
});
