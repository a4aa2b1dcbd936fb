/**
 * An upstream's failure as the downstream JSON-RPC error: the upstream's own JSON-RPC errors are
 * relayed (legacy codes translated), a lost request or connection becomes -32603 with `data.reason`
 * (`timeout`, `crashed`, `session-lost`, `protocol`, `shutting-down`, `unreachable`), and a result
 * that breaks the schema becomes the upstream's protocol fault. {@link keepsSession} says whether the
 * session that failed can carry another request.
 */
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import { refusalStatus } from './start-errors.js';
import {
  ErrorCode,
  GatewayError,
  UpstreamProtocolError,
  UpstreamRequestLost,
  shutdownFailure,
  upstreamFailed,
  upstreamProtocolFault,
  validationProblem,
  withoutMcpPrefix,
} from '../protocol/errors.js';

/** 2025-11-25 error code: URL elicitation required (`data.elicitations`). Never sent downstream. */
export const URL_ELICITATION_REQUIRED = -32042;

/**
 * Maps an upstream failure to the downstream JSON-RPC error (legacy codes translated).
 * A `resources/read` that failed with the legacy -32002 or with -32602 becomes MCP 2026-07-28's
 * "Resource not found" shape (SEP-2164): -32602 with `data.uri`, taken from the upstream's data or
 * else from `request.params.uri`.
 * @param request the legacy request that failed, when known.
 */
export function downstreamError(
  upstream: string,
  err: unknown,
  session?: { deadReason?: string; deadKind?: string; transportKind: string },
  request?: { method: string; params: Record<string, unknown> },
): GatewayError {
  const mapped = mapUpstreamError(upstream, err, session, request);
  if (request?.method !== 'resources/read' || mapped.code !== ErrorCode.InvalidParams || !(err instanceof McpError)) return mapped;
  const data = mapped.data;
  if (data !== undefined && (data === null || typeof data !== 'object' || Array.isArray(data))) return mapped;
  const d = (data ?? {}) as Record<string, unknown>;
  return typeof d.uri === 'string'
    ? mapped
    : new GatewayError(mapped.code, mapped.message, { ...d, uri: request.params.uri }, mapped.httpStatus);
}

function mapUpstreamError(
  upstream: string,
  err: unknown,
  session?: { deadReason?: string; deadKind?: string; transportKind: string },
  request?: { method: string },
): GatewayError {
  if (err instanceof GatewayError) return err;
  if (err instanceof UpstreamRequestLost) {
    if (err.kind !== 'closed') return upstreamFailed(upstream, 'timeout', `Upstream '${upstream}' timed out`);
    const reason = err.reason ?? session?.deadReason ?? 'connection closed';
    if (session?.deadKind === 'protocol')
      return upstreamFailed(upstream, 'protocol', `Upstream '${upstream}' broke the protocol during the request: ${reason}`);
    if (session?.deadKind === 'stopping') return shutdownFailure(upstream);
    return session?.transportKind === 'stdio'
      ? upstreamFailed(upstream, 'crashed', `Upstream '${upstream}' exited or closed stdio during the request (${reason})`)
      : upstreamFailed(upstream, 'session-lost', `Upstream '${upstream}' lost the connection or session during the request (${reason})`);
  }
  if (err instanceof McpError) {
    // Past this point the error is the upstream's own answer: its code is relayed, -32000 and -32001 included.
    if (err.code === -32002) {
      return new GatewayError(ErrorCode.InvalidParams, 'Resource not found', err.data);
    }
    // McpError prefixes "MCP error N: " (once per SDK it crossed); relay the upstream's own message.
    const message = withoutMcpPrefix(err.message);
    if (err.code === URL_ELICITATION_REQUIRED) {
      // 2025-11-25 only; MUST NOT be sent to 2026-07-28 clients.
      return upstreamFailed(upstream, 'protocol', `Upstream '${upstream}' kept requiring URL elicitation: ${message}`);
    }
    const invalid = err.code === ErrorCode.InvalidParams ? /^Invalid ([\w/ ]+ result): /.exec(message) : null;
    if (invalid) {
      // A v1-SDK upstream rejected its own tool's malformed result and said so with -32602 and the
      // validator's issues; the client's request was fine, so this is the upstream's protocol fault.
      return upstreamProtocolFault(upstream, invalid[1]!, validationProblem(message) ?? message.slice(invalid[0].length).split('\n')[0]!);
    }
    return new GatewayError(err.code, message, err.data);
  }
  if (err instanceof UpstreamProtocolError) return upstreamProtocolFault(upstream, err.what, err.problem);
  const problem = validationProblem(err);
  if (problem) return upstreamProtocolFault(upstream, request ? `${request.method} result` : 'answer', problem);
  const msg = err instanceof Error ? err.message : String(err);
  const status = refusalStatus(err);
  if (status === 401 || status === 403) {
    const refused = upstreamFailed(upstream, 'unreachable', `Upstream '${upstream}' refused the request (HTTP ${status})`);
    refused.upstreamStatus = status;
    return refused;
  }
  if (/\b404\b/.test(msg) || /session/i.test(msg)) {
    return upstreamFailed(upstream, 'session-lost', `Upstream '${upstream}' lost the session: ${msg}`);
  }
  return upstreamFailed(upstream, 'unreachable', `Upstream '${upstream}' failed: ${msg}`);
}

/**
 * Whether the upstream session is still fit for reuse after `err` ended a request on it: an error
 * the upstream itself answered (an McpError, whatever its code) leaves it usable; a transport
 * failure, a closed connection, a timeout or a cancellation ({@link UpstreamRequestLost}) does not.
 */
export function keepsSession(err: unknown): boolean {
  return err instanceof McpError;
}
