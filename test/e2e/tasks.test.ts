/**
 * The tasks extension in front of legacy servers: server-everything (slow tools, its own
 * 2025-11-25 task tool) and the legacy fixture (a task that asks for input after creation,
 * cancellation seen upstream), plus the error rules.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelope, everythingStdio, listen, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { scaled } from '../helpers/budget.js';

const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
const TASKS_AND_ELICIT = { ...TASKS, elicitation: {} };

/** Starts a subscriptions/listen request without waiting for its answer; `abort` drops the connection. */
async function listenAsync(url: string, filter: Record<string, unknown>): Promise<{ abort: () => void }> {
  const ac = new AbortController();
  void fetch(url, {
    method: 'POST',
    signal: ac.signal,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'subscriptions/listen',
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 'waiting',
      method: 'subscriptions/listen',
      params: { notifications: filter, _meta: envelope({}) },
    }),
  }).catch(() => {});
  return { abort: () => ac.abort() };
}

async function pollUntil(
  url: string,
  taskId: string,
  done: (t: any) => boolean,
  caps: Record<string, unknown> = TASKS,
  timeoutMs = 15_000,
) {
  const seen: any[] = [];
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    const r = await rpc(url, 'tasks/get', { taskId }, { caps, headers: { 'mcp-name': taskId } });
    expect(r.status).toBe(200);
    seen.push(r.body.result);
    if (done(r.body.result)) return seen;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(`task ${taskId} did not reach the expected state; last: ${JSON.stringify(seen.at(-1))}`);
}

