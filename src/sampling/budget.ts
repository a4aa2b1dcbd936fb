/**
 * Bounds of provider-answered sampling: token budgets (per upstream and per principal) over a
 * sliding window in process memory, or over fixed windows shared by all replicas on Redis, and a
 * concurrency cap with a bounded queue (per provider, per process).
 */
import { LRUCache } from 'lru-cache';
import type { SharedTokenWindows } from '../store/counters.js';
import type { StoreFallback } from '../store/limiters.js';
import { SamplingError } from './errors.js';

/** Slots a window is counted in: usage expires in steps of `windowMs / SLOTS`. */
const SLOTS = 60;

/** Tokens spent in one sliding window, counted in {@link SLOTS} slots, plus tokens reserved by requests in flight. */
class TokenWindow {
  private readonly slotMs: number;
  /** Slot index → tokens spent in it. */
  private readonly slots = new Map<number, number>();
  reserved = 0;

  constructor(
    readonly limit: number,
    readonly windowMs: number,
  ) {
    this.slotMs = Math.max(1, windowMs / SLOTS);
  }

  private prune(now: number): number {
    const current = Math.floor(now / this.slotMs);
    let used = 0;
    for (const [i, t] of this.slots) {
      if (i <= current - SLOTS) this.slots.delete(i);
      else used += t;
    }
    return used;
  }

  /** Tokens spent in the window ending now. */
  used(now: number): number {
    return this.prune(now);
  }

  /** Records `tokens` spent at `now`. */
  spend(tokens: number, now: number): void {
    if (tokens <= 0) return;
    const i = Math.floor(now / this.slotMs);
    this.slots.set(i, (this.slots.get(i) ?? 0) + tokens);
  }

  /** Milliseconds until `need` tokens fit, counting only spent tokens leaving the window. */
  retryAfter(need: number, now: number): number {
    let room = this.limit - this.prune(now) - this.reserved;
    for (const i of [...this.slots.keys()].sort((a, b) => a - b)) {
      room += this.slots.get(i)!;
      if (room >= need) return Math.max(0, Math.ceil((i + SLOTS) * this.slotMs - now));
    }
    return this.windowMs;
  }
}

/** One budget a request is checked against. */
export interface BudgetLimit {
  /** `upstream` (all principals of an upstream) or `principal` (one principal on an upstream). */
  scope: 'upstream' | 'principal';
  /** Identifies the window (upstream, and principal for `principal`). */
  key: string;
  /** Most tokens per window. */
  limit: number;
  windowMs: number;
}

/** Tokens held for one request in flight; settle it exactly once. */
export interface Reservation {
  /** Replaces the reservation with the tokens the request used (input + output, as reported or estimated), spent at `now` (epoch ms). */
  commit(tokens: number, now?: number): void;
  /** Drops the reservation, counting nothing (the request failed). */
  release(): void;
}

/** What {@link TokenBudgets} counts in when the store is shared (Redis), and where it reports falling back. */
export interface SharedBudgetOptions {
  /** The fleet-wide windows (src/store/counters.ts). */
  windows: SharedTokenWindows;
  /** Told of each request counted in memory instead (`sampling-budget`), and when Redis counts again. */
  fallback: StoreFallback;
}

/** One window a shared reservation holds tokens in. */
interface SharedHold {
  id: string;
  need: number;
  windowMs: number;
  /** When the window it was counted in ends (epoch ms, this process's clock). */
  endsAt: number;
  /** This replica's memory window, which mirrors what is spent (the count to fall back to). */
  mirror: TokenWindow;
}

/**
 * Token budgets by key. In memory: sliding windows (60 slots). With `shared` (the Redis store):
 * fixed windows counted by all replicas together (src/store/counters.ts), mirrored in memory; when
 * Redis cannot be reached a request is checked against this replica's memory windows instead (fail
 * open) and `shared.fallback` is told.
 */
export class TokenBudgets {
  // maxSize, not max: lru-cache allocates `max` slots up front, at every start.
  private readonly windows = new LRUCache<string, TokenWindow>({ maxSize: 100_000, sizeCalculation: () => 1 });

  constructor(private readonly shared?: SharedBudgetOptions) {}

  private window(l: BudgetLimit): { id: string; w: TokenWindow } {
    const id = `${l.key}\u0000${l.limit}\u0000${l.windowMs}`;
    let w = this.windows.get(id);
    if (!w) this.windows.set(id, (w = new TokenWindow(l.limit, l.windowMs)));
    return { id, w };
  }

  /**
   * Reserves `tokens` like {@link reserve}: in the shared windows when the store is shared (a
   * window admits while its count, spent and held on all replicas, leaves room for
   * `min(tokens, limit)`), else, or when Redis cannot be reached, in this process's windows.
   * @throws SamplingError `budget` as {@link reserve} does; shared: `data.retryAfterMs` is the time
   *   until the window ends.
   */
  async acquire(limits: BudgetLimit[], tokens: number): Promise<Reservation> {
    if (this.shared && limits.length) {
      try {
        const held = await this.reserveShared(this.shared.windows, limits, tokens);
        this.shared.fallback.counted();
        return held;
      } catch (e) {
        if (e instanceof SamplingError) {
          this.shared.fallback.counted();
          throw e;
        }
        this.shared.fallback.fellBack('sampling-budget', e);
      }
    }
    return this.reserve(limits, tokens);
  }

