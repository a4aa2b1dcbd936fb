/**
 * Legacy clients (Streamable HTTP, MCP 2025-03-26 … 2025-11-25) on the same `POST /mcp/NAME`
 * endpoint as 2026-07-28 clients.
 *
 * The client's era is chosen per request, as the 2026-07-28 versioning rules say (basic/versioning,
 * transports/streamable-http §Backward Compatibility): a request carrying the modern `_meta`
 * envelope is stateless 2026-07-28; `initialize` opens a legacy session; a request carrying a known
 * `Mcp-Session-Id` belongs to that session. A legacy session speaks the 2025-11-25 Streamable HTTP
 * transport through the v1 SDK's `WebStandardStreamableHTTPServerTransport` (SSE responses, the GET
 * stream, DELETE, resumption with `Last-Event-ID`), and relays through the relay the router
 * opens for it (`McpRouter.openRelay`: the legacy pass-through of src/cells/legacy, which owns an
 * upstream session, or the reverse bridge of src/cells/reverse) or, on the federated `/mcp`, the
 * federation layer's. Each resumable stream opens with a priming event whose `retry` field is
 * `legacySessions.retryMs`; with `legacySessions.closeStreamAfterMs`, the relay also closes the
 * stream of a request still in flight that long after it arrived (SSE polling, SEP-1699), and the
 * client resumes it.
 *
 * Clients that speak only the old HTTP+SSE transport (2024-11-05) get the same sessions at
 * `GET /mcp/NAME/sse` and `POST /mcp/NAME/message?sessionId=…` (the v1 SDK's `SSEServerTransport`).
 *
 * Session ids are 192 random bits (122 on HTTP+SSE, the SDK's UUIDs), bound to the principal and the upstream that opened them: an
 * unknown id, or one presented by another principal or on another upstream's path, gets 404 so
 * the client initializes again. Sessions end on DELETE, when the upstream session ends, after
 * `legacySessions.idleMs` without a message from the client and with nothing in flight, and at
 * shutdown. Their number is bounded overall and per caller, counted from the moment an
 * `initialize` is admitted, so initializes that arrive together cannot exceed the bounds.
 */
import { randomBytes } from 'node:crypto';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { JSONRPCMessageSchema, type JSONRPCMessage, type MessageExtraInfo } from '@modelcontextprotocol/sdk/types.js';
import type { GatewayConfig } from '../config/schema.js';
import { ErrorCode } from '../protocol/errors.js';
import { META_PROTOCOL_VERSION } from '../protocol/wire.js';
import { hasIdBeyondSafe, ID_BEYOND_SAFE } from '../protocol/envelope.js';
import type { Logger } from '../observability/log.js';
import { argumentsDigest, audited, auditOutcome, type AuditLog } from '../observability/audit.js';
import { toolCallRefusal } from '../upstream/tool-policy.js';
import type { RequestId } from '../protocol/wire.js';
import { principalHash, type Caller } from '../security/auth.js';
import { SessionEventStore } from './events.js';
import type { DownstreamTransport, LegacyRelay, RelayedRequest } from '../upstream/legacy-relay.js';
import { GatewayError } from '../protocol/errors.js';
import type { UpstreamEra } from '../router/upstream.js';
import { FEDERATED_LABEL, type Federation, type MemberGate } from '../federation/federation.js';
import type { LegacySessionInfo, LegacySessionList } from '../admin/view.js';
import { federatedRelay } from '../federation/federated.js';
import type { RelayHooks } from '../router/relays.js';
import type { McpRouter } from './router-port.js';

/**
 * A 400 / -32602 for an `initialize` whose params are not an object with a string
 * `protocolVersion`, an object `capabilities` and an object `clientInfo` (2025-11-25
 * lifecycle §Initialization), or undefined when they are.
 */
