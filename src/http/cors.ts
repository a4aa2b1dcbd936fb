/**
 * CORS for browser-based MCP clients. The Mcp-* request headers make every cross-origin call
 * "non-simple", so a browser first sends an `OPTIONS` preflight. Which origins may call is decided
 * by the {@link OriginGuard} alone (`http.allowedOrigins`, or loopback origins by default).
 */
import type { Context, MiddlewareHandler } from 'hono';
import type { OriginGuard } from './frontdoor.js';
import { addResponseHeaders, applyResponseHeaders, headerOf } from './headers.js';

/** Methods a browser may use on `/mcp/NAME` (GET and DELETE are for legacy sessions). */
export const CORS_ALLOWED_METHODS = ['POST', 'GET', 'DELETE'] as const;

/** Request headers a browser may send to `/mcp/NAME`, besides any `Mcp-Param-*` header. */
export const CORS_ALLOWED_HEADERS = [
  'content-type',
  'accept',
  'authorization',
  'mcp-protocol-version',
  'mcp-method',
  'mcp-name',
  'mcp-session-id',
  'last-event-id',
  'x-request-id',
  // W3C Trace Context (https://www.w3.org/TR/trace-context/), as OpenTelemetry in a browser sends it.
  'traceparent',
  'tracestate',
] as const;

/** Response headers a browser script may read. */
export const CORS_EXPOSED_HEADERS = ['mcp-session-id', 'mcp-protocol-version', 'www-authenticate', 'x-request-id', 'retry-after'] as const;

/** How long a browser may cache a preflight answer, in seconds. */
export const CORS_MAX_AGE_SECONDS = 600;

const PARAM_HEADER = /^mcp-param-[a-z0-9!#$%&'*+.^_`|~-]+$/;

/**
 * The `Access-Control-Allow-Headers` value for a preflight: {@link CORS_ALLOWED_HEADERS} plus
 * each header named in `requested` (an `Access-Control-Request-Headers` value) that matches
 * `^mcp-param-` (case-insensitive). Other requested headers are left out, so the browser refuses
 * the call.
 */
export function allowedRequestHeaders(requested: string | null | undefined): string {
  const params = (requested ?? '')
    .split(',')
    .map((h) => h.trim().toLowerCase())
    .filter((h) => PARAM_HEADER.test(h));
  return [...new Set([...CORS_ALLOWED_HEADERS, ...params])].join(', ');
}

/**
 * Hono middleware that serves CORS for the origins `guard` allows:
 * - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) whose `Host` and
 *   `Origin` pass `guard.check` gets 204 with `Access-Control-Allow-Origin` (the origin),
 *   `-Methods` ({@link CORS_ALLOWED_METHODS}), `-Headers` ({@link allowedRequestHeaders}) and
 *   `-Max-Age` ({@link CORS_MAX_AGE_SECONDS}). Otherwise it gets the response `refuse(c, reason)`
 *   builds (a 403), with no CORS headers.
 * - Any other request with an allowed `Origin` gets `Access-Control-Allow-Origin` and
 *   `Access-Control-Expose-Headers` ({@link CORS_EXPOSED_HEADERS}) on its response, whatever its
 *   status. Every response carries `Vary: Origin`.
 * - An `OPTIONS` request that is not a preflight passes through (405 from the route).
 */
const CORS_EXPOSED = CORS_EXPOSED_HEADERS.join(', ');
const VARY_ORIGIN = { vary: 'Origin' };

export function corsMiddleware(guard: OriginGuard, refuse: (c: Context, reason: string) => Response): MiddlewareHandler {
  return async (c, next) => {
    const origin = headerOf(c, 'origin');
    if (c.req.method === 'OPTIONS' && origin && headerOf(c, 'access-control-request-method')) {
      const refused = guard.check(headerOf(c, 'host'), origin);
      if (refused) return refuse(c, refused);
      return new Response(null, {
        status: 204,
        headers: {
          'access-control-allow-origin': origin,
          'access-control-allow-methods': CORS_ALLOWED_METHODS.join(', '),
          'access-control-allow-headers': allowedRequestHeaders(headerOf(c, 'access-control-request-headers')),
          'access-control-max-age': String(CORS_MAX_AGE_SECONDS),
          vary: 'Origin, Access-Control-Request-Headers',
        },
      });
    }
    addResponseHeaders(
      c,
      origin && guard.originAllowed(origin)
        ? { vary: 'Origin', 'access-control-allow-origin': origin, 'access-control-expose-headers': CORS_EXPOSED }
        : VARY_ORIGIN,
    );
    await next();
    applyResponseHeaders(c);
  };
}
