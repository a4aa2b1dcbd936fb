/**
 * Legacy clients on the same endpoint as 2026-07-28 clients: the official v1 SDK client
 * (2025-11-25, Streamable HTTP) through the gateway in front of server-everything over stdio, with
 * its server-initiated requests relayed natively, and the legacy session rules.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
  LoggingMessageNotificationSchema,
  PingRequestSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, describe, expect, it } from 'vitest';
import { everythingStdio, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, fixtureStdio, FixtureLog, modernStdio, startFixtureHttp } from '../helpers/fixture.js';
import { textOf, v2Client } from '../helpers/v2client.js';

const gateways: TestGateway[] = [];
async function gateway(raw: Record<string, unknown>): Promise<TestGateway> {
  const g = await startGateway(raw);
  gateways.push(g);
  return g;
}
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

interface Seen {
  elicitations: any[];
  samplings: any[];
  roots: number;
  logs: any[];
}

/**
 * The v1 SDK client (2025-11-25) declaring elicitation, sampling and roots, answering with
 * `answer`; its HTTP requests go through `fetchImpl` when given.
 */
async function v1Client(
  url: string,
  answer: (params: any) => Record<string, unknown>,
  headers: Record<string, string> = {},
  fetchImpl?: typeof fetch,
) {
  const seen: Seen = { elicitations: [], samplings: [], roots: 0, logs: [] };
  const client = new Client(
    { name: 'legacy-e2e', version: '1.0.0' },
    { capabilities: { elicitation: {}, sampling: {}, roots: { listChanged: true } } },
  );
  client.setRequestHandler(ElicitRequestSchema, async (r) => {
    seen.elicitations.push(r.params);
    return answer(r.params) as never;
  });
  client.setRequestHandler(CreateMessageRequestSchema, async (r) => {
    seen.samplings.push(r.params);
    return {
      role: 'assistant',
      model: 'legacy-model',
      content: { type: 'text', text: 'sampled by the legacy client' },
      stopReason: 'endTurn',
    };
  });
  client.setRequestHandler(ListRootsRequestSchema, async () => {
    seen.roots++;
    return { roots: [{ uri: 'file:///legacy/workspace', name: 'legacy' }] };
  });
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void seen.logs.push(n.params));
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers },
    ...(fetchImpl ? { fetch: fetchImpl } : {}),
  });
  await client.connect(transport);
  return { client, transport, seen };
}

const accept = () => ({ action: 'accept', content: { color: 'teal', number: 7, pets: 'dogs' } });

describe('the v1 SDK client through the gateway, in front of server-everything over stdio', () => {
  it('lists and calls tools, answers elicitation (accept and decline), sampling and roots itself, gets progress and logs, and DELETE releases the upstream', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    let decline = false;
    const { client, transport, seen } = await v1Client(gw.url('everything'), (p) => (decline ? { action: 'decline' } : accept()));
    expect(transport.sessionId).toMatch(/^[A-Za-z0-9_-]{32}$/);
    expect(client.getServerVersion()?.name).toBe('mcp-servers/everything');

    const names = (await client.listTools()).tools.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['echo', 'trigger-elicitation-request', 'trigger-sampling-request', 'get-roots-list']));
    expect(textOf((await client.callTool({ name: 'echo', arguments: { message: 'hello' } })) as never)).toBe('Echo: hello');

    const accepted = textOf((await client.callTool({ name: 'trigger-elicitation-request', arguments: {} })) as never);
    expect(accepted).toContain('teal');
    expect(seen.elicitations).toHaveLength(1);
    decline = true;
    const declined = textOf((await client.callTool({ name: 'trigger-elicitation-request', arguments: {} })) as never);
    expect(declined).toMatch(/declined/i);
    expect(seen.elicitations).toHaveLength(2);

    const sampled = textOf(
      (await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'hi', maxTokens: 20 } })) as never,
    );
    expect(sampled).toContain('sampled by the legacy client');
    expect(seen.samplings).toHaveLength(1);

    const roots = textOf((await client.callTool({ name: 'get-roots-list', arguments: {} })) as never);
    expect(roots).toContain('file:///legacy/workspace');
    expect(seen.roots).toBeGreaterThanOrEqual(1);

    const progress: number[] = [];
    const long = await client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } }, undefined, {
      onprogress: (p) => void progress.push(p.progress),
    });
    expect(textOf(long as never)).toContain('completed');
    expect(progress).toEqual([1, 2, 3]);

    // Each start of the simulated logging sends one message at a random level at once; the upstream
    // drops those below the level the client set, so only error and above may arrive.
    await client.setLoggingLevel('error');
    seen.logs.length = 0;
    for (let i = 0; i < 16; i++) {
      await client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
      await client.callTool({ name: 'toggle-simulated-logging', arguments: {} });
    }
    expect(await eventually(() => seen.logs.length > 0, 5000)).toBe(true);
    const severe = ['error', 'critical', 'alert', 'emergency'];
    expect(seen.logs.filter((l) => !severe.includes(l.level))).toEqual([]);

    const [open] = gw.legacy.list();
    expect(open).toMatchObject({ upstream: 'everything', protocolVersion: '2025-11-25' });
    const pid = open!.pid!;
    expect(alive(pid)).toBe(true);
    await transport.terminateSession();
    expect(await eventually(() => gw.legacy.size === 0 && !alive(pid), 5000)).toBe(true);
    await client.close();
  });
});

