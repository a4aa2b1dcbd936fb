/**
 * Warm pool of legacy sessions for one upstream (DESIGN decision 1).
 *
 * Sessions are keyed by (principal, capability fingerprint); a session carries one call at a time
 * (an exclusive lease), at most `maxSessions` exist per upstream, and a queue with `queueMs` stands
 * behind the bound. Idle sessions close after `idleSessionMs`. When sessions keep dying, new ones are
 * opened with exponential backoff. At most `maxStartingSessions` sessions start at once (default 4 on
 * stdio, where each start is a process): further new sessions wait their turn in order, within
 * `queueMs`, and each start's `connectMs` runs from when it begins.
 *
 * Shared sessions: on a Streamable HTTP upstream a server-initiated request related to a call comes
 * on that call's own POST stream, so it can be attributed without an exclusive session. Once the
 * upstream has been seen doing so (and never sending one on its GET stream during a call), calls
 * lease sessions shared by up to `maxCallsPerSession` calls of the same key. A request on the GET
 * stream names no call: it goes to the one call in flight on the session, and is refused upstream
 * when there are several; from then on the upstream's calls get sessions of their own again, and
 * that session never takes another call beside its own (`UpstreamSession.shareable`), nor does a
 * session whose server uses roots.
 */
import { createHash } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import { canonicalJson } from '../protocol/canonical.js';
import type { ClientCapabilities as LegacyClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import { LEGACY_REVISIONS, type UpstreamConfig } from '../config/schema.js';
import { shutdownFailure, upstreamFailed, upstreamProtocolFault, GatewayError } from '../protocol/errors.js';
import type { Logger } from '../observability/log.js';
import { createHttpHop, type HttpHop } from './http.js';
import { UpstreamSession } from './session.js';
import type { Attribution, ServerInitiatedRequest } from './session-calls.js';
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

/** A hold on one session; give it back with {@link SessionLease.release}. */
export interface SessionLease {
  readonly session: UpstreamSession;
  /** True when other calls may run on the session at the same time ({@link SessionPool.acquireCall}). */
  readonly shared?: boolean;
  /**
   * Returns the session: reusable=true puts it back warm, false closes it (a shared session is
   * closed once its last call is done, and never handed to a call of its own again). Idempotent.
   */
  release(reusable: boolean): void;
  /**
   * Gives the hold back at once for a call that was cancelled and may still run upstream: the
   * session stays out of use (not leased, still counted in `maxSessions`) until `ended` resolves:
   * true (the upstream answered the cancelled request, so the call is over) puts it back warm,
   * false closes it. A shared session goes on carrying its other calls and is closed when they end.
   */
  releaseWhen(ended: Promise<boolean>): void;
}

/**
 * A {@link SessionLease} as a plain object (a parked call holds its lease for minutes): it ends
 * once, with `reusable` from {@link release} or the promise given to {@link releaseWhen}.
 */
class Lease implements SessionLease {
  private done = false;
  constructor(
    readonly session: UpstreamSession,
    private readonly pool: SessionPool,
    public shared?: true,
  ) {}
  /** True once the lease was given back. */
  get ended(): boolean {
    return this.done;
  }
  private end(ended: boolean | Promise<boolean>): void {
    if (this.shared) this.pool.endShared(this.session, ended === true);
    else this.pool.endExclusive(this.session, ended);
  }
  release(reusable: boolean): void {
    if (this.done) return;
    this.done = true;
    this.end(reusable);
  }
  releaseWhen(ended: Promise<boolean>): void {
    if (this.done) return;
    this.done = true;
    this.end(ended);
  }
}

interface Waiter {
  key: string;
  /** The waiter can take a place on a shared session. */
  call: boolean;
  caps: LegacyClientCapabilities;
  headers: Record<string, string>;
  resolve: (lease: SessionLease) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
}

/** A new session waiting for its turn to start (see {@link startLimit}). */
interface StartWaiter {
  key: string;
  /** Its turn came (no argument), or a warm session of its key was freed and handed to it instead. */
  go: (handed?: UpstreamSession) => void;
  timer: NodeJS.Timeout;
  /** Leaves the line with `err` (its timer fired, its caller went away, the pool closed). */
  leave: (err: Error) => void;
}

interface IdleEntry {
  session: UpstreamSession;
  /** When it went idle (epoch ms): it closes `idleSessionMs` later unless taken before. */
  since: number;
}

/** The principal part of a pool key. */
function principalOf(key: string): string {
  const i = key.indexOf('\u0000');
  return i < 0 ? key : key.slice(0, i);
}

/**
 * The client capabilities of `caps` that legacy revision `revision` defines (unknown revision: all
 * of them). 2024-11-05 and 2025-03-26 know `roots` and `sampling`; 2025-06-18 adds `elicitation`
 * (no modes); 2025-11-25 adds elicitation `form`/`url` and sampling `context`/`tools`. Some servers
 * reject fields their revision lacks, so a session declares only what its upstream knows.
 */
export function fitCapabilities(caps: LegacyClientCapabilities, revision: string | undefined): LegacyClientCapabilities {
  const rank = revision === undefined ? -1 : (LEGACY_REVISIONS as readonly string[]).indexOf(revision);
  if (rank < 0 || rank >= LEGACY_REVISIONS.indexOf('2025-11-25')) return caps;
  const out: LegacyClientCapabilities = { ...caps };
  const e = caps.elicitation as { form?: unknown; url?: unknown } | undefined;
  delete out.elicitation;
  // Before 2025-11-25 elicitation is form only: a client that answers URL mode only cannot use it.
  if (e && rank >= LEGACY_REVISIONS.indexOf('2025-06-18') && (e.form || !e.url)) out.elicitation = {};
  if (caps.sampling) out.sampling = {};
  return out;
}

/**
 * The message of a start that ran out of its budget (`budgetMs`, in ms, from `setting`:
 * `timeouts.connectMs`, or `timeouts.firstStartMs` for a first start): it names the upstream, the
 * setting, what the start was doing (`detail`) and the request it must answer (`answers`:
 * `initialize` for a legacy upstream, `server/discover` for a 2026-07-28 one).
 */
export function startTimeoutMessage(
  upstream: string,
  budgetMs: number,
  detail: string,
  answers = 'initialize',
  setting = 'timeouts.connectMs',
): string {
  return `Upstream '${upstream}' did not start within ${setting}=${budgetMs} ms (${detail}); check that it starts and answers ${answers}, or raise ${setting}`;
}

/** Most sessions of a stdio upstream starting at once when `maxStartingSessions` is not set. */
export const DEFAULT_STDIO_STARTS = 4;

/**
 * The most sessions of upstream `cfg` that may start at once: `maxStartingSessions`, by default
 * {@link DEFAULT_STDIO_STARTS} on stdio (each start spawns a process that loads its runtime) and
 * no bound on HTTP (beyond `maxSessions`).
 */
export function startLimit(cfg: Pick<UpstreamConfig, 'maxStartingSessions' | 'transport'>): number {
  return cfg.maxStartingSessions ?? (cfg.transport === 'stdio' ? DEFAULT_STDIO_STARTS : Infinity);
}

/** Backoff before opening a session after `failures` consecutive failures, in ms. */
export function backoffMs(failures: number): number {
  return failures <= 0 ? 0 : Math.min(250 * 2 ** (failures - 1), 10_000);
}

/** The canonical JSON of frozen capability objects (the router shares one per client capabilities and upstream). */
const capsJson = new WeakMap<LegacyClientCapabilities, string>();

/** Pool of upstream sessions for one upstream. */
export class SessionPool {
  private idle = new Map<string, IdleEntry[]>();
  private waiters: Waiter[] = [];
  /** Sessions that exist or are being opened (idle + leased + opening). */
  private count = 0;
  /** The same count by principal. */
  private readonly perPrincipal = new Map<string, number>();
  private leased = 0;
  private failures = 0;
  /** Sessions starting now (spawn or connect, until `initialize` and the start barrier are done). */
  private starting = 0;
  /** New sessions waiting for their turn to start, oldest first. */
  private startLine: StartWaiter[] = [];
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
  /** Sessions carrying shared calls, by key, with their number of calls. */
  private readonly sharing = new Map<string, Map<UpstreamSession, number>>();
  /** Shared sessions that carried a cancelled call: closed, not kept idle, when their last call is done. */
  private readonly tainted = new WeakSet<UpstreamSession>();
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
    this.http = cfg.transport === 'stdio' ? undefined : createHttpHop(cfg.timeouts);
    // Every session being opened listens on it until it is open: up to maxSessions at once.
    setMaxListeners(0, this.closing.signal);
  }

  /** The pool key of a principal and its mirrored capabilities. */
  static keyOf(principal: string, caps: LegacyClientCapabilities, token?: string): string {
    let json = capsJson.get(caps);
    if (json === undefined) {
      json = canonicalJson(caps);
      if (Object.isFrozen(caps)) capsJson.set(caps, json);
    }
    const base = `${principal}\u0000${json}`;
    return token ? `${base}\u0000${createHash('sha256').update(token).digest('base64url')}` : base;
  }

  /**
   * Pool key, the capabilities to declare (fitted to the upstream's revision) and extra upstream
   * headers: with `forwardAuthorization`, the client's token is part of the key and the headers.
   */
  private keyAndHeaders(
    principal: string,
    mirrored: LegacyClientCapabilities,
    token?: string,
  ): { key: string; caps: LegacyClientCapabilities; headers: Record<string, string> } {
    const forward = this.cfg.transport !== 'stdio' && this.cfg.forwardAuthorization && token ? token : undefined;
    const caps = fitCapabilities(mirrored, this.revision);
    return { key: SessionPool.keyOf(principal, caps, forward), caps, headers: forward ? { authorization: `Bearer ${forward}` } : {} };
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
    let idle = 0;
    for (const l of this.idle.values()) idle += l.length;
    let sharedCalls = 0;
    for (const m of this.sharing.values()) for (const n of m.values()) sharedCalls += n;
    return {
      total: this.count,
      idle,
      leased: this.leased,
      waiting: this.waiters.length,
      failures: this.failures,
      sharedCalls,
      starting: this.starting,
      waitingToStart: this.startLine.length,
    };
  }

  /** Sessions that finished `initialize` and have not ended (a start in progress, a handed-over child among them, is not counted). */
  get opened(): number {
    return this.live.size;
  }

  /** True while a new session is starting or waiting to, or a handed-over child waits for one ({@link adopt}). */
  get startingNow(): boolean {
    return this.starting > 0 || this.startLine.length > 0 || this.adopted !== undefined;
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
    token?: string,
    opts: AcquireOptions = {},
  ): Promise<SessionLease> {
    if (this.closedPool) throw shutdownFailure(this.name);
    if (!this.sharable) return this.acquire(principal, mirrored, token, opts);
    const { key } = this.keyAndHeaders(principal, mirrored, token);
    const place = this.sharedPlace(key);
    if (place) return this.shareLease(place);
    // Calls that arrive while a shared session of their key is being formed wait for it.
    const forming = this.forming.get(key);
    if (forming && forming.joiners < this.cfg.maxCallsPerSession - 1) {
      forming.joiners++;
      const session = await forming.ready;
      if (session && this.hasRoom(session)) return this.shareLease(session);
      return this.acquireCall(principal, mirrored, token, opts);
    }
    let formed!: (s: UpstreamSession | undefined) => void;
    const entry = { ready: new Promise<UpstreamSession | undefined>((r) => (formed = r)), joiners: 0 };
    this.forming.set(key, entry);
    try {
      const lease = this.toShared(await this.acquire(principal, mirrored, token, { ...opts, call: true }));
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
  tryAcquireCall(principal: string, mirrored: LegacyClientCapabilities, token?: string): SessionLease | undefined {
    if (this.closedPool) return undefined;
    const key = this.keyAndHeaders(principal, mirrored, token).key;
    if (this.sharable) {
      const place = this.sharedPlace(key);
      if (place) return this.shareLease(place);
      if (this.forming.has(key)) return undefined;
    }
    const warm = this.takeIdle(key);
    return warm ? this.toShared(this.lease(warm)) : undefined;
  }

  /** Shared sessions being formed (their first call is acquiring one), by key, with the calls waiting to join. */
  private readonly forming = new Map<string, { ready: Promise<UpstreamSession | undefined>; joiners: number }>();

  /** Whether a shared session can take one more call. */
  private hasRoom(session: UpstreamSession): boolean {
    const n = this.sharing.get(session.key)?.get(session);
    return this.sharable && n !== undefined && n < this.cfg.maxCallsPerSession && !session.deadReason && session.shareable;
  }

  /** A live shared session of `key` with room for one more call. */
  private sharedPlace(key: string): UpstreamSession | undefined {
    const m = this.sharing.get(key);
    if (!m) return undefined;
    for (const s of m.keys()) if (this.hasRoom(s)) return s;
    return undefined;
  }

  /** Turns an exclusive lease into the first call of a shared session (when sharing is still on). */
  private toShared(lease: SessionLease): SessionLease {
    if (lease.shared || !this.sharable || !lease.session.shareable) return lease;
    const { session } = lease;
    // The exclusive lease is replaced, not released: the session stays counted as leased.
    const m = this.sharing.get(session.key) ?? new Map<UpstreamSession, number>();
    this.sharing.set(session.key, m);
    m.set(session, 0);
    session.shared = true;
    return this.shareLease(session);
  }

  /**
   * Opens the session of `lease`, an exclusive lease of one call, to other calls when calls may
   * share sessions now (a Streamable HTTP upstream seen asking on the stream of the call): a call
   * that leased its session before that was known then no longer holds it alone. The lease becomes
   * the session's first shared call (it ends through {@link endShared}). Returns whether it did;
   * a lease already shared, ended, or of a session that died or carried a cancelled call stays as
   * it is.
   */
  share(lease: SessionLease): boolean {
    if (lease.shared || !(lease instanceof Lease) || lease.ended || !this.sharable) return false;
    const { session } = lease;
    if (session.deadReason || !session.shareable || this.tainted.has(session) || this.sharing.get(session.key)?.has(session)) return false;
    // As in toShared: the session stays counted as leased, now by its one shared call.
    const m = this.sharing.get(session.key) ?? new Map<UpstreamSession, number>();
    this.sharing.set(session.key, m);
    m.set(session, 1);
    session.shared = true;
    lease.shared = true;
    this.handShared(session);
    return true;
  }

  private shareLease(session: UpstreamSession): SessionLease {
    const m = this.sharing.get(session.key)!;
    m.set(session, (m.get(session) ?? 0) + 1);
    // Other calls go on on the session: a cancelled call's session is closed when they are done.
    return new Lease(session, this, true);
  }

  /** The end of one call on a shared session (called by the lease); `reusable` false taints the session. */
  endShared(session: UpstreamSession, reusable: boolean): void {
    const m = this.sharing.get(session.key)!;
    // A cancelled call may still run upstream. What it asks later is refused (it is detached),
    // but the session is never handed to a call of its own again.
    if (!reusable) this.tainted.add(session);
    const n = m.get(session)! - 1;
    if (n > 0) {
      m.set(session, n);
      if (!session.deadReason) this.handShared(session);
      return;
    }
    m.delete(session);
    if (!m.size) this.sharing.delete(session.key);
    session.shared = false;
    this.leased--;
    session.detachAll();
    this.giveBack(session, !this.tainted.has(session) && !session.deadReason && !this.closedPool);
  }

  /** Gives a waiting call the room a shared session has. */
  private handShared(session: UpstreamSession): void {
    if (!this.sharable) return;
    const idx = this.waiters.findIndex((w) => w.call && w.key === session.key);
    if (idx < 0) return;
    const [w] = this.waiters.splice(idx, 1);
    clearTimeout(w!.timer);
    w!.resolve(this.shareLease(session));
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
    token?: string,
    opts: AcquireOptions & { call?: boolean } = {},
  ): Promise<SessionLease> {
    if (this.closedPool) throw shutdownFailure(this.name);
    const { signal, call = false } = opts;
    const { key, caps, headers } = this.keyAndHeaders(principal, mirrored, token);
    const warm = this.takeIdle(key);
    if (warm) return this.lease(warm);
    const capped = this.atPrincipalCap(key) && !this.evictIdle(principal);
    if (!capped) {
      if (this.count >= this.cfg.maxSessions) this.evictIdle();
      if (this.count < this.cfg.maxSessions) return this.openFor(key, caps, headers, opts);
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
  async acquireShared(principal: string, caps: LegacyClientCapabilities, token?: string, opts: AcquireOptions = {}): Promise<SessionLease> {
    const { key } = this.keyAndHeaders(principal, caps, token);
    if (this.count >= this.cfg.maxSessions && !this.idle.get(key)?.length) {
      for (const session of this.live) {
        if (session.key === key && !session.deadReason) return { session, release: () => {}, releaseWhen: () => {} };
      }
    }
    return this.acquire(principal, caps, token, opts);
  }

  /**
   * Opens a new session for one caller: its time goes to `opts.timing`, and when `opts.signal`
   * aborts first the caller gets -32603 `cancelled` at once while the open goes on; a session that
   * opens then is put back warm.
   */
  private openFor(
    key: string,
    caps: LegacyClientCapabilities,
    headers: Record<string, string>,
    opts: AcquireOptions,
  ): Promise<SessionLease> {
    const { signal, timing } = opts;
    const started = performance.now();
    const opening = this.openNew(key, caps, headers, opts);
    const charge = () => {
      if (timing) timing.upstreamMs += performance.now() - started;
    };
    if (!signal) return opening.finally(charge);
    return new Promise<SessionLease>((resolve, reject) => {
      const gone = () => {
        charge();
        reject(upstreamFailed(this.name, 'cancelled', `The client went away while upstream '${this.name}' was starting`));
        opening.then(
          (lease) => lease.release(true),
          () => {},
        );
      };
      if (signal.aborted) return gone();
      signal.addEventListener('abort', gone, { once: true });
      opening.then(
        (lease) => {
          signal.removeEventListener('abort', gone);
          charge();
          resolve(lease);
        },
        (e: unknown) => {
          signal.removeEventListener('abort', gone);
          charge();
          reject(e);
        },
      );
    });
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

  /** The most recently idle live session of `key`, taken out of the idle list (an emptied list stays for the next session that goes idle; the sweep drops it). */
  private takeIdle(key: string): UpstreamSession | undefined {
    const list = this.idle.get(key);
    while (list && list.length) {
      const entry = list.pop()!;
      if (!entry.session.deadReason) return entry.session;
      this.slot(key, -1);
    }
    return undefined;
  }

  /** Forgets `session` if it is idle (it died there), freeing its slot. */
  private dropIdle(session: UpstreamSession): void {
    const list = this.idle.get(session.key);
    const i = list?.findIndex((e) => e.session === session) ?? -1;
    if (!list || i < 0) return;
    list.splice(i, 1);
    if (!list.length) this.idle.delete(session.key);
    this.slot(session.key, -1);
    this.wakeWaiter();
  }

  /** Closes the least recently used idle session (of `principal`, or of anyone), freeing a slot. */
  private evictIdle(principal?: string): boolean {
    for (const [key, list] of this.idle) {
      if (principal !== undefined && principalOf(key) !== principal) continue;
      const entry = list.shift();
      if (!entry) continue;
      if (!list.length) this.idle.delete(key);
      this.slot(key, -1);
      void entry.session.close();
      return true;
    }
    return false;
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
   * Waits for a turn to start a session of `key` (at most {@link startLimit} start at once, the
   * others in order), up to `timeouts.queueMs`. Resolves undefined when the turn came (the caller
   * then starts and calls {@link endStart} when the start is over), or with a warm session of `key`
   * that was freed meanwhile and handed over instead.
   * @throws GatewayError -32603 `busy` when no turn came within `queueMs`, `cancelled` when
   *   `signal` aborted, `shutting-down` when the pool closed.
   */
  private startTurn(key: string, signal?: AbortSignal): Promise<UpstreamSession | undefined> {
    const limit = this.startsAtOnce();
    // Behind a first start (an install, maybe), the wait for a turn is as long as that start may take.
    const waitMs = this.firstStart.active ? Math.max(this.cfg.timeouts.queueMs, this.firstStart.budgetMs()) : this.cfg.timeouts.queueMs;
    const waitSetting = waitMs === this.cfg.timeouts.queueMs ? 'timeouts.queueMs' : this.firstStart.setting();
    if (this.starting < limit) {
      this.starting++;
      return Promise.resolve(undefined);
    }
    if (signal?.aborted)
      return Promise.reject(upstreamFailed(this.name, 'cancelled', `The client went away while upstream '${this.name}' was starting`));
    return new Promise<UpstreamSession | undefined>((resolve, reject) => {
      const onAbort = () =>
        w.leave(upstreamFailed(this.name, 'cancelled', `The client went away while upstream '${this.name}' was starting`));
      const done = () => {
        clearTimeout(w.timer);
        signal?.removeEventListener('abort', onAbort);
      };
      const w: StartWaiter = {
        key,
        go: (handed) => {
          done();
          resolve(handed);
        },
        leave: (err) => {
          done();
          this.startLine = this.startLine.filter((x) => x !== w);
          reject(err);
        },
        timer: setTimeout(() => {
          w.leave(
            upstreamFailed(
              this.name,
              'busy',
              `New sessions of upstream '${this.name}' start ${limit} at a time (maxStartingSessions) and this one's turn did not come within ${waitSetting}=${waitMs} ms; raise maxStartingSessions if the host has room for more starts at once, or retry later`,
            ),
          );
        }, waitMs),
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.startLine.push(w);
    });
  }

  /** How many sessions may start at once now: one while a first start may be installing, else {@link startLimit}. */
  private startsAtOnce(): number {
    return this.firstStart.active ? 1 : startLimit(this.cfg);
  }

  /** A start is over (opened or failed): the next new sessions in line start, as many as may start at once. */
  private endStart(): void {
    this.starting--;
    let next: StartWaiter | undefined;
    while (this.starting < this.startsAtOnce() && (next = this.startLine.shift())) {
      this.starting++;
      next.go();
    }
  }

  /** The era probe's stdio child, handed over for the next new session, and the timer that ends it unused. */
  private adopted: { child: StdioChild; timer: NodeJS.Timeout } | undefined;

  /**
   * Takes the era probe's stdio child (see `ModernUpstream.handOver`): the next new session sends
   * `initialize` on it instead of spawning a child, with what is left of the child's start budget
   * since its spawn. Unused when that budget ends (or the pool closes), the child is ended.
   */
  adopt(child: StdioChild): void {
    this.dropAdopted();
    if (this.closedPool) return void endStdioChild(child, () => child.close());
    const left = child.budgetMs - (performance.now() - child.spawnedAt);
    const timer = setTimeout(() => this.dropAdopted(), Math.max(0, left));
    timer.unref();
    this.adopted = { child, timer };
    // It exits before it is used: nothing to hand over any more.
    child.onclose = () => {
      if (this.adopted?.child === child) this.takeAdopted();
    };
  }

  /**
   * The era probe's child handed over ({@link adopt}), if it still runs, taken out of the pool for
   * the caller to use (a new session here, or a legacy client's pass-through session).
   */
  takeAdopted(): StdioChild | undefined {
    const a = this.adopted;
    this.adopted = undefined;
    if (!a) return undefined;
    clearTimeout(a.timer);
    return a.child.child ? a.child : undefined;
  }

  /** Ends the handed-over child nobody used. */
  private dropAdopted(): void {
    const child = this.takeAdopted();
    if (child) void endStdioChild(child, () => child.close());
  }

  /**
   * Opens a new session of `key`: after the restart backoff, and once its turn to start came
   * ({@link startTurn}; a warm session of `key` freed meanwhile is leased instead). `opts.startMs`:
   * its start budget from when it begins (default `timeouts.connectMs`); `opts.signal`: its caller
   * went away, so it leaves the line.
   */
  private async openNew(
    key: string,
    caps: LegacyClientCapabilities,
    headers: Record<string, string>,
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
      while ((handed = await this.startTurn(key, opts.signal))) {
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
      const adopt = this.cfg.transport === 'stdio' ? this.takeAdopted() : undefined;
      // A handed-over child keeps the budget it was spawned with.
      budget = adopt ? adopt.budgetMs : this.firstStart.budgetMs();
      setting = adopt ? (adopt.installing ? 'timeouts.firstStartMs' : 'timeouts.connectMs') : this.firstStart.setting();
      const session = await UpstreamSession.open({
        upstream: this.name,
        cfg: this.cfg,
        capabilities: caps,
        key,
        log: this.log.child({ upstream: this.name }),
        extraHeaders: headers,
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
        this.dropIdle(session);
      });
      return this.lease(session);
    } catch (e) {
      this.slot(key, -1);
      // Only a start that began is a failure of the upstream (not a wait for a turn that ended).
      if (turn) this.failures++;
      this.wakeWaiter();
      if (e instanceof GatewayError) throw e;
      if (this.closedPool) throw shutdownFailure(this.name);
      const msg = (e as Error).message;
      const stderr = e instanceof UpstreamStartError ? e.stderr : [];
      this.lastError = msg;
      this.observer.openFailed?.(msg, stderr);
      this.log.warn({ upstream: this.name, err: msg, ...(stderr.length ? { stderr } : {}) }, 'upstream session failed to open');
      const extra = stderr.length ? { stderr } : undefined;
      if (e instanceof UpstreamStartError && e.reason === 'timeout') {
        throw upstreamFailed(this.name, 'timeout', startTimeoutMessage(this.name, budget, msg, 'initialize', setting), extra);
      }
      if (e instanceof UpstreamStartError && e.fault) throw upstreamProtocolFault(this.name, e.fault.what, e.fault.problem);
      throw upstreamFailed(this.name, 'unreachable', `Upstream '${this.name}' could not be started or reached: ${msg}`, extra);
    } finally {
      if (turn) this.endStart();
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
      const next = this.startLine.findIndex((w) => w.key === session.key);
      if (next >= 0) {
        const [w] = this.startLine.splice(next, 1);
        w!.go(session);
        return;
      }
      // Close it for a waiter only if closing frees a slot that waiter may use.
      const owner = principalOf(session.key);
      const helps = this.waiters.some((w) => !this.atPrincipalCap(w.key) || principalOf(w.key) === owner);
      if (!helps) {
        const list = this.idle.get(session.key);
        if (list) list.push({ session, since: Date.now() });
        else this.idle.set(session.key, [{ session, since: Date.now() }]);
        this.sweepLater(this.cfg.idleSessionMs);
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

  /** The timer of {@link sweep}, while sessions are idle. */
  private sweeper: NodeJS.Timeout | undefined;

  /** Arms the idle sweep `ms` from now, unless it is armed already (one timer per pool, not one per idle session). */
  private sweepLater(ms: number): void {
    if (this.sweeper || this.closedPool) return;
    this.sweeper = setTimeout(() => this.sweep(), ms);
    this.sweeper.unref();
  }

  /** Closes the sessions idle for `idleSessionMs` or more, and arms the sweep for the next to come due. */
  private sweep(): void {
    this.sweeper = undefined;
    const now = Date.now();
    const idleMs = this.cfg.idleSessionMs;
    let next = Infinity;
    for (const [key, list] of [...this.idle]) {
      // Also drops the lists takeIdle emptied.
      const kept = list.filter((e) => {
        if (now - e.since < idleMs) return ((next = Math.min(next, e.since + idleMs)), true);
        this.slot(key, -1);
        this.log.info({ upstream: this.name, session: e.session.id }, 'idle upstream session closed');
        void e.session.close();
        return false;
      });
      if (kept.length) this.idle.set(key, kept);
      else this.idle.delete(key);
    }
    if (next < Infinity) this.sweepLater(Math.max(1, next - now));
  }

  /** Opens a session like `old` (same key, capabilities and headers) and keeps it warm, if there is room. */
  private replenish(old: UpstreamSession): void {
    if (this.closedPool || this.count >= this.cfg.maxSessions || this.atPrincipalCap(old.key)) return;
    this.openNew(old.key, old.capabilities, old.extraHeaders).then(
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
    this.openNew(w.key, w.caps, w.headers).then(w.resolve, w.reject);
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
    for (const w of [...this.startLine]) w.leave(shutdownFailure(this.name));
    const all: Promise<void>[] = [];
    const child = this.takeAdopted();
    if (child) all.push(endStdioChild(child, () => child.close()));
    clearTimeout(this.sweeper);
    this.sweeper = undefined;
    for (const list of this.idle.values()) for (const e of list) all.push(e.session.close());
    this.idle.clear();
    for (const s of this.live) all.push(s.close());
    await Promise.all(all);
    await this.http?.close();
  }
}
