/**
 * The client side of the Streamable HTTP transport (MCP 2025-03-26 … 2025-11-25
 * basic/transports §Streamable HTTP) for legacy upstream sessions, on undici's `request` and
 * `eventsource-parser`, behind the v1 SDK's `Transport` interface so the SDK `Client` runs on it.
 *
 * Why not the SDK's own transport: it hides which stream a message came on, and a gateway that
 * lets several calls share one upstream session must know it (a server-initiated request sent on
 * the POST stream of a call belongs to that call; one on the standalone GET stream belongs to none
 * it can name). Each message from a POST's SSE stream reaches `onmessage` with
 * `extra.requestInfo.headers[RELATED_TOKEN_HEADER]` set to the `progressToken` of that POST's
 * request. It also skips web streams and per-request abort listeners on a long-lived signal, the
 * main costs of that transport on the hot path: each HTTP exchange is one undici `dispatch` with a
 * handler of its own (no body stream, no AbortSignal), the SSE body fed to the parser as it comes.
 *
 * Behaviour: `Mcp-Session-Id` from the `initialize` answer is sent on every later request, and
 * `MCP-Protocol-Version` once set; after `notifications/initialized` a standalone GET stream is
 * opened (405: the server has none); a stream that ends before the answer of its request, after an
 * event id, is resumed with `Last-Event-ID` (SEP-1699 polling), as is a GET stream that drops, a few
 * times. Errors use the SDK's `StreamableHTTPError` with the HTTP status (404: the session is
 * unknown upstream). What ends one request's answer but not the session (its POST stream broke or
 * ended unanswered and cannot be resumed, or carried a message that is not JSON-RPC) goes to
 * `onrequesterror` for that request alone; a 2xx answer to a request that is neither SSE nor a
 * JSON body holding its response fails `send` with an `UpstreamProtocolError`.
 *
 * One HTTP exchange (its undici handler, the answer's head, the SSE reader) is in
 * src/upstream/http-exchange.ts.
 *
 * With tracing on, each POST (and the resumption of its stream) carries the W3C trace context of
 * the span active when it is sent (`traceparent`, `tracestate`; see src/observability/tracing.ts).
 */
import type { Dispatcher } from 'undici';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import { JSONRPCMessageSchema, type JSONRPCMessage, type MessageExtraInfo } from '@modelcontextprotocol/sdk/types.js';
import { UpstreamProtocolError, UpstreamRequestLost, firstIssue } from '../protocol/errors.js';
import { sameId } from '../protocol/wire.js';
import { addTraceHeaders, tracingActive } from '../observability/tracing.js';
import {
  HttpExchange,
  MAX_MESSAGE_BYTES,
  SseReader,
  TOO_LARGE,
  type ExchangeHost,
  type ResponseHead,
  type StreamOwner,
} from './http-exchange.js';

/** Header name, in `extra.requestInfo.headers`, carrying the progress token of the POST a message came with. */
export const RELATED_TOKEN_HEADER = 'x-mrtr-related-progress-token';

/** Most resumptions of one stream, and the delay before the first, in ms (the server's `retry` wins). */
const MAX_RETRIES = 2;
const RETRY_DELAY_MS = 100;
/** The shortest delay before a resumption, in ms, whatever `retry` the server gives: a server polled with `retry: 0` cannot spin the gateway. */
const MIN_RETRY_DELAY_MS = 50;

type Msg = {
  id?: string | number;
  method?: string;
  params?: { _meta?: { progressToken?: string | number } };
  result?: unknown;
  error?: unknown;
};

/** The options of {@link HttpClientTransport}. */
export interface HttpClientTransportOptions {
  /** The keep-alive pool to use (its limits come from the upstream's config). */
  dispatcher: Dispatcher;
  /** Close `dispatcher` when the transport closes (a pool of this session's own). */
  ownsDispatcher?: boolean;
  /** Headers sent on every request (configured headers, a forwarded Authorization). */
  headers: Record<string, string>;
}

/**
 * True when `m` has the shape of a JSON-RPC 2.0 request, notification or response (an error
 * response's `error` with an integer `code` and a string `message`).
 */
