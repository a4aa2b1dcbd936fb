/**
 * The front door's own refusals and error mapping, shared by its routes: an error turned into a
 * JSON-RPC error (unexpected ones logged, never told), 503 "gateway shutting down" during the drain,
 * 405 for a method an endpoint does not serve, and 404 for an upstream that is not configured.
 */
import type { Context } from 'hono';
import { ErrorCode, GatewayError, methodNotFound, quoted } from '../protocol/errors.js';
import type { RequestId } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import { StoreUnavailable } from '../store/shared.js';
import { errorResponse } from './sse.js';

/**
 * `e` as a gateway error: a GatewayError as it is; the shared store out of reach as -32603
 * `store-unavailable` (logged at warn); anything else as -32603 "Internal gateway error" (logged at error).
 */
export function asGatewayError(e: unknown, log: Logger): GatewayError {
  if (e instanceof GatewayError) return e;
  if (e instanceof StoreUnavailable) {
    log.warn({ err: e.message }, 'request failed: the shared store is unavailable');
    // The store's address and error stay in the log: they tell a caller nothing it can act on.
    return new GatewayError(ErrorCode.InternalError, 'The shared store of the gateway cannot be reached; retry shortly', {
      reason: 'store-unavailable',
    });
  }
  log.error({ err: e instanceof Error ? { message: e.message, stack: e.stack } : String(e) }, 'unexpected error');
  return new GatewayError(ErrorCode.InternalError, 'Internal gateway error');
}

/** Methods (by the `Mcp-Method` header) that may resume work held here, so the drain lets them reach the router. */
export const DRAIN_METHODS = new Set(['tools/call', 'prompts/get', 'resources/read', 'tasks/get', 'tasks/update', 'tasks/cancel']);

/** The header that ends the connection after the response: every 503 of the drain carries it, so clients reconnect elsewhere. */
export const CLOSE = { connection: 'close' } as const;

/**
 * 503 / -32603 "gateway shutting down" with `Connection: close`: the answer to new work during the
 * drain, with the request's JSON-RPC `id` when the body was read (else null).
 */
export function refuseDraining(requestId: string, id: RequestId | null = null): Response {
  return errorResponse(id, { code: ErrorCode.InternalError, message: 'gateway shutting down' }, 503, {
    ...CLOSE,
    'x-request-id': requestId,
  });
}

/**
 * 405 / -32601 with `Allow: allow` for a method the MCP endpoint `path` does not serve. The default
 * message is that of `/mcp/NAME`: GET and DELETE need a legacy session's `Mcp-Session-Id`; any
 * other method is not served at all.
 */
export function methodNotAllowed(method: string, path: string, allow = 'POST', message?: string): Response {
  message ??=
    method === 'GET' || method === 'DELETE'
      ? `${method} on ${path} needs the Mcp-Session-Id of a legacy session; MCP 2026-07-28 uses POST only`
      : `${method} is not supported on ${path}; it serves POST, and GET and DELETE within a legacy session (Mcp-Session-Id)`;
  return errorResponse(null, { code: ErrorCode.MethodNotFound, message }, 405, { allow });
}

/** 404 / -32601 for upstream `name`, which is not among `served` (the names it lists); `c` is marked an unknown path. */
export function unknownUpstream(c: Context, served: Iterable<string>, name: string, id: RequestId | null): Response {
  c.set('unknownPath', true);
  const err = methodNotFound(`Unknown upstream '${quoted(name)}'; this gateway serves: ${[...served].join(', ')}`);
  return errorResponse(id, err.toJSON(), 404);
}
