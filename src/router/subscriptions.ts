/**
 * `subscriptions/listen` behind the router (MCP 2026-07-28 §Subscriptions, SEP-2575; the
 * `taskIds` filter comes from the tasks extension, SEP-2663). Nothing here knows about HTTP: the
 * front door frames what a {@link Subscription} delivers as an SSE stream.
 *
 * A subscription honors, of what the client asked for:
 * - `toolsListChanged`, `promptsListChanged`, `resourcesListChanged`: when the upstream declared
 *   `listChanged` for that capability. The subscription holds one upstream session (leased like a
 *   call's, for the client's principal and mirrored capabilities) for as long as it is open, and
 *   relays that session's `notifications/{tools,prompts,resources}/list_changed`.
 * - `resourceSubscriptions`: the URIs the upstream accepted a legacy `resources/subscribe` for, on
 *   that same session (when it declared `resources.subscribe`); its
 *   `notifications/resources/updated` for those URIs are relayed, and each URI gets
 *   `resources/unsubscribe` when the subscription ends.
 * - `taskIds`: the caller's own tasks; `notifications/tasks` (the full DetailedTask) on each status
 *   change, until the task is terminal.
 *
 * Nothing is delivered that the client did not ask for. A subscription with nothing left to
 * deliver (no upstream part, and every listed task terminal) ends by itself.
 */
