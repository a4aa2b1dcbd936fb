/**
 * 2026-07-28 upstreams behind the gateway (a v2 SDK server): pass-through for 2026-07-28 clients
 * (the upstream's own requestState inside the gateway's sealed one, no parked state, its tasks,
 * cache hints and -32021), the reverse bridge for legacy clients, and `protocol: "auto"` telling
 * both eras apart, and asking again when an upstream comes back in the other era.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALICE, BOB, listen, rpc, startGateway, TWO_KEYS, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio, startFixtureHttp, startModernHttp } from '../helpers/fixture.js';
import { spawnListening, type SpawnedServer } from '../helpers/processes.js';
import { textOf, v2Client } from '../helpers/v2client.js';

const MODERN = fileURLToPath(new URL('../fixtures/modern-server.ts', import.meta.url));
const ERA_SWITCH = fileURLToPath(new URL('../fixtures/era-switch.ts', import.meta.url));
const MODERN_CONFORMANCE = fileURLToPath(new URL('../fixtures/modern-conformance-server.ts', import.meta.url));
const ODD = 'round-2|name=Ada|  ü "quoted" \\ end ';

const ELICIT = { elicitation: {} };

describe('a 2026-07-28 upstream over Streamable HTTP', () => {
  let srv: SpawnedServer;
  let gw: TestGateway;
  const log = new FixtureLog();
  beforeAll(async () => {
    srv = await spawnListening(['--import', 'tsx', MODERN, 'http'], { FIXTURE_LOG: log.file });
    const url = `http://127.0.0.1:${srv.port}/mcp`;
    gw = await startGateway({
      auth: TWO_KEYS,
      upstreams: {
        modern: { transport: 'streamable-http', url },
        // The same server, given each caller's own bearer token.
        forwarded: { transport: 'streamable-http', url, forwardAuthorization: true },
        // The same server, without sampling relayed.
        nosampling: { transport: 'streamable-http', url, input: { allow: ['elicitation', 'roots'] } },
      },
    });
  });
  afterAll(async () => {
    await gw?.close();
    await srv?.stop();
  });

  it('protocol auto recognizes it; server/discover is the upstream own', async () => {
    expect(await gw.gateway.upstreams.get('modern')!.era()).toBe('modern');
    const d = await rpc(gw.url('modern'), 'server/discover', {}, { headers: ALICE });
    expect(d.body.result).toMatchObject({ resultType: 'complete', supportedVersions: ['2026-07-28'] });
    expect(d.body.result._meta['io.modelcontextprotocol/serverInfo'].name).toBe('modern-fixture');
  });

  it('passes two input rounds through: the upstream gets its own requestState back byte for byte, the client only sees the gateway sealed one', async () => {
    const url = gw.url('modern');
    const call = (extra: Record<string, unknown> = {}, headers = ALICE) =>
      rpc(url, 'tools/call', { name: 'two_round', arguments: { tag: 'pt' }, ...extra }, { caps: ELICIT, headers });
    const r1 = await call();
    expect(r1.body.result).toMatchObject({ resultType: 'input_required', inputRequests: { name: { method: 'elicitation/create' } } });
    expect(r1.body.result.requestState).not.toBe('round-1');
    expect(r1.body.result.requestState.split('.')).toHaveLength(5);
    const r2 = await call({
      requestState: r1.body.result.requestState,
      inputResponses: { name: { action: 'accept', content: { name: 'Ada' } } },
    });
    expect(r2.body.result).toMatchObject({ resultType: 'input_required', inputRequests: { age: { method: 'elicitation/create' } } });
    expect(r2.body.result.requestState).not.toContain('round-2');

    // Another principal presenting Alice's state is refused, and nothing reaches the upstream.
    const callsBefore = log.of('call', 'two_round').length;
    const stolen = await call(
      { requestState: r2.body.result.requestState, inputResponses: { age: { action: 'accept', content: { age: 1 } } } },
      BOB,
    );
    expect(stolen.body.error.code).toBe(-32602);
    expect(log.of('call', 'two_round')).toHaveLength(callsBefore);

    const r3 = await call({
      requestState: r2.body.result.requestState,
      inputResponses: { age: { action: 'accept', content: { age: 36 } } },
    });
    expect(r3.body.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'Ada is 36 (pt)' }] });
    // Single use: the same state again is refused.
    const replay = await call({
      requestState: r2.body.result.requestState,
      inputResponses: { age: { action: 'accept', content: { age: 37 } } },
    });
    expect(replay.body.error.code).toBe(-32602);

    const states = log
      .of('call', 'two_round')
      .filter((e) => e.tag === 'pt')
      .map((e) => e.requestState);
    expect(states).toEqual([null, 'round-1', ODD]);
    // The gateway held nothing between rounds.
    expect(gw.gateway.bridge.parkedCount).toBe(0);
  });

  it('holds back a form asking for a password (declined upstream) and shows the rest', async () => {
    const url = gw.url('modern');
    const r1 = await rpc(url, 'tools/call', { name: 'ask_secret', arguments: {} }, { caps: ELICIT, headers: ALICE });
    expect(Object.keys(r1.body.result.inputRequests)).toEqual(['who']);
    const r2 = await rpc(
      url,
      'tools/call',
      {
        name: 'ask_secret',
        arguments: {},
        requestState: r1.body.result.requestState,
        inputResponses: { who: { action: 'accept', content: { name: 'Ada' } } },
      },
      { caps: ELICIT, headers: ALICE },
    );
    expect(r2.body.result.content[0].text).toBe('login=decline name=Ada');
  });

  it('keeps the upstream cacheScope "public", except where the upstream gets each caller own credentials (forwardAuthorization): "private"', async () => {
    for (const [name, scope] of [
      ['modern', 'public'],
      ['forwarded', 'private'],
    ] as const) {
      const list = await rpc(gw.url(name), 'tools/list', {}, { headers: ALICE });
      expect(list.body.result, name).toMatchObject({ resultType: 'complete', ttlMs: 60_000, cacheScope: scope });
      expect(list.body.result.tools.map((t: { name: string }) => t.name)).toContain('two_round');
      const read = await rpc(gw.url(name), 'resources/read', { uri: 'fixture://public/note' }, { headers: ALICE });
      expect(read.body.result, name).toMatchObject({
        resultType: 'complete',
        ttlMs: 60_000,
        cacheScope: scope,
        contents: [{ text: 'the same for everyone' }],
      });
    }
  });

  it("relays the upstream's task: the client gets the gateway's bound taskId, another principal gets -32602, and tasks/get reaches the upstream with its own taskId (Mcp-Name too)", async () => {
    const url = gw.url('modern');
    const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
    const taskHeaders = (who: Record<string, string>, taskId: string) => ({ ...who, 'mcp-name': taskId });
    const created = await rpc(url, 'tools/call', { name: 'start_task', arguments: {} }, { caps: TASKS, headers: ALICE });
    expect(created.body.result).toMatchObject({ resultType: 'task', status: 'working', ttlMs: 60_000, pollIntervalMs: 100 });
    const upstreamId = log.of('task-created').at(-1)!.taskId as string;
    const shown = created.body.result.taskId as string;
    expect(shown).not.toBe(upstreamId);
    expect(shown.startsWith(`p1.${Buffer.from(upstreamId).toString('base64url')}.`)).toBe(true);

    const asked = log.of('tasks/get').length;
    const bob = await rpc(url, 'tasks/get', { taskId: shown }, { caps: TASKS, headers: taskHeaders(BOB, shown) });
    expect(bob.body.error.code).toBe(-32602);
    // The upstream's own id, or a bound id with its binding altered, is no id of Alice's either.
    for (const forged of [upstreamId, `${shown.slice(0, -2)}xx`]) {
      expect((await rpc(url, 'tasks/get', { taskId: forged }, { caps: TASKS, headers: taskHeaders(ALICE, forged) })).body.error.code).toBe(
        -32602,
      );
    }
    expect(log.of('tasks/get')).toHaveLength(asked);

    const got = await rpc(url, 'tasks/get', { taskId: shown }, { caps: TASKS, headers: taskHeaders(ALICE, shown) });
    expect(got.body.result).toMatchObject({
      resultType: 'complete',
      taskId: shown,
      status: 'completed',
      result: { content: [{ type: 'text', text: `task ${upstreamId} done` }] },
    });
    expect(log.of('tasks/get').slice(asked)).toEqual([expect.objectContaining({ taskId: upstreamId, mcpNameHeader: upstreamId })]);

    // A client without the extension gets the plain result.
    const plain = await rpc(url, 'tools/call', { name: 'start_task', arguments: {} }, { headers: ALICE });
    expect(plain.body.result).toMatchObject({ resultType: 'complete', content: [{ text: 'done at once (no task)' }] });
  });

  it("answers the upstream's -32021 as HTTP 400 / -32021 with its requiredCapabilities; when input.allow withholds that capability, -32603 saying so", async () => {
    const call = (upstream: string, caps: Record<string, unknown>) =>
      rpc(gw.url(upstream), 'tools/call', { name: 'ask_sample', arguments: {} }, { caps, headers: ALICE });
    const missing = await call('modern', ELICIT);
    expect(missing.status).toBe(400);
    expect(missing.body.error).toMatchObject({ code: -32021, data: { requiredCapabilities: { sampling: expect.any(Object) } } });
    // Declared: the upstream asks, in an input_required round.
    const asked = await call('modern', { sampling: {} });
    expect(asked.body.result).toMatchObject({
      resultType: 'input_required',
      inputRequests: { word: { method: 'sampling/createMessage' } },
    });
    // Declared, but this upstream does not get sampling relayed: the client could not fix that by declaring it.
    const withheld = await call('nosampling', { sampling: {} });
    expect(withheld.status).toBe(200);
    expect(withheld.body.error).toMatchObject({
      code: -32603,
      message: expect.stringContaining('input.allow'),
      data: { upstream: 'nosampling', reason: 'protocol' },
    });
  });

  it('streams the upstream progress on the request SSE stream', async () => {
    const res = await fetch(gw.url('modern'), {
      method: 'POST',
      headers: {
        ...ALICE,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': 'tools/call',
        'mcp-name': 'slow',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 7,
        method: 'tools/call',
        params: {
          name: 'slow',
          arguments: { steps: 3, ms: 50 },
          _meta: {
            'io.modelcontextprotocol/protocolVersion': '2026-07-28',
            'io.modelcontextprotocol/clientCapabilities': {},
            progressToken: 'my-token',
          },
        },
      }),
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events = (await res.text())
      .split('\n\n')
      .filter((b) => b.includes('data:'))
      .map((b) =>
        JSON.parse(
          b
            .split('\n')
            .find((l) => l.startsWith('data:'))!
            .slice(5),
        ),
      );
    expect(events.filter((e) => e.method === 'notifications/progress').map((e) => [e.params.progressToken, e.params.progress])).toEqual([
      ['my-token', 1],
      ['my-token', 2],
      ['my-token', 3],
    ]);
    expect(events.at(-1)).toMatchObject({ id: 7, result: { content: [{ text: 'done in 3 steps' }] } });
  });

  it('a legacy (v1 SDK) client completes the same tool through the reverse bridge, its own handler asked twice', async () => {
    const asked: string[] = [];
    const client = new Client({ name: 'legacy-on-modern', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async (r) => {
      asked.push(String(r.params.message));
      return asked.length === 1 ? { action: 'accept', content: { name: 'Grace' } } : { action: 'accept', content: { age: 85 } };
    });
    const logs: unknown[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logs.push(n.params));
    const transport = new StreamableHTTPClientTransport(new URL(gw.url('modern')), { requestInit: { headers: ALICE } });
    await client.connect(transport);
    expect(client.getServerVersion()?.name).toBe('modern-fixture');
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(expect.arrayContaining(['two_round', 'slow']));
    const result = await client.callTool({ name: 'two_round', arguments: { tag: 'legacy' } });
    expect(textOf(result as never)).toBe('Grace is 85 (legacy)');
    expect(asked).toEqual(['What is your name?', 'How old is Grace?']);
    expect(
      log
        .of('call', 'two_round')
        .filter((e) => e.tag === 'legacy')
        .map((e) => e.requestState),
    ).toEqual([null, 'round-1', ODD.replace('Ada', 'Grace')]);

    // A declined elicitation is an answer, not an error.
    asked.length = 0;
    client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'decline' }));
    const declined = await client.callTool({ name: 'two_round', arguments: { tag: 'declined' } });
    expect(textOf(declined as never)).toBe('no name (decline)');

    // Progress and log messages reach the legacy client.
    await client.setLoggingLevel('info');
    const progress: number[] = [];
    await client.callTool({ name: 'slow', arguments: { steps: 2, ms: 30 } }, undefined, {
      onprogress: (p) => void progress.push(p.progress),
    });
    expect(progress).toEqual([1, 2]);
    expect(logs.length).toBeGreaterThanOrEqual(2);
    await transport.terminateSession();
    await client.close();
  });
});

describe('the reverse bridge (a v1 SDK client in front of the 2026-07-28 upstream): outcomes and capabilities', () => {
  let srv: Awaited<ReturnType<typeof startModernHttp>>;
  let gw: TestGateway;
  const log = new FixtureLog();
  beforeAll(async () => {
    srv = await startModernHttp(log);
    gw = await startGateway({
      upstreams: { modern: srv.config, nosampling: { ...srv.config, input: { allow: ['elicitation', 'roots'] } } },
    });
  });
  afterAll(async () => {
    await gw?.close();
    await srv?.stop();
  });

  /** A v1 client with `capabilities`; `bodies` collects the text of every response the gateway sent it. */
  async function legacyClient(upstream: string, capabilities: Record<string, unknown>) {
    const bodies: string[] = [];
    const client = new Client({ name: 'legacy-outcomes', version: '1.0.0' }, { capabilities });
    const fetchAndKeep: typeof fetch = async (input, init) => {
      const res = await fetch(input, init);
      void res
        .clone()
        .text()
        .then(
          (t) => void bodies.push(t),
          () => {},
        );
      return res;
    };
    const transport = new StreamableHTTPClientTransport(new URL(gw.url(upstream)), { fetch: fetchAndKeep });
    await client.connect(transport);
    return { client, transport, bodies };
  }

  it('a cancelled elicitation is an outcome the tool sees, not an error', async () => {
    const { client, transport } = await legacyClient('modern', { elicitation: {} });
    client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'cancel' }));
    expect(textOf((await client.callTool({ name: 'two_round', arguments: { tag: 'cancel' } })) as never)).toBe('no name (cancel)');
    await transport.terminateSession();
    await client.close();
  });

  it('an input the client did not declare is not asked: the call gets -32021 naming it, and the client sees no request', async () => {
    const { client, transport, bodies } = await legacyClient('modern', { elicitation: {} });
    const before = log.of('call', 'ask_sample').length;
    await expect(client.callTool({ name: 'ask_sample', arguments: {} })).rejects.toMatchObject({
      code: -32021,
      message: expect.stringContaining("this session's initialize capabilities do not declare"),
      data: { requiredCapabilities: { sampling: expect.any(Object) } },
    });
    // The upstream was asked once, and no retry with answers followed.
    expect(log.of('call', 'ask_sample').slice(before)).toEqual([expect.objectContaining({ answered: 'missing' })]);
    expect(bodies.join('\n')).not.toContain('sampling/createMessage');
    await transport.terminateSession();
    await client.close();
  });

  it('the initialize result offers the list changes the upstream offers; without its resources.subscribe, resources/subscribe gets -32601', async () => {
    const { client, transport } = await legacyClient('modern', {});
    const caps = client.getServerCapabilities()!;
    expect(caps.tools).toEqual({ listChanged: true });
    expect(caps.resources).toEqual({ listChanged: true });
    await expect(client.subscribeResource({ uri: 'fixture://public/note' })).rejects.toMatchObject({
      code: -32601,
      message: expect.stringContaining('does not declare resources.subscribe'),
    });
    await transport.terminateSession();
    await client.close();
  });

  it('an input the client declared but input.allow withholds gets -32603 naming input.allow', async () => {
    const { client, transport, bodies } = await legacyClient('nosampling', { elicitation: {}, sampling: {} });
    client.setRequestHandler(CreateMessageRequestSchema, async () => ({
      role: 'assistant',
      model: 'm',
      content: { type: 'text', text: 'never' },
    }));
    await expect(client.callTool({ name: 'ask_sample', arguments: {} })).rejects.toMatchObject({
      code: -32603,
      message: expect.stringContaining('input.allow'),
      data: { upstream: 'nosampling', reason: 'protocol' },
    });
    expect(bodies.join('\n')).not.toContain('sampling/createMessage');
    await transport.terminateSession();
    await client.close();
  });
});

