/**
 * The HTTP client hop to Streamable HTTP and HTTP+SSE upstreams: undici's fetch over one keep-alive
 * connection pool (`Agent`) per upstream, handed to the v1 SDK transports through their `fetch`
 * option.
 *
 * Limits come from the upstream's config, never from a library default: the connect timeout is
 * `timeouts.connectMs`; undici's own headers and body timeouts (300 s by default) are switched off,
 * because how long an upstream may stay silent is decided per request by the gateway
 * (`timeouts.requestMs` while the upstream works, `timeouts.totalMs` in all, time parked waiting for
 * the client not counted), and an idle GET stream may stay silent for as long as the session lives.
 *
 * With tracing on, every request carries the W3C trace context of the span active when it is sent
 * (`traceparent`, `tracestate`; see src/observability/tracing.ts).
 */
import { Agent, Pool, fetch as undiciFetch, type Dispatcher } from 'undici';
import type { UpstreamConfig } from '../config/schema.js';
import { traceHeaders } from '../observability/tracing.js';

/** A fetch function for the SDK transports, bound to one upstream's connection pool. */
export type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;

/** One upstream's HTTP connection pool and the fetch that uses it. */
export interface HttpHop {
  fetch: FetchLike;
  /** The pool itself, for undici's `request`. */
  dispatcher: Agent;
  /**
   * A keep-alive pool of its own for one upstream session at `origin`, with the same limits: a
   * session's requests then look for a free connection among that session's few, not among every
   * connection to the upstream (long-lived streams included). Close it with the session.
   */
  sessionPool(origin: string): Dispatcher;
  /** Closes the pool's connections. */
  close(): Promise<void>;
}

/** Keep-alive time of an idle upstream connection, in ms. */
const KEEP_ALIVE_MS = 30_000;

/** Builds the HTTP hop for an upstream whose limits are `timeouts`. */
export function createHttpHop(timeouts: UpstreamConfig['timeouts']): HttpHop {
  const options = {
    connect: { timeout: timeouts.connectMs },
    headersTimeout: 0,
    bodyTimeout: 0,
    keepAliveTimeout: KEEP_ALIVE_MS,
    keepAliveMaxTimeout: KEEP_ALIVE_MS,
  };
  const agent = new Agent(options);
  const fetch: FetchLike = (url, init) => undiciFetch(url, { ...(init as object), headers: traceHeaders(init?.headers) as never, dispatcher: agent }) as unknown as Promise<Response>;
  return { fetch, dispatcher: agent, sessionPool: (origin) => new Pool(origin, options), close: () => agent.close().catch(() => {}) };
}
