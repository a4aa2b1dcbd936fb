/**
 * JSON-RPC error codes used downstream (MCP 2026-07-28 §Error Codes) and the gateway's error type.
 */

/** JSON-RPC and MCP 2026-07-28 error codes. */
export const ErrorCode = {
  ParseError: -32700,
  InvalidRequest: -32600,
  MethodNotFound: -32601,
  InvalidParams: -32602,
  InternalError: -32603,
  /**
   * JSON-RPC "Server error" (implementation-defined): the HTTP-level refusals of the Streamable
   * HTTP transport (406 Not Acceptable, 415 Unsupported Media Type, a legacy request without its
   * `Mcp-Session-Id`), as the MCP SDK's server transport answers them.
   */
  ServerError: -32000,
  /** Headers missing, malformed, or mismatched with the body (SEP-2243). HTTP 400. */
  HeaderMismatch: -32020,
  /** The call needs a client capability the request did not declare. HTTP 400. */
  MissingRequiredClientCapability: -32021,
  /** Protocol version in `_meta` not supported. HTTP 400. */
  UnsupportedProtocolVersion: -32022,
} as const;

/** A JSON-RPC error object `{code, message, data?}`. */
export interface JsonRpcErrorObject {
  code: number;
  message: string;
  data?: unknown;
}

/**
 * An error the gateway answers downstream as a JSON-RPC error.
 * `httpStatus` is the HTTP status of the response that carries it (error contract in docs/architecture.md).
 */
export class GatewayError extends Error {
  override name = 'GatewayError';
  constructor(
    readonly code: number,
    message: string,
    readonly data?: unknown,
    readonly httpStatus = 200,
  ) {
    super(message);
  }

  /**
   * The HTTP status an upstream refused the gateway's request with (401, 403 …), when that is what
   * failed; never sent downstream. The router drops a per-user credential the upstream refused.
   */
  upstreamStatus?: number;

  /** `data.reason`, when the data has one ({@link reasonOf}). */
  get reason(): ErrorReason | (string & {}) | undefined {
    return reasonOf(this.data);
  }

  /** The JSON-RPC error object for the wire. */
  toJSON(): JsonRpcErrorObject {
    return this.data === undefined
      ? { code: this.code, message: this.message }
      : { code: this.code, message: this.message, data: this.data };
  }
}

/** 400 / -32020: a header is missing, malformed, or differs from the body. */
export const headerMismatch = (message: string) => new GatewayError(ErrorCode.HeaderMismatch, message, undefined, 400);

/** 400 / -32602: the `_meta` envelope or params are malformed. */
export const badEnvelope = (message: string) => new GatewayError(ErrorCode.InvalidParams, message, undefined, 400);

/** Longest value an error message quotes back, in characters. */
const QUOTED_CHARS = 200;

/**
 * `value` as an error message or log line quotes it: cut to 200 UTF-16 code units (one less where
 * the cut would split a surrogate pair), then `…`, so a client's long name or header is not echoed
 * whole. `undefined` stays `undefined` (an absent name in a log line).
 */
export function quoted(value: string): string;
export function quoted(value: string | undefined): string | undefined;
export function quoted(value: string | undefined): string | undefined {
  if (value === undefined || value.length <= QUOTED_CHARS) return value;
  const high = value.charCodeAt(QUOTED_CHARS - 1);
  const end = high >= 0xd800 && high <= 0xdbff ? QUOTED_CHARS - 1 : QUOTED_CHARS;
  return `${value.slice(0, end)}…`;
}

/** 200 / -32602: bad params that are not envelope problems (arguments, requestState, inputResponses). */
export const invalidParams = (message: string, data?: unknown) => new GatewayError(ErrorCode.InvalidParams, message, data);

/** 404 / -32601: removed or unknown method, or unknown upstream. */
export const methodNotFound = (message: string, data?: unknown) => new GatewayError(ErrorCode.MethodNotFound, message, data, 404);

