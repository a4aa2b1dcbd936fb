/**
 * Several replicas: two gateway processes sharing a real Redis, behind a real round-robin load
 * balancer (haproxy), both started by the test on 127.0.0.1. Parked calls and tasks are served
 * wherever their requests land (forwarded to the replica holding the call), single use holds across
 * replicas, a stopped replica's calls fail at once, replay mode needs no replica at all, and Redis
 * going away and coming back is survived.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { startCli, type CliGateway } from '../helpers/cli.js';
import { infraInstalled, startHaproxy, startRedis, type TestBalancer, type TestRedis } from '../helpers/infra.js';
import { rounds, textOf, v2Client } from '../helpers/v2client.js';

const SECRET = 'replica-secret-0123456789abcdefghij';
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
const ELICIT = { elicitation: {} };

function replicaConfig(redisUrl: string, upstream: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    store: { kind: 'redis', url: redisUrl },
    replicas: { secret: SECRET, heartbeatMs: 200, deadAfterMs: 1000 },
    requestState: { keys: [{ kid: 'shared', secret: 'a-requestState-secret-both-replicas-share' }] },
    limits: { rateLimit: { requestsPerSecond: 10_000, burst: 10_000 }, maxConcurrentPerPrincipal: 1000 },
    upstreams: { f: { ...upstream, maxSessions: 32, tasks: { taskAfterMs: 0 } } },
    ...extra,
  };
}

const forwardedIn = (g: CliGateway) => g.logs.filter((l) => l.msg === 'request' && l.outcome === 'forwarded').length;

describe.skipIf(!infraInstalled)('two replicas behind haproxy, sharing Redis', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;
  let lb: TestBalancer;
  const log = new FixtureLog();

  beforeAll(async () => {
    redis = await startRedis();
    const cfg = replicaConfig(redis.url, fixtureStdio(log));
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
    lb = await startHaproxy([a.port, b.port]);
  }, 60_000);
  afterAll(async () => {
    await lb?.stop();
    for (const g of [a, b]) g?.child.kill('SIGTERM');
    await Promise.all([a?.exited, b?.exited]);
    await redis?.stop();
  });

  it('the bridge cases through the balancer, 20 times each: 0 failures, and retries forwarded to the replica holding the call', async () => {
    const url = `${lb.base}/mcp/f`;
    const failures: string[] = [];
    const forwardedBefore = forwardedIn(a) + forwardedIn(b);
    for (let i = 0; i < 20; i++) {
      const { client, record } = await v2Client(url, {
        elicit: (p) => (String(p.message).includes('topic') ? { action: 'accept', content: { topic: `t${i}` } } : { action: 'accept', content: { name: `N${i}`, ok: true } }),
        sample: () => ({ role: 'assistant', model: 'm', content: { type: 'text', text: `s${i}` } }),
      });
      const check = (what: string, ok: boolean) => ok || failures.push(`${what} #${i}`);
      try {
        check('elicit', textOf(await client.callTool({ name: 'ask_name', arguments: { greeting: 'Hi' } })) === `Hi, N${i}!`);
        check('three rounds', JSON.parse(textOf(await client.callTool({ name: 'three_rounds', arguments: {} }))).topic === `t${i}`);
        check('two inputs in one round', textOf(await client.callTool({ name: 'concurrent_inputs', arguments: {} })) === `name=N${i} sample=s${i}`);
        const prompt = await client.getPrompt({ name: 'greeting_prompt', arguments: {} });
        check('prompts/get', JSON.stringify(prompt.messages).includes(`Greet N${i}`));
        const note = await client.readResource({ uri: 'fixture://notes/secret' });
        check('resources/read', JSON.stringify(note.contents).includes('the note says hi'));
        check('rounds', rounds(record) >= 7);
      } catch (e) {
        failures.push(`#${i}: ${(e as Error).message}`);
      } finally {
        await client.close();
      }
      const declined = await v2Client(url, { elicit: () => ({ action: 'decline' }) });
      try {
        check('decline', textOf(await declined.client.callTool({ name: 'ask_name', arguments: {} })) === 'elicitation decline');
      } catch (e) {
        failures.push(`decline #${i}: ${(e as Error).message}`);
      } finally {
        await declined.client.close();
      }
    }
    expect(failures).toEqual([]);
    // Round robin sends about half of the retries to the other replica, which forwards them.
    expect(forwardedIn(a) + forwardedIn(b) - forwardedBefore).toBeGreaterThan(20);
  }, 240_000);

  it('tasks through the balancer, 20 times: created, polled to completed, answered with tasks/update, cancelled upstream', async () => {
    const url = `${lb.base}/mcp/f`;
    const failures: string[] = [];
    const call = (name: string, args: Record<string, unknown> = {}) => rpc(url, 'tools/call', { name, arguments: args }, { caps: { ...TASKS, ...ELICIT } });
    const task = (method: string, taskId: string, params: Record<string, unknown> = {}) => rpc(url, method, { taskId, ...params }, { caps: { ...TASKS, ...ELICIT }, headers: { 'mcp-name': taskId } });
    const until = async (taskId: string, status: string) => {
      for (let n = 0; n < 100; n++) {
        const r = await task('tasks/get', taskId);
        if (r.body.result?.status === status) return r.body.result;
        if (r.body.error || ['completed', 'failed', 'cancelled'].includes(r.body.result?.status)) return r.body.result ?? r.body.error;
        await new Promise((res) => setTimeout(res, 50));
      }
      return undefined;
    };
    for (let i = 0; i < 20; i++) {
      const slow = await call('slow', { ms: 200, steps: 2 });
      const done = slow.body.result?.taskId ? await until(slow.body.result.taskId, 'completed') : undefined;
      if (done?.status !== 'completed' || done.result?.content?.[0]?.text !== 'slept 200ms') failures.push(`complete #${i}: ${JSON.stringify(done ?? slow.body)}`);

      const asking = await call('slow_then_ask', { ms: 50 });
      const waiting = asking.body.result?.taskId ? await until(asking.body.result.taskId, 'input_required') : undefined;
      const key = waiting?.inputRequests ? Object.keys(waiting.inputRequests)[0] : undefined;
      if (!key) failures.push(`input_required #${i}: ${JSON.stringify(waiting ?? asking.body)}`);
      else {
        const upd = await task('tasks/update', asking.body.result.taskId, { inputResponses: { [key]: { action: 'accept', content: { name: `W${i}` } } } });
        if (upd.body.error) failures.push(`update #${i}: ${JSON.stringify(upd.body.error)}`);
        const signed = await until(asking.body.result.taskId, 'completed');
        if (signed?.result?.content?.[0]?.text !== `Report signed by W${i}`) failures.push(`signed #${i}: ${JSON.stringify(signed)}`);
      }

      const long = await call('slow', { ms: 20_000, steps: 20 });
      const cancel = await task('tasks/cancel', long.body.result?.taskId ?? 'none');
      if (cancel.body.error) failures.push(`cancel #${i}: ${JSON.stringify(cancel.body.error)}`);
      const cancelled = await until(long.body.result.taskId, 'cancelled');
      if (cancelled?.status !== 'cancelled') failures.push(`cancelled #${i}: ${JSON.stringify(cancelled)}`);
    }
    expect(failures).toEqual([]);
    // Each cancellation reached the upstream as notifications/cancelled.
    expect(await eventually(() => log.of('cancelled', 'slow').length >= 20, 5000)).toBe(true);
  }, 240_000);

  it('the same requestState sent to both replicas at once: exactly one succeeds, the other gets -32602', async () => {
    for (let i = 0; i < 5; i++) {
      const first = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'echo_after_ask', arguments: { tag: `race${i}` } }, { caps: ELICIT });
      const retry = { name: 'echo_after_ask', arguments: { tag: `race${i}` }, requestState: first.body.result.requestState, inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'X' } } } };
      const answers = await Promise.all([rpc(`${a.base}/mcp/f`, 'tools/call', retry, { caps: ELICIT }), rpc(`${b.base}/mcp/f`, 'tools/call', retry, { caps: ELICIT })]);
      expect(answers.filter((r) => r.body.result?.content?.[0]?.text === `tag=race${i} action=accept name=X`)).toHaveLength(1);
      expect(answers.filter((r) => r.body.error?.code === -32602)).toHaveLength(1);
    }
  });
});

describe.skipIf(!infraInstalled)('replay mode across replicas, and a replica that stops', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;
  const log = new FixtureLog();
  const questionFile = join(mkdtempSync(join(tmpdir(), 'mrtr-question-')), 'question.txt');

  beforeAll(async () => {
    redis = await startRedis();
    const upstream = { ...fixtureStdio(log, { FIXTURE_QUESTION_FILE: questionFile }), input: { mode: 'park', tools: { drifting_ask: { mode: 'replay' }, three_rounds: { mode: 'replay' } } } };
    const cfg = replicaConfig(redis.url, upstream);
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
  }, 60_000);
  afterAll(async () => {
    for (const g of [a, b]) g?.child.kill('SIGKILL');
    await Promise.all([a?.exited, b?.exited]);
    await redis?.stop();
  });

  const leased = async (g: CliGateway) => {
    const text = await (await fetch(`${g.base}/metrics`)).text();
    return [...text.matchAll(/mrtr_upstream_sessions\{upstream="f",state="leased"\} (\d+)/g)].reduce((n, m) => n + Number(m[1]), 0);
  };

  it('replay: three rounds answered on alternating replicas complete; while waiting no session is leased anywhere; a changed question is asked again', async () => {
    const caps = { ...ELICIT, sampling: {}, roots: {} };
    const call = (g: CliGateway, params: Record<string, unknown>) => rpc(`${g.base}/mcp/f`, 'tools/call', { name: 'three_rounds', arguments: {}, ...params }, { caps });
    let r = await call(a, {});
    const answers: Record<string, unknown> = {
      'elicitation/create': { action: 'accept', content: { topic: 'cranes' } },
      'sampling/createMessage': { role: 'assistant', model: 'm', content: { type: 'text', text: 'a line' } },
      'roots/list': { roots: [{ uri: 'file:///cranes' }] },
    };
    const replicas = [b, a, b];
    const keys: string[] = [];
    for (let round = 0; r.body.result?.resultType === 'input_required'; round++) {
      expect(round).toBeLessThan(3);
      expect(await leased(a)).toBe(0);
      expect(await leased(b)).toBe(0);
      const [key, request] = Object.entries(r.body.result.inputRequests as Record<string, { method: string }>)[0]!;
      keys.push(key);
      r = await call(replicas[round]!, { requestState: r.body.result.requestState, inputResponses: { [key]: answers[request.method] } });
    }
    // Keys stay unique over the whole call.
    expect(new Set(keys).size).toBe(3);
    expect(JSON.parse(r.body.result.content[0].text)).toEqual({ topic: 'cranes', line: 'a line', roots: ['file:///cranes'] });

    // drifting_ask: its first question changes between runs, so the recorded answer is not reused.
    writeFileSync(questionFile, 'question one');
    const drift = (g: CliGateway, params: Record<string, unknown>) => rpc(`${g.base}/mcp/f`, 'tools/call', { name: 'drifting_ask', arguments: {}, ...params }, { caps: ELICIT });
    const q1 = await drift(a, {});
    expect(q1.body.result.inputRequests['elicitation-1'].params.message).toBe('Answer question one');
    const q2 = await drift(b, { requestState: q1.body.result.requestState, inputResponses: { 'elicitation-1': { action: 'accept', content: { answer: 'one' } } } });
    expect(q2.body.result.inputRequests['elicitation-2'].params.message).toBe('Who answered?');
    writeFileSync(questionFile, 'question two');
    const q3 = await drift(a, { requestState: q2.body.result.requestState, inputResponses: { 'elicitation-2': { action: 'accept', content: { name: 'Ann' } } } });
    // The first question now reads differently: it is asked again, under a new key.
    const asked = Object.values(q3.body.result.inputRequests) as { params: { message: string } }[];
    expect(asked.map((x) => x.params.message)).toEqual(['Answer question two']);
    const q4 = await drift(b, { requestState: q3.body.result.requestState, inputResponses: { [Object.keys(q3.body.result.inputRequests)[0]!]: { action: 'accept', content: { answer: 'two' } } } });
    const done = q4.body.result.resultType === 'complete' ? q4 : await drift(a, { requestState: q4.body.result.requestState, inputResponses: { [Object.keys(q4.body.result.inputRequests)[0]!]: { action: 'accept', content: { name: 'Bo' } } } });
    expect(done.body.result.content[0].text).toMatch(/^question two: two by (Ann|Bo)$/);
  }, 120_000);

  it('the replica holding a parked call stops: the retry gets a clear error at once, and its task reads failed with the reason', async () => {
    const parked = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT });
    expect(parked.body.result.resultType).toBe('input_required');
    const task = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 30_000, steps: 30 } }, { caps: TASKS });
    const taskId = task.body.result.taskId as string;
    // The other replica is warm (it knows the upstream's era), so what follows measures the failure only.
    expect((await rpc(`${b.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } })).body.result.content[0].text).toBe('slept 5ms');
    a.child.kill('SIGKILL');
    await a.exited;
    const started = Date.now();
    const retry = await rpc(`${b.base}/mcp/f`, 'tools/call', {
      name: 'ask_name',
      arguments: {},
      requestState: parked.body.result.requestState,
      inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Late' } } },
    }, { caps: ELICIT });
    expect(retry.body.error).toMatchObject({ code: -32603, data: { reason: 'replica-gone' } });
    expect(retry.body.error.message).toMatch(/stopped; start the call again/);
    expect(Date.now() - started).toBeLessThan(2000);
    // Once its heartbeat is gone (1 s), the task it ran reads failed, with the reason.
    await new Promise((r) => setTimeout(r, 1200));
    const got = await rpc(`${b.base}/mcp/f`, 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
    expect(got.body.result).toMatchObject({ status: 'failed', error: { code: -32603, data: { reason: 'replica-gone' } } });
  }, 60_000);
});

describe.skipIf(!infraInstalled)('Redis stopped and started again', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;

  beforeAll(async () => {
    redis = await startRedis();
    const cfg = replicaConfig(redis.url, fixtureStdio());
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
  }, 60_000);
  afterAll(async () => {
    for (const g of [a, b]) g?.child.kill('SIGKILL');
    await Promise.all([a?.exited, b?.exited]);
    await redis?.stop();
  });

  it('plain calls keep working, readiness turns 503 and back, and tasks and forwarded retries work after the restart', async () => {
    const plain = async (g: CliGateway) => (await rpc(`${g.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } })).body.result?.content?.[0]?.text;
    expect(await plain(a)).toBe('slept 5ms');
    expect((await fetch(`${a.base}/readyz`)).status).toBe(200);

    await redis.stop();
    expect(await eventually(() => false, 300)).toBe(false);
    const down = await fetch(`${a.base}/readyz`);
    expect(down.status).toBe(503);
    expect((await down.json()).store).toMatch(/cannot be reached/);
    expect(await plain(a)).toBe('slept 5ms');
    expect(await plain(b)).toBe('slept 5ms');
    // What needs the store fails fast, with a clear error.
    const started = Date.now();
    const taskDown = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } }, { caps: TASKS });
    expect(taskDown.body.error).toMatchObject({ code: -32603, data: { reason: 'store-unavailable' } });
    expect(Date.now() - started).toBeLessThan(2000);

    await redis.start();
    let ready = false;
    for (let i = 0; i < 50 && !ready; i++) {
      ready = (await fetch(`${a.base}/readyz`)).status === 200 && (await fetch(`${b.base}/readyz`)).status === 200;
      if (!ready) await new Promise((r) => setTimeout(r, 200));
    }
    expect(ready).toBe(true);
    const t = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 20, steps: 1 } }, { caps: TASKS });
    expect(t.body.result.resultType).toBe('task');
    const first = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT });
    // Let both replicas' heartbeats reach the restarted Redis.
    await new Promise((r) => setTimeout(r, 500));
    const viaB = await rpc(`${b.base}/mcp/f`, 'tools/call', {
      name: 'ask_name',
      arguments: {},
      requestState: first.body.result.requestState,
      inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Back' } } },
    }, { caps: ELICIT });
    expect(viaB.body.result.content[0].text).toBe('Hello, Back!');
  }, 60_000);
});

