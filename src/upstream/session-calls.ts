/**
 * The calls on one legacy session, and where each server-initiated request goes: to the call whose
 * POST stream carried it (Streamable HTTP: the gateway's transport tags it with that request's
 * `progressToken`), else to the call alone on the session (stdio, the GET stream), else nowhere:
 * `roots/list` is then answered from the upstream's configured `roots` and anything else refused
 * upstream. It also tells whether the session may carry several calls at once ({@link
 * SessionCalls.shareable}) and whether a call must give the server its client's roots first
 * ({@link SessionCalls.needsRoots}). {@link UpstreamSession} (src/upstream/session.ts) is one.
 */
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import {
  McpError,
  type ClientNotification,
  type ClientRequest,
  type ServerNotification,
  type ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../config/schema.js';
import { canonicalJson } from '../protocol/canonical.js';
import { HttpClientTransport, RELATED_TOKEN_HEADER } from './http-transport.js';
import type { Connection } from './session-connection.js';

/** A server-initiated request as it arrives from the upstream. */
export interface ServerInitiatedRequest {
  method: string;
  params?: Record<string, unknown>;
}

/** Extra information the v1 SDK passes to a request handler (abort signal, ids). */
export type ServerRequestExtra = RequestHandlerExtra<ClientRequest | ServerRequest, ClientNotification | ServerNotification>;

/** Handles a server-initiated request for the Exchange that holds the lease; resolves to the legacy result. */
export type ServerRequestHandler = (request: ServerInitiatedRequest, extra: ServerRequestExtra) => Promise<Record<string, unknown>>;

/** Progress params of an upstream `notifications/progress`. */
export interface UpstreamProgress {
  progressToken: string | number;
  progress: number;
  total?: number;
  message?: string;
}

/** What a call attached to a session receives: its server-initiated requests and its progress. */
export interface CallHandlers {
  onRequest: ServerRequestHandler;
  onProgress?: (params: UpstreamProgress) => void;
  /** A `notifications/message` the upstream sent while this call was the session's only call. */
  onLog?: (params: Record<string, unknown>) => void;
}

/**
 * Where the upstream was seen to send a server-initiated request during a call: on the POST stream
 * of that call ('post', so calls can share a session and still be told apart), or on the standalone
 * GET stream ('get', so they cannot).
 */
export type Attribution = 'post' | 'get';

/** What {@link SessionCalls} needs of the session's options. */
export interface CallRoutingOptions {
  cfg: UpstreamConfig;
  /** Told which stream carried a server-initiated request that arrived during a call (HTTP transports). */
  onAttribution?: (seen: Attribution) => void;
  /** Sees each server-initiated request and `notifications/message` that arrives outside any call (read-only). */
  onUnclaimed?: (message: ServerInitiatedRequest) => void;
}

/** The calls attached to a legacy session and the routing of the server's requests to them; see the file header. */
export abstract class SessionCalls {
  /** Resolves when the connection closes for any reason. */
  readonly closed: Promise<void>;
  protected resolveClosed!: () => void;
  /** The connection carrying the session now (set by the session once open). */
  protected conn!: Connection;
  /** The calls running on this session, by the `progressToken` each sent upstream. */
  protected readonly calls = new Map<string, CallHandlers>();
  /**
   * True while several calls may run on this session at once: a server-initiated request is then
   * delivered only to the call whose POST stream carried it, or to the one call left on it.
   */
  shared = false;
  /**
   * True once the server sent a request that named no call (the GET stream of a Streamable HTTP
   * upstream): such a request is told from no other call's, so the session never carries several
   * calls again (see {@link shareable}).
   */
  private unattributed = false;
  /** True once the server asked `roots/list` on this session: it uses roots. */
  usesRoots = false;
  /**
   * True when the roots the server last received came from a call's client (they differ from the
   * upstream's configured `roots`): the next call must give the server its own first.
   */
  rootsFromCall = false;

  protected constructor(private readonly routing: CallRoutingOptions) {
    this.closed = new Promise((r) => (this.resolveClosed = r));
  }

  /**
   * Attaches a call: server-initiated requests that came on the POST stream of the request carrying
   * `progressToken` reach `handlers.onRequest`, as do those that came with no stream to name them
   * (stdio, the GET stream) while it is the only call on the session, shared or not; its progress
   * notifications reach `handlers.onProgress`. {@link detach} undoes it.
   */
  attach(progressToken: string, handlers: CallHandlers): void {
    this.calls.set(progressToken, handlers);
  }

  /**
   * Whether other calls may join this session: not once the server sent a request that named no
   * call (several calls could not be told apart), nor once it uses roots (it holds one set of roots
   * at a time, and each call must run with its own client's; see {@link needsRoots}).
   */
  get shareable(): boolean {
    return !this.unattributed && !this.usesRoots;
  }

  /**
   * Whether a call must give the server its roots before its request goes upstream
   * ({@link resyncRoots}): the server uses roots, and the call's client declared roots it may be
   * asked for (`clientRoots`), or the server holds another call's client's roots.
   */
  needsRoots(clientRoots: boolean): boolean {
    return this.usesRoots && (clientRoots || this.rootsFromCall);
  }

  /** Detaches the call `handlers` attached under `progressToken`: what arrives for it afterwards is refused upstream. */
  detach(progressToken: string, handlers: CallHandlers): void {
    if (this.calls.get(progressToken) !== handlers) return;
    this.calls.delete(progressToken);
  }

  /** Resolvers of {@link whenAnswered}, by progress token. */
  protected readonly answered = new Map<string, () => void>();

  /**
   * Whether the upstream answered the request sent with `progressToken` (a result or an error),
   * waiting up to `ms` for it: after `notifications/cancelled`, a legacy server that still answers
   * shows that the cancelled call ended, so its session is quiet again. Resolves false when no
   * answer came in time (the call may still run upstream).
   */
  whenAnswered(progressToken: string, ms: number): Promise<boolean> {
    const conn = this.conn;
    if (!conn.idOf.has(progressToken)) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.answered.delete(progressToken);
        if (!ok) {
          const id = conn.idOf.get(progressToken);
          conn.idOf.delete(progressToken);
          if (id !== undefined) conn.tokenOf.delete(id);
        }
        resolve(ok);
      };
      const timer = setTimeout(() => done(false), ms);
      this.answered.set(progressToken, () => done(true));
      void this.closed.then(() => done(false));
    });
  }

  /** Detaches every call. */
  detachAll(): void {
    this.calls.clear();
  }

  /** The call a server-initiated request belongs to, if it can be known. */
  private callFor(conn: Connection, extra: ServerRequestExtra): CallHandlers | undefined {
    const token = (extra.requestInfo?.headers as Record<string, string | string[] | undefined> | undefined)?.[RELATED_TOKEN_HEADER];
    if (typeof token === 'string') {
      const call = this.calls.get(token);
      if (call) this.routing.onAttribution?.('post');
      return call;
    }
    if (conn.transport instanceof HttpClientTransport) {
      // The GET stream: no other call may join this session from now on.
      this.unattributed = true;
      if (this.calls.size > 0) this.routing.onAttribution?.('get');
    }
    // Named by no stream (stdio, the GET stream): it is the call's when that call is the only one
    // in flight on the session, shared or not; with several, it is nobody's.
    return this.calls.size === 1 ? this.calls.values().next().value : undefined;
  }

  /**
   * A server-initiated request: to the call it belongs to ({@link callFor}) once the connection is
   * ready; else `roots/list` is answered from the configured `roots` and anything else refused
   * upstream with -32603. Counted for {@link quiesce}.
   */
  protected async dispatch(conn: Connection, request: ServerInitiatedRequest, extra: ServerRequestExtra): Promise<Record<string, unknown>> {
    conn.asked++;
    conn.asking++;
    try {
      return await this.answer(conn, request, extra);
    } finally {
      conn.lastAnsweredAt = performance.now();
      if (--conn.asking === 0) for (const done of [...conn.onAllAnswered]) done();
    }
  }

  private async answer(conn: Connection, request: ServerInitiatedRequest, extra: ServerRequestExtra): Promise<Record<string, unknown>> {
    const roots = request.method === 'roots/list';
    if (roots) this.usesRoots = true;
    if (conn.ready && conn === this.conn) {
      const call = this.callFor(conn, extra);
      if (call) {
        const result = await call.onRequest(request, extra);
        // Roots other than the configured ones are that call's client's: the next call resyncs.
        if (roots) this.rootsFromCall = canonicalJson(result.roots ?? null) !== canonicalJson(this.routing.cfg.roots);
        return result;
      }
    }
    this.routing.onUnclaimed?.(request);
    if (roots) {
      this.rootsFromCall = false;
      return { roots: this.routing.cfg.roots };
    }
    throw new McpError(
      -32603,
      `${request.method} arrived outside any client request in progress on this session; the gateway has no client to ask`,
    );
  }
}
