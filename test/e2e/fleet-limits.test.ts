/**
 * Per-principal limits across replicas: two gateway processes on one real Redis behind a real
 * haproxy (the recipe's config) hold `limits.rateLimit` and `maxConcurrentPerPrincipal` for the
 * whole fleet; the same pair on memory stores counts per replica (so admits about twice as much);
 * with Redis stopped each replica counts alone again (one warning, the fallback metric), and once
 * Redis is back the fleet counts together again.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { rpc } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { startCli, type CliGateway } from '../helpers/cli.js';
import { startHaproxy, startRedis, type TestBalancer, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import { scaled } from '../helpers/budget.js';

const INFRA = ['redis-server', 'haproxy'] as const;
/** The rate limit: N requests per second, burst N (one-second windows). */
const N = 5;
const PRINCIPALS = ['rate', 'slots', 'down', 'back', 'down-slots'] as const;
const keyOf = (principal: string) => `key-of-${principal}-0123456789abcdef`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const FALLBACK_WARNING = 'shared store unreachable: limits counted per replica in memory until it is back';

/** Two replicas of one config (on Redis when `redisUrl` is given, else each on its memory store) behind haproxy. */
interface Pair {
  a: CliGateway;
  b: CliGateway;
  lb: TestBalancer;
  log: FixtureLog;
  stop(): Promise<void>;
}

async function startPair(redisUrl?: string): Promise<Pair> {
  const log = new FixtureLog();
  const cfg = {
    ...(redisUrl
      ? {
          store: { kind: 'redis', url: redisUrl, connectTimeoutMs: 500 },
          replicas: { secret: 'replica-secret-0123456789abcdefghij', heartbeatMs: 200, deadAfterMs: 1000 },
        }
      : {}),
    auth: { mode: 'apiKeys', keys: PRINCIPALS.map((p) => ({ principal: p, key: keyOf(p) })) },
    limits: { rateLimit: { requestsPerSecond: N, burst: N }, maxConcurrentPerPrincipal: 2 },
    upstreams: { f: { ...fixtureStdio(log), maxSessions: 8, maxSessionsPerPrincipal: 8 } },
  };
  const [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
  const lb = await startHaproxy([a.port, b.port]);
  return {
    a,
    b,
    lb,
    log,
    stop: async () => {
      await lb.stop();
      for (const g of [a, b]) g.child.kill('SIGKILL');
      await Promise.all([a.exited, b.exited]);
    },
  };
}

/**
 * A request of `principal` every `everyMs` through `base` for `ms` (each sent on time, not after
 * the previous answer): how many were admitted (202) and refused (429), and the seconds from the
 * first sent to the last answered.
 */
async function paced(base: string, principal: string, ms = 2000, everyMs = 50) {
  const started = performance.now();
  const sent: Promise<{ status: number; retryAfter: string | null }>[] = [];
  for (let i = 0; i * everyMs < ms; i++) {
    sent.push(
      fetch(`${base}/mcp/f`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-protocol-version': '2026-07-28',
          'mcp-method': 'notifications/initialized',
          authorization: `Bearer ${keyOf(principal)}`,
        },
        body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
      }).then(async (r) => (await r.text(), { status: r.status, retryAfter: r.headers.get('retry-after') })),
    );
    await sleep(started + (i + 1) * everyMs - performance.now());
  }
  const answers = await Promise.all(sent);
  const elapsedSec = (performance.now() - started) / 1000;
  const admitted = answers.filter((r) => r.status === 202).length;
  const refused = answers.filter((r) => r.status === 429);
  expect(admitted + refused.length).toBe(answers.length);
  for (const r of refused) expect(Number(r.retryAfter)).toBeGreaterThanOrEqual(1);
  return { admitted, refused: refused.length, elapsedSec };
}

/** The most a fleet counting together admits over `elapsedSec`: N per second plus the burst. */
const fleetBound = (elapsedSec: number) => N * elapsedSec + N;

/** A call of the fixture's `slow` tool (`ms` long) by `principal` to one replica. */
const slowCall = (g: CliGateway, principal: string, ms: number) =>
  rpc(
    `${g.base}/mcp/f`,
    'tools/call',
    { name: 'slow', arguments: { ms, steps: 1 } },
    { headers: { authorization: `Bearer ${keyOf(principal)}` } },
  );