describe('legacy client → legacy server: notifications and pings pass through', () => {
  it("the client's notifications/cancelled reaches the upstream, the upstream's tools/list_changed reaches the client, and the upstream's ping is answered by the client", async () => {
    const log = new FixtureLog();
    const gw = await gateway({ upstreams: { fixture: fixtureStdio(log) } });
    const { client, transport } = await v1Client(gw.url('fixture'), accept);
    let pings = 0;
    client.setRequestHandler(PingRequestSchema, async () => {
      pings++;
      return {};
    });
    const changed: unknown[] = [];
    client.setNotificationHandler(ToolListChangedNotificationSchema, (n) => void changed.push(n));

    // Cancellation: the upstream gets notifications/cancelled for the call, under the client's own request id.
    const abort = new AbortController();
    const call = client.callTool({ name: 'slow', arguments: { ms: 20_000, steps: 20 } }, undefined, { signal: abort.signal });
    expect(await eventually(() => log.of('call', 'slow').length === 1, 10_000)).toBe(true);
    abort.abort('the user gave up');
    await expect(call).rejects.toThrow();
    expect(await eventually(() => log.of('cancelled', 'slow').length === 1, 5000)).toBe(true);
    const requestId = log.of('call', 'slow')[0]!.requestId;
    expect(log.of('notification-cancelled')).toEqual([
      expect.objectContaining({ requestId, reason: expect.stringContaining('the user gave up') }),
    ]);

    // List changes: the client hears of the new tool and lists it.
    expect(textOf((await client.callTool({ name: 'add_tool', arguments: {} })) as never)).toBe('added added_1');
    expect(await eventually(() => changed.length >= 1, 5000)).toBe(true);
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('added_1');

    // A ping from the upstream mid-call is answered by the client itself.
    expect(textOf((await client.callTool({ name: 'ping_client', arguments: {} })) as never)).toBe('pong {}');
    expect(pings).toBe(1);
    // One upstream process: the child the era probe asked carries the client's session.
    expect(new Set(log.events().map((e) => e.pid)).size).toBe(1);
    await transport.terminateSession();
    await client.close();
  });
});

describe('both client eras on one endpoint', () => {
  it('a v1 client and a 2026-07-28 client elicit at the same time, and each sees only its own question', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const legacy = await v1Client(url, () => ({ action: 'accept', content: { color: 'legacy-red', number: 1, pets: 'cats' } }));
    const modern = await v2Client(url, { elicit: () => ({ action: 'accept', content: { name: 'modern-blue', number: 2 } }) });
    const [a, b] = await Promise.all([
      legacy.client.callTool({ name: 'trigger-elicitation-request', arguments: {} }),
      modern.client.callTool({ name: 'trigger-elicitation-request', arguments: {} }),
    ]);
    expect(textOf(a as never)).toContain('legacy-red');
    expect(textOf(a as never)).not.toContain('modern-blue');
    expect(textOf(b as never)).toContain('modern-blue');
    expect(textOf(b as never)).not.toContain('legacy-red');
    expect(legacy.seen.elicitations).toHaveLength(1);
    expect(modern.record.elicitation).toHaveLength(1);
    // The modern client went through input_required rounds; the legacy one got a real request.
    expect(modern.record.results.some((r) => r.resultType === 'input_required')).toBe(true);
    await legacy.transport.terminateSession();
    await legacy.client.close();
    await modern.client.close();
  });
});

