/**
 * One HTTP exchange of the legacy Streamable HTTP client transport (src/upstream/http-transport.ts)
 * on undici's `dispatch`: a POST, a GET stream or the DELETE ({@link HttpExchange}), its answer's
 * head read from the raw headers, an SSE body fed to a reusable parser ({@link SseReader}) as it
 * arrives, any other body collected up to {@link MAX_MESSAGE_BYTES}.
 */
import { StringDecoder } from 'node:string_decoder';
import { createParser, type EventSourceParser } from 'eventsource-parser';
import type { Dispatcher } from 'undici';

/**
 * Most bytes of one message read from the upstream (10 MiB, 10,485,760 bytes: the bound of the SDK's
 * stdio transport, so a message too large for one transport is too large for all): a JSON body, or
 * the bytes of an SSE stream since its last event.
 */
export const MAX_MESSAGE_BYTES = 10 * 1024 * 1024;
/** How a message over {@link MAX_MESSAGE_BYTES} is named in errors. */
export const TOO_LARGE = `over ${MAX_MESSAGE_BYTES} bytes (10 MiB), the most the gateway reads of one message`;

/**
 * What a stream is for: the request (id, method, progress token) of a POST, or nothing (the GET
 * stream). A request's stream and its resumptions share one owner.
 */
export interface StreamOwner {
  id?: string | number;
  method?: string;
  token?: string | number;
  /** The exchange reading (or about to read) the request's stream now. */
  current?: HttpExchange;
  /** The request was cancelled: its stream is dropped and not resumed. */
  givenUp?: boolean;
}

/** What an exchange and its SSE reader need of their transport (src/upstream/http-transport.ts). */
export interface ExchangeHost {
  /** Where requests go: the upstream's undici dispatcher, origin and path. */
  readonly target: { dispatcher: Dispatcher; origin: string; path: string };
  /** An SSE reader for the body of `ex` (a spare one when there is one). */
  sseParser(ex: HttpExchange): SseReader;
  /** `ex` answered with an SSE stream. */
  streaming(ex: HttpExchange): void;
  /** One message (the `data` of an SSE event) arrived on the stream of `ex`. */
  sseMessage(ex: HttpExchange, data: string): void;
  /** The stream of `ex` sent more than {@link MAX_MESSAGE_BYTES} since its last event. */
  sseTooLarge(ex: HttpExchange): void;
  /** The SSE body of `ex` ended (`failure`: how it broke); `reader` is free again. */
  sseEnded(reader: SseReader, ex: HttpExchange, failure: Error | undefined): void;
  /** The server's SSE `retry`, in ms. */
  retryDelay: number;
  /** `ex` ended. */
  forget(ex: HttpExchange): void;
  /** The request of `ex` failed before any answer (the network). */
  fail(e: Error): void;
}

/**
 * The SSE parser (eventsource-parser, with a UTF-8 decoder in front) of one response body at a
 * time: the transport hands it to each SSE response it reads and takes it back when that ends.
 */
export class SseReader {
  /** The exchange whose body this reader is reading now. */
  ex: HttpExchange | undefined;
  private readonly decoder = new StringDecoder('utf8');
  private readonly parser: EventSourceParser;
  /** Bytes fed since the last event (about what the parser holds: the rest of a chunk after an event is not counted). */
  private unread = 0;

  constructor(private readonly transport: ExchangeHost) {
    this.parser = createParser({
      onEvent: (ev) => {
        const ex = this.ex!;
        if (ex.aborted) return;
        this.unread = 0;
        ex.heard = true;
        if (ev.id) ex.lastEventId = ev.id;
        if (!ev.data || (ev.event && ev.event !== 'message')) return;
        // A UTF-16 code unit is at most 3 UTF-8 bytes: only a long event is measured.
        if (ev.data.length * 3 > MAX_MESSAGE_BYTES && Buffer.byteLength(ev.data) > MAX_MESSAGE_BYTES) return this.transport.sseTooLarge(ex);
        this.transport.sseMessage(ex, ev.data);
      },
      onRetry: (ms) => (this.transport.retryDelay = ms),
    });
  }

  /** Parses the next chunk of the body. */
  feed(chunk: Buffer): void {
    this.unread += chunk.length;
    this.parser.feed(this.decoder.write(chunk));
    if (this.unread > MAX_MESSAGE_BYTES && !this.ex!.aborted) this.transport.sseTooLarge(this.ex!);
  }

  /** The body ended (`failure`: how it broke): the reader is reset and given back to the transport. */
  done(failure: Error | undefined): void {
    const ex = this.ex!;
    this.ex = undefined;
    this.unread = 0;
    this.parser.reset();
    this.decoder.end();
    this.transport.sseEnded(this, ex, failure);
  }
}

/** Status and headers of an HTTP answer, as the transport needs them. */
export interface ResponseHead {
  status: number;
  sessionId: string | undefined;
  /** `text/event-stream`: the body is read as SSE, in the background. */
  sse: boolean;
  json: boolean;
  /** The `Content-Type` value, lower-cased. */
  type: string;
}

/**
 * The values of `content-type` (lower-cased: media types are case-insensitive, RFC 9110 §8.3.1) and
 * `mcp-session-id` in undici's raw response headers (name and
 * value Buffers in turn), without building an object of every header.
 */
function headValues(raw: Buffer[]): { type: string; sessionId: string | undefined } {
  let type = '';
  let sessionId: string | undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!;
    if (named(name, CONTENT_TYPE)) type = raw[i + 1]!.toString('latin1').toLowerCase();
    else if (named(name, MCP_SESSION_ID)) sessionId = raw[i + 1]!.toString('latin1');
  }
  return { type, sessionId };
}

