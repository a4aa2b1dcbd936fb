/**
 * The internal hop between replicas that share a store (`store.kind: "redis"`).
 *
 * A park-mode retry, `tasks/update` or `tasks/cancel` that lands on a replica other than the one
 * holding the call is sent on, as it came (body and MCP headers, the caller's Authorization for
 * `forwardAuthorization`), to `POST <owner>/_replicas/forward/mcp/NAME` (`…/forward/mcp` for the
 * federated endpoint) with the shared secret in
 * `X-Mrtr-Replica-Secret` and the principal the first replica authenticated in
 * `X-Mrtr-Principal`. The owner serves it as if it had landed there, and its response (JSON or a
 * progress SSE stream) is relayed back as it is. The route answers 404 to anything without the
 * secret, and a forwarded request is never forwarded again. With tracing on, the forwarded request
 * carries the trace context of this replica's span for it instead of the client's.
 */
import { timingSafeEqual } from 'node:crypto';
import { Agent, fetch as undiciFetch } from 'undici';
import { traceHeaders } from '../observability/tracing.js';
import type { ReplicaInfo } from '../store/shared.js';

/** Path prefix of the internal forwarding route. */
export const FORWARD_PREFIX = '/_replicas/forward/mcp/';
/** Path of the internal forwarding route of the federated endpoint (`/mcp`). */
export const FORWARD_FEDERATED = '/_replicas/forward/mcp';
/** Header carrying the shared secret. */
export const SECRET_HEADER = 'x-mrtr-replica-secret';
/** Header carrying the principal (base64url of UTF-8), set by the replica that authenticated the caller. */
export const PRINCIPAL_HEADER = 'x-mrtr-principal';

/** Longest wait for a connection to another replica, in ms (a replica that stopped refuses at once). */
const CONNECT_MS = 2000;

const hop = new Agent({ connect: { timeout: CONNECT_MS }, headersTimeout: 0, bodyTimeout: 0 });

/** Request headers that travel with a forwarded request. */
const FORWARDED = /^(content-type|accept|authorization|mcp-protocol-version|mcp-method|mcp-name|mcp-param-.+|x-request-id|traceparent|tracestate)$/i;

/** True when `presented` is the configured secret (compared in constant time). */
export function secretMatches(configured: string | undefined, presented: string | null | undefined): boolean {
  if (!configured || !presented) return false;
  const a = Buffer.from(configured);
  const b = Buffer.from(presented);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The principal a forwarded request carries. */
export function forwardedPrincipal(header: string | null | undefined): string | undefined {
  if (!header || !/^[A-Za-z0-9_-]+$/.test(header)) return undefined;
  return Buffer.from(header, 'base64url').toString('utf8');
}

/**
 * Sends one MCP POST on to the replica `owner`, for `upstream` (undefined: the federated endpoint,
 * which the owner serves through its own federation layer).
 * @returns the owner's response (its status, headers and body as they come), or undefined when the
 *   owner cannot be reached (it stopped).
 */
export async function forwardToReplica(owner: ReplicaInfo, upstream: string | undefined, body: string, headers: Headers, principal: string, secret: string): Promise<Response | undefined> {
  const out: Record<string, string> = {};
  headers.forEach((v, k) => {
    if (FORWARDED.test(k)) out[k] = v;
  });
  out[SECRET_HEADER] = secret;
  out[PRINCIPAL_HEADER] = Buffer.from(principal, 'utf8').toString('base64url');
  try {
    const path = upstream === undefined ? FORWARD_FEDERATED : `${FORWARD_PREFIX}${encodeURIComponent(upstream)}`;
    const res = await undiciFetch(`${owner.url}${path}`, { method: 'POST', headers: traceHeaders(out) as Record<string, string>, body, dispatcher: hop });
    const relayed = new Headers();
    res.headers.forEach((v, k) => {
      if (/^(content-type|cache-control|x-accel-buffering|retry-after|www-authenticate)$/i.test(k)) relayed.set(k, v);
    });
    return new Response(res.body as ReadableStream | null, { status: res.status, headers: relayed });
  } catch {
    return undefined;
  }
}
