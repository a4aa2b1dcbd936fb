/**
 * What the OAuth client side (token exchange, discovery, consent, refresh, revocation) shares: the
 * request options oauth4webapi gets (plain http allowed for loopback hosts only, a timeout), the
 * -32603 `upstream-authorization` error, and how a failure of an authorization server is told to a
 * person (which endpoint, its HTTP status, its OAuth `error` code; never a token).
 */
import * as oauth from 'oauth4webapi';
import { errorText, upstreamFailed, type GatewayError } from '../protocol/errors.js';

/** Longest wait for one request to an authorization server or token endpoint, in ms. */
export const OAUTH_TIMEOUT_MS = 10_000;

/** True for a loopback host name (localhost, 127.0.0.0/8, ::1). */
export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * oauth4webapi's options for a request to `url`: a {@link OAUTH_TIMEOUT_MS} timeout, and plain
 * http allowed when `url` is on a loopback host (anything else must be https).
 */
export function requestOptions(url: string | URL): { signal: () => AbortSignal; [oauth.allowInsecureRequests]?: boolean } {
  const u = typeof url === 'string' ? new URL(url) : url;
  return {
    signal: () => AbortSignal.timeout(OAUTH_TIMEOUT_MS),
    ...(u.protocol === 'http:' && isLoopbackHost(u.hostname) ? { [oauth.allowInsecureRequests]: true } : {}),
  };
}

/** -32603 with `data: {upstream, reason: "upstream-authorization"}` and `message`. */
export function authorizationFailed(upstream: string, message: string): GatewayError {
  return upstreamFailed(upstream, 'upstream-authorization', message);
}

/**
 * What went wrong at `what` (for example `the token endpoint http://as/token`), for a person: the
 * server's OAuth `error` code and description, an HTTP status, a refused plain-http URL, a timeout
 * or an unreachable server. Never includes a token (oauth4webapi's messages and the server's error
 * fields carry none).
 */
export function describeFailure(what: string, e: unknown): string {
  if (e instanceof oauth.ResponseBodyError) {
    const desc = e.error_description ? ` (${e.error_description.slice(0, 200)})` : '';
    return `${what} refused the request: HTTP ${e.status}, error ${e.error}${desc}`;
  }
  if (e instanceof oauth.AuthorizationResponseError) {
    const desc = e.error_description ? ` (${e.error_description.slice(0, 200)})` : '';
    return `${what} answered error ${e.error}${desc}`;
  }
  if (e instanceof oauth.WWWAuthenticateChallengeError) return `${what} refused the client's credentials: HTTP ${e.status}`;
  if (e instanceof oauth.OperationProcessingError) {
    if (e.code === oauth.HTTP_REQUEST_FORBIDDEN) return `${what} is not https (plain http is allowed for loopback hosts only)`;
    const status = (e.cause as { status?: unknown } | undefined)?.status;
    return `${what} gave an unusable answer${typeof status === 'number' ? ` (HTTP ${status})` : ''}: ${e.message}`;
  }
  if (e instanceof Error && (e.name === 'TimeoutError' || e.name === 'AbortError'))
    return `${what} did not answer within ${OAUTH_TIMEOUT_MS / 1000} s`;
  return `${what} cannot be reached: ${errorText(e)}`;
}
