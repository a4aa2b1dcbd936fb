/**
 * The shared store on Redis (or Valkey), with node-redis:
 *
 * - task records: `<prefix>task:<taskId>`, JSON, expiring with the record's `ttlMs`;
 * - spent requestState ids: `<prefix>jti:<jti>`, `SET NX PX` so that of two replicas spending one
 *   id at once exactly one succeeds;
 * - live replicas: `<prefix>replica:<id>` = `{id, url}`, written on every heartbeat with a short
 *   expiry, so a replica that stops is gone once its last heartbeat expires;
 * - per-user grants: the hash `<prefix>grants`, one field per upstream and principal (JSON, the
 *   tokens sealed by the caller); registered OAuth clients: the hash `<prefix>oauth-clients`, one
 *   field per upstream (sealed); a grant's refresh lock: `<prefix>grants-lock:<field>`, `SET NX PX`; a consent that failed at
 *   the callback: `<prefix>grants-failed:<field>`, `SET PX`;
 * - remembered approvals: `<prefix>approval:<key>`, `SET PX` (src/store/approvals.ts);
 * - sampling budgets and task quotas: `<prefix>budget:*`, `<prefix>quota:*` (src/store/counters.ts);
 * - task status changes: published on `<prefix>tasks` for the other replicas' listen streams;
 * - limits (src/store/limiters.ts): `<prefix>limit:<name>:<key>`, rate-limiter-flexible's counters
 *   (`RateLimiterRedis`), each expiring at the end of its window;
 * - readiness probe: `<prefix>probe:<random id>`, written and read back (expiring after a minute),
 *   so that a Redis user whose ACL does not cover the prefix reads as not ready.
 *
 * Commands never wait for a connection that is down (`disableOfflineQueue`): they fail at once with
 * {@link StoreUnavailable}, and the client reconnects by itself (backoff up to 2 s).
 */
import { randomUUID } from 'node:crypto';
import { createRequire } from 'node:module';
import type { RedisClientType } from 'redis';
import type * as Rlf from 'rate-limiter-flexible';
import type { RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Logger } from '../observability/log.js';
import { redisRememberedApprovals, type RememberedApprovals } from './approvals.js';
import { redisCounters, type SharedCounters } from './counters.js';
import { grantField, type ConsentFailure, type GrantStore, type StoredGrant } from './grants.js';
import type { TaskRecord, TaskStore } from './tasks.js';
import { StoreUnavailable, type ReplicaInfo, type ReplicaRegistry, type SharedStore, type SpentStates } from './shared.js';

/** What the Redis store needs. */
export interface RedisStoreOptions {
  url: string;
  /** Prefix of every key and channel. */
  keyPrefix: string;
  /** Longest wait for a connection, in ms. */
  connectTimeoutMs: number;
  log: Logger;
}

/** How long the answer of a readiness probe is reused, in ms: `/readyz` is polled, and a probe costs two commands. */
export const PROBE_CACHE_MS = 1000;

/** The shared store on Redis. Create with {@link RedisStore.create}. */
export class RedisStore implements SharedStore {
  readonly kind = 'redis' as const;
  readonly tasks: TaskStore;
  readonly spent: SpentStates;
  readonly replicas: ReplicaRegistry;
  readonly grants: GrantStore;
  readonly approvals: RememberedApprovals;
  readonly counters: SharedCounters;
  private readonly listeners: ((record: TaskRecord) => void)[] = [];
  private readonly expireListeners: ((taskId: string, why: 'expired') => void)[] = [];
  private readonly reachableListeners: (() => void)[] = [];
  private readonly expiryTimers = new Map<string, NodeJS.Timeout>();
  private lastError: string | undefined;
  /** Whether the subscriber is subscribed to `<prefix>tasks` (kept across reconnections by node-redis). */
  private subscribed = false;
  private subscribing = false;
  /** Why the last subscription failed (for readiness). */
  private subscribeError: string | undefined;
  /** The key the readiness probe writes and reads back, under the prefix. */
  private readonly probeKey: string;
  /** The last probe's answer (undefined: passed) and when it was taken (`performance.now()` ms). */
  private probed: { at: number; problem: string | undefined } | undefined;
  /** The probe in progress, shared by concurrent readiness checks. */
  private probing: Promise<string | undefined> | undefined;

