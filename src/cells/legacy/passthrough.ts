/**
 * Legacy client → legacy server: one downstream legacy session relayed onto one upstream session of
 * its own, message for message (MCP 2024-11-05 … 2025-11-25).
 *
 * The client's `initialize` opens the upstream session and is sent on as it is (its capabilities
 * limited to the kinds the upstream's `input.allow` relays), so the upstream negotiates the revision
 * and sees the client's own capabilities. From then on every message passes through unchanged:
 * requests and their responses keep the client's ids, server-initiated requests (`elicitation/create`,
 * `sampling/createMessage`, `roots/list`, `ping`) reach the client as real requests under the
 * upstream's own ids and the client's responses go back under them, and notifications (progress,
 * `notifications/cancelled`, `notifications/message`, list changes, `notifications/resources/updated`)
 * flow both ways. The one downstream session owns the upstream session, so nothing is shared
 * between clients.
 *
 * Where a server-initiated message goes downstream: a progress notification to the request whose
 * `progressToken` it carries; anything else to the one client request in flight when there is
 * exactly one (its POST stream), else to the client's standalone stream (GET), else to the oldest
 * request in flight.
 *
 * SSE polling (SEP-1699): with `closeStreamAfterMs`, the relay closes the SSE stream of a client
 * request still in flight that long after it arrived (through the transport's `closeSSEStream`,
 * which it offers only for clients that can resume). The client resumes the stream with
 * `Last-Event-ID`, gets what was sent meanwhile from the session's event store, and the rest on
 * the resumed stream, which stays open. Once only: the v1 SDK client resumes a stream from the
 * last event it saw on that very stream, so a resumed stream closed before it carried an event
 * would leave the client with nothing to resume from. A stdio upstream has no way to ask for a
 * close itself, so the gateway decides, by time alone.
 *
 * The upstream's `tools` policy and the tool-name rules apply (src/upstream/tool-policy.ts): tools
 * the gateway does not serve are left out of `tools/list` results, and a `tools/call` of one is
 * answered -32602 without reaching the upstream.
 *
 * A `sampling/createMessage` the upstream's `sampling` mode gives to the gateway's provider
 * (provider mode, or fallback mode for a client that cannot answer it) never reaches the client:
 * the relay answers it upstream with the provider's result or error.
 *
 * With tracing on, each client request gets a SERVER span (its parent from the request's
 * `params._meta` or HTTP headers) and a CLIENT span for the relayed request, whose context goes to
 * an HTTP upstream in the request's headers; the message itself is relayed unchanged.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../../config/schema.js';
import { ErrorCode, reasonOf, UpstreamProtocolError, UpstreamRequestLost } from '../../protocol/errors.js';
import type { Logger } from '../../observability/log.js';
import {
  endSpan,
  startClientSpan,
  startServerSpan,
  tracingActive,
  within,
  type Outcome,
  type PlainHeaders,
  type Traced,
} from '../../observability/tracing.js';
import { featureOf, toolLabel, UNKNOWN_TOOL, type CallTally, type Census, type DeprecatedFeature } from '../../observability/census.js';
import { secretFields } from '../../security/secrets.js';
import type { HttpHop } from '../../upstream/http.js';
import { createLegacyTransport, isSessionNotFound } from '../../upstream/legacy-transport.js';
import { refusalStatus, startFailureText, stderrSummary, withTimeout } from '../../upstream/start-errors.js';
import { HttpClientTransport } from '../../upstream/http-transport.js';
import { StderrTail, type StdioChild } from '../../upstream/stdio-child.js';
import { downstreamError, URL_ELICITATION_REQUIRED } from '../../upstream/failures.js';
import { INPUT_KIND_OF } from '../../protocol/capabilities.js';
import type { RequestId } from '../../protocol/wire.js';
import { armStreamClose } from '../../upstream/legacy-relay.js';
import type { ClientMessageExtra, DownstreamTransport, LegacyRelay, RelayedRequest } from '../../upstream/legacy-relay.js';
import { SamplingError } from '../../sampling/errors.js';
import { servedToolList, toolCallRefusal } from '../../upstream/tool-policy.js';
import { samplingModeFor, samplingRoute, upstreamSamplingCapability } from '../../sampling/mode.js';
import type { Sampler } from '../../sampling/sampler.js';
import { secretRedactor } from '../../security/redact.js';

type Message = { jsonrpc: '2.0'; id?: RequestId; method?: string; params?: Record<string, unknown>; result?: unknown; error?: unknown };

/** What a pass-through relay needs. */
export interface PassThroughInit {
  upstream: string;
  cfg: UpstreamConfig;
  downstream: DownstreamTransport;
  log: Logger;
  http?: HttpHop;
  /** Extra headers for the upstream hop (the caller's credential, src/router/relays.ts). */
  extraHeaders?: Record<string, string>;
  /** The upstream refused the caller's credential (HTTP 401/403) on request `id`: true if the callee answers it. Unset: a failure. */
  onRefused?: (id: RequestId, method: string, status: number) => boolean;
  /** The upstream connection ended: the downstream session must end too. */
  onUpstreamEnd: (reason: string) => void;
  /** Called for each relayed request when its response went back. */
  onRequest?: (r: RelayedRequest) => void;
  /** Called when the secret guard declined a form. */
  onSecretDeclined?: () => void;
  /** Called for each tool left out of a `tools/list` result because its name breaks the tool-name rules (`problem` says how). */
  onToolDropped?: (name: string, problem: string) => void;
  /** SSE polling: close the stream of a request still in flight this many ms after it arrived, once (0 or unset: never). */
  closeStreamAfterMs?: number;
  /** The caller's principal (sampling budgets, metrics and logs). */
  principal: string;
  /** A stdio child spawned now is spawned for the upstream's first start (see src/upstream/stdio-child.ts). */
  installing?: boolean;
  /** The era probe's stdio child, if one waits to be used (`SessionPool.takeAdopted`): the session's initialize goes to it. */
  takeChild?: () => StdioChild | undefined;
  /** Answers `sampling/createMessage` through a provider when the upstream's `sampling` mode says so. */
  sampler?: Pick<Sampler, 'answer'>;
  /** Counts the deprecated features the session's calls use. */
  census?: Census;
}

