/**
 * The task manager (tasks extension, SEP-2663) over Exchanges on a fake legacy session and the
 * in-memory store: a task's statuses as its call runs, tasks/update and tasks/cancel, who may see a
 * task, and the per-principal quota.
 */
import { describe, expect, it } from 'vitest';
import { TaskManager, type TaskCaller } from '../../src/cells/bridge/tasks/manager.js';
import { TaskQuota, type TaskQuotaLimits } from '../../src/cells/bridge/tasks/quota.js';
import { silentLogger } from '../../src/observability/log.js';
import { MemoryStore } from '../../src/store/shared.js';
import type { TaskRecord } from '../../src/store/tasks.js';
import { eventually, fakeCall, tick } from '../helpers/fake-call.js';
import { TASK_NOT_FOUND } from '../../src/protocol/tasks.js';

const FORM = { message: 'Your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } };
const ACCEPT = { action: 'accept', content: { name: 'Ada' } };
const RESULT = { content: [{ type: 'text', text: 'Hello Ada' }] };
const ALICE: TaskCaller = { principal: 'alice', upstream: 'u' };
const OPTS = { ttlMs: 60_000, pollIntervalMs: 500, batchWindowMs: 10, tool: 'ask' };

function setup(limits: Partial<TaskQuotaLimits> = {}) {
  const store = new MemoryStore(100);
  const quota = new TaskQuota({
    maxRecordsPerPrincipal: Infinity,
    maxResultBytesPerPrincipal: Infinity,
    maxResultBytes: Infinity,
    ...limits,
  });
  const tasks = new TaskManager(store, silentLogger, 'r1', quota);
  const statuses: string[] = [];
  tasks.onStatus = (s) => statuses.push(s);
  return { store, tasks, statuses };
}

/** A started call on a fake session, made a task for `caller`. */
async function startTask(tasks: TaskManager, caller: TaskCaller = ALICE, opts = OPTS) {
  const call = fakeCall({ principal: caller.principal });
  call.ex.start();
  const created = await tasks.create(call.ex, caller, opts);
  return { ...call, created, taskId: created.taskId as string };
}

/** Polls tasks/get until `ok` holds for the record (2 s at most). */
async function until(tasks: TaskManager, taskId: string, ok: (r: TaskRecord) => boolean): Promise<TaskRecord> {
  const end = Date.now() + 2000;
  for (;;) {
    const r = await tasks.get(taskId, ALICE);
    if (ok(r)) return r;
    if (Date.now() > end) throw new Error(`task still ${r.status}`);
    await tick(5);
  }
}

describe('TaskManager', () => {
  it('create answers the flat CreateTaskResult and the task is working', async () => {
    const { tasks, statuses } = setup();
    const { created, taskId } = await startTask(tasks);
    expect(created).toEqual({
      resultType: 'task',
      taskId: expect.stringMatching(/^[A-Za-z0-9_-]{22}$/),
      status: 'working',
      createdAt: expect.any(String),
      lastUpdatedAt: expect.any(String),
      ttlMs: 60_000,
      pollIntervalMs: 500,
    });
    expect(created).not.toHaveProperty('requestState');
    await expect(tasks.get(taskId, ALICE)).resolves.toMatchObject({ status: 'working', principal: 'alice', upstream: 'u', replica: 'r1' });
    expect(tasks.running).toBe(1);
    expect(statuses).toEqual(['working']);
  });

  it('input needed: input_required with the input requests; tasks/update answers them and the task works on, then completes with the result', async () => {
    const { tasks, statuses } = setup();
    const { taskId, session } = await startTask(tasks);
    session.progress({ progress: 1, total: 2 });
    const asked = session.ask('elicitation/create', FORM);
    const waiting = await until(tasks, taskId, (r) => r.status === 'input_required');
    expect(waiting.inputRequests).toEqual({ 'elicitation-1': { method: 'elicitation/create', params: FORM } });
    expect(waiting.statusMessage).toBe('1/2');

    await tasks.update(taskId, ALICE, { 'elicitation-1': ACCEPT, 'not-asked': { action: 'decline' } });
    await expect(asked.answer).resolves.toEqual(ACCEPT);
    const working = await until(tasks, taskId, (r) => r.status === 'working');
    expect(working.inputRequests).toBeUndefined();

    session.resolve({ ...RESULT, resultType: 'complete' });
    const done = await until(tasks, taskId, (r) => r.status === 'completed');
    // The result inline, without resultType.
    expect(done.result).toEqual(RESULT);
    expect(tasks.running).toBe(0);
    expect(statuses).toEqual(['working', 'input_required', 'working', 'completed']);
  });

  it('a call that fails ends the task failed with its JSON-RPC error', async () => {
    const { tasks } = setup();
    const { taskId, session } = await startTask(tasks);
    session.reject(new Error('boom'));
    const r = await until(tasks, taskId, (t) => t.status === 'failed');
    expect(r.error).toMatchObject({ code: -32603, data: { upstream: 'u', reason: 'unreachable' } });
  });

  it('tasks/update with a malformed value for an outstanding key is -32602 naming the key, and delivers nothing', async () => {
    const { tasks } = setup();
    const { taskId, session, ex } = await startTask(tasks);
    session.ask('elicitation/create', FORM);
    session.ask('roots/list');
    await until(tasks, taskId, (r) => r.status === 'input_required');
    await expect(tasks.update(taskId, ALICE, { 'roots-2': { roots: [] }, 'elicitation-1': { action: 'maybe' } })).rejects.toMatchObject({
      code: -32602,
      message: expect.stringMatching(/^inputResponses\["elicitation-1"\] is not a valid ElicitResult/),
      data: { key: 'elicitation-1' },
    });
    expect(Object.keys(ex.outstanding())).toEqual(['elicitation-1', 'roots-2']);
    await expect(tasks.update(taskId, ALICE, 'nope')).rejects.toMatchObject({
      code: -32602,
      message: 'tasks/update: params.inputResponses must be an object mapping input keys to responses',
    });
  });

  it('tasks/cancel cancels the call upstream and the task ends cancelled; a pending form gets {action:"cancel"}', async () => {
    const { tasks } = setup();
    const { taskId, session, ex } = await startTask(tasks);
    const asked = session.ask('elicitation/create', FORM);
    await until(tasks, taskId, (r) => r.status === 'input_required');
    await tasks.cancel(taskId, ALICE);
    await expect(tasks.get(taskId, ALICE)).resolves.toMatchObject({ status: 'cancelled' });
    await expect(asked.answer).resolves.toEqual({ action: 'cancel' });
    await eventually(() => session.cancels.length > 0);
    expect(session.cancels).toEqual([{ token: ex.id, reason: 'The task was cancelled by the client' }]);
    // A finished task is left as it is.
    await tasks.cancel(taskId, ALICE);
    await expect(tasks.get(taskId, ALICE)).resolves.toMatchObject({ status: 'cancelled' });
  });

  it("another principal's or upstream's tasks/get, tasks/update and tasks/cancel get -32602 'not found', like an unknown id", async () => {
    const { tasks } = setup();
    const { taskId, ex } = await startTask(tasks);
    for (const caller of [
      { principal: 'mallory', upstream: 'u' },
      { principal: 'alice', upstream: 'v' },
    ]) {
      await expect(tasks.get(taskId, caller)).rejects.toMatchObject({ code: -32602, message: TASK_NOT_FOUND });
      await expect(tasks.update(taskId, caller, {})).rejects.toMatchObject({ code: -32602, message: TASK_NOT_FOUND });
      await expect(tasks.cancel(taskId, caller)).rejects.toMatchObject({ code: -32602, message: TASK_NOT_FOUND });
    }
    await expect(tasks.get('unknown', ALICE)).rejects.toMatchObject({ code: -32602, message: TASK_NOT_FOUND });
    await expect(tasks.get(42, ALICE)).rejects.toMatchObject({ code: -32602, message: 'params.taskId must be a non-empty string' });
    expect(ex.outcome).toBeUndefined();
  });

  it('tasks.maxRecordsPerPrincipal: a caller at the bound is not admitted and create is -32603 busy; another caller is', async () => {
    const { tasks } = setup({ maxRecordsPerPrincipal: 1 });
    expect(await tasks.admits('alice')).toBe(true);
    await startTask(tasks);
    expect(await tasks.admits('alice')).toBe(false);
    expect(await tasks.admits('bob')).toBe(true);
    await expect(startTask(tasks)).rejects.toMatchObject({
      code: -32603,
      data: { upstream: 'u', reason: 'busy' },
      message: expect.stringContaining('tasks.maxRecordsPerPrincipal'),
    });
    await expect(startTask(tasks, { principal: 'bob', upstream: 'u' })).resolves.toMatchObject({ created: { status: 'working' } });
  });

  it('tasks.maxResultBytesPerPrincipal: a result that would pass it ends the task failed (-32603 busy naming it)', async () => {
    const { tasks } = setup({ maxResultBytesPerPrincipal: 50 });
    const { taskId, session } = await startTask(tasks);
    session.resolve({ content: [{ type: 'text', text: 'x'.repeat(100) }] });
    const r = await until(tasks, taskId, (t) => t.status !== 'working');
    expect(r.status).toBe('failed');
    expect(r.result).toBeUndefined();
    expect(r.error).toMatchObject({
      code: -32603,
      data: { reason: 'busy' },
      message: expect.stringContaining('tasks.maxResultBytesPerPrincipal (50 bytes)'),
    });
  });

  it('a record that expires while its task runs cancels the call upstream, and the task is then unknown', async () => {
    const { tasks } = setup();
    const seen: TaskRecord[] = [];
    tasks.subscribe((r) => seen.push(r));
    const { taskId, session, ex } = await startTask(tasks, ALICE, { ...OPTS, ttlMs: 50 });
    // The store expires it about 50 ms after creation; the bound leaves room for a loaded host.
    await eventually(() => ex.outcome !== undefined);
    expect(ex.outcome).toMatchObject({ error: { data: { reason: 'cancelled' }, message: expect.stringContaining('expired') } });
    await eventually(() => session.cancels.length > 0);
    expect(session.cancels).toHaveLength(1);
    expect(tasks.running).toBe(0);
    expect(seen.at(-1)).toMatchObject({ taskId, status: 'cancelled' });
    await expect(tasks.get(taskId, ALICE)).rejects.toMatchObject({ code: -32602, message: TASK_NOT_FOUND });
  });
});
