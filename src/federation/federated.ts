/**
 * The federated endpoint seen as one 2026-07-28 upstream, for legacy clients on `POST /mcp`.
 *
 * A legacy client's session on `/mcp` is served by the reverse bridge (src/cells/reverse/reverse.ts), as
 * a legacy client of a 2026-07-28 upstream at `/mcp/NAME` is. The bridge sends each request as a
 * stateless 2026-07-28 request with the envelope it builds from the session; here that request
 * passes the same envelope checks as a request on the wire (src/protocol/envelope.ts) and goes to
 * the federation layer, which routes it to its upstream through the router. `input_required`
 * results (with the gateway's sealed `requestState`) go back to the bridge, which asks the client
 * with real server-initiated requests and retries, exactly as with a 2026-07-28 upstream.
 *
 * Members with per-user credentials get the credential of the session's caller (the router
 * resolves it from the principal and token the hop carries). A member that needs the user's
 * consent (`oauth`) answers a call with a consent round (url-mode `elicitation/create`), which the
 * bridge asks the client with an `elicitationId`; when the client did not declare url mode, the
 * hop declares it for the client on `tools/call`, `prompts/get` and `resources/read`, so that the
 * round comes back and the bridge answers -32042 (URLElicitationRequired) with the consent URL.
 * After the client accepted, the retry waits for the user's grant (`credentials.consentWaitMs`)
 * and the client gets `notifications/elicitation/complete`.
 * The lists leave such a member out until the user consented (logged by the federation layer).
 */
import { validateRequest } from '../protocol/envelope.js';
import { ErrorCode, GatewayError } from '../protocol/errors.js';
import { EXCHANGE_METHODS, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION, TASK_METHODS } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import type { ModernCallOptions, ModernResponse, ModernUpstream } from '../upstream/modern.js';
import { FEDERATED_LABEL, type Federation, type MemberGate } from './federation.js';
import { ClientConnection, type RequestOrigin } from '../protocol/connection.js';
import { ReverseRelay } from '../cells/reverse/reverse.js';
import { INPUT_KINDS } from '../config/schema.js';
import type { LegacyRelay } from '../upstream/legacy-relay.js';
import type { RelayCaller, RelayHooks } from '../router/relays.js';

let nextId = 1;

/**
 * The MCP request headers a conforming 2026-07-28 client sends with this body (Streamable HTTP
 * §"Standard Request Headers"): `MCP-Protocol-Version`, `Mcp-Method`, and `Mcp-Name` for the
 * methods that name something (always `=?base64?…?=`, which carries any UTF-8).
 */
function headersOf(method: string, params: Record<string, unknown>): Headers {
  const meta = (params._meta ?? {}) as Record<string, unknown>;
  const headers = new Headers({ 'mcp-method': method });
  if (typeof meta[META_PROTOCOL_VERSION] === 'string') headers.set('mcp-protocol-version', meta[META_PROTOCOL_VERSION]);
  const name =
    method === 'resources/read'
      ? params.uri
      : method === 'tools/call' || method === 'prompts/get'
        ? params.name
        : (TASK_METHODS as readonly string[]).includes(method)
          ? params.taskId
          : undefined;
  if (typeof name === 'string') headers.set('mcp-name', `=?base64?${Buffer.from(name, 'utf8').toString('base64')}?=`);
  return headers;
}

/**
 * `params` whose envelope declares url-mode elicitation: the reverse bridge answers a url-mode
 * request for a client without it with -32042 (src/cells/reverse/reverse.ts).
 */
function withUrlElicitation(params: Record<string, unknown>): Record<string, unknown> {
  const meta = (params._meta ?? {}) as Record<string, unknown>;
  const caps = (meta[META_CLIENT_CAPABILITIES] ?? {}) as { elicitation?: Record<string, unknown> };
  if (caps.elicitation?.url !== undefined) return params;
  // An empty `elicitation` declares form mode (2025-11-25): it stays declared.
  const declared = caps.elicitation && Object.keys(caps.elicitation).length > 0 ? caps.elicitation : caps.elicitation && { form: {} };
  const elicitation = { ...declared, url: {} };
  return { ...params, _meta: { ...meta, [META_CLIENT_CAPABILITIES]: { ...caps, elicitation } } };
}