/** The first legacy revision whose `sampling` capability has `tools` (and `context`). */
const SAMPLING_TOOLS_REVISION = '2025-11-25';

interface InFlight {
  method: string;
  name?: string;
  startedAt: number;
  progressToken?: RequestId;
  /** The timer that closes the request's SSE stream (SSE polling). */
  poll?: NodeJS.Timeout;
  /** The request's spans (downstream and relayed), while tracing. */
  trace?: { server: Traced; client?: Traced };
  /** The deprecated features this request used, once each (created on first use). */
  census?: CallTally;
}

/** 401 or 403 when `e` is the upstream refusing the hop's credential. */
const refusedCredential = (e: unknown) => (refusalStatus(e) === 401 || refusalStatus(e) === 403 ? refusalStatus(e) : undefined);
const kindOf = (m: Message) => (m.method === undefined ? 'response' : m.id === undefined ? 'notification' : 'request');

/** The relay of one legacy session. Feed it the client's messages with {@link PassThroughRelay.fromClient}. */
export class PassThroughRelay implements LegacyRelay {
  readonly kind = 'pass-through';
  private up: Transport | undefined;
  private stderr: StderrTail | undefined;
  private readonly inflight = new Map<RequestId, InFlight>();
  private readonly progressOwner = new Map<RequestId, RequestId>();
  private ended = false;
  /** The client's own `sampling` capability, when declared and relayed by `input.allow`. */
  private clientSampling: { tools?: unknown } | undefined;
  /** Upstream request ids of sampling requests the provider is answering. */
  private readonly providerCalls = new Map<RequestId, AbortController>();
  /** The revision the upstream negotiated with the client. */
  negotiated: string | undefined;
  /** The upstream child's process id (stdio). */
  pid: number | undefined;

  constructor(private readonly init: PassThroughInit) {}

  /** Number of client requests waiting for their response. */
  get inFlight(): number {
    return this.inflight.size;
  }

