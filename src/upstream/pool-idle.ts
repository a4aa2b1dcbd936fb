/**
 * The warm, idle sessions of a session pool (src/upstream/pool.ts), by pool key: the most recently
 * idle one of a key is taken first, and a session idle for `idleSessionMs` is closed by one sweep
 * timer per pool (not one timer per idle session). Each idle session holds a slot of the pool; the
 * pool is told (`free`) when one is given up here.
 */
import type { Logger } from '../observability/log.js';
import type { UpstreamSession } from './session.js';

interface IdleEntry {
  session: UpstreamSession;
  /** When it went idle (epoch ms): it closes `idleSessionMs` later unless taken before. */
  since: number;
}

/** The idle sessions of one pool; see the file header. */
export class IdleSessions {
  private readonly lists = new Map<string, IdleEntry[]>();
  /** The timer of {@link sweep}, while sessions are idle. */
  private sweeper: NodeJS.Timeout | undefined;

  /**
   * @param idleMs how long a session may stay idle before it is closed (`idleSessionMs`), in ms.
   * @param free gives the slot of a session of `key` that left the idle list closed or dead back to the pool.
   * @param closed true once the pool closed (no sweep is armed then).
   */
  constructor(
    private readonly name: string,
    private readonly idleMs: number,
    private readonly log: Logger,
    private readonly free: (key: string) => void,
    private readonly closed: () => boolean,
  ) {}

  /** How many sessions are idle. */
  get size(): number {
    let idle = 0;
    for (const l of this.lists.values()) idle += l.length;
    return idle;
  }

  /** True when a session of `key` is idle (it may have died since). */
  has(key: string): boolean {
    return !!this.lists.get(key)?.length;
  }

  /** Keeps `session` warm from now on (the sweep closes it `idleMs` later unless taken before). */
  put(session: UpstreamSession): void {
    const list = this.lists.get(session.key);
    if (list) list.push({ session, since: Date.now() });
    else this.lists.set(session.key, [{ session, since: Date.now() }]);
    this.sweepLater(this.idleMs);
  }

  /** The most recently idle live session of `key`, taken out of the idle list (an emptied list stays for the next session that goes idle; the sweep drops it). */
  take(key: string): UpstreamSession | undefined {
    const list = this.lists.get(key);
    while (list && list.length) {
      const entry = list.pop()!;
      if (!entry.session.deadReason) return entry.session;
      this.free(key);
    }
    return undefined;
  }

  /** Forgets `session` if it is idle (it died there), freeing its slot; true when it was. */
  drop(session: UpstreamSession): boolean {
    const list = this.lists.get(session.key);
    const i = list?.findIndex((e) => e.session === session) ?? -1;
    if (!list || i < 0) return false;
    list.splice(i, 1);
    if (!list.length) this.lists.delete(session.key);
    this.free(session.key);
    return true;
  }

  /** Closes the least recently used idle session (of a key `match` accepts, or of any), freeing a slot; true when there was one. */
  evict(match?: (key: string) => boolean): boolean {
    for (const [key, list] of this.lists) {
      if (match && !match(key)) continue;
      const entry = list.shift();
      if (!entry) continue;
      if (!list.length) this.lists.delete(key);
      this.free(key);
      void entry.session.close();
      return true;
    }
    return false;
  }

  /** Arms the idle sweep `ms` from now, unless it is armed already. */
  private sweepLater(ms: number): void {
    if (this.sweeper || this.closed()) return;
    this.sweeper = setTimeout(() => this.sweep(), ms);
    this.sweeper.unref();
  }

  /** Closes the sessions idle for `idleMs` or more, and arms the sweep for the next to come due. */
  private sweep(): void {
    this.sweeper = undefined;
    const now = Date.now();
    const idleMs = this.idleMs;
    let next = Infinity;
    for (const [key, list] of [...this.lists]) {
      // Also drops the lists take emptied.
      const kept = list.filter((e) => {
        if (now - e.since < idleMs) return ((next = Math.min(next, e.since + idleMs)), true);
        this.free(key);
        this.log.info({ upstream: this.name, session: e.session.id }, 'idle upstream session closed');
        void e.session.close();
        return false;
      });
      if (kept.length) this.lists.set(key, kept);
      else this.lists.delete(key);
    }
    if (next < Infinity) this.sweepLater(Math.max(1, next - now));
  }

  /** Stops the sweep and closes every idle session (their slots are not given back: the pool is closing). */
  closeAll(): Promise<void>[] {
    clearTimeout(this.sweeper);
    this.sweeper = undefined;
    const all: Promise<void>[] = [];
    for (const list of this.lists.values()) for (const e of list) all.push(e.session.close());
    this.lists.clear();
    return all;
  }
}
