/**
 * The federated endpoint `POST /mcp` in front of several upstreams at once: server-everything and
 * the legacy fixture (both legacy, over stdio), a 2026-07-28 upstream beside a legacy one, the
 * conformance fixture for subscriptions, two upstreams whose names collide, and two replicas
 * sharing Redis. 2026-07-28 clients (raw and the v2 SDK) and legacy clients (the v1 SDK) on /mcp.
 * Tool allow and deny lists on both endpoints and in legacy client sessions.
 */
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conformanceUpstream, eventually, FixtureLog, fixtureStdio, modernStdio, startFixtureHttp } from '../helpers/fixture.js';
import { everythingStdio, listen, memoryLogger, rpc, startGateway, type ListenStream, type TestGateway } from '../helpers/gateway.js';
import { spawnListening, type SpawnedServer } from '../helpers/processes.js';
import { startCli, type CliGateway } from '../helpers/cli.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import { textOf, v2Client } from '../helpers/v2client.js';
import { scaled } from '../helpers/budget.js';

const MODERN = fileURLToPath(new URL('../fixtures/modern-server.ts', import.meta.url));
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
const ELICIT = { elicitation: {} };
const SUB = 'io.modelcontextprotocol/subscriptionId';

/** Every item of a list method on `url`, page by page, and the number of pages. */
async function listAll(url: string, method: string, field: string): Promise<{ items: any[]; pages: number; cursors: string[] }> {
  const items: any[] = [];
  const cursors: string[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const r = await rpc(url, method, cursor === undefined ? {} : { cursor });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body.result, JSON.stringify(r.body)).toBeDefined();
    items.push(...r.body.result[field]);
    pages++;
    cursor = r.body.result.nextCursor;
    if (cursor !== undefined) cursors.push(cursor);
  } while (cursor !== undefined && pages < 50);
  return { items, pages, cursors };
}