describe('tasks extension', () => {
  let gw: TestGateway;
  const log = new FixtureLog();
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        everything: { ...everythingStdio, tasks: { taskAfterMs: 300 } },
        fixture: { ...fixtureStdio(log), tasks: { taskAfterMs: 200, tools: { ask_name: { required: true } } } },
      },
    });
  });
  afterAll(() => gw?.close());

  it('server/discover advertises the tasks extension', async () => {
    const r = await rpc(gw.url('everything'), 'server/discover');
    expect(r.body.result.capabilities.extensions).toEqual({ 'io.modelcontextprotocol/tasks': {} });
    expect(r.body.result.capabilities.tasks).toBeUndefined();
  });

  it('a slow call becomes a task: working, then completed with exactly the result a direct call gives', async () => {
    const url = gw.url('everything');
    const args = { duration: 1, steps: 2 };
    const direct = await rpc(url, 'tools/call', { name: 'trigger-long-running-operation', arguments: args });
    expect(direct.body.result.resultType).toBe('complete');

    const created = await rpc(url, 'tools/call', { name: 'trigger-long-running-operation', arguments: args }, { caps: TASKS });
    const task = created.body.result;
    expect(task).toMatchObject({ resultType: 'task', status: 'working', ttlMs: 3_600_000, pollIntervalMs: 1000 });
    expect(task.taskId).toMatch(/^[A-Za-z0-9_-]{22,}$/);
    expect(Buffer.from(task.taskId, 'base64url').length).toBeGreaterThanOrEqual(16);
    expect(task.requestState).toBeUndefined();
    expect(task.task).toBeUndefined();
    expect(Number.isNaN(Date.parse(task.createdAt))).toBe(false);

    const seen = await pollUntil(url, task.taskId, (t) => t.status === 'completed');
    expect(seen[0].status).toBe('working');
    // Upstream progress notifications show as the task's statusMessage.
    expect(seen.some((t) => /^\d\/2$/.test(t.statusMessage ?? ''))).toBe(true);
    const final = seen.at(-1);
    expect(final.resultType).toBe('complete');
    const { resultType: _r, ...directResult } = direct.body.result;
    expect(final.result).toEqual(directResult);
    expect(final.requestState).toBeUndefined();
  });

  it('a call that finishes within taskAfterMs answers normally even when the client declared the extension', async () => {
    const r = await rpc(gw.url('everything'), 'tools/call', { name: 'echo', arguments: { message: 'quick' } }, { caps: TASKS });
    expect(r.body.result).toEqual({ content: [{ type: 'text', text: 'Echo: quick' }], resultType: 'complete' });
  });

  it('a client that did not declare the extension never gets a task', async () => {
    const r = await rpc(gw.url('everything'), 'tools/call', {
      name: 'trigger-long-running-operation',
      arguments: { duration: 1, steps: 1 },
    });
    expect(r.body.result.resultType).toBe('complete');
    expect(r.body.result.taskId).toBeUndefined();
  });

  it('tools/list carries no 2025-11-25 execution.taskSupport (2026-07-28 has none): simulate-research-query, which declares it upstream, is listed without it', async () => {
    const r = await rpc(gw.url('everything'), 'tools/list', {}, { caps: TASKS });
    const tool = r.body.result.tools.find((t: { name: string }) => t.name === 'simulate-research-query');
    expect(tool).toMatchObject({ name: 'simulate-research-query', inputSchema: { type: 'object' } });
    expect(tool).not.toHaveProperty('execution');
    expect(r.body.result.tools.filter((t: Record<string, unknown>) => 'execution' in t)).toEqual([]);
  });

  it('simulate-research-query (legacy taskSupport required) completes as an extension task', async () => {
    const url = gw.url('everything');
    const created = await rpc(url, 'tools/call', { name: 'simulate-research-query', arguments: { topic: 'gateways' } }, { caps: TASKS });
    expect(created.body.result.resultType).toBe('task');
    const seen = await pollUntil(url, created.body.result.taskId, (t) => t.status === 'completed', TASKS, 20_000);
    const final = seen.at(-1);
    expect(final.result.content[0].text).toContain('gateways');
    expect(final.result._meta?.['io.modelcontextprotocol/related-task']).toBeUndefined();
    expect(seen.some((t) => typeof t.statusMessage === 'string' && t.statusMessage.length > 0)).toBe(true);
  });

  it(
    'simulate-research-query for a client without the extension: the gateway waits for the upstream task result',
    async () => {
      const r = await rpc(gw.url('everything'), 'tools/call', { name: 'simulate-research-query', arguments: { topic: 'waiting' } });
      expect(r.body.result.resultType).toBe('complete');
      expect(r.body.result.content[0].text).toContain('waiting');
      expect(r.body.result.isError).toBeUndefined();
    },
    scaled(30_000),
  );

  it('tasks/cancel reaches the upstream as notifications/cancelled with its own request id, and the task ends cancelled', async () => {
    const url = gw.url('fixture');
    const created = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 20_000, steps: 20 } }, { caps: TASKS });
    const { taskId } = created.body.result;
    expect(created.body.result.resultType).toBe('task');
    const cancel = await rpc(url, 'tasks/cancel', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
    expect(cancel.body.result).toEqual({ resultType: 'complete' });
    const call = log.of('call', 'slow').at(-1)!;
    expect(
      await eventually(() => log.of('notification-cancelled').some((e) => e.pid === call.pid && e.requestId === call.requestId), 3000),
    ).toBe(true);
    const seen = await pollUntil(url, taskId, (t) => t.status === 'cancelled');
    expect(seen.at(-1).result).toBeUndefined();
    // Cancelling a finished task is an idempotent ack.
    const again = await rpc(url, 'tasks/cancel', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
    expect(again.body.result).toEqual({ resultType: 'complete' });
  });

  it('a task that asks for input after creation: input_required with inputRequests, tasks/update answers, the result carries the answer', async () => {
    const url = gw.url('fixture');
    const created = await rpc(url, 'tools/call', { name: 'slow_then_ask', arguments: { ms: 600 } }, { caps: TASKS_AND_ELICIT });
    const { taskId } = created.body.result;
    expect(created.body.result.resultType).toBe('task');
    const waiting = (await pollUntil(url, taskId, (t) => t.status === 'input_required', TASKS_AND_ELICIT)).at(-1);
    expect(Object.keys(waiting.inputRequests)).toEqual(['elicitation-1']);
    expect(waiting.inputRequests['elicitation-1']).toMatchObject({
      method: 'elicitation/create',
      params: { message: 'Who should sign the report?' },
    });
    expect(waiting.requestState).toBeUndefined();

    const bad = await rpc(
      url,
      'tasks/update',
      { taskId, inputResponses: { 'elicitation-1': { action: 'nope' } } },
      { caps: TASKS_AND_ELICIT, headers: { 'mcp-name': taskId } },
    );
    expect(bad.body.error.code).toBe(-32602);
    const upd = await rpc(
      url,
      'tasks/update',
      { taskId, inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Marie' } }, ignored: {} } },
      { caps: TASKS_AND_ELICIT, headers: { 'mcp-name': taskId } },
    );
    expect(upd.body.result).toEqual({ resultType: 'complete' });
    const final = (await pollUntil(url, taskId, (t) => t.status === 'completed', TASKS_AND_ELICIT)).at(-1);
    expect(final.result.content[0].text).toBe('Report signed by Marie');
    expect(final.inputRequests).toBeUndefined();
  });

  it('subscriptions/listen streams notifications/tasks on status changes after the acknowledgement', async () => {
    const url = gw.url('fixture');
    const created = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 800, steps: 2 } }, { caps: TASKS });
    const { taskId } = created.body.result;
    const res = await fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': 'subscriptions/listen',
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 'listen-1',
        method: 'subscriptions/listen',
        params: { _meta: envelope(TASKS), notifications: { taskIds: [taskId, taskId, 'not-a-task'] } },
      }),
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const messages = (await res.text())
      .split('\n\n')
      .filter((b) => b.includes('data:'))
      .map((b) => JSON.parse(b.slice(b.indexOf('data:') + 5)));
    expect(messages[0]).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/subscriptions/acknowledged',
      params: { notifications: { taskIds: [taskId] }, _meta: { 'io.modelcontextprotocol/subscriptionId': 'listen-1' } },
    });
    const updates = messages.filter((m) => m.method === 'notifications/tasks');
    expect(updates.at(-1).params).toMatchObject({
      taskId,
      status: 'completed',
      result: { content: [{ type: 'text', text: 'slept 800ms' }] },
    });
    expect(updates.every((u) => u.params._meta['io.modelcontextprotocol/subscriptionId'] === 'listen-1')).toBe(true);
    expect(messages.at(-1)).toEqual({
      jsonrpc: '2.0',
      id: 'listen-1',
      result: { resultType: 'complete', _meta: { 'io.modelcontextprotocol/subscriptionId': 'listen-1' } },
    });
  });

  it('a record that expires while its task runs cancels the upstream call, and the task is then unknown', async () => {
    const short = await startGateway({ upstreams: { f: { ...fixtureStdio(log), tasks: { taskAfterMs: 100, ttlMs: 700 } } } });
    try {
      const url = short.url('f');
      const created = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 20_000, steps: 40 } }, { caps: TASKS });
      const { taskId } = created.body.result;
      expect(created.body.result.ttlMs).toBe(700);
      const call = log.of('call', 'slow').at(-1)!;
      expect(
        await eventually(() => log.of('notification-cancelled').some((e) => e.pid === call.pid && e.requestId === call.requestId), 4000),
      ).toBe(true);
      const r = await rpc(url, 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
      expect(r.body.error?.code, JSON.stringify(r.body)).toBe(-32602);
    } finally {
      await short.close();
    }
  });

  describe('errors', () => {
    let taskId: string;
    beforeAll(async () => {
      const created = await rpc(gw.url('fixture'), 'tools/call', { name: 'slow', arguments: { ms: 5000, steps: 1 } }, { caps: TASKS });
      taskId = created.body.result.taskId;
    });

    it('Mcp-Name that differs from params.taskId → 400 / -32020', async () => {
      const r = await rpc(gw.url('fixture'), 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': 'something-else' } });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe(-32020);
    });

    it('unknown taskId and a task of another upstream get -32602 with the same message', async () => {
      const unknown = await rpc(
        gw.url('fixture'),
        'tasks/get',
        { taskId: 'AAAAAAAAAAAAAAAAAAAAAA' },
        { caps: TASKS, headers: { 'mcp-name': 'AAAAAAAAAAAAAAAAAAAAAA' } },
      );
      const foreign = await rpc(gw.url('everything'), 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
      expect(unknown.body.error.code).toBe(-32602);
      expect(foreign.body.error.code).toBe(-32602);
      expect(foreign.body.error.message).toBe(unknown.body.error.message);
      for (const m of ['tasks/update', 'tasks/cancel']) {
        const r = await rpc(gw.url('everything'), m, { taskId, inputResponses: {} }, { caps: TASKS, headers: { 'mcp-name': taskId } });
        expect(r.body.error.code).toBe(-32602);
        expect(r.body.error.message).toBe(unknown.body.error.message);
      }
    });

    it('tasks/* from a client that did not declare the extension → 400 / -32021 naming the extension', async () => {
      const r = await rpc(gw.url('fixture'), 'tasks/get', { taskId }, { caps: {}, headers: { 'mcp-name': taskId } });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe(-32021);
      expect(r.body.error.data.requiredCapabilities).toEqual({ extensions: { 'io.modelcontextprotocol/tasks': {} } });
      // The gateway's extension, not something the upstream asks for.
      expect(r.body.error.message).toMatch(
        /^The gateway serves tasks only to a client that declares the client capability extensions\["io.modelcontextprotocol\/tasks"\]/,
      );
    });

    it('a task-required tool called without the extension → 400 / -32021', async () => {
      const r = await rpc(gw.url('fixture'), 'tools/call', { name: 'ask_name', arguments: {} }, { caps: { elicitation: {} } });
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe(-32021);
      expect(r.body.error.data.requiredCapabilities).toEqual({ extensions: { 'io.modelcontextprotocol/tasks': {} } });
    });

    it('tasks/result and tasks/list → 404 / -32601', async () => {
      for (const m of ['tasks/result', 'tasks/list']) {
        const r = await rpc(gw.url('fixture'), m, { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
        expect(r.status).toBe(404);
        expect(r.body.error.code).toBe(-32601);
      }
    });
  });
});

describe('task records are bounded per caller, and a listen stream hears of a record that goes', () => {
  const log = new FixtureLog();
  const keys = {
    mode: 'apiKeys',
    keys: [
      { principal: 'alice', key: 'key-of-alice-0123456789' },
      { principal: 'bob', key: 'key-of-bob-0123456789ab' },
    ],
  };
  const as = (who: 'alice' | 'bob') => ({ authorization: `Bearer key-of-${who}-${who === 'alice' ? '0123456789' : '0123456789ab'}` });
  const quick = (url: string, who: 'alice' | 'bob') =>
    rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } }, { caps: TASKS, headers: as(who) });
  const get = async (url: string, taskId: string, who: 'alice' | 'bob') => {
    const end = Date.now() + 10_000;
    for (;;) {
      const r = await rpc(url, 'tasks/get', { taskId }, { caps: TASKS, headers: { ...as(who), 'mcp-name': taskId } });
      if (['completed', 'failed', 'cancelled'].includes(r.body.result?.status) || Date.now() > end) return r.body.result;
      await new Promise((res) => setTimeout(res, 50));
    }
  };

  it('tasks.maxRecordsPerPrincipal: a caller holding that many records gets its calls answered in the request, a task-only tool -32603 busy before it reaches the upstream; another caller goes on', async () => {
    const gw = await startGateway({
      auth: keys,
      tasks: { maxRecordsPerPrincipal: 2 },
      upstreams: { f: { ...fixtureStdio(log), tasks: { taskAfterMs: 0, tools: { ask_name: { required: true } } } } },
    });
    try {
      const url = gw.url('f');
      const before = log.of('call', 'slow').length;
      for (let i = 0; i < 2; i++) expect((await quick(url, 'alice')).body.result?.resultType).toBe('task');
      // A task handle is answered before the upstream child logs the call it runs.
      expect(await eventually(() => log.of('call', 'slow').length === before + 2, 5000)).toBe(true);
      const calls = before + 2;
      const inline = await quick(url, 'alice');
      expect(inline.body.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'slept 5ms' }] });
      expect(log.of('call', 'slow')).toHaveLength(calls + 1);
      const asks = log.of('call', 'ask_name').length;
      const refused = await rpc(
        url,
        'tools/call',
        { name: 'ask_name', arguments: {} },
        { caps: { ...TASKS, elicitation: {} }, headers: as('alice') },
      );
      expect(refused.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'busy' } });
      expect(refused.body.error.message).toContain('tasks.maxRecordsPerPrincipal');
      expect(log.of('call', 'ask_name')).toHaveLength(asks);
      expect((await quick(url, 'bob')).body.result?.resultType).toBe('task');
    } finally {
      await gw.close();
    }
  });

  it("a caller's place under tasks.maxRecordsPerPrincipal comes back when its record expires", async () => {
    const gw = await startGateway({
      auth: keys,
      tasks: { maxRecordsPerPrincipal: 1 },
      upstreams: { f: { ...fixtureStdio(log), tasks: { taskAfterMs: 0, ttlMs: 800 } } },
    });
    try {
      const url = gw.url('f');
      const { taskId } = (await quick(url, 'alice')).body.result;
      expect((await quick(url, 'alice')).body.result.resultType).toBe('complete');
      const gone = async () =>
        (await rpc(url, 'tasks/get', { taskId }, { caps: TASKS, headers: { ...as('alice'), 'mcp-name': taskId } })).body.error?.code ===
        -32602;
      expect(await eventually(gone, 5000)).toBe(true);
      expect((await quick(url, 'alice')).body.result.resultType).toBe('task');
    } finally {
      await gw.close();
    }
  });

  it("tasks.maxResultBytesPerPrincipal: a result that would take a caller past it ends failed (-32603 busy naming it); another caller's result is kept", async () => {
    const gw = await startGateway({
      auth: keys,
      tasks: { maxResultBytesPerPrincipal: 80 },
      upstreams: { f: { ...fixtureStdio(log), tasks: { taskAfterMs: 0 } } },
    });
    try {
      const url = gw.url('f');
      const first = await get(url, (await quick(url, 'alice')).body.result.taskId, 'alice');
      expect(first.status).toBe('completed');
      // The bound holds one such result, not two.
      const size = Buffer.byteLength(JSON.stringify(first.result));
      expect(size).toBeLessThanOrEqual(80);
      expect(2 * size).toBeGreaterThan(80);
      const second = await get(url, (await quick(url, 'alice')).body.result.taskId, 'alice');
      expect(second.status).toBe('failed');
      expect(second.error).toMatchObject({ code: -32603, data: { reason: 'busy' } });
      expect(second.error.message).toContain('tasks.maxResultBytesPerPrincipal (80 bytes)');
      expect((await get(url, (await quick(url, 'bob')).body.result.taskId, 'bob')).status).toBe('completed');
    } finally {
      await gw.close();
    }
  });

  it(
    "limits.maxListensPerPrincipal: a listen beyond the caller's open streams gets 429 naming it; a place is free again once a stream closes",
    async () => {
      const gw = await startGateway({
        limits: { maxListensPerPrincipal: 2 },
        upstreams: { f: { ...fixtureStdio(log), tasks: { taskAfterMs: 0 } } },
      });
      try {
        const url = gw.url('f');
        const { taskId } = (await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 20_000, steps: 1 } }, { caps: TASKS })).body
          .result;
        const streams = [
          await listen(url, { taskIds: [taskId] }, { caps: TASKS }),
          await listen(url, { taskIds: [taskId] }, { caps: TASKS }),
        ];
        for (const st of streams) expect((await st.next()).method).toBe('notifications/subscriptions/acknowledged');
        const refused = await listen(url, { taskIds: [taskId] }, { caps: TASKS, id: 'over' });
        expect(refused.status).toBe(429);
        expect(refused.headers.get('retry-after')).toBe('1');
        expect(refused.messages[0]).toMatchObject({
          id: 'over',
          error: { code: -32600, message: expect.stringContaining('limits.maxListensPerPrincipal') },
        });
        streams[0]!.close();
        expect(
          await eventually(async () => {
            const again = await listen(url, { taskIds: [taskId] }, { caps: TASKS });
            again.close();
            return again.status === 200;
          }, 3000),
        ).toBe(true);
        streams[1]!.close();
      } finally {
        await gw.close();
      }
    },
    scaled(30_000),
  );

  it(
    'a listen whose client goes away while it waits for an upstream session frees its place at once',
    async () => {
      const gw = await startGateway({
        limits: { maxListensPerPrincipal: 1 },
        upstreams: { f: { ...fixtureStdio(log), maxSessions: 1, timeouts: { queueMs: 8000 } } },
      });
      try {
        const url = gw.url('f');
        // The only session is busy for 3 s: a toolsListChanged listen (it holds a session) waits.
        const busy = rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 3000, steps: 1 } });
        await eventually(() => log.of('call', 'slow').length > 0 && gw.gateway.upstreams.get('f')!.pool.stats().leased === 1, 5000);
        const waiting = await listenAsync(url, { toolsListChanged: true });
        await new Promise((r) => setTimeout(r, 300));
        waiting.abort();
        // Its place is free now, not when the wait ends: the next listen is not refused.
        await new Promise((r) => setTimeout(r, 200));
        const next = await listen(url, { toolsListChanged: true }, { id: 'next' });
        expect(next.status).toBe(200);
        expect((await next.next(8000))?.method).toBe('notifications/subscriptions/acknowledged');
        next.close();
        await busy;
      } finally {
        await gw.close();
      }
    },
    scaled(30_000),
  );

  for (const how of ['expires', 'is dropped to make room'] as const) {
    it(
      `a listened task whose record ${how} while it runs: the stream gets cancelled, then its result, and the upstream call is cancelled`,
      async () => {
        const gw = await startGateway({
          tasks: how === 'expires' ? {} : { maxRecords: 2 },
          upstreams: { f: { ...fixtureStdio(log), tasks: { taskAfterMs: 0, ...(how === 'expires' ? { ttlMs: 1500 } : {}) } } },
        });
        try {
          const url = gw.url('f');
          // One progress step (at its end): its record is not written again while the others come.
          const { taskId } = (await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 20_000, steps: 1 } }, { caps: TASKS })).body
            .result;
          const call = log.of('call', 'slow').at(-1)!;
          const stream = await listen(url, { taskIds: [taskId] }, { caps: TASKS, id: 'l' });
          expect((await stream.next()).method).toBe('notifications/subscriptions/acknowledged');
          if (how !== 'expires')
            for (let i = 0; i < 2; i++) await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } }, { caps: TASKS });
          let msg;
          do msg = await stream.next(6000);
          while (msg?.method === 'notifications/tasks' && msg.params.status === 'working');
          expect(msg?.params).toMatchObject({
            taskId,
            status: 'cancelled',
            statusMessage: how === 'expires' ? expect.stringContaining('expired') : expect.stringContaining('tasks.maxRecords'),
          });
          expect(await stream.next(3000)).toEqual({
            jsonrpc: '2.0',
            id: 'l',
            result: { resultType: 'complete', _meta: { 'io.modelcontextprotocol/subscriptionId': 'l' } },
          });
          expect(
            await eventually(
              () => log.of('notification-cancelled').some((e) => e.pid === call.pid && e.requestId === call.requestId),
              4000,
            ),
          ).toBe(true);
        } finally {
          await gw.close();
        }
      },
      scaled(30_000),
    );
  }
});
