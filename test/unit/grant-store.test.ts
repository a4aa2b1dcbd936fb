/**
 * Grant storage: the sealed box that encrypts tokens at rest (rotation, binding to its context,
 * tampering), and the grant store in memory and on a real Redis (src/store/grants.ts,
 * src/store/redis.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/observability/log.js';
import { SealedBox } from '../../src/security/sealed-box.js';
import { MemoryGrantStore, type GrantStore, type StoredGrant } from '../../src/store/grants.js';
import { RedisStore } from '../../src/store/redis.js';
import { eventually } from '../helpers/fixture.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';

const OLD = { kid: 'old', secret: 'the-old-credentials-secret-of-32-chars!' };
const NEW = { kid: 'new', secret: 'the-new-credentials-secret-of-32-chars!' };

describe('SealedBox', () => {
  it('opens what it sealed, for the same context only', () => {
    const box = new SealedBox([NEW]);
    const sealed = box.seal({ accessToken: 'at-secret' }, 'grant\nup\nalice');
    expect(sealed).not.toContain('at-secret');
    expect(box.open(sealed, 'grant\nup\nalice')).toEqual({ accessToken: 'at-secret' });
    expect(box.open(sealed, 'grant\nup\nbob')).toBeUndefined();
    expect(box.open(sealed, 'consent-link')).toBeUndefined();
  });

  it('rotates: the first key seals, every key opens, a removed key no longer opens', () => {
    const before = new SealedBox([OLD]).seal('v', 'c');
    const rotated = new SealedBox([NEW, OLD]);
    expect(rotated.open(before, 'c')).toBe('v');
    expect(rotated.seal('v', 'c').startsWith(`${Buffer.from('new').toString('base64url')}.`)).toBe(true);
    expect(new SealedBox([NEW]).open(before, 'c')).toBeUndefined();
  });

  it('refuses anything altered or malformed', () => {
    const box = new SealedBox([NEW]);
    const [kid, iv, ct, tag] = box.seal({ a: 1 }, 'c').split('.') as [string, string, string, string];
    // The first character's six bits all belong to the first byte (a last character may carry unused bits).
    const flipped = `${ct.startsWith('A') ? 'B' : 'A'}${ct.slice(1)}`;
    for (const bad of [`${kid}.${iv}.${flipped}.${tag}`, `${kid}.${iv}.${ct}`, 'x', '', 42, undefined, `${kid}.${iv}.${ct}.${tag}.x`])
      expect(box.open(bad, 'c')).toBeUndefined();
  });
});

const grant = (principal: string, upstream = 'up'): StoredGrant => ({
  upstream,
  principal,
  createdAtMs: 1,
  expiresAtMs: 2,
  refreshable: true,
  scope: 'mcp',
  sealed: `sealed-${principal}`,
});

/** The store contract, for memory and Redis. */
function storeContract(store: () => Promise<GrantStore>): void {
  it('keeps one grant per principal and upstream, lists and deletes them', async () => {
    const s = await store();
    await s.put(grant('iss#alice'));
    await s.put(grant('iss#bob'));
    await s.put(grant('iss#alice', 'other'));
    await s.put({ ...grant('iss#alice'), sealed: 'replaced' });
    expect(await s.get('up', 'iss#alice')).toEqual({ ...grant('iss#alice'), sealed: 'replaced' });
    expect((await s.list('up')).map((g) => g.principal).sort()).toEqual(['iss#alice', 'iss#bob']);
    expect(await s.list()).toHaveLength(3);
    expect(await s.delete('up', 'iss#alice')).toBe(true);
    expect(await s.delete('up', 'iss#alice')).toBe(false);
    expect(await s.get('up', 'iss#alice')).toBeUndefined();
  });

  it('keeps the first registered client unless told to replace it', async () => {
    const s = await store();
    expect(await s.client('up')).toBeUndefined();
    expect(await s.putClient('up', 'first')).toBe('first');
    expect(await s.putClient('up', 'second')).toBe('first');
    expect(await s.putClient('up', 'third', true)).toBe('third');
    expect(await s.client('up')).toBe('third');
  });

  it('gives a grant’s refresh lock to one holder at a time, until released or expired', async () => {
    const s = await store();
    const release = await s.lock('up', 'iss#alice', 60_000);
    expect(release).toBeTypeOf('function');
    expect(await s.lock('up', 'iss#alice', 60_000)).toBeUndefined();
    expect(await s.lock('up', 'iss#bob', 60_000)).toBeTypeOf('function');
    await release!();
    const short = await s.lock('up', 'iss#alice', 50);
    expect(short).toBeTypeOf('function');
    expect(await eventually(async () => (await s.lock('up', 'iss#alice', 60_000)) !== undefined)).toBe(true);
    // A release after expiry leaves the new holder's lock alone.
    await short!();
    expect(await s.lock('up', 'iss#alice', 60_000)).toBeUndefined();
  });

  it('keeps a consent failure for its time, per principal and upstream', async () => {
    const s = await store();
    const before = Date.now();
    await s.fail('up', 'iss#alice', 'access was denied', 150);
    const f = await s.failure('up', 'iss#alice');
    expect(f?.why).toBe('access was denied');
    expect(f!.atMs).toBeGreaterThanOrEqual(before);
    expect(await s.failure('up', 'iss#bob')).toBeUndefined();
    expect(await s.failure('other', 'iss#alice')).toBeUndefined();
    expect(await eventually(async () => (await s.failure('up', 'iss#alice')) === undefined)).toBe(true);
  });
}

describe('MemoryGrantStore', () => {
  storeContract(async () => new MemoryGrantStore());
});

describeWith(['redis-server'], 'RedisStore grants', () => {
  let redis: TestRedis;
  const stores: RedisStore[] = [];
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await redis?.stop();
  });
  storeContract(async () => {
    // A fresh key prefix per test: each begins empty.
    const s = RedisStore.create({ url: redis.url, keyPrefix: `t${stores.length}:`, connectTimeoutMs: 2000, log: silentLogger });
    stores.push(s);
    expect(await eventually(async () => (await s.unavailable()) === undefined)).toBe(true);
    return s.grants;
  });
});
