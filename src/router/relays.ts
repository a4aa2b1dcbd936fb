/**
 * The relay of one legacy client session (2024-11-05 … 2025-11-25, held by the front door's session
 * registry, src/http/legacy-sessions.ts) to one upstream, from the cell of the pair of eras: the
 * legacy pass-through (src/cells/legacy: a legacy upstream, an upstream session of the relay's own)
 * or the reverse bridge (src/cells/reverse: a 2026-07-28 upstream, each `input_required` asked of
 * the client as real server-initiated requests). The federated endpoint's relay is made by the
 * federation layer (src/federation/federated.ts).
 *
 * An upstream whose credential depends on the caller (`UpstreamCredentials.perCaller`:
 * tokenExchange, oauth, forwardAuthorization) gets its relay behind a consent gate
 * (src/router/consent-gate.ts): the caller's credential is resolved before the upstream side opens,
 * and goes on every upstream HTTP request as headers, or into the environment of the session's own
 * stdio child. Without the credentials layer, `forwardAuthorization` sends the caller's token as before.
 *
 * An upstream with `approvals` gets its relay behind an approval relay (src/router/approval-relay.ts),
 * inside the consent gate when there is one: the user approves each such `tools/call` first.
 */
import { PassThroughRelay } from '../cells/legacy/passthrough.js';
import { ReverseRelay, reverseSettings } from '../cells/reverse/reverse.js';
import type { GatewayConfig, UpstreamConfig } from '../config/schema.js';
import type { UpstreamCredentials } from '../credentials/types.js';
import type { Census } from '../observability/census.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import type { Sampler } from '../sampling/sampler.js';
import type { UpstreamCredential } from '../upstream/credential.js';
import type { DownstreamTransport, LegacyRelay, RelayedRequest } from '../upstream/legacy-relay.js';
import { createModernUpstream, tracedModernUpstream } from '../upstream/modern.js';
import type { RequestId } from '../protocol/wire.js';
import { ApprovalRelay } from './approval-relay.js';
import type { Approvals } from './approvals.js';
import { ConsentGate } from './consent-gate.js';
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
  /** `legacySessions.closeStreamAfterMs`: SSE polling on the legacy pass-through and the reverse bridge. */
  closeStreamAfterMs?: number;
  /** The client's transport (audit lines): Streamable HTTP, or HTTP+SSE (2024-11-05). */
  transport?: 'streamable-http' | 'sse';
}

/** The caller of the session: its principal, and its bearer token (forwardAuthorization, token exchange). */
export interface RelayCaller {
  principal: string;
  token?: string;
}

/**
 * What the relays use besides the upstream: the sampler of upstreams' sampling, the census, the
 * secret-decline counter, and the per-user credentials with their settings (`cfg.credentials`).
 */
export interface RelayParts {
  sampler: Sampler;
  census: Census;
  metrics: Pick<Metrics, 'secretDeclines'>;
  /** Per-user upstream credentials; undefined: every upstream static (forwardAuthorization as configured). */
  credentials?: UpstreamCredentials;
  cfg: Pick<GatewayConfig, 'credentials' | 'requestState'>;
  /** The approval policy (src/router/approvals.ts); undefined: no call is asked about. */
  approvals?: Approvals;
}

/**
 * What the upstream side of a relay needs to know of the caller's credential, and where it reports
 * that the upstream refused it (HTTP 401 or 403; see {@link PassThroughRelay}).
 */
interface RelayCredential {
  /** Headers of every upstream HTTP request (`authorization: Bearer …`). */
  headers: Record<string, string>;
  /** stdio: variables of the session's own child. */
  env: Record<string, string>;
  /** The upstream refused the credential on client request `id` (its `method`); true: the caller answers it. */
  onRefused?: (id: RequestId, method: string, status: number) => boolean;
}

/** The relay of a legacy client session to `up`, whose era is `upstreamEra`. */
export function relayTo(up: Upstream, upstreamEra: UpstreamEra, who: RelayCaller, hooks: RelayHooks, parts: RelayParts): LegacyRelay {
  const credentials = parts.credentials;
  if (!credentials?.perCaller(up.name)) {
    const forwarded = up.cfg.transport !== 'stdio' && up.cfg.forwardAuthorization && !credentials && who.token;
    return openRelay(up, upstreamEra, hooks, parts, who, {
      headers: forwarded ? { authorization: `Bearer ${who.token}` } : {},
      env: {},
    });
  }
  return new ConsentGate({
    upstream: up.name,
    kind: upstreamEra === 'modern' ? 'reverse' : 'pass-through',
    caller: who,
    credentials,
    consentWaitMs: parts.cfg.credentials.consentWaitMs,
    downstream: hooks.downstream,
    log: hooks.log.child({ component: 'consent-gate' }),
    onRequest: hooks.onRequest,
    open: (credential: UpstreamCredential | undefined, downstream, onRefused) =>
      openRelay(up, upstreamEra, { ...hooks, downstream }, parts, who, {
        headers: { ...credential?.headers },
        env: { ...credential?.env },
        onRefused,
      }),
  });
}

