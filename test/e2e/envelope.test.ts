/**
 * The downstream error contract (DESIGN.md "Error contract") and the 2026-07-28 envelope, header and
 * result-shape rules, exercised over real HTTP against a gateway in front of server-everything (stdio).
 */
import { request as httpRequest } from 'node:http';
import { gzipSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelope, everythingStdio, memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { fixtureStdio } from '../helpers/fixture.js';

const V = '2026-07-28';
const PV = 'io.modelcontextprotocol/protocolVersion';
const CC = 'io.modelcontextprotocol/clientCapabilities';
const CI = 'io.modelcontextprotocol/clientInfo';

const baseHeaders = {
  'content-type': 'application/json',
  accept: 'application/json, text/event-stream',
  'mcp-protocol-version': V,
};

/** POSTs `body` verbatim (a string is sent as is, anything else JSON-encoded) with the given headers. */
async function post(
  url: string,
  body: unknown,
  headers: Record<string, string>,
): Promise<{ status: number; text: string; json: any; headers: Headers }> {
  const res = await fetch(url, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, text, json, headers: res.headers };
}

/**
 * POSTs with node:http so header names and values go on the wire exactly as written
 * (fetch would lowercase names and strip surrounding whitespace before sending).
 */
function rawPost(url: string, body: unknown, headers: [string, string][]): Promise<{ status: number; json: any }> {
  const u = new URL(url);
  const payload = Buffer.from(JSON.stringify(body));
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST' });
    req.setHeader('Content-Length', String(payload.length));
    for (const [k, v] of headers) req.setHeader(k, v);
    req.on('response', (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        resolve({ status: res.statusCode!, json: text ? JSON.parse(text) : undefined });
      });
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}

function expectError(res: { status: number; body: any }, status: number, code: number, id: string | number | null): any {
  expect(res.status).toBe(status);
  expect(res.body.jsonrpc).toBe('2.0');
  expect(res.body.result).toBeUndefined();
  expect(res.body.error.code).toBe(code);
  expect(typeof res.body.error.message).toBe('string');
  expect(res.body.id).toBe(id);
  return res.body.error;
}

function expectCacheable(result: any): void {
  expect(result.resultType).toBe('complete');
  expect(Number.isInteger(result.ttlMs)).toBe(true);
  expect(result.ttlMs).toBeGreaterThanOrEqual(0);
  expect(['public', 'private']).toContain(result.cacheScope);
}

let gw: TestGateway;
let url: string;

beforeAll(async () => {
  gw = await startGateway({ upstreams: { everything: everythingStdio } });
  url = gw.url('everything');
});

afterAll(async () => {
  await gw?.close();
});

describe('routing', () => {
  it('unknown upstream name in the path → 404, -32601 naming the upstream, id echoed', async () => {
    const res = await rpc(gw.url('nope'), 'tools/list', {}, { id: 'unknown-upstream' });
    const err = expectError(res, 404, -32601, 'unknown-upstream');
    expect(err.message).toContain('nope');
    expect(err.message).toContain('everything');
  });

  it('GET /admin with the admin page off → 404, -32601 naming admin.enabled', async () => {
    const res = await fetch(`${gw.base}/admin`);
    expect(res.status).toBe(404);
    expect(await res.json()).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32601,
        message:
          'No endpoint at /admin (the admin page is off: set admin.enabled to true to serve it); this gateway serves /mcp/everything',
      },
    });
  });

  it('GET on /mcp/everything → 405 with Allow: POST and a JSON-RPC error body', async () => {
    const res = await fetch(url, { method: 'GET', headers: { accept: 'application/json, text/event-stream' } });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('POST');
    const body = await res.json();
    expect(body.jsonrpc).toBe('2.0');
    expect(body.id).toBeNull();
    expect(typeof body.error.code).toBe('number');
    expect(body.error.message).toContain('POST');
  });
});

