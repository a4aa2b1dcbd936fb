/**
 * The `subscriptions/listen` the reverse bridge holds upstream for one legacy client session
 * (MCP 2026-07-28 §Subscriptions), so that the legacy client gets the list changes and resource
 * updates it would get from a legacy server on its standalone (GET) stream.
 *
 * The filter asks for each list change the upstream offers (`listChanged` in its `server/discover`
 * capabilities) and, when it offers `resources.subscribe`, for the URIs the client subscribed to
 * with `resources/subscribe`. A listen's filter is fixed, so a change of the URIs opens a new
 * listen with the new filter; once the upstream acknowledged it, the old one is closed (a
 * notification may then arrive twice, never not at all). A listen the upstream ends (its completion
 * result, an error, a dropped stream) is opened again: after {@link REOPEN_BASE_MS} when it ended
 * with its completion result or had been acknowledged, else (an error, a refused connection, a drop
 * before the acknowledgement) after a delay that doubles with each such failure in a row up to
 * {@link REOPEN_MAX_MS}, for as long as the session lives. Only an answer -32601 / -32602 (the
 * upstream cannot listen, or not with this filter) makes the session go on without one (logged). Closing ends the listen upstream (its HTTP stream closes; over stdio the
 * upstream gets `notifications/cancelled`).
 */
import { ErrorCode } from '../../protocol/errors.js';
import type { Logger } from '../../observability/log.js';
import type { ModernUpstream } from '../../upstream/modern.js';

/** First delay before a listen the upstream ended is opened again, in ms. */
export const REOPEN_BASE_MS = 100;
/** Longest delay before a listen is opened again, in ms. */
export const REOPEN_MAX_MS = 30_000;

/** The 2026-07-28 listen filter (SubscriptionFilter) the bridge sends. */
export interface ReverseListenFilter {
  toolsListChanged?: true;
  promptsListChanged?: true;
  resourcesListChanged?: true;
  resourceSubscriptions?: string[];
}

/** What a 2026-07-28 upstream offers a listen, read from its `server/discover` capabilities. */
export interface ListenOffer {
  toolsListChanged: boolean;
  promptsListChanged: boolean;
  resourcesListChanged: boolean;
  /** `resources.subscribe`: the upstream honors `resourceSubscriptions`. */
  subscribe: boolean;
}

/** The {@link ListenOffer} of the upstream capabilities `caps` (`server/discover` `capabilities`). */
export function listenOffer(caps: Record<string, unknown>): ListenOffer {
  const flag = (k: string, bit: string) => (caps[k] as Record<string, unknown> | undefined)?.[bit] === true;
  return {
    toolsListChanged: flag('tools', 'listChanged'),
    promptsListChanged: flag('prompts', 'listChanged'),
    resourcesListChanged: flag('resources', 'listChanged'),
    subscribe: flag('resources', 'subscribe'),
  };
}

/** What a session's listen needs. */
export interface SessionListenInit {
  /** The upstream's name, in log lines. */
  upstream: string;
  modern: ModernUpstream;
  offer: ListenOffer;
  /** The session's `_meta` envelope for each listen request. */
  meta: () => Record<string, unknown>;
  /** Headers of the hop (the caller's credential); ignored on stdio. */
  hopHeaders?: Record<string, string>;
  /** Longest wait for the upstream's acknowledgement of a listen a `resources/subscribe` opened, in ms. */
  ackMs?: number;
  /** One notification for the client's standalone stream: its method and params (without the upstream's `_meta`). */
  notify: (method: string, params: Record<string, unknown>) => void;
  log: Logger;
}

/** The notifications a listen relays. */
const RELAYED = new Set([
  'notifications/tools/list_changed',
  'notifications/prompts/list_changed',
  'notifications/resources/list_changed',
  'notifications/resources/updated',
]);

interface Attempt {
  seq: number;
  abort: AbortController;
  /** The upstream acknowledged it: it worked, its end starts the backoff afresh. */
  acked: boolean;
}