function badInitialize(body: unknown): Response | undefined {
  const init = (Array.isArray(body) ? body : [body]).find((m) => isObject(m) && m.method === 'initialize') as
    { id?: unknown; params?: unknown } | undefined;
  if (!init) return undefined;
  const p = init.params;
  const problem = !isObject(p)
    ? 'params must be an object'
    : typeof p.protocolVersion !== 'string'
      ? 'params.protocolVersion must be a string (for example "2025-11-25")'
      : !isObject(p.capabilities)
        ? 'params.capabilities must be an object'
        : !isObject(p.clientInfo)
          ? 'params.clientInfo must be an object with name and version'
          : undefined;
  if (!problem) return undefined;
  const id = typeof init.id === 'string' || typeof init.id === 'number' ? init.id : null;
  return new Response(
    JSON.stringify({ jsonrpc: '2.0', id, error: { code: ErrorCode.InvalidParams, message: `Invalid initialize request: ${problem}` } }),
    {
      status: 400,
      headers: { 'content-type': 'application/json' },
    },
  );
}

/**
 * The client's era of one POST, which says how it is served: as a legacy `initialize`, inside a legacy
 * session, or as 2026-07-28 (the upstream's era is the router's `UpstreamEra`).
 */
export type ClientEra = 'legacy-initialize' | 'legacy-session' | 'modern';

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The client's era of one POST body: a request with the modern `_meta` envelope is 2026-07-28 whatever else
 * it carries (an `Mcp-Session-Id` on it is ignored), and so is a batch of such requests (which
 * 2026-07-28 then refuses); otherwise `initialize` opens a legacy session and an `Mcp-Session-Id`
 * header (or a batch, which only legacy revisions allow) puts it in one. An empty batch is
 * 'modern', so it gets the 2026-07-28 -32600 Invalid Request.
 */
export function clientEraOf(body: unknown, sessionId: string | undefined): ClientEra {
  const messages = Array.isArray(body) ? body : [body];
  // An empty batch is an Invalid Request in every era (JSON-RPC 2.0 §6).
  if (messages.length === 0) return 'modern';
  const enveloped = (m: unknown) =>
    isObject(m) && isObject(m.params) && isObject(m.params._meta) && META_PROTOCOL_VERSION in m.params._meta;
  if (messages.length > 0 && messages.every(enveloped)) return 'modern';
  if (messages.some((m) => isObject(m) && m.method === 'initialize')) return 'legacy-initialize';
  if (sessionId !== undefined || Array.isArray(body)) return 'legacy-session';
  return 'modern';
}

/** The WebStandard transport, told whether its client holds the standalone GET stream open. */
class DownstreamHttpTransport extends WebStandardStreamableHTTPServerTransport implements DownstreamTransport {
  hasStandaloneStream(): boolean {
    // The SDK keeps the open GET stream under this id in its (private) stream map.
    const map = (this as unknown as { _streamMapping?: Map<string, unknown>; _standaloneSseStreamId?: string })._streamMapping;
    return Boolean(map?.has((this as unknown as { _standaloneSseStreamId: string })._standaloneSseStreamId));
  }
}

/** The old HTTP+SSE transport (2024-11-05): one SSE stream carries everything to the client. */
class DownstreamSseTransport extends SSEServerTransport implements DownstreamTransport {
  hasStandaloneStream(): boolean {
    return true;
  }
}

interface LegacySession {
  id: string;
  upstream: string;
  principal: string;
  owner: string;
  transport: DownstreamHttpTransport | DownstreamSseTransport;
  relay: LegacyRelay;
  lastActive: number;
  /** When the session was created (epoch ms). */
  openedAt: number;
  closing: boolean;
  /** Whether the session holds its place in the bounds: from admission until it ends (or never registers). */
  counted: boolean;
  /** Digests of the arguments of client requests in flight, by JSON-RPC id, for their audit lines. */
  digests: Map<RequestId, string>;
}

/** Who opens or uses a session, as the front door identified them. */
export interface SessionCaller extends Caller {
  /** The key limits count by: the principal, or the client address with auth none. */
  owner: string;
  requestId: string;
}

const jsonRpcError = (status: number, code: number, message: string, data?: unknown, headers: Record<string, string> = {}) =>
  new Response(JSON.stringify({ jsonrpc: '2.0', id: null, error: data === undefined ? { code, message } : { code, message, data } }), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  });