import type { UpstreamCredential } from '../upstream/credential.js';
import type { UpstreamConfig } from '../config/schema.js';
import { keepsSession } from '../upstream/failures.js';
import { GatewayError, upstreamFailed } from '../protocol/errors.js';
import type { Logger } from '../observability/log.js';
import { detailedTask, type TaskManager } from '../cells/bridge/tasks/manager.js';
import { tasksExtensionRequired } from '../protocol/tasks.js';
import { isTerminal, type TaskRecord } from '../store/tasks.js';
import { EmptyResultSchema, type ClientCapabilities as LegacyClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import type { SessionPool } from '../upstream/pool.js';
import type { SessionLease } from '../upstream/pool-lease.js';
import type { UpstreamNotification } from '../upstream/session.js';
import type { ModernUpstream } from '../upstream/modern.js';
import type { ToolCatalog } from '../upstream/tools.js';

/** The `notifications` filter of `subscriptions/listen` (SubscriptionFilter, plus the tasks extension's `taskIds`). */
export interface ListenFilter {
  toolsListChanged?: boolean;
  promptsListChanged?: boolean;
  resourcesListChanged?: boolean;
  resourceSubscriptions?: string[];
  taskIds?: string[];
}

/** Where a subscription delivers. Called only after {@link Subscription.attach}. */
export interface SubscriptionSink {
  /** One notification to relay: its method and params, without the `_meta` the front door adds. */
  notify(method: string, params: Record<string, unknown>): void;
  /**
   * The subscription is over: gracefully (no error: nothing left to deliver, or the gateway is
   * shutting down), or because the upstream session it relies on was lost (-32603).
   */
  end(error?: GatewayError): void;
}

/**
 * What the front door needs of an open `subscriptions/listen`: the honored filter (for the
 * acknowledgement), delivery to a sink, and closing when the client goes away. A
 * {@link Subscription} is one; the federated endpoint merges several into one.
 */
export interface ListenHandle {
  /** The honored subset of the filter, for `notifications/subscriptions/acknowledged`. */
  readonly honored: ListenFilter;
  /** Starts delivery to `sink` (what arrived before is delivered first). */
  attach(sink: SubscriptionSink): void;
  /** The client went away: releases everything without telling the sink. Idempotent. */
  close(): Promise<void>;
}

/** The upstream a subscription listens to (the router's `Upstream` fits). */
export interface ListenUpstream {
  readonly name: string;
  readonly cfg: UpstreamConfig;
  readonly pool: SessionPool;
  readonly tools: ToolCatalog;
}

/** Who is listening. */
export interface Listener {
  principal: string;
  /** The caller's credential for the upstream (resolved by the router), part of the session's pool key. */
  credential?: UpstreamCredential;
  /** The legacy capabilities mirrored from the request, for the upstream session. */
  caps: LegacyClientCapabilities;
  /** Whether the request declared the tasks extension (required for `taskIds`). */
  declaresTasks: boolean;
}

/** Most `resourceSubscriptions` URIs honored on one subscription; the rest are left out of the acknowledgement. */
export const MAX_RESOURCE_SUBSCRIPTIONS = 100;
/** How long an upstream `resources/unsubscribe` may take when a subscription ends, in ms. */
const UNSUBSCRIBE_TIMEOUT_MS = 1000;

const LIST_CHANGED: Record<string, 'toolsListChanged' | 'promptsListChanged' | 'resourcesListChanged'> = {
  'notifications/tools/list_changed': 'toolsListChanged',
  'notifications/prompts/list_changed': 'promptsListChanged',
  'notifications/resources/list_changed': 'resourcesListChanged',
};

/** One open `subscriptions/listen`. Create with {@link openSubscription}. */
export class Subscription implements ListenHandle {
  /** The honored subset of the filter, for `notifications/subscriptions/acknowledged`. */
  readonly honored: ListenFilter = {};
  private sink: SubscriptionSink | undefined;
  private buffered: [string, Record<string, unknown>][] = [];
  private ended: { error?: GatewayError } | undefined;
  private released = false;
  private readonly cleanups: (() => Promise<void> | void)[] = [];
  private readonly endListeners: (() => void)[] = [];
  private readonly openTasks = new Set<string>();
  /** True while upstream notifications are relayed (a session is held). */
  private upstreamPart = false;

  /**
   * Starts delivery to `sink`: first what arrived since the subscription was opened, then live.
   * The caller writes the acknowledgement before attaching.
   */
  attach(sink: SubscriptionSink): void {
    this.sink = sink;
    for (const [method, params] of this.buffered.splice(0)) sink.notify(method, params);
    if (this.ended) sink.end(this.ended.error);
  }

  /** Ends the subscription gracefully (gateway shutdown): the sink gets `end()`, resources are released. */
  end(): void {
    this.finish();
  }

  /** The client went away: releases everything without telling the sink. Idempotent. */
  async close(): Promise<void> {
    this.sink = undefined;
    this.ended ??= {};
    await this.release();
  }

  /** Calls `cb` once the subscription is over (ended or closed). */
  onEnd(cb: () => void): void {
    this.endListeners.push(cb);
  }

  private emit(method: string, params: Record<string, unknown>): void {
    if (this.ended) return;
    if (this.sink) this.sink.notify(method, params);
    else this.buffered.push([method, params]);
  }

  private finish(error?: GatewayError): void {
    if (this.ended) return;
    this.ended = error ? { error } : {};
    this.sink?.end(error);
    void this.release();
  }

  private async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    for (const c of this.cleanups.splice(0).reverse()) {
      try {
        await c();
      } catch {
        /* best effort */
      }
    }
    for (const cb of this.endListeners.splice(0)) cb();
  }

  private settleIfIdle(): void {
    if (!this.upstreamPart && this.openTasks.size === 0) this.finish();
  }

  /** Relays the upstream's change notifications that were asked for and honored. */
  private relay(n: UpstreamNotification, uris: ReadonlySet<string>): void {
    const filter = LIST_CHANGED[n.method];
    if (filter) {
      if (this.honored[filter]) this.emit(n.method, {});
      return;
    }
    if (n.method === 'notifications/resources/updated') {
      const uri = n.params?.uri;
      if (typeof uri === 'string' && uris.has(uri)) this.emit(n.method, { uri });
    }
  }

  /**
   * Holds an upstream session and subscribes to what it can deliver of `filter`; gives the session
   * back at once when the upstream can deliver none of it.
   */
  async listenUpstream(up: ListenUpstream, filter: ListenFilter, who: Listener, log: Logger): Promise<void> {
    const lease: SessionLease = await up.pool.acquire(who.principal, who.caps, who.credential);
    const { session } = lease;
    let reusable = true;
    const uris = new Set<string>();
    const stopRelay = session.onNotification((n) => this.relay(n, uris));
    const releaseSession = async () => {
      stopRelay();
      await Promise.all(
        [...uris].map((uri) =>
          session
            .request({ method: 'resources/unsubscribe', params: { uri } }, EmptyResultSchema, { timeout: UNSUBSCRIBE_TIMEOUT_MS })
            .catch(() => {
              // A session that may still carry the subscription is not reused.
              reusable = false;
            }),
        ),
      );
      lease.release(reusable);
    };
    try {
      up.tools.watch(session);
      const caps = session.info.capabilities;
      if (filter.toolsListChanged && caps.tools?.listChanged) this.honored.toolsListChanged = true;
      if (filter.promptsListChanged && caps.prompts?.listChanged) this.honored.promptsListChanged = true;
      if (filter.resourcesListChanged && caps.resources?.listChanged) this.honored.resourcesListChanged = true;
      if (filter.resourceSubscriptions) {
        const wanted = [...new Set(filter.resourceSubscriptions)].slice(0, MAX_RESOURCE_SUBSCRIPTIONS);
        const accepted = caps.resources?.subscribe
          ? await Promise.all(
              wanted.map((uri) =>
                session
                  .request({ method: 'resources/subscribe', params: { uri } }, EmptyResultSchema, { timeout: up.cfg.timeouts.requestMs })
                  .then(
                    () => true,
                    (e) => {
                      log.debug({ upstream: up.name, uri, err: (e as Error).message }, 'upstream refused resources/subscribe');
                      if (!keepsSession(e)) reusable = false;
                      return false;
                    },
                  ),
              ),
            )
          : [];
        this.honored.resourceSubscriptions = wanted.filter((_, i) => accepted[i]);
        for (const uri of this.honored.resourceSubscriptions) uris.add(uri);
      }
    } catch (e) {
      await releaseSession();
      throw e;
    }
    this.upstreamPart = Boolean(
      this.honored.toolsListChanged || this.honored.promptsListChanged || this.honored.resourcesListChanged || uris.size,
    );
    if (!this.upstreamPart) return releaseSession();
    this.cleanups.push(releaseSession);
    void session.closed.then(() => {
      const reason = session.deadReason ?? 'connection closed';
      const kind = session.transportKind === 'stdio' ? 'crashed' : 'session-lost';
      this.finish(upstreamFailed(up.name, kind, `The upstream session behind this subscription was lost (${reason}); listen again`));
    });
  }

  /** Follows the caller's tasks in `taskIds`. */
  async listenTasks(tasks: TaskManager, taskIds: string[], caller: { principal: string; upstream: string }): Promise<void> {
    this.honored.taskIds = [];
    // An id listed twice is honored (and acknowledged) once.
    for (const id of new Set(taskIds)) {
      try {
        await tasks.get(id, caller);
        this.honored.taskIds.push(id);
      } catch {
        /* unknown or foreign ids are left out of the acknowledged filter */
      }
    }
    for (const id of this.honored.taskIds) this.openTasks.add(id);
    const onTask = (record: TaskRecord) => {
      if (!this.openTasks.has(record.taskId)) return;
      this.emit('notifications/tasks', detailedTask(record));
      if (isTerminal(record.status)) {
        this.openTasks.delete(record.taskId);
        this.settleIfIdle();
      }
    };
    this.cleanups.push(tasks.subscribe(onTask));
    // Subscribed first, then read: a task that ended before the subscription is reported now.
    for (const id of [...this.openTasks]) {
      const record = await tasks.get(id, caller).catch(() => undefined);
      if (record && isTerminal(record.status)) onTask(record);
    }
  }

  /**
   * Relays a `subscriptions/listen` to a 2026-07-28 upstream: the request goes on with the client's
   * envelope (`meta`) and the filter (task ids unwrapped), the upstream's acknowledgement sets
   * `honored` (task ids wrapped back), and its notifications are relayed without the upstream's
   * `_meta` (the front door adds the client's subscriptionId). When the upstream ends the stream,
   * so does the subscription. Resolves once acknowledged.
   */
  async listenModern(
    up: { name: string; modern: ModernUpstream },
    filter: ListenFilter,
    meta: Record<string, unknown>,
    tasks: { wrap: (id: string) => string; unwrap: (id: string) => string | undefined },
    ackMs: number,
    hopHeaders?: Readonly<Record<string, string>>,
  ): Promise<void> {
    const upstreamFilter: ListenFilter = { ...filter };
    if (filter.taskIds)
      upstreamFilter.taskIds = filter.taskIds.map((id) => tasks.unwrap(id)).filter((id): id is string => id !== undefined);
    const abort = new AbortController();
    let acknowledged!: (honored: ListenFilter) => void;
    const ack = new Promise<ListenFilter>((r) => (acknowledged = r));
    const strip = (params: Record<string, unknown> | undefined) => {
      const { _meta: _m, ...rest } = params ?? {};
      return rest;
    };
    const call = up.modern.request(
      'subscriptions/listen',
      { notifications: upstreamFilter, _meta: meta },
      {
        signal: abort.signal,
        ...(hopHeaders ? { hopHeaders: { ...hopHeaders } } : {}),
        onNotification: (n) => {
          const params = strip(n.params);
          if (n.method === 'notifications/subscriptions/acknowledged') {
            const honored = { ...((params.notifications ?? {}) as ListenFilter) };
            if (honored.taskIds) honored.taskIds = honored.taskIds.map((id) => tasks.wrap(id));
            return acknowledged(honored);
          }
          if (n.method === 'notifications/tasks' && typeof params.taskId === 'string') params.taskId = tasks.wrap(params.taskId);
          this.emit(n.method, params);
        },
      },
    );
    this.upstreamPart = true;
    this.cleanups.push(() => abort.abort());
    const ended = call.then(
      (answer) =>
        'error' in answer ? this.finish(new GatewayError(answer.error.code, answer.error.message, answer.error.data)) : this.finish(),
      (e) => {
        if (!abort.signal.aborted)
          this.finish(
            upstreamFailed(up.name, 'session-lost', `The upstream ended this subscription: ${(e as Error).message}; listen again`),
          );
      },
    );
    const honored = await Promise.race([
      ack,
      ended.then(() => ({}) as ListenFilter),
      new Promise<ListenFilter>((r) => setTimeout(() => r({}), ackMs).unref()),
    ]);
    Object.assign(this.honored, honored);
  }

  /** Ends at once when nothing was honored that could still deliver. */
  settleAfterOpen(): void {
    this.settleIfIdle();
  }
}