  private constructor(
    private readonly client: RedisClientType,
    private readonly subscriber: RedisClientType,
    private readonly opts: RedisStoreOptions,
  ) {
    const k = (s: string) => `${opts.keyPrefix}${s}`;
    this.probeKey = k(`probe:${randomUUID()}`);
    this.tasks = {
      create: async (record) => {
        await this.run(() => this.client.set(k(`task:${record.taskId}`), JSON.stringify(record), { PX: record.ttlMs, NX: true }));
        // The replica that runs a task cancels it when its record expires.
        const t = setTimeout(() => {
          this.expiryTimers.delete(record.taskId);
          for (const l of this.expireListeners) l(record.taskId, 'expired');
        }, record.ttlMs);
        t.unref();
        this.expiryTimers.set(record.taskId, t);
      },
      get: async (taskId) => {
        const raw = await this.run(() => this.client.get(k(`task:${taskId}`)));
        return raw ? (JSON.parse(raw) as TaskRecord) : undefined;
      },
      put: async (record) =>
        (await this.run(() => this.client.set(k(`task:${record.taskId}`), JSON.stringify(record), { XX: true, KEEPTTL: true }))) === 'OK',
      onExpire: (listener) => void this.expireListeners.push(listener),
    };
    this.spent = {
      isSpent: async (jti) => (await this.run(() => this.client.exists(k(`jti:${jti}`)))) === 1,
      spend: async (jti, expMs) =>
        (await this.run(() => this.client.set(k(`jti:${jti}`), '1', { PX: Math.max(1, expMs - Date.now()) + 60_000, NX: true }))) === 'OK',
    };
    this.replicas = {
      heartbeat: async (self: ReplicaInfo, ttlMs: number) =>
        void (await this.run(() => this.client.set(k(`replica:${self.id}`), JSON.stringify(self), { PX: ttlMs }))),
      lookup: async (id) => {
        const raw = await this.run(() => this.client.get(k(`replica:${id}`)));
        return raw ? (JSON.parse(raw) as ReplicaInfo) : undefined;
      },
      leave: async (id) => void (await this.run(() => this.client.del(k(`replica:${id}`)))),
    };
    this.grants = this.grantStore(k('grants'), k('oauth-clients'));
    this.approvals = redisRememberedApprovals(this.client, opts.keyPrefix, (command) => this.run(command));
    this.counters = redisCounters(client, opts.keyPrefix, (command) => this.run(command), opts.connectTimeoutMs);
  }

  /** The grants in the hash `grantsKey` and the registered clients in the hash `clientsKey`. */
  private grantStore(grantsKey: string, clientsKey: string): GrantStore {
    return {
      get: async (upstream, principal) => {
        const raw = await this.run(() => this.client.hGet(grantsKey, grantField(upstream, principal)));
        return raw ? (JSON.parse(raw) as StoredGrant) : undefined;
      },
      put: async (grant) =>
        void (await this.run(() => this.client.hSet(grantsKey, grantField(grant.upstream, grant.principal), JSON.stringify(grant)))),
      delete: async (upstream, principal) => (await this.run(() => this.client.hDel(grantsKey, grantField(upstream, principal)))) > 0,
      list: async (upstream) => {
        const all = await this.run(() => this.client.hVals(grantsKey));
        return all.map((raw) => JSON.parse(raw) as StoredGrant).filter((g) => upstream === undefined || g.upstream === upstream);
      },
      client: async (upstream) => (await this.run(() => this.client.hGet(clientsKey, upstream))) ?? undefined,
      putClient: async (upstream, sealed, replace = false) => {
        if (replace) await this.run(() => this.client.hSet(clientsKey, upstream, sealed));
        else await this.run(() => this.client.hSetNX(clientsKey, upstream, sealed));
        return (await this.run(() => this.client.hGet(clientsKey, upstream))) ?? sealed;
      },
      lock: async (upstream, principal, ttlMs) => {
        const key = `${grantsKey}-lock:${grantField(upstream, principal)}`;
        const holder = randomUUID();
        if ((await this.run(() => this.client.set(key, holder, { NX: true, PX: ttlMs }))) !== 'OK') return undefined;
        return async () => {
          // Released only by its holder (an expired lock may be another's by now).
          if ((await this.run(() => this.client.get(key))) === holder) await this.run(() => this.client.del(key));
        };
      },
      fail: async (upstream, principal, why, ttlMs) => {
        const key = `${grantsKey}-failed:${grantField(upstream, principal)}`;
        await this.run(() => this.client.set(key, JSON.stringify({ why, atMs: Date.now() }), { PX: ttlMs }));
      },
      failure: async (upstream, principal) => {
        const raw = await this.run(() => this.client.get(`${grantsKey}-failed:${grantField(upstream, principal)}`));
        return raw ? (JSON.parse(raw) as ConsentFailure) : undefined;
      },
    };
  }