describe('protocol auto over stdio, both eras behind one gateway', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        modern: { transport: 'stdio', command: process.execPath, args: ['--import', 'tsx', MODERN, 'stdio'] },
        legacy: fixtureStdio(),
      },
    });
  });
  afterAll(() => gw?.close());

  it('picks 2026-07-28 for the v2 server and legacy for the v1 server, and serves a 2026 client on both', async () => {
    expect(await gw.gateway.upstreams.get('modern')!.era()).toBe('modern');
    expect(await gw.gateway.upstreams.get('legacy')!.era()).toBe('legacy');
    const { client, record } = await v2Client(gw.url('modern'), {
      elicit: (p) =>
        String(p.message).includes('name') ? { action: 'accept', content: { name: 'Lin' } } : { action: 'accept', content: { age: 30 } },
    });
    expect(textOf((await client.callTool({ name: 'two_round', arguments: {} })) as never)).toBe('Lin is 30');
    expect(record.elicitation).toHaveLength(2);
    await client.close();
    const legacy = await v2Client(gw.url('legacy'), { elicit: () => ({ action: 'accept', content: { name: 'Lin' } }) });
    expect(textOf((await legacy.client.callTool({ name: 'ask_name', arguments: {} })) as never)).toBe('Hello, Lin!');
    await legacy.client.close();
  });
});