/** Two slow calls of `principal` in flight on `pair.a`, then a third on `pair.b`: its answer. */
async function thirdOnOtherReplica(pair: Pair, principal: string) {
  const before = pair.log.of('call', 'slow').length;
  const held = [slowCall(pair.a, principal, 3000), slowCall(pair.a, principal, 3000)];
  expect(await eventually(() => pair.log.of('call', 'slow').length >= before + 2, scaled(15_000))).toBe(true);
  const third = await slowCall(pair.b, principal, 10);
  const done = await Promise.all(held);
  expect(done.map((r) => r.body.result?.content?.[0]?.text)).toEqual(['slept 3000ms', 'slept 3000ms']);
  return third;
}

/** The sum of metric `name` with `labels` on replica `g`. */
async function metric(g: CliGateway, name: string, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${g.base}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && want.every((w) => l.includes(w)))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

describeWith(INFRA, 'limits of two replicas behind haproxy', () => {
  let redis: TestRedis;
  let shared: Pair;
  let alone: Pair;

  beforeAll(async () => {
    redis = await startRedis();
    shared = await startPair(redis.url);
    alone = await startPair();
  }, scaled(90_000));
  afterAll(async () => {
    await Promise.all([shared?.stop(), alone?.stop()]);
    await redis?.stop();
  });

  it(
    'a per-principal rate of N per second holds for the fleet on Redis; on memory stores each replica admits its own',
    async () => {
      const fleet = await paced(shared.lb.base, 'rate');
      expect(fleet.admitted).toBeGreaterThanOrEqual(N);
      expect(fleet.admitted).toBeLessThanOrEqual(fleetBound(fleet.elapsedSec));
      const perReplica = await paced(alone.lb.base, 'rate');
      expect(perReplica.admitted).toBeGreaterThan(fleetBound(perReplica.elapsedSec));
    },
    scaled(60_000),
  );

  it(
    'maxConcurrentPerPrincipal 2: with two calls in flight on one replica, a third on the other gets 429 on Redis, and is served on memory stores',
    async () => {
      const refused = await thirdOnOtherReplica(shared, 'slots');
      expect(refused.status).toBe(429);
      expect(refused.headers.get('retry-after')).toBe('1');
      expect(refused.body.error.message).toMatch(/in flight/);
      // The slots came back on leaving: the same caller is served again.
      expect((await slowCall(shared.b, 'slots', 10)).body.result.content[0].text).toBe('slept 10ms');

      const served = await thirdOnOtherReplica(alone, 'slots');
      expect(served.body.result.content[0].text).toBe('slept 10ms');
    },
    scaled(60_000),
  );

  it(
    'Redis stopped: each replica counts alone (one warning each, the fallback metric); Redis back: the fleet counts together again',
    async () => {
      const { a, b, lb } = shared;
      const warnings = (g: CliGateway) => g.logs.filter((l) => l.msg === FALLBACK_WARNING).length;
      const readiness = async () => Promise.all([a, b].map(async (g) => (await fetch(`${g.base}/readyz`)).status));
      await redis.stop();
      expect(await eventually(async () => (await readiness()).every((s) => s === 503), scaled(5000))).toBe(true);

      const down = await paced(lb.base, 'down');
      expect(down.admitted).toBeGreaterThan(fleetBound(down.elapsedSec));
      const third = await thirdOnOtherReplica(shared, 'down-slots');
      expect(third.body.result.content[0].text).toBe('slept 10ms');
      for (const g of [a, b]) {
        expect(warnings(g)).toBe(1);
        expect(await metric(g, 'mrtr_limits_store_fallback_total', { limit: 'rate' })).toBeGreaterThan(0);
        expect(await metric(g, 'mrtr_limits_store_fallback_total', { limit: 'concurrency' })).toBeGreaterThan(0);
      }

      await redis.start();
      expect(await eventually(async () => (await readiness()).every((s) => s === 200), scaled(10_000), 200)).toBe(true);
      const back = await paced(lb.base, 'back');
      expect(back.admitted).toBeLessThanOrEqual(fleetBound(back.elapsedSec));
      for (const g of [a, b]) {
        expect(g.logs.filter((l) => l.msg === 'shared store reachable: limits counted fleet-wide again')).toHaveLength(1);
        expect(warnings(g)).toBe(1);
      }
    },
    scaled(90_000),
  );
});
