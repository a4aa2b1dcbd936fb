/**
 * Starting an upstream is bounded by `timeouts.connectMs`: an HTTP+SSE upstream that never sends
 * its `endpoint` event, a stdio child that never answers or floods stdout with text, an HTTP
 * upstream that accepts connections and never answers. Also: a client that goes away while the
 * upstream starts is released, shutdown never waits on a starting upstream, start-up time is
 * upstream time in the request log, and a burst of new stdio sessions starts a few at a time.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createNetServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio, modernStdio, startFixtureHttp } from '../helpers/fixture.js';
import { alive, startCli } from '../helpers/cli.js';
import { scaled } from '../helpers/budget.js';

const gateways: TestGateway[] = [];
const servers: { close(): void }[] = [];
async function gateway(raw: Record<string, unknown>, opts: Parameters<typeof startGateway>[1] = {}): Promise<TestGateway> {
  const g = await startGateway(raw, opts);
  gateways.push(g);
  return g;
}
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
  for (const s of servers) s.close();
});

/** An HTTP+SSE upstream that opens `GET /sse`, writes a comment, and then never sends the `endpoint` event. */
async function stalledSse(): Promise<{ url: string; open: () => number }> {
  const sockets = new Set<Socket>();
  let streams = 0;
  const srv: Server = createHttpServer((req, res) => {
    if (req.method === 'GET' && req.url === '/sse') {
      streams++;
      res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
      res.write(': hi\n\n');
      req.on('close', () => streams--);
      return;
    }
    res.writeHead(404).end();
  });
  srv.on('connection', (s) => (sockets.add(s), s.on('close', () => sockets.delete(s))));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  servers.push({ close: () => (sockets.forEach((s) => s.destroy()), srv.close()) });
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/sse`, open: () => streams };
}

/** A TCP server on 127.0.0.1 that accepts connections and never writes a byte. */
async function silentTcp(): Promise<number> {
  const sockets = new Set<Socket>();
  const srv = createNetServer((s) => (sockets.add(s), s.on('close', () => sockets.delete(s)), s.on('error', () => {})));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  servers.push({ close: () => (sockets.forEach((s) => s.destroy()), srv.close()) });
  return (srv.address() as AddressInfo).port;
}

async function timed<T>(work: Promise<T>): Promise<{ value: T; ms: number }> {
  const t0 = performance.now();
  const value = await work;
  return { value, ms: performance.now() - t0 };
}

describe('upstream start bounded by timeouts.connectMs', () => {
  it(
    'an HTTP+SSE upstream that never sends its endpoint event: -32603 timeout after about connectMs, and not ready',
    async () => {
      const sse = await stalledSse();
      const gw = await gateway({ upstreams: { s: { transport: 'sse', url: sse.url, required: true, timeouts: { connectMs: 1500 } } } });
      const { value: r, ms } = await timed(rpc(gw.url('s'), 'tools/list'));
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 's', reason: 'timeout' } });
      expect(r.body.error.message).toContain("Upstream 's' did not start within timeouts.connectMs=1500 ms");
      expect(r.body.error.message).toContain('endpoint event');
      expect(ms).toBeGreaterThanOrEqual(1400);
      expect(ms).toBeLessThan(scaled(6000));
      const ready = await timed(fetch(`${gw.base}/readyz`));
      expect(ready.value.status).toBe(503);
      const body = (await ready.value.json()) as { ready: boolean; upstreams: { name: string; ready: boolean; reason?: string }[] };
      expect(body.ready).toBe(false);
      expect(body.upstreams).toEqual([{ name: 's', ready: false, reason: expect.stringContaining('took longer than 1500 ms') }]);
      expect(ready.ms).toBeLessThan(scaled(6000));
      // The stalled streams were closed, not left open.
      expect(await eventually(() => sse.open() === 0, 3000)).toBe(true);
    },
    scaled(30_000),
  );

  it(
    'a stdio child that never answers (protocol auto): timeout after connectMs, with a message naming the setting and the protocol to set',
    async () => {
      const gw = await gateway({
        upstreams: { z: { transport: 'stdio', command: 'sleep', args: ['100'], timeouts: { connectMs: 2000 } } },
      });
      const { value: r, ms } = await timed(rpc(gw.url('z'), 'tools/list'));
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'z', reason: 'timeout' } });
      expect(r.body.error.message).toMatch(
        /^Upstream 'z' did not start within timeouts\.connectMs=2000 ms \(no answer to server\/discover within 2000 ms\); check that it starts and answers server\/discover, or raise timeouts\.connectMs/,
      );
      expect(r.body.error.message).toContain('protocol: "legacy"');
      expect(r.body.error.message).toContain('protocol: "2026-07-28"');
      expect(r.body.error.message).not.toContain('MCP error');
      // The whole budget went to the era probe, and no initialize followed it.
      expect(ms).toBeGreaterThanOrEqual(1900);
      expect(ms).toBeLessThan(scaled(4500));
    },
    scaled(30_000),
  );

  it(
    'an HTTP upstream that accepts connections and never answers (protocol auto): timeout within connectMs in total',
    async () => {
      const port = await silentTcp();
      const gw = await gateway({
        upstreams: { h: { transport: 'streamable-http', url: `http://127.0.0.1:${port}/mcp`, timeouts: { connectMs: 3000 } } },
      });
      const { value: r, ms } = await timed(rpc(gw.url('h'), 'tools/list'));
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'h', reason: 'timeout' } });
      expect(r.body.error.message).toContain("Upstream 'h' did not start within timeouts.connectMs=3000 ms");
      expect(r.body.error.message).not.toContain('MCP error');
      expect(ms).toBeLessThan(scaled(5000));
    },
    scaled(30_000),
  );

  for (const protocol of ['auto', 'legacy'] as const) {
    it(
      `a stdio child that floods stdout with text (protocol ${protocol}) fails fast and is stopped, never taken for an era`,
      async () => {
        const mem = memoryLogger('info');
        const gw = await gateway(
          { upstreams: { y: { transport: 'stdio', command: 'yes', protocol, timeouts: { connectMs: 4000 } } } },
          { log: mem.log },
        );
        const { value: r, ms } = await timed(rpc(gw.url('y'), 'tools/list'));
        expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'y', reason: 'protocol' } });
        expect(r.body.error.message).toContain('1000 lines in a row that are not JSON-RPC messages on stdout');
        // Well before connectMs: the flood itself ends the start.
        expect(ms).toBeLessThan(scaled(3500));
        expect(mem.lines().filter((l) => l.msg === 'upstream era detected')).toEqual([]);
        const stopped = mem.lines().filter((l) => l.msg === 'upstream stdout is not JSON-RPC: stopping the process');
        expect(stopped).toHaveLength(1);
        expect(await eventually(() => !alive(stopped[0]!.pid), 3000)).toBe(true);
      },
      scaled(30_000),
    );
  }
});

