/**
 * Closing the Redis store when Redis cannot be reached: never reachable (a closed port), or gone
 * after it was (a real redis-server stopped). `close()` ends at once instead of waiting for a
 * connection that does not come, and the store's commands then fail.
 */
import { describe, expect, it } from 'vitest';
import { RedisStore } from '../../src/store/redis.js';
import { silentLogger } from '../../src/observability/log.js';
import { eventually } from '../helpers/fixture.js';
import { freePort, startRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';

/** How long `close()` took, in ms; Infinity when it had not ended after 2 s. */
async function closing(store: RedisStore): Promise<number> {
  const t0 = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<number>((r) => (timer = setTimeout(() => r(Infinity), 2000)));
  const took = await Promise.race([store.close().then(() => performance.now() - t0), late]);
  clearTimeout(timer);
  return took;
}

describe('RedisStore.close with Redis never reachable', () => {
  it('resolves within a second on a closed port', async () => {
    const port = await freePort();
    const store = RedisStore.create({ url: `redis://127.0.0.1:${port}`, keyPrefix: 'c:', connectTimeoutMs: 200, log: silentLogger });
    expect(await store.unavailable()).toMatch(/cannot be reached/);
    expect(await closing(store)).toBeLessThan(1000);
    await expect(store.tasks.get('t')).rejects.toThrow();
  });
});

describeWith(['redis-server'], 'RedisStore.close with Redis gone', () => {
  it('resolves within a second once the Redis it reached has stopped', async () => {
    const redis = await startRedis();
    const store = RedisStore.create({ url: redis.url, keyPrefix: 'c:', connectTimeoutMs: 200, log: silentLogger });
    try {
      expect(await eventually(async () => (await store.unavailable()) === undefined)).toBe(true);
      await redis.stop();
      expect(await eventually(async () => /cannot be reached/.test((await store.unavailable()) ?? ''))).toBe(true);
      expect(await closing(store)).toBeLessThan(1000);
    } finally {
      await redis.stop();
    }
  });
});
