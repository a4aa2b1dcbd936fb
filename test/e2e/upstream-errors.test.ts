/**
 * How upstream faults and refusals reach a 2026-07-28 client: a result or message that breaks the
 * protocol is the upstream's -32603 `protocol` fault on one line, a tool the upstream does not list
 * is -32602 "Unknown tool" (after one fresh listing), and relayed upstream errors lose the SDK's
 * `MCP error <code>: ` prefixes and keep their code, -32000 and -32001 included, on a session that
 * stays in use.
 */
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio } from '../helpers/fixture.js';

const gateways: TestGateway[] = [];
const servers: Server[] = [];
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
});
async function gateway(upstreams: Record<string, unknown>): Promise<TestGateway> {
  const g = await startGateway({ upstreams });
  gateways.push(g);
  return g;
}

/** A real HTTP server on 127.0.0.1 answering every POST with `body` as application/json. */
async function answering(body: string): Promise<string> {
  const srv = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(req.method === 'POST' ? 200 : 405, { 'content-type': 'application/json' });
      res.end(req.method === 'POST' ? body : '');
    });
  });
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  return `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`;
}

describe('an upstream that breaks the protocol', () => {
  it('a legacy tool result the server SDK refuses (content not an array) is -32603 protocol, one line naming the upstream and the first problem', async () => {
    const gw = await gateway({ x: fixtureStdio() });
    const r = await rpc(gw.url('x'), 'tools/call', { name: 'bad_result', arguments: {} });
    expect(r.status).toBe(200);
    expect(r.body.error).toEqual({
      code: -32603,
      message: "Upstream 'x' returned an invalid tools/call result: content: expected array, received string",
      data: { upstream: 'x', reason: 'protocol' },
    });
  });

  it.each(['auto', 'legacy'] as const)('a Streamable HTTP upstream answering {"not":"jsonrpc"} (protocol %s) is -32603 protocol with a one-line message, at once', async (protocol) => {
    const url = await answering('{"not":"jsonrpc"}');
    // requestMs far above the bound below: an answer ignored until the timeout would fail the test.
    const gw = await gateway({ h: { transport: 'streamable-http', url, protocol, timeouts: { connectMs: 30_000, requestMs: 30_000 } } });
    const started = Date.now();
    const r = await rpc(gw.url('h'), 'tools/list', {});
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'h', reason: 'protocol' } });
    expect(r.body.error.message).toMatch(/^Upstream 'h' .*invalid JSON-RPC message: jsonrpc: expected "2\.0"$/);
    expect(r.body.error.message).not.toContain('\n');
  });
});

describe('a tool the upstream does not list', () => {
  let log: FixtureLog;
  let hidden: string;
  let gw: TestGateway;
  beforeAll(async () => {
    log = new FixtureLog();
    hidden = join(log.file, '..', 'unlisted');
    writeFileSync(hidden, 'unlisted_tool\n');
    gw = await gateway({ x: { ...fixtureStdio(log, { FIXTURE_UNLISTED_FILE: hidden }), maxSessions: 1 } });
  });

  it('is -32602 "Unknown tool: NAME" (not the legacy server\'s isError result)', async () => {
    const r = await rpc(gw.url('x'), 'tools/call', { name: 'nope', arguments: {} });
    expect(r.status).toBe(200);
    expect(r.body.error).toEqual({ code: -32602, message: 'Unknown tool: nope' });
    expect(r.body.result).toBeUndefined();
    // A long name is quoted cut, not echoed whole.
    const long = await rpc(gw.url('x'), 'tools/call', { name: `n${'x'.repeat(5000)}`, arguments: {} });
    expect(long.body.error).toEqual({ code: -32602, message: `Unknown tool: n${'x'.repeat(199)}…` });
  });

  it('is refused only after the cached listing was refreshed once, and a tool that appears without a list change is then served', async () => {
    const before = log.of('tools-list').length;
    const refused = await rpc(gw.url('x'), 'tools/call', { name: 'unlisted_tool', arguments: {} });
    expect(refused.body.error).toEqual({ code: -32602, message: 'Unknown tool: unlisted_tool' });
    // The listing cached by the previous call was stale for all the gateway knew: listed once more.
    expect(log.of('tools-list').length - before).toBe(1);
    writeFileSync(hidden, '');
    const served = await rpc(gw.url('x'), 'tools/call', { name: 'unlisted_tool', arguments: {} });
    expect(served.body.error).toBeUndefined();
    expect(served.body.result.content[0].text).toBe('unlisted_tool ran');
  });
});

describe('relayed upstream errors', () => {
  it("lose the SDK's 'MCP error <code>: ' prefixes (a legacy -32602 for a bad cursor)", async () => {
    const gw = await gateway({ x: fixtureStdio(undefined, { FIXTURE_PAGE_SIZE: '2' }) });
    const r = await rpc(gw.url('x'), 'tools/list', { cursor: 'bogus' });
    expect(r.body.error).toEqual({ code: -32602, message: 'Invalid cursor: bogus' });
  });
});

/**
 * A legacy (2025-06-18) stdio server written out raw: tool `fail` answers the JSON-RPC error given
 * in its arguments (`code`, `message`), tool `pid` answers the server's process id.
 */
const RAW_SERVER = `
const rl = require('node:readline').createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify({ jsonrpc: '2.0', ...m }) + '\\n');
rl.on('line', (line) => {
  const m = JSON.parse(line);
  if (m.id === undefined || m.method === undefined) return;
  if (m.method === 'initialize') return send({ id: m.id, result: { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'raw', version: '1' } } });
  if (m.method === 'ping') return send({ id: m.id, result: {} });
  if (m.method === 'tools/list') return send({ id: m.id, result: { tools: ['fail', 'pid'].map((name) => ({ name, inputSchema: { type: 'object' } })) } });
  if (m.method === 'tools/call' && m.params.name === 'pid') return send({ id: m.id, result: { content: [{ type: 'text', text: String(process.pid) }] } });
  if (m.method === 'tools/call') return send({ id: m.id, error: { code: m.params.arguments.code, message: m.params.arguments.message } });
  send({ id: m.id, error: { code: -32601, message: 'Method not found' } });
});
`;

describe("an upstream's own -32000 or -32001 error", () => {
  let gw: TestGateway;
  beforeAll(async () => {
    // One session at most: a session dropped after the error would show as a new process id.
    gw = await gateway({ raw: { transport: 'stdio', command: process.execPath, args: ['-e', RAW_SERVER], protocol: 'legacy', maxSessions: 1 } });
  });
  const pid = async () => (await rpc(gw.url('raw'), 'tools/call', { name: 'pid', arguments: {} })).body.result.content[0].text as string;

  it.each([
    [-32000, 'Database is locked'],
    [-32001, 'Auth required'],
  ])('%i is relayed with its code and message, and the session (the same process) serves the next call', async (code, message) => {
    const before = await pid();
    const r = await rpc(gw.url('raw'), 'tools/call', { name: 'fail', arguments: { code, message } });
    expect(r.status).toBe(200);
    expect(r.body.error).toEqual({ code, message });
    expect(await pid()).toBe(before);
  });
});