function isJsonRpc(m: unknown): m is JSONRPCMessage {
  if (!m || typeof m !== 'object' || Array.isArray(m)) return false;
  const r = m as Record<string, unknown>;
  if (r.jsonrpc !== '2.0') return false;
  if (typeof r.method === 'string') return true;
  if (typeof r.id !== 'string' && typeof r.id !== 'number') return false;
  if ('result' in r) return true;
  const e = r.error as { code?: unknown; message?: unknown } | null | undefined;
  return typeof e === 'object' && e !== null && Number.isInteger(e.code) && typeof e.message === 'string';
}

/** The first problem of `m` as a JSON-RPC message, as the SDK's message schema sees it. */
function jsonRpcProblem(m: unknown): string {
  const parsed = JSONRPCMessageSchema.safeParse(m);
  return parsed.success ? 'not a JSON-RPC 2.0 message' : firstIssue(parsed.error.issues);
}

/**
 * The JSON-RPC messages of a JSON response body (one message or a batch).
 * @throws UpstreamProtocolError when the body is not JSON, or holds something that is not a
 *   JSON-RPC message (the first problem as the SDK's message schema sees it).
 */
export function jsonRpcMessages(text: string): JSONRPCMessage[] {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (e) {
    throw new UpstreamProtocolError('JSON-RPC message', `not JSON (${(e as Error).message})`);
  }
  const messages = Array.isArray(data) ? data : [data];
  for (const m of messages) if (!isJsonRpc(m)) throw new UpstreamProtocolError('JSON-RPC message', jsonRpcProblem(m));
  return messages as JSONRPCMessage[];
}

/** A legacy Streamable HTTP client transport; see the module comment. */
export class HttpClientTransport implements Transport, ExchangeHost {
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;
  onerror?: (error: Error) => void;
  onclose?: () => void;
  /**
   * Called when the request `id` sent on this transport can get no answer while the session goes
   * on: the SSE stream of its POST broke or ended without the answer (and cannot be resumed), or
   * carried something that is not JSON-RPC. `error` is an `UpstreamRequestLost` (`closed`, with the
   * stream's failure as its `reason`) or an `UpstreamProtocolError`. Returns true when the request
   * was failed with it; false (or no handler) reports `error` on {@link onerror} instead.
   */
  onrequesterror?: (id: string | number, error: Error) => boolean;
  sessionId?: string;
  private protocolVersion: string | undefined;
  private closed = false;
  private readonly inflight = new Set<HttpExchange>();
  /**
   * The requests awaiting their answer's headers, or whose POST stream is open or being resumed, by
   * id: a cancelled one's stream is dropped, or not resumed.
   */
  private readonly streams = new Map<string | number, StreamOwner>();
  private readonly origin: string;
  private readonly path: string;
  private retryMs = RETRY_DELAY_MS;

  constructor(
    url: URL,
    private readonly opts: HttpClientTransportOptions,
  ) {
    this.origin = url.origin;
    this.path = `${url.pathname}${url.search}`;
  }

  async start(): Promise<void> {}

  setProtocolVersion(version: string): void {
    this.protocolVersion = version;
    this.postHeaders = undefined;
  }

  /** The headers of a POST, made once per session id and protocol version (undici does not change them). */
  private postHeaders: Record<string, string> | undefined;
  private postHeadersFor: string | undefined;

  private headers(accept: string): Record<string, string> {
    const h: Record<string, string> = { ...this.opts.headers, accept };
    if (this.sessionId) h['mcp-session-id'] = this.sessionId;
    if (this.protocolVersion) h['mcp-protocol-version'] = this.protocolVersion;
    return h;
  }