/**
 * 400 / -32021 with `data.requiredCapabilities` (a ClientCapabilities object); `what` names the
 * capability in the message, `declaredIn` where the client declares its capabilities, `who` who
 * needs it (the message's start).
 */
export const missingCapability = (
  requiredCapabilities: Record<string, unknown>,
  what: string,
  declaredIn = "this request's clientCapabilities",
  who = 'The upstream needs',
) =>
  new GatewayError(
    ErrorCode.MissingRequiredClientCapability,
    `${who} the client capability ${what}, which ${declaredIn} do not declare`,
    { requiredCapabilities },
    400,
  );

/** Why an upstream hop failed; sent as `data.reason`. */
export type UpstreamFailure =
  | 'unreachable'
  | 'crashed'
  | 'timeout'
  | 'session-lost'
  | 'busy'
  | 'parked-limit'
  | 'replay-limit'
  | 'replica-gone'
  | 'protocol'
  | 'cancelled'
  | 'declined'
  | 'shutting-down'
  | 'upstream-authorization';

/**
 * The `data.reason` values the gateway sets on its own errors: why an upstream hop failed
 * ({@link UpstreamFailure}), a tool name that breaks the MCP tool-name rules (-32602), or the
 * shared store that cannot be reached (-32603).
 */
export type ErrorReason = UpstreamFailure | 'invalid-tool-name' | 'store-unavailable';

/**
 * The `data.reason` of a JSON-RPC error's `data`, when it is a string: one of {@link ErrorReason}
 * on the gateway's own errors; an upstream's error relayed as it is may carry any other.
 */
export function reasonOf(data: unknown): ErrorReason | (string & {}) | undefined {
  const reason = data !== null && typeof data === 'object' ? (data as { reason?: unknown }).reason : undefined;
  return typeof reason === 'string' ? reason : undefined;
}

/**
 * 200 / -32603 with `data.upstream` and `data.reason`: the upstream is unreachable, crashed or timed
 * out. `extra` adds fields to `data` (for example `stderr`, the last lines a stdio child wrote).
 */
export const upstreamFailed = (upstream: string, reason: UpstreamFailure, message: string, extra?: Record<string, unknown>) =>
  new GatewayError(ErrorCode.InternalError, message, { upstream, reason, ...extra });

/**
 * 200 / -32603 with `data.reason` `shutting-down`: a call (or the session it waited for) ended
 * because the gateway stops. New requests refused while it drains get 503 instead ({@link shuttingDown}).
 */
export const shutdownFailure = (upstream: string) => upstreamFailed(upstream, 'shutting-down', 'gateway shutting down');

/** 503 / -32603 "gateway shutting down" (`data.reason` `shutting-down`): during the drain, a request that would start new work here. */
export const shuttingDown = (upstream: string) =>
  new GatewayError(ErrorCode.InternalError, 'gateway shutting down', { upstream, reason: 'shutting-down' }, 503);

/**
 * The message of `e` with its cause, when it has one that says more: Node's fetch reports
 * "fetch failed" and keeps the reason (`connect ECONNREFUSED 127.0.0.1:3001`) in `cause`.
 */
export function errorText(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const cause = (e as { cause?: unknown }).cause;
  const said = cause instanceof Error ? cause.message || (cause as { code?: string }).code : typeof cause === 'string' ? cause : undefined;
  return said && !e.message.includes(said) ? `${e.message} (${said})` : e.message;
}

/** The `MCP error <code>: ` prefix the v1 SDK's `McpError` puts on its message (once per hop it crossed). */
const MCP_ERROR_PREFIX = /^(?:MCP error -?\d+: )+/;

/** `message` without the SDK's `MCP error <code>: ` prefixes, so the upstream's own words are relayed. */
export function withoutMcpPrefix(message: string): string {
  return message.replace(MCP_ERROR_PREFIX, '');
}

