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
 * main costs of that transport on the hot path.
 *
 * Behaviour: `Mcp-Session-Id` from the `initialize` answer is sent on every later request, and
 * `MCP-Protocol-Version` once set; after `notifications/initialized` a standalone GET stream is
 * opened (405: the server has none); a stream that ends before the answer of its request, after an
 * event id, is resumed with `Last-Event-ID` (SEP-1699 polling), as is a GET stream that drops, a few
 * times. Errors use the SDK's `StreamableHTTPError` with the HTTP status (404: the session is
 * unknown upstream).
 *
 * With tracing on, each POST (and the resumption of its stream) carries the W3C trace context of
 * the span active when it is sent (`traceparent`, `tracestate`; see src/observability/tracing.ts).
 */
import type { Readable } from 'node:stream';
import { createParser } from 'eventsource-parser';
import { request, type Dispatcher } from 'undici';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport, TransportSendOptions } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage, MessageExtraInfo } from '@modelcontextprotocol/sdk/types.js';
import { addTraceHeaders } from '../observability/tracing.js';

/** Header name, in `extra.requestInfo.headers`, carrying the progress token of the POST a message came with. */
export const RELATED_TOKEN_HEADER = 'x-mrtr-related-progress-token';

/** Most resumptions of one stream, and the delay before the first, in ms (the server's `retry` wins). */
const MAX_RETRIES = 2;
const RETRY_DELAY_MS = 100;

type Msg = { id?: string | number; method?: string; params?: { _meta?: { progressToken?: string | number } }; result?: unknown; error?: unknown };

/** What a stream is for: the request (id, progress token) of a POST, or nothing (the GET stream). */
interface StreamOwner {
  id?: string | number;
  token?: string | number;
}

/** The options of {@link HttpClientTransport}. */
export interface HttpClientTransportOptions {
  /** The keep-alive pool to use (its limits come from the upstream's config). */
  dispatcher: Dispatcher;
  /** Close `dispatcher` when the transport closes (a pool of this session's own). */
  ownsDispatcher?: boolean;
  /** Headers sent on every request (configured headers, a forwarded Authorization). */
  headers: Record<string, string>;
}

/** A legacy Streamable HTTP client transport; see the module comment. */
export class HttpClientTransport implements Transport {
  onmessage?: (message: JSONRPCMessage, extra?: MessageExtraInfo) => void;
  onerror?: (error: Error) => void;
  onclose?: () => void;
  sessionId?: string;
  private protocolVersion: string | undefined;
  private closed = false;
  private readonly inflight = new Set<AbortController>();
  /** POST streams by the id of their request, so a cancelled request's stream can be dropped. */
  private readonly streams = new Map<string | number, AbortController>();
  private retryMs = RETRY_DELAY_MS;

  constructor(
    private readonly url: URL,
    private readonly opts: HttpClientTransportOptions,
  ) {}

  async start(): Promise<void> {}

  setProtocolVersion(version: string): void {
    this.protocolVersion = version;
  }

  private headers(accept: string): Record<string, string> {
    const h: Record<string, string> = { ...this.opts.headers, accept };
    if (this.sessionId) h['mcp-session-id'] = this.sessionId;
    if (this.protocolVersion) h['mcp-protocol-version'] = this.protocolVersion;
    return h;
  }

  /**
   * POSTs one message. Resolves once the server accepted it (a JSON answer is dispatched first; an
   * SSE answer is read on in the background).
   * @throws StreamableHTTPError with the HTTP status for a refusal; the network error otherwise.
   */
  async send(message: JSONRPCMessage, _options?: TransportSendOptions): Promise<void> {
    if (this.closed) throw new Error('Not connected');
    const m = message as Msg;
    if (m.method === 'notifications/cancelled') {
      // The request is given up: its stream goes too, so nothing more of it can arrive.
      const id = (m.params as { requestId?: string | number } | undefined)?.requestId;
      if (id !== undefined) queueMicrotask(() => this.streams.get(id)?.abort());
    }
    const ac = new AbortController();
    this.inflight.add(ac);
    let res: Dispatcher.ResponseData;
    try {
      res = await request(this.url, {
        method: 'POST',
        headers: addTraceHeaders({ ...this.headers('application/json, text/event-stream'), 'content-type': 'application/json' }),
        body: JSON.stringify(message),
        dispatcher: this.opts.dispatcher,
        signal: ac.signal,
      });
    } catch (e) {
      this.inflight.delete(ac);
      this.onerror?.(e as Error);
      throw e;
    }
    const sid = res.headers['mcp-session-id'];
    if (typeof sid === 'string' && !this.sessionId) this.sessionId = sid;
    if (res.statusCode === 202) {
      this.inflight.delete(ac);
      await res.body.dump();
      if (m.method === 'notifications/initialized') void this.openStandalone(0);
      return;
    }
    if (res.statusCode >= 300) {
      this.inflight.delete(ac);
      const text = await res.body.text().catch(() => '');
      const err = new StreamableHTTPError(res.statusCode, `Error POSTing to endpoint: ${text || res.statusCode}`);
      this.onerror?.(err);
      throw err;
    }
    const owner: StreamOwner = m.method !== undefined && m.id !== undefined ? { id: m.id, token: m.params?._meta?.progressToken } : {};
    const type = String(res.headers['content-type'] ?? '');
    if (type.includes('text/event-stream')) {
      if (owner.id !== undefined) this.streams.set(owner.id, ac);
      void this.readStream(res.body, owner, ac, false);
      return;
    }
    try {
      const text = await res.body.text();
      if (type.includes('application/json') && text) {
        const data = JSON.parse(text) as JSONRPCMessage | JSONRPCMessage[];
        for (const msg of Array.isArray(data) ? data : [data]) this.deliver(msg, owner);
      }
    } catch (e) {
      this.onerror?.(e as Error);
    } finally {
      this.inflight.delete(ac);
    }
  }

