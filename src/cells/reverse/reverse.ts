/**
 * Legacy client → 2026-07-28 upstream: the reverse bridge.
 *
 * The legacy client opened a session with `initialize`; the gateway answers it from the
 * upstream's `server/discover` and from then on sends each of the client's requests on as a
 * stateless 2026-07-28 request carrying an envelope built from the session (the client's declared
 * capabilities, its clientInfo, the level set with `logging/setLevel`). When the upstream answers
 * `input_required` (MCP 2026-07-28 basic/patterns/mrtr), the gateway asks the legacy client with
 * real server-initiated requests (`elicitation/create`, `sampling/createMessage`, `roots/list`, only
 * for capabilities the client declared), collects the answers and retries upstream with
 * `inputResponses` and the upstream's `requestState`, round after round, until a final result, which
 * the client receives as the answer to its original request. A declined or cancelled elicitation is
 * an answer like any other. Progress and `notifications/message` of a request reach the client on
 * that request's stream; `notifications/cancelled` from the client cancels the upstream request.
 * The upstream's `tools` policy and the tool-name rules apply (src/upstream/tool-policy.ts): tools
 * the gateway does not serve are left out of `tools/list`, and a `tools/call` of one is answered
 * -32602 without reaching the upstream. The
 * upstream's -32021 names a capability the client did not declare in `initialize` (-32021 to the
 * client), or one `input.allow` withholds (-32603 `protocol`). List changes and resource updates
 * come through the session's own `subscriptions/listen` upstream (src/cells/reverse/listen.ts),
 * opened once the client sent `notifications/initialized` and relayed on its standalone stream: the
 * `initialize` result declares `listChanged` (tools, prompts, resources) and `resources.subscribe`
 * only where the upstream's `server/discover` does; otherwise `resources/subscribe` gets -32601.
 */
import { randomUUID } from 'node:crypto';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { URL_ELICITATION_REQUIRED } from '../../upstream/failures.js';
import { LEGACY_REVISIONS, type UpstreamConfig } from '../../config/schema.js';
import { ErrorCode, reasonOf } from '../../protocol/errors.js';
import {
  META_CLIENT_CAPABILITIES,
  META_CLIENT_INFO,
  META_LOG_LEVEL,
  META_SERVER_INFO,
  PROTOCOL_VERSION,
  type InputRequest,
  type RequestId,
} from '../../protocol/wire.js';
import type { Logger } from '../../observability/log.js';
import { endSpan, startServerSpan, within } from '../../observability/tracing.js';
import { allowedCapabilities, capabilityError, missingFor, passedExtensions } from '../../protocol/capabilities.js';
import { ModernHopError, type ModernResponse, type ModernUpstream } from '../../upstream/modern.js';
import { servedToolList, toolCallRefusal } from '../../upstream/tool-policy.js';
import { listenOffer, SessionListen } from './listen.js';
import type { ToolPolicyConfig } from '../../config/globs.js';
import {
  armStreamClose,
  type ClientMessageExtra,
  type DownstreamTransport,
  type LegacyRelay,
  type RelayedRequest,
  type RelayMessage,
} from '../../upstream/legacy-relay.js';

type Message = RelayMessage;

/** Most input rounds of one request before the gateway gives up (the v2 SDK client's default). */
const MAX_ROUNDS = 10;

