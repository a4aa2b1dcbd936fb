/**
 * The two time budgets of one legacy call (`timeouts.requestMs` and `timeouts.totalMs` of the
 * upstream): the call fails when the upstream is silent for `requestMs`, or works for `totalMs` in
 * all. Time the call spends waiting on the client or a sampling provider counts toward neither:
 * the silence budget restarts on every activity, the working-time budget pauses. One timer serves
 * both, firing at the earlier deadline.
 */
import { upstreamFailed, type GatewayError } from '../../protocol/errors.js';

/** The budgets of one call and what happens when one runs out. */
export class CallTimeouts {
  /** One timer for both budgets below: it fires at the earlier deadline (`timerAt`), or re-arms when activity moved it. */
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  /** Silence deadline (`requestMs` after the last upstream activity) and working-time deadline (`totalMs`), epoch ms, while active. */
  private idleAt = 0;
  private totalAt = 0;
  private activeUsedMs = 0;
  private activeSince: number | undefined;

  /**
   * @param limits the upstream's `timeouts` (ms).
   * @param expired called once a budget runs out, with the -32603 `timeout` error to end the call with.
   */
  constructor(
    private readonly upstream: string,
    private readonly limits: { readonly requestMs: number; readonly totalMs: number },
    private readonly expired: (error: GatewayError) => void,
  ) {}

  /**
   * Restarts the silence budget (`requestMs`, upstream activity) and pauses the working-time budget
   * (`totalMs`) while the call waits on the client or a provider (`waitingOnOthers`), or resumes it.
   */
  arm(waitingOnOthers: boolean): void {
    const now = Date.now();
    if (waitingOnOthers) {
      if (this.activeSince !== undefined) this.activeUsedMs += now - this.activeSince;
      this.activeSince = undefined;
      return this.clear();
    }
    if (this.activeSince === undefined) {
      this.activeSince = now;
      this.totalAt = now + Math.max(0, this.limits.totalMs - this.activeUsedMs);
    }
    this.idleAt = now + this.limits.requestMs;
    const due = Math.min(this.idleAt, this.totalAt);
    // A timer due no later checks the deadlines when it fires.
    if (this.timer && this.timerAt <= due) return;
    clearTimeout(this.timer);
    this.setTimer(due, now);
  }

  /** Stops the timer (the call ended, or waits on others). */
  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private setTimer(due: number, now: number): void {
    this.timerAt = due;
    this.timer = setTimeout(() => this.onTimer(), due - now);
  }

  /** The timer fired: the call ran out of working time or was silent too long, or activity moved the deadline. */
  private onTimer(): void {
    this.timer = undefined;
    const now = Date.now();
    const { requestMs, totalMs } = this.limits;
    if (now >= this.totalAt)
      return this.expired(
        upstreamFailed(this.upstream, 'timeout', `Upstream '${this.upstream}' did not finish within totalMs=${totalMs} ms`),
      );
    if (now >= this.idleAt)
      return this.expired(
        upstreamFailed(this.upstream, 'timeout', `Upstream '${this.upstream}' sent nothing for requestMs=${requestMs} ms`),
      );
    this.setTimer(Math.min(this.idleAt, this.totalAt), now);
  }
}
