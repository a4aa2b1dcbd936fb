/**
 * How upstream faults and refusals reach a 2026-07-28 client: a result or message that breaks the
 * protocol is the upstream's -32603 `protocol` fault on one line, a tool the upstream does not list
 * is -32602 "Unknown tool" (after one fresh listing), and relayed upstream errors lose the SDK's
 * `MCP error <code>: ` prefixes and keep their code, -32000 and -32001 included, on a session that
 * stays in use; a Streamable HTTP answer that breaks the transport fails its own call at once, and
 * only that call.
 */
import { writeFileSync } from 'node:fs';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelope, memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { scaled } from '../helpers/budget.js';

const gateways: TestGateway[] = [];
const servers: Server[] = [];
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
});
async function gateway(upstreams: Record<string, unknown>, opts: Parameters<typeof startGateway>[1] = {}): Promise<TestGateway> {
  const g = await startGateway({ upstreams }, opts);
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

  it.each(['auto', 'legacy'] as const)(
    'a Streamable HTTP upstream answering {"not":"jsonrpc"} (protocol %s) is -32603 protocol with a one-line message, at once',
    async (protocol) => {
      const url = await answering('{"not":"jsonrpc"}');
      // requestMs far above the bound below: an answer ignored until the timeout would fail the test.
      const gw = await gateway({ h: { transport: 'streamable-http', url, protocol, timeouts: { connectMs: 30_000, requestMs: 30_000 } } });
      const started = Date.now();
      const r = await rpc(gw.url('h'), 'tools/list', {});
      expect(Date.now() - started).toBeLessThan(scaled(15_000));
      expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'h', reason: 'protocol' } });
      expect(r.body.error.message).toMatch(/^Upstream 'h' .*invalid JSON-RPC message: jsonrpc: expected "2\.0"$/);
      expect(r.body.error.message).not.toContain('\n');
    },
  );
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
    // A name longer than the tool-name rules allow is refused as such, and quoted cut, not echoed whole.
    const long = await rpc(gw.url('x'), 'tools/call', { name: `n${'x'.repeat(5000)}`, arguments: {} });
    expect(long.body.error).toEqual({
      code: -32602,
      message: expect.stringMatching(/^Tool name not served: the name is longer than 128 characters \(5001\); /),
      data: { reason: 'invalid-tool-name', name: `n${'x'.repeat(199)}…` },
    });
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
    gw = await gateway({
      raw: { transport: 'stdio', command: process.execPath, args: ['-e', RAW_SERVER], protocol: 'legacy', maxSessions: 1 },
    });
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

/**
 * A legacy (2025-06-18) Streamable HTTP server on 127.0.0.1 written against the wire, whose tools
 * answer `tools/call` in ways that break the transport; `sessionOf` records the `Mcp-Session-Id`
 * each call came with. `ask` sends an `elicitation/create` on its call's POST stream and answers
 * once the client's response arrives.
 */