describe('media types: Accept, Content-Type, Content-Encoding (Streamable HTTP §Sending Messages)', () => {
  const discover = { jsonrpc: '2.0', id: 'media', method: 'server/discover', params: { _meta: envelope() } };
  const headers = { ...baseHeaders, 'mcp-method': 'server/discover' };
  const notAcceptable = (got: string) => ({
    jsonrpc: '2.0',
    id: null,
    error: { code: -32000, message: `Not Acceptable: the Accept header must list application/json and text/event-stream (${got})` },
  });

  it('no Accept, Accept: application/json only, or text/event-stream given q=0 → 406, -32000 naming the header and what it must list', async () => {
    // fetch would send Accept: */* when none is given; node:http sends none.
    const { accept: _dropped, ...withoutAccept } = headers;
    const missing = await rawPost(url, discover, Object.entries(withoutAccept));
    expect(missing.status).toBe(406);
    expect(missing.json).toEqual(notAcceptable('it is missing'));
    for (const accept of ['application/json', 'application/json, text/event-stream;q=0']) {
      const res = await post(url, discover, { ...headers, accept });
      expect(res.status, accept).toBe(406);
      expect(res.json).toEqual(notAcceptable(`got '${accept}'`));
    }
  });

  it('Accept: */* (or text/*, application/* together) accepts both → served', async () => {
    for (const accept of ['*/*', 'application/*, text/*', 'text/event-stream;q=0.5, application/json']) {
      const res = await post(url, discover, { ...headers, accept });
      expect(res.status, accept).toBe(200);
      expect(res.json.result.resultType).toBe('complete');
    }
  });

  it('subscriptions/listen with Accept: application/json only → 406 as JSON, no event stream', async () => {
    const listen = {
      jsonrpc: '2.0',
      id: 'listen-json',
      method: 'subscriptions/listen',
      params: { notifications: { toolsListChanged: true }, _meta: envelope() },
    };
    const res = await post(url, listen, { ...baseHeaders, accept: 'application/json', 'mcp-method': 'subscriptions/listen' });
    expect(res.status).toBe(406);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.json).toEqual(notAcceptable(`got 'application/json'`));
  });

  it('Content-Type text/plain, or none → 415, -32000 naming the header; application/json; charset=utf-8 is served', async () => {
    const plain = await post(url, discover, { ...headers, 'content-type': 'text/plain' });
    expect(plain.status).toBe(415);
    expect(plain.json).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32000, message: "Unsupported Media Type: the Content-Type header must be application/json (got 'text/plain')" },
    });
    const { 'content-type': _dropped, ...withoutType } = headers;
    const none = await rawPost(url, discover, Object.entries(withoutType));
    expect(none.status).toBe(415);
    expect(none.json).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32000, message: 'Unsupported Media Type: the Content-Type header must be application/json (it is missing)' },
    });
    const latin1 = await post(url, discover, { ...headers, 'content-type': 'application/json; charset=iso-8859-1' });
    expect(latin1.status).toBe(415);
    expect(latin1.json.error).toEqual({
      code: -32000,
      message: "Unsupported Media Type: the body must be UTF-8 JSON (Content-Type charset 'iso-8859-1')",
    });
    const utf8 = await post(url, discover, { ...headers, 'content-type': 'application/json; charset=utf-8' });
    expect(utf8.status).toBe(200);
  });

  it('Content-Encoding: gzip → 415, -32000 naming the coding, with Accept-Encoding: identity', async () => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { ...headers, 'content-encoding': 'gzip' },
      body: gzipSync(JSON.stringify(discover)),
    });
    expect(res.status).toBe(415);
    expect(res.headers.get('accept-encoding')).toBe('identity');
    expect(await res.json()).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32000, message: "Unsupported Media Type: Content-Encoding 'gzip' is not supported; send the body uncompressed" },
    });
  });

  it('a body that is not valid UTF-8 → 400, -32700 saying so (nothing is replaced)', async () => {
    const bytes = Buffer.concat([
      Buffer.from('{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"x":"'),
      Buffer.from([0xff, 0xfe]),
      Buffer.from(`","_meta":${JSON.stringify(envelope())}}}`),
    ]);
    const res = await fetch(url, { method: 'POST', headers, body: bytes });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32700, message: 'Parse error: the body is not valid UTF-8 (JSON must be UTF-8 encoded)' },
    });
  });

  it('a body starting with a UTF-8 byte order mark → served (RFC 8259 §8.1); a second mark is not ignored → 400, -32700', async () => {
    const bom = Buffer.from([0xef, 0xbb, 0xbf]);
    const one = await fetch(url, { method: 'POST', headers, body: Buffer.concat([bom, Buffer.from(JSON.stringify(discover))]) });
    expect(one.status).toBe(200);
    expect((await one.json()).result.resultType).toBe('complete');
    const two = await fetch(url, { method: 'POST', headers, body: Buffer.concat([bom, bom, Buffer.from(JSON.stringify(discover))]) });
    expect(two.status).toBe(400);
    expect((await two.json()).error.code).toBe(-32700);
  });
});

