/**
 * The internal hop of replicas sharing a store: `POST /_replicas/forward/mcp/NAME` (and
 * `…/forward/mcp` with federation) takes a 2026-07-28 request another replica authenticated, for a
 * call or task held here. It needs `replicas.secret` in its header (404 otherwise, as for any unknown
 * path), serves only what forwarding exists for, for the principal the state or task belongs to
 * (403 otherwise, see `hopRefusal`), takes no legacy session request (403), and never forwards again.
 */
import type { Context, Hono } from 'hono';
import { ErrorCode, quoted } from '../../protocol/errors.js';
import { uniqueId } from '../../observability/ids.js';
import { principalHash } from '../../security/auth.js';
import { FEDERATED_LABEL } from '../../federation/federation.js';
import { trackerOf, type AppEnv, type Door } from '../door.js';
import { handleMcp, type HopGate } from '../mcp-request.js';
import {
  FORWARD_FEDERATED,
  FORWARD_PREFIX,
  PRINCIPAL_HEADER,
  SECRET_HEADER,
  forwardedPrincipal,
  hopRefusal,
  secretMatches,
  type HopRefusalReason,
} from '../replicas.js';
import { errorResponse } from '../sse.js';

/** Registers the internal hop's endpoints on `app`. */
export function replicaHopRoutes(app: Hono<AppEnv>, door: Door): void {
  const forwardedIn = (c: Context<AppEnv>) => {
    const principal = forwardedPrincipal(c.req.header(PRINCIPAL_HEADER));
    if (!secretMatches(door.cfg.replicas.secret, c.req.header(SECRET_HEADER)) || principal === undefined) return c.notFound();
    const auth = c.req.header('authorization');
    const token = auth && /^Bearer /i.test(auth) ? auth.replace(/^Bearer\s+/i, '') : undefined;
    const requestId = /^[\w.:-]{1,128}$/.test(c.req.header('x-request-id') ?? '') ? c.req.header('x-request-id')! : uniqueId();
    const upstream = c.req.param('name');
    // Only what forwarding exists for, for the principal the state or task belongs to.
    const refuse = (reason: HopRefusalReason, method: string | undefined) => {
      door.metrics.forwardRefused.inc({ reason });
      door.log.warn(
        { requestId, upstream: upstream ?? FEDERATED_LABEL, method: quoted(method), principal: principalHash(principal), reason },
        'forwarded request refused by the internal hop',
      );
    };
    const admit: HopGate = async (method, params) => {
      const refused = await hopRefusal(door.hop, upstream, method, params, principal);
      if (!refused) return undefined;
      refuse(refused.reason, method);
      return refused.error;
    };
    return handleMcp({
      c,
      door,
      caller: { principal, token },
      requestId,
      track: trackerOf(door.inflight),
      // A legacy session request (initialize, a batch, a session's request) is never forwarded.
      legacy: (_clientEra, body) => {
        refuse('method', (body as { method?: string } | undefined)?.method);
        return errorResponse(
          null,
          {
            code: ErrorCode.InvalidRequest,
            message: 'Forbidden: the internal hop takes no legacy session requests; legacy sessions are not forwarded between replicas',
          },
          403,
        );
      },
      hop: admit,
    });
  };
  app.post(`${FORWARD_PREFIX}:name`, forwardedIn);
  if (door.federation) app.post(FORWARD_FEDERATED, forwardedIn);
}
