/**
 * Response helpers the front door shares: JSON-RPC error responses and Server-Sent Events streams
 * (MCP 2026-07-28 Streamable HTTP §"Receiving Messages").
 */
import type { JsonRpcErrorObject } from '../protocol/errors.js';
import type { RequestId } from '../protocol/wire.js';

export const jsonHeaders = { 'content-type': 'application/json' };

/** A JSON-RPC error response with HTTP `status` (`id` null when the request's id is unknown). */
export function errorResponse(
  id: RequestId | null,
  err: JsonRpcErrorObject,
  status: number,
  extraHeaders: Record<string, string> = {},
): Response {
  return new Response(JSON.stringify({ jsonrpc: '2.0', id, error: err }), { status, headers: { ...jsonHeaders, ...extraHeaders } });
}

/** An SSE response whose events each carry one JSON-RPC message (`event: message`). */
export interface SseStream {
  response: Response;
  /** Writes one message; rejects once the client has gone. */
  send(message: unknown): Promise<void>;
  /** Writes an SSE comment line (a keep-alive the client ignores); rejects once the client has gone. */
  comment(text: string): Promise<void>;
  /** Ends the stream after what was written. */
  end(): void;
  /** Rejects when the client closes the stream. */
  closed: Promise<void>;
}

const encoder = new TextEncoder();

/** Opens an SSE response (200, `text/event-stream`, `X-Accel-Buffering: no`). */
export function sseStream(): SseStream {
  const stream = new TransformStream<Uint8Array, Uint8Array>();
  const writer = stream.writable.getWriter();
  return {
    response: new Response(stream.readable, {
      status: 200,
      headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' },
    }),
    send: (message) => writer.write(encoder.encode(`event: message\ndata: ${JSON.stringify(message)}\n\n`)),
    comment: (text) => writer.write(encoder.encode(`: ${text}\n\n`)),
    end: () => void writer.close().catch(() => {}),
    closed: writer.closed,
  };
}