async function pollTask(url: string, taskId: string, done: (t: any) => boolean, timeoutMs = 15_000): Promise<any> {
  const end = Date.now() + timeoutMs;
  let last: any;
  while (Date.now() < end) {
    const r = await rpc(url, 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    last = r.body.result;
    if (done(last)) return last;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`task ${taskId} did not get there; last: ${JSON.stringify(last)}`);
}

describe('federation of server-everything and the legacy fixture on POST /mcp', () => {
  let gw: TestGateway;
  let fed: string;
  const log = new FixtureLog();

  beforeAll(async () => {
    gw = await startGateway({
      federation: { enabled: true },
      upstreams: {
        everything: { ...everythingStdio, tools: { deny: ['get-env', 'trigger-url-*'] } },
        fixture: {
          ...fixtureStdio(log, { FIXTURE_PAGE_SIZE: '4' }),
          tools: { deny: ['crash'] },
          tasks: { tools: { slow: { taskAfterMs: 0 } } },
        },
      },
    });
    fed = `${gw.base}/mcp`;
  });
  afterAll(() => gw?.close());

  it('server/discover merges the capabilities and gives each upstream its section of instructions', async () => {
    const r = await rpc(fed, 'server/discover');
    expect(r.status).toBe(200);
    const d = r.body.result;
    expect(d).toMatchObject({ resultType: 'complete', supportedVersions: ['2026-07-28'] });
    expect(d.capabilities.tools).toEqual({ listChanged: true });
    expect(d.capabilities.prompts).toEqual({ listChanged: true });
    // server-everything declares resources.subscribe; the fixture does not: the union has it.
    expect(d.capabilities.resources).toEqual({ subscribe: true, listChanged: true });
    expect(d.capabilities.completions).toEqual({});
    expect(d.capabilities.extensions).toEqual({ 'io.modelcontextprotocol/tasks': {} });
    expect(d.instructions).toMatch(/^## everything\n\nIts tools and prompts are named here with the prefix `everything_`/);
    expect(d._meta['io.modelcontextprotocol/serverInfo'].name).toBe('mrtr-gateway');
  });

  it('tools/list: both upstreams merged, names prefixed, paged with a federated cursor; denied tools absent', async () => {
    const direct = await listAll(gw.url('fixture'), 'tools/list', 'tools');
    // The fixture pages by 4 on its own endpoint too.
    expect(direct.pages).toBeGreaterThan(2);
    const { items, pages, cursors } = await listAll(fed, 'tools/list', 'tools');
    const names = items.map((t) => t.name);
    expect(pages).toBe(direct.pages);
    expect(new Set(names).size).toBe(names.length);
    expect(names.filter((n) => n.startsWith('fixture_')).sort()).toEqual(direct.items.map((t) => `fixture_${t.name}`).sort());
    expect(names).toEqual(
      expect.arrayContaining([
        'everything_echo',
        'everything_get-sum',
        'everything_trigger-long-running-operation',
        'fixture_ask_name',
        'fixture_slow',
      ]),
    );
    expect(names.every((n) => n.startsWith('everything_') || n.startsWith('fixture_'))).toBe(true);
    // Denied on each upstream: left out of the list, on both endpoints.
    expect(names).not.toContain('everything_get-env');
    expect(names).not.toContain('everything_trigger-url-elicitation');
    expect(names).not.toContain('fixture_crash');
    expect(direct.items.map((t) => t.name)).not.toContain('crash');
    // The first page carries everything's whole (unpaged) list and the fixture's first page.
    const first = await rpc(fed, 'tools/list');
    expect(first.body.result.tools.filter((t: any) => t.name.startsWith('fixture_'))).toHaveLength(4);
    expect(first.body.result.tools.some((t: any) => t.name === 'everything_echo')).toBe(true);
    // The cursor is opaque: it is not the fixture's own cursor.
    expect(cursors.every((c) => !/^\d+$/.test(c))).toBe(true);
    const bad = await rpc(fed, 'tools/list', { cursor: '4' });
    expect(bad.body.error.code).toBe(-32602);
    const wrongMethod = await rpc(fed, 'prompts/list', { cursor: cursors[0] });
    expect(wrongMethod.body.error.code).toBe(-32602);
  });

  it('an eliciting tool of each upstream through input_required rounds, with the official v2 client on /mcp', async () => {
    const { client, record } = await v2Client(fed, {
      elicit: (p) =>
        String(p.message).includes('Please provide inputs')
          ? { action: 'accept', content: { name: 'Ada Lovelace', check: true, email: 'ada@example.com', integer: 7 } }
          : { action: 'accept', content: { name: 'Grace' } },
    });
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const a = await client.callTool({ name: 'everything_trigger-elicitation-request', arguments: {} });
      expect(textOf(a as never)).toContain('Ada Lovelace');
      const b = await client.callTool({ name: 'fixture_ask_name', arguments: { greeting: 'Hi' } });
      expect(textOf(b as never)).toBe('Hi, Grace!');
      expect(record.elicitation).toHaveLength(2);
      // One elicitation round per call. server-everything also asks `roots/list` 350 ms after its
      // session started: a call still running then (a loaded machine) carries it as a round of its own.
      const methods = record.results
        .filter((r) => r.resultType === 'input_required')
        .map((r) => Object.values(r.inputRequests as Record<string, { method: string }>).map((q) => q.method));
      expect(methods.filter((m) => m.includes('elicitation/create')).map((m) => m.filter((x) => x === 'elicitation/create'))).toEqual([
        ['elicitation/create'],
        ['elicitation/create'],
      ]);
      expect(
        methods
          .flat()
          .filter((x) => x !== 'elicitation/create')
          .every((x) => x === 'roots/list'),
      ).toBe(true);
      expect(record.roots).toBeLessThanOrEqual(1);
      // The fixture saw its own tool name.
      expect(log.of('call', 'ask_name').length).toBeGreaterThan(0);
    } finally {
      await client.close();
    }
  });

  it('raw rounds: input_required from each upstream, completed by the retry with inputResponses and requestState', async () => {
    const cases = [
      {
        name: 'everything_trigger-elicitation-request',
        args: {},
        answer: { name: 'Ada Lovelace', check: true, email: 'ada@example.com', integer: 7 },
        expect: 'Ada Lovelace',
      },
      { name: 'fixture_ask_name', args: { greeting: 'Howdy' }, answer: { name: 'Barbara' }, expect: 'Howdy, Barbara!' },
    ];
    for (const c of cases) {
      const first = await rpc(fed, 'tools/call', { name: c.name, arguments: c.args }, { caps: ELICIT });
      expect(first.body.result, JSON.stringify(first.body)).toMatchObject({ resultType: 'input_required' });
      const requests = Object.entries(first.body.result.inputRequests as Record<string, { method: string }>);
      expect(requests).toHaveLength(1);
      expect(requests[0]![1].method).toBe('elicitation/create');
      const state = first.body.result.requestState;
      expect(typeof state).toBe('string');
      const retry = await rpc(
        fed,
        'tools/call',
        {
          name: c.name,
          arguments: c.args,
          inputResponses: { [requests[0]![0]]: { action: 'accept', content: c.answer } },
          requestState: state,
        },
        { caps: ELICIT },
      );
      expect(retry.body.result, JSON.stringify(retry.body)).toMatchObject({ resultType: 'complete' });
      expect(JSON.stringify(retry.body.result.content)).toContain(c.expect);
      // Single use: the same state again is refused.
      const replay = await rpc(
        fed,
        'tools/call',
        { name: c.name, arguments: c.args, inputResponses: {}, requestState: state },
        { caps: ELICIT },
      );
      expect(replay.body.error?.code).toBe(-32602);
    }
  });

  it('a denied tool is refused like an unknown one, on /mcp and on /mcp/NAME, and nothing reaches the upstream', async () => {
    const callsBefore = log.events().length;
    for (const [url, name] of [
      [fed, 'everything_get-env'],
      [fed, 'fixture_crash'],
      [gw.url('everything'), 'get-env'],
      [gw.url('fixture'), 'crash'],
    ] as const) {
      const r = await rpc(url, 'tools/call', { name, arguments: {} });
      expect(r.body.error, `${url} ${name}`).toEqual({ code: -32602, message: `Unknown tool: ${name}` });
    }
    const unknown = await rpc(fed, 'tools/call', { name: 'nobody_echo', arguments: {} });
    expect(unknown.body.error).toEqual({ code: -32602, message: 'Unknown tool: nobody_echo' });
    expect(
      log
        .events()
        .slice(callsBefore)
        .filter((e) => e.event === 'call'),
    ).toEqual([]);
    // The allowed tools of the same upstream still work.
    const echo = await rpc(fed, 'tools/call', { name: 'everything_echo', arguments: { message: 'fleet' } });
    expect(echo.body.result.content[0].text).toBe('Echo: fleet');
  });

  it('a legacy client session on /mcp/fixture gets the same tool policy', async () => {
    const client = new Client({ name: 'legacy-client', version: '1.0.0' }, { capabilities: {} });
    await client.connect(new StreamableHTTPClientTransport(new URL(gw.url('fixture'))));
    try {
      const names: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor === undefined ? {} : { cursor });
        names.push(...page.tools.map((t) => t.name));
        cursor = page.nextCursor;
      } while (cursor);
      expect(names).toContain('ask_name');
      expect(names).not.toContain('crash');
      await expect(client.callTool({ name: 'crash', arguments: {} })).rejects.toMatchObject({
        code: -32602,
        message: expect.stringContaining('Unknown tool: crash'),
      });
      const echo = await client.callTool({ name: 'echo_after_ask', arguments: { tag: 'x' } }).catch((e) => e);
      // Not denied: it reaches the upstream (which asks for input this client did not declare).
      expect(echo.message ?? '').not.toContain('Unknown tool');
    } finally {
      await client.close();
    }
  });

  it('a requestState of one upstream presented on the other upstream tool is -32602; it still completes its own call', async () => {
    const r1 = await rpc(fed, 'tools/call', { name: 'fixture_ask_name', arguments: { greeting: 'Hey' } }, { caps: ELICIT });
    expect(r1.body.result.resultType).toBe('input_required');
    const state = r1.body.result.requestState;
    const key = Object.keys(r1.body.result.inputRequests)[0]!;
    const answers = { [key]: { action: 'accept', content: { name: 'Linus' } } };
    const foreign = await rpc(
      fed,
      'tools/call',
      { name: 'everything_echo', arguments: { greeting: 'Hey' }, requestState: state, inputResponses: answers },
      { caps: ELICIT },
    );
    expect(foreign.body.error.code).toBe(-32602);
    const own = await rpc(
      fed,
      'tools/call',
      { name: 'fixture_ask_name', arguments: { greeting: 'Hey' }, requestState: state, inputResponses: answers },
      { caps: ELICIT },
    );
    expect(own.body.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'Hey, Linus!' }] });
  });

  it('Mcp-Name is checked against the prefixed name the client sent', async () => {
    const r = await rpc(fed, 'tools/call', { name: 'everything_echo', arguments: { message: 'x' } }, { headers: { 'mcp-name': 'echo' } });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe(-32020);
  });

  it('resources/read is routed by URI: listed URIs, templates never listed before, unknown URIs', async () => {
    const { items } = await listAll(fed, 'resources/list', 'resources');
    const doc = items.find((r) => String(r.uri).startsWith('demo://resource/static/document/'));
    expect(doc).toBeDefined();
    expect(items.some((r) => r.uri === 'fixture://notes/secret')).toBe(true);
    const a = await rpc(fed, 'resources/read', { uri: doc.uri });
    expect(a.body.result.contents[0].uri).toBe(doc.uri);
    // A URI of a template the client never listed: the federation lists the templates itself.
    const b = await rpc(fed, 'resources/read', { uri: 'fixture://plain/7' });
    expect(b.body.result.contents[0].text).toBe('note 7');
    const c = await rpc(fed, 'resources/read', { uri: 'demo://resource/dynamic/text/3' });
    expect(c.body.result.contents[0].uri).toBe('demo://resource/dynamic/text/3');
    const unknown = await rpc(fed, 'resources/read', { uri: 'nowhere://x' });
    expect(unknown.body.error.code).toBe(-32602);
    expect(unknown.body.error.message).toContain("'everything'");
    expect(unknown.body.error.data).toEqual({ uri: 'nowhere://x', candidates: ['everything', 'fixture'] });
    // Templates merged too, URIs unchanged.
    const templates = await listAll(fed, 'resources/templates/list', 'resourceTemplates');
    expect(templates.items.map((t) => t.uriTemplate)).toEqual(
      expect.arrayContaining(['fixture://plain/{id}', 'demo://resource/dynamic/text/{resourceId}']),
    );
  });

  it('prompts/get by prefixed name on each upstream (the fixture prompt elicits)', async () => {
    const list = await listAll(fed, 'prompts/list', 'prompts');
    expect(list.items.map((p) => p.name)).toEqual(expect.arrayContaining(['everything_simple-prompt', 'fixture_greeting_prompt']));
    const simple = await rpc(fed, 'prompts/get', { name: 'everything_simple-prompt' });
    expect(simple.body.result.messages.length).toBeGreaterThan(0);
    const { client } = await v2Client(fed, { elicit: () => ({ action: 'accept', content: { name: 'Ada' } }) });
    try {
      const p = await client.getPrompt({ name: 'fixture_greeting_prompt', arguments: { style: 'warm' } });
      expect((p.messages[0]!.content as { text: string }).text).toBe('Greet Ada in a warm way');
    } finally {
      await client.close();
    }
    const unknown = await rpc(fed, 'prompts/get', { name: 'fixture_nope' });
    expect(unknown.body.error.code).toBe(-32602);
  });

  it('completion/complete: a prompt argument by prefixed prompt name, a template argument by its URI template', async () => {
    const p = await rpc(fed, 'completion/complete', {
      ref: { type: 'ref/prompt', name: 'everything_completable-prompt' },
      argument: { name: 'department', value: 'E' },
    });
    expect(p.body.result.completion.values).toEqual(['Engineering']);
    const t = await rpc(fed, 'completion/complete', {
      ref: { type: 'ref/resource', uri: 'demo://resource/dynamic/text/{resourceId}' },
      argument: { name: 'resourceId', value: '1' },
    });
    expect(t.body.result.completion.values.length).toBeGreaterThan(0);
  });

  it('a task on the fixture: created on /mcp, followed and finished through tasks/get on /mcp, and on a listen stream', async () => {
    const created = await rpc(fed, 'tools/call', { name: 'fixture_slow', arguments: { ms: 1500, steps: 3 } }, { caps: TASKS });
    expect(created.body.result).toMatchObject({ resultType: 'task', status: 'working' });
    const taskId = created.body.result.taskId;
    const stream = await listen(fed, { taskIds: [taskId, 'not-a-task'] }, { caps: TASKS, id: 'fed-tasks' });
    try {
      expect(await stream.next()).toMatchObject({
        method: 'notifications/subscriptions/acknowledged',
        params: { notifications: { taskIds: [taskId] } },
      });
      const done = await pollTask(fed, taskId, (t) => t.status === 'completed');
      expect(done.result.content[0].text).toBe('slept 1500ms');
      // The listen stream saw the task end, then ended itself.
      const end = Date.now() + 5000;
      while (!stream.messages.some((m) => m.id === 'fed-tasks') && Date.now() < end) await stream.next(500);
      const notes = stream.messages.filter((m) => m.method === 'notifications/tasks');
      expect(notes.at(-1).params).toMatchObject({ taskId, status: 'completed', _meta: { [SUB]: 'fed-tasks' } });
      expect(stream.messages.at(-1)).toEqual({
        jsonrpc: '2.0',
        id: 'fed-tasks',
        result: { resultType: 'complete', _meta: { [SUB]: 'fed-tasks' } },
      });
    } finally {
      stream.close();
    }
    const noExt = await rpc(fed, 'tasks/get', { taskId }, { headers: { 'mcp-name': taskId } });
    expect(noExt.status).toBe(400);
    expect(noExt.body.error.code).toBe(-32021);
    const unknown = await rpc(
      fed,
      'tasks/get',
      { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' },
      { caps: TASKS, headers: { 'mcp-name': 'AAAAAAAAAAAAAAAAAAAAAA' } },
    );
    expect(unknown.body.error.code).toBe(-32602);
  });

  it('a legacy client (initialize) on /mcp: merged and prefixed lists, eliciting calls of both upstreams, the tool policy', async () => {
    const client = new Client({ name: 'legacy-on-fed', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    const asked: string[] = [];
    client.setRequestHandler(ElicitRequestSchema, async (r) => {
      asked.push(r.params.message);
      return r.params.message.includes('Please provide inputs')
        ? { action: 'accept', content: { name: 'Ada Lovelace', check: true, email: 'ada@example.com', integer: 7 } }
        : { action: 'accept', content: { name: 'Grace' } };
    });
    const transport = new StreamableHTTPClientTransport(new URL(fed));
    await client.connect(transport);
    try {
      expect(transport.sessionId).toBeTruthy();
      expect(client.getServerCapabilities()).toMatchObject({ tools: {}, prompts: {}, resources: {}, completions: {} });
      expect(client.getInstructions()).toMatch(/^## everything/);
      const names: string[] = [];
      let cursor: string | undefined;
      do {
        const page = await client.listTools(cursor === undefined ? {} : { cursor });
        names.push(...page.tools.map((t) => t.name));
        cursor = page.nextCursor;
      } while (cursor);
      expect(names).toEqual(expect.arrayContaining(['everything_echo', 'fixture_ask_name']));
      expect(names).not.toContain('everything_get-env');
      expect(names).not.toContain('fixture_crash');
      const a = await client.callTool({ name: 'fixture_ask_name', arguments: { greeting: 'Yo' } });
      expect((a.content as { text: string }[])[0]!.text).toBe('Yo, Grace!');
      const b = await client.callTool({ name: 'everything_trigger-elicitation-request', arguments: {} });
      expect(JSON.stringify(b.content)).toContain('Ada Lovelace');
      expect(asked).toHaveLength(2);
      await expect(client.callTool({ name: 'everything_get-env', arguments: {} })).rejects.toMatchObject({
        code: -32602,
        message: expect.stringContaining('Unknown tool: everything_get-env'),
      });
      const progress: number[] = [];
      const slow = await client.callTool({ name: 'fixture_slow', arguments: { ms: 300, steps: 3 } }, undefined, {
        onprogress: (p) => progress.push(p.progress),
      });
      expect((slow.content as { text: string }[])[0]!.text).toBe('slept 300ms');
      expect(progress).toEqual([1, 2, 3]);
      const doc = await client.readResource({ uri: 'fixture://plain/3' });
      expect((doc.contents[0] as { text: string }).text).toBe('note 3');
      // The session is bound to /mcp: its id is unknown on an upstream's own endpoint.
      const elsewhere = await fetch(gw.url('fixture'), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-session-id': transport.sessionId!,
          'mcp-protocol-version': '2025-11-25',
        },
        body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list', params: {} }),
      });
      expect(elsewhere.status).toBe(404);
      await transport.terminateSession();
    } finally {
      await client.close();
    }
    const get = await fetch(fed);
    expect(get.status).toBe(405);
    const metrics = await (await fetch(`${gw.base}/metrics`)).text();
    expect(metrics).toMatch(/mrtr_requests_total\{upstream="\*",method="tools\/call"/);
  });
});

describe('federation of a 2026-07-28 upstream beside a legacy one', () => {
  let srv: SpawnedServer;
  let gw: TestGateway;
  let fed: string;
  const modernLog = new FixtureLog();
  const legacyLog = new FixtureLog();

  beforeAll(async () => {
    srv = await spawnListening(['--import', 'tsx', MODERN, 'http'], { FIXTURE_LOG: modernLog.file });
    gw = await startGateway({
      federation: { enabled: true, prefixes: { modern: 'm.' } },
      upstreams: {
        modern: { transport: 'streamable-http', url: `http://127.0.0.1:${srv.port}/mcp`, tools: { deny: ['ask_secret'] } },
        legacy: fixtureStdio(legacyLog),
      },
    });
    fed = `${gw.base}/mcp`;
  });
  afterAll(async () => {
    await gw?.close();
    await srv?.stop();
  });

  it('tools/list merges both eras with their prefixes; the denied 2026-07-28 tool is absent and refused', async () => {
    const { items } = await listAll(fed, 'tools/list', 'tools');
    const names = items.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining(['m.two_round', 'm.slow', 'legacy_ask_name']));
    expect(names).not.toContain('m.ask_secret');
    const refused = await rpc(fed, 'tools/call', { name: 'm.ask_secret', arguments: {} }, { caps: ELICIT });
    expect(refused.body.error).toEqual({ code: -32602, message: 'Unknown tool: m.ask_secret' });
    expect(modernLog.of('call', 'ask_secret')).toEqual([]);
  });

  it('the v2 client completes two input rounds of the 2026-07-28 tool and one of the legacy tool on /mcp', async () => {
    const asked: string[] = [];
    const { client } = await v2Client(fed, {
      elicit: (p) => {
        asked.push(String(p.message));
        if (String(p.message).includes('How old')) return { action: 'accept', content: { age: 36 } };
        return { action: 'accept', content: { name: 'Ada' } };
      },
    });
    try {
      expect(textOf((await client.callTool({ name: 'm.two_round', arguments: { tag: 'fed' } })) as never)).toBe('Ada is 36 (fed)');
      expect(textOf((await client.callTool({ name: 'legacy_ask_name', arguments: {} })) as never)).toBe('Hello, Ada!');
      expect(asked).toHaveLength(3);
    } finally {
      await client.close();
    }
    // The 2026-07-28 upstream got its own name and its own requestState back (the hop's Mcp-Name is its tool name).
    expect(
      modernLog
        .of('call', 'two_round')
        .filter((e) => e.tag === 'fed')
        .map((e) => e.requestState),
    ).toEqual([null, 'round-1', expect.stringContaining('round-2|name=Ada')]);
  });

  it('progress of the 2026-07-28 upstream reaches the client on /mcp', async () => {
    const progress: number[] = [];
    const { client } = await v2Client(fed);
    try {
      const r = await client.callTool(
        { name: 'm.slow', arguments: { steps: 3, ms: 30 } },
        { onprogress: (p: { progress: number }) => progress.push(p.progress) },
      );
      expect(textOf(r as never)).toBe('done in 3 steps');
      expect(progress).toEqual([1, 2, 3]);
    } finally {
      await client.close();
    }
  });

  it('a requestState of the 2026-07-28 upstream is refused on the legacy upstream tool, and the other way round', async () => {
    const m1 = await rpc(fed, 'tools/call', { name: 'm.two_round', arguments: {} }, { caps: ELICIT });
    expect(m1.body.result.resultType).toBe('input_required');
    const onLegacy = await rpc(
      fed,
      'tools/call',
      { name: 'legacy_ask_name', arguments: {}, requestState: m1.body.result.requestState, inputResponses: {} },
      { caps: ELICIT },
    );
    expect(onLegacy.body.error.code).toBe(-32602);
    const l1 = await rpc(fed, 'tools/call', { name: 'legacy_ask_name', arguments: {} }, { caps: ELICIT });
    expect(l1.body.result.resultType).toBe('input_required');
    const onModern = await rpc(
      fed,
      'tools/call',
      { name: 'm.two_round', arguments: {}, requestState: l1.body.result.requestState, inputResponses: {} },
      { caps: ELICIT },
    );
    expect(onModern.body.error.code).toBe(-32602);
  });

  it('server/discover: the union of both eras (the 2026-07-28 upstream declares logging)', async () => {
    const d = (await rpc(fed, 'server/discover')).body.result;
    expect(d.capabilities.tools).toBeDefined();
    expect(d.capabilities.logging).toEqual({});
    expect(d.capabilities.prompts).toEqual({ listChanged: true });
  });

  it('a legacy client session on /mcp/modern (reverse bridge) gets the tool policy too', async () => {
    const client = new Client({ name: 'legacy-on-modern', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'x' } }));
    await client.connect(new StreamableHTTPClientTransport(new URL(gw.url('modern'))));
    try {
      const names = (await client.listTools()).tools.map((t) => t.name);
      expect(names).toContain('two_round');
      expect(names).not.toContain('ask_secret');
      await expect(client.callTool({ name: 'ask_secret', arguments: {} })).rejects.toMatchObject({
        code: -32602,
        message: expect.stringContaining('Unknown tool: ask_secret'),
      });
    } finally {
      await client.close();
    }
  });
});