describe('JSON-RPC framing', () => {
  it('an empty batch [] → 400, -32600 Invalid Request, with or without an Mcp-Session-Id', async () => {
    for (const extra of [{}, { 'mcp-session-id': 'any-session' }] as Record<string, string>[]) {
      const res = await post(url, [], { ...baseHeaders, 'mcp-method': 'tools/list', ...extra });
      expect(res.status).toBe(400);
      expect(res.json).toEqual({
        jsonrpc: '2.0',
        id: null,
        error: { code: -32600, message: 'Invalid Request: the body is an empty JSON-RPC batch; send one request per POST' },
      });
    }
  });

  it('a JSON-RPC response without a session → 400, -32600 saying responses are accepted only within a legacy session', async () => {
    const res = await post(url, { jsonrpc: '2.0', id: 7, result: {} }, baseHeaders);
    expect(res.status).toBe(400);
    expect(res.json).toEqual({
      jsonrpc: '2.0',
      id: 7,
      error: {
        code: -32600,
        message:
          'Invalid Request: a JSON-RPC response is accepted only within a legacy session (Mcp-Session-Id); MCP 2026-07-28 clients POST requests and notifications only',
      },
    });
  });

  it('a 2025-era request without a session or the envelope → 400, -32602 saying initialize comes first (and what a 2026-07-28 client must send)', async () => {
    const res = await post(
      url,
      { jsonrpc: '2.0', id: 'legacy-no-session', method: 'tools/list' },
      { ...baseHeaders, 'mcp-protocol-version': '2025-06-18', 'mcp-method': 'tools/list' },
    );
    expect(res.status).toBe(400);
    expect(res.json).toEqual({
      jsonrpc: '2.0',
      id: 'legacy-no-session',
      error: {
        code: -32602,
        message: `tools/list: no _meta envelope and no session: a 2026-07-28 client must send params._meta with "${PV}" and "${CC}"; a 2025-era client must call initialize first`,
      },
    });
  });

  it('a body that is not JSON → 400, -32700 with id null', async () => {
    const res = await post(url, '{"jsonrpc":"2.0","id":1,', { ...baseHeaders, 'mcp-method': 'tools/list' });
    expect(res.status).toBe(400);
    expect(res.json.id).toBeNull();
    expect(res.json.error.code).toBe(-32700);
    expect(res.json.error.message).toMatch(/parse|json/i);
  });

  it('a JSON-RPC batch (array) → 400, -32600 saying batches are not supported', async () => {
    const one = { jsonrpc: '2.0', id: 1, method: 'tools/list', params: { _meta: envelope() } };
    const res = await post(url, [one, { ...one, id: 2 }], { ...baseHeaders, 'mcp-method': 'tools/list' });
    expect(res.status).toBe(400);
    expect(res.json.id).toBeNull();
    expect(res.json.error.code).toBe(-32600);
    expect(res.json.error.message).toMatch(/batch/i);
  });

  it('a request without "jsonrpc" → 400, -32600 naming the field, id echoed', async () => {
    const res = await post(
      url,
      { id: 'no-jsonrpc', method: 'tools/list', params: { _meta: envelope() } },
      { ...baseHeaders, 'mcp-method': 'tools/list' },
    );
    expect(res.status).toBe(400);
    expect(res.json.id).toBe('no-jsonrpc');
    expect(res.json.error.code).toBe(-32600);
    expect(res.json.error.message).toContain('jsonrpc');
  });

  it('a numeric id beyond 2^53 - 1 → 400, -32600 saying why, with id null (never a rounded id); 2^53 - 1 itself is echoed exactly', async () => {
    const big = `{"jsonrpc":"2.0","id":12345678901234567890,"method":"tools/list","params":{"_meta":${JSON.stringify(envelope())}}}`;
    const res = await post(url, big, { ...baseHeaders, 'mcp-method': 'tools/list' });
    expect(res.status).toBe(400);
    expect(res.text).not.toContain('12345678901234567');
    expect(res.json).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message:
          'Invalid JSON-RPC request: id: is beyond ±9007199254740991 (2^53 - 1): a JSON number past it loses digits, so no response could carry the same id; send a smaller integer or a string',
      },
    });
    const max = await post(url, big.replace('12345678901234567890', '9007199254740991'), { ...baseHeaders, 'mcp-method': 'tools/list' });
    expect(max.status).toBe(200);
    expect(max.text).toContain('"id":9007199254740991,');
    expect(max.json.result.tools.length).toBeGreaterThan(0);
  });

  it('a notification (no id) → 202 with an empty body', async () => {
    const res = await post(
      url,
      { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1, _meta: envelope() } },
      { ...baseHeaders, 'mcp-method': 'notifications/cancelled' },
    );
    expect(res.status).toBe(202);
    expect(res.text).toBe('');
  });
});

