/**
 * The relay of one legacy client session (2024-11-05 … 2025-11-25, held by the front door's session
 * registry, src/http/legacy-sessions.ts) to one upstream, from the cell of the pair of eras: the
 * legacy pass-through (src/cells/legacy: a legacy upstream, an upstream session of the relay's own)
 * or the reverse bridge (src/cells/reverse: a 2026-07-28 upstream, each `input_required` asked of
 * the client as real server-initiated requests). The federated endpoint's relay is made by the
 * federation layer (src/federation/federated.ts).
 */
import { PassThroughRelay } from '../cells/legacy/passthrough.js';
import { ReverseRelay, reverseSettings } from '../cells/reverse/reverse.js';
import type { Census } from '../observability/census.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import type { Sampler } from '../sampling/sampler.js';
import type { DownstreamTransport, LegacyRelay, RelayedRequest } from '../upstream/legacy-relay.js';
import type { Upstream, UpstreamEra } from './upstream.js';

/** What the session registry gives a relay: the client's transport and what the relay reports back. */
export interface RelayHooks {
  /** The legacy client's transport (Streamable HTTP session or HTTP+SSE). */
  downstream: DownstreamTransport;
  log: Logger;
  /** Called once per relayed request (the request log line and metrics). */
  onRequest: (r: RelayedRequest) => void;
  /** Called when the upstream side ends (a stdio child exits, an HTTP session is lost): the session ends. */
  onUpstreamEnd: () => void;
  /** `legacySessions.closeStreamAfterMs`: SSE polling on the legacy pass-through. */
  closeStreamAfterMs?: number;
}

/** The caller of the session: its principal, and its bearer token for upstreams with `forwardAuthorization`. */
export interface RelayCaller {
  principal: string;
  token?: string;
}

/** What the relays use besides the upstream: the sampler of upstreams' sampling, the census, the secret-decline counter. */
export interface RelayParts {
  sampler: Sampler;
  census: Census;
  metrics: Pick<Metrics, 'secretDeclines'>;
}

/** The relay of a legacy client session to `up`, whose era is `upstreamEra`. */
export function relayTo(up: Upstream, upstreamEra: UpstreamEra, who: RelayCaller, hooks: RelayHooks, parts: RelayParts): LegacyRelay {
  const onRequest = (r: RelayedRequest) => {
    hooks.onRequest(r);
    up.noteFailure(r.reason);
  };
  const onToolDropped = (name: string, problem: string) => up.noteDropped(name, 'invalid-name', problem);
  if (upstreamEra === 'modern') {
    return new ReverseRelay({
      upstream: up.name,
      ...reverseSettings(up.cfg, who.token),
      onToolDropped,
      modern: up.modern!,
      downstream: hooks.downstream,
      log: hooks.log.child({ component: 'reverse' }),
      onRequest,
    });
  }
  return new PassThroughRelay({
    upstream: up.name,
    cfg: up.cfg,
    downstream: hooks.downstream,
    log: hooks.log.child({ component: 'legacy' }),
    http: up.pool.http,
    extraHeaders: up.cfg.transport !== 'stdio' && up.cfg.forwardAuthorization && who.token ? { authorization: `Bearer ${who.token}` } : {},
    onUpstreamEnd: hooks.onUpstreamEnd,
    onRequest,
    onSecretDeclined: () => parts.metrics.secretDeclines.inc({ upstream: up.name }),
    onToolDropped,
    closeStreamAfterMs: hooks.closeStreamAfterMs,
    principal: who.principal,
    installing: up.firstStart.active,
    takeChild: () => up.pool.takeAdopted(),
    sampler: parts.sampler,
    census: parts.census,
  });
}