  /**
   * Starts connecting (a command client and a subscriber) and returns at once. Until Redis is
   * reachable, what needs the store fails with {@link StoreUnavailable} and `unavailable()` says
   * why (readiness); the clients keep trying.
   */
  static create(opts: RedisStoreOptions): RedisStore {
    // Loaded here, not with this module: the client library takes about a sixth of a second to load,
    // which a gateway on the in-memory store would pay at every start.
    const { createClient } = createRequire(import.meta.url)('redis') as typeof import('redis');
    const make = () =>
      createClient({
        url: opts.url,
        disableOfflineQueue: true,
        socket: { connectTimeout: opts.connectTimeoutMs, reconnectStrategy: (retries: number) => Math.min(100 * 2 ** retries, 2000) },
      }) as RedisClientType;
    const client = make();
    const subscriber = make();
    const store = new RedisStore(client, subscriber, opts);
    for (const [c, role] of [
      [client, 'commands'],
      [subscriber, 'subscriber'],
    ] as const) {
      c.on('error', (e: Error) => {
        if (store.lastError !== e.message) opts.log.warn({ role, err: e.message }, 'shared store (Redis) error');
        store.lastError = e.message;
      });
      c.on('ready', () => {
        if (store.lastError !== undefined) opts.log.info({ role }, 'shared store (Redis) reachable again');
        store.lastError = undefined;
        if (role === 'commands') for (const l of store.reachableListeners) l();
      });
      void c.connect().catch(() => {});
    }
    // Subscribed once the subscriber is ready, and again on each ready until a subscription
    // succeeded (one sent while Redis is down fails); after that node-redis resubscribes the
    // channel on every reconnection, before the client is ready again.
    subscriber.on('ready', () => void store.subscribe());
    return store;
  }

  /** Subscribes to `<prefix>tasks` unless subscribed (or subscribing) already; a failure is retried on the next ready. */
  private async subscribe(): Promise<void> {
    if (this.subscribed || this.subscribing) return;
    this.subscribing = true;
    try {
      await this.subscriber.subscribe(`${this.opts.keyPrefix}tasks`, (message) => {
        try {
          const record = JSON.parse(message) as TaskRecord;
          for (const l of this.listeners) l(record);
        } catch {
          /* not ours */
        }
      });
      this.subscribed = true;
      this.subscribeError = undefined;
    } catch (e) {
      this.subscribeError = (e as Error).message;
      this.opts.log.warn({ err: (e as Error).message }, 'shared store (Redis): task channel not subscribed yet');
    } finally {
      this.subscribing = false;
    }
  }

  private async run<T>(command: () => Promise<T>): Promise<T> {
    if (!this.client.isReady)
      throw new StoreUnavailable(
        `the shared store (Redis at ${redact(this.opts.url)}) cannot be reached${this.lastError ? `: ${this.lastError}` : ''}`,
      );
    try {
      return await command();
    } catch (e) {
      throw new StoreUnavailable(`the shared store (Redis) failed: ${(e as Error).message}`);
    }
  }