/**
 * Opens a `subscriptions/listen` subscription relayed to a 2026-07-28 upstream (see
 * {@link Subscription.listenModern}).
 * @throws GatewayError -32021 (HTTP 400) for `taskIds` without the tasks extension declared.
 */
export async function openModernSubscription(
  up: { name: string; modern: ModernUpstream },
  filter: ListenFilter,
  meta: Record<string, unknown>,
  who: { declaresTasks: boolean; credential?: UpstreamCredential },
  tasks: { wrap: (id: string) => string; unwrap: (id: string) => string | undefined },
  ackMs: number,
): Promise<Subscription> {
  if (filter.taskIds?.length && !who.declaresTasks) throw tasksExtensionRequired();
  const sub = new Subscription();
  try {
    await sub.listenModern(up, filter, meta, tasks, ackMs, who.credential?.headers);
  } catch (e) {
    await sub.close();
    throw e;
  }
  return sub;
}

/**
 * Opens a `subscriptions/listen` subscription on upstream `up` for `filter`.
 * @returns the subscription; its `honored` filter is final.
 * @throws GatewayError -32021 (HTTP 400) for `taskIds` without the tasks extension declared;
 *   -32603 when no upstream session can be had (`data.reason` unreachable, busy, shutting-down).
 */
export async function openSubscription(
  up: ListenUpstream,
  tasks: TaskManager,
  filter: ListenFilter,
  who: Listener,
  log: Logger,
): Promise<Subscription> {
  if (filter.taskIds?.length && !who.declaresTasks) throw tasksExtensionRequired();
  const sub = new Subscription();
  try {
    if (filter.toolsListChanged || filter.promptsListChanged || filter.resourcesListChanged || filter.resourceSubscriptions?.length) {
      await sub.listenUpstream(up, filter, who, log);
    } else if (filter.resourceSubscriptions) {
      sub.honored.resourceSubscriptions = [];
    }
    if (filter.taskIds) await sub.listenTasks(tasks, filter.taskIds, { principal: who.principal, upstream: up.name });
  } catch (e) {
    await sub.close();
    throw e;
  }
  sub.settleAfterOpen();
  return sub;
}