describe('tool names outside the MCP tool-name rules', () => {
  // Names a careless or hostile upstream may list: markup, a space, a comma, a control character,
  // `/`, a non-ASCII letter, 129 characters. The rules: 1 to 128 of A-Z a-z 0-9 _ - .
  const MARKUP = '<img src=x onerror=alert(1)>';
  const BAD = [MARKUP, 'two words', 'a,b', 'bell\u0007', 'path/name', 'caf\u00e9', 'x'.repeat(129)];
  const GOOD = 'dotted.ok-name_1';
  // 128 characters: good on /mcp/NAME, too long on /mcp behind the prefix `leg_`.
  const LONGEST = 'n'.repeat(128);
  const RULE = /^[A-Za-z0-9_.-]{1,128}$/;
  const extra = { FIXTURE_EXTRA_TOOLS: JSON.stringify([GOOD, LONGEST, ...BAD]) };
  const legLog = new FixtureLog();
  const modLog = new FixtureLog();
  let gw: TestGateway;
  let fed: string;
  let lines: () => Record<string, any>[];

  beforeAll(async () => {
    const mem = memoryLogger('info');
    lines = mem.lines;
    gw = await startGateway(
      {
        federation: { enabled: true, prefixes: { leg: 'leg_', mod: 'mod_' } },
        upstreams: { leg: fixtureStdio(legLog, extra), mod: { ...modernStdio(modLog, extra), protocol: '2026-07-28' } },
      },
      { log: mem.log },
    );
    fed = `${gw.base}/mcp`;
  });
  afterAll(() => gw?.close());

  /** The tool names a legacy client (the v1 SDK) sees at `url`. */
  async function legacyNames(url: string): Promise<{ names: string[]; client: Client }> {
    const client = new Client({ name: 'tool-names', version: '1.0.0' }, { capabilities: {} });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const names: string[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor });
      names.push(...page.tools.map((t) => t.name));
      cursor = page.nextCursor;
    } while (cursor);
    return { names, client };
  }

  it('are left out of tools/list for 2026-07-28 clients on /mcp/NAME (legacy and 2026-07-28 upstreams) and on /mcp', async () => {
    for (const name of ['leg', 'mod']) {
      const { items } = await listAll(gw.url(name), 'tools/list', 'tools');
      const names = items.map((t) => t.name);
      expect(names, name).toEqual(expect.arrayContaining([GOOD, LONGEST]));
      for (const bad of BAD) expect(names, name).not.toContain(bad);
      expect(
        names.filter((n) => !RULE.test(n)),
        name,
      ).toEqual([]);
    }
    const { items } = await listAll(fed, 'tools/list', 'tools');
    const names = items.map((t) => t.name);
    expect(names).toEqual(expect.arrayContaining([`leg_${GOOD}`, `mod_${GOOD}`, 'leg_ask_name', 'mod_two_round']));
    // The prefix makes the 128-character name too long for /mcp.
    expect(names).not.toContain(`leg_${LONGEST}`);
    expect(names.filter((n) => !RULE.test(n))).toEqual([]);
  });

  it('are left out for legacy clients: pass-through, reverse bridge and /mcp', async () => {
    for (const [url, prefix] of [
      [gw.url('leg'), ''],
      [gw.url('mod'), ''],
      [fed, 'leg_'],
    ] as const) {
      const { names, client } = await legacyNames(url);
      try {
        expect(names, url).toContain(`${prefix}${GOOD}`);
        expect(
          names.filter((n) => !RULE.test(n)),
          url,
        ).toEqual([]);
      } finally {
        await client.close();
      }
    }
  });

  it('a call of one is refused with -32602 saying which rule the name breaks, in every era; nothing reaches the upstream', async () => {
    for (const [url, name] of [
      [gw.url('leg'), MARKUP],
      [gw.url('mod'), MARKUP],
      [fed, `leg_${MARKUP}`],
      [fed, `leg_${LONGEST}`],
    ] as const) {
      const r = await rpc(url, 'tools/call', { name, arguments: {} });
      expect(r.status, url).toBe(200);
      expect(r.body.error, url).toMatchObject({
        code: -32602,
        message: expect.stringMatching(/^Tool name not served: the name (has characters outside|is longer than 128)/),
        data: { reason: 'invalid-tool-name' },
      });
    }
    for (const url of [gw.url('leg'), gw.url('mod')]) {
      const client = new Client({ name: 'tool-names', version: '1.0.0' }, { capabilities: {} });
      await client.connect(new StreamableHTTPClientTransport(new URL(url)));
      try {
        await expect(client.callTool({ name: 'bell\u0007', arguments: {} })).rejects.toMatchObject({
          code: -32602,
          message: expect.stringContaining('"\\u0007"'),
        });
        const ok = await client.callTool({ name: GOOD, arguments: {} });
        expect((ok.content as { text: string }[])[0]!.text).toBe(GOOD);
      } finally {
        await client.close();
      }
    }
    for (const bad of BAD) {
      expect(legLog.of('call', bad), bad).toEqual([]);
      expect(modLog.of('call', bad), bad).toEqual([]);
    }
    const good = await rpc(fed, 'tools/call', { name: `mod_${GOOD}`, arguments: {} });
    expect(good.body.result.content[0].text).toBe(GOOD);
  });

  it('each one left out is logged once and counted', async () => {
    const metrics = await (await fetch(`${gw.base}/metrics`)).text();
    for (const upstream of ['leg', 'mod']) {
      const m = new RegExp(`mrtr_list_entries_dropped_total\\{upstream="${upstream}",kind="tool",reason="invalid-name"\\} (\\d+)`).exec(
        metrics,
      );
      expect(Number(m?.[1]), upstream).toBeGreaterThanOrEqual(BAD.length);
    }
    const logged = lines().filter((l) => l.msg === 'list entry left out' && l.upstream === 'leg');
    expect(logged.map((l) => l.name).sort()).toEqual([...BAD, LONGEST].sort());
    expect(logged.find((l) => l.name === LONGEST)?.detail).toMatch(
      /^on \/mcp, with the prefix 'leg_', the name is longer than 128 characters \(132\)/,
    );
    expect(gw.gateway.dropped.snapshot().find((e) => e.upstream === 'mod' && e.name === MARKUP)).toMatchObject({
      kind: 'tool',
      reason: 'invalid-name',
      count: expect.any(Number),
    });
  });
});