describe('SSE polling (SEP-1699): legacySessions.closeStreamAfterMs', () => {
  /** A fetch that records the Last-Event-ID of each GET that resumes a stream. */
  const recording =
    (resumed: string[]): typeof fetch =>
    (input, init) => {
      const id = new Headers(init?.headers).get('last-event-id');
      if ((init?.method ?? 'GET') === 'GET' && id) resumed.push(id);
      return fetch(input, init);
    };
  const longCall = async (url: string, resumed: string[]) => {
    const { client, transport } = await v1Client(url, accept, {}, recording(resumed));
    // Spawning the upstream may take longer than closeStreamAfterMs: initialize may have been resumed too.
    resumed.length = 0;
    const progress: number[] = [];
    const result = await client.callTool({ name: 'trigger-long-running-operation', arguments: { duration: 1.6, steps: 4 } }, undefined, {
      onprogress: (p) => void progress.push(p.progress),
    });
    await transport.terminateSession();
    await client.close();
    return { text: textOf(result as never), progress };
  };

  it('a long call has its stream closed after closeStreamAfterMs; the v1 client resumes it with Last-Event-ID and misses no progress notification nor the result', async () => {
    // Progress 1 to 4 come at 400, 800, 1200 and 1600 ms; the stream closes at 600 ms and the client is away for retryMs.
    const gw = await gateway({ legacySessions: { closeStreamAfterMs: 600, retryMs: 300 }, upstreams: { everything: everythingStdio } });
    const resumed: string[] = [];
    const { text, progress } = await longCall(gw.url('everything'), resumed);
    expect(text).toContain('completed');
    expect(progress).toEqual([1, 2, 3, 4]);
    // Once, from the last event the POST stream carried; the resumed stream stays open.
    expect(resumed).toHaveLength(1);
  });

  it('without closeStreamAfterMs (the default), the stream of a long call stays open until its result', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const resumed: string[] = [];
    const { text, progress } = await longCall(gw.url('everything'), resumed);
    expect(text).toContain('completed');
    expect(progress).toEqual([1, 2, 3, 4]);
    expect(resumed).toEqual([]);
  });
});