const CONTENT_TYPE = Buffer.from('content-type');
const MCP_SESSION_ID = Buffer.from('mcp-session-id');

/** True when the header name `raw` is `lower` in any case (`lower`: letters, digits and `-`). */
function named(raw: Buffer, lower: Buffer): boolean {
  if (raw.length !== lower.length) return false;
  for (let i = 0; i < raw.length; i++) if ((raw[i]! | 0x20) !== lower[i]) return false;
  return true;
}

/**
 * One HTTP exchange with the upstream (a POST, a GET stream or the DELETE), as an undici dispatch
 * handler. {@link start} resolves with the answer's head; an SSE body then goes to the transport's
 * parser as it arrives, any other body is collected for {@link text}. Aborting it (cancellation,
 * close) ends the request or its stream at once.
 *
 * It implements the handler methods undici's HTTP/1.1 client calls itself (`onConnect`,
 * `onHeaders` with the raw header Buffers, `onData`, `onComplete`, `onError`; marked deprecated
 * in undici 7's types in favour of `onRequestStart` …, which undici serves by wrapping the
 * handler and turning every response's raw headers into an object): this is on the path of every
 * upstream request, and the transport reads two headers.
 */
export class HttpExchange {
  heard = false;
  answered = false;
  /** The body (not SSE) grew past {@link MAX_MESSAGE_BYTES}: it was dropped unread. */
  tooLarge = false;
  /** How the body (not SSE) broke off before its end (the connection closed, say). */
  broken: Error | undefined;
  private size = 0;
  lastEventId: string | undefined;
  aborted = false;
  private abortRequest: ((err?: Error) => void) | undefined;
  private headResolve!: (head: ResponseHead) => void;
  private headReject!: (err: Error) => void;
  private headDone = false;
  private sse: SseReader | undefined;
  private chunks: Buffer[] | undefined;
  private bodyDone: Promise<string> | undefined;
  private bodyResolve: ((text: string) => void) | undefined;
  private finished = false;

  constructor(
    private readonly transport: ExchangeHost,
    readonly owner: StreamOwner,
    readonly standalone: boolean,
    readonly attempt: number,
  ) {}

  /**
   * Sends the request.
   * @returns the answer's status and the headers that matter.
   * @throws the network error (refused, reset, the hop's timeouts), or an abort error.
   */
  start(method: 'POST' | 'GET' | 'DELETE', headers: Record<string, string>, body?: string): Promise<ResponseHead> {
    const { dispatcher, origin, path } = this.transport.target;
    const head = new Promise<ResponseHead>((resolve, reject) => {
      this.headResolve = resolve;
      this.headReject = reject;
    });
    dispatcher.dispatch({ origin, path, method, headers, body }, this as unknown as Dispatcher.DispatchHandler);
    return head;
  }

  /** The whole body of a non-SSE answer, as text ('' when it fails). */
  text(): Promise<string> {
    return (this.bodyDone ??= this.finished
      ? Promise.resolve(Buffer.concat(this.chunks ?? []).toString('utf8'))
      : new Promise((r) => (this.bodyResolve = r)));
  }

  /** Ends the request or its stream; nothing more of it reaches the transport. */
  abort(): void {
    if (this.aborted) return;
    this.aborted = true;
    this.stop();
  }

  /**
   * Like {@link abort}, for a caller that may be inside this exchange's `onData` (reading its SSE
   * body): nothing more of it reaches the transport from now on, and the request ends after the
   * current callback.
   */
  abortLater(): void {
    if (this.aborted) return;
    this.aborted = true;
    queueMicrotask(() => this.stop());
  }

  private stop(): void {
    this.abortRequest?.(new Error('aborted'));
    this.end(new Error('aborted'));
  }

  onConnect(abort: (err?: Error) => void): void {
    this.abortRequest = abort;
    if (this.aborted) abort(new Error('aborted'));
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[]): boolean {
    const { type, sessionId } = headValues(rawHeaders);
    const sse = statusCode >= 200 && statusCode < 300 && statusCode !== 202 && type.includes('text/event-stream');
    if (sse) {
      this.sse = this.transport.sseParser(this);
      this.transport.streaming(this);
    } else this.chunks = [];
    this.headDone = true;
    this.headResolve({ status: statusCode, sessionId, sse, json: type.includes('application/json'), type });
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.aborted || this.finished) return true;
    if (this.sse) this.sse.feed(chunk);
    else if ((this.size += chunk.length) > MAX_MESSAGE_BYTES) {
      this.tooLarge = true;
      this.chunks = [];
      this.abortLater();
    } else this.chunks!.push(chunk);
    return true;
  }

  onComplete(): void {
    this.end(undefined);
  }

  onError(err: Error): void {
    this.end(err);
  }

  private end(failure: Error | undefined): void {
    if (this.finished) return;
    this.finished = true;
    this.transport.forget(this);
    if (!this.headDone) {
      this.headDone = true;
      if (failure) {
        if (!this.aborted) this.transport.fail(failure);
        this.headReject(failure);
      }
      return;
    }
    const sse = this.sse;
    if (sse) {
      // The reader goes back to the transport for the next stream.
      this.sse = undefined;
      return sse.done(this.aborted ? undefined : (failure ?? undefined));
    }
    if (failure && !this.aborted) this.broken = failure;
    this.bodyResolve?.(failure ? '' : Buffer.concat(this.chunks ?? []).toString('utf8'));
  }
}