/** The relay of the era pair, its upstream side carrying `credential`; behind an approval relay when the upstream has approvals. */
function openRelay(
  up: Upstream,
  upstreamEra: UpstreamEra,
  hooks: RelayHooks,
  parts: RelayParts,
  who: RelayCaller,
  credential: RelayCredential,
): LegacyRelay {
  const approvals = parts.approvals;
  if (!approvals?.applies(up.name)) return eraRelay(up, upstreamEra, hooks, parts, who, credential);
  return new ApprovalRelay({
    upstream: up.name,
    caller: who,
    approvals,
    tools: up.cfg.tools,
    waitMs: parts.cfg.requestState.ttlMs,
    downstream: hooks.downstream,
    log: hooks.log.child({ component: 'approvals' }),
    onRequest: hooks.onRequest,
    open: (downstream, onRequest) => eraRelay(up, upstreamEra, { ...hooks, downstream, onRequest }, parts, who, credential),
  });
}

/** The relay of the era pair, its upstream side carrying `credential`. */
function eraRelay(
  up: Upstream,
  upstreamEra: UpstreamEra,
  hooks: RelayHooks,
  parts: RelayParts,
  who: RelayCaller,
  credential: RelayCredential,
): LegacyRelay {
  const onRequest = (r: RelayedRequest) => {
    hooks.onRequest(r);
    up.noteFailure(r.reason);
  };
  const onToolDropped = (name: string, problem: string) => up.noteDropped(name, 'invalid-name', problem);
  const ownEnv = up.cfg.transport === 'stdio' && Object.keys(credential.env).length > 0;
  // The caller's own child: its environment carries the caller's credential.
  const cfg: UpstreamConfig = ownEnv ? { ...up.cfg, env: { ...up.cfg.env, ...credential.env } } : up.cfg;
  const hopHeaders = up.cfg.transport !== 'stdio' && Object.keys(credential.headers).length > 0 ? credential.headers : undefined;
  if (upstreamEra === 'modern') {
    const log = hooks.log.child({ component: 'reverse' });
    const own = ownEnv ? createModernUpstream(cfg, log, undefined) : undefined;
    const relay = new ReverseRelay({
      upstream: up.name,
      ...reverseSettings(up.cfg),
      ...(hopHeaders ? { hopHeaders } : {}),
      principal: who.principal,
      onToolDropped,
      modern: own ? tracedModernUpstream(up.name, cfg, own) : up.modern!,
      downstream: hooks.downstream,
      log,
      onRequest,
      onRefused: credential.onRefused,
      closeStreamAfterMs: hooks.closeStreamAfterMs,
    });
    return own ? closingAlso(relay, () => own.close()) : relay;
  }
  return new PassThroughRelay({
    upstream: up.name,
    cfg,
    downstream: hooks.downstream,
    log: hooks.log.child({ component: 'legacy' }),
    http: up.pool.http,
    extraHeaders: hopHeaders ?? {},
    onUpstreamEnd: hooks.onUpstreamEnd,
    onRequest,
    onSecretDeclined: () => parts.metrics.secretDeclines.inc({ upstream: up.name }),
    onToolDropped,
    onRefused: credential.onRefused,
    closeStreamAfterMs: hooks.closeStreamAfterMs,
    principal: who.principal,
    installing: up.firstStart.active,
    // The era probe's child has the configured environment only, not the caller's credential.
    takeChild: ownEnv ? undefined : () => up.pool.takeAdopted(),
    sampler: parts.sampler,
    census: parts.census,
  });
}

/** `relay`, whose close also ends `also` (the session's own stdio child of a 2026-07-28 upstream). */
function closingAlso(relay: LegacyRelay, also: () => Promise<void>): LegacyRelay {
  return {
    kind: relay.kind,
    fromClient: (message, extra) => relay.fromClient(message, extra),
    close: async () => {
      await relay.close();
      await also().catch(() => {});
    },
    get inFlight() {
      return relay.inFlight;
    },
    get negotiated() {
      return relay.negotiated;
    },
    get pid() {
      return relay.pid;
    },
  };
}
