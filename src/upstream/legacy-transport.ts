/**
 * The v1 SDK client transport of a legacy upstream session, by the upstream's `transport`: a stdio
 * child (src/upstream/stdio-child.ts), Streamable HTTP (the gateway's own transport on the
 * upstream's undici pool, src/upstream/http-transport.ts, or the SDK's) or HTTP+SSE, each with the
 * configured headers and the caller's extra ones (its credential: `Authorization`), or on stdio with
 * the caller's extra variables.
 */
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { UpstreamConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import type { HttpHop } from './http.js';
import { HttpClientTransport } from './http-transport.js';
import { createStdioChild, type StderrTail } from './stdio-child.js';

/** Configured headers with `extra` replacing any of the same name (header names are case-insensitive). */
function mergeHeaders(configured: Record<string, string>, extra: Record<string, string>): Record<string, string> {
  const h = new Headers(configured);
  for (const [k, v] of Object.entries(extra)) h.set(k, v);
  return Object.fromEntries(h);
}

/**
 * A v1 SDK client transport for a legacy upstream: stdio ({@link createStdioChild}), Streamable
 * HTTP or HTTP+SSE (over the upstream's HTTP hop, with the configured headers and `extraHeaders`);
 * a stdio child gets `extraEnv` on top of its configured `env`.
 */
export function createLegacyTransport(
  cfg: UpstreamConfig,
  log: Logger,
  extraHeaders: Record<string, string>,
  http: HttpHop | undefined,
  stderrTail: StderrTail | undefined,
  installing = false,
  extraEnv: Record<string, string> = {},
): Transport {
  switch (cfg.transport) {
    case 'stdio':
      return createStdioChild(cfg, log, stderrTail, installing, extraEnv);
    case 'streamable-http':
      if (http) {
        const url = new URL(cfg.url);
        return new HttpClientTransport(url, {
          dispatcher: http.sessionPool(url.origin),
          ownsDispatcher: true,
          headers: mergeHeaders(cfg.headers, extraHeaders),
        });
      }
      return new StreamableHTTPClientTransport(new URL(cfg.url), {
        requestInit: { headers: mergeHeaders(cfg.headers, extraHeaders) },
        reconnectionOptions: { maxRetries: 2, initialReconnectionDelay: 100, maxReconnectionDelay: 500, reconnectionDelayGrowFactor: 2 },
      });
    case 'sse':
      // requestInit headers go on the POSTs and on the GET /sse stream alike.
      return new SSEClientTransport(new URL(cfg.url), {
        requestInit: { headers: mergeHeaders(cfg.headers, extraHeaders) },
        ...(http ? { fetch: http.fetch } : {}),
      });
  }
}

/** True when `err` is the Streamable HTTP 404 an upstream answers for a session id it does not know. */
export function isSessionNotFound(err: unknown): boolean {
  return err instanceof StreamableHTTPError && err.code === 404;
}
