/**
 * The client's end of one request, as the layers below the front door see it: whether the client
 * closed its connection (went away before the answer), and who to tell when it does; and the
 * {@link CallContext} the front door hands down with each request (principal, connection, where
 * progress and notifications go).
 *
 * Every call has one, so it is kept light: listeners are plain functions, not an EventTarget, and
 * the AbortSignal that some consumers need (an HTTP hop, a wait in the session pool) is made only
 * when one asks for it.
 */
import type { InputRequest } from './wire.js';

export class ClientConnection {
  private listeners: Set<() => void> | undefined;
  private controller: AbortController | undefined;
  /** True once the client went away. */
  closed = false;

  /** A connection that closes when `signal` aborts (a caller that has an AbortSignal of its own), or never without one. */
  static following(signal: AbortSignal | undefined): ClientConnection {
    const c = new ClientConnection();
    if (signal?.aborted) c.close();
    else signal?.addEventListener('abort', () => c.close(), { once: true });
    return c;
  }

  /** An AbortSignal that aborts when the client goes away (made on first use). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.closed) this.controller.abort();
    }
    return this.controller.signal;
  }

  /**
   * Calls `listener` once when the client goes away (never when it already has: check
   * {@link closed} first).
   * @returns the function that removes it.
   */
  onClose(listener: () => void): () => void {
    (this.listeners ??= new Set()).add(listener);
    return () => void this.listeners?.delete(listener);
  }

  /** The client went away: {@link closed} becomes true, the signal aborts, and each listener is called once. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.controller?.abort();
    const listeners = this.listeners;
    this.listeners = undefined;
    for (const l of listeners ?? []) l();
  }
}

/** A progress notification's params without the token (the front end adds the client's token). */
export interface ProgressParams {
  progress: number;
  total?: number;
  message?: string;
}

/** Per-request context from the HTTP front door. */
export interface CallContext {
  principal: string;
  /** The client's connection: it closes when the client goes away (closes the response). */
  connection: ClientConnection;
  /** Receives upstream progress while this request is the one waiting. */
  onProgress?: (p: ProgressParams) => void;
  /** Receives the upstream's other notifications for this request (`notifications/message`). */
  onNotification?: (n: { method: string; params?: Record<string, unknown> }) => void;
  /** The caller's bearer token (what the router resolves {@link credential} from). */
  token?: string;
  /**
   * What the upstream gets for this caller (an `UpstreamCredential`, src/upstream/credential.ts,
   * resolved by the router for upstreams whose credentials are per caller): headers added to its HTTP
   * requests, variables of the caller's own stdio child, and `key`, part of the session pool key.
   * Undefined: the upstream's configured `headers` / `env` only.
   */
  credential?: { readonly key: string; readonly headers: Readonly<Record<string, string>>; readonly env: Readonly<Record<string, string>> };
  /** Filled in by the gateway: time spent waiting on the upstream, in ms. */
  timing?: { upstreamMs: number };
  /**
   * Filled in while the request is served, for its audit line (src/observability/audit.ts): what the
   * gateway's approval policy did (docs/approvals.md). Created by the router; gates only write it.
   */
  audit?: AuditNote;
  /**
   * An approval the gateway's policy needs before this call reaches its upstream, handed down by the
   * router for the cell to ask as the call's first input request (a task's `inputRequests`;
   * docs/approvals.md, "Tasks"). Absent: the call needs none, or the router asked it itself.
   */
  approval?: CallApproval;
  /**
   * How the client's request arrived, for its audit line (src/observability/audit.ts): set by the
   * front door and the federated relay of legacy sessions. The router writes an audit line for
   * requests that have it.
   */
  origin?: RequestOrigin;
}

/**
 * The gateway's approval question for one call, as plain data and a callback (the router's policy
 * decides; the cell only asks). The cell leases no upstream session before {@link decide} lets the call run.
 */
export interface CallApproval {
  /** The input key of the question (`approval`). */
  key: string;
  /** The approval form: `elicitation/create` in form mode. */
  request: InputRequest;
  /**
   * Takes the user's answer to {@link request} (an ElicitResult, already checked against the form):
   * resolves to undefined when the call may run (accepted, and remembered when the user asked for
   * it), or to the tool result (`content`, `isError: true`) the call ends with (declined, cancelled).
   * @throws GatewayError -32602 for an answer that is not an ElicitResult.
   */
  decide(answer: Record<string, unknown>): Promise<Record<string, unknown> | undefined>;
}

/** How a client's request arrived at the gateway (its audit line's `requestId`, `rpcId`, `era` and `transport`). */
export interface RequestOrigin {
  /** The gateway's request id (`X-Request-Id`), when the request came in an HTTP request of its own. */
  requestId?: string;
  /** The JSON-RPC id of the client's request. */
  rpcId?: string | number;
  /** `2026-07-28`, or the legacy revision of the client's session. */
  era: string;
  /** `streamable-http`, or `sse` (the HTTP+SSE transport of 2024-11-05). */
  transport: string;
  /** `*` when the request came on the federated `/mcp` (the router's upstream is then the member). */
  endpoint?: string;
}

/** How the gateway's approval policy treated one call (docs/approvals.md): asked the user (`asked`), the user's answer, or a remembered approval. */
export type ApprovalAudit = 'asked' | 'accepted' | 'declined' | 'cancelled' | 'remembered';

/** What the layers below the front door note about a request for its audit line. */
export interface AuditNote {
  approval?: ApprovalAudit;
  /** Set by the router when it refused the call itself (a tool its `tools` policy does not serve). */
  refused?: boolean;
  /**
   * Set by the router when it writes audit lines: a task the request created calls it once, on the
   * replica running the task, when the task ends (the task's own audit line).
   */
  taskEnded?: (end: TaskEnd) => void;
}

/** How a task ended, as the replica running it reports it (src/observability/audit.ts). */
export interface TaskEnd {
  taskId: string;
  status: 'completed' | 'failed' | 'cancelled';
  /** The JSON-RPC error of a `failed` task. */
  error?: { code: number; message?: string; data?: unknown };
  /** From the task's creation to its end, in ms. */
  durationMs: number;
}