async function misbehaving(): Promise<{ url: string; sessionOf: Map<string, string>; resumed: string[] }> {
  const sessionOf = new Map<string, string>();
  /** The `Last-Event-ID` of each GET that resumed a stream. */
  const resumed: string[] = [];
  /** What a resumption GET answers, by the event id it resumes from. */
  const resumptions = new Map<string, (res: ServerResponse) => void>();
  const waiting = new Map<string, (answer: unknown) => void>();
  const tools = [
    'ask',
    'html',
    'json_empty',
    'json_notification',
    'json_bad_error',
    'sse_bad_error',
    'sse_string_code',
    'sse_garbage',
    'sse_end',
    'sse_reset',
    'slow',
    'upper_case_type',
    'json_huge',
    'sse_huge',
    'sse_many',
    'sse_just_over',
    'poll_twice',
    'resume_404',
    'json_cut',
    'json_string_id',
    'late_poll',
    'late_string_id',
    'poll_spin',
  ];
  let sessions = 0;
  const srv = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      const last = req.headers['last-event-id'];
      if (req.method === 'GET' && typeof last === 'string') {
        resumed.push(last);
        const answer = resumptions.get(last);
        return void (answer ? answer(res) : res.writeHead(404).end());
      }
      if (req.method !== 'POST') return void res.writeHead(405).end();
      const m = JSON.parse(body) as { id?: string | number; method?: string; params?: any };
      const sid = String(req.headers['mcp-session-id']);
      if (m.method === undefined) {
        waiting.get(`${sid}/${m.id}`)?.(m);
        return void res.writeHead(202).end();
      }
      if (m.id === undefined) return void res.writeHead(202).end();
      const json = (obj: unknown, headers: Record<string, string> = {}) =>
        res.writeHead(200, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(obj));
      const ok = (result: unknown) => ({ jsonrpc: '2.0', id: m.id, result });
      const text = (t: string) => ok({ content: [{ type: 'text', text: t }] });
      const event = (obj: unknown) => `event: message\ndata: ${JSON.stringify(obj)}\n\n`;
      const sse = (type = 'text/event-stream') => res.writeHead(200, { 'content-type': type });
      if (m.method === 'initialize')
        return json(ok({ protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'misbehaving', version: '1' } }), {
          'mcp-session-id': `s${++sessions}`,
        });
      if (m.method === 'ping') return json(ok({}));
      if (m.method === 'tools/list') return json(ok({ tools: tools.map((name) => ({ name, inputSchema: { type: 'object' } })) }));
      const name = m.params.name as string;
      sessionOf.set(name, sid);
      switch (name) {
        case 'ask': {
          sse();
          const id = `q-${m.id}`;
          waiting.set(`${sid}/${id}`, (answer) => res.end(event(text(`got ${JSON.stringify((answer as any).result?.content)}`))));
          return void res.write(
            event({
              jsonrpc: '2.0',
              id,
              method: 'elicitation/create',
              params: { message: 'Name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } } } },
            }),
          );
        }
        case 'html':
          return void res.writeHead(200, { 'content-type': 'text/html' }).end('<html>oops</html>');
        case 'json_empty':
          return void res.writeHead(200, { 'content-type': 'application/json' }).end();
        case 'json_notification':
          return json({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info', data: 'x' } });
        case 'json_bad_error':
          return json({ jsonrpc: '2.0', id: m.id, error: { code: 1.5, message: 42 } });
        case 'sse_bad_error':
          sse();
          return void res.end(event({ jsonrpc: '2.0', id: m.id, error: 'boom' }));
        case 'sse_string_code':
          sse();
          return void res.end(event({ jsonrpc: '2.0', id: m.id, error: { code: 'E_BAD', message: { nested: true } } }));
        case 'sse_garbage':
          sse();
          return void res.end('event: message\ndata: not json\n\n');
        case 'sse_end':
          sse();
          return void res.end(': nothing to say\n\n');
        case 'sse_reset':
          sse();
          res.write('event: message\ndata: {"jsonrpc":"2.0",');
          return void setTimeout(() => res.socket?.destroy(), 50);
        case 'slow':
          sse();
          res.write(': started\n\n');
          return void setTimeout(() => res.end(event(text('slow done'))), m.params.arguments?.ms ?? 500);
        case 'json_huge':
          // A body of 10 MiB and one byte in all (exactly 10 MiB with `fit`): 72 bytes of JSON-RPC around the text and the id.
          return json(text('x'.repeat(10 * 1024 * 1024 - (m.params.arguments?.fit ? 72 : 71) - String(m.id).length)));
        case 'sse_huge': {
          sse();
          const half = 'x'.repeat(6 * 1024 * 1024);
          res.write(
            `event: message\ndata: {"jsonrpc":"2.0","id":${JSON.stringify(m.id)},"result":{"content":[{"type":"text","text":"${half}`,
          );
          return void setTimeout(() => res.end(`${half}"}]}}\n\n`), 20);
        }
        case 'sse_just_over': {
          // One event whose data is 10 MiB and 1,000 bytes, its last 30,000 in a write of their own
          // (what came before it is under 10 MiB).
          sse();
          const head = `{"jsonrpc":"2.0","id":${JSON.stringify(m.id)},"result":{"content":[{"type":"text","text":"`;
          const body = 'x'.repeat(10 * 1024 * 1024 + 1000 - head.length - 5);
          res.write(`event: message\ndata: ${head}${body.slice(0, -30_000)}`);
          return void setTimeout(() => res.end(`${body.slice(-30_000)}"}]}}\n\n`), 50);
        }
        case 'poll_twice': {
          // SEP-1699 polling: the stream closes after an event id; the first resumption ends with
          // nothing new and no id of its own, the second carries the answer.
          const first = `p-${m.id}`;
          let gets = 0;
          resumptions.set(first, (r) => {
            r.writeHead(200, { 'content-type': 'text/event-stream' });
            if (++gets === 1) return void r.end(': nothing yet\n\n');
            r.end(event(text('polled twice')));
          });
          sse();
          return void res.end(`id: ${first}\nretry: 50\ndata: \n\n`);
        }
        case 'resume_404':
          // Resumable after 1 s; a resumption is refused (404).
          sse();
          return void res.end(`id: r-${m.id}\nretry: 1000\ndata: \n\n`);
        case 'json_cut':
          res.writeHead(200, { 'content-type': 'application/json', 'content-length': '1000' });
          res.write('{"jsonrpc":"2.0",');
          return void setTimeout(() => res.socket?.destroy(), 20);
        case 'late_poll':
          // The answer's headers after 300 ms: a stream resumable 20 ms later (resumptions are refused, 404).
          return void setTimeout(() => {
            sse();
            res.end(`id: l-${m.id}\nretry: 20\ndata: \n\n`);
          }, 300);
        case 'poll_spin': {
          // Resumable at once (retry: 0), and every resumption the same, without ever answering.
          const spin = (r: ServerResponse) => {
            r.writeHead(200, { 'content-type': 'text/event-stream' });
            r.end(`id: s-${m.id}\nretry: 0\ndata: \n\n`);
          };
          resumptions.set(`s-${m.id}`, spin);
          return spin(res);
        }
        case 'late_string_id':
          // The answer after 300 ms, its id sent back as a string.
          return void setTimeout(() => json({ ...text('late'), id: String(m.id) }), 300);
        case 'json_string_id':
          return json({ ...text('string id'), id: String(m.id) });
        case 'sse_many': {
          // 12 MiB in all, in events of 1 MiB: each is a message of its own.
          sse();
          for (let i = 0; i < 11; i++)
            res.write(
              event({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'debug', data: 'y'.repeat(1024 * 1024) } }),
            );
          return void res.end(event(text('many done')));
        }
        case 'upper_case_type':
          sse('Text/Event-Stream; Charset=UTF-8');
          return void res.end(event(text('read as SSE')));
      }
      json({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: `Unknown tool: ${name}` } });
    });
  });
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`, sessionOf, resumed };
}

describe('a Streamable HTTP upstream whose answer to one call breaks the transport', () => {
  let gw: TestGateway;
  let upstream: { url: string; sessionOf: Map<string, string>; resumed: string[] };
  beforeAll(async () => {
    upstream = await misbehaving();
    // requestMs far above the bounds below: an answer waited for until the timeout would fail the tests.
    gw = await gateway({
      h: { transport: 'streamable-http', url: upstream.url, protocol: 'legacy', maxCallsPerSession: 8, timeouts: { requestMs: 30_000 } },
    });
  });
  const call = (name: string, args: Record<string, unknown> = {}, more: Record<string, unknown> = {}) =>
    rpc(gw.url('h'), 'tools/call', { name, arguments: args, ...more }, { caps: { elicitation: {} } });

  it.each([
    ['html', "answer to tools/call: HTTP 200 with Content-Type 'text/html', neither application/json nor text/event-stream"],
    ['json_empty', 'answer to tools/call: HTTP 200 with an empty application/json body'],
    ['json_notification', 'answer to tools/call: the JSON body holds 1 JSON-RPC message, none the response to the request'],
    ['json_bad_error', 'JSON-RPC message: '],
    ['sse_bad_error', 'message on the SSE stream of tools/call: '],
    ['sse_string_code', 'message on the SSE stream of tools/call: '],
    ['sse_garbage', 'message on the SSE stream of tools/call: not JSON'],
    ['sse_end', 'SSE stream of tools/call: it ended without the answer, and without an event id to resume it from'],
    ['json_huge', 'answer to tools/call: the body is over 10485760 bytes (10 MiB), the most the gateway reads of one message'],
    ['sse_huge', 'message on the SSE stream of tools/call: over 10485760 bytes (10 MiB), the most the gateway reads of one message'],
    ['sse_just_over', 'message on the SSE stream of tools/call: over 10485760 bytes (10 MiB), the most the gateway reads of one message'],
  ])('%s: -32603 protocol at once, one line naming what was invalid', async (name, what) => {
    const started = Date.now();
    const r = await call(name);
    expect(Date.now() - started).toBeLessThan(scaled(5000));
    expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'h', reason: 'protocol' } });
    expect(r.body.error.message).toContain(`Upstream 'h' returned an invalid ${what}`);
    expect(r.body.error.message).not.toMatch(/MCP error|\n/);
  });

  it('an SSE stream of 12 MiB in messages of 1 MiB each is read whole (the 10 MiB bound is per message)', async () => {
    const r = await call('sse_many');
    expect(r.body.result.content[0].text).toBe('many done');
  });

  it('a JSON answer of exactly 10 MiB is read', async () => {
    const r = await call('json_huge', { fit: true });
    expect(r.body.result.content[0].text.length).toBeGreaterThan(10 * 1024 * 1024 - 100);
  });

  it('a POST stream resumed twice (SEP-1699 polling, the first resumption ending with nothing new) gets its answer', async () => {
    const r = await call('poll_twice');
    expect(r.body.result?.content[0].text, JSON.stringify(r.body)).toBe('polled twice');
  });

  it('a JSON answer that breaks off is the lost connection (session-lost), not a protocol fault', async () => {
    const r = await call('json_cut');
    expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'h', reason: 'session-lost' } });
    expect(r.body.error.message).toContain('the body of the answer to tools/call broke off');
  });

  it('a JSON answer whose id is the request id as a string is taken as its answer', async () => {
    const r = await call('json_string_id');
    expect(r.body.result.content[0].text).toBe('string id');
  });

  it('a Content-Type in other capitals (Text/Event-Stream) is read as SSE', async () => {
    const r = await call('upper_case_type');
    expect(r.body.result.content[0].text).toBe('read as SSE');
  });

  /** Shows the gateway that the upstream asks on the call's own stream: from then on calls share sessions. */
  let sharing: Promise<void> | undefined;
  const share = () =>
    (sharing ??= (async () => {
      const first = await call('ask');
      expect(first.body.result.resultType).toBe('input_required');
      const [key] = Object.keys(first.body.result.inputRequests);
      const done = await call(
        'ask',
        {},
        { requestState: first.body.result.requestState, inputResponses: { [key!]: { action: 'accept', content: { name: 'Ada' } } } },
      );
      expect(done.body.result.content[0].text).toContain('Ada');
    })());

  it('a POST stream that breaks fails its own call only (session-lost); another call on the same upstream session completes', async () => {
    await share();
    const slow = call('slow', { ms: 800 });
    await new Promise((r) => setTimeout(r, 100));
    const broken = await call('sse_reset');
    expect(broken.body.error).toMatchObject({ code: -32603, data: { upstream: 'h', reason: 'session-lost' } });
    expect(broken.body.error.message).toContain('the SSE stream of tools/call broke before its answer');
    expect((await slow).body.result.content[0].text).toBe('slow done');
    expect(upstream.sessionOf.get('sse_reset')).toBe(upstream.sessionOf.get('slow'));
  });

  /** Sends tools/call `name` and closes the connection after `ms`, before the answer. */
  const callAndLeave = async (name: string, ms: number, g = gw) => {
    const abort = new AbortController();
    const body = JSON.stringify({
      jsonrpc: '2.0',
      id: 99,
      method: 'tools/call',
      params: { name, arguments: {}, _meta: envelope({ elicitation: {} }) },
    });
    const headers = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'tools/call',
      'mcp-name': name,
    };
    const gone = fetch(g.url('h'), { method: 'POST', headers, body, signal: abort.signal }).catch((e: Error) => e);
    setTimeout(() => abort.abort(), ms);
    expect(await gone).toBeInstanceOf(Error);
  };

  it('a call cancelled before the headers of its answer: the stream that then comes is not resumed', async () => {
    await callAndLeave('late_poll', 100);
    await new Promise((r) => setTimeout(r, 1000));
    expect(upstream.sessionOf.has('late_poll')).toBe(true);
    expect(upstream.resumed.filter((id) => id.startsWith('l-'))).toEqual([]);
  });

  it('a server that asks to be polled with retry: 0 is polled at most every 50 ms (no spin), and not after the call is cancelled', async () => {
    const before = upstream.resumed.length;
    await callAndLeave('poll_spin', 1000);
    const polled = upstream.resumed.length - before;
    expect(polled).toBeGreaterThan(2);
    expect(polled).toBeLessThanOrEqual(21);
    await new Promise((r) => setTimeout(r, 300));
    expect(upstream.resumed.length - before).toBeLessThanOrEqual(polled + 1);
  });

  it('a cancelled call the upstream answers anyway, with its id as a string: the session is used again (the answer counts)', async () => {
    const one = await gateway({
      h: {
        transport: 'streamable-http',
        url: upstream.url,
        protocol: 'legacy',
        maxSessions: 1,
        maxCallsPerSession: 1,
        timeouts: { requestMs: 30_000 },
      },
    });
    expect(
      (await rpc(one.url('h'), 'tools/call', { name: 'upper_case_type', arguments: {} }, { caps: { elicitation: {} } })).body.result,
    ).toBeDefined();
    const first = upstream.sessionOf.get('upper_case_type');
    await callAndLeave('late_string_id', 100, one);
    expect(upstream.sessionOf.get('late_string_id')).toBe(first);
    await new Promise((r) => setTimeout(r, 500));
    expect(
      (await rpc(one.url('h'), 'tools/call', { name: 'upper_case_type', arguments: {} }, { caps: { elicitation: {} } })).body.result,
    ).toBeDefined();
    expect(upstream.sessionOf.get('upper_case_type')).toBe(first);
  });

  it('a call cancelled while its POST stream waits to be resumed: the stream is not resumed, and another call on the session completes', async () => {
    await share();
    const slow = call('slow', { ms: 1500 });
    await new Promise((r) => setTimeout(r, 100));
    await callAndLeave('resume_404', 300);
    expect((await slow).body.result.content[0].text).toBe('slow done');
    expect(upstream.sessionOf.get('resume_404')).toBe(upstream.sessionOf.get('slow'));
    // Past the upstream's 1 s retry delay: no resumption was tried.
    await new Promise((r) => setTimeout(r, 1000));
    expect(upstream.resumed.filter((id) => id.startsWith('r-'))).toEqual([]);
  });
});

/**
 * A 2026-07-28 Streamable HTTP server on 127.0.0.1 written against the wire: `server/discover`,
 * and tools whose answers hold one message over 10 MiB (`sse_huge`, one SSE event sent in two
 * writes; `json_huge`, a JSON body), or 12 MiB in events of 1 MiB each (`sse_many`).
 */
async function modernHuge(): Promise<string> {
  const srv = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    req.on('end', () => {
      if (req.method !== 'POST') return void res.writeHead(405).end();
      const m = JSON.parse(body) as { id?: string | number; method?: string; params?: any };
      if (m.id === undefined) return void res.writeHead(202).end();
      const json = (obj: unknown) => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(obj));
      const text = (t: string) => ({ jsonrpc: '2.0', id: m.id, result: { resultType: 'complete', content: [{ type: 'text', text: t }] } });
      const event = (obj: unknown) => `event: message\ndata: ${JSON.stringify(obj)}\n\n`;
      if (m.method === 'server/discover')
        return json({
          jsonrpc: '2.0',
          id: m.id,
          result: {
            supportedVersions: ['2026-07-28'],
            capabilities: { tools: {} },
            _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'huge', version: '1' } },
          },
        });
      if (m.method === 'tools/list')
        return json({
          jsonrpc: '2.0',
          id: m.id,
          result: { tools: ['sse_huge', 'json_huge', 'sse_many'].map((name) => ({ name, inputSchema: { type: 'object' } })) },
        });
      const half = 'x'.repeat(6 * 1024 * 1024);
      switch (m.params?.name) {
        case 'sse_huge':
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write(
            `event: message\ndata: {"jsonrpc":"2.0","id":${JSON.stringify(m.id)},"result":{"content":[{"type":"text","text":"${half}`,
          );
          return void setTimeout(() => res.end(`${half}"}]}}\n\n`), 20);
        case 'json_huge':
          return json(text(half + half));
        case 'sse_many':
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          for (let i = 0; i < 11; i++)
            res.write(
              event({ jsonrpc: '2.0', method: 'notifications/message', params: { level: 'debug', data: 'y'.repeat(1024 * 1024) } }),
            );
          return void res.end(event(text('many done')));
      }
      json({ jsonrpc: '2.0', id: m.id, error: { code: -32602, message: `Unknown tool: ${m.params?.name}` } });
    });
  });
  servers.push(srv);
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  return `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`;
}

