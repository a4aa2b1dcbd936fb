/**
 * The upstream session of one Exchange and how it is given back (docs/architecture.md, "Attribution
 * decides the lease"): warm when the call ended cleanly, closed otherwise. A cancelled call is
 * detached at once (nothing it asks later reaches a client); the upstream is told
 * (`notifications/cancelled`, and `tasks/cancel` for a 2025-11-25 upstream task), and the session
 * then goes back to no one, unless the upstream answered the cancelled request anyway, which shows
 * the call is over. A call that waits for the gateway's approval holds no session until it is
 * given one ({@link CallLease.take}).
 */
import { CancelTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';
import type { SessionLease } from '../../upstream/pool-lease.js';
import type { CallHandlers } from '../../upstream/session-calls.js';

/**
 * Longest wait, after `notifications/cancelled`, for the upstream's answer to the cancelled request,
 * in ms: an answer shows the call ended, and its session is reused; without one it is closed.
 */
const CANCEL_ANSWER_WAIT_MS = 1000;

/** Longest wait for an upstream `tasks/cancel` answer before the cancelled call's session is closed, in ms. */
const CANCEL_TASK_WAIT_MS = 2000;

/** The session one call (`id`, attached as `handlers`) runs on; see the file header. */
export class CallLease {
  /** The session, once the call has one. */
  lease: SessionLease | undefined;
  /** Set when the call runs upstream as a 2025-11-25 task, with that task's TTL (ms). */
  legacyTask: { ttlMs: number } | undefined;
  /** The upstream's own task id when the call runs as a 2025-11-25 task upstream. */
  upstreamTaskId: string | undefined;
  /** Aborted when the call is cancelled, for the requests of a 2025-11-25 task upstream (made for those only). */
  taskAbort: AbortController | undefined;
  /** Set by {@link cancel}. */
  cancelled = false;
  private released = false;
  private cancelSent = false;

  constructor(
    private readonly id: string,
    private readonly handlers: CallHandlers,
    lease: SessionLease | undefined,
    legacyTask: { ttlMs: number } | undefined,
  ) {
    this.take(lease, legacyTask);
  }

  /** Gives the call its session (and whether it runs as an upstream task). */
  take(lease: SessionLease | undefined, legacyTask: { ttlMs: number } | undefined): void {
    this.lease = lease;
    this.legacyTask = legacyTask;
  }

  /**
   * The call was cancelled: on the next turn (after the answers written so far, so the upstream
   * sees them first) the upstream is told, and the session is given back once it was. Nothing is
   * sent for a call that holds no session yet.
   */
  cancel(reason: string): void {
    this.cancelled = true;
    const lease = this.lease;
    if (!lease) return;
    setImmediate(() => {
      lease.session.cancel(this.id, reason);
      this.taskAbort?.abort(reason);
      const cancelTask = this.upstreamTaskId
        ? lease.session.request({ method: 'tasks/cancel', params: { taskId: this.upstreamTaskId } }, CancelTaskResultSchema).then(
            () => {},
            () => {},
          )
        : Promise.resolve();
      void Promise.race([cancelTask, new Promise((r) => setTimeout(r, CANCEL_TASK_WAIT_MS))]).then(() => {
        this.cancelSent = true;
        this.release(false);
      });
    });
  }

  /**
   * Gives the session back: warm when `reusable`, closed otherwise; a cancelled call's is detached
   * at once and given back once the cancellation went out, never to be reused by another call of
   * its own (a shared session goes on carrying the calls it has).
   */
  release(reusable: boolean): void {
    const lease = this.lease;
    if (this.released || !lease) return;
    if (this.cancelled) {
      lease.session.detach(this.id, this.handlers);
      if (!this.cancelSent) return;
    }
    this.released = true;
    lease.session.detach(this.id, this.handlers);
    if (!this.cancelled) return lease.release(reusable);
    // The call is over upstream only if the upstream answers the cancelled request anyway.
    const answered =
      this.upstreamTaskId || this.legacyTask ? Promise.resolve(false) : lease.session.whenAnswered(this.id, CANCEL_ANSWER_WAIT_MS);
    lease.releaseWhen(answered);
  }
}
