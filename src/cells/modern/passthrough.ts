/**
 * 2026-07-28 client → 2026-07-28 upstream: pass-through with no parked state.
 *
 * Each request is sent on with the client's own `_meta` envelope (its clientCapabilities limited to
 * the kinds the upstream's `input.allow` relays, its progress token replaced by one of the
 * gateway's), and the answer comes back as the upstream gave it, with these exceptions:
 *
 * - `input_required` (MCP 2026-07-28 basic/patterns/mrtr): the upstream's `requestState` travels
 *   inside the gateway's own sealed state, bound like a bridge state to principal, upstream,
 *   method, name and a digest of the arguments, single use and short-lived, so one caller cannot
 *   replay another's state through the gateway; on the retry the upstream gets its own state back
 *   byte for byte. Form elicitations that ask for secrets are held back from the client (unless
 *   `input.allowSecrets`) and answered `decline` on the retry.
 * - Tasks (io.modelcontextprotocol/tasks): the upstream's taskId is shown to the client bound to
 *   its principal and the upstream (see {@link TaskIdBinder}); `tasks/get|update|cancel` unwrap it.
 * - `-32021` from the upstream describes the gateway's hop: it is answered as the client's own
 *   missing capability, or as -32603 when the gateway's input policy withheld that capability
 *   (`capabilityError`, src/protocol/capabilities.ts, which the reverse bridge shares).
 * - The client's `Mcp-Param-*` headers go on with the request (the upstream checks them against its
 *   tools' `x-mcp-header` annotations); its `-32020` on a `tools/call` is answered as the client's
 *   own header mismatch (HTTP 400). Any other `-32020` or `-32022` means the upstream refused the
 *   gateway's hop: -32603.
 * - An HTTP 4xx with -32000 or -32001 is how a session-based legacy server refuses a request
 *   without its `Mcp-Session-Id`: -32603 `protocol` (with `protocol: "auto"`, the era is asked again).
 * - A `cacheScope: "public"` result becomes `"private"` when the upstream receives per-caller
 *   credentials (`ctx.credential`: a forwarded, exchanged or user-granted token), so no cache
 *   shares it across principals. Its headers go on the request's hop; a stdio upstream (one child
 *   for every caller) cannot carry a per-caller credential: -32603 `upstream-authorization`.
 */
import type { UpstreamConfig } from '../../config/schema.js';
import { digestOf, INVALID_STATE, type StateClaims, type StateSealer, type TaskIdBinder } from '../../security/seal.js';
import type { CallContext } from '../../protocol/connection.js';
import { allowedCapabilities, capabilityError } from '../../protocol/capabilities.js';
import { ErrorCode, GatewayError, invalidParams, upstreamFailed, withoutMcpPrefix } from '../../protocol/errors.js';
import type { ValidatedRequest } from '../../protocol/envelope.js';
import { EXCHANGE_METHODS, META_CLIENT_CAPABILITIES, PARAM_HEADER_PREFIX, TASK_METHODS, type InputRequest } from '../../protocol/wire.js';
import type { Logger } from '../../observability/log.js';
import { noteInputRound, recordInputRound } from '../../observability/tracing.js';
import { predatesLedger, type SpentStates } from '../../store/shared.js';
import { secretFields } from '../../security/secrets.js';
import { TASK_NOT_FOUND } from '../../protocol/tasks.js';
import { ModernHopError, type ModernResponse, type ModernUpstream } from '../../upstream/modern.js';
import { unreachableText } from '../../upstream/start-errors.js';

/** The upstream a pass-through request goes to (the router's `Upstream` fits). */
export interface PassThroughUpstream {
  readonly name: string;
  readonly cfg: UpstreamConfig;
  readonly modern: ModernUpstream | undefined;
}

/**
 * The codes a legacy Streamable HTTP server answers (with HTTP 400 / 404) to a request without a
 * valid `Mcp-Session-Id`: -32000 "Bad Request: …" and -32001 "Session not found" (the v1 SDK's).
 */
const LEGACY_SESSION_REQUIRED = -32000;
const LEGACY_SESSION_NOT_FOUND = -32001;