describe('subscriptions/listen on /mcp', () => {
  let gw: TestGateway;
  let fed: string;
  const open: ListenStream[] = [];

  beforeAll(async () => {
    gw = await startGateway({
      federation: { enabled: true, prefixes: { conformance: 'c_' } },
      upstreams: { conformance: conformanceUpstream(), fixture: fixtureStdio() },
    });
    fed = `${gw.base}/mcp`;
  });
  afterAll(async () => {
    for (const s of open) s.close();
    await gw?.close();
  });

  it('each filter goes to the upstreams that can serve it; notifications of both parts on one stream', async () => {
    const s = await listen(
      fed,
      { toolsListChanged: true, resourceSubscriptions: ['test://watched-resource', 'fixture://notes/secret', 'nowhere://x'] },
      { id: 'fed-1' },
    );
    open.push(s);
    // Only the conformance fixture declares resources.subscribe; nowhere://x belongs to no upstream.
    expect(await s.next(10_000)).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/subscriptions/acknowledged',
      params: { notifications: { toolsListChanged: true, resourceSubscriptions: ['test://watched-resource'] }, _meta: { [SUB]: 'fed-1' } },
    });
    const trigger = await rpc(fed, 'tools/call', { name: 'c_test_trigger_tool_change', arguments: {} });
    expect(trigger.body.result.content[0].text).toBe('tool list changed');
    expect(await s.next()).toEqual({ jsonrpc: '2.0', method: 'notifications/tools/list_changed', params: { _meta: { [SUB]: 'fed-1' } } });
    await rpc(fed, 'tools/call', { name: 'c_test_trigger_resource_update', arguments: { uri: 'test://watched-resource' } });
    expect(await s.next()).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/resources/updated',
      params: { uri: 'test://watched-resource', _meta: { [SUB]: 'fed-1' } },
    });
    s.close();
    // Both parts held an upstream session; closing the stream gives them back.
    for (const name of ['conformance', 'fixture']) {
      const pool = gw.gateway.upstreams.get(name)!.pool;
      expect(await eventually(() => pool.stats().leased === 0, 3000)).toBe(true);
    }
  });

  it('an empty filter is acknowledged empty and ends at once', async () => {
    const s = await listen(fed, {}, { id: 'fed-empty' });
    expect((await s.next()).params.notifications).toEqual({});
    expect(await s.next()).toEqual({ jsonrpc: '2.0', id: 'fed-empty', result: { resultType: 'complete', _meta: { [SUB]: 'fed-empty' } } });
  });
});

