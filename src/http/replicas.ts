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
 * secret, and a forwarded request is never forwarded again.
 *
 * The secret does not let a replica act as anyone for anything ({@link hopRefusal}): the hop serves
 * only a park-mode retry of a call parked here and `tasks/update`/`tasks/cancel` of a task run here,
 * for the principal sealed in that state or recorded with that task. Anything else is refused
 * (403 / -32600) and counted in `mrtr_forward_refused_total`. With tracing on, the forwarded request
 * carries the trace context of this replica's span for it instead of the client's.
 */
import { timingSafeEqual } from 'node:crypto';
import { Agent, fetch as undiciFetch } from 'undici';
import type { StateSealer } from '../security/seal.js';
import { ErrorCode, GatewayError } from '../protocol/errors.js';
import { EXCHANGE_METHODS } from '../protocol/wire.js';
import { traceHeaders } from '../observability/tracing.js';
import type { ReplicaInfo } from '../store/shared.js';
import type { TaskStore } from '../store/tasks.js';

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
const FORWARDED =
  /^(content-type|accept|authorization|mcp-protocol-version|mcp-method|mcp-name|mcp-param-.+|x-request-id|traceparent|tracestate)$/i;

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
export async function forwardToReplica(
  owner: ReplicaInfo,
  upstream: string | undefined,
  body: string,
  headers: Headers,
  principal: string,
  secret: string,
): Promise<Response | undefined> {
  const out: Record<string, string> = {};
  headers.forEach((v, k) => {
    if (FORWARDED.test(k)) out[k] = v;
  });
  out[SECRET_HEADER] = secret;
  out[PRINCIPAL_HEADER] = Buffer.from(principal, 'utf8').toString('base64url');
  try {
    const path = upstream === undefined ? FORWARD_FEDERATED : `${FORWARD_PREFIX}${encodeURIComponent(upstream)}`;
    const res = await undiciFetch(`${owner.url}${path}`, {
      method: 'POST',
      headers: traceHeaders(out) as Record<string, string>,
      body,
      dispatcher: hop,
    });
    const relayed = new Headers();
    res.headers.forEach((v, k) => {
      if (/^(content-type|cache-control|x-accel-buffering|retry-after|www-authenticate)$/i.test(k)) relayed.set(k, v);
    });
    return new Response(res.body as ReadableStream | null, { status: res.status, headers: relayed });
  } catch {
    return undefined;
  }
}

/**
 * Why the hop refused a forwarded request (the `reason` label of `mrtr_forward_refused_total`):
 * `method`: not a retry with `requestState`, `tasks/update` or `tasks/cancel`; `state`: the state
 * cannot be opened, or is not a park-mode state of this replica (for this upstream); `task`: no
 * task run by this replica (for this upstream) has that id; `principal`: the forwarded principal is
 * not the one sealed in the state or recorded with the task.
 */
export type HopRefusalReason = 'method' | 'state' | 'task' | 'principal';

/** What {@link hopRefusal} needs of the receiving replica. */
export interface HopHolder {
  /** This replica's id. */
  replica: string;
  sealer: Pick<StateSealer, 'open'>;
  tasks: Pick<TaskStore, 'get'>;
}

/**
 * Whether the hop may serve a forwarded request of `method` with `params`, for `principal`, at
 * `upstream` (undefined: the federated endpoint, any upstream). It may for what forwarding exists
 * for, and nothing else:
 * - `tools/call`, `prompts/get`, `resources/read` with a `requestState` sealed for a call parked on
 *   this replica (park mode, not replay or pass-through), of this upstream, for `principal`;
 * - `tasks/update`, `tasks/cancel` of a task this replica runs (its record names it), of this
 *   upstream, recorded for `principal`.
 * @returns undefined when it may; else the reason and the error to answer: 403 / -32600 `Forbidden: …`,
 *   or the -32602 of a state that cannot be opened (invalid, expired), as the caller would get it.
 * @throws StoreUnavailable when the task record cannot be read.
 */
export async function hopRefusal(
  holder: HopHolder,
  upstream: string | undefined,
  method: string,
  params: Record<string, unknown> | undefined,
  principal: string,
): Promise<{ reason: HopRefusalReason; error: GatewayError } | undefined> {
  const forbidden = (reason: HopRefusalReason, why: string) => ({
    reason,
    error: new GatewayError(ErrorCode.InvalidRequest, `Forbidden: ${why}`, undefined, 403),
  });
  const where = upstream === undefined ? '' : ` of upstream '${upstream}'`;
  if ((EXCHANGE_METHODS as readonly string[]).includes(method) && params?.requestState !== undefined) {
    let claims;
    try {
      claims = await holder.sealer.open(params.requestState);
    } catch (e) {
      if (e instanceof GatewayError) return { reason: 'state', error: e };
      throw e;
    }
    if (claims.pt || claims.rp || claims.rep !== holder.replica || (upstream !== undefined && claims.up !== upstream)) {
      return forbidden('state', `the internal hop takes only the retry of a call parked on this replica${where}`);
    }
    if (claims.sub !== principal) return forbidden('principal', 'the forwarded principal is not the one the requestState was sealed for');
    return undefined;
  }
  if (method === 'tasks/update' || method === 'tasks/cancel') {
    const taskId = params?.taskId;
    const record = typeof taskId === 'string' && taskId.length > 0 ? await holder.tasks.get(taskId) : undefined;
    if (!record || record.replica !== holder.replica || (upstream !== undefined && record.upstream !== upstream)) {
      return forbidden('task', `the internal hop takes only ${method} of a task run on this replica${where}`);
    }
    if (record.principal !== principal) return forbidden('principal', 'the forwarded principal is not the one the task was created for');
    return undefined;
  }
  return forbidden(
    'method',
    'the internal hop takes only retries with requestState (tools/call, prompts/get, resources/read), tasks/update and tasks/cancel',
  );
}
