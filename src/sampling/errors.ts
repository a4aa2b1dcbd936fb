/**
 * The error a provider-answered `sampling/createMessage` ends with. It travels back to the upstream
 * as the JSON-RPC error of its request (the tool decides what to do with it), never to the client.
 */

/** Why the gateway could not answer a sampling request; sent as `data.reason`. */
export type SamplingFailure =
  /** The request asks for something the gateway does not do (`includeContext`, malformed params). */
  | 'invalid-request'
  /** A content type the provider or model cannot take. */
  | 'unsupported-content'
  /** A token budget (`data.scope`: `upstream` or `principal`) has no room for the request. */
  | 'budget'
  /** `maxConcurrent` requests in flight and `maxQueued` waiting, or no slot within the time limit. */
  | 'busy'
  /** The provider refused the gateway's credentials (HTTP 401 or 403). */
  | 'provider-auth'
  /** The provider kept answering 429 within the time limit. */
  | 'provider-rate-limited'
  /** The provider kept failing (5xx, connection errors) within the time limit. */
  | 'provider-unavailable'
  /** The provider refused the request itself (another 4xx). */
  | 'provider-rejected'
  /** The provider answered something that is not a usable completion. */
  | 'provider-protocol'
  /** No answer within the provider's `timeoutMs`. */
  | 'timeout'
  /** The upstream withdrew its request, or the call it belongs to ended. */
  | 'cancelled';

/** JSON-RPC codes used: -32602 for requests the gateway refuses as such, -32603 for everything else. */
export const SAMPLING_INVALID_PARAMS = -32602;
export const SAMPLING_INTERNAL_ERROR = -32603;

/**
 * A failed provider-answered sampling request. `code` and `message` become the JSON-RPC error the
 * upstream receives; `data` carries `reason` and, where they apply, `provider`, `status` (the
 * provider's HTTP status), `retryAfterMs`, `scope`, `limit` and `windowMs`. Messages never carry the
 * API key or any message content.
 */
export class SamplingError extends Error {
  override name = 'SamplingError';
  readonly code: number;
  readonly data: { reason: SamplingFailure; [k: string]: unknown };
  constructor(reason: SamplingFailure, message: string, extra: Record<string, unknown> = {}) {
    super(message);
    this.code = reason === 'invalid-request' || reason === 'unsupported-content' ? SAMPLING_INVALID_PARAMS : SAMPLING_INTERNAL_ERROR;
    this.data = { reason, ...extra };
  }

  get reason(): SamplingFailure {
    return this.data.reason;
  }

  /** The JSON-RPC error object for the upstream. */
  toJSON(): { code: number; message: string; data: Record<string, unknown> } {
    return { code: this.code, message: this.message, data: this.data };
  }
}

/**
 * An Error the v1 SDK's request handlers turn into exactly this JSON-RPC error (its `code`, its
 * `message` without the "MCP error N:" prefix that McpError adds, and its `data`).
 */
export function asRpcError(err: SamplingError): Error & { code: number; data: unknown } {
  return Object.assign(new Error(err.message), { code: err.code, data: err.data });
}
