/**
 * The per-caller limits counted with rate-limiter-flexible: the rate's window, the in-memory
 * limiter (one replica), and failing open to memory when Redis cannot be reached (a real client
 * aimed at a port nothing listens on): one warning, every request counted in the metric.
 */
import { describe, expect, it } from 'vitest';
import { CallerLimiter, rateWindow } from '../../src/http/frontdoor.js';
import { UpstreamLimits } from '../../src/http/upstream-limits.js';
import { LocalSlots, StoreFallback } from '../../src/store/limiters.js';
import { RedisStore } from '../../src/store/redis.js';
import { MemoryStore } from '../../src/store/shared.js';
import { silentLogger } from '../../src/observability/log.js';
import { memoryLogger } from '../helpers/gateway.js';
import { eventually } from '../helpers/fixture.js';
import { freePort } from '../helpers/infra.js';

const quiet = () => new StoreFallback(silentLogger, () => {});

describe('rateWindow', () => {
  it('counts burst requests per burst/rate seconds, in whole seconds, keeping the long-run rate', () => {
    expect(rateWindow(50, 100)).toEqual({ points: 100, durationSec: 2 });
    expect(rateWindow(5, 5)).toEqual({ points: 5, durationSec: 1 });
    expect(rateWindow(1, 5)).toEqual({ points: 5, durationSec: 5 });
    // A burst under one second's worth: a one-second window at the rate.
    expect(rateWindow(10, 3)).toEqual({ points: 10, durationSec: 1 });
    expect(rateWindow(0.5, 1)).toEqual({ points: 1, durationSec: 2 });
  });
});

describe('CallerLimiter on the memory store', () => {
  it('allows a window of requests per caller, then answers the seconds until the window ends', async () => {
    const limiter = new CallerLimiter({ requestsPerSecond: 2, burst: 4, maxConcurrent: 10 }, new MemoryStore(10), quiet());
    const waits = [];
    for (let i = 0; i < 6; i++) waits.push(await limiter.take('alice'));
    expect(waits.slice(0, 4)).toEqual([0, 0, 0, 0]);
    expect(waits[4]).toBeGreaterThanOrEqual(1);
    expect(waits[4]).toBeLessThanOrEqual(2);
    // Another caller has its own window.
    expect(await limiter.take('bob')).toBe(0);
    // Once the window ended the caller is allowed again.
    expect(await eventually(async () => (await limiter.take('alice')) === 0, 4000, 100)).toBe(true);
  });

  it('without a rate allows everything', async () => {
    const limiter = new CallerLimiter({ requestsPerSecond: undefined, burst: 1, maxConcurrent: 1 }, new MemoryStore(10), quiet());
    for (let i = 0; i < 50; i++) expect(await limiter.take('alice')).toBe(0);
  });

  it('holds maxConcurrent in flight per caller; a release (idempotent) frees one slot', async () => {
    const limiter = new CallerLimiter({ requestsPerSecond: undefined, burst: 1, maxConcurrent: 2 }, new MemoryStore(10), quiet());
    const one = await limiter.enter('alice');
    const two = await limiter.enter('alice');
    expect(one && two).toBeTruthy();
    expect(await limiter.enter('alice')).toBeUndefined();
    expect(await limiter.enter('bob')).toBeTruthy();
    one!();
    one!();
    expect(await limiter.enter('alice')).toBeTruthy();
    expect(await limiter.enter('alice')).toBeUndefined();
  });

  it('LocalSlots counts exactly, without expiry', () => {
    const slots = new LocalSlots(1);
    const leave = slots.enter('k');
    expect(slots.enter('k')).toBeUndefined();
    leave!();
    expect(slots.enter('k')).toBeTruthy();
  });
});

describe('Redis unreachable', () => {
  it('fails open to a per-replica count in memory: limits still hold, one warning, every request counted', async () => {
    const port = await freePort();
    const store = RedisStore.create({ url: `redis://127.0.0.1:${port}`, keyPrefix: 't:', connectTimeoutMs: 200, log: silentLogger });
    const { log, lines } = memoryLogger();
    const counted: string[] = [];
    const limiter = new CallerLimiter(
      { requestsPerSecond: 1, burst: 3, maxConcurrent: 1 },
      store,
      new StoreFallback(log, (limit) => counted.push(limit)),
    );
    try {
      const waits = [];
      for (let i = 0; i < 5; i++) waits.push(await limiter.take('alice'));
      expect(waits.filter((w) => w === 0)).toHaveLength(3);
      const leave = await limiter.enter('alice');
      expect(leave).toBeTruthy();
      expect(await limiter.enter('alice')).toBeUndefined();
      leave!();
      expect(await limiter.enter('alice')).toBeTruthy();
      expect(counted.filter((l) => l === 'rate')).toHaveLength(5);
      expect(counted.filter((l) => l === 'concurrency')).toHaveLength(3);
      const warnings = lines().filter((l) => l.level === 40);
      expect(warnings).toHaveLength(1);
      expect(warnings[0]!.msg).toBe('shared store unreachable: limits counted per replica in memory until it is back');
      expect(warnings[0]!.limit).toBe('rate');
    } finally {
      await store.close();
    }
  });
});

describe('UpstreamLimits on the memory store', () => {
  const upstreams = {
    f: { limits: { rateLimit: { requestsPerSecond: 1, burst: 3 }, tools: { write: { requestsPerSecond: 1, burst: 1 } } } },
    g: { limits: { tools: {} } },
  } as unknown as ConstructorParameters<typeof UpstreamLimits>[0];
  const call = (id: number, name: string) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: {} } });

  it("counts a caller's requests to an upstream, and its tools/call of a limited tool; notifications and responses count nothing", async () => {
    const limits = new UpstreamLimits(upstreams, new MemoryStore(10), quiet());
    expect(await limits.check('f', call(1, 'write'), 'alice')).toBeUndefined();
    const tool = await limits.check('f', call(2, 'write'), 'alice');
    expect(tool).toMatchObject({ limit: 'tool', message: expect.stringMatching(/^Rate limit of tool write on upstream f exceeded/) });
    expect(tool!.retryAfterSec).toBeGreaterThanOrEqual(1);
    // Not counted: a notification, a response; another caller; an upstream without limits.
    for (let i = 0; i < 5; i++) {
      expect(await limits.check('f', { jsonrpc: '2.0', method: 'notifications/initialized' }, 'alice')).toBeUndefined();
      expect(await limits.check('f', { jsonrpc: '2.0', id: i, result: {} }, 'alice')).toBeUndefined();
      expect(await limits.check('g', call(i, 'write'), 'alice')).toBeUndefined();
    }
    expect(await limits.check('f', call(3, 'write'), 'bob')).toBeUndefined();
    // The upstream's window (3 requests per 3 s) took the two calls above, and counts each request of a batch.
    expect(await limits.check('f', [call(4, 'read'), call(5, 'read')], 'alice')).toMatchObject({
      limit: 'upstream',
      message: expect.stringMatching(/^Rate limit of upstream f exceeded/),
    });
    expect(await limits.check('f', call(6, 'read'), 'alice')).toMatchObject({
      limit: 'upstream',
      message: expect.stringMatching(/^Rate limit of upstream f exceeded/),
    });
  });
});
