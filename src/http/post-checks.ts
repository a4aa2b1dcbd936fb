/**
 * The checks of an MCP POST body once it is read (src/http/body.ts), in the order the front door
 * makes them: its size and arrival (413 / 400), the media types of the request (415 / 406, see
 * src/http/media.ts), then JSON: UTF-8, parseable, and no deeper than `limits.maxJsonDepth` (400).
 * Each refusal is a ready JSON-RPC error response.
 */
import type { Context } from 'hono';
import { ErrorCode } from '../protocol/errors.js';
import { idOf } from '../protocol/envelope.js';
import type { BodyRead } from './body.js';
import { headerOf } from './headers.js';
import { checkPostMedia } from './media.js';
import { errorResponse } from './sse.js';

/** True when `value` nests arrays/objects deeper than `max` (the walk stops `max` levels down). */
export function deeperThan(value: unknown, max: number, depth = 1): boolean {
  if (value === null || typeof value !== 'object') return false;
  if (depth > max) return true;
  if (Array.isArray(value)) {
    for (const child of value) if (child !== null && typeof child === 'object' && deeperThan(child, max, depth + 1)) return true;
    return false;
  }
  for (const key in value) {
    const child = (value as Record<string, unknown>)[key];
    if (child !== null && typeof child === 'object' && deeperThan(child, max, depth + 1)) return true;
  }
  return false;
}

/** 413 / -32600 for a body past `maxBodyBytes`, 400 / -32600 for one that could not be read (the client went away or stalled); else undefined. */
export function bodyNotRead(read: BodyRead, maxBody: number): Response | undefined {
  if ('tooLarge' in read)
    return errorResponse(null, { code: ErrorCode.InvalidRequest, message: `Request body exceeds the limit of ${maxBody} bytes` }, 413, {
      connection: 'close',
    });
  if ('broken' in read) return errorResponse(null, { code: ErrorCode.InvalidRequest, message: 'The request body could not be read' }, 400);
  return undefined;
}

/** The 415 / 406 (-32000) of {@link checkPostMedia} for `c`'s headers, or undefined when they pass. */
export function mediaRefused(c: Context, opts?: { accept?: boolean }): Response | undefined {
  const refused = checkPostMedia(
    { accept: headerOf(c, 'accept'), contentType: headerOf(c, 'content-type'), contentEncoding: headerOf(c, 'content-encoding') },
    opts,
  );
  return refused && errorResponse(null, { code: ErrorCode.ServerError, message: refused.message }, refused.status, refused.headers);
}

/**
 * The JSON value of an MCP POST body whose size and media type passed their checks, and its text.
 * @returns the value, or the refusal: 400 / -32700 when the body is not UTF-8 or not JSON, 400 /
 *   -32600 (with the body's `id`) when it nests arrays and objects deeper than `maxDepth`
 *   (`limits.maxJsonDepth`).
 */
export function jsonBody(read: BodyRead, maxDepth: number): { body: unknown; text: string } | Response {
  // What is left once bodyNotRead passed the read: text, or bytes that are not UTF-8.
  if (!('text' in read)) {
    return errorResponse(
      null,
      { code: ErrorCode.ParseError, message: 'Parse error: the body is not valid UTF-8 (JSON must be UTF-8 encoded)' },
      400,
    );
  }
  let body: unknown;
  try {
    body = JSON.parse(read.text);
  } catch (e) {
    return errorResponse(
      null,
      { code: ErrorCode.ParseError, message: `Parse error: the body is not valid JSON (${(e as Error).message})` },
      400,
    );
  }
  if (deeperThan(body, maxDepth)) {
    return errorResponse(
      idOf(body),
      { code: ErrorCode.InvalidRequest, message: `The body nests deeper than limits.maxJsonDepth=${maxDepth}` },
      400,
    );
  }
  return { body, text: read.text };
}