  /**
   * POSTs one message. Resolves once the server accepted it (a JSON answer is dispatched first; an
   * SSE answer is read on in the background).
   * @throws StreamableHTTPError with the HTTP status for a refusal; UpstreamProtocolError when a
   *   request is answered with a JSON body that is not JSON-RPC; the network error otherwise.
   */
  async send(message: JSONRPCMessage, _options?: TransportSendOptions): Promise<void> {
    if (this.closed) throw new Error('Not connected');
    const m = message as Msg;
    if (m.method === 'notifications/cancelled') {
      // The request is given up: its stream goes too, so nothing more of it can arrive.
      const id = (m.params as { requestId?: string | number } | undefined)?.requestId;
      if (id !== undefined) {
        queueMicrotask(() => {
          const owner = this.streams.get(id);
          if (!owner) return;
          owner.givenUp = true;
          owner.current?.abort();
        });
      }
    }
    const owner: StreamOwner =
      m.method !== undefined && m.id !== undefined ? { id: m.id, method: m.method, token: m.params?._meta?.progressToken } : {};
    // Known from now on, so that a cancellation before the answer's headers stops its stream from being resumed.
    if (owner.id !== undefined) this.streams.set(owner.id, owner);
    const ex = new HttpExchange(this, owner, false, 0);
    this.inflight.add(ex);
    if (this.postHeadersFor !== this.sessionId) this.postHeaders = undefined;
    this.postHeadersFor = this.sessionId;
    const common = (this.postHeaders ??= { ...this.headers('application/json, text/event-stream'), 'content-type': 'application/json' });
    const headers = tracingActive() ? addTraceHeaders({ ...common }) : common;
    let head: ResponseHead;
    try {
      head = await ex.start('POST', headers, JSON.stringify(message));
    } catch (e) {
      this.streamOver(owner);
      throw e;
    }
    if (head.sessionId && !this.sessionId) this.sessionId = head.sessionId;
    // Only an SSE answer is a stream that may still need its request's owner.
    if (!head.sse) this.streamOver(owner);
    if (head.status === 202) {
      if (m.method === 'notifications/initialized') void this.openStandalone(0);
      return;
    }
    if (head.status >= 300) {
      const err = new StreamableHTTPError(head.status, `Error POSTing to endpoint: ${(await ex.text()) || head.status}`);
      this.onerror?.(err);
      throw err;
    }
    if (!head.sse) {
      let messages: JSONRPCMessage[] = [];
      try {
        const text = await ex.text();
        if (ex.tooLarge)
          throw new UpstreamProtocolError(owner.method ? `answer to ${owner.method}` : 'JSON-RPC message', `the body is ${TOO_LARGE}`);
        if (ex.broken) {
          if (owner.id === undefined) throw new Error(`the answer to a message broke off: ${ex.broken.message}`);
          throw new UpstreamRequestLost(
            'closed',
            `${ex.broken.message} (the answer to ${owner.method})`,
            `the body of the answer to ${owner.method} broke off: ${ex.broken.message}`,
          );
        }
        if (head.json && text) messages = jsonRpcMessages(text);
        // The answer to a request is its response, in a JSON body or on an SSE stream: nothing else will come.
        if (owner.id !== undefined && !messages.some((msg) => (msg as Msg).method === undefined && sameId((msg as Msg).id, owner.id!))) {
          throw new UpstreamProtocolError(`answer to ${owner.method}`, nonAnswer(head, text, messages.length));
        }
      } catch (e) {
        // The answer to a request broke off or breaks the protocol: the request fails with it (no answer will come).
        if ((e instanceof UpstreamProtocolError || e instanceof UpstreamRequestLost) && owner.id !== undefined) throw e;
        this.onerror?.(e as Error);
      }
      for (const msg of messages) this.deliver(msg, owner);
    }
  }

  /**
   * The request `owner` sent can get no answer (see {@link onrequesterror}); its stream, if still
   * open, is dropped.
   */
  private requestFailed(ex: HttpExchange, error: Error): void {
    // Possibly inside the reading of its body: the rest of the chunk is skipped, and the stream ends after it.
    ex.abortLater();
    this.streamOver(ex.owner);
    const { id } = ex.owner;
    if (id !== undefined && this.onrequesterror?.(id, error)) return;
    this.onerror?.(error);
  }

  /** An exchange's answer is an SSE stream: a cancellation of its request (registered since `send`) drops it. */
  streaming(ex: HttpExchange): void {
    if (ex.owner.id !== undefined) ex.owner.current = ex;
  }

  /** The stream of the request `owner` is over for good (answered, failed, given up or not resumed). */
  private streamOver(owner: StreamOwner): void {
    owner.current = undefined;
    if (owner.id !== undefined && this.streams.get(owner.id) === owner) this.streams.delete(owner.id);
  }

  /** An HTTP exchange ended (answered, failed or aborted): it no longer needs aborting on close. */
  forget(ex: HttpExchange): void {
    this.inflight.delete(ex);
  }

