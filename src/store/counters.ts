/**
 * Counters every replica shares on Redis, for the limits counted fleet-wide:
 *
 * - sampling token windows (`<prefix>budget:<id>`), with rate-limiter-flexible's `RateLimiterRedis`
 *   (points = tokens). A window is FIXED: it opens with the first tokens counted after the last one
 *   ended and lasts `windowMs` (the key's PX expiry); what it counts goes at once when it ends. Its
 *   increment script is replaced by {@link WINDOW_SCRIPT}: milliseconds instead of whole seconds, a
 *   refused take counts nothing, and a give-back never takes a window below zero.
 * - task record quotas (`<prefix>quota:*`), one Lua script ({@link QUOTA_SCRIPT}): each record is
 *   held with its expiry (Redis's own clock: when it was held plus the record's `ttlMs`) in
 *   `quota:exp`, its principal in `quota:who` and its result bytes in `quota:bytes`, with running
 *   sums per principal (`quota:records`, `quota:pbytes`) and over all (`quota:total`). Every call
 *   first drops the records whose expiry passed, so a record leaves the counts when its Redis record
 *   expires, whichever replica (if any) is still running; a replica that sees a record go earlier
 *   (dropped) drops it at once. The keys expire a minute after the last record they hold.
 */
import type { RedisClientType } from 'redis';
import { StoreUnavailable } from './shared.js';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';

/** Token windows shared by all replicas (sampling budgets). Every call may throw StoreUnavailable. */
export interface SharedTokenWindows {
  /**
   * Counts `tokens` in window `id` unless the window would then hold more than `limit`.
   * @returns whether it was counted, what the window held before (tokens), and ms until it ends.
   */
  take(id: string, tokens: number, limit: number, windowMs: number): Promise<{ admitted: boolean; used: number; msLeft: number }>;
  /** Adds `tokens` (negative: gives back) to window `id`, opening one of `windowMs` if none is open; never below 0. */
  add(id: string, tokens: number, windowMs: number): Promise<void>;
}

/** Task records per principal and their result bytes, shared by all replicas. Every call may throw StoreUnavailable. */
export interface SharedRecordQuota {
  /** Whether `principal` holds fewer than `max` records. */
  admits(principal: string, max: number): Promise<boolean>;
  /** Holds record `taskId` of `principal` for `ttlMs` unless the principal holds `max` already; resolves whether it is held. */
  hold(taskId: string, principal: string, ttlMs: number, max: number): Promise<boolean>;
  /**
   * Sets the bytes record `taskId` keeps, unless the principal's records would then keep more than
   * `maxPerPrincipal`, or all records more than `maxTotal` (the setting's name is returned). A record
   * not held is let through.
   */
  charge(
    taskId: string,
    bytes: number,
    maxPerPrincipal: number,
    maxTotal: number,
  ): Promise<'maxResultBytesPerPrincipal' | 'maxResultBytes' | undefined>;
  /** Stops counting record `taskId`. */
  drop(taskId: string): Promise<void>;
}

/** The counters of a shared store. */
export interface SharedCounters {
  readonly tokens: SharedTokenWindows;
  readonly taskQuota: SharedRecordQuota;
}

/**
 * The increment of a token window (rate-limiter-flexible's ARGV: points to add, whole seconds,
 * the limiter's points, its duration in seconds): opens the window for duration·1000 ms if none is
 * open (a give-back opens none); refuses (counting nothing) an increment that takes it past the
 * points; never goes below 0.
 */
export const WINDOW_SCRIPT = `
local add = tonumber(ARGV[1])
if add <= 0 and redis.call('exists', KEYS[1]) == 0 then return {0, 0} end
local ms = math.max(1, math.floor(tonumber(ARGV[4]) * 1000))
redis.call('set', KEYS[1], 0, 'PX', ms, 'NX')
local cur = tonumber(redis.call('get', KEYS[1]))
local ttl = redis.call('pttl', KEYS[1])
if add > 0 and cur + add > tonumber(ARGV[3]) then return {cur + add, ttl} end
local now = redis.call('incrby', KEYS[1], add)
if now < 0 then redis.call('set', KEYS[1], 0, 'KEEPTTL') now = 0 end
return {now, ttl}
`;

/**
 * The record quota: KEYS exp, who, bytes, records, pbytes, total; ARGV[1] the operation, then its
 * arguments. A negative bound means none.
 */