describe('federation without prefixes', () => {
  let gw: TestGateway;
  let fed: string;
  const logs = { a: new FixtureLog(), b: new FixtureLog(), c: new FixtureLog() };

  afterAll(() => gw?.close());

  it(
    'a tool or prompt two upstreams serve: the earlier one keeps it, the later one is left out (logged, counted, on the admin page); the lists never fail',
    async () => {
      const mem = memoryLogger('info');
      gw = await startGateway(
        {
          admin: { enabled: true },
          federation: { enabled: true, prefix: 'none' },
          upstreams: {
            a: { ...fixtureStdio(logs.a), tools: { allow: ['ask_name', 'echo_*'] } },
            // A glob: the config cannot tell that b and c both serve `slow`.
            b: { ...fixtureStdio(logs.b), tools: { allow: ['sl*'] } },
            c: { ...fixtureStdio(logs.c), tools: { allow: ['slow', 'summarize'] } },
          },
        },
        { log: mem.log },
      );
      fed = `${gw.base}/mcp`;
      const list = await rpc(fed, 'tools/list');
      expect(list.body.error).toBeUndefined();
      const names = list.body.result.tools.map((t: { name: string }) => t.name);
      expect(names.filter((n: string) => n === 'slow')).toHaveLength(1);
      expect(names).toEqual(expect.arrayContaining(['ask_name', 'echo_after_ask', 'slow', 'summarize']));
      expect(new Set(names).size).toBe(names.length);
      // The name leads to b, the earlier of the two in config order; c never sees the call.
      const call = await rpc(fed, 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } });
      expect(call.body.result.content[0].text).toBe('slept 10ms');
      expect(logs.b.of('call', 'slow')).toHaveLength(1);
      expect(logs.c.of('call', 'slow')).toEqual([]);
      // Every upstream has greeting_prompt: listed once, a's; prompts/get reaches a and elicits.
      const prompts = await rpc(fed, 'prompts/list');
      expect(prompts.body.result.prompts.filter((p: { name: string }) => p.name === 'greeting_prompt')).toHaveLength(1);
      const prompt = await rpc(fed, 'prompts/get', { name: 'greeting_prompt', arguments: {} }, { caps: ELICIT });
      expect(prompt.body.result.resultType).toBe('input_required');
      // Names only one upstream serves still route.
      const summarize = await rpc(fed, 'tools/call', { name: 'summarize', arguments: { text: 'x' } }, { caps: { sampling: {} } });
      expect(summarize.body.result.resultType).toBe('input_required');
      const tag = await rpc(fed, 'tools/call', { name: 'echo_after_ask', arguments: { tag: 't' } }, { caps: ELICIT });
      expect(tag.body.result.resultType).toBe('input_required');
      const unknown = await rpc(fed, 'tools/call', { name: 'crash', arguments: {} });
      expect(unknown.body.error).toEqual({ code: -32602, message: 'Unknown tool: crash' });
      // Left out: logged once each, counted, and on the admin page.
      const { dropped } = await (await fetch(`${gw.base}/admin/api/dropped`)).json();
      expect(dropped).toEqual(
        expect.arrayContaining([
          expect.objectContaining({
            upstream: 'c',
            kind: 'tool',
            name: 'slow',
            reason: 'conflict',
            detail: "on /mcp, 'slow' is served by 'b', earlier in federation order",
          }),
          expect.objectContaining({
            upstream: 'b',
            kind: 'prompt',
            name: 'greeting_prompt',
            reason: 'conflict',
            detail: "on /mcp, 'greeting_prompt' is served by 'a', earlier in federation order",
          }),
          expect.objectContaining({ upstream: 'c', kind: 'prompt', name: 'greeting_prompt', reason: 'conflict' }),
        ]),
      );
      expect(dropped.some((d: { upstream: string }) => d.upstream === 'a')).toBe(false);
      const page = await (await fetch(`${gw.base}/admin`)).text();
      expect(page).toContain('on /mcp, &#39;slow&#39; is served by &#39;b&#39;, earlier in federation order');
      const metrics = await (await fetch(`${gw.base}/metrics`)).text();
      expect(metrics).toMatch(/mrtr_list_entries_dropped_total\{upstream="c",kind="tool",reason="conflict"\} [1-9]/);
      expect(mem.lines().filter((l) => l.msg === 'list entry left out' && l.upstream === 'c' && l.name === 'slow')).toHaveLength(1);
    },
    scaled(60_000),
  );
});

