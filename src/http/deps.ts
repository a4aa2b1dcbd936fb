/**
 * What the HTTP front door is built from ({@link AppDeps}): src/wiring.ts builds every part once and
 * hands them to `createApp`, which constructs nothing long-lived itself. Also the request log line
 * and metric of a request relayed on a legacy session ({@link legacyRequestRecorder}), which the
 * legacy session registry is built with.
 */
import type { Gateway } from '../router/router.js';
import type { Federation } from '../federation/federation.js';
import type { RelayedRequest } from '../cells/legacy/passthrough.js';
import { quoted } from '../protocol/errors.js';
import { SERVED_METHODS } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import { principalHash, type Authenticator } from '../security/auth.js';
import type { CallerLimiter, CallerLimits, OriginGuard } from './frontdoor.js';
import type { LegacySessions } from './legacy-sessions.js';

/** The `GET /readyz` data: whether the gateway is ready, each `required` upstream, and the store's problem when it has one. */
export interface Readiness {
  ready: boolean;
  upstreams: { name: string; ready: boolean; reason?: string }[];
  /** Why the shared store is not usable (absent when it is). */
  store?: string;
}

/** The long-lived parts the front door serves with. */
export interface AppDeps {
  /** The router (and the shared parts it holds: metrics, store, sealer …). */
  gateway: Gateway;
  log: Logger;
  /** The federation layer behind `POST /mcp` (undefined unless `federation.enabled`). */
  federation: Federation | undefined;
  /** Checks the callers' credentials (`auth`); the admin endpoints use the same. */
  auth: Authenticator;
  /** The Host/Origin check (`http.allowedHosts`, `http.allowedOrigins`). */
  guard: OriginGuard;
  /** How callers are told apart for the limits: by principal, or by client address. */
  limits: CallerLimits;
  /** Rate and concurrency limits per caller (`limits.requestsPerSecond`, `burst`, `maxConcurrentPerPrincipal`). */
  limiter: CallerLimiter;
  /** Open `subscriptions/listen` streams per caller (`limits.maxListensPerPrincipal`). */
  listens: CallerLimiter;
  /** The sessions of legacy clients. */
  legacy: LegacySessions;
  /** True once the gateway drains (the one drain flag): new MCP work gets 503 / -32603 "gateway shutting down". */
  draining(): boolean;
  /** The readiness `GET /readyz` reports (before the drain's own "shutting down"). */
  readiness(): Promise<Readiness>;
}

/**
 * Records one request a legacy session relayed: the `request` log line (with `era: "legacy"`)
 * and the `requests` counter of {@link Metrics}.
 */
export function legacyRequestRecorder(metrics: Metrics, log: Logger): (upstream: string, principal: string, r: RelayedRequest) => void {
  return (upstream, principal, r) => {
    const durationMs = Math.round(r.durationMs * 10) / 10;
    log.info(
      {
        upstream,
        method: quoted(r.method),
        name: quoted(r.name),
        principal: principalHash(principal),
        durationMs,
        outcome: r.outcome,
        code: r.code,
        reason: r.reason,
        era: 'legacy',
      },
      'request',
    );
    metrics.requests.inc({
      upstream,
      method: (SERVED_METHODS as readonly string[]).includes(r.method) ? r.method : 'other',
      outcome: r.code !== undefined ? String(r.code) : r.outcome,
    });
  };
}