  /**
   * One message from the client. The first must be `initialize`: it starts the upstream.
   * Failures are answered to the client as JSON-RPC errors (-32603 with `data.upstream` and
   * `data.reason`), never thrown. `extra.closeSSEStream`, when the transport offers it for a
   * request, is what SSE polling (`closeStreamAfterMs`) calls.
   */
  async fromClient(raw: JSONRPCMessage, extra: ClientMessageExtra = {}): Promise<void> {
    const m = raw as Message;
    if (this.ended) return;
    const kind = kindOf(m);
    if (kind === 'request') {
      const params = m.params ?? {};
      const token = (params._meta as { progressToken?: RequestId } | undefined)?.progressToken;
      const poll = armStreamClose(this.init.closeStreamAfterMs, extra);
      clearTimeout(this.inflight.get(m.id!)?.poll);
      const trace = this.startTrace(m, extra.headers);
      this.inflight.set(m.id!, {
        method: m.method!,
        name: typeof params.name === 'string' ? params.name : typeof params.uri === 'string' ? params.uri : undefined,
        startedAt: performance.now(),
        progressToken: token,
        poll,
        trace,
      });
      if (token !== undefined) this.progressOwner.set(token, m.id!);
      if (m.method === 'tools/call' && params.task !== undefined) this.noteCall(m.id!, 'legacy_tasks');
      if (m.method === 'initialize') return within(trace?.client, () => this.start(m));
      const refused =
        m.method === 'tools/call' && typeof params.name === 'string' ? toolCallRefusal(this.init.cfg.tools, params.name) : undefined;
      if (refused) {
        // A tool the gateway does not serve is refused here too; nothing goes upstream (its relay span is dropped).
        if (trace) trace.client = undefined;
        return this.answerError(m.id!, refused.code, refused.message, refused.data);
      }
      return within(trace?.client, () => this.toUpstream(m));
    } else if (kind === 'notification' && m.method === 'notifications/cancelled') {
      const id = (m.params as { requestId?: RequestId } | undefined)?.requestId;
      if (id !== undefined) this.forget(id);
    }
    await this.toUpstream(m);
  }

  /** The spans of one client request: the downstream SERVER span and, as its child, the relayed CLIENT span. */
  private startTrace(m: Message, headers: PlainHeaders | undefined): InFlight['trace'] {
    if (!tracingActive()) return undefined;
    const version = m.method === 'initialize' ? String(m.params?.protocolVersion ?? '') : this.negotiated;
    const sessionId = headers?.['mcp-session-id'];
    const server = startServerSpan({
      method: m.method!,
      params: m.params,
      upstream: this.init.upstream,
      id: m.id,
      protocolVersion: version,
      meta: m.params?._meta as Record<string, unknown> | undefined,
      headers,
      sessionId: typeof sessionId === 'string' ? sessionId : undefined,
    });
    if (!server) return undefined;
    const client = within(server, () =>
      startClientSpan({
        method: m.method!,
        params: m.params,
        upstream: this.init.upstream,
        endpoint: this.init.cfg,
        id: m.id,
        protocolVersion: version,
      }),
    );
    return { server, client };
  }

  /** Ends a request's spans with its outcome. */
  private endTrace(req: InFlight | undefined, outcome: Outcome): void {
    if (!req?.trace) return;
    endSpan(req.trace.client, outcome);
    endSpan(req.trace.server, outcome);
    req.trace = undefined;
  }