describe('methods', () => {
  it('removed methods (initialize, ping, logging/setLevel, resources/subscribe) and an unknown method → 404, -32601 naming the method', async () => {
    const cases: [string, Record<string, unknown>][] = [
      ['initialize', { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } }],
      ['ping', {}],
      ['logging/setLevel', { level: 'debug' }],
      ['resources/subscribe', { uri: 'demo://resource/static/document/architecture.md' }],
      ['no/such-method', {}],
    ];
    for (const [method, params] of cases) {
      const id = `m-${method}`;
      const res = await rpc(url, method, params, { id });
      expect.soft(res.status, method).toBe(404);
      expect.soft(res.body.id, method).toBe(id);
      expect.soft(res.body.error?.code, method).toBe(-32601);
      expect.soft(res.body.error?.message, method).toContain(method);
    }
  });
});

describe('a very long unknown method', () => {
  it('gets 404 / -32601 with the method cut to 200 characters in the message and in the request log line; so does a very long upstream name', async () => {
    const mem = memoryLogger('info');
    const gw = await startGateway({ upstreams: { f: fixtureStdio() } }, { log: mem.log });
    try {
      const method = `x/${'m'.repeat(300_000)}`;
      const res = await rpc(gw.url('f'), method, {}, { headers: { 'mcp-method': 'x/short' } });
      expect(res.status).toBe(404);
      expect(res.body.error.code).toBe(-32601);
      expect(res.body.error.message).toBe(`Method not found: ${method.slice(0, 200)}…`);
      const line = mem.lines().find((l) => l.msg === 'request');
      expect(line?.method).toBe(`${method.slice(0, 200)}…`);
      expect(JSON.stringify(mem.lines()).length).toBeLessThan(20_000);
      const name = 'u'.repeat(3000);
      const unknown = await rpc(`${gw.base}/mcp/${name}`, 'tools/list');
      expect(unknown.status).toBe(404);
      expect(unknown.body.error.message).toBe(`Unknown upstream '${name.slice(0, 200)}…'; this gateway serves: f`);
    } finally {
      await gw.close();
    }
  });
});