/** A closed port on 127.0.0.1: one that was listening and is no more. */
async function closedPort(): Promise<number> {
  const srv = createNetServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

/** A Streamable HTTP upstream that answers every request with a 2026-07-28 DiscoverResult, counting the requests by method. */
async function discoverOnly(): Promise<{ url: string; count: (method: string) => number }> {
  const seen: string[] = [];
  const srv: Server = createHttpServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      const msg = JSON.parse(body) as { id: string; method: string };
      seen.push(msg.method);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          jsonrpc: '2.0',
          id: msg.id,
          result: { resultType: 'complete', supportedVersions: ['2026-07-28'], capabilities: {}, serverInfo: { name: 'd', version: '1' } },
        }),
      );
    });
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  servers.push({ close: () => (srv.closeAllConnections(), srv.close()) });
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`, count: (m) => seen.filter((x) => x === m).length };
}

type Readiness = { ready: boolean; upstreams: { name: string; ready: boolean; reason?: string }[] };

describe('a pinned 2026-07-28 upstream (protocol "2026-07-28"): start bounded by connectMs, and readiness', () => {
  const pinned = (u: Record<string, unknown>) => ({ ...u, protocol: '2026-07-28', required: true, timeouts: { connectMs: 2000 } });

  it(
    'a stdio child that reads stdin and never answers: -32603 timeout after about connectMs naming the setting, the child stopped, and not ready',
    async () => {
      const mem = memoryLogger('info');
      const gw = await gateway(
        { upstreams: { z: pinned({ transport: 'stdio', command: 'sh', args: ['-c', 'cat > /dev/null'] }) } },
        { log: mem.log },
      );
      const { value: r, ms } = await timed(rpc(gw.url('z'), 'tools/list'));
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'z', reason: 'timeout' } });
      expect(r.body.error.message).toMatch(
        /^Upstream 'z' did not start within timeouts\.connectMs=2000 ms \(no answer to server\/discover within 2000 ms\); check that it starts and answers server\/discover/,
      );
      expect(ms).toBeGreaterThanOrEqual(1900);
      expect(ms).toBeLessThan(scaled(8000));
      const started = mem.lines().filter((l) => l.msg === 'modern upstream process started');
      expect(started).toHaveLength(1);
      expect(await eventually(() => !alive(started[0]!.pid), 3000)).toBe(true);
      const ready = await timed(fetch(`${gw.base}/readyz`));
      expect(ready.value.status).toBe(503);
      expect(((await ready.value.json()) as Readiness).upstreams).toEqual([
        { name: 'z', ready: false, reason: expect.stringContaining('did not start within timeouts.connectMs=2000 ms') },
      ]);
      expect(ready.ms).toBeLessThan(scaled(8000));
    },
    scaled(30_000),
  );

  it(
    'an HTTP upstream that accepts connections and never answers: -32603 timeout after about connectMs, and not ready',
    async () => {
      const port = await silentTcp();
      const gw = await gateway({ upstreams: { h: pinned({ transport: 'streamable-http', url: `http://127.0.0.1:${port}/mcp` }) } });
      const { value: r, ms } = await timed(rpc(gw.url('h'), 'tools/list'));
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'h', reason: 'timeout' } });
      expect(r.body.error.message).toContain("Upstream 'h' did not start within timeouts.connectMs=2000 ms");
      expect(ms).toBeGreaterThanOrEqual(1900);
      expect(ms).toBeLessThan(scaled(8000));
      const ready = await fetch(`${gw.base}/readyz`);
      expect(ready.status).toBe(503);
      expect(((await ready.json()) as Readiness).upstreams).toEqual([
        { name: 'h', ready: false, reason: expect.stringContaining('did not start within timeouts.connectMs=2000 ms') },
      ]);
    },
    scaled(30_000),
  );

  it(
    'a closed port and a command that does not exist: /readyz 503 naming each, with the reason',
    async () => {
      const port = await closedPort();
      const gw = await gateway({
        upstreams: {
          refused: pinned({ transport: 'streamable-http', url: `http://127.0.0.1:${port}/mcp` }),
          missing: pinned({ transport: 'stdio', command: '/nonexistent/bin' }),
        },
      });
      const res = await fetch(`${gw.base}/readyz`);
      expect(res.status).toBe(503);
      const body = (await res.json()) as Readiness;
      expect(body.ready).toBe(false);
      expect(body.upstreams).toEqual([
        {
          name: 'refused',
          ready: false,
          reason: expect.stringMatching(/^Upstream 'refused' could not be started or reached: .*ECONNREFUSED/),
        },
        { name: 'missing', ready: false, reason: expect.stringMatching(/^Upstream 'missing' could not be started or reached: .*ENOENT/) },
      ]);
    },
    scaled(30_000),
  );

  it(
    'an upstream that answers: ready, asked once (the start is kept), and its calls are served',
    async () => {
      const up = await discoverOnly();
      const gw = await gateway({ upstreams: { d: pinned({ transport: 'streamable-http', url: up.url }) } });
      for (let i = 0; i < 2; i++) {
        const res = await fetch(`${gw.base}/readyz`);
        expect(res.status).toBe(200);
        expect(await res.json()).toEqual({ ready: true, upstreams: [{ name: 'd', ready: true }] });
      }
      expect(up.count('server/discover')).toBe(1);
      const r = await rpc(gw.url('d'), 'server/discover');
      expect(r.body.result.supportedVersions).toEqual(['2026-07-28']);
      expect(up.count('server/discover')).toBe(2);
    },
    scaled(30_000),
  );
});

