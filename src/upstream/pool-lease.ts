/**
 * A hold on one session of a session pool (src/upstream/pool.ts): exclusive (one call) or one of
 * the calls of a shared session. It ends once; the pool then puts the session back warm, closes
 * it, or (a cancelled call that may still run upstream) keeps it out of use until the call ended.
 */
import type { UpstreamSession } from './session.js';

/** How a lease gives its session back to the pool that made it. */
export interface LeaseEnds {
  /** The end of an exclusive lease: the session goes back once `ended` says whether it is reusable. */
  endExclusive(session: UpstreamSession, ended: boolean | Promise<boolean>): void;
  /** The end of one call on a shared session; `reusable` false taints the session. */
  endShared(session: UpstreamSession, reusable: boolean): void;
}

/** A hold on one session; give it back with {@link SessionLease.release}. */
export interface SessionLease {
  readonly session: UpstreamSession;
  /** True when other calls may run on the session at the same time (`SessionPool.acquireCall`). */
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
export class Lease implements SessionLease {
  private done = false;
  constructor(
    readonly session: UpstreamSession,
    private readonly pool: LeaseEnds,
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