describe('a legacy client whose upstream sends one message over 10 MiB', () => {
  const TOO_LARGE = 'over 10485760 bytes (10 MiB), the most the gateway reads of one message';
  const mem = memoryLogger('info');
  let legacyUp: TestGateway;
  let modernUp: TestGateway;
  beforeAll(async () => {
    // requestMs far above the bound below: an answer waited for until the timeout would fail the tests.
    legacyUp = await gateway(
      { h: { transport: 'streamable-http', url: (await misbehaving()).url, protocol: 'legacy', timeouts: { requestMs: 30_000 } } },
      { log: mem.log },
    );
    modernUp = await gateway(
      { m: { transport: 'streamable-http', url: await modernHuge(), protocol: '2026-07-28', timeouts: { requestMs: 30_000 } } },
      { log: mem.log },
    );
  });

  /** Calls `name` with the v1 SDK client (2025-11-25) on a session of its own; resolves with the error it got (or the result) and how long it took, in ms. */
  async function legacyCall(url: string, name: string): Promise<{ error?: any; result?: any; ms: number }> {
    const client = new Client({ name: 'legacy-huge', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const started = Date.now();
    try {
      const result = await client.callTool({ name, arguments: {} }, undefined, { timeout: scaled(20_000) });
      return { result, ms: Date.now() - started };
    } catch (error) {
      return { error, ms: Date.now() - started };
    } finally {
      await client.close();
    }
  }

  it.each([
    [
      'pass-through (legacy Streamable HTTP upstream)',
      'h',
      'sse_huge',
      `Upstream 'h' returned an invalid message on the SSE stream of tools/call: ${TOO_LARGE}`,
    ],
    [
      'pass-through (legacy Streamable HTTP upstream)',
      'h',
      'json_huge',
      `Upstream 'h' returned an invalid answer to tools/call: the body is ${TOO_LARGE}`,
    ],
    [
      'reverse bridge (2026-07-28 upstream)',
      'm',
      'sse_huge',
      `Upstream 'm' failed: the upstream returned an invalid message on the SSE stream of tools/call: ${TOO_LARGE}`,
    ],
    [
      'reverse bridge (2026-07-28 upstream)',
      'm',
      'json_huge',
      `Upstream 'm' failed: the upstream returned an invalid answer to tools/call: the body is ${TOO_LARGE}`,
    ],
  ])('%s, %s %s: -32603 protocol at once, and the request is logged', async (_path, upstream, name, message) => {
    const gw = upstream === 'h' ? legacyUp : modernUp;
    const r = await legacyCall(gw.url(upstream), name);
    expect(r.result).toBeUndefined();
    expect(r.ms).toBeLessThan(scaled(5000));
    expect(r.error).toMatchObject({ code: -32603, data: { upstream, reason: 'protocol' } });
    expect(r.error.message).toContain(message);
    const logged = mem.lines().filter((l) => l.msg === 'request' && l.era === 'legacy' && l.upstream === upstream && l.name === name);
    expect(logged.at(-1)).toMatchObject({ method: 'tools/call', outcome: 'error', code: -32603, reason: 'protocol' });
  });

  it('a 2026-07-28 client gets the same -32603 from the 2026-07-28 upstream; an SSE stream of 12 MiB in events of 1 MiB is read whole (the bound is per message)', async () => {
    const r = await rpc(modernUp.url('m'), 'tools/call', { name: 'sse_huge', arguments: {} });
    expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'm', reason: 'protocol' } });
    expect(r.body.error.message).toContain(`message on the SSE stream of tools/call: ${TOO_LARGE}`);
    const many = await rpc(modernUp.url('m'), 'tools/call', { name: 'sse_many', arguments: {} });
    expect(many.body.result?.content[0].text, JSON.stringify(many.body).slice(0, 300)).toBe('many done');
    expect((await legacyCall(modernUp.url('m'), 'sse_many')).result?.content[0].text).toBe('many done');
  });
});