describe('protocol auto asks again after a failure, and serves the era that came back', () => {
  const names = (r: { body: any }) => (r.body.result?.tools ?? []).map((t: { name: string }) => t.name) as string[];

  it('over stdio: after the child crashed, a server that comes back in the other era is served in that era, both ways', async () => {
    const eraFile = join(mkdtempSync(join(tmpdir(), 'era-switch-')), 'era');
    writeFileSync(eraFile, 'legacy');
    const gw = await startGateway({
      upstreams: {
        u: {
          transport: 'stdio',
          command: process.execPath,
          args: ['--import', 'tsx', ERA_SWITCH, 'stdio'],
          env: { FIXTURE_ERA_FILE: eraFile },
        },
      },
    });
    try {
      const url = gw.url('u');
      const up = gw.gateway.upstreams.get('u')!;
      expect(names(await rpc(url, 'tools/list'))).toContain('ask_name');
      expect(up.knownEra).toBe('legacy');

      // Upgraded: the next start runs the 2026-07-28 server.
      writeFileSync(eraFile, 'modern');
      expect((await rpc(url, 'tools/call', { name: 'crash', arguments: {} })).body.error.data.reason).toBe('crashed');
      const modern = await rpc(url, 'tools/call', { name: 'two_round', arguments: {} }, { caps: ELICIT });
      expect(modern.body.result).toMatchObject({ resultType: 'input_required', inputRequests: { name: { method: 'elicitation/create' } } });
      expect(up.knownEra).toBe('modern');
      // Pass-through: nothing parked.
      expect(gw.gateway.bridge.parkedCount).toBe(0);

      // Rolled back: the next start runs the legacy server again. This time a legacy client's call
      // (through the reverse bridge) sees the crash.
      writeFileSync(eraFile, 'legacy');
      const client = new Client({ name: 'legacy-sees-crash', version: '1.0.0' }, { capabilities: {} });
      const transport = new StreamableHTTPClientTransport(new URL(url));
      await client.connect(transport);
      await expect(client.callTool({ name: 'crash', arguments: {} })).rejects.toMatchObject({ code: -32603, data: { reason: 'crashed' } });
      await transport.terminateSession();
      await client.close();
      const legacy = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT });
      expect(legacy.body.result).toMatchObject({
        resultType: 'input_required',
        inputRequests: { 'elicitation-1': { method: 'elicitation/create' } },
      });
      expect(up.knownEra).toBe('legacy');
      expect(gw.gateway.bridge.parkedCount).toBe(1);
    } finally {
      await gw.close();
    }
  });

  it('over HTTP: a server replaced on the same port by one of the other era is asked again after at most one failed request, both ways', async () => {
    let srv: SpawnedServer & { config: Record<string, unknown> } = await startFixtureHttp('http');
    const port = String(srv.port);
    // The list cache off: every tools/list reaches whichever server answers on the port.
    const gw = await startGateway({ upstreams: { u: { ...srv.config, cache: { maxEntries: 0 } } } });
    /** tools/list until it lists `tool`, at most twice: the failed answers before. */
    const failuresBefore = async (tool: string) => {
      const failed: any[] = [];
      for (let i = 0; i < 2; i++) {
        const r = await rpc(gw.url('u'), 'tools/list');
        if (names(r).includes(tool)) return failed;
        failed.push(r.body.error ?? r.body.result);
      }
      throw new Error(`${tool} not listed after two requests: ${JSON.stringify(failed)}`);
    };
    try {
      const up = gw.gateway.upstreams.get('u')!;
      expect(await failuresBefore('ask_name')).toEqual([]);
      expect(up.knownEra).toBe('legacy');

      // Replaced while idle by a 2026-07-28 server that refuses legacy requests: the pooled session is gone.
      await srv.stop();
      srv = await startModernHttp(undefined, { PORT: port, FIXTURE_LEGACY: 'reject' });
      expect((await failuresBefore('two_round')).length).toBeLessThanOrEqual(1);
      expect(up.knownEra).toBe('modern');

      // Replaced while idle by the legacy server: its refusal of a request without its session (HTTP 400) is such a failure.
      await srv.stop();
      srv = await startFixtureHttp('http', undefined, { PORT: port });
      expect(await failuresBefore('ask_name')).toEqual([
        expect.objectContaining({
          code: -32603,
          message: expect.stringContaining('legacy server that wants a session'),
          data: { upstream: 'u', reason: 'protocol' },
        }),
      ]);
      expect(up.knownEra).toBe('legacy');

      // Gone for a while (a request fails: unreachable), then back as the 2026-07-28 server.
      await srv.stop();
      expect((await rpc(gw.url('u'), 'tools/list')).body.error).toMatchObject({ code: -32603, data: { reason: 'unreachable' } });
      srv = await startModernHttp(undefined, { PORT: port, FIXTURE_LEGACY: 'reject' });
      expect(await failuresBefore('two_round')).toEqual([]);
      expect(up.knownEra).toBe('modern');
    } finally {
      await gw.close();
      await srv.stop();
    }
  });
});

