/**
 * The list cache of one 2026-07-28 upstream (MCP 2026-07-28 server/utilities/caching, SEP-2549):
 * the results of `tools/list`, `prompts/list`, `resources/list` and `server/discover` are kept for
 * the `ttlMs` the upstream put on them, so a client of any era (2026-07-28 on `/mcp/NAME` and
 * `/mcp`, legacy through the reverse bridge) is answered without asking the upstream again.
 *
 * - Each page is kept on its own, keyed by the request's params (its `cursor`) and the client
 *   capabilities sent upstream; a `cacheScope: "private"` result (or one without `cacheScope`, the
 *   default) also by the caller's principal, a `"public"` one shared by every principal. A request
 *   carrying a per-caller credential (`hopHeaders`: a forwarded `Authorization`, an exchanged or
 *   granted token) is keyed by its principal and a SHA-256 digest of those headers (never the token):
 *   it is answered only from what the upstream answered to that same credential, even when every
 *   caller is one principal (`auth.mode: "none"`) or a principal's token changes.
 * - Not kept: `ttlMs` 0 or absent, anything but a `complete` result, errors, and requests carrying
 *   `requestState` or `inputResponses`.
 * - A result served from the cache carries the time it has left as its `ttlMs` (ms, floored).
 * - Dropped: a list's entries when any request of the upstream (a `subscriptions/listen` stream,
 *   whoever opened it) brings `notifications/{tools,prompts,resources}/list_changed`, or when the
 *   gateway learns of a change otherwise ({@link ListCache.drop}). A listing begun before a drop is
 *   not kept after it.
 * - Bounded: at most `maxEntries` results (least recently used go first); 0 keeps none.
 *
 * What is kept is the upstream's own answer: the gateway's `tools` policy and tool-name rules apply
 * to a kept list as to a fresh one (the router and the reverse bridge filter after this hop).
 */
import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { canonicalJson } from '../protocol/canonical.js';
import { META_CLIENT_CAPABILITIES } from '../protocol/wire.js';
import type { ModernCallOptions, ModernNotification, ModernResponse, ModernUpstream } from './modern.js';

/** The methods whose results the cache keeps. */
export const CACHED_METHODS = ['tools/list', 'prompts/list', 'resources/list', 'server/discover'] as const;
export type CachedMethod = (typeof CACHED_METHODS)[number];

/** The list each change notification is about. */
const CHANGED: Record<string, CachedMethod> = {
  'notifications/tools/list_changed': 'tools/list',
  'notifications/prompts/list_changed': 'prompts/list',
  'notifications/resources/list_changed': 'resources/list',
};

/** Kept results of one upstream (see the file header). */
export class ListCache {
  private readonly entries: LRUCache<string, Record<string, unknown>> | undefined;
  /** Bumped on every drop: a listing begun before it is not kept. */
  private generation = 0;
  private hits = 0;
  private misses = 0;
  /** Called on every lookup (`hit`: answered from the cache), for the metrics. */
  onLookup: (method: CachedMethod, hit: boolean) => void = () => {};

  /** @param maxEntries most results kept (0: none). */
  constructor(maxEntries: number) {
    this.entries = maxEntries > 0 ? new LRUCache({ max: maxEntries, ttlAutopurge: false }) : undefined;
  }

  /** Lookups answered from the cache and sent upstream since start, and the results kept now. */
  stats(): { hits: number; misses: number; entries: number } {
    return { hits: this.hits, misses: this.misses, entries: this.entries?.size ?? 0 };
  }

  /** Forgets the kept results of `method` (every method when absent): the upstream's list changed. */
  drop(method?: CachedMethod): void {
    this.generation++;
    if (!this.entries) return;
    if (!method) return this.entries.clear();
    for (const key of [...this.entries.keys()]) if (key.startsWith(prefixOf(method))) this.entries.delete(key);
  }