/** Most rounds the gateway answers on its own (secret forms declined) before giving up. */
const MAX_OWN_ROUNDS = 10;

let nextToken = 1;

/**
 * The client's `Mcp-Param-*` headers as they go on to the upstream: the validated request keys them
 * by the lower-cased name after the prefix; on the wire they carry the prefix again, values as sent.
 */
function paramHeadersOnWire(params: Record<string, string> | undefined): Record<string, string> | undefined {
  if (!params || Object.keys(params).length === 0) return undefined;
  return Object.fromEntries(Object.entries(params).map(([name, value]) => [PARAM_HEADER_PREFIX + name, value]));
}

/**
 * What a request of a 2026-07-28 stdio upstream with a per-caller credential gets (a call, or a
 * `subscriptions/listen`): -32603 `upstream-authorization`, since its one child serves every caller.
 */
export function sharedChildRefusal(upstream: string): GatewayError {
  return upstreamFailed(
    upstream,
    'upstream-authorization',
    `Upstream '${upstream}' is a 2026-07-28 stdio server with one child for every caller: it cannot carry each user's own credential`,
  );
}

/** Relays 2026-07-28 requests to 2026-07-28 upstreams. */
export class ModernPassThrough {
  constructor(
    private readonly sealer: StateSealer,
    private readonly ledger: SpentStates,
    private readonly binder: TaskIdBinder,
    private readonly ttlMs: number,
    private readonly log: Logger,
  ) {}

  /**
   * Serves one validated request from a 2026-07-28 upstream.
   * @returns the result to answer (always with `resultType`).
   * @throws GatewayError: the upstream's own error (its code, message and data; -32601 with HTTP
   *   404); -32602 for an invalid, replayed or foreign requestState or taskId; -32021 (HTTP 400)
   *   for a client capability the upstream needs; -32020 (HTTP 400) for a `tools/call` whose
   *   `Mcp-Param-*` headers the upstream found missing, malformed or not matching the arguments; -32603 with `data.reason` when the upstream cannot
   *   be reached, crashed, timed out, or the gateway's policy withholds what it needs.
   */
  async handle(
    up: PassThroughUpstream,
    req: ValidatedRequest,
    ctx: CallContext & { paramHeaders?: Record<string, string> },
  ): Promise<Record<string, unknown>> {
    if (!up.modern)
      throw upstreamFailed(up.name, 'protocol', `Upstream '${up.name}' cannot be reached as a 2026-07-28 server over ${up.cfg.transport}`);
    const method = req.method;
    let params: Record<string, unknown> = { ...req.params };
    const exchange = (EXCHANGE_METHODS as readonly string[]).includes(method);
    const name = exchange ? String(method === 'resources/read' ? params.uri : params.name) : '';
    const binding = { up: up.name, sub: ctx.principal, m: method, n: name, d: exchange ? digestOf(params.arguments) : '' };
    const started = performance.now();
    /** Input rounds the client answered before this request. */
    let round = 0;

    if (exchange && params.requestState !== undefined) {
      const claims = await this.sealer.open(params.requestState);
      if (
        !claims.pt ||
        claims.rp ||
        claims.cs ||
        claims.up !== binding.up ||
        claims.sub !== binding.sub ||
        claims.m !== binding.m ||
        claims.n !== binding.n ||
        claims.d !== binding.d
      ) {
        throw invalidParams(INVALID_STATE);
      }
      round = claims.rnd;
      noteInputRound(round);
      const answers = params.inputResponses;
      if (answers !== undefined && (answers === null || typeof answers !== 'object' || Array.isArray(answers))) {
        throw invalidParams('inputResponses must be an object mapping input keys to responses');
      }
      if (predatesLedger(this.ledger, claims.iat) || !(await this.ledger.spend(claims.jti, claims.expMs)))
        throw invalidParams(INVALID_STATE);
      const { requestState: _rs, inputResponses: _ir, ...rest } = params;
      const merged = { ...((answers as Record<string, unknown> | undefined) ?? {}), ...claims.pre };
      params = {
        ...rest,
        ...(Object.keys(merged).length ? { inputResponses: merged } : {}),
        ...(claims.us !== undefined ? { requestState: claims.us } : {}),
      };
    }
    if ((TASK_METHODS as readonly string[]).includes(method)) {
      const taskId = this.binder.unwrap(up.name, ctx.principal, String(params.taskId));
      if (taskId === undefined) throw invalidParams(TASK_NOT_FOUND);
      params.taskId = taskId;
    }

    for (let own = 0; ; own++) {
      const answer = await this.send(up, req, params, ctx);
      if ('error' in answer) throw this.translate(up, req, answer);
      const result: Record<string, unknown> = { ...answer.result };
      result.resultType ??= 'complete';
      if (result.resultType === 'input_required' && exchange) {
        const { shown, declined } = this.secretGuard(up, result.inputRequests as Record<string, InputRequest> | undefined);
        if (Object.keys(shown).length === 0 && Object.keys(declined).length > 0 && own < MAX_OWN_ROUNDS) {
          // Only forms the guard holds back: answer them and go on, without the client.
          const { inputResponses: _i, requestState: _s, ...rest } = params;
          params = {
            ...rest,
            inputResponses: declined,
            ...(typeof result.requestState === 'string' ? { requestState: result.requestState } : {}),
          };
          continue;
        }
        const claims: StateClaims = {
          ...binding,
          ex: '',
          rep: '',
          rnd: round + 1,
          keys: Object.keys(shown),
          jti: crypto.randomUUID(),
          expMs: Date.now() + this.ttlMs,
          pt: true,
          ...(typeof result.requestState === 'string' ? { us: result.requestState } : {}),
          ...(Object.keys(declined).length ? { pre: declined } : {}),
        };
        const sealed = await this.sealer.seal(claims);
        recordInputRound({ start: started, round: round + 1, upstream: up.name, method, name, inputRequests: shown, mode: 'pass-through' });
        return { ...result, inputRequests: shown, requestState: sealed };
      }
      if (result.resultType === 'task' && typeof result.taskId === 'string')
        result.taskId = this.binder.wrap(up.name, ctx.principal, result.taskId);
      if (method === 'tasks/get' && typeof result.taskId === 'string')
        result.taskId = this.binder.wrap(up.name, ctx.principal, result.taskId);
      if (result.cacheScope === 'public' && ctx.credential) result.cacheScope = 'private';
      return result;
    }
  }

