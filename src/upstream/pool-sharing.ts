/**
 * Shared sessions of a session pool (src/upstream/pool.ts): on a Streamable HTTP upstream a
 * server-initiated request related to a call comes on that call's own POST stream, so it can be
 * attributed without an exclusive session. Once the
 * upstream has been seen doing so (and never sending one on its GET stream during a call), calls
 * lease sessions shared by up to `maxCallsPerSession` calls of the same key. A request on the GET
 * stream names no call: it goes to the one call in flight on the session, and is refused upstream
 * when there are several; from then on the upstream's calls get sessions of their own again, and
 * that session never takes another call beside its own (`UpstreamSession.shareable`), nor does a
 * session whose server uses roots.
 */
import type { UpstreamSession } from './session.js';
import { Lease, type LeaseEnds, type SessionLease } from './pool-lease.js';

/** The sessions of one pool that carry shared calls, with their number of calls; see the file header. */
export class SharedSessions {
  /** Sessions carrying shared calls, by key, with their number of calls. */
  private readonly sharing = new Map<string, Map<UpstreamSession, number>>();
  /** Shared sessions that carried a cancelled call: closed, not kept idle, when their last call is done. */
  private readonly taint = new WeakSet<UpstreamSession>();

  /**
   * @param ends the pool, which a shared lease ends through.
   * @param sharable whether calls may share sessions now (Streamable HTTP, attribution by POST stream seen, never by GET).
   * @param maxCalls most calls on one session (`maxCallsPerSession`).
   * @param onRoom a shared session has room for one more call: the pool gives it to a waiting call.
   */
  constructor(
    private readonly ends: LeaseEnds,
    private readonly sharable: () => boolean,
    private readonly maxCalls: number,
    private readonly onRoom: (session: UpstreamSession) => void,
  ) {}

  /** Whether a shared session can take one more call. */
  hasRoom(session: UpstreamSession): boolean {
    const n = this.sharing.get(session.key)?.get(session);
    return this.sharable() && n !== undefined && n < this.maxCalls && !session.deadReason && session.shareable;
  }

  /** A live shared session of `key` with room for one more call. */
  place(key: string): UpstreamSession | undefined {
    const m = this.sharing.get(key);
    if (!m) return undefined;
    for (const s of m.keys()) if (this.hasRoom(s)) return s;
    return undefined;
  }

  /** Turns an exclusive lease into the first call of a shared session (when sharing is still on). */
  toShared(lease: SessionLease): SessionLease {
    if (lease.shared || !this.sharable() || !lease.session.shareable) return lease;
    const { session } = lease;
    // The exclusive lease is replaced, not released: the session stays counted as leased.
    const m = this.sharing.get(session.key) ?? new Map<UpstreamSession, number>();
    this.sharing.set(session.key, m);
    m.set(session, 0);
    session.shared = true;
    return this.join(session);
  }

  /**
   * Opens the session of `lease`, an exclusive lease of one call, to other calls when calls may
   * share sessions now (a Streamable HTTP upstream seen asking on the stream of the call): a call
   * that leased its session before that was known then no longer holds it alone. The lease becomes
   * the session's first shared call (it ends through {@link end}). Returns whether it did;
   * a lease already shared, ended, or of a session that died or carried a cancelled call stays as
   * it is.
   */
  share(lease: SessionLease): boolean {
    if (lease.shared || !(lease instanceof Lease) || lease.ended || !this.sharable()) return false;
    const { session } = lease;
    if (session.deadReason || !session.shareable || this.taint.has(session) || this.sharing.get(session.key)?.has(session)) return false;
    // As in toShared: the session stays counted as leased, now by its one shared call.
    const m = this.sharing.get(session.key) ?? new Map<UpstreamSession, number>();
    this.sharing.set(session.key, m);
    m.set(session, 1);
    session.shared = true;
    lease.shared = true;
    this.onRoom(session);
    return true;
  }

  join(session: UpstreamSession): SessionLease {
    const m = this.sharing.get(session.key)!;
    m.set(session, (m.get(session) ?? 0) + 1);
    // Other calls go on on the session: a cancelled call's session is closed when they are done.
    return new Lease(session, this.ends, true);
  }

  /**
   * The end of one call on a shared session; `reusable` false taints the session (a cancelled call
   * may still run upstream: what it asks later is refused, it is detached, but the session is never
   * handed to a call of its own again). Returns true when it was the session's last call: the
   * session is then no longer shared, and the pool takes it back.
   */
  end(session: UpstreamSession, reusable: boolean): boolean {
    const m = this.sharing.get(session.key)!;
    if (!reusable) this.taint.add(session);
    const n = m.get(session)! - 1;
    if (n > 0) {
      m.set(session, n);
      if (!session.deadReason) this.onRoom(session);
      return false;
    }
    m.delete(session);
    if (!m.size) this.sharing.delete(session.key);
    session.shared = false;
    return true;
  }

  /** True when `session` carried a cancelled call: it is closed, not kept idle, when its last call is done. */
  tainted(session: UpstreamSession): boolean {
    return this.taint.has(session);
  }

  /** The calls running on shared sessions. */
  calls(): number {
    let n = 0;
    for (const m of this.sharing.values()) for (const c of m.values()) n += c;
    return n;
  }
}
