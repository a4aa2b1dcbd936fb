/**
 * What the route modules of the front door (src/http/routes/) share: the Hono environment of a
 * request ({@link AppEnv}: the variables the admission middleware sets), and the {@link Door}: the
 * objects the app is built from and the few helpers several routes use. `createApp`
 * (src/http/app.ts) builds one Door and hands it to every route module.
 */
import type { ServerResponse } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import { getConnInfo } from '@hono/node-server/conninfo';
import type { Context } from 'hono';
import type { GatewayConfig } from '../config/schema.js';
import type { Federation } from '../federation/federation.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import type { AuditLog } from '../observability/audit.js';
import type { Authenticator, Caller } from '../security/auth.js';
import type { LocalSlots } from '../store/limiters.js';
import type { CallerLimiter, OriginGuard } from './frontdoor.js';
import type { UpstreamLimits } from './upstream-limits.js';
import type { LegacySessions, SessionCaller } from './legacy-sessions.js';
import type { HopHolder } from './replicas.js';
import type { McpRouter } from './router-port.js';

/** The `GET /readyz` data: whether the gateway is ready, each `required` upstream, and the store's problem when it has one. */
export interface Readiness {
  ready: boolean;
  upstreams: { name: string; ready: boolean; reason?: string }[];
  /** Why the shared store is not usable (absent when it is). */
  store?: string;
}

/** Per-request values the front door hands to the MCP handler. */
export interface RequestVars {
  caller: Caller;
  requestId: string;
  /** Takes one of the caller's `limits.maxListensPerPrincipal` places; its release, or undefined when none is left. */
  enterListen: () => (() => void) | undefined;
  /** Settles when the request's work (including a streamed response) is over. */
  work?: Promise<unknown>;
  /** Set when the answer is a 404 for a path the gateway does not serve (logged by `UnknownPaths`). */
  unknownPath?: true;
}

/** The Hono environment of the front door: its request variables, on @hono/node-server. */
export type AppEnv = { Variables: RequestVars; Bindings: HttpBindings };

/**
 * Registers the work of one request (a promise that never rejects) as in flight; returns the
 * function to call when it has ended, saying whether its answer was streamed (the response went
 * out before the work ended).
 */
export type WorkTracker = (work: Promise<unknown>) => (streamed: boolean) => void;

/** The front door's objects and shared helpers, as the route modules use them. */
export interface Door {
  router: McpRouter;
  cfg: GatewayConfig;
  log: Logger;
  metrics: Metrics;
  /** The audit trail (src/observability/audit.ts). */
  audit: AuditLog;
  /** The federation layer behind `POST /mcp` (undefined unless `federation.enabled`). */
  federation: Federation | undefined;
  auth: Authenticator;
  guard: OriginGuard;
  /** The sessions of legacy clients. */
  legacy: LegacySessions;
  /** What the internal hop checks a forwarded request against (see `hopRefusal`). */
  hop: HopHolder;
  /** Rate and concurrency limits per caller, and the caller's open `subscriptions/listen` streams (per replica). */
  limiter: CallerLimiter;
  listens: LocalSlots;
  /** Per-caller rate limits of each upstream and its tools (`upstreams.NAME.limits`). */
  upstreamLimits: UpstreamLimits;
  /** Requests (and written-out answers) in flight: the drain and the settle before the connections close wait for them. */
  inflight: Set<Promise<unknown>>;
  /** True once the drain began: only what may resume work held here goes on. */
  draining(): boolean;
  /** What `GET /readyz` reports (before the drain's own "shutting down"). */
  readiness(): Promise<Readiness>;
  /** The key the limits count by: the principal, or `address:ADDRESS` when auth does not identify callers. */
  limitKey(c: Context, caller: Caller): string;
  /** The caller of a legacy session request, as the admission middleware identified it. */
  sessionCaller(c: Context<AppEnv>): SessionCaller;
  /** The gateway's base URL: `http.publicUrl`, else the request's scheme and Host. */
  baseUrl(c: Context): string;
  /** The protected resource metadata URL of `/mcp/NAME`, or of the federated `/mcp` (name undefined). */
  metadataUrl(c: Context, name: string | undefined): string;
  /** 403 / -32600 `Forbidden: …` for a request the Host/Origin check refused, logged with `logged`. */
  forbidden(reason: string, logged: Record<string, unknown>, headers?: Record<string, string>): Response;
  /** The MCP endpoints served: `/mcp` (with federation) and `/mcp/NAME` of each upstream. */
  servedPaths(): string[];
}

/** The client's address (the socket's remote address), or `unknown` once the socket is gone. */
export function clientAddress(c: Context): string {
  try {
    return getConnInfo(c).remote.address ?? 'unknown';
  } catch {
    return 'unknown';
  }
}

/**
 * The {@link WorkTracker} of a request: its work counts as in flight (in `inflight`) until it ends
 * and, when answered whole, until its response of `c` is written out; a streamed response of `c`
 * keeps its concurrency slot until then. Without `c` (the internal hop) only the work counts.
 */
export function trackerOf(inflight: Set<Promise<unknown>>, c?: Context<AppEnv>): WorkTracker {
  return (work) => {
    c?.set('work', work);
    inflight.add(work);
    return (streamed) => {
      const outgoing = streamed ? undefined : (c?.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
      if (outgoing && !outgoing.writableFinished && !outgoing.destroyed) {
        // The answer is handed to the server after this: a stop closing connections now would drop it.
        const written = new Promise<void>((r) => {
          outgoing.once('finish', r);
          outgoing.once('close', r);
        });
        inflight.add(written);
        void written.then(() => inflight.delete(written));
      }
      inflight.delete(work);
      // Answered whole: the front door releases the slot once the response is handed over.
      if (!streamed) c?.set('work', undefined);
    };
  };
}
