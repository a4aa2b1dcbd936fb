/**
 * What happened to one upstream's sessions since the gateway started: sessions opened, sessions
 * that died, restarts, opens that failed, and the last failure with the stdio child's stderr
 * tail. Fed by the session pool's observer hooks and by the era probe; read by the admin view.
 */

/** The last failure of an upstream. */
export interface UpstreamFailure {
  /** ISO 8601. */
  at: string;
  /** `open` (a session could not be opened), `died` (an open session was lost) or `probe` (the era probe failed). */
  kind: 'open' | 'died' | 'probe';
  message: string;
  /** The stdio child's last stderr lines, oldest first (empty for HTTP upstreams). */
  stderr: string[];
}

/** Counters of one upstream's sessions. */
export interface UpstreamHealthSnapshot {
  /** Sessions opened since start. */
  opened: number;
  /** Open sessions lost without the gateway closing them (a stdio child exited, an HTTP session was lost). */
  died: number;
  /**
   * Sessions opened to replace one that died or could not be opened (for stdio: children started
   * again after a child exited or failed to start).
   */
  restarts: number;
  /** Attempts to open a session that failed (spawn, connect or initialize). */
  openFailures: number;
  lastFailure?: UpstreamFailure;
}

/** Counters and last failure of one upstream (see {@link UpstreamHealthSnapshot}). */
export class UpstreamHealth {
  private opened = 0;
  private died = 0;
  private openFailures = 0;
  private restarts = 0;
  /** Sessions lost (died, or a failed start) that no later open has replaced yet. */
  private unreplaced = 0;
  private last: UpstreamFailure | undefined;

  /** A session opened; it counts as a restart when it replaces a lost one. */
  noteOpened(): void {
    this.opened++;
    if (this.unreplaced > 0) {
      this.unreplaced--;
      this.restarts++;
    }
  }

  /** A session died for `reason`; `stderr`: the child's last lines. */
  noteDied(reason: string, stderr: string[]): void {
    this.died++;
    this.unreplaced++;
    this.last = { at: new Date().toISOString(), kind: 'died', message: reason, stderr: [...stderr] };
  }

  /** A session could not be opened. */
  noteOpenFailed(message: string, stderr: string[]): void {
    this.openFailures++;
    // Retries of one failing start replace one session, however many attempts they take.
    if (this.unreplaced === 0) this.unreplaced = 1;
    this.last = { at: new Date().toISOString(), kind: 'open', message, stderr: [...stderr] };
  }

  /** Asking the upstream's era (`server/discover`) failed. */
  noteProbeFailed(message: string, stderr: string[]): void {
    this.last = { at: new Date().toISOString(), kind: 'probe', message, stderr: [...stderr] };
  }

  /** The counters and the last failure (not cleared by later successes). */
  snapshot(): UpstreamHealthSnapshot {
    return {
      opened: this.opened,
      died: this.died,
      restarts: this.restarts,
      openFailures: this.openFailures,
      ...(this.last ? { lastFailure: { ...this.last, stderr: [...this.last.stderr] } } : {}),
    };
  }
}