  /**
   * A `RateLimiterRedis` on the command client under `<prefix>limit:<name>`. It fails at once while
   * the client is not connected, and with "Operation timed out" when Redis does not answer within
   * `connectTimeoutMs`.
   */
  windowLimiter(name: string, points: number, durationSec: number): RateLimiterAbstract {
    // Loaded here, like the client library, not with the module: only the Redis store needs them.
    const load = createRequire(import.meta.url);
    const RateLimiterRedis = load('rate-limiter-flexible/lib/RateLimiterRedis.js') as typeof Rlf.RateLimiterRedis;
    const RLWrapperTimeouts = load('rate-limiter-flexible/lib/RLWrapperTimeouts.js') as typeof Rlf.RLWrapperTimeouts;
    const limiter = new RateLimiterRedis({
      storeClient: this.client,
      useRedisPackage: true,
      rejectIfRedisNotReady: true,
      keyPrefix: `${this.opts.keyPrefix}limit:${name}`,
      points,
      duration: durationSec,
    });
    return new RLWrapperTimeouts({ limiter, timeoutMs: this.opts.connectTimeoutMs });
  }

  async publishTask(record: TaskRecord): Promise<void> {
    await this.run(() => this.client.publish(`${this.opts.keyPrefix}tasks`, JSON.stringify(record)));
  }

  onTask(listener: (record: TaskRecord) => void): void {
    this.listeners.push(listener);
  }

  onReachable(listener: () => void): void {
    this.reachableListeners.push(listener);
  }

  /**
   * Undefined when usable: both connections are up, the task channel is subscribed, and a write and
   * a read under the key prefix succeed (the probe's answer is reused for {@link PROBE_CACHE_MS};
   * it waits at most `connectTimeoutMs`). Else why not, naming Redis's own error (such as `NOPERM`).
   */
  async unavailable(): Promise<string | undefined> {
    const at = `the shared store (Redis at ${redact(this.opts.url)})`;
    if (!this.client.isReady || !this.subscriber.isReady) return `${at} cannot be reached${this.lastError ? `: ${this.lastError}` : ''}`;
    if (!this.subscribed)
      return `${at} is reachable, but its task channel ${this.opts.keyPrefix}tasks is not subscribed yet${this.subscribeError ? `: ${this.subscribeError}` : ''}`;
    if (this.probed && performance.now() - this.probed.at < PROBE_CACHE_MS) return this.probed.problem;
    this.probing ??= this.probe(at).then((problem) => {
      if (problem !== undefined && problem !== this.probed?.problem)
        this.opts.log.warn({ err: problem }, 'shared store (Redis) not usable');
      this.probed = { at: performance.now(), problem };
      this.probing = undefined;
      return problem;
    });
    return this.probing;
  }

  /** Writes a random value to the probe key and reads it back; undefined when both worked, else why not. */
  private async probe(at: string): Promise<string | undefined> {
    const value = randomUUID();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<string>((r) => {
      timer = setTimeout(
        () =>
          r(
            `${at} did not answer a read and a write under the key prefix "${this.opts.keyPrefix}" within ${this.opts.connectTimeoutMs} ms`,
          ),
        this.opts.connectTimeoutMs,
      );
    });
    const readWrite = (async () => {
      try {
        await this.client.set(this.probeKey, value, { PX: 60_000 });
        const read = await this.client.get(this.probeKey);
        return read === value ? undefined : `${at} did not return what was written to ${this.probeKey}`;
      } catch (e) {
        return `${at} refuses a write or read under the key prefix "${this.opts.keyPrefix}": ${(e as Error).message}`;
      }
    })();
    try {
      return await Promise.race([readWrite, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Ends both connections. A connected client sends QUIT (the replies it waits for come first),
   * given at most `connectTimeoutMs` ms; one that is not connected (Redis never reached, or gone)
   * is destroyed at once, since QUIT would wait for a connection that may never come. Never rejects.
   */
  async close(): Promise<void> {
    for (const t of this.expiryTimers.values()) clearTimeout(t);
    await Promise.all([this.client, this.subscriber].map((c) => endClient(c, this.opts.connectTimeoutMs)));
  }
}

/** Ends client `c`: QUIT within `graceMs` ms when it is ready, else (or then) destroys its socket. */
async function endClient(c: RedisClientType, graceMs: number): Promise<void> {
  if (c.isReady) {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((r) => (timer = setTimeout(r, graceMs)));
    await Promise.race([
      c.quit().then(
        () => {},
        () => {},
      ),
      late,
    ]);
    clearTimeout(timer);
  }
  c.destroy();
}

/** A Redis URL without its password, for messages. */
function redact(url: string): string {
  return url.replace(/\/\/([^@/]*)@/, '//***@');
}