  /** {@link acquire} in the shared windows; rejects with the store's error when it cannot be reached (nothing stays held). */
  private async reserveShared(shared: SharedTokenWindows, limits: BudgetLimit[], tokens: number): Promise<Reservation> {
    const held: SharedHold[] = [];
    const giveBack = () => Promise.all(held.map((h) => shared.add(h.id, -h.need, h.windowMs).catch(() => {})));
    try {
      for (const l of limits) {
        const { id, w } = this.window(l);
        const need = Math.ceil(Math.min(tokens, l.limit));
        const r = await shared.take(id, need, l.limit, l.windowMs);
        if (!r.admitted) {
          const who = l.scope === 'upstream' ? 'this upstream' : 'this principal on this upstream';
          throw new SamplingError(
            'budget',
            `Sampling token budget of ${who} exhausted: ${r.used} of ${l.limit} tokens spent or held by requests in flight, on all replicas, in the current window of ${l.windowMs} ms; this request needs room for ${need}`,
            { scope: l.scope, limit: l.limit, windowMs: l.windowMs, retryAfterMs: Math.max(0, r.msLeft) },
          );
        }
        held.push({ id, need, windowMs: l.windowMs, endsAt: Date.now() + r.msLeft, mirror: w });
      }
    } catch (e) {
      await giveBack();
      throw e;
    }
    let settled = false;
    const settle = (spent: number, at: number) => {
      if (settled) return;
      settled = true;
      for (const h of held) {
        h.mirror.spend(spent, at);
        // Still in the window it was held in: the hold becomes what was spent; else the hold left
        // with its window and what was spent counts in the one open now.
        const delta = at < h.endsAt ? spent - h.need : spent;
        shared.add(h.id, Math.round(delta), h.windowMs).catch((err) => this.shared?.fallback.fellBack('sampling-budget', err));
      }
    };
    return { commit: (n, at = Date.now()) => settle(n, at), release: () => settle(0, Date.now()) };
  }

  /**
   * Reserves `tokens` (a request's capped maxTokens) in every window of `limits` in this process,
   * or refuses. A window admits a request while the tokens spent in it, plus those reserved by
   * requests in flight, leave room for `min(tokens, limit)`; a request larger than a whole budget
   * is admitted only into an otherwise empty window.
   * @throws SamplingError `budget` naming the scope, limit and window, with `data.retryAfterMs`
   *   (when room for the request frees up as spent tokens leave the window).
   */
  reserve(limits: BudgetLimit[], tokens: number, now = Date.now()): Reservation {
    const held: { w: TokenWindow; n: number }[] = [];
    for (const l of limits) {
      const { w } = this.window(l);
      const need = Math.min(tokens, l.limit);
      const used = w.used(now);
      if (used + w.reserved + need > l.limit) {
        const retryAfterMs = w.retryAfter(need, now);
        const who = l.scope === 'upstream' ? 'this upstream' : 'this principal on this upstream';
        throw new SamplingError(
          'budget',
          `Sampling token budget of ${who} exhausted: ${used} of ${l.limit} tokens spent in the last ${l.windowMs} ms${w.reserved ? ` and ${w.reserved} held by requests in flight` : ''}; this request needs room for ${need}`,
          { scope: l.scope, limit: l.limit, windowMs: l.windowMs, retryAfterMs },
        );
      }
      held.push({ w, n: need });
    }
    for (const h of held) h.w.reserved += h.n;
    let settled = false;
    const settle = (spent: number, at: number) => {
      if (settled) return;
      settled = true;
      for (const h of held) {
        h.w.reserved -= h.n;
        h.w.spend(spent, at);
      }
    };
    return { commit: (n, at = Date.now()) => settle(n, at), release: () => settle(0, Date.now()) };
  }
}

/** A concurrency cap with a bounded FIFO queue. */
export class Slots {
  private active = 0;
  private readonly queue: { grant: () => void }[] = [];

  constructor(
    readonly max: number,
    readonly maxQueued: number,
  ) {}

  /** Requests holding a slot. */
  get inFlight(): number {
    return this.active;
  }

  /**
   * Waits for a slot until `deadline` (epoch ms); resolves with its release function (call once).
   * @throws SamplingError `busy` when the queue is full or no slot frees up by the deadline;
   *   `cancelled` when `signal` aborts first.
   */
  acquire(deadline: number, signal?: AbortSignal): Promise<() => void> {
    if (signal?.aborted) return Promise.reject(new SamplingError('cancelled', 'The sampling request was withdrawn'));
    if (this.active < this.max) {
      this.active++;
      return Promise.resolve(this.releaser());
    }
    if (this.queue.length >= this.maxQueued) {
      return Promise.reject(
        new SamplingError(
          'busy',
          `The provider has ${this.max} requests in flight and ${this.queue.length} waiting (maxConcurrent, maxQueued)`,
        ),
      );
    }
    return new Promise((resolve, reject) => {
      const entry = {
        grant: () => {
          cleanup();
          resolve(this.releaser());
        },
      };
      const drop = (err: SamplingError) => {
        const i = this.queue.indexOf(entry);
        if (i >= 0) this.queue.splice(i, 1);
        cleanup();
        reject(err);
      };
      const timer = setTimeout(
        () => drop(new SamplingError('busy', `No provider slot became free within the time limit (maxConcurrent ${this.max})`)),
        Math.max(0, deadline - Date.now()),
      );
      const onAbort = () => drop(new SamplingError('cancelled', 'The sampling request was withdrawn'));
      const cleanup = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      this.queue.push(entry);
    });
  }

  private releaser(): () => void {
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const next = this.queue.shift();
      if (next) next.grant();
      else this.active--;
    };
  }
}