describe('subscriptions/listen relayed to a 2026-07-28 upstream over stdio', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        modern: {
          transport: 'stdio',
          command: process.execPath,
          args: ['--import', 'tsx', MODERN_CONFORMANCE, 'stdio'],
          protocol: '2026-07-28',
        },
      },
    });
  });
  afterAll(() => gw?.close());

  it('delivers the list changes a call makes while the stream is open (one child carries both requests)', async () => {
    const url = gw.url('modern');
    const stream = await listen(url, { toolsListChanged: true, promptsListChanged: true });
    try {
      const ack = await stream.next();
      expect(ack).toMatchObject({
        method: 'notifications/subscriptions/acknowledged',
        params: { notifications: { toolsListChanged: true, promptsListChanged: true } },
      });
      const id = ack.params._meta['io.modelcontextprotocol/subscriptionId'];
      expect((await rpc(url, 'tools/call', { name: 'test_trigger_tool_change', arguments: {} })).body.result.content[0].text).toBe(
        'tool list changed',
      );
      expect(await stream.next()).toMatchObject({
        method: 'notifications/tools/list_changed',
        params: { _meta: { 'io.modelcontextprotocol/subscriptionId': id } },
      });
      await rpc(url, 'tools/call', { name: 'test_trigger_prompt_change', arguments: {} });
      expect(await stream.next()).toMatchObject({ method: 'notifications/prompts/list_changed' });
      const tools = await rpc(url, 'tools/list', {});
      expect(tools.body.result.tools.map((t: { name: string }) => t.name)).toContain('test_dynamic_tool');
    } finally {
      stream.close();
    }
  });

  it('delivers resource updates to a stream subscribed to the resource', async () => {
    const url = gw.url('modern');
    const stream = await listen(url, { resourceSubscriptions: ['test://watched-resource'] });
    try {
      expect(await stream.next()).toMatchObject({
        method: 'notifications/subscriptions/acknowledged',
        params: { notifications: { resourceSubscriptions: ['test://watched-resource'] } },
      });
      await rpc(url, 'tools/call', { name: 'test_trigger_resource_update', arguments: {} });
      expect(await stream.next()).toMatchObject({ method: 'notifications/resources/updated', params: { uri: 'test://watched-resource' } });
    } finally {
      stream.close();
    }
  });
});