describe('_meta envelope', () => {
  it('missing params._meta entirely → 400, -32602, id echoed', async () => {
    const res = await post(
      url,
      { jsonrpc: '2.0', id: 'no-meta', method: 'tools/list', params: {} },
      { ...baseHeaders, 'mcp-method': 'tools/list' },
    );
    expect(res.status).toBe(400);
    expect(res.json.id).toBe('no-meta');
    expect(res.json.error.code).toBe(-32602);
    expect(res.json.error.message).toContain('_meta');
  });

  it('missing io.modelcontextprotocol/protocolVersion in _meta → 400, -32602 naming the key', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'no-version', meta: { [CC]: {} } });
    const err = expectError(res, 400, -32602, 'no-version');
    expect(err.message).toContain(PV);
  });

  it('missing io.modelcontextprotocol/clientCapabilities in _meta → 400, -32602 naming the key', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'no-caps', meta: { [PV]: V } });
    const err = expectError(res, 400, -32602, 'no-caps');
    expect(err.message).toContain(CC);
  });

  it('clientCapabilities with a bad member → 400, -32602 naming the member', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'bad-caps', meta: { [PV]: V, [CC]: { elicitation: true } } });
    const err = expectError(res, 400, -32602, 'bad-caps');
    expect(err.message).toBe(
      `params._meta["${CC}"] must be a ClientCapabilities object ({} declares none): elicitation: Invalid input: expected object, received boolean`,
    );
  });

  it('a progressToken that is not a string or number → 400, -32602 naming it', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'bad-token', meta: envelope({}, { progressToken: { a: 1 } }) });
    const err = expectError(res, 400, -32602, 'bad-token');
    expect(err.message).toBe('params._meta.progressToken must be a string or a number (got object)');
  });

  it('a logLevel that is not an MCP logging level → 400, -32602 naming it and the levels', async () => {
    const res = await rpc(
      url,
      'tools/list',
      {},
      { id: 'bad-level', meta: envelope({}, { 'io.modelcontextprotocol/logLevel': 'verbose' }) },
    );
    const err = expectError(res, 400, -32602, 'bad-level');
    expect(err.message).toBe(
      'params._meta["io.modelcontextprotocol/logLevel"] must be one of debug, info, notice, warning, error, critical, alert, emergency (got "verbose")',
    );
  });

  it('_meta without io.modelcontextprotocol/clientInfo is served (tools/list → 200, resultType complete)', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'no-client-info', meta: { [PV]: V, [CC]: {} } });
    expect(res.status).toBe(200);
    expect(res.body.id).toBe('no-client-info');
    expect(res.body.error).toBeUndefined();
    expect(res.body.result.resultType).toBe('complete');
    expect(Array.isArray(res.body.result.tools)).toBe(true);
  });

  it('_meta with io.modelcontextprotocol/clientInfo is served too', async () => {
    const res = await rpc(url, 'tools/list', {}, { meta: envelope({}, { [CI]: { name: 'envelope-test', version: '1.0.0' } }) });
    expect(res.status).toBe(200);
    expect(res.body.result.resultType).toBe('complete');
  });

  it('unsupported protocol version 1900-01-01 (header matching) → 400, -32022 with data.supported and data.requested', async () => {
    const res = await rpc(
      url,
      'tools/list',
      {},
      { id: 'old-version', meta: { [PV]: '1900-01-01', [CC]: {} }, headers: { 'mcp-protocol-version': '1900-01-01' } },
    );
    const err = expectError(res, 400, -32022, 'old-version');
    expect(err.data.supported).toContain(V);
    expect(err.data.requested).toBe('1900-01-01');
  });
});

