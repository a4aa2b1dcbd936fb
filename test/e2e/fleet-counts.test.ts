/**
 * Sampling budgets and task quotas counted by all replicas together on a real Redis: two gateways
 * on the same Redis (each built as the CLI builds it), an LLM provider mocked on 127.0.0.1
 * (test/helpers/llm.ts), the fixture upstream over stdio. And Redis stopped: each replica counts in
 * its own memory, with one warning line and a metric.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import { openaiCompletion, startFakeLlm, type FakeLlm } from '../helpers/llm.js';
import { textOf } from '../helpers/v2client.js';
import type { Logger } from '../../src/observability/log.js';

process.env.TEST_FLEET_OPENAI_KEY = 'sk-test-fleet-key-0123456789abcdef';
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
const KEYS = {
  mode: 'apiKeys',
  keys: [
    { principal: 'alice', key: 'key-of-alice-0123456789' },
    { principal: 'bob', key: 'key-of-bob-0123456789ab' },
  ],
};
const as = (who: 'alice' | 'bob') => ({ authorization: `Bearer ${KEYS.keys.find((k) => k.principal === who)!.key}` });

let redis: TestRedis;
let llm: FakeLlm;
const open: TestGateway[] = [];
const log = new FixtureLog();

beforeAll(async () => {
  redis = await startRedis();
  llm = await startFakeLlm('openai', () => ({ body: openaiCompletion({ content: 'short', usage: { prompt: 100, completion: 20 } }) }));
});
afterAll(async () => {
  await Promise.all(open.map((g) => g.close()));
  await llm?.close();
  await redis?.stop();
});

/** A replica on the test's Redis, with the fake provider as `p`, `upstream` as `f`, and `extra` config. */
async function replica(upstream: Record<string, unknown>, extra: Record<string, unknown> = {}, logger?: Logger): Promise<TestGateway> {
  const g = await startGateway(
    {
      store: { kind: 'redis', url: redis.url, keyPrefix: `fleet-${open.length}-` },
      replicas: { secret: 'a-replica-hop-secret-of-32-characters-or-more' },
      sampling: {
        providers: {
          p: {
            kind: 'openai',
            baseUrl: llm.baseUrl,
            apiKey: '${TEST_FLEET_OPENAI_KEY}',
            models: { m: { model: 'gpt-test' } },
            defaultModel: 'm',
          },
        },
      },
      upstreams: { f: { ...fixtureStdio(log), ...upstream } },
      ...extra,
    },
    logger ? { log: logger } : {},
  );
  open.push(g);
  return g;
}

/** Two replicas sharing one key prefix (the first's) on the test's Redis. */
async function pair(upstream: Record<string, unknown>, extra: Record<string, unknown> = {}): Promise<[TestGateway, TestGateway]> {
  const prefix = { store: { kind: 'redis', url: redis.url, keyPrefix: `fleet-pair-${open.length}-` } };
  return [await replica(upstream, { ...extra, ...prefix }), await replica(upstream, { ...extra, ...prefix })];
}

const summarize = (g: TestGateway) =>
  rpc(g.url('f'), 'tools/call', { name: 'summarize', arguments: { text: 'a paragraph' } }, { caps: {} });
const quick = (g: TestGateway, who: 'alice' | 'bob') =>
  rpc(g.url('f'), 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } }, { caps: TASKS, headers: as(who) });