  /** Spawns or connects the upstream and sends the client's initialize on. */
  private async start(m: Message): Promise<void> {
    const { cfg, log } = this.init;
    const adopted = cfg.transport === 'stdio' ? this.init.takeChild?.() : undefined;
    this.stderr = adopted ? adopted.stderrTail : cfg.transport === 'stdio' ? new StderrTail(secretRedactor(cfg.env)) : undefined;
    const up: Transport =
      adopted ?? createLegacyTransport(cfg, log, this.init.extraHeaders ?? {}, this.init.http, this.stderr, this.init.installing);
    this.up = up;
    up.onmessage = (message) => void this.fromUpstream(message as Message);
    up.onclose = () => this.end('the upstream closed the session');
    if (up instanceof HttpClientTransport) up.onrequesterror = (id, error) => this.requestFailed(id, error);
    up.onerror = (err) => {
      log.debug({ err: err.message }, 'legacy session: upstream transport error');
      if (isSessionNotFound(err) || /SSE stream disconnected|Maximum reconnection attempts|Failed to reconnect/i.test(err.message)) {
        this.end(`the upstream session was lost (${err.message})`);
      }
    };
    const params = { ...(m.params ?? {}) };
    params.capabilities = this.upstreamCapabilities(
      params.capabilities as Record<string, unknown> | undefined,
      String(params.protocolVersion ?? ''),
    );
    try {
      await withTimeout(up.start(), cfg.timeouts.connectMs, 'starting the upstream');
    } catch (e) {
      if (this.init.onRefused && refusedCredential(e)) return this.refused(m, refusedCredential(e)!);
      return this.failStart(m.id!, e as Error);
    }
    this.pid = (up as { pid?: number | null }).pid ?? undefined;
    await this.toUpstream({ ...m, params });
  }

  /**
   * The client request `id` can get no answer while the upstream session goes on (a Streamable HTTP
   * upstream broke or overfilled its POST stream, see `HttpClientTransport.onrequesterror`): the
   * client gets -32603 with `data.reason` (`protocol` or `session-lost`) at once. Returns true: a
   * request no longer in flight (the client cancelled it) has nobody waiting.
   */
  private requestFailed(id: RequestId, error: Error): boolean {
    if (!this.inflight.has(id)) return true;
    this.init.log.debug({ err: error.message, id }, 'legacy session: upstream request failed on its own stream');
    const e = downstreamError(this.init.upstream, error, { transportKind: this.init.cfg.transport });
    void this.answerError(id, e.code, e.message, e.data);
    return true;
  }

  private async failStart(id: RequestId, e: Error): Promise<void> {
    if (this.stderr) await Promise.race([this.stderr.ended, new Promise((r) => setTimeout(r, 500))]);
    const stderr = this.stderr?.get() ?? [];
    const said = stderrSummary(stderr);
    const why = startFailureText(e, this.init.cfg);
    this.init.log.warn({ err: why, ...(stderr.length ? { stderr } : {}) }, 'legacy session: upstream could not be started');
    await this.answerError(
      id,
      ErrorCode.InternalError,
      `Upstream '${this.init.upstream}' could not be started or reached: ${why}${said ? `; the process said: ${said}` : ''}`,
      {
        upstream: this.init.upstream,
        reason: 'unreachable',
        ...(stderr.length ? { stderr } : {}),
      },
    );
    this.end('the upstream could not be started');
  }

  /**
   * The client's initialize capabilities without the kinds the upstream's input policy does not
   * relay, plus `sampling` when the gateway's provider may answer it (with `tools` from revision
   * 2025-11-25, the first that has it), so the server asks even a client that declared none.
   */
  private upstreamCapabilities(caps: Record<string, unknown> | undefined, revision: string): Record<string, unknown> {
    const out = { ...(caps ?? {}) };
    for (const kind of ['elicitation', 'sampling', 'roots'] as const) if (!this.init.cfg.input.allow.includes(kind)) delete out[kind];
    this.clientSampling = out.sampling as { tools?: unknown } | undefined;
    const sampling = upstreamSamplingCapability(out.sampling as { context?: Record<string, never> } | undefined, this.init.cfg.sampling);
    if (sampling && sampling !== out.sampling) {
      const { tools, context } = sampling;
      out.sampling = revision >= SAMPLING_TOOLS_REVISION ? { ...(tools ? { tools } : {}), ...(context ? { context } : {}) } : {};
    }
    return out;
  }