describe('legacy session rules', () => {
  const keys = {
    mode: 'apiKeys',
    keys: [
      { principal: 'alice', key: 'key-of-alice-0123456789' },
      { principal: 'bob', key: 'key-of-bob-0123456789ab' },
    ],
  };

  async function post(url: string, body: unknown, headers: Record<string, string>) {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
      body: JSON.stringify(body),
    });
    return {
      status: res.status,
      text: await res.text(),
      sessionId: res.headers.get('mcp-session-id'),
      retryAfter: res.headers.get('retry-after'),
    };
  }
  const initialize = {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
  };
  const ping = { jsonrpc: '2.0', id: 2, method: 'ping' };

  it('an unknown session id gets 404; a session of one principal used by another gets 404', async () => {
    const gw = await gateway({ auth: keys, upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const alice = { authorization: 'Bearer key-of-alice-0123456789' };
    const bob = { authorization: 'Bearer key-of-bob-0123456789ab' };
    const opened = await post(url, initialize, alice);
    expect(opened.status).toBe(200);
    expect(opened.text).toContain('"protocolVersion":"2025-11-25"');
    const sid = opened.sessionId!;
    const v = { 'mcp-protocol-version': '2025-11-25' };
    expect((await post(url, ping, { ...alice, ...v, 'mcp-session-id': sid })).status).toBe(200);
    const unknown = await post(url, ping, { ...alice, ...v, 'mcp-session-id': 'not-a-session' });
    expect(unknown.status).toBe(404);
    expect(JSON.parse(unknown.text).error.code).toBe(-32001);
    expect((await post(url, ping, { ...bob, ...v, 'mcp-session-id': sid })).status).toBe(404);
    // Another principal cannot end it either.
    expect((await fetch(url, { method: 'DELETE', headers: { ...bob, ...v, 'mcp-session-id': sid } })).status).toBe(404);
    expect((await post(url, ping, { ...alice, ...v, 'mcp-session-id': sid })).status).toBe(200);
    // A revision other than the negotiated one is refused.
    expect((await post(url, ping, { ...alice, 'mcp-protocol-version': '2025-06-18', 'mcp-session-id': sid })).status).toBe(400);
    expect((await fetch(url, { method: 'DELETE', headers: { ...alice, ...v, 'mcp-session-id': sid } })).status).toBe(200);
    expect((await post(url, ping, { ...alice, ...v, 'mcp-session-id': sid })).status).toBe(404);
  });

  it('a numeric id past 2^53 - 1 gets 400 / -32600 saying why, with id null, for initialize (no session opens) and inside a session', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const raw = (body: string, headers: Record<string, string> = {}) =>
      fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
        body,
      });
    const refused = {
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message:
          'Invalid Request: id is beyond ±9007199254740991 (2^53 - 1): a JSON number past it loses digits, so no response could carry the same id; send a smaller integer or a string',
      },
    };
    const init = await raw(JSON.stringify(initialize).replace('"id":1', '"id":12345678901234567890'));
    expect(init.status).toBe(400);
    expect(init.headers.get('mcp-session-id')).toBeNull();
    expect(await init.json()).toEqual(refused);
    expect(gw.legacy.size).toBe(0);
    const sid = (await post(url, initialize, {})).sessionId!;
    const inSession = { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' };
    const ping = await raw('{"jsonrpc":"2.0","id":-12345678901234567890,"method":"ping"}', inSession);
    expect(ping.status).toBe(400);
    expect(await ping.json()).toEqual(refused);
    const safe = await raw('{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}', inSession);
    expect(safe.status).toBe(200);
    expect(await safe.text()).toContain('"id":9007199254740991');
  });

  it("initialize inside an open session gets 400 / -32600 and opens nothing; with another caller's or an unknown session id it opens a new session", async () => {
    const gw = await gateway({ auth: keys, upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const alice = { authorization: 'Bearer key-of-alice-0123456789' };
    const bob = { authorization: 'Bearer key-of-bob-0123456789ab' };
    const sid = (await post(url, initialize, alice)).sessionId!;
    expect(gw.legacy.size).toBe(1);
    const again = await post(url, initialize, { ...alice, 'mcp-session-id': sid });
    expect(again.status).toBe(400);
    expect(again.sessionId).toBeNull();
    expect(JSON.parse(again.text).error).toMatchObject({
      code: -32600,
      message: expect.stringContaining('send initialize without Mcp-Session-Id'),
    });
    expect(gw.legacy.size).toBe(1);
    // The session is untouched.
    expect((await post(url, ping, { ...alice, 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid })).status).toBe(200);
    for (const [who, id] of [
      [bob, sid],
      [alice, 'not-a-session'],
    ] as const) {
      const opened = await post(url, initialize, { ...who, 'mcp-session-id': id });
      expect(opened.status).toBe(200);
      expect(opened.sessionId).toBeTruthy();
      expect(opened.sessionId).not.toBe(sid);
    }
    expect(gw.legacy.size).toBe(3);
  });

  it('legacySessions bounds refuse new sessions per caller (429) and overall (503), naming the setting, even for initializes that arrive together; other callers go on', async () => {
    const callers = ['alice', 'bob', 'carol'].map((principal) => ({ principal, key: `key-of-${principal}-0123456789abcdef` }));
    const as = (principal: string) => ({ authorization: `Bearer key-of-${principal}-0123456789abcdef` });
    // A 2026-07-28 upstream over stdio with protocol auto: each initialize first waits for the era probe.
    const gw = await gateway({
      auth: { mode: 'apiKeys', keys: callers },
      legacySessions: { maxSessionsPerPrincipal: 2, maxSessions: 3 },
      upstreams: { modern: modernStdio(), gone: { transport: 'streamable-http', url: 'http://127.0.0.1:9/mcp' } },
    });
    const url = gw.url('modern');
    // An initialize that opens no session (its upstream cannot be reached) leaves no place taken.
    for (let i = 0; i < 3; i++) expect((await post(gw.url('gone'), initialize, as('alice'))).status).toBe(502);
    const burst = await Promise.all(Array.from({ length: 5 }, () => post(url, initialize, as('alice'))));
    const opened = burst.filter((r) => r.status === 200);
    expect(opened).toHaveLength(2);
    expect(new Set(opened.map((r) => r.sessionId)).size).toBe(2);
    for (const r of burst.filter((r) => r.status !== 200)) {
      expect(r.status).toBe(429);
      expect(r.retryAfter).toBe('1');
      expect(r.sessionId).toBeNull();
      expect(JSON.parse(r.text).error).toMatchObject({
        code: -32603,
        message: expect.stringContaining('legacySessions.maxSessionsPerPrincipal'),
        data: { reason: 'busy', upstream: 'modern' },
      });
    }
    expect(gw.legacy.size).toBe(2);
    // Alice's sessions still work, and Bob gets one of his own.
    const v = { 'mcp-protocol-version': '2025-11-25' };
    expect((await post(url, ping, { ...as('alice'), ...v, 'mcp-session-id': opened[0]!.sessionId! })).status).toBe(200);
    const bob = await post(url, initialize, as('bob'));
    expect(bob.status).toBe(200);
    // Three sessions in all: the gateway's bound refuses Carol, together or not.
    const carol = await Promise.all([post(url, initialize, as('carol')), post(url, initialize, as('carol'))]);
    for (const r of carol) {
      expect(r.status).toBe(503);
      expect(r.retryAfter).toBe('5');
      expect(JSON.parse(r.text).error).toMatchObject({
        code: -32603,
        message: expect.stringContaining('legacySessions.maxSessions'),
        data: { reason: 'busy' },
      });
    }
    expect(gw.legacy.size).toBe(3);
    // Ending one of Alice's sessions makes room for Carol.
    expect(
      (await fetch(url, { method: 'DELETE', headers: { ...as('alice'), ...v, 'mcp-session-id': opened[1]!.sessionId! } })).status,
    ).toBe(200);
    expect(await eventually(() => gw.legacy.size === 2)).toBe(true);
    expect((await post(url, initialize, as('carol'))).status).toBe(200);
  });

  it('an idle session ends after legacySessions.idleMs and its upstream session is closed', async () => {
    const gw = await gateway({ legacySessions: { idleMs: 1000 }, upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const opened = await post(url, initialize, {});
    const sid = opened.sessionId!;
    const [open] = gw.legacy.list();
    const pid = open!.pid!;
    expect(alive(pid)).toBe(true);
    expect(await eventually(() => gw.legacy.size === 0, 4000)).toBe(true);
    expect(await eventually(() => !alive(pid), 4000)).toBe(true);
    expect((await post(url, ping, { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid })).status).toBe(404);
  });

  it('DELETE and idle expiry end the upstream session of a Streamable HTTP upstream too (it gets DELETE with its own session id)', async () => {
    const log = new FixtureLog();
    const upstream = await startFixtureHttp('http', log);
    try {
      const gw = await gateway({ legacySessions: { idleMs: 1000 }, upstreams: { fixture: upstream.config } });
      const url = gw.url('fixture');
      /** The upstream session id the fixture saw on the session's tools/list, and whether it got DELETE for it. */
      const upstreamSession = () =>
        log.of('http').find((e) => e.rpcMethod === 'tools/list' && e.sessionId !== undefined && !seen.has(e.sessionId))?.sessionId as
          string | undefined;
      const deleted = (sid: string) => log.of('http').some((e) => e.httpMethod === 'DELETE' && e.sessionId === sid);
      const seen = new Set<string>();

      const first = await v1Client(url, accept);
      await first.client.listTools();
      const a = upstreamSession()!;
      expect(a).toBeTruthy();
      seen.add(a);
      expect(deleted(a)).toBe(false);
      await first.transport.terminateSession();
      expect(await eventually(() => deleted(a), 5000)).toBe(true);
      await first.client.close();

      const second = await v1Client(url, accept);
      await second.client.listTools();
      const b = upstreamSession()!;
      expect(b).toBeTruthy();
      expect(b).not.toBe(a);
      // Nothing more from the client: after idleMs the session ends, and the upstream's with it.
      expect(await eventually(() => gw.legacy.size === 0, 5000)).toBe(true);
      expect(await eventually(() => deleted(b), 5000)).toBe(true);
      await second.client.close();
    } finally {
      await upstream.stop();
    }
  });

  it('an initialize with bad params → 400 / -32602 saying what is wrong, and no session', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const cases: [unknown, RegExp][] = [
      ['x', /params must be an object/],
      [undefined, /params must be an object/],
      [{ capabilities: {}, clientInfo: { name: 'raw', version: '1' } }, /params.protocolVersion must be a string/],
      [{ protocolVersion: '2025-11-25', clientInfo: { name: 'raw', version: '1' } }, /params.capabilities must be an object/],
    ];
    for (const [params, message] of cases) {
      const r = await post(url, { jsonrpc: '2.0', id: 9, method: 'initialize', ...(params === undefined ? {} : { params }) }, {});
      expect(r.status).toBe(400);
      expect(JSON.parse(r.text)).toMatchObject({ id: 9, error: { code: -32602, message: expect.stringMatching(message) } });
      expect(r.sessionId).toBeNull();
    }
    expect(gw.legacy.size).toBe(0);
  });

  it('the media checks are those of 2026-07-28 requests: Accept application/json only → 406, text/plain → 415; Accept */* opens a session', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const json = await post(url, initialize, { accept: 'application/json' });
    expect(json.status).toBe(406);
    expect(JSON.parse(json.text)).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32000,
        message: "Not Acceptable: the Accept header must list application/json and text/event-stream (got 'application/json')",
      },
    });
    const plain = await post(url, initialize, { 'content-type': 'text/plain' });
    expect(plain.status).toBe(415);
    expect(JSON.parse(plain.text)).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32000, message: "Unsupported Media Type: the Content-Type header must be application/json (got 'text/plain')" },
    });
    expect(gw.legacy.size).toBe(0);
    const any = await post(url, initialize, { accept: '*/*' });
    expect(any.status).toBe(200);
    expect(any.sessionId).toBeTruthy();
    const v = { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': any.sessionId! };
    expect((await post(url, ping, { ...v, accept: '*/*' })).status).toBe(200);
    expect((await fetch(url, { method: 'DELETE', headers: v })).status).toBe(200);
  });

  it('a JSON value that is not a JSON-RPC message, inside a session → 400, -32600 Invalid Request (not a parse error)', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const url = gw.url('everything');
    const opened = await post(url, initialize, {});
    expect(opened.status).toBe(200);
    const v = { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': opened.sessionId! };
    for (const body of [{ foo: 1 }, [ping, { foo: 1 }]]) {
      const res = await post(url, body, v);
      expect(res.status).toBe(400);
      expect(JSON.parse(res.text)).toEqual({
        jsonrpc: '2.0',
        id: null,
        error: {
          code: -32600,
          message:
            'Invalid Request: not a JSON-RPC 2.0 message (it needs "jsonrpc": "2.0" and a "method", or an "id" with "result" or "error")',
        },
      });
    }
    expect((await post(url, ping, v)).status).toBe(200);
    expect((await fetch(url, { method: 'DELETE', headers: v })).status).toBe(200);
  });

  it('GET and DELETE without a session keep their 2026-07-28 answer: 405', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    expect((await fetch(gw.url('everything'))).status).toBe(405);
    expect((await fetch(gw.url('everything'), { method: 'DELETE' })).status).toBe(405);
  });
});