/** What the reverse bridge needs. */
export interface ReverseInit {
  /** The upstream's name, in error messages and `data.upstream` (`*` on the federated endpoint). */
  upstream: string;
  /** The input kinds relayed to the client (the upstream's `input.allow`); the client's other kinds are not declared upstream. */
  inputAllow: readonly string[];
  /** The upstream's `tools` policy; undefined: every tool (the federated endpoint applies each member's own behind the hop). */
  tools?: ToolPolicyConfig;
  /** Called for each tool left out of a `tools/list` result because its name breaks the tool-name rules (`problem` says how). */
  onToolDropped?: (name: string, problem: string) => void;
  /**
   * Whether the session listens upstream for list changes and resource updates (default true);
   * false: the `initialize` result declares neither, and `resources/subscribe` gets -32601.
   */
  notifications?: boolean;
  /** SSE polling: close the stream of a request still in flight this many ms after it arrived, once (0 or unset: never). */
  closeStreamAfterMs?: number;
  /** Longest silence on one request upstream, in ms (the upstream's `timeouts.requestMs`); undefined: the hop bounds it. */
  idleMs?: number;
  /** Headers of the hop on every request (the caller's credential, src/router/relays.ts); ignored on stdio. */
  hopHeaders?: Record<string, string>;
  /** The session's principal: lists and `server/discover` may then be answered from the upstream's list cache (src/upstream/list-cache.ts). */
  principal?: string;
  /**
   * The upstream refused the caller's credential (HTTP 401 or 403) while serving client request `id`
   * (its `method`): return true to answer it yourself. Unset: such a refusal is an upstream failure.
   */
  onRefused?: (id: RequestId, method: string, status: number) => boolean;
  /**
   * The client accepted the url-mode elicitations of a round whose `requestState` is `state`:
   * resolves true once what the URL was for is done (the user's consent stored), and the client
   * then gets `notifications/elicitation/complete`; false: the retry goes on at once.
   */
  urlAccepted?: (state: unknown, signal: AbortSignal) => Promise<boolean>;
  modern: ModernUpstream;
  downstream: DownstreamTransport;
  log: Logger;
  onRequest?: (r: RelayedRequest) => void;
}

/** The reverse bridge's settings of upstream `cfg` (the caller's credential goes in `hopHeaders`, src/router/relays.ts). */
export function reverseSettings(cfg: UpstreamConfig): Pick<ReverseInit, 'inputAllow' | 'tools' | 'idleMs'> {
  return { inputAllow: cfg.input.allow, tools: cfg.tools, idleMs: cfg.timeouts.requestMs };
}

/** The upstream refused the hop's credential (HTTP `status`, 401 or 403). */
class CredentialRefused extends Error {
  constructor(readonly status: number) {
    super(`HTTP ${status}`);
  }
}

interface InFlight {
  method: string;
  name?: string;
  startedAt: number;
  abort: AbortController;
  /** The timer that closes the request's SSE stream (SSE polling). */
  poll?: NodeJS.Timeout;
}

const kindOf = (m: Message) => (m.method === undefined ? 'response' : m.id === undefined ? 'notification' : 'request');

let nextId = 1;

/** The reverse bridge of one legacy session. */
export class ReverseRelay implements LegacyRelay {
  readonly kind = 'reverse';
  negotiated: string | undefined;
  readonly pid = undefined;
  /** The capabilities the client declared in `initialize` (without `tasks`), and those the upstream is told: limited by `input.allow`. */
  private declared: Record<string, unknown> = {};
  private capabilities: Record<string, unknown> = {};
  private clientInfo: unknown;
  private logLevel: string | undefined;
  private readonly inflight = new Map<RequestId, InFlight>();
  private readonly asks = new Map<RequestId, { resolve: (m: Message) => void }>();
  private closed = false;
  /** The session's listen upstream, set by a successful `initialize`. */
  private listen: SessionListen | undefined;

  constructor(private readonly init: ReverseInit) {}

  get inFlight(): number {
    return this.inflight.size;
  }

