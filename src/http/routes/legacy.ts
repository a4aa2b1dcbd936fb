/**
 * The endpoints of legacy clients (src/http/legacy-sessions.ts holds their sessions):
 * - Streamable HTTP (2025-03-26 … 2025-11-25) on the MCP endpoints themselves: a POST whose
 *   client era is legacy (an `initialize`, or a request with `Mcp-Session-Id`) goes to
 *   {@link legacyRequest}; a session's standalone SSE stream (GET) and its end (DELETE) carry its
 *   `Mcp-Session-Id`, on `/mcp/NAME` and (with federation) `/mcp`;
 * - the old HTTP+SSE transport (2024-11-05), per upstream only: `GET /mcp/NAME/sse` opens the
 *   stream, `POST /mcp/NAME/message?sessionId=…` takes the client's messages. Other methods on
 *   these two paths: 405 with `Allow`.
 */
import type { Context, Hono } from 'hono';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import { ErrorCode } from '../../protocol/errors.js';
import { FEDERATED_LABEL } from '../../federation/federation.js';
import { readBody } from '../body.js';
import type { AppEnv, Door } from '../door.js';
import type { ClientEra } from '../legacy-sessions.js';
import { withMcpAccept } from '../media.js';
import { bodyNotRead, jsonBody, mediaRefused } from '../post-checks.js';
import { methodNotAllowed, unknownUpstream } from '../refusals.js';
import { errorResponse } from '../sse.js';
import { upstreamLimited } from '../upstream-limits.js';

/**
 * The server of a legacy client's POST on the MCP endpoint of `upstream` (an upstream's name, or
 * {@link FEDERATED_LABEL}): an `initialize` opens a session; any other request needs the session's
 * `Mcp-Session-Id` (400 / -32000 without one).
 */
export function legacyRequest(
  { legacy, sessionCaller }: Door,
  c: Context<AppEnv>,
  upstream: string,
): (clientEra: Exclude<ClientEra, 'modern'>, body: unknown) => Response | Promise<Response> {
  return (clientEra, body) => {
    const sessionId = c.req.header('mcp-session-id');
    if (clientEra === 'legacy-initialize') return legacy.initialize(upstream, sessionCaller(c), withMcpAccept(c.req.raw), body);
    if (!sessionId)
      return errorResponse(null, { code: ErrorCode.ServerError, message: 'Bad Request: Mcp-Session-Id header is required' }, 400);
    return legacy.handle(upstream, sessionCaller(c), sessionId, withMcpAccept(c.req.raw), body);
  };
}

/**
 * Registers a legacy session's GET and DELETE on the MCP endpoints and the HTTP+SSE transport on
 * `app`. Registered after the POST routes of the MCP endpoints: the federated `/mcp` answers any
 * other method here with 405, and `/mcp/NAME` leaves them to the route after.
 */
export function legacyRoutes(app: Hono<AppEnv>, door: Door): void {
  const { router, federation, legacy, sessionCaller, cfg } = door;
  const known = (name: string) => router.upstreams.has(name);
  const unknown = (c: Context<AppEnv>, name: string) => unknownUpstream(c, router.upstreams.keys(), name, null);
  if (federation) {
    // A legacy session's standalone SSE stream (GET) and its end (DELETE); without a session, 405.
    app.all('/mcp', (c) => {
      const sessionId = c.req.header('mcp-session-id');
      if (sessionId && (c.req.method === 'GET' || c.req.method === 'DELETE'))
        return legacy.handle(FEDERATED_LABEL, sessionCaller(c), sessionId, c.req.raw);
      return methodNotAllowed(c.req.method, '/mcp');
    });
  }
  // A legacy session's standalone SSE stream (GET) and its end (DELETE).
  app.on(['GET', 'DELETE'], '/mcp/:name', async (c, next) => {
    const sessionId = c.req.header('mcp-session-id');
    if (!sessionId || !known(c.req.param('name'))) return next();
    return legacy.handle(c.req.param('name'), sessionCaller(c), sessionId, c.req.raw);
  });

  // The old HTTP+SSE transport (2024-11-05) for clients that speak only that.
  app.get('/mcp/:name/sse', async (c) => {
    if (!known(c.req.param('name'))) return unknown(c, c.req.param('name'));
    return (await legacy.openSse(c.req.param('name'), sessionCaller(c), c.env.outgoing)) ?? RESPONSE_ALREADY_SENT;
  });
  app.post('/mcp/:name/message', async (c) => {
    const started = performance.now();
    if (!known(c.req.param('name'))) return unknown(c, c.req.param('name'));
    const maxBody = cfg.limits.maxBodyBytes;
    const read = await readBody(c, maxBody);
    const refused = bodyNotRead(read, maxBody) ?? mediaRefused(c, { accept: false });
    if (refused) return refused;
    const parsed = jsonBody(read, cfg.limits.maxJsonDepth);
    if (parsed instanceof Response) return parsed;
    const sessionId = c.req.query('sessionId') ?? '';
    const era = legacy.eraOf(sessionId) ?? '2024-11-05';
    const limited = await upstreamLimited(door, c, c.req.param('name'), parsed.body, { era, transport: 'sse', started });
    if (limited) return limited;
    return legacy.postSse(c.req.param('name'), sessionCaller(c), sessionId, c.env.incoming.headers, parsed.body);
  });
  /** Any other method on an HTTP+SSE path of a configured upstream: 405 with `Allow: allow`. */
  const onlyMethod = (allow: string, hint: string) => (c: Context<AppEnv>) =>
    known(c.req.param('name')!)
      ? methodNotAllowed(c.req.method, c.req.path, allow, `${c.req.method} is not supported on ${c.req.path}; ${hint}`)
      : unknown(c, c.req.param('name')!);
  app.all(
    '/mcp/:name/message',
    onlyMethod('POST', "the HTTP+SSE transport (2024-11-05) takes the client's messages as POST to the endpoint its SSE stream names"),
  );
  app.all(
    '/mcp/:name/sse',
    onlyMethod('GET', 'open the HTTP+SSE stream (2024-11-05) with GET, then POST messages to the endpoint it names'),
  );
}
