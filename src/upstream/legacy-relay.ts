/**
 * The contract between a legacy client session on the front door (src/http/legacy-sessions.ts) and
 * the relay that serves it upstream: the pass-through to a legacy upstream (src/cells/legacy/) or
 * the reverse bridge to a 2026-07-28 upstream (src/cells/reverse/): types, and the SSE polling
 * timer both use.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { PlainHeaders } from '../observability/tracing.js';
import type { JsonRpcErrorObject } from '../protocol/errors.js';
import type { RequestId } from '../protocol/wire.js';
import type { ApprovalAudit } from '../protocol/connection.js';

/** A JSON-RPC message of a legacy session as a relay reads it: a request, a notification or a response. */
export type RelayMessage = {
  jsonrpc: '2.0';
  id?: RequestId;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: JsonRpcErrorObject;
};

/** The downstream side: a legacy server transport (Streamable HTTP or HTTP+SSE). */
export interface DownstreamTransport extends Transport {
  /** True while the client holds its standalone (GET) stream open; undefined when unknown. */
  hasStandaloneStream?(): boolean;
}

/** The upstream side of one legacy session: {@link PassThroughRelay} or the reverse bridge. */
export interface LegacyRelay {
  /** Which cell relays: the legacy pass-through (legacy upstream) or the reverse bridge (2026-07-28 upstream or the federated endpoint). */
  readonly kind: 'pass-through' | 'reverse';
  /**
   * One message from the client (the first is `initialize`); failures are answered, never thrown.
   * `extra.closeSSEStream` closes the SSE stream of that request (SSE polling), when the client can
   * resume it; `extra.headers` are the HTTP request's headers (trace context).
   */
  fromClient(message: JSONRPCMessage, extra?: ClientMessageExtra): Promise<void>;
  /** Ends the upstream side. Never throws. */
  close(): Promise<void>;
  /** Client requests waiting for their answer. */
  readonly inFlight: number;
  /** The revision negotiated with the client. */
  readonly negotiated: string | undefined;
  /** The upstream child's process id, when the session has one of its own. */
  readonly pid: number | undefined;
}

/** What one relayed request did, for the request log and metrics. */
export interface RelayedRequest {
  /** The client's JSON-RPC id of the request (for a wrapper that adds to the record, and the audit line's `rpcId`). */
  id?: RequestId;
  method: string;
  name?: string;
  durationMs: number;
  outcome: 'complete' | 'error';
  code?: number;
  /** `data.reason` of an error the gateway answered for the upstream (`unreachable`, `crashed`, …). */
  reason?: string;
  /** What the gateway's approval policy did for this request (`tools/call` only). */
  approval?: ApprovalAudit;
}

/** What the downstream transport offers with one client message. */
export interface ClientMessageExtra {
  /** Closes the SSE stream of this request (the client can resume it); absent when it could not. */
  closeSSEStream?: () => void;
  /** The headers of the HTTP request that carried the message (lower-case names). */
  headers?: PlainHeaders;
}

/**
 * SSE polling (SEP-1699): arms the close of the SSE stream of a client request `afterMs` ms after
 * it arrived, when the transport offers `extra.closeSSEStream` (clients that can resume) and
 * `afterMs` > 0. The client resumes with `Last-Event-ID` and gets the rest, result included.
 * @returns the timer (unref'd), to clear when the request ends; undefined when nothing is armed.
 */
export function armStreamClose(afterMs: number | undefined, extra: ClientMessageExtra): NodeJS.Timeout | undefined {
  return afterMs && afterMs > 0 && extra.closeSSEStream ? setTimeout(extra.closeSSEStream, afterMs).unref() : undefined;
}