  /**
   * One message from the legacy client; requests are answered on the downstream transport, never
   * thrown. With tracing on, a request gets a SERVER span (its parent from its `params._meta` or
   * `extra.headers`), the parent of the spans of its upstream requests.
   */
  async fromClient(raw: JSONRPCMessage, extra: ClientMessageExtra = {}): Promise<void> {
    const m = raw as Message;
    if (this.closed) return;
    const kind = kindOf(m);
    if (kind === 'response') {
      this.asks.get(m.id!)?.resolve(m);
      this.asks.delete(m.id!);
      return;
    }
    if (kind === 'notification') {
      if (m.method === 'notifications/initialized') this.listen?.start();
      if (m.method === 'notifications/cancelled')
        this.inflight.get((m.params as { requestId?: RequestId } | undefined)?.requestId ?? '')?.abort.abort('cancelled');
      return;
    }
    const params = m.params ?? {};
    const entry: InFlight = {
      method: m.method!,
      name: typeof params.name === 'string' ? params.name : typeof params.uri === 'string' ? params.uri : undefined,
      startedAt: performance.now(),
      abort: new AbortController(),
      poll: armStreamClose(this.init.closeStreamAfterMs, extra),
    };
    this.inflight.set(m.id!, entry);
    const sessionId = extra.headers?.['mcp-session-id'];
    const trace = startServerSpan({
      method: m.method!,
      params,
      upstream: this.init.upstream,
      id: m.id,
      protocolVersion: m.method === 'initialize' ? String(params.protocolVersion ?? '') : this.negotiated,
      meta: params._meta as Record<string, unknown> | undefined,
      headers: extra.headers,
      sessionId: typeof sessionId === 'string' ? sessionId : undefined,
    });
    let answer: { result?: unknown; error?: Message['error'] };
    try {
      answer = await within(trace, () => this.serve(m, entry));
    } catch (e) {
      const err = e as Error;
      const reason = e instanceof ModernHopError ? e.reason : 'unreachable';
      if (e instanceof CredentialRefused && this.init.onRefused!(m.id!, m.method!, e.status)) {
        this.forget(m.id!);
        return endSpan(trace, { failed: 'upstream-authorization', message: err.message });
      }
      answer =
        e instanceof CredentialRefused
          ? { error: this.refusedError(e.status) }
          : {
              error: {
                code: ErrorCode.InternalError,
                message: `Upstream '${this.init.upstream}' failed: ${err.message}`,
                data: { upstream: this.init.upstream, reason },
              },
            };
    }
    this.forget(m.id!);
    endSpan(trace, answer.error ? { error: answer.error } : { result: (answer.result ?? {}) as Record<string, unknown> });
    const reason = reasonOf(answer.error?.data);
    this.init.onRequest?.({
      id: m.id,
      method: entry.method,
      name: entry.name,
      durationMs: performance.now() - entry.startedAt,
      outcome: answer.error ? 'error' : 'complete',
      code: answer.error?.code,
      ...(reason ? { reason } : {}),
    });
    await this.init.downstream.send({ jsonrpc: '2.0', id: m.id!, ...answer } as JSONRPCMessage).catch(() => {});
  }

  private async serve(m: Message, entry: InFlight): Promise<{ result?: unknown; error?: Message['error'] }> {
    const params = m.params ?? {};
    switch (m.method) {
      case 'initialize':
        return this.initialize(params);
      case 'ping':
        return { result: {} };
      case 'logging/setLevel':
        this.logLevel = typeof params.level === 'string' ? params.level : undefined;
        return { result: {} };
      case 'tools/call':
        if (typeof params.name === 'string') {
          const refused = toolCallRefusal(this.init.tools, params.name);
          if (refused) return { error: refused.toJSON() as NonNullable<Message['error']> };
        }
        return this.rounds(m, entry);
      case 'prompts/get':
      case 'resources/read':
        return this.rounds(m, entry);
      case 'resources/subscribe':
      case 'resources/unsubscribe':
        return this.subscription(m.method, params);
      default: {
        const r = await this.send(m.method!, params, m.id!, entry);
        if ('error' in r) return { error: this.upstreamError(r.error) };
        const result = legacyResult(r.result);
        if (m.method === 'tools/list') result.tools = servedToolList(this.init.tools, result.tools, this.init.onToolDropped);
        return { result };
      }
    }
  }

  /**
   * The upstream's error as the legacy client gets it: its own, except -32021, whose
   * requiredCapabilities are the client's to declare in `initialize` (-32021), or the gateway's
   * `input.allow` withholds (-32603 `protocol`).
   */
  private upstreamError(e: NonNullable<Message['error']>): NonNullable<Message['error']> {
    if (e.code !== ErrorCode.MissingRequiredClientCapability) return e;
    return capabilityError(this.init.upstream, e.data, this.declared, "this session's initialize capabilities").toJSON() as NonNullable<
      Message['error']
    >;
  }