describe('standard headers', () => {
  it('MCP-Protocol-Version header missing → 400, -32020 naming the header', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'pv-missing', headers: { 'mcp-protocol-version': null } });
    const err = expectError(res, 400, -32020, 'pv-missing');
    expect(err.message).toContain('MCP-Protocol-Version');
  });

  it('MCP-Protocol-Version header mismatched with _meta → 400, -32020 naming both values', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'pv-mismatch', headers: { 'mcp-protocol-version': '2025-11-25' } });
    const err = expectError(res, 400, -32020, 'pv-mismatch');
    expect(err.message).toContain('2025-11-25');
    expect(err.message).toContain(V);
  });

  it('Mcp-Method header missing → 400, -32020 naming the header', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'method-missing', headers: { 'mcp-method': null } });
    const err = expectError(res, 400, -32020, 'method-missing');
    expect(err.message).toContain('Mcp-Method');
  });

  it('Mcp-Method header mismatched with the body method → 400, -32020', async () => {
    const res = await rpc(url, 'tools/list', {}, { id: 'method-mismatch', headers: { 'mcp-method': 'prompts/list' } });
    const err = expectError(res, 400, -32020, 'method-mismatch');
    expect(err.message).toContain('prompts/list');
    expect(err.message).toContain('tools/list');
  });

  it('Mcp-Method header value differing only in case (Tools/Call) → 400, -32020 (values are case-sensitive)', async () => {
    const res = await rpc(
      url,
      'tools/call',
      { name: 'echo', arguments: { message: 'hi' } },
      { id: 'method-case', headers: { 'mcp-method': 'Tools/Call' } },
    );
    const err = expectError(res, 400, -32020, 'method-case');
    expect(err.message).toContain('Tools/Call');
  });

  it('header names are case-insensitive (MCP-METHOD, MCP-PROTOCOL-VERSION, MCP-NAME on the wire) → served', async () => {
    const res = await rawPost(
      url,
      {
        jsonrpc: '2.0',
        id: 'upper-names',
        method: 'tools/call',
        params: { name: 'echo', arguments: { message: 'hi' }, _meta: envelope() },
      },
      [
        ['Content-Type', 'application/json'],
        ['Accept', 'application/json, text/event-stream'],
        ['MCP-PROTOCOL-VERSION', V],
        ['MCP-METHOD', 'tools/call'],
        ['MCP-NAME', 'echo'],
      ],
    );
    expect(res.status).toBe(200);
    expect(res.json.id).toBe('upper-names');
    expect(res.json.error).toBeUndefined();
    expect(res.json.result.resultType).toBe('complete');
    expect(res.json.result.content[0].text).toContain('hi');
  });

  it('whitespace around header values is ignored → served', async () => {
    const res = await rawPost(
      url,
      { jsonrpc: '2.0', id: 'spaces', method: 'tools/call', params: { name: 'echo', arguments: { message: 'hi' }, _meta: envelope() } },
      [
        ['Content-Type', 'application/json'],
        ['Accept', 'application/json, text/event-stream'],
        ['Mcp-Protocol-Version', `  ${V}\t`],
        ['Mcp-Method', '  tools/call  '],
        ['Mcp-Name', ' echo '],
      ],
    );
    expect(res.status).toBe(200);
    expect(res.json.id).toBe('spaces');
    expect(res.json.error).toBeUndefined();
    expect(res.json.result.resultType).toBe('complete');
  });

  it('Mcp-Name header missing for tools/call → 400, -32020 naming the header', async () => {
    const res = await rpc(
      url,
      'tools/call',
      { name: 'echo', arguments: { message: 'hi' } },
      { id: 'name-missing', headers: { 'mcp-name': null } },
    );
    const err = expectError(res, 400, -32020, 'name-missing');
    expect(err.message).toContain('Mcp-Name');
  });

  it('Mcp-Name header mismatched with params.name → 400, -32020 naming both values', async () => {
    const res = await rpc(
      url,
      'tools/call',
      { name: 'echo', arguments: { message: 'hi' } },
      { id: 'name-mismatch', headers: { 'mcp-name': 'get-sum' } },
    );
    const err = expectError(res, 400, -32020, 'name-mismatch');
    expect(err.message).toContain('get-sum');
    expect(err.message).toContain('echo');
  });

  it('Mcp-Name in base64 form =?base64?…?= matching params.name → served', async () => {
    const encoded = `=?base64?${Buffer.from('echo', 'utf8').toString('base64')}?=`;
    const res = await rpc(
      url,
      'tools/call',
      { name: 'echo', arguments: { message: 'hi' } },
      { id: 'name-b64', headers: { 'mcp-name': encoded } },
    );
    expect(res.status).toBe(200);
    expect(res.body.id).toBe('name-b64');
    expect(res.body.error).toBeUndefined();
    expect(res.body.result.resultType).toBe('complete');
    expect(res.body.result.content[0].text).toContain('hi');
  });
});

