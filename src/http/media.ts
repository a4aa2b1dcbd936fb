/**
 * The media checks of an MCP POST (Streamable HTTP, MCP 2026-07-28 §"Sending Messages to the
 * Server", and the 2025-era transport the legacy sessions speak): the client must accept both
 * `application/json` and `text/event-stream` (406 otherwise), send a `Content-Type` of
 * `application/json` in UTF-8, and send the body without a content coding (415 otherwise,
 * RFC 9110 §15.5.16). The answers use the JSON-RPC code -32000 and the `Not Acceptable:` /
 * `Unsupported Media Type:` wording of the MCP SDK's server transport, so both eras see the same.
 */
import { parseAccept } from 'hono/utils/accept';

/** The media types a POST must accept, in the order the messages name them. */
export const POST_ACCEPT = ['application/json', 'text/event-stream'] as const;

/** What the v1 and v2 SDK clients send; checked without parsing. */
const USUAL_ACCEPT = 'application/json, text/event-stream';

/** A refused POST: HTTP status, message (for JSON-RPC code -32000) and extra response headers. */
export interface MediaRefusal {
  status: 406 | 415;
  message: string;
  headers?: Record<string, string>;
}

/** True when the media range `range` (`type/subtype`, `type/*` or `*\/*`, lower case) covers `type`. */
function covers(range: string, type: string): boolean {
  if (range === type || range === '*/*' || range === '*') return true;
  return range.endsWith('/*') && type.startsWith(range.slice(0, -1));
}

/**
 * True when the `Accept` value `accept` accepts `type` (RFC 9110 §12.5.1): some media range
 * with a q-value above 0 covers it and no more specific range gives it `q=0`. An absent header
 * accepts nothing here, since MCP requires the client to send it.
 */
export function acceptsType(accept: string | undefined, type: string): boolean {
  if (!accept) return false;
  let best: { q: number; specificity: number } | undefined;
  for (const a of parseAccept(accept)) {
    const range = a.type.toLowerCase();
    if (!covers(range, type)) continue;
    const specificity = range === type ? 3 : range.endsWith('/*') && range !== '*/*' ? 2 : 1;
    if (!best || specificity > best.specificity) best = { q: a.q, specificity };
  }
  return !!best && best.q > 0;
}

/** True when `accept` accepts both `application/json` and `text/event-stream` (`*\/*` does). */
export function acceptsMcp(accept: string | undefined): boolean {
  return accept === USUAL_ACCEPT || POST_ACCEPT.every((t) => acceptsType(accept, t));
}

/**
 * The media checks of one MCP POST, in this order: `Content-Encoding` other than `identity`
 * (415, with `Accept-Encoding: identity`), `Content-Type` other than `application/json` or with a
 * charset other than UTF-8 (415), `Accept` not accepting both `application/json` and
 * `text/event-stream` (406). `opts.accept: false` leaves `Accept` out: the `…/message` POST of the
 * HTTP+SSE transport (2024-11-05) is answered 202 with the response on the session's stream.
 * @returns the refusal, or undefined when the request passes.
 */
export function checkPostMedia(
  h: { accept?: string; contentType?: string; contentEncoding?: string },
  opts: { accept?: boolean } = {},
): MediaRefusal | undefined {
  const encoding = h.contentEncoding?.trim().toLowerCase();
  if (encoding && encoding !== 'identity') {
    return {
      status: 415,
      message: `Unsupported Media Type: Content-Encoding '${h.contentEncoding!.trim()}' is not supported; send the body uncompressed`,
      headers: { 'accept-encoding': 'identity' },
    };
  }
  if (h.contentType !== 'application/json') {
    const [essence = '', ...params] = (h.contentType ?? '').split(';').map((p) => p.trim());
    if (essence.toLowerCase() !== 'application/json') {
      const got = h.contentType === undefined ? 'it is missing' : `got '${h.contentType}'`;
      return { status: 415, message: `Unsupported Media Type: the Content-Type header must be application/json (${got})` };
    }
    const charset = params
      .find((p) => /^charset\s*=/i.test(p))
      ?.replace(/^charset\s*=\s*/i, '')
      .replace(/^"|"$/g, '')
      .toLowerCase();
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8') {
      return { status: 415, message: `Unsupported Media Type: the body must be UTF-8 JSON (Content-Type charset '${charset}')` };
    }
  }
  if (opts.accept !== false && !acceptsMcp(h.accept)) {
    const got = h.accept === undefined ? 'it is missing' : `got '${h.accept}'`;
    return { status: 406, message: `Not Acceptable: the Accept header must list ${POST_ACCEPT.join(' and ')} (${got})` };
  }
  return undefined;
}

/**
 * `req` as the MCP SDK's server transport should see it: that transport looks for the literal
 * `application/json` and `text/event-stream` in `Accept`, so a request that passed
 * {@link checkPostMedia} with another spelling (`*\/*`, `application/*`) gets a copy (URL, method
 * and headers, no body: the transport is given the parsed body) with `Accept` set to both.
 */
export function withMcpAccept(req: Request): Request {
  const accept = req.headers.get('accept') ?? '';
  if (POST_ACCEPT.every((t) => accept.includes(t))) return req;
  const headers = new Headers(req.headers);
  headers.set('accept', USUAL_ACCEPT);
  return new Request(req.url, { method: req.method, headers });
}
