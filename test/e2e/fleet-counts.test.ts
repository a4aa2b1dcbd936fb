/**
 * Sampling budgets and task quotas counted by all replicas together on a real Redis: two gateways
 * on the same Redis (each built as the CLI builds it), an LLM provider mocked on 127.0.0.1
 * (test/helpers/llm.ts), the fixture upstream over stdio. And Redis stopped: each replica counts in
 * its own memory, with one warning line and a metric.
 */
import { createClient } from 'redis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import { openaiCompletion, startFakeLlm, type FakeLlm } from '../helpers/llm.js';
import { textOf } from '../helpers/v2client.js';
import { silentLogger, type Logger } from '../../src/observability/log.js';
import { TaskQuota } from '../../src/cells/bridge/tasks/quota.js';
import { TokenBudgets } from '../../src/sampling/budget.js';
import { SamplingError } from '../../src/sampling/errors.js';
import { StoreFallback } from '../../src/store/limiters.js';
import { RedisStore } from '../../src/store/redis.js';

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

  it('Redis stopped: budgets and quotas are counted in each replica, with one warning line and mrtr_limits_store_fallback_total by limit', async () => {
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
      // One warning for the outage (not one per request), naming the first limit that fell back
      // (the front door's, checked before any of these).
      const warned = mem.lines().filter((l) => l.msg === 'shared store unreachable: limits counted per replica in memory until it is back');
      expect(warned).toEqual([expect.objectContaining({ level: 40, limit: expect.any(String), err: expect.any(String) })]);
    } finally {
      await redis.start();
    }
  });
});

describeWith(['redis-server'], 'the shared counters, two replicas built as the gateway builds them', () => {
  const stores: RedisStore[] = [];
  afterAll(async () => void (await Promise.all(stores.map((s) => s.close()))));
  /** Two stores on the test's Redis under one fresh prefix, once both are reachable. */
  async function twoStores(): Promise<[RedisStore, RedisStore]> {
    const keyPrefix = `counters-${stores.length}-`;
    const made = [0, 1].map(() => RedisStore.create({ url: redis.url, keyPrefix, connectTimeoutMs: 400, log: silentLogger }));
    stores.push(...made);
    expect(await eventually(async () => (await Promise.all(made.map((s) => s.unavailable()))).every((u) => u === undefined), 5000)).toBe(
      true,
    );
    return made as [RedisStore, RedisStore];
  }
  const refusal = async (p: Promise<unknown>) => {
    const e = await p.then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(e).toBeInstanceOf(SamplingError);
    return e as SamplingError;
  };

  it('token windows: fixed, shared, a hold settles to what was spent, a refused request counts nothing, and the window ends at retryAfterMs', async () => {
    const [a, b] = await twoStores();
    const fellBack: string[] = [];
    const fallback = new StoreFallback(silentLogger, (limit) => fellBack.push(limit));
    const budgets = (s: RedisStore) => new TokenBudgets({ windows: s.counters.tokens, fallback });
    const one = budgets(a);
    const two = budgets(b);
    const limit = [{ scope: 'upstream' as const, key: 'u', limit: 100, windowMs: 1500 }];
    const held = await one.acquire(limit, 60);
    // 60 held on replica 1: 60 more do not fit on replica 2, and the refusal leaves nothing behind.
    const err = await refusal(two.acquire(limit, 60));
    expect(err.message).toContain('60 of 100 tokens spent or held by requests in flight, on all replicas');
    expect(await refusal(two.acquire(limit, 60))).toMatchObject({ message: expect.stringContaining('60 of 100') });
    held.commit(30);
    // 30 spent: 60 fit now, and then 10 do not.
    (await two.acquire(limit, 60)).commit(60);
    const full = await refusal(one.acquire(limit, 20));
    expect(full.message).toContain('90 of 100');
    expect(full.data.retryAfterMs).toBeGreaterThan(0);
    expect(full.data.retryAfterMs).toBeLessThanOrEqual(1500);
    // Everything the window counted goes when it ends.
    await new Promise((r) => setTimeout(r, (full.data.retryAfterMs as number) + 50));
    (await one.acquire(limit, 100)).release();
    (await two.acquire(limit, 100)).release();
    expect(fellBack).toEqual([]);
  });

  it('task quota: records held on replica 1 count on replica 2, result bytes are shared, and a record leaves the counts when its ttl ends', async () => {
    const [a, b] = await twoStores();
    const limits = { maxRecordsPerPrincipal: 2, maxResultBytesPerPrincipal: 100, maxResultBytes: 150 };
    const fellBack: string[] = [];
    const fallback = new StoreFallback(silentLogger, (limit) => fellBack.push(limit));
    const quota = (s: RedisStore) => new TaskQuota(limits, { quota: s.counters.taskQuota, fallback });
    const one = quota(a);
    const two = quota(b);
    expect(await one.hold('t1', 'alice', 60_000)).toBe(true);
    expect(await one.hold('t2', 'alice', 800)).toBe(true);
    expect(await two.admits('alice')).toBe(false);
    expect(await two.hold('t3', 'alice', 60_000)).toBe(false);
    expect(await two.hold('t4', 'bob', 60_000)).toBe(true);
    expect(await one.charge('t1', 80)).toBeUndefined();
    expect(await one.charge('t2', 30)).toBe('maxResultBytesPerPrincipal');
    expect(await two.charge('t4', 80)).toBe('maxResultBytes');
    expect(await two.charge('t4', 70)).toBeUndefined();
    // t2's ttl ends: alice has room again on either replica.
    expect(await eventually(() => two.admits('alice'), 5000)).toBe(true);
    one.drop('t1');
    expect(await eventually(async () => (await two.charge('t4', 100)) === undefined, 5000)).toBe(true);
    expect(fellBack).toEqual([]);
  });

  it('a Redis that does not answer within store.connectTimeoutMs counts as unreachable: the request is counted in memory', async () => {
    const [a] = await twoStores();
    const fellBack: string[] = [];
    const budgets = new TokenBudgets({
      windows: a.counters.tokens,
      fallback: new StoreFallback(silentLogger, (limit) => fellBack.push(limit)),
    });
    const admin = createClient({ url: redis.url });
    await admin.connect();
    try {
      await admin.sendCommand(['CLIENT', 'PAUSE', '2000', 'ALL']);
      const started = Date.now();
      (await budgets.acquire([{ scope: 'upstream', key: 'u', limit: 100, windowMs: 60_000 }], 10)).release();
      expect(Date.now() - started).toBeLessThan(1500);
      expect(fellBack).toEqual(['sampling-budget']);
    } finally {
      await admin.sendCommand(['CLIENT', 'UNPAUSE']);
      await admin.quit();
    }
  });
});