describe('a resource URI two upstreams list', () => {
  let gw: TestGateway;
  let fed: string;
  let a: SpawnedServer & { config: Record<string, unknown> };
  let b: SpawnedServer & { config: Record<string, unknown> };
  const logA = new FixtureLog();
  const logB = new FixtureLog();
  /** The JSON-RPC methods that reached the upstream over HTTP, in order. */
  const methods = (log: FixtureLog) => log.of('http').map((e) => e.rpcMethod);

  beforeAll(async () => {
    // The same fixture twice over Streamable HTTP: both list fixture://notes/secret and the
    // template fixture://plain/{id}; each logs the method of every request it receives.
    [a, b] = await Promise.all([startFixtureHttp('http', logA), startFixtureHttp('http', logB)]);
    gw = await startGateway({ federation: { enabled: true }, upstreams: { a: a.config, b: b.config } });
    fed = `${gw.base}/mcp`;
  });
  afterAll(async () => {
    await gw?.close();
    await Promise.all([a?.stop(), b?.stop()]);
  });

  it('is listed once, the earlier upstream’s, and read there; the later upstream’s entries are left out', async () => {
    const listed = await listAll(fed, 'resources/list', 'resources');
    expect(listed.items.filter((r) => r.uri === 'fixture://notes/secret')).toHaveLength(1);
    const templates = await listAll(fed, 'resources/templates/list', 'resourceTemplates');
    expect(templates.items.filter((t) => t.uriTemplate === 'fixture://plain/{id}')).toHaveLength(1);
    const note = await rpc(fed, 'resources/read', { uri: 'fixture://plain/7' });
    expect(note.body.result.contents[0].text).toBe('note 7');
    const secret = await rpc(fed, 'resources/read', { uri: 'fixture://notes/secret' }, { caps: ELICIT });
    expect(secret.body.result.resultType).toBe('input_required');
    expect(methods(logA).filter((m) => m === 'resources/read')).toHaveLength(2);
    expect(methods(logB)).not.toContain('resources/read');
    expect(gw.gateway.dropped.snapshot().map((d) => [d.upstream, d.kind, d.name, d.reason])).toEqual(
      expect.arrayContaining([
        ['b', 'resource', 'fixture://notes/secret', 'conflict'],
        ['b', 'resourceTemplate', 'fixture://plain/{id}', 'conflict'],
      ]),
    );
    expect(gw.gateway.dropped.snapshot().some((d) => d.upstream === 'a')).toBe(false);
  });
});

