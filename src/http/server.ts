/**
 * Options of the Node HTTP server that carries the front door.
 */
import type { ServerOptions } from 'node:http';
import type { GatewayConfig } from '../config/schema.js';

/** Longest pause between Node's checks for requests past their read timeout, in milliseconds. */
export const READ_TIMEOUT_CHECK_MS = 500;

/**
 * `node:http` server options (for `@hono/node-server`'s `serve({ serverOptions })`) that enforce
 * `limits.requestReadTimeoutMs` (ms) on the whole request, headers and body.
 *
 * Node only looks for expired requests every `connectionsCheckingInterval` (30 s by default), so
 * a stalled request would live up to that much longer than the limit; the interval here is
 * {@link READ_TIMEOUT_CHECK_MS} (or the limit itself when smaller). A request past the limit gets
 * `408 Request Timeout` (when no response has started) and its connection is closed.
 */
export function httpServerOptions(limits: Pick<GatewayConfig['limits'], 'requestReadTimeoutMs'>): ServerOptions {
  const timeoutMs = limits.requestReadTimeoutMs;
  return {
    requestTimeout: timeoutMs,
    headersTimeout: timeoutMs,
    connectionsCheckingInterval: Math.min(READ_TIMEOUT_CHECK_MS, timeoutMs),
  };
}