/** The upstream listen of one legacy session (see the file header). */
export class SessionListen {
  private readonly uris = new Set<string>();
  /** The acknowledged listen that relays. */
  private current: Attempt | undefined;
  /** The sequence number of the newest listen opened. */
  private latest = 0;
  /** Failed listens in a row (errors, refused connections, drops before the acknowledgement). */
  private failures = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly init: SessionListenInit) {}

  /** Whether the upstream offers anything a listen can deliver (else the session holds none). */
  get offered(): boolean {
    const o = this.init.offer;
    return o.toolsListChanged || o.promptsListChanged || o.resourcesListChanged || o.subscribe;
  }

  /** Whether the upstream offers `resources.subscribe`. */
  get subscribable(): boolean {
    return this.init.offer.subscribe;
  }

  /** Opens the session's listen (after the client's `notifications/initialized`). */
  start(): void {
    if (!this.latest) void this.open();
  }

  /**
   * The client's `resources/subscribe` of `uri`: opens a listen naming it.
   * @returns whether the upstream acknowledged the URI (false: it refused it, or no listen opened
   *   within `ackMs`); a URI already subscribed resolves true at once.
   */
  async subscribe(uri: string): Promise<boolean> {
    if (this.uris.has(uri)) return true;
    this.uris.add(uri);
    const honored = await this.open();
    if (honored?.resourceSubscriptions?.includes(uri)) return true;
    this.uris.delete(uri);
    return false;
  }

  /** The client's `resources/unsubscribe` of `uri`: the listen no longer names it. */
  async unsubscribe(uri: string): Promise<void> {
    if (this.uris.delete(uri)) await this.open();
  }

  /** Ends the listen upstream and opens none again. Idempotent. */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.current?.abort.abort('session closed');
    this.current = undefined;
  }

  private filter(): ReverseListenFilter {
    const o = this.init.offer;
    return {
      ...(o.toolsListChanged ? { toolsListChanged: true as const } : {}),
      ...(o.promptsListChanged ? { promptsListChanged: true as const } : {}),
      ...(o.resourcesListChanged ? { resourcesListChanged: true as const } : {}),
      ...(o.subscribe && this.uris.size ? { resourceSubscriptions: [...this.uris] } : {}),
    };
  }

  /**
   * Opens a listen with the current filter; once acknowledged it replaces the one open.
   * @returns the honored filter, or undefined when it ended (or `ackMs` passed) unacknowledged.
   */
  private open(): Promise<ReverseListenFilter | undefined> {
    clearTimeout(this.timer);
    if (this.closed) return Promise.resolve(undefined);
    const filter = this.filter();
    const attempt: Attempt = { seq: ++this.latest, abort: new AbortController(), acked: false };
    if (Object.keys(filter).length === 0) {
      this.current?.abort.abort('nothing to listen to');
      this.current = undefined;
      return Promise.resolve({});
    }
    let acknowledged!: (f: ReverseListenFilter | undefined) => void;
    const ack = new Promise<ReverseListenFilter | undefined>((r) => (acknowledged = r));
    const call = this.init.modern.request(
      'subscriptions/listen',
      { notifications: filter, _meta: this.init.meta() },
      {
        signal: attempt.abort.signal,
        ...(this.init.hopHeaders ? { hopHeaders: this.init.hopHeaders } : {}),
        onNotification: (n) => {
          const { _meta: _m, ...params } = n.params ?? {};
          if (n.method === 'notifications/subscriptions/acknowledged') {
            attempt.acked = true;
            this.acknowledged(attempt);
            return acknowledged((params.notifications ?? {}) as ReverseListenFilter);
          }
          if (this.current !== attempt || !RELAYED.has(n.method)) return;
          if (n.method === 'notifications/resources/updated' && !this.uris.has(String(params.uri))) return;
          this.init.notify(n.method, params);
        },
      },
    );
    void call.then(
      (answer) => this.ended(attempt, 'error' in answer ? answer.error : undefined),
      (e: Error) => this.ended(attempt, undefined, e.message),
    );
    void call.finally(() => acknowledged(undefined)).catch(() => {});
    const bound = this.init.ackMs;
    if (!bound) return ack;
    return Promise.race([ack, new Promise<undefined>((r) => setTimeout(() => r(undefined), bound).unref())]);
  }

  /** `attempt` was acknowledged: it relays from now on, and replaces an older one. */
  private acknowledged(attempt: Attempt): void {
    if (this.closed || attempt.seq < (this.current?.seq ?? 0) || attempt.seq !== this.latest) {
      // A newer listen was opened meanwhile: this one is not needed.
      if (attempt !== this.current) attempt.abort.abort('superseded');
      return;
    }
    const old = this.current;
    this.current = attempt;
    if (old && old !== attempt) old.abort.abort('superseded');
  }

  /**
   * `attempt` ended (with the upstream's `error`, or `dropped` for a lost stream): the newest is
   * opened again, after {@link REOPEN_BASE_MS} when it completed or was acknowledged, else after
   * the doubling backoff; not at all after -32601 / -32602.
   */
  private ended(attempt: Attempt, error?: { code: number; message: string }, dropped?: string): void {
    if (this.current === attempt) this.current = undefined;
    if (this.closed || attempt.abort.signal.aborted || attempt.seq !== this.latest) return;
    const why = error ? `${error.code} ${error.message}` : (dropped ?? 'completed');
    const refused = error?.code === ErrorCode.MethodNotFound || error?.code === ErrorCode.InvalidParams;
    if (refused) {
      this.init.log.warn(
        { upstream: this.init.upstream, why },
        'reverse bridge: the upstream refused subscriptions/listen; not listening again',
      );
      return;
    }
    const clean = attempt.acked || (!error && dropped === undefined);
    this.failures = clean ? 0 : this.failures + 1;
    const delay = Math.min(REOPEN_BASE_MS * 2 ** Math.max(this.failures - 1, 0), REOPEN_MAX_MS);
    this.init.log.debug(
      { upstream: this.init.upstream, why, delayMs: delay },
      'reverse bridge: subscriptions/listen ended; listening again',
    );
    this.timer = setTimeout(() => void this.open(), delay).unref();
  }
}
