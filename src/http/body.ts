/**
 * Reading a request body under `limits.maxBodyBytes`, straight from Node's `IncomingMessage` when
 * the app runs on @hono/node-server (no web stream in between: this is on the path of every
 * request), else through the web `Request`.
 */
import { isUtf8 } from 'node:buffer';
import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';
import { headerOf } from './headers.js';

/**
 * A body read whole, one over the limit (HTTP 413), one that did not arrive (HTTP 400), or one
 * whose bytes are not UTF-8 (JSON must be UTF-8, RFC 8259 §8.1: HTTP 400, -32700).
 */
export type BodyRead = { text: string } | { tooLarge: true } | { broken: Error } | { notUtf8: true };

/**
 * The read of `bytes`: their text without one leading UTF-8 byte order mark (EF BB BF, which
 * RFC 8259 §8.1 lets a JSON parser ignore), or `notUtf8` when they are not valid UTF-8.
 */
function decoded(bytes: Buffer | Uint8Array): BodyRead {
  if (!isUtf8(bytes)) return { notUtf8: true };
  const bom = bytes.byteLength >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return { text: buffer.toString('utf8', bom) };
}

/**
 * Reads the whole body of `c`'s request as UTF-8, at most `maxBytes` bytes: at once when it has
 * arrived already (a small body comes in the packets of its headers), else as it arrives.
 * @returns `text` (one leading byte order mark left out); `notUtf8` when the bytes are not valid UTF-8 (nothing is replaced);
 *   `tooLarge` as soon as `Content-Length` or the bytes received pass `maxBytes` (reading
 *   stops: the rest is never read, and the answer should close the connection); `broken` when the client aborted, stalled past the read timeout or sent a malformed
 *   chunked body.
 */
export function readBody(c: Context, maxBytes: number): BodyRead | Promise<BodyRead> {
  const declared = Number(headerOf(c, 'content-length'));
  if (Number.isFinite(declared) && declared > maxBytes) return { tooLarge: true };
  const incoming = (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
  if (!incoming) {
    return c.req.arrayBuffer().then(
      (buffer) => {
        const bytes = new Uint8Array(buffer);
        return bytes.byteLength > maxBytes ? { tooLarge: true } : decoded(bytes);
      },
      (e) => ({ broken: e as Error }),
    );
  }
  const now = arrived(incoming, maxBytes);
  if (now) return now;
  // Called while Node's parser is still at the headers (the front door did not wait for anything):
  // a body that came in the same packets is parsed before the event loop's next phase, and read
  // then without events; a body still on its way is read as it arrives.
  return new Promise((resolve) => setImmediate(() => resolve(arrived(incoming, maxBytes) ?? readEvents(incoming, maxBytes))));
}

/**
 * The read of a body that needs no waiting: ended (read by someone else already: nothing is left),
 * cut off by the client closing the connection, or arrived whole and not read from; else undefined.
 */
function arrived(incoming: IncomingMessage, maxBytes: number): BodyRead | undefined {
  if (incoming.readableEnded) return incoming.complete ? { text: '' } : { broken: new Error('the request body ended early') };
  // The client closed the connection before the body was read (while its token was checked, say):
  // no event is left to wait for, and no one is left to answer.
  if (incoming.destroyed)
    return { broken: incoming.errored ?? new Error('the client closed the connection before its request body was read') };
  if (!incoming.complete || incoming.readableFlowing || incoming.readableLength > maxBytes) return undefined;
  const all = incoming.read() as Buffer | null;
  return decoded(all ?? Buffer.alloc(0));
}

/** Reads the body as it arrives (see {@link readBody}). */
function readEvents(incoming: IncomingMessage, maxBytes: number): Promise<BodyRead> {
  // Events rather than an async iterator: this is on the path of every request.
  return new Promise<BodyRead>((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const done = (r: BodyRead) => {
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', onError);
      incoming.off('close', onClose);
      resolve(r);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= maxBytes) return void chunks.push(chunk);
      incoming.pause();
      done({ tooLarge: true });
    };
    const onEnd = () =>
      done(
        incoming.complete
          ? decoded(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size))
          : { broken: new Error('the request body ended early') },
      );
    const onError = (e: Error) => done({ broken: e });
    const onClose = () => done({ broken: incoming.errored ?? new Error('the request body ended early') });
    incoming.on('data', onData);
    incoming.on('end', onEnd);
    incoming.on('error', onError);
    incoming.on('close', onClose);
  });
}
