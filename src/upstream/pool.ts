/**
 * Warm pool of legacy sessions for one upstream (docs/architecture.md, "Decisions and why" 1).
 *
 * Sessions are keyed by (principal, capability fingerprint); a session carries one call at a time
 * (an exclusive lease), at most `maxSessions` exist per upstream, and a queue with `queueMs` stands
 * behind the bound. Idle sessions close after `idleSessionMs`. When sessions keep dying, new ones are
 * opened with exponential backoff. At most `maxStartingSessions` sessions start at once (default 4 on
 * stdio, where each start is a process): further new sessions wait their turn in order, within
 * `queueMs`, and each start's `connectMs` runs from when it begins.
 *
 * Its parts: pool keys (src/upstream/pool-keys.ts), leases (src/upstream/pool-lease.ts), idle
 * sessions and their sweep (src/upstream/pool-idle.ts), the start line, backoff and the era probe's
 * handed-over child (src/upstream/pool-starts.ts), and shared sessions, calls of the same key on
 * one Streamable HTTP session (src/upstream/pool-sharing.ts).
 */
import { setMaxListeners } from 'node:events';
import type { ClientCapabilities as LegacyClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../config/schema.js';
import { shutdownFailure, upstreamFailed, GatewayError } from '../protocol/errors.js';
import type { Logger } from '../observability/log.js';
import { createHttpHop, type HttpHop } from './http.js';
import { UpstreamSession } from './session.js';
import type { Attribution, ServerInitiatedRequest } from './session-calls.js';
import { IdleSessions } from './pool-idle.js';
import { Lease, type LeaseEnds, type SessionLease } from './pool-lease.js';
import { keyAndHeaders, poolKey, principalOf, type KeyAndHeaders } from './pool-keys.js';
import { SharedSessions } from './pool-sharing.js';
import type { UpstreamCredential } from './credential.js';
import { HandedOverChild, StartLine, backoffMs, forCaller, startFailure } from './pool-starts.js';
import { UpstreamStartError } from './start-errors.js';
import { FirstStart, endStdioChild, type StdioChild } from './stdio-child.js';

/** Read-only hooks on what happens to a pool's sessions (the admin view, the deprecation census). */
export interface PoolObserver {
  /** A session opened. */
  opened?(): void;
  /** A session died (not closed by the gateway); `stderr`: the stdio child's last lines. */
  died?(reason: string, stderr: string[]): void;
  /** A session could not be opened; `stderr`: the stdio child's last lines. */
  openFailed?(message: string, stderr: string[]): void;
  /** A server-initiated request or `notifications/message` arrived on a session outside any call. */
  unclaimed?(message: ServerInitiatedRequest): void;
}

/** How one caller acquires a session. */
export interface AcquireOptions {
  /**
   * The caller's abort signal (its client went away): a caller waiting in the queue leaves it, one
   * waiting for a new session to open stops waiting (the session, once open, stays warm in the
   * pool); either gets -32603 `cancelled`.
   */
  signal?: AbortSignal;
  /** Gets the time this caller spent opening a new session (backoff, spawn or connect, `initialize`) added to `upstreamMs`, in ms. */
  timing?: { upstreamMs: number };
  /**
   * The start budget of a new session, in ms (default `timeouts.connectMs`, or `firstStartMs` until
   * a start succeeded): what the era probe left of it over HTTP. A stdio session that takes over
   * the era probe's child gets what is left of that child's budget since its spawn instead.
   */
  startMs?: number;
}

interface Waiter {
  key: string;
  /** The waiter can take a place on a shared session. */
  call: boolean;
  caps: LegacyClientCapabilities;
  headers: Record<string, string>;
  env: Record<string, string>;
  resolve: (lease: SessionLease) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** Pool of upstream sessions for one upstream. */
export class SessionPool implements LeaseEnds {
  private readonly idle: IdleSessions;
  private waiters: Waiter[] = [];
  /** Sessions that exist or are being opened (idle + leased + opening). */
  private count = 0;
  /** The same count by principal. */
  private readonly perPrincipal = new Map<string, number>();
  private leased = 0;
  private failures = 0;
  /** New sessions starting now, and those waiting for their turn to start. */
  private readonly starts: StartLine;
  /** The era probe's stdio child, handed over for the next new session. */
  private readonly handedOver = new HandedOverChild();
  private closedPool = false;
  /** Aborted by {@link close}: sessions still starting stop. */
  private readonly closing = new AbortController();
  private live = new Set<UpstreamSession>();
  /** The upstream's HTTP hop (HTTP transports), shared by its sessions and its legacy pass-through sessions. */
  readonly http: HttpHop | undefined;
  /** The legacy revision the upstream negotiated (or the pinned one); undefined until known. */
  revision: string | undefined;
  /** Where the upstream sends server-initiated requests during a call, once seen (see the module comment). */
  attribution: Attribution | undefined;
  /** The sessions carrying shared calls. */
  private readonly shares: SharedSessions;
  /** Read-only hooks on the pool's sessions. */
  observer: PoolObserver = {};

  /**
   * @param perPrincipalBound whether `maxSessionsPerPrincipal` applies (auth identifies callers);
   *   without it every caller is one principal and only `maxSessions` bounds the pool.
   */
  constructor(
    readonly name: string,
    private readonly cfg: UpstreamConfig,
    private readonly log: Logger,
    private readonly perPrincipalBound = true,
    /** True once the gateway begins to stop (before {@link close}); see `SessionOptions.stopping`. */
    private readonly stopping: () => boolean = () => false,
    /** The upstream's first-start budget, shared with its 2026-07-28 hop (src/upstream/stdio-child.ts). */
    private readonly firstStart: FirstStart = new FirstStart(cfg),
  ) {
    this.revision = cfg.protocolVersion;
    this.idle = new IdleSessions(
      name,
      cfg.idleSessionMs,
      log,
      (key) => this.slot(key, -1),
      () => this.closedPool,
    );
    this.starts = new StartLine(name, cfg, firstStart);
    this.shares = new SharedSessions(
      this,
      () => this.sharable,
      cfg.maxCallsPerSession,
      (session) => this.handShared(session),
    );
    this.http = cfg.transport === 'stdio' ? undefined : createHttpHop(cfg.timeouts);
    // Every session being opened listens on it until it is open: up to maxSessions at once.
    setMaxListeners(0, this.closing.signal);
  }

  /** The pool key of a principal and its mirrored capabilities ({@link poolKey}). */
  static keyOf(principal: string, caps: LegacyClientCapabilities, credential?: UpstreamCredential): string {
    return poolKey(principal, caps, credential);
  }

  /** Pool key, capabilities, extra headers and child variables of a caller ({@link keyAndHeaders}). */
  private keyAndHeaders(principal: string, mirrored: LegacyClientCapabilities, credential?: UpstreamCredential): KeyAndHeaders {
    return keyAndHeaders(this.revision, principal, mirrored, credential);
  }

  /** Why the last attempt to open a session failed, cleared by the next success. */
  lastError: string | undefined;

  /** Counts for metrics and tests. */
  stats(): {
    total: number;
    idle: number;
    leased: number;
    waiting: number;
    failures: number;
    sharedCalls: number;
    starting: number;
    waitingToStart: number;
  } {
    const idle = this.idle.size;
    const sharedCalls = this.shares.calls();
    return {
      total: this.count,
      idle,
      leased: this.leased,
      waiting: this.waiters.length,
      failures: this.failures,
      sharedCalls,
      starting: this.starts.starting,
      waitingToStart: this.starts.waiting,
    };
  }

  /** Sessions that finished `initialize` and have not ended (a start in progress, a handed-over child among them, is not counted). */
  get opened(): number {
    return this.live.size;
  }

  /** True while a new session is starting or waiting to, or a handed-over child waits for one ({@link adopt}). */
  get startingNow(): boolean {
    return this.starts.starting > 0 || this.starts.waiting > 0 || this.handedOver.present;
  }

  /** Whether calls may share sessions now (Streamable HTTP, attribution by POST stream seen, never by GET). */
  private get sharable(): boolean {
    return this.cfg.transport === 'streamable-http' && this.cfg.maxCallsPerSession > 1 && this.attribution === 'post';
  }

  /** What a session reports about where the upstream sent a request during a call. */
  private noteAttribution(seen: Attribution): void {
    if (this.attribution === 'get' || this.attribution === seen) return;
    this.attribution = seen;
    // Shared sessions take no new calls from now on; each goes back to the pool when its calls are done.
    if (seen === 'get')
      this.log.info({ upstream: this.name }, 'upstream sends server-initiated requests on its GET stream: one call per session');
  }

  /**
   * Leases a session for one call (`tools/call`, `prompts/get`, `resources/read`): a place on a
   * shared session when the upstream allows it (see the module comment), else as {@link acquire}.
   * @throws GatewayError -32603 as {@link acquire}.
   */
  async acquireCall(
    principal: string,
    mirrored: LegacyClientCapabilities,
    credential?: UpstreamCredential,
    opts: AcquireOptions = {},
  ): Promise<SessionLease> {
    if (this.closedPool) throw shutdownFailure(this.name);
    if (!this.sharable) return this.acquire(principal, mirrored, credential, opts);
    const { key } = this.keyAndHeaders(principal, mirrored, credential);
    const place = this.shares.place(key);
    if (place) return this.shares.join(place);
    // Calls that arrive while a shared session of their key is being formed wait for it.
    const forming = this.forming.get(key);
    if (forming && forming.joiners < this.cfg.maxCallsPerSession - 1) {
      forming.joiners++;
      const session = await forming.ready;
      if (session && this.shares.hasRoom(session)) return this.shares.join(session);
      return this.acquireCall(principal, mirrored, credential, opts);
    }
    let formed!: (s: UpstreamSession | undefined) => void;
    const entry = { ready: new Promise<UpstreamSession | undefined>((r) => (formed = r)), joiners: 0 };
    this.forming.set(key, entry);
    try {
      const lease = this.shares.toShared(await this.acquire(principal, mirrored, credential, { ...opts, call: true }));
      formed(lease.shared ? lease.session : undefined);
      return lease;
    } catch (e) {
      formed(undefined);
      throw e;
    } finally {
      if (this.forming.get(key) === entry) this.forming.delete(key);
    }
  }

  /**
   * A lease for one call when one is at hand, without waiting: a place on a shared session, or a
   * warm idle session (made shared when the upstream allows it); undefined otherwise (then
   * {@link acquireCall} waits for one).
   */
  tryAcquireCall(principal: string, mirrored: LegacyClientCapabilities, credential?: UpstreamCredential): SessionLease | undefined {
    if (this.closedPool) return undefined;
    const key = this.keyAndHeaders(principal, mirrored, credential).key;
    if (this.sharable) {
      const place = this.shares.place(key);
      if (place) return this.shares.join(place);
      if (this.forming.has(key)) return undefined;
    }
    const warm = this.idle.take(key);
    return warm ? this.shares.toShared(this.lease(warm)) : undefined;
  }

  /** Shared sessions being formed (their first call is acquiring one), by key, with the calls waiting to join. */
  private readonly forming = new Map<string, { ready: Promise<UpstreamSession | undefined>; joiners: number }>();

  /**
   * Opens the session of `lease`, an exclusive lease of one call, to other calls when calls may
   * share sessions now; see {@link SharedSessions.share}.
   */
  share(lease: SessionLease): boolean {
    return this.shares.share(lease);
  }

  /** The end of one call on a shared session (called by the lease); `reusable` false taints the session. */
  endShared(session: UpstreamSession, reusable: boolean): void {
    if (!this.shares.end(session, reusable)) return;
    this.leased--;
    session.detachAll();
    this.giveBack(session, !this.shares.tainted(session) && !session.deadReason && !this.closedPool);
  }

  /** Gives a waiting call the room a shared session has. */
  private handShared(session: UpstreamSession): void {
    if (!this.sharable) return;
    const idx = this.waiters.findIndex((w) => w.call && w.key === session.key);
    if (idx < 0) return;
    const [w] = this.waiters.splice(idx, 1);
    clearTimeout(w!.timer);
    w!.resolve(this.shares.join(session));
  }

  /**
   * Leases a session for `principal` declaring `caps` upstream: a warm idle one, a new one, or the
   * next one freed within `timeouts.queueMs`. A caller that waits in the queue leaves it when
   * `signal` aborts (its client went away), so no session is spent on a call nobody waits for.
   * @throws GatewayError -32603 (`data.reason` "unreachable" when the upstream cannot be started,
   *   "protocol" when it answered `initialize` with something that is not JSON-RPC, "busy" when no
   *   session frees up in time, "cancelled" when `signal` aborted while queued, "shutting-down"
   *   after {@link close}, "timeout" when a new session did not start within
   *   `timeouts.connectMs` or `opts.startMs`; "busy" as well when a new session waited
   *   `timeouts.queueMs` for its turn to start, see {@link startLimit}).
   */
  async acquire(
    principal: string,
    mirrored: LegacyClientCapabilities,
    credential?: UpstreamCredential,
    opts: AcquireOptions & { call?: boolean } = {},
  ): Promise<SessionLease> {
    if (this.closedPool) throw shutdownFailure(this.name);
    const { signal, call = false } = opts;
    const { key, caps, headers, env } = this.keyAndHeaders(principal, mirrored, credential);
    const warm = this.idle.take(key);
    if (warm) return this.lease(warm);
    const capped = this.atPrincipalCap(key) && !this.idle.evict((k) => principalOf(k) === principal);
    if (!capped) {
      if (this.count >= this.cfg.maxSessions) this.idle.evict();
      if (this.count < this.cfg.maxSessions) return this.openFor(key, caps, headers, env, opts);
    }
    if (signal?.aborted) throw upstreamFailed(this.name, 'cancelled', 'The client went away before a session was free');
    return new Promise<SessionLease>((resolve, reject) => {
      const leave = () => {
        if (!this.waiters.includes(waiter)) return;
        clearTimeout(waiter.timer);
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(upstreamFailed(this.name, 'cancelled', 'The client went away before a session was free'));
      };
      const waiter: Waiter = {
        key,
        call,
        caps,
        headers,
        env,
        resolve: (lease) => {
          signal?.removeEventListener('abort', leave);
          resolve(lease);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', leave);
          reject(err);
        },
        timer: setTimeout(() => {
          this.waiters = this.waiters.filter((w) => w !== waiter);
          waiter.reject(
            upstreamFailed(
              this.name,
              'busy',
              this.perPrincipalBound && this.atPrincipalCap(key)
                ? `This caller's ${this.cfg.maxSessionsPerPrincipal} sessions of upstream '${this.name}' (maxSessionsPerPrincipal) stayed busy for ${this.cfg.timeouts.queueMs} ms, with calls in flight, parked waiting for input or running as tasks; answer, abandon or cancel them, or retry later`
                : `All ${this.cfg.maxSessions} sessions of upstream '${this.name}' stayed busy for ${this.cfg.timeouts.queueMs} ms, with calls in flight, parked waiting for input, running as tasks or holding subscriptions/listen streams${this.perPrincipalBound ? ", this caller's or others'" : ''}; raise maxSessions${this.perPrincipalBound ? ' (or lower maxSessionsPerPrincipal, so that one caller cannot hold them all)' : ''} or retry later`,
            ),
          );
        }, this.cfg.timeouts.queueMs),
      };
      signal?.addEventListener('abort', leave, { once: true });
      this.waiters.push(waiter);
    });
  }

  /**
   * Like {@link acquire}, for requests that cause no server-initiated traffic (discover, lists,
   * completion): when every session is taken, it shares a live session of the same key (the
   * legacy protocol allows concurrent requests on a session) instead of queueing.
   * @throws GatewayError -32603 as {@link acquire}.
   */
  async acquireShared(
    principal: string,
    caps: LegacyClientCapabilities,
    credential?: UpstreamCredential,
    opts: AcquireOptions = {},
  ): Promise<SessionLease> {
    const { key } = this.keyAndHeaders(principal, caps, credential);
    if (this.count >= this.cfg.maxSessions && !this.idle.has(key)) {
      for (const session of this.live) {
        if (session.key === key && !session.deadReason) return { session, release: () => {}, releaseWhen: () => {} };
      }
    }
    return this.acquire(principal, caps, credential, opts);
  }

  /** Opens a new session for one caller ({@link forCaller}). */
  private openFor(
    key: string,
    caps: LegacyClientCapabilities,
    headers: Record<string, string>,
    env: Record<string, string>,
    opts: AcquireOptions,
  ): Promise<SessionLease> {
    return forCaller(this.name, performance.now(), this.openNew(key, caps, headers, env, opts), opts);
  }

  /** True when the principal of `key` holds maxSessionsPerPrincipal sessions. */
  private atPrincipalCap(key: string): boolean {
    return (this.perPrincipal.get(principalOf(key)) ?? 0) >= this.cfg.maxSessionsPerPrincipal;
  }

  /** Adds (+1) or removes (-1) a session slot for `key`, overall and for its principal. */
  private slot(key: string, delta: 1 | -1): void {
    this.count += delta;
    const p = principalOf(key);
    const n = (this.perPrincipal.get(p) ?? 0) + delta;
    if (n > 0) this.perPrincipal.set(p, n);
    else this.perPrincipal.delete(p);
  }

  private lease(session: UpstreamSession): SessionLease {
    this.leased++;
    return new Lease(session, this);
  }

  /** The end of an exclusive lease (called by the lease): the session goes back once `ended` says whether it is reusable. */
  endExclusive(session: UpstreamSession, ended: boolean | Promise<boolean>): void {
    this.leased--;
    session.detachAll();
    if (typeof ended === 'boolean') return this.giveBack(session, ended && !session.deadReason && !this.closedPool);
    void ended.then(
      (ok) => this.giveBack(session, ok && !session.deadReason && !this.closedPool),
      () => this.giveBack(session, false),
    );
  }

  /**
   * Takes the era probe's stdio child (see `ModernUpstream.handOver`): the next new session sends
   * `initialize` on it instead of spawning a child, with what is left of the child's start budget
   * since its spawn. Unused when that budget ends (or the pool closes), the child is ended.
   */
  adopt(child: StdioChild): void {
    this.handedOver.put(child, this.closedPool);
  }

  /**
   * The era probe's child handed over ({@link adopt}), if it still runs, taken out of the pool for
   * the caller to use (a new session here, or a legacy client's pass-through session).
   */
  takeAdopted(): StdioChild | undefined {
    return this.handedOver.take();
  }

  /**
   * Opens a new session of `key`: after the restart backoff, and once its turn to start came
   * ({@link StartLine.turn}; a warm session of `key` freed meanwhile is leased instead). `opts.startMs`:
   * its start budget from when it begins (default `timeouts.connectMs`); `opts.signal`: its caller
   * went away, so it leaves the line.
   */
  private async openNew(
    key: string,
    caps: LegacyClientCapabilities,
    headers: Record<string, string>,
    env: Record<string, string>,
    opts: { startMs?: number; signal?: AbortSignal } = {},
  ): Promise<SessionLease> {
    const { startMs } = opts;
    this.slot(key, 1);
    let turn = false;
    let budget = this.cfg.timeouts.connectMs;
    let setting = 'timeouts.connectMs';
    try {
      const delay = backoffMs(this.failures);
      if (delay) {
        this.log.info({ upstream: this.name, delayMs: delay, failures: this.failures }, 'upstream restart backoff');
        await new Promise((r) => setTimeout(r, delay));
      }
      if (this.closedPool) throw shutdownFailure(this.name);
      let handed: UpstreamSession | undefined;
      while ((handed = await this.starts.turn(key, opts.signal))) {
        if (this.closedPool) throw shutdownFailure(this.name);
        if (!handed.deadReason) {
          // The handed session has a slot of its own: this one's is given back.
          this.slot(key, -1);
          this.wakeWaiter();
          return this.lease(handed);
        }
        // It died on the way: its slot is freed, and this start waits for a turn again.
        this.slot(handed.key, -1);
      }
      turn = true;
      if (this.closedPool) throw shutdownFailure(this.name);
      // The era probe's child has the configured environment only: never a caller's credential.
      const adopt = this.cfg.transport === 'stdio' && Object.keys(env).length === 0 ? this.takeAdopted() : undefined;
      // A handed-over child keeps the budget it was spawned with.
      budget = adopt ? adopt.budgetMs : this.firstStart.budgetMs();
      setting = adopt ? (adopt.installing ? 'timeouts.firstStartMs' : 'timeouts.connectMs') : this.firstStart.setting();
      const session = await UpstreamSession.open({
        upstream: this.name,
        cfg: this.cfg,
        capabilities: caps,
        key,
        log: this.log.child({ upstream: this.name }),
        credential: { headers, env },
        http: this.http,
        onAttribution: (seen) => this.noteAttribution(seen),
        onUnclaimed: (m) => this.observer.unclaimed?.(m),
        startMs: adopt ? Math.max(1, adopt.budgetMs - (performance.now() - adopt.spawnedAt)) : (startMs ?? budget),
        adopt,
        installing: this.firstStart.active,
        signal: this.closing.signal,
        stopping: this.stopping,
      });
      this.firstStart.done();
      this.observer.opened?.();
      this.lastError = undefined;
      if (this.revision === undefined && session.info.protocolVersion !== 'unknown') this.revision = session.info.protocolVersion;
      this.live.add(session);
      void session.closed.then(() => this.live.delete(session));
      session.onDeath((reason) => {
        this.failures++;
        this.observer.died?.(reason, session.stderrTail());
        if (this.idle.drop(session)) this.wakeWaiter();
      });
      return this.lease(session);
    } catch (e) {
      this.slot(key, -1);
      // Only a start that began is a failure of the upstream (not a wait for a turn that ended), and
      // not a refused credential (HTTP 401/403: one caller's token, not the upstream's health).
      const refused = e instanceof UpstreamStartError && (e.status === 401 || e.status === 403);
      if (turn && !refused) this.failures++;
      this.wakeWaiter();
      if (e instanceof GatewayError) throw e;
      if (this.closedPool) throw shutdownFailure(this.name);
      const msg = (e as Error).message;
      const stderr = e instanceof UpstreamStartError ? e.stderr : [];
      this.lastError = msg;
      this.observer.openFailed?.(msg, stderr);
      this.log.warn({ upstream: this.name, err: msg, ...(stderr.length ? { stderr } : {}) }, 'upstream session failed to open');
      throw startFailure(this.name, e, msg, budget, setting);
    } finally {
      if (turn) this.starts.end();
    }
  }

  /** Marks the upstream healthy again after a call completed normally. */
  noteSuccess(): void {
    this.failures = 0;
  }

  private giveBack(session: UpstreamSession, reusable: boolean): void {
    if (reusable) {
      const idx = this.waiters.findIndex((w) => w.key === session.key);
      if (idx >= 0) {
        const [w] = this.waiters.splice(idx, 1);
        clearTimeout(w!.timer);
        w!.resolve(this.lease(session));
        return;
      }
      // A new session of the same key still waiting for its turn to start takes this one instead.
      if (this.starts.handTo(session)) return;
      // Close it for a waiter only if closing frees a slot that waiter may use.
      const owner = principalOf(session.key);
      const helps = this.waiters.some((w) => !this.atPrincipalCap(w.key) || principalOf(w.key) === owner);
      if (!helps) {
        this.idle.put(session);
        return;
      }
    }
    const healthy = !session.deadReason && !this.closedPool;
    this.slot(session.key, -1);
    void session.close();
    this.wakeWaiter();
    // A healthy session closed only because a cancelled call might still run on it is replaced
    // in the background, so the next call does not pay for a start (a whole process on stdio).
    if (healthy && !this.waiters.length) this.replenish(session);
  }

  /** Opens a session like `old` (same key, capabilities and headers) and keeps it warm, if there is room. */
  private replenish(old: UpstreamSession): void {
    if (this.closedPool || this.count >= this.cfg.maxSessions || this.atPrincipalCap(old.key)) return;
    this.openNew(old.key, old.capabilities, old.credential.headers, old.credential.env).then(
      (lease) => lease.release(true),
      () => {},
    );
  }

  private wakeWaiter(): void {
    if (this.closedPool || this.count >= this.cfg.maxSessions) return;
    const i = this.waiters.findIndex((x) => !this.atPrincipalCap(x.key));
    if (i < 0) return;
    const [w] = this.waiters.splice(i, 1) as [Waiter];
    clearTimeout(w.timer);
    this.openNew(w.key, w.caps, w.headers, w.env).then(w.resolve, w.reject);
  }

  /**
   * Closes every idle session, stops the sessions still starting (their callers get -32603
   * `shutting-down`), fails waiters, and refuses new leases. Leased sessions close on release.
   */
  async close(): Promise<void> {
    this.closedPool = true;
    this.closing.abort('gateway shutting down');
    for (const w of this.waiters.splice(0)) {
      clearTimeout(w.timer);
      w.reject(shutdownFailure(this.name));
    }
    this.starts.leaveAll(() => shutdownFailure(this.name));
    const all: Promise<void>[] = [];
    const child = this.takeAdopted();
    if (child) all.push(endStdioChild(child, () => child.close()));
    all.push(...this.idle.closeAll());
    for (const s of this.live) all.push(s.close());
    await Promise.all(all);
    await this.http?.close();
  }
}