/**
 * An HTTP+SSE session (2024-11-05) opened with fetch on `GET BASE/mcp/NAME/sse`: the URL its
 * `endpoint` event names, `answer(id)` waiting for the `message` event answering request `id`, and
 * `close()` ending the stream.
 */
async function sseSession(base: string, name: string) {
  const abort = new AbortController();
  const res = await fetch(`${base}/mcp/${name}/sse`, { headers: { accept: 'text/event-stream' }, signal: abort.signal });
  expect(res.status).toBe(200);
  const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
  const events: { event: string; data: string }[] = [];
  let buffer = '';
  const more = async () => {
    const { value, done } = await reader.read();
    if (done) throw new Error('the SSE stream ended');
    buffer += value;
    let end: number;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      events.push({ event: /^event: (.*)$/m.exec(block)?.[1] ?? 'message', data: /^data: (.*)$/m.exec(block)?.[1] ?? '' });
    }
  };
  while (!events.some((e) => e.event === 'endpoint')) await more();
  const endpoint = `${base}${events.find((e) => e.event === 'endpoint')!.data}`;
  const answer = async (id: number) => {
    for (;;) {
      const found = events.find((e) => e.event === 'message' && JSON.parse(e.data).id === id);
      if (found) return JSON.parse(found.data);
      await more();
    }
  };
  const post = (body: string, contentType = 'application/json') =>
    fetch(endpoint, { method: 'POST', headers: { 'content-type': contentType }, body });
  return { endpoint, answer, post, close: () => abort.abort() };
}

