/**
 * The request log line (`request`, at info) and the request metrics of the front door: one per
 * 2026-07-28 request once it is answered ({@link record}), and one per request a legacy session
 * relayed ({@link legacyRecorder}, whose line says `era: "legacy"`). Principals appear only as hashes.
 */
import { GatewayError, quoted } from '../protocol/errors.js';
import { SERVED_METHODS } from '../protocol/wire.js';

import { shownName } from '../observability/audit.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import { traceIds, type Traced } from '../observability/tracing.js';
import { principalHash } from '../security/auth.js';
import type { RelayedRequest } from '../upstream/legacy-relay.js';

/** What the request log line and the metrics need to know about one request. */
export interface RequestLog {
  log: Logger;
  metrics: Metrics;
  requestId: string;
  /** The upstream's name, or `*` on the federated endpoint. */
  upstream: string;
  principal: string;
  /** `performance.now()` when the request arrived, in ms. */
  started: number;
  /** Time spent waiting on the upstream, in ms (filled in by the router). */
  timing: { upstreamMs: number };
  /** The request's span, while tracing. */
  trace?: Traced;
}

/** The `method` label of the metrics: a method the gateway serves, else `other`. */
function methodLabel(method: string): string {
  return (SERVED_METHODS as readonly string[]).includes(method) ? method : 'other';
}

/** Logs and counts one answered 2026-07-28 request: its outcome is an error, or the result's `resultType` (`complete` when absent). */
export function record(
  r: RequestLog,
  method: string,
  name: string | undefined,
  outcome: { error?: GatewayError; resultType?: string },
): void {
  const totalMs = performance.now() - r.started;
  const durationMs = Math.round(totalMs * 10) / 10;
  const upstreamMs = Math.round(r.timing.upstreamMs * 10) / 10;
  const result = outcome.error ? 'error' : (outcome.resultType ?? 'complete');
  if (r.log.isLevelEnabled('info')) {
    r.log.info(
      {
        requestId: r.requestId,
        upstream: r.upstream,
        method: quoted(method),
        name: quoted(name === undefined ? undefined : shownName(name)),
        principal: principalHash(r.principal),
        durationMs,
        upstreamMs,
        outcome: result,
        code: outcome.error?.code,
        reason: outcome.error?.reason,
        ...traceIds(r.trace),
      },
      'request',
    );
  }
  r.metrics.observeRequest(
    r.upstream,
    methodLabel(method),
    outcome.error ? String(outcome.error.code) : result,
    r.timing.upstreamMs / 1000,
    Math.max(0, totalMs - r.timing.upstreamMs) / 1000,
  );
}

/** The recorder of the legacy sessions: logs and counts each request one of them relayed for `principal`. */
export function legacyRecorder(log: Logger, metrics: Metrics): (upstream: string, principal: string, r: RelayedRequest) => void {
  return (upstream, principal, r) => {
    const durationMs = Math.round(r.durationMs * 10) / 10;
    log.info(
      {
        upstream,
        method: quoted(r.method),
        name: quoted(r.name === undefined ? undefined : shownName(r.name)),
        principal: principalHash(principal),
        durationMs,
        outcome: r.outcome,
        code: r.code,
        reason: r.reason,
        approval: r.approval,
        era: 'legacy',
      },
      'request',
    );
    metrics.requests.inc({ upstream, method: methodLabel(r.method), outcome: r.code !== undefined ? String(r.code) : r.outcome });
  };
}