export const QUOTA_SCRIPT = `
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function drop(id)
  redis.call('zrem', KEYS[1], id)
  local who = redis.call('hget', KEYS[2], id)
  if not who then return end
  local b = tonumber(redis.call('hget', KEYS[3], id) or '0')
  redis.call('hdel', KEYS[2], id)
  redis.call('hdel', KEYS[3], id)
  if redis.call('hincrby', KEYS[4], who, -1) <= 0 then redis.call('hdel', KEYS[4], who) end
  if redis.call('hincrby', KEYS[5], who, 0 - b) <= 0 then redis.call('hdel', KEYS[5], who) end
  redis.call('decrby', KEYS[6], b)
end
local function keep()
  local top = redis.call('zrange', KEYS[1], -1, -1, 'WITHSCORES')
  if not top[2] then return end
  for i = 1, 6 do
    if redis.call('exists', KEYS[i]) == 1 then redis.call('pexpireat', KEYS[i], tonumber(top[2]) + 60000) end
  end
end
for _, id in ipairs(redis.call('zrangebyscore', KEYS[1], '-inf', now, 'LIMIT', 0, 1000)) do drop(id) end
local op = ARGV[1]
if op == 'drop' then drop(ARGV[2]) return '' end
if op == 'admits' then
  local max = tonumber(ARGV[3])
  if max >= 0 and tonumber(redis.call('hget', KEYS[4], ARGV[2]) or '0') >= max then return 0 end
  return 1
end
if op == 'hold' then
  local id, who, ttl, max = ARGV[2], ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
  if redis.call('hexists', KEYS[2], id) == 1 then return 1 end
  if max >= 0 and tonumber(redis.call('hget', KEYS[4], who) or '0') >= max then return 0 end
  redis.call('zadd', KEYS[1], now + ttl, id)
  redis.call('hset', KEYS[2], id, who)
  redis.call('hset', KEYS[3], id, 0)
  redis.call('hincrby', KEYS[4], who, 1)
  keep()
  return 1
end
if op == 'charge' then
  local id, bytes, maxP, maxT = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local who = redis.call('hget', KEYS[2], id)
  if not who then return '' end
  local delta = bytes - tonumber(redis.call('hget', KEYS[3], id) or '0')
  if maxP >= 0 and tonumber(redis.call('hget', KEYS[5], who) or '0') + delta > maxP then return 'maxResultBytesPerPrincipal' end
  if maxT >= 0 and tonumber(redis.call('get', KEYS[6]) or '0') + delta > maxT then return 'maxResultBytes' end
  redis.call('hset', KEYS[3], id, bytes)
  redis.call('hincrby', KEYS[5], who, delta)
  redis.call('incrby', KEYS[6], delta)
  keep()
  return ''
end
return redis.error_reply('unknown quota operation ' .. tostring(op))
`;

/** A bound for {@link QUOTA_SCRIPT}: -1 for none. */
const bound = (n: number) => String(Number.isFinite(n) ? Math.floor(n) : -1);

/**
 * The counters on Redis, over the store's command client. `run` wraps each command (it fails fast
 * with StoreUnavailable while Redis is unreachable); a command not answered within `timeoutMs`
 * rejects with StoreUnavailable too (what it did, if it arrives, stays done).
 */
export function redisCounters(
  client: RedisClientType,
  keyPrefix: string,
  run: <T>(command: () => Promise<T>) => Promise<T>,
  timeoutMs: number,
): SharedCounters {
  const timed = <T>(command: () => Promise<T>): Promise<T> => {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new StoreUnavailable(`the shared store (Redis) did not answer within ${timeoutMs} ms`)), timeoutMs);
    });
    return Promise.race([run(command), late]).finally(() => clearTimeout(timer));
  };
  const limiters = new Map<string, RateLimiterRedis>();
  /** The limiter of `points` per `windowMs` (Infinity: the one that adds without refusing). */
  const limiter = (points: number, windowMs: number) => {
    const id = `${points}/${windowMs}`;
    let l = limiters.get(id);
    if (!l) {
      l = new RateLimiterRedis({
        storeClient: client,
        useRedisPackage: true,
        keyPrefix: `${keyPrefix}budget`,
        points: Number.isFinite(points) ? points : Number.MAX_SAFE_INTEGER,
        duration: windowMs / 1000,
        customIncrTtlLuaScript: WINDOW_SCRIPT,
      });
      limiters.set(id, l);
    }
    return l;
  };
  const tokens: SharedTokenWindows = {
    take: (id, n, limit, windowMs) =>
      timed(async () => {
        try {
          const r = await limiter(limit, windowMs).consume(id, n);
          return { admitted: true, used: r.consumedPoints - n, msLeft: r.msBeforeNext };
        } catch (e) {
          if (!(e instanceof RateLimiterRes)) throw e;
          return { admitted: false, used: e.consumedPoints - n, msLeft: e.msBeforeNext };
        }
      }),
    add: async (id, n, windowMs) => {
      if (n === 0) return;
      const l = limiter(Infinity, windowMs);
      await timed(() => (n > 0 ? l.penalty(id, n) : l.reward(id, -n)));
    },
  };
  const keys = ['exp', 'who', 'bytes', 'records', 'pbytes', 'total'].map((k) => `${keyPrefix}quota:${k}`);
  const quota = (...args: string[]) => timed(() => client.eval(QUOTA_SCRIPT, { keys, arguments: args }));
  const taskQuota: SharedRecordQuota = {
    admits: async (principal, max) => (await quota('admits', principal, bound(max))) === 1,
    hold: async (taskId, principal, ttlMs, max) => (await quota('hold', taskId, principal, String(Math.ceil(ttlMs)), bound(max))) === 1,
    charge: async (taskId, bytes, maxP, maxT) =>
      ((await quota('charge', taskId, String(bytes), bound(maxP), bound(maxT))) || undefined) as
        'maxResultBytesPerPrincipal' | 'maxResultBytes' | undefined,
    drop: async (taskId) => void (await quota('drop', taskId)),
  };
  return { tokens, taskQuota };
}
