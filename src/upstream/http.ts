/**
 * The HTTP client hop to Streamable HTTP and HTTP+SSE upstreams: a keep-alive connection pool of
 * each Streamable HTTP session's own (for the gateway's transport, src/upstream/http-transport.ts),
 * and undici's fetch over one pool (`Agent`) per upstream for the SDK transports that take a
 * `fetch` option (HTTP+SSE, 2026-07-28 upstreams).
 *
 * Limits come from the upstream's config, never from a library default: the connect timeout is
 * `timeouts.connectMs`; undici's own headers and body timeouts (300 s by default) are switched off,
 * because how long an upstream may stay silent is decided per request by the gateway
 * (`timeouts.requestMs` while the upstream works, `timeouts.totalMs` in all, time parked waiting for
 * the client not counted), and an idle GET stream may stay silent for as long as the session lives.
 *
 * With tracing on, every request carries the W3C trace context of the span active when it is sent
 * (`traceparent`, `tracestate`; see src/observability/tracing.ts).
 */
import { Agent, Pool, fetch as undiciFetch, type Dispatcher } from 'undici';
import type { UpstreamConfig } from '../config/schema.js';
import { traceHeaders } from '../observability/tracing.js';

/** A fetch function for the SDK transports, bound to one upstream's connection pool. */
export type FetchLike = (url: string | URL, init?: RequestInit) => Promise<Response>;

/** One upstream's HTTP connection pools: the fetch of the SDK transports, and one pool per session. */
export interface HttpHop {
  fetch: FetchLike;
  /**
   * A keep-alive pool of its own for one upstream session at `origin`, with the same limits: a
   * session's requests then look for a free connection among that session's few, not among every
   * connection to the upstream (long-lived streams included). Close it with the session.
   */
  sessionPool(origin: string): Dispatcher;
  /** Closes the pool's connections: gracefully, then (after 1 s) cutting what is still open. Never throws. */
  close(): Promise<void>;
}

/** Longest wait for the requests in flight when the hop closes, in ms; then their connections are cut. */
const CLOSE_MS = 1000;

/** Keep-alive time of an idle upstream connection, in ms. */
const KEEP_ALIVE_MS = 30_000;

/** Builds the HTTP hop for an upstream whose limits are `timeouts`. */
export function createHttpHop(timeouts: UpstreamConfig['timeouts']): HttpHop {
  const options = {
    connect: { timeout: timeouts.connectMs },
    headersTimeout: 0,
    bodyTimeout: 0,
    keepAliveTimeout: KEEP_ALIVE_MS,
    keepAliveMaxTimeout: KEEP_ALIVE_MS,
  };
  const agent = new Agent(options);
  const fetch: FetchLike = (url, init) =>
    undiciFetch(url, {
      ...(init as object),
      headers: traceHeaders(init?.headers) as never,
      dispatcher: agent,
    }) as unknown as Promise<Response>;
  const close = async () => {
    // Closing waits for requests in flight; a stream the upstream never ends is cut after CLOSE_MS.
    const closed = agent.close().then(
      () => true,
      () => true,
    );
    let timer: NodeJS.Timeout | undefined;
    const cut = new Promise<boolean>((r) => (timer = setTimeout(() => r(false), CLOSE_MS)));
    const done = await Promise.race([closed, cut]);
    clearTimeout(timer);
    if (!done) await agent.destroy().catch(() => {});
  };
  return { fetch, sessionPool: (origin) => new Pool(origin, options), close };
}

/** HTTP statuses whose responses have no body (Fetch standard, "null body status"). */
const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);

/** The byte sequences that end an SSE event (a blank line, after LF, CRLF or CR line ends). */
const EVENT_ENDS = [Buffer.from('\n\n'), Buffer.from('\n\r\n'), Buffer.from('\r\r')];

/** The index in `bytes` just past its last SSE event end, or -1 when it holds none. */
function pastLastEventEnd(bytes: Buffer): number {
  let past = -1;
  for (const end of EVENT_ENDS) {
    const at = bytes.lastIndexOf(end);
    if (at >= 0) past = Math.max(past, at + end.length);
  }
  return past;
}

/**
 * `res` with its body bounded to `maxBytes` per message: for `text/event-stream`, the bytes since
 * the last event ended (a stream of many smaller events is not bounded); for any other body, the
 * whole body. When the bound is passed, the body errors (nothing more of it is read) and
 * `onTooLarge(sse)` is called once. A response without a body is returned as it is.
 */
export function boundedResponse(res: Response, maxBytes: number, onTooLarge: (sse: boolean) => void): Response {
  // A null-body status (204, 304 …) cannot be given a body again.
  if (!res.body || NULL_BODY_STATUS.has(res.status)) return res;
  const sse = (res.headers.get('content-type') ?? '').toLowerCase().includes('text/event-stream');
  let since = 0;
  let tail = Buffer.alloc(0);
  const bound = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      const bytes = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
      if (!sse) since += bytes.length;
      else {
        const past = pastLastEventEnd(bytes);
        // An event end split across two chunks: the last bytes of the one before and the first of this one.
        const edge = past < 0 && tail.length ? pastLastEventEnd(Buffer.concat([tail, bytes.subarray(0, 2)])) - tail.length : -1;
        const end = Math.max(past, edge);
        since = end >= 0 ? bytes.length - end : since + bytes.length;
        tail = Buffer.from(bytes.subarray(-2));
      }
      if (since > maxBytes) {
        onTooLarge(sse);
        controller.error(new Error(`a message over ${maxBytes} bytes`));
        return;
      }
      controller.enqueue(chunk);
    },
  });
  return new Response(res.body.pipeThrough(bound), { status: res.status, statusText: res.statusText, headers: res.headers });
}
