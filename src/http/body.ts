/**
 * Reading a request body under `limits.maxBodyBytes`, straight from Node's `IncomingMessage` when
 * the app runs on @hono/node-server (no web stream in between: this is on the path of every
 * request), else through the web `Request`.
 */
import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';

/** A body read whole, one over the limit (HTTP 413), or one that did not arrive (HTTP 400). */
export type BodyRead = { text: string } | { tooLarge: true } | { broken: Error };

/**
 * Reads the whole body of `c`'s request as UTF-8, at most `maxBytes` bytes.
 * @returns `tooLarge` as soon as `Content-Length` or the bytes received pass `maxBytes` (reading
 *   stops); `broken` when the client aborted, stalled past the read timeout or sent a malformed
 *   chunked body.
 */
export async function readBody(c: Context, maxBytes: number): Promise<BodyRead> {
  const declared = Number(c.req.header('content-length'));
  if (Number.isFinite(declared) && declared > maxBytes) return { tooLarge: true };
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (!incoming) {
    try {
      const text = await c.req.text();
      return Buffer.byteLength(text) > maxBytes ? { tooLarge: true } : { text };
    } catch (e) {
      return { broken: e as Error };
    }
  }
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of incoming) {
      size += (chunk as Buffer).length;
      if (size > maxBytes) return { tooLarge: true };
      chunks.push(chunk as Buffer);
    }
  } catch (e) {
    return { broken: e as Error };
  }
  if (!incoming.complete) return { broken: new Error('the request body ended early') };
  return { text: chunks.length === 1 ? chunks[0]!.toString('utf8') : Buffer.concat(chunks, size).toString('utf8') };
}