  /** Sends one request with the client's envelope (policy-limited capabilities, the gateway's progress token). */
  private async send(
    up: PassThroughUpstream,
    req: ValidatedRequest,
    params: Record<string, unknown>,
    ctx: CallContext & { paramHeaders?: Record<string, string> },
  ): Promise<ModernResponse> {
    const meta: Record<string, unknown> = { ...req.meta };
    meta[META_CLIENT_CAPABILITIES] = allowedCapabilities(req.clientCapabilities as Record<string, unknown>, up.cfg.input.allow);
    if (req.progressToken !== undefined) meta.progressToken = `gw-progress-${nextToken++}`;
    const credential = ctx.credential;
    if (credential && up.cfg.transport === 'stdio') throw sharedChildRefusal(up.name);
    const started = performance.now();
    try {
      return await up.modern!.request(
        req.method,
        { ...params, _meta: meta },
        {
          signal: ctx.connection.signal,
          idleMs: up.cfg.timeouts.requestMs,
          principal: ctx.principal,
          headers: paramHeadersOnWire(ctx.paramHeaders),
          ...(credential ? { hopHeaders: { ...credential.headers } } : {}),
          onNotification: (n) => {
            if (n.method === 'notifications/progress' && n.params) {
              const {
                progressToken: _t,
                _meta: _m,
                ...p
              } = n.params as { progress: number; total?: number; message?: string; progressToken?: unknown; _meta?: unknown };
              ctx.onProgress?.(p);
            } else ctx.onNotification?.(n);
          },
        },
      );
    } catch (e) {
      if (e instanceof ModernHopError) {
        const what =
          e.reason === 'cancelled'
            ? 'The client closed the request; the upstream call was cancelled'
            : e.reason === 'shutting-down'
              ? 'gateway shutting down'
              : e.reason === 'timeout'
                ? `Upstream '${up.name}' timed out: ${e.message}`
                : e.reason === 'unreachable'
                  ? unreachableText(up.name, e.message, e.stderr)
                  : `Upstream '${up.name}' failed: ${e.message}`;
        const err = upstreamFailed(up.name, e.reason, what, e.stderr.length ? { stderr: e.stderr } : undefined);
        err.upstreamStatus = e.status;
        throw err;
      }
      throw e;
    } finally {
      if (ctx.timing) ctx.timing.upstreamMs += performance.now() - started;
    }
  }

