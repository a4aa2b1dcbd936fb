/**
 * Approvals across two gateway replicas on one real Redis (docs/approvals.md, "Replicas"), in front
 * of the legacy fixture over stdio, with `input.mode` "park" and "replay": an approval round issued
 * by one replica is answered on the other and the call runs once; the upstream's own round after
 * the accept is answered on the first replica; a second use of the accepted state is refused; what
 * one replica remembered the other honours; a task waiting for approval on one replica is answered
 * through the other.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { listen, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import { scaled } from '../helpers/budget.js';

const FORM = { elicitation: { form: {} } };
const TASKS = { ...FORM, extensions: { 'io.modelcontextprotocol/tasks': {} } };
const MODES = ['park', 'replay'] as const;

describeWith(['redis-server'], 'approvals on two replicas sharing Redis', () => {
  let redis: TestRedis;
  let r1: TestGateway;
  let r2: TestGateway;
  const log = new FixtureLog();

  beforeAll(async () => {
    redis = await startRedis();
    const fixture = fixtureStdio(log);
    const upstream = (mode: string) => ({
      ...fixture,
      input: { ...(fixture.input as object), mode },
      approvals: { tools: ['slow', 'echo_after_ask'], rememberMs: 600_000 },
      tasks: { tools: { ask_name: { taskAfterMs: 0 } } },
    });
    const config = {
      store: { kind: 'redis', url: redis.url },
      replicas: { secret: 'replica-secret-0123456789abcdefghij', heartbeatMs: 200, deadAfterMs: 1000 },
      requestState: { keys: [{ kid: 'shared', secret: 'a-requestState-secret-both-replicas-share' }] },
      upstreams: {
        park: upstream('park'),
        replay: upstream('replay'),
        tasks: { ...fixture, approvals: { tools: ['ask_name'] }, tasks: { tools: { ask_name: { taskAfterMs: 0 } } } },
      },
    };
    [r1, r2] = await Promise.all([startGateway(config), startGateway(config)]);
  }, scaled(60_000));
  afterAll(async () => {
    await Promise.all([r1?.close(), r2?.close()]);
    await redis?.stop();
  });

  const slowCalls = () => log.of('call', 'slow').length;
  const call = (g: TestGateway, up: string, params: Record<string, unknown>, caps: Record<string, unknown> = FORM) =>
    rpc(g.url(up), 'tools/call', params, { caps });

  for (const mode of MODES) {
    it(`${mode}: a round issued by replica 1 and accepted on replica 2 runs the call once; the same accepted state again is refused`, async () => {
      const params = { name: 'slow', arguments: { ms: mode === 'park' ? 21 : 22, steps: 1 } };
      const round = await call(r1, mode, params);
      expect(round.body.result, JSON.stringify(round.body)).toMatchObject({ resultType: 'input_required' });
      expect(Object.keys(round.body.result.inputRequests)).toEqual(['approval']);
      const before = slowCalls();
      const retry = {
        ...params,
        inputResponses: { approval: { action: 'accept', content: {} } },
        requestState: round.body.result.requestState,
      };
      const done = await call(r2, mode, retry);
      expect(done.body.result, JSON.stringify(done.body)).toMatchObject({
        resultType: 'complete',
        content: [{ type: 'text', text: `slept ${params.arguments.ms}ms` }],
      });
      expect(slowCalls()).toBe(before + 1);
      for (const g of [r2, r1]) {
        const again = await call(g, mode, retry);
        expect(again.body.error?.code, JSON.stringify(again.body)).toBe(-32602);
      }
      expect(slowCalls()).toBe(before + 1);
    });

    it(`${mode}: after an accept on replica 2, the upstream's own round is answered on replica 1, and the approval is not asked again`, async () => {
      const tag = `${mode}-${Date.now()}`;
      const params = { name: 'echo_after_ask', arguments: { tag } };
      const round = await call(r1, mode, params);
      const accepted = await call(r2, mode, {
        ...params,
        inputResponses: { approval: { action: 'accept', content: {} } },
        requestState: round.body.result.requestState,
      });
      const asked = accepted.body.result;
      expect(asked, JSON.stringify(accepted.body)).toMatchObject({ resultType: 'input_required' });
      const [key] = Object.keys(asked.inputRequests);
      expect(key).not.toBe('approval');
      expect(asked.inputRequests[key!].params.message).toBe('Who is asking?');
      const done = await call(r1, mode, {
        ...params,
        inputResponses: { [key!]: { action: 'accept', content: { name: 'Ada' } } },
        requestState: asked.requestState,
      });
      expect(done.body.result, JSON.stringify(done.body)).toMatchObject({
        resultType: 'complete',
        content: [{ type: 'text', text: `tag=${tag} action=accept name=Ada` }],
      });
      // Park: the call ran once, parked on replica 2 and forwarded there; replay: its first run was cancelled.
      const answered = log.of('elicit-result', 'echo_after_ask').filter((e) => e.tag === tag);
      expect(answered.filter((e) => e.result.action === 'accept')).toHaveLength(1);
      expect(answered).toHaveLength(mode === 'park' ? 1 : 2);
    });
  }

  it('an approval remembered on replica 1 is honoured on replica 2', async () => {
    const params = { name: 'slow', arguments: { ms: 23, steps: 1 } };
    const round = await call(r1, 'park', params);
    const remembered = await call(r1, 'park', {
      ...params,
      inputResponses: { approval: { action: 'accept', content: { remember: true } } },
      requestState: round.body.result.requestState,
    });
    expect(remembered.body.result.content[0].text).toBe('slept 23ms');
    const before = slowCalls();
    const again = await call(r2, 'park', params);
    expect(again.body.result, JSON.stringify(again.body)).toMatchObject({ resultType: 'complete', content: [{ text: 'slept 23ms' }] });
    expect(slowCalls()).toBe(before + 1);
    // Remembered per upstream: the replay upstream still asks.
    expect((await call(r2, 'replay', params)).body.result.resultType).toBe('input_required');
  });

  it('a task waiting for approval on replica 1 is answered through replica 2 and runs on replica 1', async () => {
    const created = await call(r1, 'tasks', { name: 'ask_name', arguments: { greeting: 'Yo' } }, TASKS);
    const { taskId, status } = created.body.result;
    expect(status, JSON.stringify(created.body)).toBe('input_required');
    const opts = { caps: TASKS, headers: { 'mcp-name': taskId } };
    const stream = await listen(r2.url('tasks'), { taskIds: [taskId] }, { caps: TASKS });
    expect(
      (await rpc(r2.url('tasks'), 'tasks/update', { taskId, inputResponses: { approval: { action: 'accept' } } }, opts)).body.result,
    ).toEqual({
      resultType: 'complete',
    });
    let asking: any;
    for (let m = await stream.next(10_000); m; m = await stream.next(10_000)) {
      if (m.method !== 'notifications/tasks' || m.params.status !== 'input_required' || m.params.inputRequests.approval) continue;
      asking = m.params;
      break;
    }
    stream.close();
    const [key] = Object.keys(asking.inputRequests);
    await rpc(r2.url('tasks'), 'tasks/update', { taskId, inputResponses: { [key!]: { action: 'accept', content: { name: 'Bo' } } } }, opts);
    let last: any;
    for (let i = 0; i < 100 && last?.status !== 'completed'; i++) {
      last = (await rpc(r2.url('tasks'), 'tasks/get', { taskId }, opts)).body.result;
      if (last.status !== 'completed') await new Promise((r) => setTimeout(r, 50));
    }
    expect(last).toMatchObject({ status: 'completed', result: { content: [{ type: 'text', text: 'Yo, Bo!' }] } });
  });
});