  /**
   * The answer to `method` with `params` for the caller in `opts`: a kept result (with the `ttlMs`
   * it has left), else `send()`'s answer, kept when its hints allow.
   * @throws whatever `send` throws.
   */
  async serve(
    method: string,
    params: Record<string, unknown>,
    opts: ModernCallOptions,
    send: () => Promise<ModernResponse>,
  ): Promise<ModernResponse> {
    if (!this.entries || opts.principal === undefined || !cacheable(method, params)) return send();
    const { shared, own } = keysOf(method, params, opts.principal, opts.hopHeaders);
    const kept = (shared !== undefined ? this.lookup(shared) : undefined) ?? this.lookup(own);
    this.onLookup(method, kept !== undefined);
    if (kept) {
      this.hits++;
      return { result: kept };
    }
    this.misses++;
    const generation = this.generation;
    const answer = await send();
    if ('result' in answer && generation === this.generation) this.keep(answer.result, shared, own);
    return answer;
  }

  /** Calls {@link drop} for the list a change notification is about (other notifications: nothing). */
  noticed(n: ModernNotification): void {
    const method = CHANGED[n.method];
    if (method) this.drop(method);
  }

  /** A copy of the result kept under `key` with the `ttlMs` it has left, or undefined. */
  private lookup(key: string): Record<string, unknown> | undefined {
    const value = this.entries!.get(key);
    if (value === undefined) return undefined;
    const left = Math.floor(this.entries!.getRemainingTTL(key));
    return left > 0 ? { ...structuredClone(value), ttlMs: left } : undefined;
  }

  /** Keeps `result` for its `ttlMs`: under `shared` when it is public and may be shared, else under `own`. */
  private keep(result: Record<string, unknown>, shared: string | undefined, own: string): void {
    const { ttlMs, cacheScope, resultType } = result;
    if ((resultType ?? 'complete') !== 'complete' || typeof ttlMs !== 'number' || !Number.isFinite(ttlMs) || ttlMs <= 0) return;
    const key = cacheScope === 'public' && shared !== undefined ? shared : own;
    this.entries!.set(key, structuredClone(result), { ttl: Math.floor(ttlMs) });
  }
}

/** Whether a request may be answered from the cache: one of {@link CACHED_METHODS}, not a retry. */
function cacheable(method: string, params: Record<string, unknown>): method is CachedMethod {
  return (CACHED_METHODS as readonly string[]).includes(method) && params.requestState === undefined && params.inputResponses === undefined;
}

/** The start of every key of `method`. */
const prefixOf = (method: string) => `${method}\n`;

/**
 * The keys of a request to `method` with `params` by `principal`, `hopHeaders` the per-caller
 * credential headers that go upstream with it. `shared`: method, params (the cursor) and the client
 * capabilities sent, for a public result; absent when `hopHeaders` go upstream (never shared).
 * `own`: that plus the principal and the SHA-256 digest of `hopHeaders` (never the token), so the
 * same credential shares with itself and a different one never does.
 */
function keysOf(
  method: string,
  params: Record<string, unknown>,
  principal: string,
  hopHeaders: Record<string, string> | undefined,
): { shared?: string; own: string } {
  const { _meta: meta, ...rest } = params;
  const caps = (meta as Record<string, unknown> | undefined)?.[META_CLIENT_CAPABILITIES] ?? {};
  const base = `${prefixOf(method)}${canonicalJson(rest)}\n${canonicalJson(caps)}`;
  if (hopHeaders === undefined) return { shared: base, own: `${base}\n${canonicalJson([principal])}` };
  const credential = createHash('sha256').update(canonicalJson(hopHeaders), 'utf8').digest('base64url');
  return { own: `${base}\n${canonicalJson([principal, credential])}` };
}

/**
 * `up` answering {@link CACHED_METHODS} from `cache` for requests that name their caller
 * (`principal` in the options), and dropping kept lists on the change notifications any of its
 * requests brings.
 */
export function cachedModernUpstream(up: ModernUpstream, cache: ListCache): ModernUpstream {
  return {
    request(method, params, opts = {}) {
      const { principal: _p, ...rest } = opts;
      const heard = opts.onNotification;
      const watched: ModernCallOptions = {
        ...rest,
        onNotification: (n) => {
          cache.noticed(n);
          heard?.(n);
        },
      };
      return cache.serve(method, params, opts, () => up.request(method, params, watched));
    },
    close: (o) => up.close(o),
    ...(up.handOver ? { handOver: () => up.handOver!() } : {}),
    ...(up.keepStarting ? { keepStarting: () => up.keepStarting!() } : {}),
  };
}
