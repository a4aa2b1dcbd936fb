/**
 * The gateway's approval asked in a task (docs/approvals.md, "Tasks"): a 2026-07-28 client that
 * declared the tasks extension calls a tool of a legacy upstream (the legacy fixture over stdio)
 * that needs approval and becomes a task at once. The call is answered with a task waiting in
 * `input_required` with the approval form; `tasks/update` answers it: accept runs the call upstream
 * (working, then completed), decline and cancel complete the task with the isError result and the
 * upstream is never called.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio } from '../helpers/fixture.js';

const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
const CAPS = { ...TASKS, elicitation: { form: {} } };

describe('approvals asked in tasks', () => {
  let gw: TestGateway;
  const log = new FixtureLog();
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        f: {
          ...fixtureStdio(log),
          approvals: { tools: ['slow', 'ask_*'], rememberMs: 60_000 },
          tasks: { tools: { slow: { taskAfterMs: 0 }, ask_name: { required: true } } },
        },
      },
    });
  });
  afterAll(() => gw?.close());

  const url = () => gw.url('f');
  const slowCalls = () => log.of('call', 'slow').length;
  const get = async (taskId: string) =>
    (await rpc(url(), 'tasks/get', { taskId }, { caps: CAPS, headers: { 'mcp-name': taskId } })).body.result;
  const update = (taskId: string, inputResponses: unknown) =>
    rpc(url(), 'tasks/update', { taskId, inputResponses }, { caps: CAPS, headers: { 'mcp-name': taskId } });
  /** Follows the task on subscriptions/listen until it is terminal; returns every status seen and the last task. */
  async function follow(taskId: string): Promise<{ statuses: string[]; last: any }> {
    const stream = await listen(url(), { taskIds: [taskId] }, { caps: CAPS });
    const statuses: string[] = [];
    let last: any;
    for (let m = await stream.next(10_000); m; m = await stream.next(10_000)) {
      if (m.method !== 'notifications/tasks') continue;
      last = m.params;
      statuses.push(m.params.status);
      if (['completed', 'failed', 'cancelled'].includes(m.params.status)) break;
    }
    stream.close();
    return { statuses, last };
  }

  it('accept: the task waits in input_required with the approval form, then runs the call upstream (working, then completed)', async () => {
    const before = slowCalls();
    const created = await rpc(url(), 'tools/call', { name: 'slow', arguments: { ms: 600, steps: 2 } }, { caps: CAPS });
    const task = created.body.result;
    expect(task, JSON.stringify(created.body)).toMatchObject({ resultType: 'task', status: 'input_required' });
    expect(task.requestState).toBeUndefined();
    const waiting = await get(task.taskId);
    expect(waiting.status).toBe('input_required');
    expect(Object.keys(waiting.inputRequests)).toEqual(['approval']);
    const form = waiting.inputRequests.approval;
    expect(form).toMatchObject({ method: 'elicitation/create', params: { mode: 'form', requestedSchema: { type: 'object' } } });
    expect(form.params.message).toContain('"slow"');
    expect(form.params.message).toContain('"f"');
    expect(form.params.message).toContain('"ms": 600');
    expect(form.params.requestedSchema.properties.remember).toMatchObject({ type: 'boolean', default: false });
    expect(slowCalls()).toBe(before);

    const following = follow(task.taskId);
    const r = await update(task.taskId, { approval: { action: 'accept', content: {} } });
    expect(r.body.result).toEqual({ resultType: 'complete' });
    const { statuses, last } = await following;
    expect(statuses).toContain('working');
    expect(statuses.indexOf('working')).toBeLessThan(statuses.indexOf('completed'));
    expect(last).toMatchObject({ status: 'completed', result: { content: [{ type: 'text', text: 'slept 600ms' }] } });
    expect(last.result.isError).toBeUndefined();
    expect(slowCalls()).toBe(before + 1);
  });

  for (const action of ['decline', 'cancel'] as const) {
    it(`${action}: the task completes with the isError result, and the upstream is never called`, async () => {
      const before = slowCalls();
      const created = await rpc(url(), 'tools/call', { name: 'slow', arguments: { ms: 10, steps: 1 } }, { caps: CAPS });
      const { taskId } = created.body.result;
      expect(created.body.result.status).toBe('input_required');
      const r = await update(taskId, { approval: { action } });
      expect(r.body.result).toEqual({ resultType: 'complete' });
      const { last } = await follow(taskId);
      expect(last.status).toBe('completed');
      expect(last.result.isError).toBe(true);
      expect(last.result.content[0].text).toContain(action === 'decline' ? 'declined' : 'cancelled');
      expect(last.result.content[0].text).toContain('"slow"');
      expect(slowCalls()).toBe(before);
    });
  }

  it('a tool that runs only as a task (required) asks in its task too; tasks/cancel while it waits calls nothing upstream', async () => {
    const asked = log.of('call', 'ask_name').length;
    const created = await rpc(url(), 'tools/call', { name: 'ask_name', arguments: { greeting: 'Hi' } }, { caps: CAPS });
    const { taskId, status } = created.body.result;
    expect(status).toBe('input_required');
    expect(Object.keys((await get(taskId)).inputRequests)).toEqual(['approval']);
    const r = await rpc(url(), 'tasks/cancel', { taskId }, { caps: CAPS, headers: { 'mcp-name': taskId } });
    expect(r.body.result).toEqual({ resultType: 'complete' });
    expect((await get(taskId)).status).toBe('cancelled');
    expect(log.of('call', 'ask_name').length).toBe(asked);
  });

  it('after the accept, what the upstream asks shows in the same task, and the call goes on', async () => {
    const created = await rpc(url(), 'tools/call', { name: 'ask_name', arguments: { greeting: 'Hey' } }, { caps: CAPS });
    const { taskId } = created.body.result;
    await update(taskId, { approval: { action: 'accept', content: { remember: false } } });
    const stream = await listen(url(), { taskIds: [taskId] }, { caps: CAPS });
    let asking: any;
    for (let m = await stream.next(10_000); m; m = await stream.next(10_000)) {
      if (m.method !== 'notifications/tasks' || m.params.status !== 'input_required' || m.params.inputRequests.approval) continue;
      asking = m.params;
      break;
    }
    stream.close();
    const [key] = Object.keys(asking.inputRequests);
    expect(asking.inputRequests[key].params.message).toBe('What is your name?');
    await update(taskId, { [key!]: { action: 'accept', content: { name: 'Ada' } } });
    const { last } = await follow(taskId);
    expect(last).toMatchObject({ status: 'completed', result: { content: [{ type: 'text', text: 'Hey, Ada!' }] } });
  });

  it('an answer that is not an ElicitResult is refused with -32602 naming the key; the task still waits', async () => {
    const created = await rpc(url(), 'tools/call', { name: 'slow', arguments: { ms: 11, steps: 1 } }, { caps: CAPS });
    const { taskId } = created.body.result;
    const r = await update(taskId, { approval: { action: 'maybe' } });
    expect(r.body.error.code).toBe(-32602);
    expect(r.body.error.data).toMatchObject({ key: 'approval' });
    expect((await get(taskId)).status).toBe('input_required');
    await rpc(url(), 'tasks/cancel', { taskId }, { caps: CAPS, headers: { 'mcp-name': taskId } });
  });

  it('an accept the user asked to remember: the same call is not asked again, a call with other arguments is', async () => {
    const args = { ms: 12, steps: 1 };
    const first = (await rpc(url(), 'tools/call', { name: 'slow', arguments: args }, { caps: CAPS })).body.result;
    await update(first.taskId, { approval: { action: 'accept', content: { remember: true } } });
    expect((await follow(first.taskId)).last.status).toBe('completed');
    const before = slowCalls();
    const again = (await rpc(url(), 'tools/call', { name: 'slow', arguments: args }, { caps: CAPS })).body.result;
    expect(again.resultType).toBe('task');
    expect(again.status).not.toBe('input_required');
    expect((await follow(again.taskId)).last).toMatchObject({ status: 'completed', result: { content: [{ text: 'slept 12ms' }] } });
    expect(slowCalls()).toBe(before + 1);
    const other = (await rpc(url(), 'tools/call', { name: 'slow', arguments: { ms: 13, steps: 1 } }, { caps: CAPS })).body.result;
    expect(other.status).toBe('input_required');
    await rpc(url(), 'tasks/cancel', { taskId: other.taskId }, { caps: CAPS, headers: { 'mcp-name': other.taskId } });
  });

  it('a client that cannot answer a form gets -32021 (HTTP 400) asking for elicitation.form, and nothing runs', async () => {
    const before = slowCalls();
    for (const caps of [TASKS, { ...TASKS, elicitation: { url: {} } }]) {
      const r = await rpc(url(), 'tools/call', { name: 'slow', arguments: { ms: 14, steps: 1 } }, { caps });
      expect(r.status).toBe(400);
      expect(r.body.error).toMatchObject({ code: -32021, data: { requiredCapabilities: { elicitation: { form: {} } } } });
    }
    expect(slowCalls()).toBe(before);
  });
});
