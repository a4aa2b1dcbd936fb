/**
 * The MCP endpoints: `POST /mcp/NAME` for each upstream and, with `federation.enabled`, `POST /mcp`
 * for the federated upstreams together. Each POST is served by `handleMcp` (src/http/mcp-request.ts):
 * 2026-07-28 requests by the router or the federation layer, legacy clients' requests by their
 * legacy session (src/http/routes/legacy.ts). Other methods on `/mcp/NAME` (once the legacy
 * session routes passed them on): 405 with `Allow: POST`; 404 for an upstream that is not configured.
 */
import type { Hono } from 'hono';
import { FEDERATED_LABEL } from '../../federation/federation.js';
import { trackerOf, type AppEnv, type Door } from '../door.js';
import { handleMcp } from '../mcp-request.js';
import { methodNotAllowed, unknownUpstream } from '../refusals.js';
import { legacyRequest } from './legacy.js';

/** Registers `POST /mcp/NAME` and, with federation, `POST /mcp` on `app`. */
export function mcpRoutes(app: Hono<AppEnv>, door: Door): void {
  app.post('/mcp/:name', (c) =>
    handleMcp({
      c,
      door,
      caller: c.get('caller'),
      requestId: c.get('requestId'),
      track: trackerOf(door.inflight, c),
      legacy: legacyRequest(door, c, c.req.param('name')),
    }),
  );
  if (door.federation) {
    app.post('/mcp', (c) =>
      handleMcp({
        c,
        door,
        caller: c.get('caller'),
        requestId: c.get('requestId'),
        track: trackerOf(door.inflight, c),
        legacy: legacyRequest(door, c, FEDERATED_LABEL),
      }),
    );
  }
}

/** Registers the answer to any other method on `/mcp/NAME` (after every route of that path). */
export function mcpMethodFallback(app: Hono<AppEnv>, { router }: Door): void {
  app.all('/mcp/:name', (c) =>
    router.upstreams.has(c.req.param('name'))
      ? methodNotAllowed(c.req.method, c.req.path)
      : unknownUpstream(c, router.upstreams.keys(), c.req.param('name'), null),
  );
}