describe('client capabilities', () => {
  it('capability mirroring: trigger-sampling-request is listed only when the request declares sampling', async () => {
    const without = await rpc(url, 'tools/list', {}, { caps: {} });
    expect(without.status).toBe(200);
    const namesWithout = (without.body.result.tools as { name: string }[]).map((t) => t.name);
    expect(namesWithout).toContain('echo');
    expect(namesWithout).not.toContain('trigger-sampling-request');

    const withSampling = await rpc(url, 'tools/list', {}, { caps: { sampling: {} } });
    expect(withSampling.status).toBe(200);
    const namesWith = (withSampling.body.result.tools as { name: string }[]).map((t) => t.name);
    expect(namesWith).toContain('trigger-sampling-request');
  });
});

describe('requestState', () => {
  it('an invalid requestState (random string) on tools/call → 200, -32602 about requestState', async () => {
    const res = await rpc(
      url,
      'tools/call',
      {
        name: 'echo',
        arguments: { message: 'hi' },
        requestState: 'not-a-real-state-' + Math.random().toString(36).slice(2),
        inputResponses: {},
      },
      { id: 'bad-state' },
    );
    const err = expectError(res, 200, -32602, 'bad-state');
    expect(err.message).toContain('requestState');
  });
});

describe('limits', () => {
  it('a body over limits.maxBodyBytes → 413 with a JSON-RPC error body', async () => {
    const small = await startGateway({ limits: { maxBodyBytes: 2048 }, upstreams: { everything: everythingStdio } });
    try {
      const res = await rpc(
        small.url('everything'),
        'tools/call',
        { name: 'echo', arguments: { message: 'x'.repeat(4096) } },
        { id: 'too-big' },
      );
      expect(res.status).toBe(413);
      expect(res.body.jsonrpc).toBe('2.0');
      expect(typeof res.body.error.code).toBe('number');
      expect(res.body.error.message).toContain('2048');
      expect(res.body.result).toBeUndefined();
    } finally {
      await small.close();
    }
  });
});

describe('result shapes', () => {
  it('server/discover → resultType complete, supportedVersions ["2026-07-28"], capabilities.tools, _meta serverInfo.name', async () => {
    const res = await rpc(url, 'server/discover', {}, { id: 'discover' });
    expect(res.status).toBe(200);
    expect(res.body.id).toBe('discover');
    const r = res.body.result;
    expect(r.resultType).toBe('complete');
    expect(r.supportedVersions).toEqual([V]);
    expect(r.capabilities.tools).toBeTypeOf('object');
    expect(typeof r._meta['io.modelcontextprotocol/serverInfo'].name).toBe('string');
    expect(r._meta['io.modelcontextprotocol/serverInfo'].name.length).toBeGreaterThan(0);
  });

  for (const [method, field] of [
    ['tools/list', 'tools'],
    ['prompts/list', 'prompts'],
    ['resources/list', 'resources'],
    ['resources/templates/list', 'resourceTemplates'],
  ] as const) {
    it(`${method} → resultType complete, integer ttlMs >= 0, cacheScope public|private`, async () => {
      const res = await rpc(url, method, {});
      expect(res.status).toBe(200);
      expect(res.body.error).toBeUndefined();
      expectCacheable(res.body.result);
      expect(Array.isArray(res.body.result[field])).toBe(true);
    });
  }

  it('resources/read of a listed resource → resultType complete, integer ttlMs >= 0, cacheScope public|private', async () => {
    const list = await rpc(url, 'resources/list', {});
    const uri = (list.body.result.resources as { uri: string }[])[0]!.uri;
    const res = await rpc(url, 'resources/read', { uri }, { id: 'read' });
    expect(res.status).toBe(200);
    expect(res.body.id).toBe('read');
    expect(res.body.error).toBeUndefined();
    expectCacheable(res.body.result);
    expect(res.body.result.contents[0].uri).toBe(uri);
  });
});
