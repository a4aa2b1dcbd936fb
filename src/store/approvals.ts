/**
 * Remembered approvals (docs/approvals.md, "Remembering"): an approval the user asked to remember
 * holds for `rememberMs` under a key made by the approval policy (src/router/approvals.ts) from the
 * principal, upstream, tool and argument digest. In memory (lru-cache with a TTL) for one replica;
 * on Redis (`<prefix>approval:<key>`, `SET PX`) every replica honours what any replica remembered.
 */
import { LRUCache } from 'lru-cache';
import type { RedisClientType } from 'redis';

/** Approvals remembered for a while, by key. */
export interface RememberedApprovals {
  /** Remembers `key` for `ttlMs` ms (a later call replaces the time). @throws StoreUnavailable */
  remember(key: string, ttlMs: number): Promise<void>;
  /** Whether `key` is remembered now. @throws StoreUnavailable */
  remembered(key: string): Promise<boolean>;
}

/** Remembered approvals in this process's memory (one replica); the oldest are forgotten first beyond `maxEntries`. */
export class MemoryRememberedApprovals implements RememberedApprovals {
  private readonly entries: LRUCache<string, true>;

  constructor(maxEntries = 100_000) {
    this.entries = new LRUCache<string, true>({ maxSize: maxEntries, sizeCalculation: () => 1, ttlAutopurge: false });
  }

  async remember(key: string, ttlMs: number): Promise<void> {
    this.entries.set(key, true, { ttl: Math.max(1, ttlMs) });
  }

  async remembered(key: string): Promise<boolean> {
    return this.entries.get(key) === true;
  }
}

/**
 * Remembered approvals on Redis: `<prefix>approval:<key>` = `1`, expiring after the remembered time.
 * @param run runs one command, turning a connection failure into StoreUnavailable.
 */
export function redisRememberedApprovals(
  client: Pick<RedisClientType, 'set' | 'exists'>,
  keyPrefix: string,
  run: <T>(command: () => Promise<T>) => Promise<T>,
): RememberedApprovals {
  const k = (key: string) => `${keyPrefix}approval:${key}`;
  return {
    remember: async (key, ttlMs) => void (await run(() => client.set(k(key), '1', { PX: Math.max(1, ttlMs) }))),
    remembered: async (key) => (await run(() => client.exists(k(key)))) === 1,
  };
}
