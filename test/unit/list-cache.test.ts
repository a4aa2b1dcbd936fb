/**
 * The list cache's rules that a real upstream cannot easily show (src/upstream/list-cache.ts): what
 * is not kept, the bound, per-caller credentials, and a listing begun before a drop.
 */
import { describe, expect, it } from 'vitest';
import { ListCache } from '../../src/upstream/list-cache.js';
import type { ModernResponse } from '../../src/upstream/modern.js';

const list = (ttlMs: number | undefined, cacheScope = 'public', extra: Record<string, unknown> = {}) => {
  let sent = 0;
  return {
    sent: () => sent,
    send: async (): Promise<ModernResponse> => {
      sent++;
      return { result: { resultType: 'complete', tools: [{ name: `t${sent}` }], ttlMs, cacheScope, ...extra } };
    },
  };
};
const ALICE = { principal: 'alice' };

describe('ListCache', () => {
  it('keeps nothing with ttlMs 0 or absent, for a retry, for a method it does not cache, or without a principal', async () => {
    const cache = new ListCache(10);
    for (const ttl of [0, undefined]) {
      const up = list(ttl);
      await cache.serve('tools/list', {}, ALICE, up.send);
      await cache.serve('tools/list', {}, ALICE, up.send);
      expect(up.sent()).toBe(2);
    }
    const up = list(60_000);
    await cache.serve('tools/list', { requestState: 's' }, ALICE, up.send);
    await cache.serve('tools/list', { requestState: 's' }, ALICE, up.send);
    await cache.serve('resources/templates/list', {}, ALICE, up.send);
    await cache.serve('resources/templates/list', {}, ALICE, up.send);
    await cache.serve('tools/list', {}, {}, up.send);
    await cache.serve('tools/list', {}, {}, up.send);
    expect(up.sent()).toBe(6);
    expect(cache.stats()).toEqual({ hits: 0, misses: 4, entries: 0 });
  });

  it('keeps each page under its cursor, at most maxEntries, the least recently used going first', async () => {
    const cache = new ListCache(2);
    const up = list(60_000);
    for (const cursor of ['a', 'b', 'c']) await cache.serve('tools/list', { cursor }, ALICE, up.send);
    expect(cache.stats().entries).toBe(2);
    await cache.serve('tools/list', { cursor: 'c' }, ALICE, up.send);
    expect(up.sent()).toBe(3);
    await cache.serve('tools/list', { cursor: 'a' }, ALICE, up.send);
    expect(up.sent()).toBe(4);
  });

  it('a public result fetched with a per-caller credential is kept for its principal only', async () => {
    const cache = new ListCache(10);
    const up = list(60_000, 'public');
    await cache.serve('tools/list', {}, { principal: 'alice', hopHeaders: { authorization: 'Bearer a' } }, up.send);
    await cache.serve('tools/list', {}, { principal: 'bob' }, up.send);
    expect(up.sent()).toBe(2);
    const again = await cache.serve('tools/list', {}, { principal: 'alice', hopHeaders: { authorization: 'Bearer a' } }, up.send);
    expect(up.sent()).toBe(2);
    expect('result' in again && again.result.tools).toEqual([{ name: 't1' }]);
  });

  it('one principal with different credentials never shares: each token is answered from its own entry only', async () => {
    const cache = new ListCache(10);
    const up = list(60_000, 'private');
    const as = (token: string) => ({ principal: 'anonymous', hopHeaders: { authorization: `Bearer ${token}` } });
    await cache.serve('tools/list', {}, as('a'), up.send);
    await cache.serve('tools/list', {}, as('b'), up.send);
    await cache.serve('tools/list', {}, { principal: 'anonymous' }, up.send);
    expect(up.sent()).toBe(3);
    const b = await cache.serve('tools/list', {}, as('b'), up.send);
    expect(up.sent()).toBe(3);
    expect('result' in b && b.result.tools).toEqual([{ name: 't2' }]);
  });

  it('does not keep a listing begun before a drop; a drop of one list leaves the others', async () => {
    const cache = new ListCache(10);
    let release!: () => void;
    const slow = list(60_000);
    const pending = cache.serve('tools/list', {}, ALICE, async () => {
      await new Promise<void>((r) => (release = r));
      return slow.send();
    });
    const prompts = list(60_000);
    await cache.serve('prompts/list', {}, ALICE, prompts.send);
    cache.noticed({ method: 'notifications/tools/list_changed' });
    release();
    await pending;
    await cache.serve('tools/list', {}, ALICE, slow.send);
    expect(slow.sent()).toBe(2);
    await cache.serve('prompts/list', {}, ALICE, prompts.send);
    expect(prompts.sent()).toBe(1);
  });
});
