/**
 * Starting the new sessions of a session pool (src/upstream/pool.ts). At most
 * `maxStartingSessions` sessions start at once (default {@link DEFAULT_STDIO_STARTS} on stdio,
 * where each start is a process; one while a first start may be installing): further new sessions
 * wait their turn in order ({@link StartLine}), within `queueMs`, and each start's budget runs
 * from when it begins. After failures, a start waits {@link backoffMs} first. The era probe's
 * stdio child, handed over, waits here for the next new session ({@link HandedOverChild}).
 */
import type { UpstreamConfig } from '../config/schema.js';
import { upstreamFailed, upstreamProtocolFault, type GatewayError } from '../protocol/errors.js';
import type { SessionLease } from './pool-lease.js';
import type { UpstreamSession } from './session.js';
import { refusalStatus, startTimeoutMessage, UpstreamStartError } from './start-errors.js';
import { endStdioChild, type FirstStart, type StdioChild } from './stdio-child.js';

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

/** A new session waiting for its turn to start (see {@link startLimit}). */
interface StartWaiter {
  key: string;
  /** Its turn came (no argument), or a warm session of its key was freed and handed to it instead. */
  go: (handed?: UpstreamSession) => void;
  timer: NodeJS.Timeout;
  /** Leaves the line with `err` (its timer fired, its caller went away, the pool closed). */
  leave: (err: Error) => void;
}

/** The line of new sessions waiting for their turn to start; see the file header. */
export class StartLine {
  /** Sessions starting now (spawn or connect, until `initialize` and the start barrier are done). */
  starting = 0;
  /** New sessions waiting for their turn to start, oldest first. */
  private line: StartWaiter[] = [];

  constructor(
    private readonly name: string,
    private readonly cfg: UpstreamConfig,
    private readonly firstStart: FirstStart,
  ) {}

  /** How many new sessions wait for their turn. */
  get waiting(): number {
    return this.line.length;
  }

  /**
   * Waits for a turn to start a session of `key` (at most {@link startLimit} start at once, the
   * others in order), up to `timeouts.queueMs`. Resolves undefined when the turn came (the caller
   * then starts and calls {@link end} when the start is over), or with a warm session of `key`
   * that was freed meanwhile and handed over instead.
   * @throws GatewayError -32603 `busy` when no turn came within `queueMs`, `cancelled` when
   *   `signal` aborted, `shutting-down` when the pool closed.
   */
  turn(key: string, signal?: AbortSignal): Promise<UpstreamSession | undefined> {
    const limit = this.atOnce();
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
          this.line = this.line.filter((x) => x !== w);
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
      this.line.push(w);
    });
  }

  /** How many sessions may start at once now: one while a first start may be installing, else {@link startLimit}. */
  private atOnce(): number {
    return this.firstStart.active ? 1 : startLimit(this.cfg);
  }

  /** A start is over (opened or failed): the next new sessions in line start, as many as may start at once. */
  end(): void {
    this.starting--;
    let next: StartWaiter | undefined;
    while (this.starting < this.atOnce() && (next = this.line.shift())) {
      this.starting++;
      next.go();
    }
  }

  /** Hands `session` (warm, just freed) to the oldest new session of its key waiting for its turn; false when there is none. */
  handTo(session: UpstreamSession): boolean {
    const next = this.line.findIndex((w) => w.key === session.key);
    if (next < 0) return false;
    const [w] = this.line.splice(next, 1);
    w!.go(session);
    return true;
  }

  /** Every new session waiting leaves the line with the error `failure` makes (the pool closes). */
  leaveAll(failure: () => Error): void {
    for (const w of [...this.line]) w.leave(failure());
  }
}

/**
 * The era probe's stdio child handed over to a legacy pool (see `ModernUpstream.handOver`), until
 * the next new session (or a legacy client's pass-through session) takes it; unused when the
 * budget it was spawned with ends (or the pool closes), it is ended.
 */
export class HandedOverChild {
  private held: { child: StdioChild; timer: NodeJS.Timeout } | undefined;

  /** True while a handed-over child waits here. */
  get present(): boolean {
    return this.held !== undefined;
  }

  /** Keeps `child` for the next new session (a child held before is ended); ends it at once when the pool is `closed`. */
  put(child: StdioChild, closed: boolean): void {
    this.drop();
    if (closed) return void endStdioChild(child, () => child.close());
    const left = child.budgetMs - (performance.now() - child.spawnedAt);
    const timer = setTimeout(() => this.drop(), Math.max(0, left));
    timer.unref();
    this.held = { child, timer };
    // It exits before it is used: nothing to hand over any more.
    child.onclose = () => {
      if (this.held?.child === child) this.take();
    };
  }

  /** The child, if it still runs, taken out for the caller to use. */
  take(): StdioChild | undefined {
    const a = this.held;
    this.held = undefined;
    if (!a) return undefined;
    clearTimeout(a.timer);
    return a.child.child ? a.child : undefined;
  }

  /** Ends the child nobody used. */
  private drop(): void {
    const child = this.take();
    if (child) void endStdioChild(child, () => child.close());
  }
}

/**
 * The -32603 a caller gets for a new session that failed to start (`e`, its message `msg`):
 * `timeout` naming the start's budget (`budgetMs` from `setting`), `protocol` when the upstream
 * broke the protocol in `initialize`, else `unreachable`; with the stdio child's last stderr lines
 * as `data.stderr`.
 */
export function startFailure(name: string, e: unknown, msg: string, budgetMs: number, setting: string): GatewayError {
  const stderr = e instanceof UpstreamStartError ? e.stderr : [];
  const extra = stderr.length ? { stderr } : undefined;
  if (e instanceof UpstreamStartError && e.reason === 'timeout') {
    return upstreamFailed(name, 'timeout', startTimeoutMessage(name, budgetMs, msg, 'initialize', setting), extra);
  }
  if (e instanceof UpstreamStartError && e.fault) return upstreamProtocolFault(name, e.fault.what, e.fault.problem);
  const err = upstreamFailed(name, 'unreachable', `Upstream '${name}' could not be started or reached: ${msg}`, extra);
  err.upstreamStatus = refusalStatus(e);
  return err;
}

/**
 * A new session being opened (`opening`, begun at `started`, `performance.now()` ms) as one caller
 * waits for it: its time goes to `opts.timing.upstreamMs`, and when `opts.signal` aborts first the
 * caller gets -32603 `cancelled` at once while the open goes on; a session that opens then is put
 * back warm.
 */
export function forCaller(
  name: string,
  started: number,
  opening: Promise<SessionLease>,
  opts: { signal?: AbortSignal; timing?: { upstreamMs: number } },
): Promise<SessionLease> {
  const { signal, timing } = opts;
  const charge = () => {
    if (timing) timing.upstreamMs += performance.now() - started;
  };
  if (!signal) return opening.finally(charge);
  return new Promise<SessionLease>((resolve, reject) => {
    const gone = () => {
      charge();
      reject(upstreamFailed(name, 'cancelled', `The client went away while upstream '${name}' was starting`));
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