/** The value of the sample `name{labels}` on `g`'s /metrics (0 when absent). */
async function sample(g: TestGateway, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${g.base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name}{${labels}}`));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

describeWith(['redis-server'], 'limits counted by all replicas on Redis', () => {
  it('sampling budget: tokens spent through replica 1 count on replica 2, whose request over the shared budget gets -32603 data.reason "budget"', async () => {
    const [one, two] = await pair({ sampling: { mode: 'provider', provider: 'p', budget: { tokensPerPrincipal: 150, windowMs: 60_000 } } });
    const asked = llm.requests.length;
    expect(textOf((await summarize(one)).body.result)).toContain('summary=short');
    // 120 tokens spent; the next request needs room for its maxTokens (100).
    const refused = await summarize(two);
    expect(refused.body.result.isError).toBe(true);
    expect(textOf(refused.body.result)).toMatch(
      /Sampling token budget of this principal on this upstream exhausted: 120 of 150 tokens spent or held by requests in flight, on all replicas, in the current window of 60000 ms; this request needs room for 100/,
    );
    const answer = log.of('response').at(-1)!;
    expect(answer.error).toMatchObject({ code: -32603, data: { reason: 'budget', scope: 'principal', limit: 150, windowMs: 60_000 } });
    expect(answer.error.data.retryAfterMs).toBeGreaterThan(50_000);
    expect(answer.error.data.retryAfterMs).toBeLessThanOrEqual(60_000);
    expect(llm.requests.length).toBe(asked + 1);
    expect(await sample(two, 'mrtr_sampling_budget_exhausted_total', 'upstream="f",scope="principal"')).toBe(1);
  });

  it('task quota: records created through replica 1 count on replica 2, and a place comes back when its record expires in Redis, with replica 1 gone', async () => {
    const [one, two] = await pair(
      { maxSessions: 8, maxSessionsPerPrincipal: 8, tasks: { taskAfterMs: 0, ttlMs: 5000 } },
      { auth: KEYS, tasks: { maxRecordsPerPrincipal: 2 } },
    );
    const { taskId } = (await quick(two, 'bob')).body.result;
    expect(taskId).toEqual(expect.any(String));
    const held: string[] = [];
    for (let i = 0; i < 2; i++) {
      const r = (await quick(one, 'alice')).body.result;
      expect(r?.resultType).toBe('task');
      held.push(r.taskId);
    }
    // Alice holds two records (on replica 1): on replica 2 her call is answered in the request.
    const inline = await quick(two, 'alice');
    expect(inline.body.result).toMatchObject({ resultType: 'complete', content: [{ type: 'text', text: 'slept 5ms' }] });
    // Replica 1 stops: its records still expire in Redis, and with them alice's places.
    await one.close();
    open.splice(open.indexOf(one), 1);
    const expired = async () =>
      (await rpc(two.url('f'), 'tasks/get', { taskId: held[1] }, { caps: TASKS, headers: { ...as('alice'), 'mcp-name': held[1]! } })).body
        .error?.code === -32602;
    expect(await eventually(expired, 15_000)).toBe(true);
    expect((await quick(two, 'alice')).body.result?.resultType).toBe('task');
  });

  it('Redis stopped: budgets and quotas are counted in each replica, with one warning line per limit and mrtr_limits_store_fallback_total', async () => {
    const mem = memoryLogger('info');
    const g = await replica(
      { sampling: { mode: 'provider', provider: 'p', budget: { tokensPerPrincipal: 150, windowMs: 60_000 } }, tasks: { taskAfterMs: 0 } },
      {},
      mem.log,
    );
    const asked = llm.requests.length;
    await redis.stop();
    try {
      // Counted in this replica's memory: the first is answered, the second is over the budget there.
      expect(textOf((await summarize(g)).body.result)).toContain('summary=short');
      expect(textOf((await summarize(g)).body.result)).toMatch(/120 of 150 tokens spent in the last 60000 ms/);
      expect(llm.requests.length).toBe(asked + 1);
      await quick(g, 'alice');
      await quick(g, 'alice');
      expect(await sample(g, 'mrtr_limits_store_fallback_total', 'limit="sampling-budget"')).toBe(2);
      expect(await sample(g, 'mrtr_limits_store_fallback_total', 'limit="task-quota"')).toBeGreaterThanOrEqual(2);
      const warned = mem
        .lines()
        .filter((l) => l.msg === 'shared store unreachable: limit counted per replica (in memory) until it is back');
      expect(warned.map((l) => l.limit).sort()).toEqual(['sampling-budget', 'task-quota']);
      expect(warned.every((l) => l.level === 40 && typeof l.err === 'string')).toBe(true);
    } finally {
      await redis.start();
    }
  });
});
