/**
 * `subscriptions/listen` on the federated endpoint: the client's filter is split among the
 * federated upstreams (src/federation/federation.ts decides who gets what), each part is an
 * ordinary subscription opened through the router, and this opens them ({@link openMerged}) and
 * merges them into one stream.
 */
import { GatewayError } from '../protocol/errors.js';
import type { Logger } from '../observability/log.js';
import type { ListenFilter, ListenHandle, SubscriptionSink } from '../router/subscriptions.js';

/**
 * Several subscriptions delivered as one: every part's notifications go to the one sink. The
 * merged subscription ends gracefully once every part has (a part with nothing to deliver ends at
 * once), and with a part's error as soon as one part fails (the others are closed then: the client
 * listens again).
 */
export class MergedSubscription implements ListenHandle {
  private closed = false;

  /**
   * @param parts the open subscriptions, one per upstream.
   * @param honored the honored filter of the whole (the union of the parts').
   */
  constructor(
    private readonly parts: readonly ListenHandle[],
    readonly honored: ListenFilter,
  ) {}

  /** Starts delivery of every part to `sink`; `sink.end` is called once (see the class). */
  attach(sink: SubscriptionSink): void {
    let open = this.parts.length;
    let done = false;
    const finish = (error?: GatewayError) => {
      if (done) return;
      done = true;
      sink.end(error);
    };
    if (open === 0) return finish();
    for (const part of this.parts) {
      part.attach({
        notify: (method, params) => {
          if (!done && !this.closed) sink.notify(method, params);
        },
        end: (error) => {
          if (done) return;
          if (error) {
            finish(error);
            void this.close();
          } else if (--open === 0) finish();
        },
      });
    }
  }

  /** The client went away: closes every part, telling the sink nothing more. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.parts.map((p) => p.close()));
  }
}

/**
 * The honored filter of the merged subscription: a flag when any part honored it, the lists
 * concatenated; only what `asked` contains.
 */
export function mergeHonored(asked: ListenFilter, parts: readonly ListenFilter[]): ListenFilter {
  const out: ListenFilter = {};
  for (const flag of ['toolsListChanged', 'promptsListChanged', 'resourcesListChanged'] as const) {
    if (asked[flag] && parts.some((p) => p[flag])) out[flag] = true;
  }
  if (asked.resourceSubscriptions) out.resourceSubscriptions = parts.flatMap((p) => p.resourceSubscriptions ?? []);
  if (asked.taskIds) out.taskIds = parts.flatMap((p) => p.taskIds ?? []);
  return out;
}

/**
 * Opens one subscription per part (`open`, through the router) and merges them. A part that fails
 * with a GatewayError is left out (logged), unless its upstream is `required`.
 * @param asked the client's filter; the merged subscription honors the union of what the parts do.
 * @throws the error of a `required` part, or of a part that failed otherwise; the first error when
 *   every part failed (the parts opened are closed first).
 */
export async function openMerged<M extends { name: string; cfg: { required?: boolean } }>(
  log: Logger,
  asked: ListenFilter,
  entries: readonly [M, ListenFilter][],
  open: (member: M, filter: ListenFilter) => Promise<ListenHandle>,
): Promise<MergedSubscription> {
  const settled = await Promise.allSettled(entries.map(([m, f]) => open(m, f)));
  const opened: ListenHandle[] = [];
  let fatal: unknown;
  settled.forEach((s, i) => {
    const m = entries[i]![0];
    if (s.status === 'fulfilled') opened.push(s.value);
    else if (m.cfg.required || !(s.reason instanceof GatewayError)) fatal ??= s.reason;
    else log.warn({ upstream: m.name, err: (s.reason as Error).message }, 'federation: upstream left out of a subscription');
  });
  if (fatal !== undefined || (opened.length === 0 && settled.length > 0)) {
    await Promise.all(opened.map((p) => p.close()));
    throw fatal ?? (settled.find((s) => s.status === 'rejected') as PromiseRejectedResult).reason;
  }
  return new MergedSubscription(
    opened,
    mergeHonored(
      asked,
      opened.map((p) => p.honored),
    ),
  );
}