/** The federated endpoint as the reverse bridge's 2026-07-28 upstream, for one caller. */
export class FederatedHop implements ModernUpstream {
  /**
   * @param caller the session's principal and bearer token (for members with `forwardAuthorization`).
   * @param gate the front door's check of each client request routed to one member (its limits);
   *   the bridge's retries of a round (with `requestState`) are the same request and pass it once.
   */
  constructor(
    private readonly federation: Federation,
    private readonly caller: { principal: string; token?: string },
    private readonly log: Logger,
    private readonly gate?: MemberGate,
  ) {
    this.consent = federation.members.some((m) => m.cfg.credentials.mode === 'oauth');
  }

  /** Whether a member may ask for the user's consent (an `oauth` member). */
  private readonly consent: boolean;

  /** How the session's requests arrived (the router's audit lines); unset: no audit lines. */
  origin: (() => RequestOrigin) | undefined;

  /**
   * Serves one 2026-07-28 request (`params` with its `_meta` envelope) on the federated endpoint.
   * Progress (when `_meta.progressToken` is set) and `notifications/message` reach
   * `opts.onNotification`; `opts.signal` cancels the call. `opts.idleMs` and `opts.hopHeaders` are
   * not used: each member's own timeouts and `forwardAuthorization` apply behind the router.
   * @returns the result, or the JSON-RPC error the federated endpoint would answer (with its HTTP
   *   status: 400 / -32602 for a bad envelope, 404 / -32601 for a method it does not serve, …).
   */
  async request(method: string, params: Record<string, unknown>, opts: ModernCallOptions = {}): Promise<ModernResponse> {
    const notify = opts.onNotification;
    if (this.consent && (EXCHANGE_METHODS as readonly string[]).includes(method)) params = withUrlElicitation(params);
    try {
      const req = validateRequest({ jsonrpc: '2.0', id: `fed-hop-${nextId++}`, method, params }, headersOf(method, params));
      const token = req.progressToken;
      const result = await this.federation.handle(req, {
        principal: this.caller.principal,
        token: this.caller.token,
        connection: ClientConnection.following(opts.signal),
        onProgress:
          notify && token !== undefined
            ? (p) => notify({ method: 'notifications/progress', params: { ...p, progressToken: token } })
            : undefined,
        onNotification: notify,
        paramHeaders: req.paramHeaders,
        ...(this.origin ? { origin: this.origin() } : {}),
        memberGate: params.requestState === undefined ? this.gate : undefined,
      });
      return { result };
    } catch (e) {
      if (e instanceof GatewayError) return { error: e.toJSON(), httpStatus: e.httpStatus };
      this.log.warn({ method, err: e instanceof Error ? e.message : String(e) }, 'federated request of a legacy session failed');
      return {
        error: {
          code: ErrorCode.InternalError,
          message: `The federated endpoint could not serve ${method}: ${e instanceof Error ? e.message : String(e)}`,
        },
      };
    }
  }

  /** Nothing to end: each request holds its upstream resources only while it runs. */
  async close(): Promise<void> {}
}

/**
 * The relay of a legacy client session on the federated `POST /mcp`: the reverse bridge over a
 * {@link FederatedHop}. Every input kind is relayed and no tool left out here, since each federated
 * upstream's own `input.allow`, `tools`, timeouts and `forwardAuthorization` apply behind the router.
 * `gate` checks each request routed to one member (the caller's limits of that upstream); its
 * refusal reaches the client as the JSON-RPC error it rejects with.
 */
export function federatedRelay(
  federation: Federation,
  upstream: string,
  who: RelayCaller,
  hooks: RelayHooks,
  gate?: MemberGate,
): LegacyRelay {
  const hop = new FederatedHop(federation, who, hooks.log.child({ component: 'federation' }), gate);
  const relay = new ReverseRelay({
    upstream,
    inputAllow: INPUT_KINDS,
    modern: hop,
    urlAccepted: (state, signal) => federation.consentGranted(state, who.principal, signal),
    downstream: hooks.downstream,
    log: hooks.log.child({ component: 'reverse' }),
    onRequest: hooks.onRequest,
    closeStreamAfterMs: hooks.closeStreamAfterMs,
    // A listen would hold an upstream session of every legacy member for each legacy session here.
    notifications: false,
  });
  // Each member call gets its audit line from the router, as the session's client sent it.
  hop.origin = () => ({ era: relay.negotiated ?? 'legacy', transport: hooks.transport ?? 'streamable-http', endpoint: FEDERATED_LABEL });
  return relay;
}
