/**
 * One legacy MCP session (2024-11-05 … 2025-11-25) to an upstream, through the v1 SDK `Client`
 * and its stdio, Streamable HTTP and HTTP+SSE client transports.
 *
 * A session is leased to one Exchange at a time; server-initiated requests that arrive while it is
 * leased go to the lease's handler. Outside a lease, and while the session is still starting,
 * `roots/list` is answered from config and other server-initiated requests are refused upstream.
 * A server that uses roots is told `notifications/roots/list_changed` before a call that must run
 * with its own client's roots ({@link UpstreamSession.resyncRoots}).
 *
 * A Streamable HTTP upstream that was restarted or reaped the session answers 404 on its session
 * id; the request was not processed, so the session initializes a new upstream session and sends
 * the request once more, transparently to the caller (MCP 2025-11-25 basic/transports
 * §Session Management: "the client MUST start a new session").
 *
 * Its parts: the calls on the session and where server-initiated requests go (session-calls.ts,
 * which {@link UpstreamSession} extends); one connection, the requests sent on it and the start
 * barrier (session-connection.ts); tool calls run as upstream tasks (session-tasks.ts); its
 * transport (legacy-transport.ts) and stdio child (stdio-child.ts); start errors (start-errors.ts).
 */
import { randomUUID } from 'node:crypto';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { ResponseMessage } from '@modelcontextprotocol/sdk/shared/responseMessage.js';
import {
  LoggingMessageNotificationSchema,
  ProgressNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
  type CallToolResult,
  type ClientCapabilities as LegacyClientCapabilities,
  type Implementation,
  type ServerCapabilities,
} from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import type { UpstreamConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import { secretRedactor } from '../security/redact.js';
import type { HttpHop } from './http.js';
import { UpstreamProtocolError, UpstreamRequestLost } from '../protocol/errors.js';
import { HttpClientTransport } from './http-transport.js';
import { createLegacyTransport, isSessionNotFound } from './legacy-transport.js';
import {
  BARRIER_PING_MS,
  SentRequest,
  abandonStart,
  newConnection,
  nextRequestId,
  quiesce,
  type Connection,
  type SessionRequestOptions,
} from './session-connection.js';
import { budgetText, firstStage, refusalStatus, startFailureText, UpstreamStartError } from './start-errors.js';
import { StderrTail, StdioChild, childOf, endStdioChild, withExtraEnv } from './stdio-child.js';
import { callToolAsTask, listTaskSupport } from './session-tasks.js';
import { SessionCalls, type CallRoutingOptions, type ServerInitiatedRequest, type ServerRequestExtra } from './session-calls.js';
import { guardStdout, straysText, type StdoutStrays } from './stdout-guard.js';

/** A change notification from the upstream: a tools, prompts or resources `list_changed`, or `notifications/resources/updated`. */
export interface UpstreamNotification {
  method: string;
  params?: Record<string, unknown>;
}

/** The upstream notifications {@link UpstreamSession.onNotification} listeners receive. */
const CHANGE_NOTIFICATIONS = [
  ToolListChangedNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
];

/** What the upstream said in its `initialize` result. */
export interface UpstreamInfo {
  protocolVersion: string;
  capabilities: ServerCapabilities;
  serverInfo: Implementation;
  instructions?: string;
}

/** What a session needs to connect. */
export interface SessionOptions extends CallRoutingOptions {
  upstream: string;
  /** The `initialize` capabilities (already fitted to the upstream's revision). */
  capabilities: LegacyClientCapabilities;
  /** The pool key the session belongs to. */
  key: string;
  log: Logger;
  /** The caller's credential (src/upstream/credential.ts): headers of every HTTP request, or variables of the stdio child (hidden in its stderr). */
  credential?: { headers: Record<string, string>; env: Record<string, string> };
  /** The upstream's HTTP hop (HTTP transports). */
  http?: HttpHop;
  /** The whole start's budget (spawn or connect, `initialize`, start barrier), in ms; default `timeouts.connectMs`. */
  startMs?: number;
  /**
   * A stdio child that runs already (the era probe's, handed over): the session sends `initialize`
   * on it instead of spawning one; `startMs` is then what is left of its budget since its spawn.
   */
  adopt?: StdioChild;
  /** A stdio child spawned now is spawned for a first start (see src/upstream/stdio-child.ts). */
  installing?: boolean;
  /** Aborts the start (the pool closes): the open fails with the signal's reason. */
  signal?: AbortSignal;
  /**
   * True once the gateway stops: a connection that ends by itself then (a stdio child that got
   * the terminal's Ctrl-C with the gateway) is logged at info, not as a dying session.
   */
  stopping?: () => boolean;
}

/**
 * A connected legacy session. Create with {@link UpstreamSession.open}.
 */
export class UpstreamSession extends SessionCalls {
  readonly id = randomUUID();
  /** Set when the connection closed or failed; the session is then never reused. */
  deadReason: string | undefined;
  /**
   * `protocol` when the gateway ended the session because the upstream broke the protocol (stdout
   * that is not JSON-RPC, a message past the stdio bound); `stopping` when the connection ended by
   * itself while the gateway stops (see `SessionOptions.stopping`).
   */
  deadKind: 'protocol' | 'stopping' | undefined;
  private closing = false;
  private onDead: ((reason: string) => void)[] = [];
  private replacing: Promise<Connection> | undefined;
  private readonly log: Logger;
  /** Messages received from the upstream so far, over every connection of this session. */
  received = 0;
  /** When the last message from the upstream arrived (`performance.now()`, ms). */
  lastReceivedAt = 0;

  private constructor(private readonly opts: SessionOptions) {
    super(opts);
    this.log = opts.log;
  }

  get upstream(): string {
    return this.opts.upstream;
  }
  get transportKind(): UpstreamConfig['transport'] {
    return this.opts.cfg.transport;
  }
  get key(): string {
    return this.opts.key;
  }
  /** The capabilities this session declared in `initialize`. */
  get capabilities(): LegacyClientCapabilities {
    return this.opts.capabilities;
  }
  /** The caller's credential: headers added to its upstream HTTP requests, or variables of its stdio child. */
  get credential(): { headers: Record<string, string>; env: Record<string, string> } {
    return this.opts.credential ?? { headers: {}, env: {} };
  }
  /** The upstream's `initialize` result. */
  get info(): UpstreamInfo {
    const client = this.conn.client;
    return {
      protocolVersion: this.conn.negotiated ?? 'unknown',
      capabilities: client.getServerCapabilities() ?? {},
      serverInfo: client.getServerVersion() ?? { name: this.upstream, version: 'unknown' },
      instructions: client.getInstructions(),
    };
  }

  /**
   * Spawns or connects, sends `initialize` declaring `opts.capabilities` (with `protocolVersion`
   * pinned when the upstream's config says so), sends `notifications/initialized`, then waits for a
   * `ping` answer so that what the server asks right after `initialized` (for example `roots/list`)
   * is answered from config before any call can be charged with it.
   * The whole start is bounded by `opts.startMs` (default `timeouts.connectMs`): past it the
   * transport is closed (a stdio child is sent SIGTERM) and the open fails with reason `timeout`.
   * A stdio child that floods stdout with lines that are not JSON-RPC fails it as well
   * (src/upstream/stdout-guard.ts).
   * @throws UpstreamStartError when the connection or initialize fails or exceeds its budget.
   */
  static async open(opts: SessionOptions): Promise<UpstreamSession> {
    const session = new UpstreamSession(opts);
    session.conn = await session.connect(opts.startMs ?? opts.cfg.timeouts.connectMs);
    const pid = session.conn.transport instanceof StdioClientTransport ? (session.conn.transport.pid ?? undefined) : undefined;
    session.log.info({ session: session.id, pid, protocolVersion: session.info.protocolVersion }, 'upstream session opened');
    return session;
  }

  /**
   * A new connection, started and past the start barrier within `startMs` (see {@link open}). A
   * child the era probe handed over (`opts.adopt`) is used by the first connection only (a later
   * one, after a 404, is HTTP only).
   */
  private async connect(startMs: number = this.opts.cfg.timeouts.connectMs): Promise<Connection> {
    const { cfg } = this.opts;
    const { headers, env } = this.credential;
    const redact = secretRedactor(cfg.transport === 'stdio' ? withExtraEnv(cfg.env, env) : undefined);
    const adopted = cfg.transport === 'stdio' ? this.opts.adopt : undefined;
    this.opts.adopt = undefined;
    const stderr = adopted ? adopted.stderrTail : cfg.transport === 'stdio' ? new StderrTail(redact) : undefined;
    const transport = adopted ?? createLegacyTransport(cfg, this.log, headers, this.opts.http, stderr, this.opts.installing, env);
    const conn = newConnection(this.opts.capabilities, transport, stderr, cfg.protocolVersion);
    this.listen(conn);
    await this.start(conn, startMs, adopted, redact);
    conn.ready = true;
    if (transport instanceof StdioClientTransport) {
      const pid = transport.pid ?? undefined;
      childOf(transport)?.once('exit', (code, signal) => this.log.info({ session: this.id, pid, code, signal }, 'upstream process exited'));
    }
    return conn;
  }

  /**
   * Sets the handlers of `conn`'s client: server-initiated requests ({@link dispatch}), progress
   * (to the call of its `progressToken`), `notifications/message` (to the call alone on the
   * session, else {@link SessionOptions.onUnclaimed}), change notifications (to
   * {@link onNotification} listeners), the end of the connection, and transport errors.
   */
  private listen(conn: Connection): void {
    const { client, transport } = conn;
    client.fallbackRequestHandler = (request, extra) => this.dispatch(conn, request as ServerInitiatedRequest, extra as ServerRequestExtra);
    // Progress is routed here rather than through the SDK's per-request onprogress, which drops a
    // notification that arrives in the same read as the response it belongs to.
    client.setNotificationHandler(ProgressNotificationSchema, (n) =>
      this.calls.get(String(n.params.progressToken))?.onProgress?.(n.params),
    );
    // A log message names no request: it is a call's only when that call is alone on the session.
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      const only = !this.shared && this.calls.size === 1 ? this.calls.values().next().value : undefined;
      if (only?.onLog) only.onLog(n.params);
      else this.opts.onUnclaimed?.({ method: n.method, params: n.params });
    });
    for (const schema of CHANGE_NOTIFICATIONS) {
      client.setNotificationHandler(schema, (n) => {
        for (const l of [...this.changeListeners]) l(n as UpstreamNotification);
      });
    }
    client.onclose = () => {
      conn.closed = true;
      if (this.conn === conn) this.markDead(this.closing ? 'closed by the gateway' : 'connection closed');
      for (const p of [...conn.pending.values()]) p.lost();
    };
    // A request whose own SSE stream broke fails alone; the session goes on with its other calls.
    if (transport instanceof HttpClientTransport) {
      transport.onrequesterror = (id, error) => {
        const pending = conn.pending.get(Number(id));
        // Once started, a request not pending here has settled already (answered, cancelled, timed
        // out): nothing waits for its stream. Before, it is the SDK's initialize or ping: the start fails.
        if (!pending) return conn.ready;
        this.log.debug({ err: error.message, session: this.id, method: pending.method }, 'upstream request failed on its own stream');
        pending.fail(error);
        return true;
      };
    }
    client.onerror = (err) => {
      if (this.conn !== conn && conn.ready) return;
      this.log.debug({ err: err.message, session: this.id }, 'upstream transport error');
      // An HTTP stream that broke (or could not be resumed) means the upstream or its session is gone.
      if (
        this.opts.cfg.transport !== 'stdio' &&
        /SSE stream disconnected|Maximum reconnection attempts|Failed to reconnect|SSE error/i.test(err.message)
      ) {
        this.fail(err.message);
      }
    };
  }

  /**
   * Starts `conn` ({@link handshake}) within `startMs`; the start ends early when its time runs
   * out, `opts.signal` aborts or a stdio child floods stdout ({@link watchStdout}).
   * @throws UpstreamStartError naming what the start was doing when it ran out of time.
   */
  private async start(conn: Connection, startMs: number, adopted: StdioChild | undefined, redact: (text: string) => string): Promise<void> {
    const { cfg, signal } = this.opts;
    const { transport } = conn;
    let stopStart!: (e: Error) => void;
    const stopped = new Promise<never>((_, reject) => (stopStart = reject));
    stopped.catch(() => {});
    const strays = this.watchStdout(conn, adopted, redact, stopStart);
    let stage = adopted ? 'waiting for the initialize result' : firstStage(cfg);
    const start = transport.start.bind(transport);
    transport.start = async () => {
      await start();
      stage = 'waiting for the initialize result';
    };
    const timer = setTimeout(() => stopStart(new UpstreamStartError('', [], 'timeout')), startMs);
    const abort = () => stopStart(new Error(String(signal?.reason ?? 'aborted')));
    if (signal?.aborted) abort();
    signal?.addEventListener('abort', abort, { once: true });
    try {
      await Promise.race([this.handshake(conn, startMs), stopped]);
    } catch (e) {
      await abandonStart(conn);
      // Only the start's own timer counts: a -32001 answer to initialize is the upstream's error.
      const timedOut = e instanceof UpstreamStartError && e.reason === 'timeout';
      throw new UpstreamStartError(
        timedOut
          ? [`${stage} took longer than ${budgetText(startMs, cfg, adopted?.budgetMs)}`, straysText(strays)].filter(Boolean).join('; ')
          : startFailureText(e, cfg),
        conn.stderr?.get() ?? [],
        timedOut ? 'timeout' : 'unreachable',
        e instanceof UpstreamProtocolError ? e : undefined,
        refusalStatus(e),
      );
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener('abort', abort);
    }
  }

  /**
   * Guards the stdout of a stdio child (src/upstream/stdout-guard.ts; a handed-over child is
   * guarded already, by its first owner: only the reaction changes): a flood stops the child, and
   * fails the start (`stopStart`) or, once started, the session (`protocol`).
   * @returns what the guard counted, for the message of a start that ran out of time.
   */
  private watchStdout(
    conn: Connection,
    adopted: StdioChild | undefined,
    redact: (text: string) => string,
    stopStart: (e: Error) => void,
  ): StdoutStrays | undefined {
    const { transport } = conn;
    if (!(transport instanceof StdioChild)) return undefined;
    if (!adopted) transport.strays = guardStdout(transport, (reason) => transport.onFlood?.(reason), redact);
    transport.onFlood = (reason) => {
      this.log.warn({ session: this.id, pid: transport.pid ?? undefined, reason }, 'upstream stdout is not JSON-RPC: stopping the process');
      childOf(transport)?.kill('SIGTERM');
      if (!conn.ready) stopStart(new UpstreamProtocolError('stdout stream', reason));
      else if (this.conn === conn) this.fail(reason, 'protocol');
    };
    return transport.strays;
  }

  /** `initialize` (the SDK starts the transport first), then the start barrier, within `startMs`. */
  private async handshake(conn: Connection, startMs: number): Promise<void> {
    const { client, transport } = conn;
    // The start's own timer (in connect) bounds the handshake; the SDK's is a backstop behind it.
    await client.connect(transport, { timeout: startMs * 2 });
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
      this.received++;
      this.lastReceivedAt = performance.now();
      const r = message as { id?: string | number; method?: string };
      if (r.method === undefined && r.id !== undefined) {
        // Every request sent here has a number id; a server may send it back as a string.
        const id = typeof r.id === 'number' ? r.id : Number(r.id);
        const token = conn.tokenOf.get(id);
        if (token !== undefined) {
          conn.tokenOf.delete(id);
          if (conn.idOf.get(token) === id) conn.idOf.delete(token);
          this.answered.get(token)?.();
        }
        // A response to a request of this session's own is settled here; the SDK's requests (ping,
        // initialize) and late answers of given-up requests go on to the SDK.
        const pending = conn.pending.get(id);
        if (pending) return pending.answer(message as { result?: unknown; error?: { code: number; message: string; data?: unknown } });
      }
      deliver?.(message, extra);
    };
    await this.barrier(conn);
  }

  /**
   * The start barrier: pings after `initialized`, so that what the server asks in reaction to it
   * (answered from config: the connection is not ready) is over before any call can be charged with
   * it; see {@link quiesce}.
   */
  private async barrier(conn: Connection): Promise<void> {
    const pingMs = Math.min(BARRIER_PING_MS, this.opts.cfg.timeouts.connectMs);
    await quiesce(conn, this.closed, 0, pingMs, performance.now() + 2 * pingMs);
  }

  private toolTaskSupport: Promise<Map<string, string>> | undefined;

  /** The capabilities the upstream declared in its `initialize` result. */
  get serverCapabilities(): ServerCapabilities {
    return this.conn.client.getServerCapabilities() ?? {};
  }

  /**
   * 'forbidden' when the upstream does not support task-augmented tools/call (2025-11-25
   * `capabilities.tasks.requests.tools.call`), so no tool of it runs as an upstream task; undefined
   * when {@link taskSupportOf} must ask the upstream's tool list.
   */
  knownTaskSupport(): 'forbidden' | undefined {
    const caps = this.serverCapabilities as { tasks?: { requests?: { tools?: { call?: unknown } } } };
    return caps.tasks?.requests?.tools?.call ? undefined : 'forbidden';
  }

  /**
   * The 2025-11-25 `execution.taskSupport` the upstream declares for tool `name`
   * ('forbidden' when the upstream does not support task-augmented tools/call). Lists the tools
   * once per session.
   */
  async taskSupportOf(name: string, timeoutMs: number): Promise<'forbidden' | 'optional' | 'required'> {
    if (this.knownTaskSupport()) return 'forbidden';
    this.toolTaskSupport ??= listTaskSupport((r, schema, o) => this.request(r, schema, o), timeoutMs);
    try {
      const v = (await this.toolTaskSupport).get(name);
      return v === 'required' || v === 'optional' ? v : 'forbidden';
    } catch {
      this.toolTaskSupport = undefined;
      return 'forbidden';
    }
  }

  /**
   * Sends one request upstream. When a Streamable HTTP upstream answers 404 for the session (it
   * restarted or reaped the session, so the request was not processed), a new upstream session is
   * initialized in place and the request is sent once more. Every request the gateway sends on a
   * session goes through here (the calls of clients and the gateway's own: tool listings,
   * `resources/subscribe`, upstream task polling and `tasks/cancel`).
   * @throws McpError with the upstream's own error (any code, -32000 and -32001 included);
   *   UpstreamRequestLost when the connection closed, `options.timeout` (ms) passed or
   *   `options.signal` aborted before it answered; the transport's error when the upstream cannot
   *   be reached.
   */
  async request<S extends z.ZodType>(
    request: { method: string; params?: Record<string, unknown> },
    schema: S,
    options?: SessionRequestOptions,
  ): Promise<z.infer<S>> {
    const conn = this.conn;
    try {
      return await this.send(conn, request, schema, options);
    } catch (e) {
      if (!isSessionNotFound(e) || this.deadReason || options?.signal?.aborted) throw e;
      const fresh = await this.replace(conn);
      return this.send(fresh, request, schema, options);
    }
  }

  /**
   * One request on `conn`: sent on the transport under a JSON-RPC id from the SDK client's own
   * sequence, its response taken from the transport before the SDK sees it (the SDK's request path
   * validates every message and result with zod again and keeps a timer and abort listeners per
   * request; the gateway needs none of that). Timed by the session (`options.timeout`, ms; the SDK's
   * 60 s when absent), so that a failure of the gateway's side is told from an error the upstream
   * answered with the same code. Giving up (timer, `options.signal`) sends
   * `notifications/cancelled` for the request (MCP 2025-11-25 utilities §Cancellation).
   * @returns the result, checked with `schema` ({@link LooseResult}: any JSON object, as sent).
   * @throws UpstreamRequestLost when the connection closed, the timer fired or `options.signal`
   *   aborted before the upstream answered; McpError with the upstream's own error; the schema's
   *   ZodError for a result that does not match; the transport's error when the request could not
   *   be sent.
   */
  private send<S extends z.ZodType>(
    conn: Connection,
    request: { method: string; params?: Record<string, unknown> },
    schema: S,
    options?: SessionRequestOptions,
  ): Promise<z.infer<S>> {
    const { method } = request;
    const outer = options?.signal;
    if (outer?.aborted) return Promise.reject(new UpstreamRequestLost('aborted', `${method} was cancelled: ${String(outer.reason)}`));
    if (conn.closed) return Promise.reject(this.lostText(method));
    const params = options?.task ? { ...request.params, task: options.task } : request.params;
    return new Promise<z.infer<S>>((resolve, reject) => {
      const sent = new SentRequest(this, conn, nextRequestId(conn.client), method, schema, resolve, reject);
      sent.start(params, options?.timeout ?? DEFAULT_REQUEST_TIMEOUT_MSEC, outer);
    });
  }

  /** The error of a request whose connection closed before the upstream answered it. */
  lostText(method: string): UpstreamRequestLost {
    return new UpstreamRequestLost(
      'closed',
      `the connection closed before the upstream answered ${method} (${this.deadReason ?? 'connection closed'})`,
    );
  }

  /** Runs `tools/call` as a task upstream and follows it; see {@link callToolAsTask} in src/upstream/session-tasks.ts. */
  callToolAsTask(
    params: Record<string, unknown>,
    ttlMs: number,
    options: SessionRequestOptions,
  ): AsyncGenerator<ResponseMessage<CallToolResult>> {
    return callToolAsTask((r, schema, o) => this.request(r, schema, o), params, ttlMs, options);
  }

  /**
   * Gives up the request sent with `progressToken` ({@link request}, still unanswered):
   * `notifications/cancelled` goes upstream with `reason`, and the request fails with
   * UpstreamRequestLost `aborted`. Nothing happens when it was answered already.
   */
  cancel(progressToken: string, reason: string): void {
    const conn = this.conn;
    const id = conn.idOf.get(progressToken);
    if (id !== undefined) conn.pending.get(Number(id))?.cancel(reason);
  }

  /** Initializes a new upstream session in place of `stale` (once, however many requests found it stale). */
  private replace(stale: Connection): Promise<Connection> {
    if (this.conn !== stale) return Promise.resolve(this.conn);
    this.replacing ??= (async () => {
      this.log.info({ session: this.id }, 'upstream no longer knows the session (404): initializing a new one');
      try {
        const fresh = await this.connect();
        this.conn = fresh;
        return fresh;
      } catch (e) {
        this.fail(`the upstream forgot the session and a new one could not be opened: ${(e as Error).message}`);
        throw e;
      } finally {
        this.replacing = undefined;
        // The upstream has forgotten it: no DELETE, just drop the connection.
        void stale.client.close().catch(() => {});
      }
    })();
    return this.replacing;
  }

  private readonly changeListeners = new Set<(n: UpstreamNotification) => void>();

  /**
   * Registers `listener` for the upstream's change notifications on this session
   * (`notifications/tools/list_changed`, `notifications/prompts/list_changed`,
   * `notifications/resources/list_changed`, `notifications/resources/updated`), whoever holds the
   * lease, across a re-initialized upstream session too.
   * @returns a function that removes the listener.
   */
  onNotification(listener: (n: UpstreamNotification) => void): () => void {
    this.changeListeners.add(listener);
    return () => void this.changeListeners.delete(listener);
  }

  /**
   * Makes the server ask for roots again before a call's request goes upstream: sends
   * `notifications/roots/list_changed`, then waits as the start barrier does ({@link quiesce}) until
   * what the server asked meanwhile has been answered (its `roots/list` goes to the call attached
   * alone on the session, so its client is asked in an `input_required` round, however long that
   * takes) and the server has been quiet since.
   * @throws UpstreamRequestLost when the connection closed meanwhile.
   */
  async resyncRoots(): Promise<void> {
    const conn = this.conn;
    if (conn.closed) throw this.lostText('notifications/roots/list_changed');
    const before = conn.asked;
    await conn.client.notification({ method: 'notifications/roots/list_changed' });
    await quiesce(conn, this.closed, before, Infinity);
    if (conn.closed) throw this.lostText('notifications/roots/list_changed');
  }

  /** Registers a callback for when the connection dies (not when the gateway closes it). */
  onDeath(cb: (reason: string) => void): void {
    this.onDead.push(cb);
  }

  /** The last lines the stdio child wrote to stderr (empty for HTTP upstreams). */
  stderrTail(): string[] {
    return this.conn?.stderr?.get() ?? [];
  }

  private markDead(reason: string): void {
    if (this.deadReason) return;
    this.deadReason = reason;
    this.resolveClosed();
    if (!this.closing) {
      if (this.opts.stopping?.()) {
        this.deadKind ??= 'stopping';
        this.log.info({ session: this.id, reason }, 'upstream session ended while the gateway stops');
      } else this.log.warn({ session: this.id, reason, stderr: this.stderrTail().slice(-5) }, 'upstream session died');
      for (const cb of this.onDead) cb(reason);
    }
  }

  /**
   * Marks the session dead for `reason` and closes it; calls in flight fail with ConnectionClosed
   * (reported to their callers as `protocol` when `kind` says the upstream broke the protocol).
   */
  fail(reason: string, kind?: 'protocol'): void {
    if (this.deadReason) return;
    this.deadKind = kind;
    this.markDead(reason);
    void this.conn?.client.close().catch(() => {});
  }

  /** Closes the connection (ends a stdio child). Never throws. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const conn = this.conn;
    try {
      if (conn?.sending.size) await Promise.race([Promise.allSettled([...conn.sending]), new Promise((r) => setTimeout(r, 1000))]);
      if (
        conn &&
        (conn.transport instanceof StreamableHTTPClientTransport || conn.transport instanceof HttpClientTransport) &&
        conn.transport.sessionId &&
        !this.deadReason
      ) {
        await Promise.race([conn.transport.terminateSession().catch(() => {}), new Promise((r) => setTimeout(r, 1000))]);
      }
      if (conn?.transport instanceof StdioClientTransport) await endStdioChild(conn.transport, () => conn.client.close());
      else await conn?.client.close();
    } catch {
      /* already closed */
    }
    this.markDead('closed by the gateway');
  }
}