const initialize2024 = (id: number) =>
  JSON.stringify({
    jsonrpc: '2.0',
    id,
    method: 'initialize',
    params: { protocolVersion: '2024-11-05', capabilities: {}, clientInfo: { name: 'raw-sse', version: '1' } },
  });
const pingOf = (id: number) => JSON.stringify({ jsonrpc: '2.0', id, method: 'ping' });

describe('the old HTTP+SSE transport (2024-11-05)', () => {
  it('SSE streams the client drops while the upstream is first asked its era open no session and keep no place', async () => {
    const { SSEClientTransport } = await import('@modelcontextprotocol/sdk/client/sse.js');
    const gw = await gateway({ upstreams: { everything: everythingStdio }, legacySessions: { maxSessionsPerPrincipal: 2 } });
    // The first stream starts the era probe (a server-everything child); each is dropped before it answers.
    for (let i = 0; i < 4; i++) {
      const ac = new AbortController();
      const opened = fetch(`${gw.base}/mcp/everything/sse`, { signal: ac.signal }).catch(() => undefined);
      setTimeout(() => ac.abort(), 30);
      await opened;
    }
    const clients = [new Client({ name: 'sse-a', version: '1.0.0' }), new Client({ name: 'sse-b', version: '1.0.0' })];
    for (const c of clients) await c.connect(new SSEClientTransport(new URL(`${gw.base}/mcp/everything/sse`)));
    expect(gw.legacy.size).toBe(2);
    for (const c of clients) expect((await c.listTools()).tools.length).toBeGreaterThan(0);
    for (const c of clients) await c.close();
    expect(await eventually(() => gw.legacy.size === 0, 5000)).toBe(true);
  });

  it('a v1 client on GET /mcp/NAME/sse lists tools, calls echo and answers an elicitation; closing the stream ends the session', async () => {
    const { SSEClientTransport } = await import('@modelcontextprotocol/sdk/client/sse.js');
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const seen: any[] = [];
    const client = new Client({ name: 'sse-e2e', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async (r) => {
      seen.push(r.params);
      return { action: 'accept', content: { color: 'over-sse', number: 5, pets: 'cats' } };
    });
    await client.connect(new SSEClientTransport(new URL(`${gw.base}/mcp/everything/sse`)));
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('echo');
    expect(textOf((await client.callTool({ name: 'echo', arguments: { message: 'sse' } })) as never)).toBe('Echo: sse');
    expect(textOf((await client.callTool({ name: 'trigger-elicitation-request', arguments: {} })) as never)).toContain('over-sse');
    expect(seen).toHaveLength(1);
    const pid = gw.legacy.list()[0]!.pid!;
    await client.close();
    expect(await eventually(() => gw.legacy.size === 0 && !alive(pid), 5000)).toBe(true);
  });

  it('a POST to /mcp/NAME/message with an unknown or missing sessionId gets 404 / -32001', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    for (const query of ['?sessionId=not-a-session', '']) {
      const res = await fetch(`${gw.base}/mcp/everything/message${query}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }),
      });
      expect(res.status).toBe(404);
      expect((await res.json()).error).toMatchObject({ code: -32001, message: expect.stringMatching(/Session not found/) });
    }
    expect(gw.legacy.size).toBe(0);
  });

  it('a POST to /mcp/NAME/message is checked like any MCP POST: 415 for another Content-Type or a content coding, 400 for a body that is not UTF-8 or not JSON; no Accept is needed', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const url = `${gw.base}/mcp/everything/message?sessionId=not-a-session`;
    const post = (headers: Record<string, string>, body: string | Uint8Array) =>
      fetch(url, { method: 'POST', headers, body: body as BodyInit });
    const ping = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' });
    const text = await post({ 'content-type': 'text/plain' }, ping);
    expect(text.status).toBe(415);
    expect((await text.json()).error.message).toMatch(/Content-Type header must be application\/json \(got 'text\/plain'\)/);
    const gzip = await post({ 'content-type': 'application/json', 'content-encoding': 'gzip' }, ping);
    expect(gzip.status).toBe(415);
    expect(gzip.headers.get('accept-encoding')).toBe('identity');
    const latin1 = await post({ 'content-type': 'application/json' }, Uint8Array.from([0x7b, 0x22, 0xe9, 0x22, 0x3a, 0x31, 0x7d]));
    expect(latin1.status).toBe(400);
    expect((await latin1.json()).error).toMatchObject({ code: -32700, message: expect.stringMatching(/not valid UTF-8/) });
    const broken = await post({ 'content-type': 'application/json' }, '{"jsonrpc":');
    expect(broken.status).toBe(400);
    expect((await broken.json()).error.code).toBe(-32700);
    // Passing the checks without any Accept: on to the session lookup.
    const passed = await post({ 'content-type': 'application/json; charset=utf-8' }, ping);
    expect(passed.status).toBe(404);
  });

  it('a body on /message that is JSON but not one JSON-RPC message → 400 / -32600 in JSON (a batch too: this transport takes one message per POST); the session goes on', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const sse = await sseSession(gw.base, 'everything');
    const invalid = {
      jsonrpc: '2.0',
      id: null,
      error: {
        code: -32600,
        message:
          'Invalid Request: not a JSON-RPC 2.0 message (it needs "jsonrpc": "2.0" and a "method", or an "id" with "result" or "error")',
      },
    };
    for (const body of ['{"foo":1}', '42', 'null', '"ping"', '{"jsonrpc":"2.0","id":{},"method":"ping"}']) {
      const res = await sse.post(body);
      expect(res.status, body).toBe(400);
      expect(res.headers.get('content-type'), body).toMatch(/^application\/json/);
      expect(await res.json(), body).toEqual(invalid);
    }
    for (const body of [`[${pingOf(1)}]`, '[]']) {
      const batch = await sse.post(body);
      expect(batch.status, body).toBe(400);
      expect(await batch.json(), body).toEqual({
        jsonrpc: '2.0',
        id: null,
        error: {
          code: -32600,
          message:
            'Invalid Request: the HTTP+SSE transport (2024-11-05) carries one JSON-RPC message per POST, not a batch; send each message in its own POST',
        },
      });
    }
    expect((await sse.post(initialize2024(2))).status).toBe(202);
    expect((await sse.answer(2)).result.protocolVersion).toBe('2024-11-05');
    expect((await sse.post(pingOf(3))).status).toBe(202);
    expect(await sse.answer(3)).toEqual({ jsonrpc: '2.0', id: 3, result: {} });
    sse.close();
  });

  it('a Content-Type of application/json with parameters the front door lets through (empty, malformed, unclosed quote) is accepted on /message', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const sse = await sseSession(gw.base, 'everything');
    expect((await sse.post(initialize2024(1), 'application/json;')).status).toBe(202);
    expect((await sse.answer(1)).result.serverInfo.name).toBe('mcp-servers/everything');
    const types = [
      'application/json; charset',
      'application/json; a=b c',
      'application/json; charset="utf-8',
      'Application/JSON; charset=UTF-8',
    ];
    for (const [i, type] of types.entries()) {
      const res = await sse.post(pingOf(10 + i), type);
      expect(res.status, type).toBe(202);
      expect(await sse.answer(10 + i), type).toEqual({ jsonrpc: '2.0', id: 10 + i, result: {} });
    }
    sse.close();
  });

  it('a body on /message nesting deeper than limits.maxJsonDepth → 400 / -32600, as on /mcp/NAME, however deep; nothing reaches the session', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    const sse = await sseSession(gw.base, 'everything');
    let deep: unknown = 'leaf';
    for (let i = 0; i < 64; i++) deep = { down: deep };
    const nested = await sse.post(
      JSON.stringify({ ...JSON.parse(initialize2024(7)), params: { ...JSON.parse(initialize2024(7)).params, deep } }),
    );
    expect(nested.status).toBe(400);
    expect(await nested.json()).toEqual({
      jsonrpc: '2.0',
      id: 7,
      error: { code: -32600, message: 'The body nests deeper than limits.maxJsonDepth=64' },
    });
    const huge = await sse.post('['.repeat(200_000) + ']'.repeat(200_000));
    expect(huge.status).toBe(400);
    expect(await huge.json()).toEqual({
      jsonrpc: '2.0',
      id: null,
      error: { code: -32600, message: 'The body nests deeper than limits.maxJsonDepth=64' },
    });
    // The refused initialize never reached the session: it is still not initialized.
    expect((await sse.post(pingOf(8))).status).toBe(202);
    expect((await sse.answer(8)).error).toMatchObject({ code: -32600, message: expect.stringMatching(/not initialized/) });
    expect((await sse.post(initialize2024(9))).status).toBe(202);
    expect((await sse.answer(9)).result.protocolVersion).toBe('2024-11-05');
    sse.close();
  });

  it('a method the HTTP+SSE endpoints do not serve → 405 / -32601 with Allow: POST on /message and Allow: GET on /sse', async () => {
    const gw = await gateway({ upstreams: { everything: everythingStdio } });
    for (const method of ['GET', 'DELETE', 'PUT']) {
      const res = await fetch(`${gw.base}/mcp/everything/message?sessionId=x`, { method });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow'), method).toBe('POST');
      expect((await res.json()).error, method).toEqual({
        code: -32601,
        message: `${method} is not supported on /mcp/everything/message; the HTTP+SSE transport (2024-11-05) takes the client's messages as POST to the endpoint its SSE stream names`,
      });
    }
    for (const method of ['POST', 'DELETE']) {
      const res = await fetch(`${gw.base}/mcp/everything/sse`, {
        method,
        headers: { 'content-type': 'application/json' },
        body: method === 'POST' ? pingOf(1) : undefined,
      });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow'), method).toBe('GET');
      expect((await res.json()).error, method).toEqual({
        code: -32601,
        message: `${method} is not supported on /mcp/everything/sse; open the HTTP+SSE stream (2024-11-05) with GET, then POST messages to the endpoint it names`,
      });
    }
    // An unknown upstream is still named as such.
    const unknown = await fetch(`${gw.base}/mcp/nope/message`);
    expect(unknown.status).toBe(404);
    expect((await unknown.json()).error.message).toMatch(/Unknown upstream 'nope'/);
    expect(gw.legacy.size).toBe(0);
  });

  it('the per-caller bound refuses another HTTP+SSE stream with 429, saying to close a stream (or DELETE a Streamable HTTP session); closing one makes room', async () => {
    const gw = await gateway({ legacySessions: { maxSessionsPerPrincipal: 1 }, upstreams: { everything: everythingStdio } });
    const first = await sseSession(gw.base, 'everything');
    const refusedSse = await fetch(`${gw.base}/mcp/everything/sse`, { headers: { accept: 'text/event-stream' } });
    const refusedHttp = await fetch(gw.url('everything'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: initialize2024(1),
    });
    for (const res of [refusedSse, refusedHttp]) {
      expect(res.status).toBe(429);
      expect(res.headers.get('retry-after')).toBe('1');
      expect((await res.json()).error).toEqual({
        code: -32603,
        message:
          'This caller holds 1 legacy sessions (legacySessions.maxSessionsPerPrincipal); end one (DELETE with its Mcp-Session-Id, or close its HTTP+SSE stream) or let it go idle (legacySessions.idleMs)',
        data: { upstream: 'everything', reason: 'busy' },
      });
    }
    first.close();
    expect(await eventually(() => gw.legacy.size === 0, 5000)).toBe(true);
    const second = await sseSession(gw.base, 'everything');
    expect(gw.legacy.size).toBe(1);
    second.close();
  });
});