describe("text on a stdio child's stdout", () => {
  it(
    'a banner line before the first message is tolerated: the upstream serves',
    async () => {
      const f = fixtureStdio() as { command: string; args: string[] };
      const banner = { ...f, command: 'sh', args: ['-c', 'echo "server ready on stdio"; exec "$0" "$@"', f.command, ...f.args] };
      const gw = await gateway({ upstreams: { b: banner } });
      const r = await rpc(gw.url('b'), 'tools/list');
      expect(r.body.result.tools.length).toBeGreaterThan(0);
    },
    scaled(30_000),
  );
});

/**
 * A stdio MCP server in a few lines (legacy revisions, no SDK): `initialize`, `tools/list` (one tool
 * `big`) and `tools/call`, whose result is a text of `BIG_BYTES` characters; -32601 for the rest.
 */
const RAW_SERVER = `
const rl = require('readline').createInterface({ input: process.stdin });
const out = (m) => process.stdout.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\\n');
rl.on('line', (l) => {
  const m = JSON.parse(l);
  if (m.id === undefined) return;
  if (m.method === 'initialize') return out({ id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'raw', version: '1' } } });
  if (m.method === 'tools/list') return out({ id: m.id, result: { tools: [{ name: 'big', inputSchema: { type: 'object' } }] } });
  if (m.method === 'tools/call') return out({ id: m.id, result: { content: [{ type: 'text', text: 'x'.repeat(Number(process.env.BIG_BYTES)) }] } });
  if (m.method === 'ping') return out({ id: m.id, result: {} });
  out({ id: m.id, error: { code: -32601, message: 'Method not found' } });
});`;