describe('a catch-all URI template of an earlier upstream', () => {
  let gw: TestGateway;
  let fed: string;
  const greedy = new FixtureLog();

  beforeAll(async () => {
    gw = await startGateway({
      federation: { enabled: true },
      // `greedy` comes first and lists the template {+uri}, which matches every URI.
      upstreams: { greedy: fixtureStdio(greedy, { FIXTURE_EXTRA_TEMPLATE: '{+uri}' }), everything: everythingStdio },
    });
    fed = `${gw.base}/mcp`;
  });
  afterAll(() => gw?.close());

  it('never takes a URI another upstream lists, nor one a narrower template matches; it still serves what nobody else claims', async () => {
    // The client knows the templates (greedy's {+uri} among them), not the resources.
    const templates = await listAll(fed, 'resources/templates/list', 'resourceTemplates');
    expect(templates.items.map((t) => t.uriTemplate)).toEqual(
      expect.arrayContaining(['{+uri}', 'demo://resource/dynamic/text/{resourceId}']),
    );
    const direct = await listAll(gw.url('everything'), 'resources/list', 'resources');
    const doc = direct.items.find((r) => String(r.uri).startsWith('demo://resource/static/document/'));
    expect(doc).toBeDefined();
    // Listed by everything: read there, not by greedy's template.
    const listed = await rpc(fed, 'resources/read', { uri: doc.uri });
    expect(listed.body.error).toBeUndefined();
    expect(listed.body.result.contents[0].uri).toBe(doc.uri);
    expect(listed.body.result.contents[0].text).not.toMatch(/^extra /);
    // Matched by everything's narrower template too: everything's, not ambiguous.
    const dynamic = await rpc(fed, 'resources/read', { uri: 'demo://resource/dynamic/text/3' });
    expect(dynamic.body.error).toBeUndefined();
    expect(dynamic.body.result.contents[0].uri).toBe('demo://resource/dynamic/text/3');
    expect(dynamic.body.result.contents[0].text).not.toMatch(/^extra /);
    expect(greedy.of('read')).toEqual([]);
    // What nobody lists or matches more narrowly is the catch-all's.
    const other = await rpc(fed, 'resources/read', { uri: 'elsewhere://x/y' });
    expect(other.body.result.contents[0].text).toBe('extra elsewhere://x/y');
    expect(greedy.of('read').map((e) => e.uri)).toEqual(['elsewhere://x/y']);
  });
});