  /** Splits input requests into those shown to the client and declines for forms asking secrets. */
  private secretGuard(
    up: PassThroughUpstream,
    requests: Record<string, InputRequest> | undefined,
  ): { shown: Record<string, InputRequest>; declined: Record<string, Record<string, unknown>> } {
    const shown: Record<string, InputRequest> = {};
    const declined: Record<string, Record<string, unknown>> = {};
    for (const [key, r] of Object.entries(requests ?? {})) {
      const secret =
        !up.cfg.input.allowSecrets && r.method === 'elicitation/create' && r.params?.mode !== 'url'
          ? secretFields(r.params?.requestedSchema)
          : [];
      if (secret.length) {
        this.log.warn({ upstream: up.name, key, fields: secret }, 'form asks for secrets: declined upstream, not forwarded to the client');
        declined[key] = { action: 'decline' };
      } else shown[key] = r;
    }
    return { shown, declined };
  }

  /** The downstream error for the upstream's error answer. */
  private translate(
    up: PassThroughUpstream,
    req: ValidatedRequest,
    answer: { error: { code: number; message: string; data?: unknown }; httpStatus?: number },
  ): GatewayError {
    const { code, data } = answer.error;
    const message = withoutMcpPrefix(String(answer.error.message));
    if (code === ErrorCode.MissingRequiredClientCapability)
      return capabilityError(up.name, data, req.clientCapabilities as Record<string, unknown>);
    if (code === ErrorCode.MethodNotFound) return new GatewayError(code, message, data, 404);
    if (
      (code === LEGACY_SESSION_REQUIRED || code === LEGACY_SESSION_NOT_FOUND) &&
      answer.httpStatus !== undefined &&
      answer.httpStatus >= 400 &&
      answer.httpStatus < 500 &&
      answer.httpStatus !== 401 &&
      answer.httpStatus !== 403
    ) {
      // How a session-based (legacy) Streamable HTTP server refuses a request without its session:
      // the upstream is not, or no longer, a 2026-07-28 server. A 401 or 403 is a refused
      // credential whatever its code, answered below.
      return upstreamFailed(
        up.name,
        'protocol',
        `Upstream '${up.name}' answered as a legacy server that wants a session (HTTP ${answer.httpStatus}: ${message})`,
      );
    }
    if (code === ErrorCode.HeaderMismatch && req.method === 'tools/call') {
      // The hop derives MCP-Protocol-Version, Mcp-Method and Mcp-Name from the body it relays, which
      // keeps the client's method, name and arguments; the Mcp-Param-* headers are the client's own,
      // relayed as sent. A mismatch the upstream finds on a tools/call is the client's.
      return new GatewayError(code, message, data, 400);
    }
    if (code === ErrorCode.HeaderMismatch || code === ErrorCode.UnsupportedProtocolVersion) {
      return upstreamFailed(up.name, 'protocol', `Upstream '${up.name}' refused the gateway's request: ${message}`);
    }
    if (code === ErrorCode.InvalidParams && answer.httpStatus === 400) return new GatewayError(code, message, data, 400);
    const err = new GatewayError(code, message, data);
    if (answer.httpStatus === 401 || answer.httpStatus === 403) err.upstreamStatus = answer.httpStatus;
    return err;
  }
}