/** 400 / -32600 for a value that is not a JSON-RPC 2.0 message (JSON-RPC 2.0 §4, §5). */
const notJsonRpc = () =>
  jsonRpcError(
    400,
    ErrorCode.InvalidRequest,
    'Invalid Request: not a JSON-RPC 2.0 message (it needs "jsonrpc": "2.0" and a "method", or an "id" with "result" or "error")',
  );

/** 400 / -32600 for a message whose numeric id is past 2^53 - 1 (see {@link hasIdBeyondSafe}). */
const idBeyondSafe = () => jsonRpcError(400, ErrorCode.InvalidRequest, `Invalid Request: id ${ID_BEYOND_SAFE}`);

/** What the legacy sessions are built from. */
export interface LegacySessionDeps {
  /** The router: the upstreams (their era) and the relay of a session to one of them. */
  router: Pick<McpRouter, 'upstreams' | 'openRelay' | 'relayEra'>;
  cfg: GatewayConfig['legacySessions'];
  log: Logger;
  /** Records one relayed request (request log line and metrics). */
  record: (upstream: string, principal: string, r: RelayedRequest) => void;
  /** The federation layer behind `POST /mcp`, whose legacy sessions have the upstream {@link FEDERATED_LABEL}. */
  federation?: Federation;
  /** The audit trail: a line per relayed request (on `POST /mcp` the router writes one per member call). Default: none. */
  audit?: AuditLog;
  /** The gate of a federated session's requests routed to one member, for the caller whose limits key is `owner`. */
  memberGate?: (owner: string) => MemberGate;
}