describeWith(['redis-server'], '/mcp on two replicas sharing Redis', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;

  beforeAll(async () => {
    redis = await startRedis();
    const cfg = {
      store: { kind: 'redis', url: redis.url },
      replicas: { secret: 'replica-secret-0123456789abcdefghij', heartbeatMs: 200, deadAfterMs: 1000 },
      requestState: { keys: [{ kid: 'shared', secret: 'a-requestState-secret-both-replicas-share' }] },
      federation: { enabled: true },
      upstreams: { everything: everythingStdio, fixture: fixtureStdio() },
    };
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
  }, scaled(60_000));
  afterAll(async () => {
    for (const g of [a, b]) g?.child.kill('SIGTERM');
    await Promise.all([a?.exited, b?.exited]);
    await redis?.stop();
  });

  it('a retry on /mcp of the other replica is forwarded to the replica holding the call, and completes', async () => {
    const first = await rpc(
      `http://127.0.0.1:${a.port}/mcp`,
      'tools/call',
      { name: 'fixture_ask_name', arguments: { greeting: 'Ahoy' } },
      { caps: ELICIT },
    );
    expect(first.body.result.resultType).toBe('input_required');
    const key = Object.keys(first.body.result.inputRequests)[0]!;
    const retry = await rpc(
      `http://127.0.0.1:${b.port}/mcp`,
      'tools/call',
      {
        name: 'fixture_ask_name',
        arguments: { greeting: 'Ahoy' },
        inputResponses: { [key]: { action: 'accept', content: { name: 'Mary' } } },
        requestState: first.body.result.requestState,
      },
      { caps: ELICIT },
    );
    expect(retry.body.result, JSON.stringify(retry.body)).toMatchObject({
      resultType: 'complete',
      content: [{ type: 'text', text: 'Ahoy, Mary!' }],
    });
    // The request log line reaches the test through b's stdout, after the answer.
    expect(await eventually(() => b.logs.some((l) => l.msg === 'request' && l.upstream === '*' && l.outcome === 'forwarded'), 2000)).toBe(
      true,
    );
  });
});