  /** Answers `initialize` from the upstream's `server/discover`. */
  private async initialize(params: Record<string, unknown>): Promise<{ result?: unknown; error?: Message['error'] }> {
    const requested = String(params.protocolVersion ?? '');
    this.negotiated = (LEGACY_REVISIONS as readonly string[]).includes(requested)
      ? requested
      : LEGACY_REVISIONS[LEGACY_REVISIONS.length - 1];
    const caps = { ...((params.capabilities as Record<string, unknown> | undefined) ?? {}) };
    delete caps.tasks;
    this.declared = caps;
    this.capabilities = allowedCapabilities(caps, this.init.inputAllow);
    this.clientInfo = params.clientInfo;
    const r = await this.send('server/discover', {}, undefined, undefined);
    if ('error' in r) return { error: r.error };
    const discovered = (r.result.capabilities ?? {}) as Record<string, unknown>;
    const offer = listenOffer(this.init.notifications === false ? {} : discovered);
    const listChanged = { tools: offer.toolsListChanged, prompts: offer.promptsListChanged, resources: offer.resourcesListChanged };
    const capabilities: Record<string, unknown> = { logging: {} };
    for (const k of ['tools', 'prompts', 'resources', 'completions'] as const) {
      if (!discovered[k]) continue;
      capabilities[k] = {
        ...(k === 'resources' && offer.subscribe ? { subscribe: true } : {}),
        ...(k !== 'completions' && listChanged[k] ? { listChanged: true } : {}),
      };
    }
    const extensions = passedExtensions(discovered);
    if (extensions) capabilities.extensions = extensions;
    this.openListen(offer);
    const serverInfo = (r.result._meta as Record<string, unknown> | undefined)?.[META_SERVER_INFO] ?? {
      name: this.init.upstream,
      version: 'unknown',
    };
    return {
      result: {
        protocolVersion: this.negotiated,
        capabilities,
        serverInfo,
        ...(typeof r.result.instructions === 'string' ? { instructions: r.result.instructions } : {}),
      },
    };
  }

  /** Prepares the session's listen upstream for what the upstream offers (opened on `notifications/initialized`). */
  private openListen(offer: ReturnType<typeof listenOffer>): void {
    this.listen?.close();
    const listen = new SessionListen({
      upstream: this.init.upstream,
      modern: this.init.modern,
      offer,
      meta: () => this.envelope(),
      ...(this.init.hopHeaders ? { hopHeaders: this.init.hopHeaders } : {}),
      ackMs: this.init.idleMs,
      notify: (method, params) => {
        const note = { jsonrpc: '2.0', method, ...(Object.keys(params).length ? { params } : {}) };
        void this.init.downstream.send(note as JSONRPCMessage).catch(() => {});
      },
      log: this.init.log,
    });
    this.listen = listen.offered ? listen : undefined;
  }

  /**
   * `resources/subscribe` / `resources/unsubscribe` (`params.uri`): the session's listen upstream
   * names the URI, or no longer does. -32601 when the upstream does not offer `resources.subscribe`;
   * -32602 without a string `uri`; -32603 when the upstream did not acknowledge the URI.
   */
  private async subscription(method: string, params: Record<string, unknown>): Promise<{ result?: unknown; error?: Message['error'] }> {
    const listen = this.listen;
    if (!listen?.subscribable)
      return {
        error: {
          code: ErrorCode.MethodNotFound,
          message: `${method} is not offered: upstream '${this.init.upstream}' does not declare resources.subscribe`,
        },
      };
    if (typeof params.uri !== 'string')
      return { error: { code: ErrorCode.InvalidParams, message: `${method} needs params.uri (a string)` } };
    if (method === 'resources/unsubscribe') {
      await listen.unsubscribe(params.uri);
      return { result: {} };
    }
    if (await listen.subscribe(params.uri)) return { result: {} };
    return {
      error: {
        code: ErrorCode.InternalError,
        message: `Upstream '${this.init.upstream}' did not accept a subscription to ${params.uri}`,
        data: { upstream: this.init.upstream, reason: 'protocol' },
      },
    };
  }

  /** `tools/call`, `prompts/get`, `resources/read`: input rounds answered by the legacy client. */
  private async rounds(m: Message, entry: InFlight): Promise<{ result?: unknown; error?: Message['error'] }> {
    const base = { ...(m.params ?? {}) };
    delete base.task;
    let params: Record<string, unknown> = base;
    for (let round = 0; ; round++) {
      const r = await this.send(m.method!, params, m.id!, entry);
      if ('error' in r) return { error: this.upstreamError(r.error) };
      if (r.result.resultType !== 'input_required') return { result: legacyResult(r.result) };
      if (round >= MAX_ROUNDS)
        return {
          error: {
            code: ErrorCode.InternalError,
            message: `Upstream '${this.init.upstream}' asked for input more than ${MAX_ROUNDS} times`,
            data: { upstream: this.init.upstream, reason: 'protocol' },
          },
        };
      const requests = withElicitationIds((r.result.inputRequests ?? {}) as Record<string, InputRequest>);
      const urlRequired = this.urlRequired(requests);
      if (urlRequired) return { error: urlRequired };
      const answers: Record<string, unknown> = {};
      try {
        await Promise.all(
          Object.entries(requests).map(async ([key, request]) => {
            answers[key] = await this.ask(request, m.id!, entry.abort.signal);
          }),
        );
      } catch (e) {
        return {
          error: {
            code: ErrorCode.InternalError,
            message: (e as Error).message,
            data: { upstream: this.init.upstream, reason: 'protocol' },
          },
        };
      }
      await this.afterUrlAccepted(requests, answers, r.result.requestState, m.id!, entry.abort.signal);
      params = {
        ...base,
        ...(Object.keys(answers).length ? { inputResponses: answers } : {}),
        ...(typeof r.result.requestState === 'string' ? { requestState: r.result.requestState } : {}),
      };
    }
  }