  /** Reports a transport failure (the SDK's `onerror`). */
  fail(e: Error): void {
    this.onerror?.(e);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** The dispatcher, origin and path every exchange of this transport goes to. */
  get target(): { dispatcher: Dispatcher; origin: string; path: string } {
    return { dispatcher: this.opts.dispatcher, origin: this.origin, path: this.path };
  }

  private deliver(message: JSONRPCMessage, owner: StreamOwner): void {
    // RELATED_TOKEN_HEADER written out (the type check keeps them equal): a literal key keeps the object on V8's fast path.
    const extra =
      owner.token !== undefined
        ? {
            requestInfo: {
              headers: { 'x-mrtr-related-progress-token': String(owner.token) } satisfies Record<typeof RELATED_TOKEN_HEADER, string>,
            },
          }
        : undefined;
    this.onmessage?.(message, extra as MessageExtraInfo | undefined);
  }

  /** SSE readers of streams that ended, kept for the next (a reader is made once, not per response). */
  private readonly spareReaders: SseReader[] = [];

  /**
   * A reader for the SSE body `ex` is reading: it dispatches the body's `message` events as they
   * arrive. A POST stream that ends before its request's answer, after an event id, is resumed with
   * a GET carrying `Last-Event-ID`; the GET stream is reopened when it drops.
   */
  sseParser(ex: HttpExchange): SseReader {
    const reader = this.spareReaders.pop() ?? new SseReader(this);
    reader.ex = ex;
    return reader;
  }

  /**
   * The `message` event `data` of the SSE body `ex` read. One that is not a JSON-RPC message fails
   * the request of a POST stream (its answer cannot be told from it), and is reported and dropped on
   * the GET stream.
   */
  sseMessage(ex: HttpExchange, data: string): void {
    const { owner } = ex;
    let msg: Msg;
    let problem: string | undefined;
    try {
      msg = JSON.parse(data) as Msg;
      if (!isJsonRpc(msg)) problem = jsonRpcProblem(msg);
    } catch (e) {
      problem = `not JSON (${(e as Error).message})`;
    }
    if (problem !== undefined) {
      const error = new UpstreamProtocolError(
        owner.method ? `message on the SSE stream of ${owner.method}` : 'message on the SSE stream',
        problem,
      );
      if (owner.id !== undefined) this.requestFailed(ex, error);
      else this.onerror?.(error);
      return;
    }
    if (owner.id !== undefined && msg!.method === undefined && sameId(msg!.id, owner.id)) ex.answered = true;
    this.deliver(msg! as JSONRPCMessage, owner);
  }

  /** The SSE body `ex` is reading holds a message over {@link MAX_MESSAGE_BYTES} (or that many bytes without an event): it is dropped. */
  sseTooLarge(ex: HttpExchange): void {
    const { owner } = ex;
    if (owner.id !== undefined)
      return this.requestFailed(ex, new UpstreamProtocolError(`message on the SSE stream of ${owner.method}`, TOO_LARGE));
    ex.abortLater();
    // The GET stream: the session cannot go on without what it carries (a notification's stream carries nothing awaited).
    if (ex.standalone) this.onerror?.(new Error(`SSE error: a message on the GET stream is ${TOO_LARGE}`));
  }

  /** The SSE body `ex` read ended (`failure`: how it broke); its reader is free again. */
  sseEnded(reader: SseReader, ex: HttpExchange, failure: Error | undefined): void {
    if (this.spareReaders.length < MAX_SPARE_READERS) this.spareReaders.push(reader);
    void this.streamEnded(ex, failure);
  }

  /** The `retry` an SSE stream gave, in ms: the delay before its resumption. */
  set retryDelay(ms: number) {
    this.retryMs = Math.max(ms, MIN_RETRY_DELAY_MS);
  }

  /** After an SSE body ended (`failure`: how it broke): resumes it when it can be, else reports a broken one. */
  private async streamEnded(ex: HttpExchange, failure: Error | undefined): Promise<void> {
    const { owner } = ex;
    if (this.closed) return;
    // Answered, dropped, given up, or the stream of a notification or response (nothing waits for it).
    if (ex.aborted || ex.answered || owner.givenUp || (!ex.standalone && owner.id === undefined)) return this.streamOver(owner);
    const resumable = ex.standalone || ex.lastEventId !== undefined;
    if (!resumable) {
      // A POST stream without an event id: its request's answer can no longer come.
      if (failure !== undefined) this.streamLost(ex, `SSE stream disconnected: ${failure.message}`);
      else
        this.requestFailed(
          ex,
          new UpstreamProtocolError(
            `SSE stream of ${ex.owner.method}`,
            'it ended without the answer, and without an event id to resume it from',
          ),
        );
      return;
    }
    // A stream that carried something counts as a success: the next drop starts counting afresh.
    const attempt = ex.heard ? 0 : ex.attempt;
    if (attempt >= MAX_RETRIES) return this.streamLost(ex, `Maximum reconnection attempts (${MAX_RETRIES}) exceeded.`);
    await new Promise((r) => setTimeout(r, this.retryMs * 2 ** attempt));
    if (this.closed) return;
    if (owner.givenUp) return this.streamOver(owner);
    await this.openStream(owner, ex.standalone, ex.lastEventId, attempt + 1);
  }

  /** Opens the standalone GET stream (after `initialized`). A 405 means the server has none. */
  private openStandalone(attempt: number): Promise<void> {
    return this.openStream({}, true, undefined, attempt);
  }

  private async openStream(owner: StreamOwner, standalone: boolean, lastEventId: string | undefined, attempt: number): Promise<void> {
    const ex = new HttpExchange(this, owner, standalone, attempt);
    // Resumed from there again if this stream also ends before the answer without an event id of its own.
    ex.lastEventId = lastEventId;
    if (!standalone) owner.current = ex;
    this.inflight.add(ex);
    const headers = this.headers('text/event-stream');
    if (lastEventId) headers['last-event-id'] = lastEventId;
    // A POST stream resumed belongs to its request's span; the standalone stream to none.
    if (!standalone) addTraceHeaders(headers);
    let head: ResponseHead;
    try {
      head = await ex.start('GET', headers);
    } catch (e) {
      if (this.closed) return;
      if (ex.aborted) return this.streamOver(owner);
      return this.streamLost(ex, `Failed to reconnect SSE stream: ${(e as Error).message}`);
    }
    if (head.status === 405 && standalone && attempt === 0) return;
    if (owner.givenUp) {
      ex.abort();
      return this.streamOver(owner);
    }
    if (head.status === 200 && !head.sse) ex.abort();
    if ((head.status !== 200 || !head.sse) && !this.closed)
      this.streamLost(ex, `Failed to reconnect SSE stream: Failed to open SSE stream: ${head.status}`, head.status);
  }

  /**
   * The stream `ex` reads cannot go on (`message`, with the HTTP `status` that refused it): the GET
   * stream's loss goes to `onerror` (the session cannot go on without it), a POST stream's fails its
   * request alone.
   */
  private streamLost(ex: HttpExchange, message: string, status?: number): void {
    if (!ex.standalone) return this.requestFailed(ex, lostStream(ex.owner, message));
    this.onerror?.(status === undefined ? new Error(message) : new StreamableHTTPError(status, message));
  }

  /** Sends the session's DELETE (a 405 or a failure is fine). */
  async terminateSession(): Promise<void> {
    if (!this.sessionId) return;
    const ex = new HttpExchange(this, {}, false, 0);
    await ex.start('DELETE', this.headers('application/json'));
    await ex.text();
    this.sessionId = undefined;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const ex of [...this.inflight]) ex.abort();
    this.inflight.clear();
    this.streams.clear();
    if (this.opts.ownsDispatcher) void this.opts.dispatcher.close().catch(() => {});
    this.onclose?.();
  }
}

/** The failure of the request `owner` whose POST stream broke (`message`) while its session goes on. */
function lostStream(owner: StreamOwner, message: string): UpstreamRequestLost {
  return new UpstreamRequestLost(
    'closed',
    `${message} (the SSE stream of ${owner.method})`,
    `the SSE stream of ${owner.method} broke before its answer: ${message}`,
  );
}

/**
 * What is wrong with a 2xx answer to a request that was neither an SSE stream nor a JSON body
 * holding its response (`head`, its `text`, and `count` JSON-RPC messages found in it).
 */
function nonAnswer(head: ResponseHead, text: string, count: number): string {
  if (!head.json) return `HTTP ${head.status} with Content-Type '${head.type || '(none)'}', neither application/json nor text/event-stream`;
  if (!text) return `HTTP ${head.status} with an empty application/json body`;
  return `the JSON body holds ${count} JSON-RPC message${count === 1 ? '' : 's'}, none the response to the request`;
}

/** Most SSE readers a transport keeps for reuse (one per stream open at once is what it needs). */
const MAX_SPARE_READERS = 4;