/** One schema validation issue (zod's shape: `path` and `message`, `errors` for a union's branches). */
interface Issue {
  path?: unknown[];
  message?: string;
  errors?: Issue[][];
}

function isIssueList(v: unknown): v is Issue[] {
  return Array.isArray(v) && v.length > 0 && v.every((i) => i && typeof i === 'object' && typeof (i as Issue).message === 'string');
}

/**
 * The first problem of a list of schema validation issues, on one line: its path (dotted) and
 * message, for example `content: expected array, received string`. For a union that no branch
 * matched, the first issue of the first branch is shown, under the union's path.
 */
export function firstIssue(issues: readonly Issue[]): string {
  let issue = issues[0]!;
  let path = [...(issue.path ?? [])];
  while (issue.errors?.[0]?.[0]) {
    issue = issue.errors[0][0];
    path = [...path, ...(issue.path ?? [])];
  }
  const message = String(issue.message)
    .replace(/^Invalid input: /, '')
    .split('\n')[0]!;
  return path.length ? `${path.join('.')}: ${message}` : message;
}

/**
 * The first validation problem `e` reports, on one line (see {@link firstIssue}), when `e` is a
 * schema validation error: a ZodError (its `issues`), or an error whose message is a JSON list
 * of issues, after an optional lead-in such as the SDK's `Invalid tools/call result: `.
 * @returns undefined for any other error.
 */
export function validationProblem(e: unknown): string | undefined {
  const issues = (e as { issues?: unknown } | undefined)?.issues;
  if (isIssueList(issues)) return firstIssue(issues);
  const message = e instanceof Error ? e.message : typeof e === 'string' ? e : undefined;
  const start = message?.indexOf('[') ?? -1;
  if (start < 0) return undefined;
  try {
    const parsed: unknown = JSON.parse(message!.slice(start));
    return isIssueList(parsed) ? firstIssue(parsed) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * 200 / -32603, `data.reason: "protocol"`: the upstream answered with something its protocol
 * does not allow. The message names the upstream, what it sent (`what`, for example
 * `tools/call result`) and the first problem found (`problem`, one line).
 */
export const upstreamProtocolFault = (upstream: string, what: string, problem: string) =>
  upstreamFailed(upstream, 'protocol', `Upstream '${upstream}' returned an invalid ${what}: ${problem}`);

/**
 * A request to a legacy upstream that ended without the upstream's answer, as the gateway saw it
 * end: `closed` when the session's connection closed (the stdio child exited, the HTTP session was
 * lost, or the gateway closed it), `timeout` when the request's own timer (`timeoutMs`, ms) fired,
 * `aborted` when its abort signal did. The v1 SDK reports all three as McpError -32000
 * (ConnectionClosed) or -32001 (RequestTimeout), the same codes a server may send as its own
 * error; `UpstreamSession.request` (src/upstream/session.ts) throws this instead, so only an error
 * the upstream answered stays an McpError. The router answers it as -32603 with
 * `data.reason` `crashed` / `session-lost` (closed) or `timeout`.
 */
export class UpstreamRequestLost extends Error {
  override name = 'UpstreamRequestLost';
  /**
   * @param reason for `closed`: what ended this request alone while its session went on (the SSE
   *   stream of its POST broke, say), named in the answer in place of the session's own reason.
   */
  constructor(
    readonly kind: 'closed' | 'timeout' | 'aborted',
    message: string,
    readonly reason?: string,
  ) {
    super(message);
  }
}

/**
 * The upstream sent a message that breaks its protocol (a body that is not JSON-RPC, say);
 * `problem` is the first problem found, on one line. The router answers it as -32603
 * `data.reason: "protocol"`.
 */
export class UpstreamProtocolError extends Error {
  override name = 'UpstreamProtocolError';
  constructor(
    readonly what: string,
    readonly problem: string,
  ) {
    super(`invalid ${what}: ${problem}`);
  }
}