  private async toUpstream(m: Message): Promise<void> {
    if (!this.up) {
      if (kindOf(m) === 'request')
        await this.answerError(m.id!, ErrorCode.InvalidRequest, 'The session is not initialized; send initialize first');
      return;
    }
    try {
      await this.up.send(m as JSONRPCMessage);
    } catch (e) {
      const err = e as Error;
      if (kindOf(m) === 'request' && this.init.onRefused && refusedCredential(err)) return this.refused(m, refusedCredential(err)!);
      if (kindOf(m) === 'request') {
        if (isSessionNotFound(err)) {
          await this.answerError(m.id!, ErrorCode.InternalError, `Upstream '${this.init.upstream}' lost the session; initialize again`, {
            upstream: this.init.upstream,
            reason: 'session-lost',
          });
        } else if (err instanceof UpstreamProtocolError || err instanceof UpstreamRequestLost) {
          // Its answer broke the protocol (a JSON body over 10 MiB, say) or broke off.
          const mapped = downstreamError(this.init.upstream, err, { transportKind: this.init.cfg.transport });
          await this.answerError(m.id!, mapped.code, mapped.message, mapped.data);
        } else {
          await this.answerError(m.id!, ErrorCode.InternalError, `Upstream '${this.init.upstream}' failed: ${err.message}`, {
            upstream: this.init.upstream,
            reason: 'unreachable',
          });
        }
        if (m.method === 'initialize') return this.failStart(m.id!, err);
      }
      if (isSessionNotFound(err)) this.end('the upstream forgot the session');
    }
  }

  /** The upstream refused the caller's credential on client request `m`: -32603 `upstream-authorization`, unless `onRefused` answers it. */
  private async refused(m: Message, status: number): Promise<void> {
    if (this.init.onRefused!(m.id!, m.method!, status)) return this.forget(m.id!);
    const why = `Upstream '${this.init.upstream}' refused the caller's credential (HTTP ${status})`;
    await this.answerError(m.id!, ErrorCode.InternalError, why, { upstream: this.init.upstream, reason: 'upstream-authorization' });
    if (m.method === 'initialize') this.end(why);
  }

  private async fromUpstream(m: Message): Promise<void> {
    const kind = kindOf(m);
    if (kind === 'response') {
      const req = this.inflight.get(m.id!);
      if (req?.method === 'initialize' && m.result) {
        this.negotiated = (m.result as { protocolVersion?: string }).protocolVersion;
        if (this.negotiated) this.up?.setProtocolVersion?.(this.negotiated);
      }
      this.endTrace(
        req,
        m.error ? { error: m.error as { code: number; message: string } } : { result: (m.result ?? {}) as Record<string, unknown> },
      );
      if (req && (m.error as { code?: number } | undefined)?.code === URL_ELICITATION_REQUIRED)
        this.noteCall(m.id!, 'url_elicitation_required');
      this.forget(m.id!);
      if (req?.method === 'tools/list' && m.result && typeof m.result === 'object') {
        const result = m.result as { tools?: unknown };
        m = { ...m, result: { ...result, tools: servedToolList(this.init.cfg.tools, result.tools, this.init.onToolDropped) } };
      }
      if (req) {
        const error = m.error as { code?: number } | undefined;
        this.init.onRequest?.({
          id: m.id,
          method: req.method,
          name: req.name,
          durationMs: performance.now() - req.startedAt,
          outcome: error ? 'error' : 'complete',
          code: error?.code,
        });
      }
      return this.toClient(m, undefined);
    }
    this.noteUse(m);
    if (kind === 'request') {
      if (m.method === 'sampling/createMessage' && this.providerAnswers(m)) return this.sampleByProvider(m);
      const refused = this.policy(m);
      if (refused) return this.answerUpstream(m.id!, refused);
      const target = this.routeFor(m);
      if (target === null) {
        return this.answerUpstream(m.id!, {
          error: { code: ErrorCode.InternalError, message: `${m.method} arrived while the client has no open stream to receive it` },
        });
      }
      return this.toClient(m, target);
    }
    if (m.method === 'notifications/cancelled') {
      // The upstream withdrew a sampling request the provider is answering: the client never saw it.
      const ctrl = this.providerCalls.get((m.params as { requestId?: RequestId } | undefined)?.requestId as RequestId);
      if (ctrl) return void ctrl.abort();
    }
    // Notifications: progress to the request that asked for it, the rest by the routing rule.
    const token =
      m.method === 'notifications/progress' ? (m.params as { progressToken?: RequestId } | undefined)?.progressToken : undefined;
    const owner = token !== undefined ? this.progressOwner.get(token) : undefined;
    if (token !== undefined && owner === undefined) return;
    return this.toClient(m, owner ?? this.routeFor(m) ?? undefined);
  }