/** The legacy sessions of a gateway. */
export class LegacySessions implements LegacySessionList {
  private readonly sessions = new Map<string, LegacySession>();
  /** Sessions each caller holds or is opening (admitted, not yet ended), by owner. */
  private readonly perOwner = new Map<string, number>();
  /** Sessions admitted whose id is not registered yet (their `initialize` is being served). */
  private admitted = 0;
  private readonly cfg: GatewayConfig['legacySessions'];
  private readonly log: Logger;
  private readonly record: LegacySessionDeps['record'];
  private readonly federation: Federation | undefined;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly deps: LegacySessionDeps) {
    this.cfg = deps.cfg;
    this.log = deps.log;
    this.record = deps.record;
    this.federation = deps.federation;
    this.sweeper = setInterval(() => this.sweep(), Math.min(this.cfg.idleMs, 1000));
    this.sweeper.unref();
  }

  /** Number of open sessions. */
  get size(): number {
    return this.sessions.size;
  }

  /**
   * The open sessions: id (the `Mcp-Session-Id`, a credential of sorts: do not show it), upstream,
   * hashed principal, downstream transport, the relay (`pass-through` to a legacy upstream,
   * `reverse` to a 2026-07-28 one), negotiated revision, upstream pid (stdio), requests in flight,
   * ms since the client's last message, and ms since the session opened.
   */
  list(): LegacySessionInfo[] {
    const now = Date.now();
    return [...this.sessions.values()].map((s) => ({
      id: s.id,
      upstream: s.upstream,
      principal: principalHash(s.principal),
      transport: s.transport instanceof DownstreamSseTransport ? ('sse' as const) : ('streamable-http' as const),
      relay: s.relay.kind,
      protocolVersion: s.relay.negotiated,
      pid: s.relay.pid,
      inFlight: s.relay.inFlight,
      idleMs: now - s.lastActive,
      ageMs: now - s.openedAt,
    }));
  }

  /** Open sessions by upstream (for metrics and the admin view). */
  countByUpstream(): { upstream: string; count: number }[] {
    const by = new Map<string, number>();
    for (const s of this.sessions.values()) by.set(s.upstream, (by.get(s.upstream) ?? 0) + 1);
    return [...by].map(([upstream, count]) => ({ upstream, count }));
  }

  /**
   * A POST whose body is (or includes) `initialize`: opens a session and its upstream session.
   * `upstream` {@link FEDERATED_LABEL} opens a session on the federated endpoint `POST /mcp`,
   * served by the reverse bridge over the federation layer.
   * @returns the transport's response (SSE with the initialize result and `Mcp-Session-Id`);
   *   400 with -32600 when the request carries the `Mcp-Session-Id` of the caller's own open
   *   session on this endpoint; 429 / 503 with -32603 `busy` when the caller's or the gateway's
   *   session bound is reached.
   */
  async initialize(upstream: string, who: SessionCaller, req: Request, body: unknown): Promise<Response> {
    if (hasIdBeyondSafe(body)) return idBeyondSafe();
    const bad = badInitialize(body);
    if (bad) return bad;
    // The SDK's own transports refuse a second initialize in a session the same way (an unknown
    // or stale id, or one of another caller, opens a new session as if it were absent).
    const id = req.headers.get('mcp-session-id')?.trim();
    const current = id ? this.sessions.get(id) : undefined;
    if (current && !current.closing && current.principal === who.principal && current.upstream === upstream) {
      return jsonRpcError(
        400,
        ErrorCode.InvalidRequest,
        'Invalid Request: this session is already initialized; send initialize without Mcp-Session-Id to open a new session',
      );
    }
    const refused = this.admit(upstream, who);
    if (refused) return refused;
    let session: LegacySession | undefined;
    try {
      const upstreamEra = upstream === FEDERATED_LABEL && this.federation ? 'federated' : await this.upstreamEraOf(upstream, who);
      if (upstreamEra instanceof Response) return upstreamEra;
      const transport = new DownstreamHttpTransport({
        sessionIdGenerator: () => randomBytes(24).toString('base64url'),
        ...(this.cfg.eventsPerSession > 0
          ? { eventStore: new SessionEventStore(this.cfg.eventsPerSession), retryInterval: this.cfg.retryMs }
          : {}),
        onsessioninitialized: (id) => this.register(session!, id),
      });
      session = this.create(upstream, who, transport, upstreamEra);
      await transport.start();
      return await transport.handleRequest(req, { parsedBody: body });
    } finally {
      // An initialize the transport refused (or that failed) opened no session: its place is free again.
      if (!session) this.release(who.owner);
      else if (!session.id) this.uncount(session);
    }
  }

  /**
   * `GET /mcp/NAME/sse`: opens a session on the old HTTP+SSE transport (2024-11-05). The stream's
   * first event names the endpoint the client POSTs to (`/mcp/NAME/message?sessionId=…`).
   * @returns undefined once the stream is open (written to `res`), or a refusal (429 / 503 / 404).
   */
  async openSse(upstream: string, who: SessionCaller, res: ServerResponse): Promise<Response | undefined> {
    const refused = this.admit(upstream, who);
    if (refused) return refused;
    let session: LegacySession | undefined;
    // The client may go away while the upstream's era is asked: its place is free at once, and its
    // stream opens no session.
    let gone = false;
    const onGone = () => {
      gone = true;
      if (!session) this.release(who.owner);
    };
    res.once('close', onGone);
    try {
      const upstreamEra = await this.upstreamEraOf(upstream, who);
      if (upstreamEra instanceof Response) return upstreamEra;
      if (gone || res.destroyed) return undefined;
      const transport = new DownstreamSseTransport(`/mcp/${upstream}/message`, res);
      session = this.create(upstream, who, transport, upstreamEra);
      await transport.start();
      this.register(session, transport.sessionId);
      return undefined;
    } finally {
      res.off('close', onGone);
      if (!session) {
        if (!gone) this.release(who.owner);
      } else if (!session.id) this.uncount(session);
    }
  }

  /**
   * `POST /mcp/NAME/message?sessionId=…` of an HTTP+SSE session (2024-11-05 transports §HTTP with
   * SSE): `body` (parsed JSON, its size, media type and depth checked) is one JSON-RPC message,
   * handed to the session's transport; its answer goes on the session's SSE stream.
   * `headers` are those of the POST (trace context for the relay).
   * @returns 202 once the message is taken; 404 / -32001 for an unknown session (or one of
   *   another principal or upstream); 400 / -32600 for a batch (this transport carries one
   *   message per POST) or a value that is not a JSON-RPC 2.0 message.
   */
  async postSse(upstream: string, who: SessionCaller, sessionId: string, headers: IncomingHttpHeaders, body: unknown): Promise<Response> {
    const s = this.sessions.get(sessionId);
    if (!s || s.closing || s.principal !== who.principal || s.upstream !== upstream || !(s.transport instanceof DownstreamSseTransport)) {
      return jsonRpcError(404, -32001, 'Session not found; open a new stream');
    }
    if (Array.isArray(body)) {
      return jsonRpcError(
        400,
        ErrorCode.InvalidRequest,
        'Invalid Request: the HTTP+SSE transport (2024-11-05) carries one JSON-RPC message per POST, not a batch; send each message in its own POST',
      );
    }
    if (hasIdBeyondSafe(body)) return idBeyondSafe();
    const message = JSONRPCMessageSchema.safeParse(body);
    if (!message.success) return notJsonRpc();
    s.lastActive = Date.now();
    // The SDK's handlePostMessage would parse Content-Type again, more strictly than the front door.
    await s.transport.handleMessage(message.data, { requestInfo: { headers } });
    return new Response('Accepted', { status: 202 });
  }

  /**
   * Admits a new session within the bounds, or says why not (a response to send). An admitted
   * session counts at once, before anything is awaited, so initializes that arrive together
   * cannot open more than the bounds allow; {@link register} keeps the place, {@link release}
   * or {@link uncount} gives it back.
   */
  private admit(upstream: string, who: SessionCaller): Response | undefined {
    if (!this.cfg.enabled) {
      return jsonRpcError(
        404,
        ErrorCode.MethodNotFound,
        'This gateway serves MCP 2026-07-28 only (legacySessions.enabled is false); send the _meta envelope instead of initialize',
      );
    }
    if ((this.perOwner.get(who.owner) ?? 0) >= this.cfg.maxSessionsPerPrincipal) {
      return jsonRpcError(
        429,
        ErrorCode.InternalError,
        `This caller holds ${this.cfg.maxSessionsPerPrincipal} legacy sessions (legacySessions.maxSessionsPerPrincipal); end one (DELETE with its Mcp-Session-Id, or close its HTTP+SSE stream) or let it go idle (legacySessions.idleMs)`,
        { upstream, reason: 'busy' },
        { 'retry-after': '1' },
      );
    }
    if (this.sessions.size + this.admitted >= this.cfg.maxSessions) {
      return jsonRpcError(
        503,
        ErrorCode.InternalError,
        `The gateway holds ${this.cfg.maxSessions} legacy sessions (legacySessions.maxSessions); retry later`,
        { upstream, reason: 'busy' },
        { 'retry-after': '5' },
      );
    }
    this.admitted++;
    this.perOwner.set(who.owner, (this.perOwner.get(who.owner) ?? 0) + 1);
    return undefined;
  }

  /** Gives back the place of an admitted session that never registered. */
  private release(owner: string): void {
    this.admitted--;
    const n = (this.perOwner.get(owner) ?? 1) - 1;
    if (n > 0) this.perOwner.set(owner, n);
    else this.perOwner.delete(owner);
  }

  /** Gives back the place of session `s` once (it never registered, or it ended). */
  private uncount(s: LegacySession): void {
    if (!s.counted) return;
    s.counted = false;
    if (s.id && this.sessions.get(s.id) === s) {
      this.sessions.delete(s.id);
      const n = (this.perOwner.get(s.owner) ?? 1) - 1;
      if (n > 0) this.perOwner.set(s.owner, n);
      else this.perOwner.delete(s.owner);
    } else this.release(s.owner);
  }

  /** The admitted session `session` has its id: it is open (its place stays taken). */
  private register(session: LegacySession, id: string): void {
    session.id = id;
    if (!session.counted) return void this.end(session, 'opened after its initialize was answered');
    this.admitted--;
    this.sessions.set(id, session);
    this.log.info(
      {
        upstream: session.upstream,
        session: id,
        transport: session.transport instanceof DownstreamSseTransport ? 'sse' : 'streamable-http',
      },
      'legacy session opened',
    );
  }

  /** The upstream's era (probed with `who`'s credential, see `McpRouter.relayEra`), or the error response when it cannot be reached to ask. */
  private async upstreamEraOf(upstream: string, who: SessionCaller): Promise<UpstreamEra | Response> {
    try {
      return await this.deps.router.relayEra(upstream, who);
    } catch (e) {
      const g = e instanceof GatewayError ? e : new GatewayError(ErrorCode.InternalError, (e as Error).message);
      return jsonRpcError(502, g.code, g.message, g.data);
    }
  }

  /**
   * A session around `transport`, with its relay from the router (the legacy pass-through or the
   * reverse bridge, by the upstream's era) or, on the federated endpoint, from the federation layer.
   */
  private create(
    upstream: string,
    who: SessionCaller,
    transport: DownstreamHttpTransport | DownstreamSseTransport,
    upstreamEra: UpstreamEra | 'federated',
  ): LegacySession {
    let session: LegacySession | undefined;
    const hooks: RelayHooks = {
      downstream: transport,
      log: this.log.child({ upstream, principal: principalHash(who.principal) }),
      onRequest: (r) => {
        this.record(upstream, who.principal, r);
        if (upstreamEra !== 'federated') this.auditLine(session!, r);
      },
      onUpstreamEnd: () => void this.end(session!, 'upstream ended'),
      closeStreamAfterMs: this.cfg.closeStreamAfterMs,
      transport: transport instanceof DownstreamSseTransport ? 'sse' : 'streamable-http',
    };
    const relay =
      upstreamEra === 'federated'
        ? federatedRelay(this.federation!, upstream, who, hooks, this.deps.memberGate?.(who.owner))
        : this.deps.router.openRelay(upstream, upstreamEra, who, hooks);
    session = this.session(upstream, who, transport, relay);
    return session;
  }

  /**
   * Keeps the audit line's digest of the arguments of a client request of `s` (`tools/call`,
   * `prompts/get`) until its record comes; a cancelled request's is dropped.
   */
  private noteDigest(s: LegacySession, message: JSONRPCMessage): void {
    // The router writes the lines of a session on the federated `/mcp`.
    if (!this.deps.audit?.enabled || s.upstream === FEDERATED_LABEL || !('method' in message)) return;
    const params = message.params as Record<string, unknown> | undefined;
    if ('id' in message) {
      const digest = argumentsDigest(message.method, params);
      if (digest !== undefined) s.digests.set(message.id, digest);
    } else if (message.method === 'notifications/cancelled') s.digests.delete(params?.requestId as RequestId);
  }

  /** The revision negotiated for the open session `sessionId` (the `era` of its audit lines), if known. */
  eraOf(sessionId: string | undefined): string | undefined {
    return sessionId === undefined ? undefined : this.sessions.get(sessionId)?.relay.negotiated;
  }

  /** The audit line of request `r` that session `s` relayed (src/observability/audit.ts). */
  private auditLine(s: LegacySession, r: RelayedRequest): void {
    const audit = this.deps.audit;
    const argsDigest = r.id === undefined ? undefined : s.digests.get(r.id);
    if (r.id !== undefined) s.digests.delete(r.id);
    if (!audit?.enabled || !audited(r.method)) return;
    // A tool the upstream's `tools` policy does not serve never reaches it: the relay refused the call.
    const tools = this.deps.router.upstreams.get(s.upstream)?.cfg.tools;
    const refused =
      r.method === 'tools/call' && r.code !== undefined && r.name !== undefined && toolCallRefusal(tools, r.name) !== undefined;
    audit.record({
      principal: s.principal,
      upstream: s.upstream,
      method: r.method,
      name: r.name,
      argsDigest,
      approval: r.approval,
      outcome: auditOutcome({ error: r.code === undefined ? undefined : { code: r.code }, approval: r.approval, refused }),
      code: r.code,
      reason: r.reason,
      durationMs: r.durationMs,
      rpcId: r.id ?? undefined,
      era: s.relay.negotiated ?? 'legacy',
      transport: s.transport instanceof DownstreamSseTransport ? 'sse' : 'streamable-http',
    });
  }

  /** The session record of `relay` over `transport`, wired: the client's messages go to the relay, the transport's end ends it. */
  private session(
    upstream: string,
    who: SessionCaller,
    transport: DownstreamHttpTransport | DownstreamSseTransport,
    relay: LegacyRelay,
  ): LegacySession {
    const s: LegacySession = {
      id: '',
      upstream,
      principal: who.principal,
      owner: who.owner,
      transport,
      relay,
      lastActive: Date.now(),
      openedAt: Date.now(),
      closing: false,
      counted: true,
      digests: new Map(),
    };
    transport.onmessage = (message: JSONRPCMessage, extra?: MessageExtraInfo) => {
      s.lastActive = Date.now();
      this.noteDigest(s, message);
      void relay.fromClient(message, { closeSSEStream: extra?.closeSSEStream, headers: extra?.requestInfo?.headers });
    };
    transport.onclose = () => void this.end(s, 'closed');
    return s;
  }

  /**
   * A request inside a session (POST, the GET stream, DELETE).
   * @returns the transport's response; 404 with -32001 "Session not found" for an unknown id, or an
   *   id of another principal or upstream; 400 with -32000 when `MCP-Protocol-Version` differs from
   *   the revision negotiated for the session; 400 with -32600 when a message of the body is not a
   *   JSON-RPC 2.0 message (the SDK's transport would call that a parse error).
   */
  async handle(upstream: string, who: SessionCaller, sessionId: string, req: Request, body?: unknown): Promise<Response> {
    const s = this.sessions.get(sessionId);
    if (!s || s.closing || s.principal !== who.principal || s.upstream !== upstream || !(s.transport instanceof DownstreamHttpTransport)) {
      return jsonRpcError(404, -32001, 'Session not found; initialize a new session');
    }
    const version = req.headers.get('mcp-protocol-version');
    if (version !== null && s.relay.negotiated && version.trim() !== s.relay.negotiated) {
      return jsonRpcError(
        400,
        -32000,
        `Bad Request: MCP-Protocol-Version ${version.trim()} differs from the revision negotiated for this session (${s.relay.negotiated})`,
      );
    }
    if (body !== undefined) {
      if (hasIdBeyondSafe(body)) return idBeyondSafe();
      if ((Array.isArray(body) ? body : [body]).some((m) => !JSONRPCMessageSchema.safeParse(m).success)) {
        return notJsonRpc();
      }
    }
    s.lastActive = Date.now();
    return s.transport.handleRequest(req, body === undefined ? undefined : { parsedBody: body });
  }

  /** Ends a session: the client's streams close and its upstream session is closed. */
  private async end(s: LegacySession, why: string): Promise<void> {
    if (s.closing) return;
    s.closing = true;
    if (s.id && this.sessions.get(s.id) === s) this.log.info({ upstream: s.upstream, session: s.id, why }, 'legacy session closed');
    // A session that ends before it registered keeps its place until its initialize is answered.
    if (s.id) this.uncount(s);
    await s.relay.close();
    await s.transport.close().catch(() => {});
  }

  private sweep(): void {
    const now = Date.now();
    for (const s of this.sessions.values()) {
      if (s.relay.inFlight === 0 && now - s.lastActive >= this.cfg.idleMs) void this.end(s, `idle for ${this.cfg.idleMs} ms`);
    }
  }

  /** Ends every session (shutdown). */
  async close(): Promise<void> {
    clearInterval(this.sweeper);
    await Promise.all([...this.sessions.values()].map((s) => this.end(s, 'gateway shutting down')));
  }
}