describe('an HTTP upstream that refuses the credentials', () => {
  it(
    '401 or 403 at the start: -32603 unreachable saying the upstream refused the credentials and which to check',
    async () => {
      let status = 401;
      const srv: Server = createHttpServer((_req, res) =>
        res.writeHead(status, { 'content-type': 'application/json' }).end('{"error":"nope"}'),
      );
      await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
      servers.push({ close: () => (srv.closeAllConnections(), srv.close()) });
      const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`;
      const gw = await gateway({
        upstreams: {
          plain: { transport: 'streamable-http', url, protocol: 'legacy', headers: { Authorization: 'Bearer static' } },
          fwd: { transport: 'streamable-http', url, protocol: 'legacy', forwardAuthorization: true },
        },
      });
      for (const [name, code, check] of [
        ['plain', 401, 'the configured headers'],
        ['fwd', 403, "the caller's token (forwardAuthorization)"],
      ] as const) {
        status = code;
        const r = await rpc(gw.url(name), 'tools/list', {}, { headers: { authorization: 'Bearer caller-token' } });
        expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: name, reason: 'unreachable' } });
        expect(r.body.error.message).toContain(`the upstream refused the credentials (HTTP ${code}): check ${check}`);
      }
    },
    scaled(30_000),
  );
});

describe('forwardAuthorization', () => {
  it('is warned about once per such upstream at start: token passthrough, and the audience check it needs', async () => {
    const mem = memoryLogger('warn');
    const url = 'http://127.0.0.1:9/mcp';
    await gateway(
      {
        upstreams: {
          fwd: { transport: 'streamable-http', url, forwardAuthorization: true },
          plain: { transport: 'streamable-http', url },
        },
      },
      { log: mem.log },
    );
    const warned = mem.lines().filter((l) => /token passthrough/.test(String(l.msg)));
    expect(warned.map((l) => l.upstream)).toEqual(['fwd']);
    expect(warned[0]!.msg).toContain("checks that each token's audience is its own");
  });
});

describe('what a stdio child writes reaches callers and logs only as it should', () => {
  it('the values of its env (passthrough included) are hidden in data.stderr, the message and the logs', async () => {
    const mem = memoryLogger('debug');
    const secret = 'sk-live-SUPERSECRET-0123';
    process.env.MRTR_TEST_PASSED_TOKEN = 'ghp_passedThrough987';
    try {
      const cmd =
        'console.error("auth failed with key " + process.env.API_KEY + " and token " + process.env.MRTR_TEST_PASSED_TOKEN + " pin " + process.env.PIN_PASSWORD + " mode " + process.env.MODE); process.exit(1)';
      const gw = await gateway(
        {
          upstreams: {
            leaky: {
              transport: 'stdio',
              command: process.execPath,
              args: ['-e', cmd],
              protocol: 'legacy',
              env: { API_KEY: secret, PIN_PASSWORD: '4821', MODE: 'on' },
              envPassthrough: ['MRTR_TEST_PASSED_TOKEN'],
            },
          },
        },
        { log: mem.log },
      );
      const r = await rpc(gw.url('leaky'), 'tools/list');
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'leaky', reason: 'unreachable' } });
      // What the child said is there, its credentials are not; a short value of a plain variable stays.
      expect(r.body.error.data.stderr).toEqual(['auth failed with key [redacted] and token [redacted] pin [redacted] mode on']);
      expect(r.body.error.message).toContain('auth failed with key [redacted] and token [redacted]');
      const everything = JSON.stringify(r.body) + JSON.stringify(mem.lines());
      expect(everything).toContain('auth failed with key [redacted]');
      for (const hidden of [secret, 'ghp_passedThrough987', '4821']) expect(everything).not.toContain(hidden);
    } finally {
      delete process.env.MRTR_TEST_PASSED_TOKEN;
    }
  });

  it(
    'its env values are hidden in base64, base64url, percent-encoded and JSON-escaped form too',
    async () => {
      const mem = memoryLogger('debug');
      const secret = 'pa$$ word/"quoted"?+>';
      const forms = [
        Buffer.from(secret).toString('base64'),
        Buffer.from(secret).toString('base64url'),
        encodeURIComponent(secret),
        JSON.stringify(secret).slice(1, -1),
      ];
      const cmd = `const s = process.env.DB_PASSWORD; console.error(["b64", Buffer.from(s).toString("base64"), "b64url", Buffer.from(s).toString("base64url"), "url", encodeURIComponent(s), "json", JSON.stringify({ p: s })].join(" ")); process.exit(1)`;
      const gw = await gateway(
        {
          upstreams: {
            leaky: { transport: 'stdio', command: process.execPath, args: ['-e', cmd], protocol: 'legacy', env: { DB_PASSWORD: secret } },
          },
        },
        { log: mem.log },
      );
      const r = await rpc(gw.url('leaky'), 'tools/list');
      expect(r.body.error.data.stderr).toEqual(['b64 [redacted] b64url [redacted] url [redacted] json {"p":"[redacted]"}']);
      const everything = JSON.stringify(r.body) + JSON.stringify(mem.lines());
      for (const hidden of forms) expect(everything).not.toContain(hidden);
    },
    scaled(30_000),
  );

  it(
    'a message past the 10 MiB stdio bound fails the call with protocol, naming the bound, logged at warn; the next call gets a new child',
    async () => {
      const mem = memoryLogger('info');
      const gw = await gateway(
        {
          upstreams: {
            big: {
              transport: 'stdio',
              command: process.execPath,
              args: ['-e', RAW_SERVER],
              protocol: 'legacy',
              env: { BIG_BYTES: String(12 * 1024 * 1024) },
            },
          },
        },
        { log: mem.log },
      );
      const r = await rpc(gw.url('big'), 'tools/call', { name: 'big', arguments: {} });
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'big', reason: 'protocol' } });
      expect(r.body.error.message).toContain('a message of more than 10485760 bytes on stdout');
      const warned = mem.lines().filter((l) => l.level === 40 && l.msg === 'upstream stdout is not JSON-RPC: stopping the process');
      expect(warned).toHaveLength(1);
      expect(await eventually(() => !alive(warned[0]!.pid), 3000)).toBe(true);
      expect((await rpc(gw.url('big'), 'tools/list')).body.result.tools).toEqual([expect.objectContaining({ name: 'big' })]);
    },
    scaled(30_000),
  );

  it(
    'a secret cut by the stderr bound of an unfinished line, or split across stdout writes, is hidden all the same',
    async () => {
      const secret = 'tok-SECRETVALUE-123';
      // 64,100 characters without a newline (over the 64,000 an unfinished line may grow to), the secret ending 495 before the end.
      const long = `process.stderr.write("a".repeat(${64_100 - 495 - secret.length}) + process.env.MY_TOKEN + "b".repeat(495)); setTimeout(() => { process.stderr.write("\\n"); process.exit(1); }, 300)`;
      const split =
        'process.stdout.write("stray " + process.env.MY_TOKEN.slice(0, 10)); setTimeout(() => process.stdout.write(process.env.MY_TOKEN.slice(10) + "\\n"), 200); setInterval(() => {}, 1000)';
      const gw = await gateway({
        upstreams: {
          long: { transport: 'stdio', command: process.execPath, args: ['-e', long], protocol: 'legacy', env: { MY_TOKEN: secret } },
          split: {
            transport: 'stdio',
            command: process.execPath,
            args: ['-e', split],
            protocol: 'legacy',
            env: { MY_TOKEN: secret },
            timeouts: { connectMs: 1500 },
          },
        },
      });
      const l = await rpc(gw.url('long'), 'tools/list');
      expect(l.body.error.data.reason).toBe('unreachable');
      const s = await rpc(gw.url('split'), 'tools/list');
      expect(s.body.error.message).toContain('(the first: "stray [redacted]")');
      for (const part of ['E-123', 'tok-SECRET', 'VALUE-123']) expect(JSON.stringify([l.body, s.body])).not.toContain(part);
    },
    scaled(30_000),
  );

  it(
    'a start that times out says what the child wrote on stdout that is not MCP, with its env hidden',
    async () => {
      const cmd = 'setInterval(() => console.log("hello not json, key " + process.env.API_KEY), 100)';
      const gw = await gateway({
        upstreams: {
          chatty: {
            transport: 'stdio',
            command: process.execPath,
            args: ['-e', cmd],
            protocol: 'legacy',
            env: { API_KEY: 'key-0123456789' },
            timeouts: { connectMs: 1500 },
          },
        },
      });
      const r = await rpc(gw.url('chatty'), 'tools/list');
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'chatty', reason: 'timeout' } });
      expect(r.body.error.message).toMatch(
        /did not start within timeouts\.connectMs=1500 ms \(waiting for the initialize result took longer than 1500 ms; the process wrote \d+ line\(s\) on stdout that are not MCP messages \(the first: "hello not json, key \[redacted\]"\)/,
      );
      expect(r.body.error.message).not.toContain('key-0123456789');
    },
    scaled(30_000),
  );
});

describe('client disconnect and shutdown while an upstream starts', () => {
  it(
    'a client that goes away is released at once; SIGTERM then exits 0 without waiting for the upstream',
    async () => {
      const sse = await stalledSse();
      const gw = await startCli({
        shutdownGraceMs: 500,
        upstreams: { s: { transport: 'sse', url: sse.url, required: true, timeouts: { connectMs: 120_000 } } },
      });
      try {
        const ac = new AbortController();
        const gone = fetch(`${gw.base}/mcp/s`, {
          method: 'POST',
          signal: ac.signal,
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            'mcp-protocol-version': '2026-07-28',
            'mcp-method': 'tools/list',
          },
          body: JSON.stringify({
            jsonrpc: '2.0',
            id: 1,
            method: 'tools/list',
            params: {
              _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} },
            },
          }),
        }).catch((e: Error) => e);
        expect(await eventually(() => gw.logs.some((l) => l.msg === 'request') || sse.open() >= 2, 10_000)).toBe(true);
        ac.abort();
        await gone;
        expect(await eventually(() => gw.logs.some((l) => l.msg === 'request' && l.method === 'tools/list'), 5000)).toBe(true);
        expect(gw.logs.find((l) => l.msg === 'request' && l.method === 'tools/list')).toMatchObject({
          outcome: 'error',
          code: -32603,
          reason: 'cancelled',
        });
        // A second client still waiting when SIGTERM comes.
        const waiting = rpc(`${gw.base}/mcp/s`, 'tools/list').catch((e: Error) => e);
        await new Promise((r) => setTimeout(r, 300));
        const t0 = performance.now();
        gw.child.kill('SIGTERM');
        const answer = await waiting;
        expect(answer).toMatchObject({ body: { error: { code: -32603, message: 'gateway shutting down' } } });
        expect(await gw.exited).toEqual({ code: 0, signal: null });
        expect(performance.now() - t0).toBeLessThan(scaled(8000));
        const over = gw.logs.find((l) => /grace period over/.test(l.msg));
        expect(over?.inFlight).toBe(1);
      } finally {
        if (gw.child.exitCode === null) gw.child.kill('SIGKILL');
      }
    },
    scaled(40_000),
  );
});

describe('start-up time is upstream time', () => {
  it(
    'the first server/discover of a stdio upstream logs the spawn and initialize as upstreamMs',
    async () => {
      const mem = memoryLogger('info');
      const gw = await gateway({ upstreams: { f: { ...fixtureStdio(), protocol: 'legacy' } } }, { log: mem.log });
      const r = await rpc(gw.url('f'), 'server/discover');
      expect(r.body.result.resultType).toBe('complete');
      const line = mem.lines().find((l) => l.msg === 'request' && l.method === 'server/discover')!;
      expect(line.durationMs).toBeGreaterThan(100);
      // Nearly all of it was the child starting.
      expect(line.upstreamMs).toBeGreaterThan(line.durationMs * 0.8);
      const metrics = await (await fetch(`${gw.base}/metrics`)).text();
      const added = Number(/mrtr_gateway_added_seconds_sum\{[^}]*upstream="f"[^}]*\} ([\d.e+-]+)/.exec(metrics)?.[1]);
      expect(added).toBeLessThan((line.durationMs / 1000) * 0.2);
    },
    scaled(30_000),
  );
});

describe('the era probe of a stdio upstream (protocol auto)', () => {
  it(
    'a legacy child started only for the probe is logged as the era probe, not as a 2026-07-28 process',
    async () => {
      const mem = memoryLogger('info');
      const gw = await gateway({ upstreams: { f: fixtureStdio() } }, { log: mem.log });
      const r = await rpc(gw.url('f'), 'tools/list');
      expect(r.body.result.tools.length).toBeGreaterThan(0);
      const msgs = mem.lines().map((l) => l.msg);
      expect(msgs).toContain('era probe process started (protocol: auto)');
      expect(msgs).not.toContain('modern upstream process started');
      expect(mem.lines().find((l) => l.msg === 'upstream era detected')).toMatchObject({ upstream: 'f', era: 'legacy' });
    },
    scaled(30_000),
  );
});

describe('a slow stdio server behind the era probe (protocol auto)', () => {
  it(
    'a server that needs 11 s to start gets its whole connectMs (15 s) from the spawn: the probe child goes on as the legacy session, one process, and the first call succeeds',
    async () => {
      const log = new FixtureLog();
      const mem = memoryLogger('info');
      const gw = await gateway(
        { upstreams: { slow: { ...fixtureStdio(log, { FIXTURE_START_DELAY_MS: '11000' }), timeouts: { connectMs: 15_000 } } } },
        { log: mem.log },
      );
      const { value: r, ms } = await timed(rpc(gw.url('slow'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } }));
      expect(r.body.error).toBeUndefined();
      expect(r.body.result.content[0].text).toBe('slept 10ms');
      expect(ms).toBeGreaterThanOrEqual(11_000);
      // One child: the one the probe spawned answered initialize.
      expect(log.of('process-start')).toHaveLength(1);
      expect(new Set(log.events().map((e) => e.pid)).size).toBe(1);
      expect(mem.lines().find((l) => l.msg === 'upstream era detected')).toMatchObject({ upstream: 'slow', era: 'legacy' });
      expect(mem.lines().some((l) => l.msg === 'era probe process handed to the first legacy session')).toBe(true);
    },
    scaled(45_000),
  );
});

describe('a slow 2026-07-28 stdio server behind the era probe (protocol auto)', () => {
  it(
    'a modern-only server that needs 7 s to start is found 2026-07-28 within connectMs (15 s): one process, and the first call succeeds',
    async () => {
      const log = new FixtureLog();
      const mem = memoryLogger('info');
      const modern = modernStdio(log, { FIXTURE_LEGACY: 'reject', FIXTURE_EXTRA_TOOLS: '["hello"]' }) as {
        command: string;
        args: string[];
        env: Record<string, string>;
      };
      const wrapped = {
        transport: 'stdio',
        command: 'sh',
        args: ['-c', 'sleep 7; exec "$0" "$@"', modern.command, ...modern.args],
        env: modern.env,
        timeouts: { connectMs: 15_000 },
      };
      const gw = await gateway({ upstreams: { m: wrapped } }, { log: mem.log });
      const { value: r, ms } = await timed(rpc(gw.url('m'), 'tools/call', { name: 'hello', arguments: {} }));
      expect(r.body.error).toBeUndefined();
      expect(r.body.result.content[0].text).toBe('hello');
      expect(ms).toBeGreaterThanOrEqual(7000);
      expect(mem.lines().find((l) => l.msg === 'upstream era detected')).toMatchObject({ upstream: 'm', era: 'modern' });
      expect(mem.lines().filter((l) => /process started/.test(String(l.msg)))).toHaveLength(1);
      expect(new Set(log.of('call').map((e) => e.pid)).size).toBe(1);
    },
    scaled(45_000),
  );
});

describe('readiness of a required upstream in its first start', () => {
  it(
    '/readyz is 503 at once while the first starts run, begins them all side by side (era probe, then initialize on the handed-over child), and is 200 once every session opened',
    async () => {
      const log = new FixtureLog();
      const mem = memoryLogger('info');
      const slow = {
        ...fixtureStdio(log, { FIXTURE_START_DELAY_MS: '4000' }),
        required: true,
        timeouts: { connectMs: 2000, firstStartMs: 20_000 },
      };
      const gw = await gateway({ upstreams: { s1: slow, s2: slow, s3: slow } }, { log: mem.log });
      const opened = () => ['s1', 's2', 's3'].map((n) => gw.gateway.upstreams.get(n)!.pool.opened);
      // The first readiness check begins the three starts and does not wait for them.
      const first = await timed(fetch(`${gw.base}/readyz`));
      expect(first.value.status).toBe(503);
      expect(((await first.value.json()) as Readiness).upstreams).toEqual(
        ['s1', 's2', 's3'].map((name) => ({ name, ready: false, reason: expect.stringContaining('first start') })),
      );
      expect(first.ms).toBeLessThan(scaled(1500));
      // All three children run before any of them opened: the starts are not taken one by one.
      expect(await eventually(() => log.of('process-start').length === 3, 10_000)).toBe(true);
      expect(opened()).toEqual([0, 0, 0]);
      const during = await timed(fetch(`${gw.base}/readyz`));
      expect(during.value.status).toBe(503);
      expect(during.ms).toBeLessThan(scaled(1500));
      expect(await eventually(async () => (await fetch(`${gw.base}/readyz`)).status === 200, 20_000)).toBe(true);
      expect(opened()).toEqual([1, 1, 1]);
      expect(log.of('process-start')).toHaveLength(3);
    },
    scaled(45_000),
  );
});

describe('a first start that runs out of firstStartMs (protocol auto)', () => {
  it(
    'the child is kept: the next call waits on it with a fresh budget and is served by it, one process in all',
    async () => {
      const log = new FixtureLog();
      const mem = memoryLogger('info');
      const slow = { ...fixtureStdio(log, { FIXTURE_START_DELAY_MS: '4500' }), timeouts: { connectMs: 2000, firstStartMs: 3000 } };
      const gw = await gateway({ upstreams: { s: slow } }, { log: mem.log });
      const first = await rpc(gw.url('s'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } });
      expect(first.body.error).toMatchObject({ code: -32603, data: { upstream: 's', reason: 'timeout' } });
      expect(first.body.error.message).toContain('timeouts.firstStartMs=3000 ms');
      const second = await rpc(gw.url('s'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } });
      expect(second.body.error).toBeUndefined();
      expect(second.body.result.content[0].text).toBe('slept 10ms');
      expect(log.of('process-start')).toHaveLength(1);
      expect(mem.lines().filter((l) => l.msg === 'era probe process started (protocol: auto)')).toHaveLength(1);
      expect(
        mem.lines().some((l) => l.msg === 'upstream process still in its first start (it may be installing): kept for the next call'),
      ).toBe(true);
    },
    scaled(45_000),
  );
});

describe('a first start that runs out of firstStartMs (protocol legacy)', () => {
  it(
    'the timeout names the budget, firstStartMs, and no era probe (none ran)',
    async () => {
      const log = new FixtureLog();
      const slow = {
        ...fixtureStdio(log, { FIXTURE_START_DELAY_MS: '4500' }),
        protocol: 'legacy',
        timeouts: { connectMs: 15_000, firstStartMs: 2000 },
      };
      const gw = await gateway({ upstreams: { s: slow } });
      const first = await rpc(gw.url('s'), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } });
      expect(first.body.error).toMatchObject({ code: -32603, data: { upstream: 's', reason: 'timeout' } });
      expect(first.body.error.message).toContain('timeouts.firstStartMs=2000 ms');
      expect(first.body.error.message).toContain('took longer than 2000 ms');
      expect(first.body.error.message).not.toContain('era probe');
    },
    scaled(30_000),
  );
});

describe('many sessions opening at once', () => {
  it(
    '32 calls that each open a Streamable HTTP session raise no MaxListenersExceededWarning',
    async () => {
      const up = await startFixtureHttp('http');
      servers.push({ close: () => void up.stop() });
      const g = await gateway({
        upstreams: { f: { ...up.config, maxSessions: 64 } },
        limits: { rateLimit: { requestsPerSecond: 1000, burst: 1000 } },
      });
      const warnings: string[] = [];
      const onWarning = (w: Error) => warnings.push(`${w.name}: ${w.message}`);
      process.on('warning', onWarning);
      try {
        const calls = await Promise.all(
          Array.from({ length: 32 }, () => rpc(g.url('f'), 'tools/call', { name: 'slow', arguments: { ms: 200, steps: 1 } })),
        );
        expect(calls.map((c) => c.body.result?.content?.[0]?.text)).toEqual(Array(32).fill('slept 200ms'));
        expect(g.gateway.upstreams.get('f')!.pool.stats().total).toBeGreaterThan(10);
        // Warnings are emitted on the next tick.
        await new Promise((r) => setImmediate(r));
      } finally {
        process.off('warning', onWarning);
      }
      expect(warnings.filter((w) => /MaxListeners/.test(w))).toEqual([]);
    },
    scaled(30_000),
  );
});

/**
 * A legacy stdio server (plain JSON-RPC lines) whose start takes turns with its siblings, as
 * children that share a busy host's cores slow each other down: it joins a line (a file in the
 * directory `LINE`, named by when it came) and, once first in it, starts for `HOLD_MS` before it
 * leaves the line and reads stdin. So the k-th of a burst spawned together is ready after
 * k × HOLD_MS. Its tool `ask` asks `elicitation/create` for a name and answers `Hello, NAME!`;
 * its tool `hi` answers `hi` at once.
 */
const TAKING_TURNS = `
import { readdirSync, unlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
const dir = process.env.LINE;
const me = String(Date.now()).padStart(15, '0') + '-' + String(process.pid).padStart(8, '0');
writeFileSync(join(dir, me), '');
const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
function turn() {
  const first = readdirSync(dir).sort()[0];
  if (first === me) return void setTimeout(() => { unlinkSync(join(dir, me)); serve(); }, Number(process.env.HOLD_MS));
  // One that was stopped while it waited or started leaves the line.
  if (!alive(Number(first.split('-')[1]))) try { unlinkSync(join(dir, first)); } catch {}
  setTimeout(turn, 10);
}
function serve() {
  const send = (m) => process.stdout.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\\n');
  const asked = new Map();
  let n = 0;
  createInterface({ input: process.stdin }).on('line', (line) => {
    const m = JSON.parse(line);
    if (m.method === undefined && asked.has(m.id)) {
      const call = asked.get(m.id);
      asked.delete(m.id);
      return send({ id: call, result: { content: [{ type: 'text', text: 'Hello, ' + m.result.content.name + '!' }] } });
    }
    if (m.id === undefined) return;
    if (m.method === 'initialize') return send({ id: m.id, result: { protocolVersion: m.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'turns', version: '1.0.0' } } });
    if (m.method === 'tools/list') return send({ id: m.id, result: { tools: [{ name: 'ask', inputSchema: { type: 'object' } }, { name: 'hi', inputSchema: { type: 'object' } }] } });
    if (m.method === 'tools/call' && m.params.name === 'hi') return send({ id: m.id, result: { content: [{ type: 'text', text: 'hi' }] } });
    if (m.method === 'tools/call') {
      const id = 'ask-' + ++n;
      asked.set(id, m.id);
      return send({ id, method: 'elicitation/create', params: { message: 'Your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } } });
    }
    send({ id: m.id, result: {} });
  });
}
turn();
`;

/** A stdio upstream running {@link TAKING_TURNS}, each start holding its turn `holdMs`; `extra` goes into its config. */
function takingTurns(holdMs: number, extra: Record<string, unknown>): Record<string, unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'mrtr-turns-'));
  const script = join(dir, 'turns.mjs');
  writeFileSync(script, TAKING_TURNS);
  const line = join(dir, 'line');
  mkdirSync(line);
  return {
    transport: 'stdio',
    command: process.execPath,
    args: [script],
    env: { LINE: line, HOLD_MS: String(holdMs) },
    protocol: 'legacy',
    ...extra,
  };
}

describe('a burst of new stdio sessions', () => {
  it(
    'starts a few at a time (maxStartingSessions, 4 by default), each start timed by connectMs from when it begins: 12 parallel eliciting calls on a cold upstream whose starts slow each other down are all served',
    async () => {
      // 800 ms per start in turn: of 12 spawned at once the last 5 need 6.4 s or more; of 4 at once none needs more than 3.2 s (plus spawning, a second or more on a busy host).
      const gw = await gateway({
        upstreams: { t: takingTurns(800, { maxSessions: 16, maxParkedSessions: 12, timeouts: { connectMs: 6000 } }) },
      });
      const caps = { elicitation: {} };
      const first = await Promise.all(
        Array.from({ length: 12 }, () => rpc(gw.url('t'), 'tools/call', { name: 'ask', arguments: {} }, { caps })),
      );
      expect(first.map((r) => r.body.error ?? r.body.result.resultType)).toEqual(Array(12).fill('input_required'));
      // Each call holds a session of its own while it waits for its answer.
      expect(gw.gateway.upstreams.get('t')!.pool.stats()).toMatchObject({ total: 12, leased: 12, starting: 0, waitingToStart: 0 });
      const done = await Promise.all(
        first.map((r, i) =>
          rpc(
            gw.url('t'),
            'tools/call',
            {
              name: 'ask',
              arguments: {},
              requestState: r.body.result.requestState,
              inputResponses: { 'elicitation-1': { action: 'accept', content: { name: `n${i}` } } },
            },
            { caps },
          ),
        ),
      );
      expect(done.map((r) => r.body.result?.content?.[0]?.text ?? r.body.error)).toEqual(
        Array.from({ length: 12 }, (_, i) => `Hello, n${i}!`),
      );
    },
    scaled(60_000),
  );

  it(
    'a new session that waits for its turn longer than queueMs gets -32603 busy naming maxStartingSessions; the start under way goes on',
    async () => {
      const gw = await gateway({
        upstreams: { t: takingTurns(1500, { maxStartingSessions: 1, timeouts: { queueMs: 300, connectMs: 20_000 } }) },
      });
      // Parked calls: the first takes the session that listed the tools, each of the others needs a new one.
      const calls = await Promise.all(
        Array.from({ length: 3 }, () => rpc(gw.url('t'), 'tools/call', { name: 'ask', arguments: {} }, { caps: { elicitation: {} } })),
      );
      expect(calls.filter((r) => r.body.result?.resultType === 'input_required')).toHaveLength(2);
      const refused = calls.filter((r) => r.body.error);
      expect(refused).toHaveLength(1);
      expect(refused[0]!.body.error).toEqual({
        code: -32603,
        message:
          "New sessions of upstream 't' start 1 at a time (maxStartingSessions) and this one's turn did not come within timeouts.queueMs=300 ms; raise maxStartingSessions if the host has room for more starts at once, or retry later",
        data: { upstream: 't', reason: 'busy' },
      });
      expect(gw.gateway.upstreams.get('t')!.pool.stats()).toMatchObject({ total: 2, leased: 2, starting: 0, waitingToStart: 0 });
    },
    scaled(30_000),
  );

  it(
    'a warm session freed while new ones wait for their turn is leased to the next of its key instead of starting another',
    async () => {
      // The first call takes the session that listed the tools and frees it at once; the second starts
      // a session, and the third, waiting behind that start, gets the first session.
      const gw = await gateway({ upstreams: { t: takingTurns(300, { maxStartingSessions: 1 }) } });
      const calls = await Promise.all(Array.from({ length: 3 }, () => rpc(gw.url('t'), 'tools/call', { name: 'hi', arguments: {} })));
      expect(calls.map((r) => r.body.result?.content?.[0]?.text ?? r.body.error)).toEqual(['hi', 'hi', 'hi']);
      expect(gw.gateway.upstreams.get('t')!.pool.stats()).toMatchObject({ total: 2, idle: 2, starting: 0, waitingToStart: 0 });
    },
    scaled(30_000),
  );
});