  /** Counts `feature` once for the client request `id`, under its tool. */
  private noteCall(id: RequestId, feature: DeprecatedFeature): void {
    const req = this.inflight.get(id);
    const census = this.init.census;
    if (!req || !census) return;
    req.census ??= census.call(this.init.upstream, toolLabel(req.method, req.name));
    req.census.note(feature);
  }

  /**
   * Counts the deprecated feature a server-initiated message uses: for the one `tools/call` in
   * flight when there is exactly one, else once under `(unknown)`.
   */
  private noteUse(m: Message): void {
    const feature = this.init.census ? featureOf(m) : undefined;
    if (!feature) return;
    const calls = [...this.inflight].filter(([, r]) => r.method === 'tools/call');
    if (calls.length === 1) this.noteCall(calls[0]![0], feature);
    else this.init.census!.count(this.init.upstream, UNKNOWN_TOOL, feature);
  }

  /**
   * Whether the provider answers this `sampling/createMessage`: by the mode of the tool of the one
   * client `tools/call` in flight (when exactly one request is in flight), else the upstream's mode.
   */
  private providerAnswers(m: Message): boolean {
    return (
      samplingRoute(
        samplingModeFor(this.init.cfg.sampling, this.soleTool()),
        this.clientSampling,
        (m.params ?? {}) as { tools?: unknown },
      ) === 'provider'
    );
  }

  /** The tool of the one client request in flight, when there is exactly one and it is a `tools/call`. */
  private soleTool(): string | undefined {
    const only = this.inflight.size === 1 ? [...this.inflight.values()][0] : undefined;
    return only?.method === 'tools/call' ? only.name : undefined;
  }

  /** Answers the upstream's sampling request through the provider, with its result or its error. */
  private async sampleByProvider(m: Message): Promise<void> {
    const id = m.id!;
    const sampler = this.init.sampler;
    if (!sampler)
      return this.answerUpstream(id, {
        error: new SamplingError('invalid-request', 'No sampling provider is available for this upstream').toJSON(),
      });
    const ctrl = new AbortController();
    this.providerCalls.set(id, ctrl);
    try {
      const { _meta, task, ...params } = m.params ?? {};
      void _meta;
      void task;
      const result = await sampler.answer({
        upstream: this.init.upstream,
        cfg: this.init.cfg.sampling,
        tool: this.soleTool(),
        principal: this.init.principal,
        params,
        signal: ctrl.signal,
      });
      if (!ctrl.signal.aborted) await this.answerUpstream(id, { result });
    } catch (e) {
      const err = e instanceof SamplingError ? e : new SamplingError('provider-protocol', 'The sampling provider failed unexpectedly');
      if (!ctrl.signal.aborted || err.reason !== 'cancelled') await this.answerUpstream(id, { error: err.toJSON() });
    } finally {
      this.providerCalls.delete(id);
    }
  }

  /** The gateway's own rules for server-initiated requests; returns the answer to give upstream, or undefined to relay. */
  private policy(m: Message): { result?: unknown; error?: unknown } | undefined {
    const kind = INPUT_KIND_OF[m.method!];
    if (kind && !this.init.cfg.input.allow.includes(kind)) {
      return { error: { code: ErrorCode.MethodNotFound, message: `The gateway does not relay ${m.method} for this upstream` } };
    }
    if (m.method === 'elicitation/create' && (m.params as { mode?: string }).mode !== 'url' && !this.init.cfg.input.allowSecrets) {
      const fields = secretFields((m.params as { requestedSchema?: unknown }).requestedSchema);
      if (fields.length) {
        this.init.log.warn({ fields }, 'form asks for secrets: declined upstream, not forwarded to the client');
        this.init.onSecretDeclined?.();
        return { result: { action: 'decline' } };
      }
    }
    return undefined;
  }

