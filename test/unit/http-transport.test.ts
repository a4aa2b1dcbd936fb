/**
 * The Streamable HTTP client transport for legacy upstreams against an HTTP server in this process
 * (127.0.0.1, a free port) that each test scripts: JSON and SSE answers, the headers every request
 * carries, HTTP refusals as StreamableHTTPError, answers that break the protocol, a POST stream
 * resumed with Last-Event-ID, and the session's DELETE.
 */
import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { JSONRPCMessage, MessageExtraInfo } from '@modelcontextprotocol/sdk/types.js';
import { HttpClientTransport, RELATED_TOKEN_HEADER } from '../../src/upstream/http-transport.js';
import { UpstreamProtocolError, UpstreamRequestLost } from '../../src/protocol/errors.js';

import { eventually } from '../helpers/fake-call.js';
import { isSessionNotFound } from '../../src/upstream/legacy-transport.js';

/** One request the server received. */
interface Seen {
  method: string;
  headers: IncomingHttpHeaders;
  body: Record<string, unknown> | undefined;
}

/** What the test's server does with a request (`n`: its index among all requests). */
type Script = (seen: Seen, res: ServerResponse, n: number) => void;

let server: Server;
let origin: string;
let script: Script;
let seen: Seen[];
const open: HttpClientTransport[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    let raw = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (raw += c));
    req.on('end', () => {
      const s: Seen = { method: req.method!, headers: req.headers, body: raw ? (JSON.parse(raw) as Record<string, unknown>) : undefined };
      seen.push(s);
      script(s, res, seen.length - 1);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterEach(async () => {
  for (const t of open.splice(0)) await t.close();
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** A transport to `/mcp` on the test server with a configured header, recording what it delivers. */
function transport(s: Script) {
  script = s;
  seen = [];
  const t = new HttpClientTransport(new URL(`${origin}/mcp?x=1`), {
    dispatcher: new Pool(origin),
    ownsDispatcher: true,
    headers: { authorization: 'Bearer k' },
  });
  open.push(t);
  const messages: { message: JSONRPCMessage; extra?: MessageExtraInfo }[] = [];
  const errors: Error[] = [];
  t.onmessage = (message, extra) => messages.push({ message, extra });
  t.onerror = (e) => errors.push(e);
  return { t, messages, errors };
}

function json(res: ServerResponse, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(200, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}

function sse(res: ServerResponse, events: string[], end = true): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  for (const e of events) res.write(`${e}\n\n`);
  if (end) res.end();
}

const INIT = {
  jsonrpc: '2.0',
  id: 0,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
} as const;
const INIT_RESULT = {
  jsonrpc: '2.0',
  id: 0,
  result: { protocolVersion: '2025-06-18', capabilities: {}, serverInfo: { name: 's', version: '1' } },
};
const call = (id: number, token?: string): JSONRPCMessage => ({
  jsonrpc: '2.0',
  id,
  method: 'tools/call',
  params: { name: 'ask', arguments: {}, ...(token ? { _meta: { progressToken: token } } : {}) },
});

/** A session up to `notifications/initialized` (GET stream refused with 405), with the session id `sid`. */
async function initialized(rest: Script, sid = 'sid-1') {
  const tr = transport((s, res, n) => {
    if (s.body?.method === 'initialize') return json(res, INIT_RESULT, { 'mcp-session-id': sid });
    if (s.body?.method === 'notifications/initialized') return void res.writeHead(202).end();
    if (s.method === 'GET' && !s.headers['last-event-id']) return void res.writeHead(405).end();
    rest(s, res, n);
  });
  await tr.t.send(INIT as JSONRPCMessage);
  tr.t.setProtocolVersion('2025-06-18');
  await tr.t.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  await eventually(() => seen.some((s) => s.method === 'GET'));
  tr.messages.length = 0;
  return tr;
}

describe('HttpClientTransport', () => {
  it('a JSON answer is delivered; the first POST accepts JSON and SSE and carries the configured headers but no session id', async () => {
    const { t, messages } = transport((_s, res) => json(res, INIT_RESULT, { 'Mcp-Session-Id': 'sid-1' }));
    await t.send(INIT as JSONRPCMessage);
    expect(messages).toEqual([{ message: INIT_RESULT, extra: undefined }]);
    expect(t.sessionId).toBe('sid-1');
    expect(seen).toHaveLength(1);
    const [post] = seen;
    expect(post!.method).toBe('POST');
    expect(post!.body).toEqual(INIT);
    expect(post!.headers).toMatchObject({
      accept: 'application/json, text/event-stream',
      'content-type': 'application/json',
      authorization: 'Bearer k',
    });
    expect(post!.headers).not.toHaveProperty('mcp-session-id');
    expect(post!.headers).not.toHaveProperty('mcp-protocol-version');
  });

  it('after initialize: Mcp-Session-Id and MCP-Protocol-Version on every request, and the GET stream opened after initialized', async () => {
    const { t, messages, errors } = await initialized((_s, res) => json(res, { jsonrpc: '2.0', id: 1, result: { content: [] } }));
    const get = seen.find((s) => s.method === 'GET')!;
    expect(get.headers).toMatchObject({ accept: 'text/event-stream', 'mcp-session-id': 'sid-1', 'mcp-protocol-version': '2025-06-18' });
    const initializedPost = seen.find((s) => s.body?.method === 'notifications/initialized')!;
    expect(initializedPost.headers).toMatchObject({ 'mcp-session-id': 'sid-1', 'mcp-protocol-version': '2025-06-18' });
    await t.send(call(1));
    const post = seen.at(-1)!;
    expect(post.headers).toMatchObject({
      accept: 'application/json, text/event-stream',
      'mcp-session-id': 'sid-1',
      'mcp-protocol-version': '2025-06-18',
      authorization: 'Bearer k',
    });
    expect(messages.map((m) => m.message)).toEqual([{ jsonrpc: '2.0', id: 1, result: { content: [] } }]);
    // The server has no GET stream (405): no error.
    expect(errors).toEqual([]);
  });

  it("an SSE answer: a notification, then the response, each delivered with the request's progress token", async () => {
    const { t, messages } = await initialized((_s, res) =>
      sse(res, [
        `data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 'tok', progress: 1 } })}`,
        `data: ${JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'elicitation/create', params: { message: 'm', requestedSchema: {} } })}`,
        `data: ${JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [] } })}`,
      ]),
    );
    await t.send(call(1, 'tok'));
    await eventually(() => messages.length === 3);
    expect(messages.map((m) => (m.message as { method?: string }).method ?? 'response')).toEqual([
      'notifications/progress',
      'elicitation/create',
      'response',
    ]);
    for (const m of messages) expect(m.extra?.requestInfo?.headers).toEqual({ [RELATED_TOKEN_HEADER]: 'tok' });
  });

  it('a 404 on a request with the session id is a StreamableHTTPError 404, the sign that the upstream forgot the session', async () => {
    const { t, errors } = await initialized((_s, res) => {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('Session not found');
    });
    const err = await t.send(call(1)).catch((e: unknown) => e);
    expect(seen.at(-1)!.headers['mcp-session-id']).toBe('sid-1');
    expect(err).toBeInstanceOf(StreamableHTTPError);
    expect(err).toMatchObject({ code: 404, message: 'Streamable HTTP error: Error POSTing to endpoint: Session not found' });
    expect(isSessionNotFound(err)).toBe(true);
    expect(errors).toEqual([err]);
  });

  it('a 413 or a 5xx is a StreamableHTTPError with that status and the body (or the status) in its message, not a lost session', async () => {
    const { t } = await initialized((s, res) => {
      if (s.body?.id === 1) res.writeHead(413).end('payload too large');
      else res.writeHead(503).end();
    });
    const first = await t.send(call(1)).catch((e: unknown) => e);
    const second = await t.send(call(2)).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(StreamableHTTPError);
    expect(first).toMatchObject({ code: 413, message: 'Streamable HTTP error: Error POSTing to endpoint: payload too large' });
    expect(second).toMatchObject({ code: 503, message: 'Streamable HTTP error: Error POSTing to endpoint: 503' });
    expect(isSessionNotFound(first)).toBe(false);
    expect(isSessionNotFound(second)).toBe(false);
  });

  it('a 2xx JSON answer without the response, or of another media type, fails the request with an UpstreamProtocolError', async () => {
    const { t } = await initialized((s, res) => {
      if ((s.body?.id as number) === 1) return json(res, { jsonrpc: '2.0', method: 'notifications/message', params: {} });
      if ((s.body?.id as number) === 2) return void res.writeHead(200, { 'content-type': 'text/html' }).end('<p>hi</p>');
      json(res, { not: 'json-rpc' });
    });
    await expect(t.send(call(1))).rejects.toMatchObject({
      name: 'UpstreamProtocolError',
      what: 'answer to tools/call',
      problem: 'the JSON body holds 1 JSON-RPC message, none the response to the request',
    });
    const html = await t.send(call(2)).catch((e: unknown) => e);
    expect(html).toBeInstanceOf(UpstreamProtocolError);
    expect((html as UpstreamProtocolError).problem).toContain("Content-Type 'text/html'");
    await expect(t.send(call(3))).rejects.toMatchObject({ name: 'UpstreamProtocolError', what: 'JSON-RPC message' });
  });

  it('a POST stream that ends before the answer after an event id is resumed with a GET carrying Last-Event-ID', async () => {
    const { t, messages } = await initialized((s, res) => {
      if (s.method === 'POST')
        return sse(res, ['retry: 0', `id: ev-1\ndata: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: {} })}`]);
      sse(res, [`id: ev-2\ndata: ${JSON.stringify({ jsonrpc: '2.0', id: 1, result: { ok: true } })}`]);
    });
    await t.send(call(1, 'tok'));
    await eventually(() => messages.length === 2);
    const resume = seen.at(-1)!;
    expect(resume.method).toBe('GET');
    expect(resume.headers).toMatchObject({ 'last-event-id': 'ev-1', 'mcp-session-id': 'sid-1', accept: 'text/event-stream' });
    expect(messages[1]).toEqual({
      message: { jsonrpc: '2.0', id: 1, result: { ok: true } },
      extra: { requestInfo: { headers: { [RELATED_TOKEN_HEADER]: 'tok' } } },
    });
  });

  it('a POST stream that ends without the answer and without an event id fails its request alone (onrequesterror)', async () => {
    const { t, errors } = await initialized((_s, res) =>
      sse(res, [`data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: {} })}`]),
    );
    const failed: [string | number, Error][] = [];
    t.onrequesterror = (id, e) => (failed.push([id, e]), true);
    await t.send(call(4));
    await eventually(() => failed.length === 1);
    expect(failed[0]![0]).toBe(4);
    expect(failed[0]![1]).toMatchObject({ name: 'UpstreamProtocolError', what: 'SSE stream of tools/call' });
    expect(errors).toEqual([]);
  });

  it('a POST stream that breaks off without an event id is the lost connection of that request (UpstreamRequestLost)', async () => {
    const { t } = await initialized((_s, res) => {
      sse(res, [`data: ${JSON.stringify({ jsonrpc: '2.0', method: 'notifications/message', params: {} })}`], false);
      setTimeout(() => res.destroy(), 20);
    });
    const failed: Error[] = [];
    t.onrequesterror = (_id, e) => (failed.push(e), true);
    await t.send(call(5));
    await eventually(() => failed.length === 1);
    expect(failed[0]).toBeInstanceOf(UpstreamRequestLost);
    expect(failed[0]).toMatchObject({ kind: 'closed' });
  });

  it('terminateSession sends DELETE with the session id and forgets it', async () => {
    const { t } = await initialized((_s, res) => res.writeHead(200).end());
    await t.terminateSession();
    const del = seen.at(-1)!;
    expect(del.method).toBe('DELETE');
    expect(del.headers).toMatchObject({ 'mcp-session-id': 'sid-1', 'mcp-protocol-version': '2025-06-18' });
    expect(t.sessionId).toBeUndefined();
  });
});