  private deliver(message: JSONRPCMessage, owner: StreamOwner): void {
    const extra = owner.token !== undefined ? { requestInfo: { headers: { [RELATED_TOKEN_HEADER]: String(owner.token) } } } : undefined;
    this.onmessage?.(message, extra as MessageExtraInfo | undefined);
  }

  /**
   * Reads an SSE body, dispatching each `message` event. A POST stream that ends before its
   * request's answer, after an event id, is resumed with a GET carrying `Last-Event-ID`; the GET
   * stream is reopened when it drops.
   */
  private async readStream(body: Readable, owner: StreamOwner, ac: AbortController, standalone: boolean, attempt = 0): Promise<void> {
    let lastEventId: string | undefined;
    let answered = false;
    let heard = false;
    const parser = createParser({
      onEvent: (ev) => {
        heard = true;
        if (ev.id) lastEventId = ev.id;
        if (!ev.data || (ev.event && ev.event !== 'message')) return;
        let msg: Msg;
        try {
          msg = JSON.parse(ev.data) as Msg;
        } catch (e) {
          this.onerror?.(e as Error);
          return;
        }
        if (owner.id !== undefined && msg.method === undefined && msg.id === owner.id) answered = true;
        this.deliver(msg as JSONRPCMessage, owner);
      },
      onRetry: (ms) => (this.retryMs = ms),
    });
    // Events rather than an async iterator: a parked call's stream stays open for minutes, and the
    // iterator's generator, promises and state would be held all that time.
    const decoder = new TextDecoder();
    const failure = await new Promise<unknown>((resolve) => {
      body.on('data', (chunk: Buffer) => parser.feed(decoder.decode(chunk, { stream: true })));
      body.once('end', () => resolve(undefined));
      body.once('error', (e) => resolve(e));
      body.once('close', () => resolve(body.readableEnded ? undefined : new Error('the stream closed before its end')));
    });
    this.inflight.delete(ac);
    if (owner.id !== undefined && this.streams.get(owner.id) === ac) this.streams.delete(owner.id);
    if (this.closed || ac.signal.aborted || answered) return;
    const resumable = standalone || lastEventId !== undefined;
    if (failure !== undefined && !resumable) {
      this.onerror?.(new Error(`SSE stream disconnected: ${failure instanceof Error ? failure.message : String(failure)}`));
      return;
    }
    if (!resumable) return;
    // A stream that carried something counts as a success: the next drop starts counting afresh.
    if (heard) attempt = 0;
    if (attempt >= MAX_RETRIES) {
      this.onerror?.(new Error(`Maximum reconnection attempts (${MAX_RETRIES}) exceeded.`));
      return;
    }
    await new Promise((r) => setTimeout(r, this.retryMs * 2 ** attempt));
    if (this.closed) return;
    await this.openStream(owner, standalone, lastEventId, attempt + 1);
  }

  /** Opens the standalone GET stream (after `initialized`). A 405 means the server has none. */
  private openStandalone(attempt: number): Promise<void> {
    return this.openStream({}, true, undefined, attempt);
  }

  private async openStream(owner: StreamOwner, standalone: boolean, lastEventId: string | undefined, attempt: number): Promise<void> {
    const ac = new AbortController();
    this.inflight.add(ac);
    if (owner.id !== undefined) this.streams.set(owner.id, ac);
    const headers = this.headers('text/event-stream');
    if (lastEventId) headers['last-event-id'] = lastEventId;
    // A POST stream resumed belongs to its request's span; the standalone stream to none.
    if (!standalone) addTraceHeaders(headers);
    let res: Dispatcher.ResponseData;
    try {
      res = await request(this.url, { method: 'GET', headers, dispatcher: this.opts.dispatcher, signal: ac.signal });
    } catch (e) {
      this.inflight.delete(ac);
      if (!this.closed && !ac.signal.aborted) this.onerror?.(new Error(`Failed to reconnect SSE stream: ${(e as Error).message}`));
      return;
    }
    if (res.statusCode === 405 && standalone && attempt === 0) {
      this.inflight.delete(ac);
      await res.body.dump();
      return;
    }
    if (res.statusCode !== 200) {
      this.inflight.delete(ac);
      await res.body.dump();
      if (!this.closed) this.onerror?.(new StreamableHTTPError(res.statusCode, `Failed to reconnect SSE stream: Failed to open SSE stream: ${res.statusCode}`));
      return;
    }
    await this.readStream(res.body, owner, ac, standalone, attempt);
  }

  /** Sends the session's DELETE (a 405 or a failure is fine). */
  async terminateSession(): Promise<void> {
    if (!this.sessionId) return;
    const res = await request(this.url, { method: 'DELETE', headers: this.headers('application/json'), dispatcher: this.opts.dispatcher });
    await res.body.dump();
    this.sessionId = undefined;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const ac of this.inflight) ac.abort();
    this.inflight.clear();
    this.streams.clear();
    if (this.opts.ownsDispatcher) void this.opts.dispatcher.close().catch(() => {});
    this.onclose?.();
  }
}