  /**
   * The client request a server-initiated message goes with: the one in flight, else none (the
   * standalone stream) when the client listens there, else the oldest in flight. null: nowhere.
   */
  private routeFor(_m: Message): RequestId | undefined | null {
    const ids = [...this.inflight.keys()];
    if (ids.length === 1) return ids[0];
    const standalone = this.init.downstream.hasStandaloneStream?.();
    if (standalone !== false) return undefined;
    return ids.length ? ids[0] : null;
  }

  private async toClient(m: Message, relatedRequestId: RequestId | undefined): Promise<void> {
    try {
      await this.init.downstream.send(m as JSONRPCMessage, relatedRequestId !== undefined ? { relatedRequestId } : undefined);
    } catch (e) {
      this.init.log.debug({ err: (e as Error).message, method: m.method }, 'legacy session: message for the client could not be delivered');
      if (kindOf(m) === 'request')
        await this.answerUpstream(m.id!, { error: { code: ErrorCode.InternalError, message: 'The client could not be reached' } });
    }
  }

  private answerUpstream(id: RequestId, answer: { result?: unknown; error?: unknown }): Promise<void> {
    return (this.up?.send({ jsonrpc: '2.0', id, ...answer } as JSONRPCMessage) ?? Promise.resolve()).catch(() => {});
  }

  private async answerError(id: RequestId, code: number, message: string, data?: unknown): Promise<void> {
    const req = this.inflight.get(id);
    this.endTrace(req, { error: { code, message, data } });
    this.forget(id);
    const reason = reasonOf(data);
    if (req)
      this.init.onRequest?.({
        id,
        method: req.method,
        name: req.name,
        durationMs: performance.now() - req.startedAt,
        outcome: 'error',
        code,
        ...(reason ? { reason } : {}),
      });
    await this.init.downstream
      .send({ jsonrpc: '2.0', id, error: data === undefined ? { code, message } : { code, message, data } } as JSONRPCMessage)
      .catch(() => {});
  }

  private forget(id: RequestId): void {
    const req = this.inflight.get(id);
    this.endTrace(req, { failed: 'cancelled', message: 'The client cancelled the request' }); // still open: the client cancelled it
    if (req?.progressToken !== undefined) this.progressOwner.delete(req.progressToken);
    clearTimeout(req?.poll);
    this.inflight.delete(id);
  }

  private end(reason: string): void {
    if (this.ended) return;
    this.ended = true;
    for (const c of this.providerCalls.values()) c.abort();
    const stderr = this.stderr?.get() ?? [];
    this.init.log.info({ reason, ...(stderr.length ? { stderr: stderr.slice(-5) } : {}) }, 'legacy session: upstream ended');
    // Requests still waiting get an answer rather than hanging.
    const said = stderrSummary(stderr);
    for (const id of [...this.inflight.keys()]) {
      void this.answerError(
        id,
        ErrorCode.InternalError,
        `Upstream '${this.init.upstream}' ended the session: ${reason}${said ? `; the process said: ${said}` : ''}`,
        {
          upstream: this.init.upstream,
          reason: this.init.cfg.transport === 'stdio' ? 'crashed' : 'session-lost',
          ...(stderr.length ? { stderr } : {}),
        },
      );
    }
    this.init.onUpstreamEnd(reason);
  }

  /** Closes the upstream side (a stdio child ends; an HTTP session gets DELETE). Never throws. */
  async close(): Promise<void> {
    this.ended = true;
    for (const req of this.inflight.values()) {
      clearTimeout(req.poll);
      this.endTrace(req, { failed: 'session_closed', message: 'The session closed' });
    }
    for (const c of this.providerCalls.values()) c.abort();
    const up = this.up;
    this.up = undefined;
    if (!up) return;
    up.onclose = undefined;
    try {
      const t = up as Transport & { sessionId?: string; terminateSession?: () => Promise<void> };
      if (t.terminateSession && t.sessionId)
        await Promise.race([t.terminateSession().catch(() => {}), new Promise((r) => setTimeout(r, 1000))]);
      await up.close();
    } catch {
      /* already closed */
    }
  }
}
