/**
 * Request header access on the hot path. On @hono/node-server the headers are read from Node's
 * `IncomingMessage.headers` (lower-cased names, repeated values joined with ", "), so no web
 * `Headers` object is built for the request; elsewhere they come from the `Request`.
 */
import type { IncomingMessage } from 'node:http';
import type { Context } from 'hono';
import type { HeaderSource } from '../protocol/envelope.js';

function incomingOf(c: Context): IncomingMessage | undefined {
  return (c.env as { incoming?: IncomingMessage } | undefined)?.incoming;
}

/** The value of request header `name` (given in lower case), or undefined when absent. */
export function headerOf(c: Context, name: Lowercase<string>): string | undefined {
  const incoming = incomingOf(c);
  if (!incoming) return c.req.header(name);
  const v = incoming.headers[name];
  return v === undefined ? undefined : Array.isArray(v) ? v.join(', ') : v;
}

/** The request's headers as a {@link HeaderSource} (lookup by any case, iteration with lower-cased names). */
export function requestHeaders(c: Context): HeaderSource {
  const incoming = incomingOf(c);
  if (!incoming) return c.req.raw.headers;
  const h = incoming.headers;
  return {
    get: (name) => {
      const v = h[name.toLowerCase()];
      return v === undefined ? null : Array.isArray(v) ? v.join(', ') : v;
    },
    forEach: (callback) => {
      for (const name in h) {
        const v = h[name];
        if (v !== undefined) callback(Array.isArray(v) ? v.join(', ') : v, name);
      }
    },
  };
}

/** Context keys of the response headers the front door's middleware adds (see {@link addResponseHeaders}). */
const PENDING = 'mrtr.responseHeaders';
const APPLIED = 'mrtr.responseHeadersApplied';

/**
 * Adds headers for the response of `c`, before the handler runs (`x-request-id`, CORS). A handler
 * that builds its answer with {@link responseHeadersFor} puts them into it as a plain object, the
 * fast path of @hono/node-server; for any other response {@link applyResponseHeaders} sets them
 * afterwards.
 */
export function addResponseHeaders(c: Context, headers: Record<string, string>): void {
  // The request's own object, added to in place (`headers` may be shared).
  const pending = c.get(PENDING as never) as Record<string, string> | undefined;
  if (pending) Object.assign(pending, headers);
  else c.set(PENDING as never, Object.assign({}, headers) as never);
}

/** `base` with the headers added for `c`'s response (they win over `base`'s); marks them as applied. */
export function responseHeadersFor(c: Context, base: Record<string, string>): Record<string, string> {
  const pending = c.get(PENDING as never) as Record<string, string> | undefined;
  c.set(APPLIED as never, true as never);
  if (!pending) return base;
  // The request's own object takes what it lacks of `base`.
  for (const name in base) if (!(name in pending)) pending[name] = base[name]!;
  return pending;
}

/**
 * Sets the added headers on `c.res` unless the handler's answer carries them already. `vary`
 * values are appended to the response's own.
 */
export function applyResponseHeaders(c: Context): void {
  if (c.get(APPLIED as never)) return;
  c.set(APPLIED as never, true as never);
  const pending = c.get(PENDING as never) as Record<string, string> | undefined;
  for (const [name, value] of Object.entries(pending ?? {})) {
    if (name === 'vary') c.res.headers.append(name, value);
    else c.res.headers.set(name, value);
  }
}