  /**
   * Asks the legacy client one input request as a real server-initiated request on the stream of
   * request `related`, and resolves with its answer.
   * @throws Error when the client did not declare the capability, answered with an error, or the
   *   request was cancelled.
   */
  private ask(request: InputRequest, related: RequestId, signal: AbortSignal): Promise<Record<string, unknown>> {
    const missing = missingFor(this.capabilities, request);
    if (missing)
      return Promise.reject(
        new Error(`The upstream asked ${request.method}, which this client did not declare (${JSON.stringify(missing)})`),
      );
    const id = `gw-ask-${nextId++}`;
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.asks.delete(id);
        reject(new Error('The request was cancelled'));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.asks.set(id, {
        resolve: (answer) => {
          signal.removeEventListener('abort', onAbort);
          if (answer.error) reject(new Error(`The client answered ${request.method} with an error: ${answer.error.message}`));
          else resolve((answer.result ?? {}) as Record<string, unknown>);
        },
      });
      const params = request.method === 'roots/list' ? {} : urlMode(request) ? withElicitationId(request.params) : request.params;
      this.init.downstream
        .send({ jsonrpc: '2.0', id, method: request.method, params } as JSONRPCMessage, { relatedRequestId: related })
        .catch((e: Error) => {
          this.asks.delete(id);
          reject(new Error(`The client could not be asked: ${e.message}`));
        });
    });
  }

  /** After the client accepted url-mode elicitations: waits for {@link ReverseInit.urlAccepted}, then tells the client they completed. */
  private async afterUrlAccepted(
    requests: Record<string, InputRequest>,
    answers: Record<string, unknown>,
    state: unknown,
    related: RequestId,
    signal: AbortSignal,
  ): Promise<void> {
    const accepted = Object.entries(requests).filter(([k, r]) => urlMode(r) && (answers[k] as { action?: unknown })?.action === 'accept');
    if (accepted.length === 0 || !this.init.urlAccepted || !(await this.init.urlAccepted(state, signal))) return;
    for (const [, r] of accepted) {
      const note = { jsonrpc: '2.0', method: 'notifications/elicitation/complete', params: { elicitationId: r.params.elicitationId } };
      await this.init.downstream.send(note as JSONRPCMessage, { relatedRequestId: related }).catch(() => {});
    }
  }

  /**
   * -32042 (URLElicitationRequired, 2025-11-25) with the URLs in `data.elicitations` when the
   * upstream asks url-mode elicitation of a client that did not declare url mode; undefined otherwise.
   */
  private urlRequired(requests: Record<string, InputRequest>): Message['error'] {
    const urls = Object.values(requests).filter(urlMode);
    if (urls.length === 0 || (this.declared.elicitation as { url?: unknown } | undefined)?.url !== undefined) return undefined;
    return {
      code: URL_ELICITATION_REQUIRED,
      message: `Upstream '${this.init.upstream}' needs the user to open a URL first (${String(urls[0]!.params.message ?? '')}); retry after that`,
      data: { elicitations: urls.map((r) => withElicitationId(r.params)) },
    };
  }

  /** The session's 2026-07-28 `_meta` envelope: the client's capabilities (as `input.allow` limits them), clientInfo, log level. */
  private envelope(): Record<string, unknown> {
    return {
      'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
      [META_CLIENT_CAPABILITIES]: this.capabilities,
      ...(this.clientInfo ? { [META_CLIENT_INFO]: this.clientInfo } : {}),
      ...(this.logLevel ? { [META_LOG_LEVEL]: this.logLevel } : {}),
    };
  }

  /** One stateless request upstream with the session's envelope; notifications go to request `related`. */
  private send(method: string, params: Record<string, unknown>, related: RequestId | undefined, entry: InFlight | undefined) {
    const clientToken = (params._meta as { progressToken?: RequestId } | undefined)?.progressToken;
    const { _meta: _m, ...rest } = params;
    const meta: Record<string, unknown> = {
      ...this.envelope(),
      ...(clientToken !== undefined ? { progressToken: `gw-progress-r${nextId++}` } : {}),
    };
    return this.refusing(
      this.init.modern.request(
        method,
        { ...rest, _meta: meta },
        {
          signal: entry?.abort.signal,
          idleMs: this.init.idleMs,
          principal: this.init.principal,
          ...(this.init.hopHeaders ? { hopHeaders: this.init.hopHeaders } : {}),
          onNotification: (n) => {
            if (related === undefined) return;
            let note: Message | undefined;
            if (n.method === 'notifications/progress' && clientToken !== undefined) {
              note = { jsonrpc: '2.0', method: n.method, params: { ...n.params, progressToken: clientToken } };
            } else if (n.method === 'notifications/message') {
              note = { jsonrpc: '2.0', method: n.method, params: n.params };
            }
            if (note) void this.init.downstream.send(note as JSONRPCMessage, { relatedRequestId: related }).catch(() => {});
          },
        },
      ),
    );
  }

  /**
   * `answer`, unless it says the upstream refused the hop's credential (HTTP 401 or 403) and an
   * `onRefused` hook is set: then it rejects with {@link CredentialRefused}.
   */
  private async refusing(answer: Promise<ModernResponse>): Promise<ModernResponse> {
    if (!this.init.onRefused) return answer;
    let r: ModernResponse;
    try {
      r = await answer;
    } catch (e) {
      const status = e instanceof ModernHopError ? e.status : undefined;
      throw status === 401 || status === 403 ? new CredentialRefused(status) : e;
    }
    if ('error' in r && (r.httpStatus === 401 || r.httpStatus === 403)) throw new CredentialRefused(r.httpStatus);
    return r;
  }

  /** -32603 `upstream-authorization`: the upstream refused the caller's credential. */
  private refusedError(status: number): NonNullable<Message['error']> {
    return {
      code: ErrorCode.InternalError,
      message: `Upstream '${this.init.upstream}' refused the caller's credential (HTTP ${status})`,
      data: { upstream: this.init.upstream, reason: 'upstream-authorization' },
    };
  }

  /** Request `id` is over: its SSE polling timer stops. */
  private forget(id: RequestId): void {
    clearTimeout(this.inflight.get(id)?.poll);
    this.inflight.delete(id);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.listen?.close();
    for (const f of this.inflight.values()) {
      clearTimeout(f.poll);
      f.abort.abort('session closed');
    }
    for (const a of this.asks.values()) a.resolve({ jsonrpc: '2.0', error: { code: ErrorCode.InternalError, message: 'session closed' } });
    this.asks.clear();
  }
}

/** Whether `r` is a url-mode `elicitation/create`. */
const urlMode = (r: InputRequest) => r.method === 'elicitation/create' && (r.params as { mode?: unknown } | undefined)?.mode === 'url';

/** `requests` whose url-mode elicitations carry an `elicitationId`. */
function withElicitationIds(requests: Record<string, InputRequest>): Record<string, InputRequest> {
  const out: Record<string, InputRequest> = {};
  for (const [k, r] of Object.entries(requests)) out[k] = urlMode(r) ? ({ ...r, params: withElicitationId(r.params) } as InputRequest) : r;
  return out;
}

/** The params of a url-mode elicitation with the `elicitationId` 2025-11-25 requires (2026-07-28 input requests carry none). */
function withElicitationId(params: Record<string, unknown>): Record<string, unknown> {
  return typeof params.elicitationId === 'string' ? params : { ...params, elicitationId: `gw-elicitation-${randomUUID()}` };
}

/** A 2026-07-28 result as a legacy client expects it: without `resultType` and the caching hints. */
function legacyResult(result: Record<string, unknown>): Record<string, unknown> {
  const { resultType: _r, ttlMs: _t, cacheScope: _c, ...rest } = result;
  return rest;
}
