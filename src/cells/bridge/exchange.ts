/**
 * The Exchange: one legacy request (`tools/call`, `prompts/get` or `resources/read`) running on one
 * leased upstream session (docs/architecture.md, "The one idea: the Exchange").
 *
 * It turns the upstream's server-initiated `elicitation/create`, `sampling/createMessage` and
 * `roots/list` into outstanding input requests keyed for `inputRequests`, takes answers for them,
 * forwards progress, and ends with a result or a JSON-RPC error. A `sampling/createMessage` that
 * the upstream's `sampling.mode` gives to the gateway's provider is answered through the
 * Sampler instead (provider-sampling.ts). Front ends (MRTR, tasks) drive it through
 * {@link Exchange.settle}, {@link Exchange.answer} and {@link Exchange.cancel}. Beside it in this
 * folder: when a batch of input requests is complete (batching.ts), input keys and replay
 * matching (questions.ts), the `requestMs`/`totalMs` budgets (timeouts.ts), its change signal
 * (changes.ts), the legacy message shapes it translates (legacy-messages.ts) and its session
 * (call-lease.ts). A call that needs the gateway's approval (`CallContext.approval`) asks it as its
 * first input request and leases its session only once accepted.
 */
import { uniqueId } from '../../observability/ids.js';
import { McpError } from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../../config/schema.js';
import { ErrorCode, GatewayError, missingCapability, upstreamFailed } from '../../protocol/errors.js';
import type { ClientCapabilities, ExchangeMethod, InputRequest } from '../../protocol/wire.js';
import type { Logger } from '../../observability/log.js';
import { ATTR, endSpan, spanEvent, startClientSpan, traceMeta, tracingActive, within, type Traced } from '../../observability/tracing.js';
import type { CallTally } from '../../observability/census.js';
import { secretFields } from '../../security/secrets.js';
import { invalidResponse } from './responses.js';
import { learn, SPLIT_QUIET_MS, upstreamQuiet, type BatchLearning } from './batching.js';
import { toInputRequest, urlElicitations, withoutRelatedTask } from './legacy-messages.js';
import { CallTimeouts } from './timeouts.js';
import { Questions } from './questions.js';
import { Changes } from './changes.js';
import { sampleByProvider, samplingByProvider } from './provider-sampling.js';
import { digestOf, type ReplayEntry } from '../../security/seal.js';
import type { SessionPool } from '../../upstream/pool.js';
import type { CallApproval, ClientConnection, ProgressParams } from '../../protocol/connection.js';
import { INPUT_KIND_OF, missingFor } from '../../protocol/capabilities.js';
import { downstreamError, keepsSession, URL_ELICITATION_REQUIRED } from '../../upstream/failures.js';
import type { Sampler } from '../../sampling/sampler.js';
import type { CallHandlers, ServerInitiatedRequest, ServerRequestExtra } from '../../upstream/session-calls.js';
import { LooseResult, NO_TIMEOUT } from '../../upstream/session-connection.js';
import type { SessionLease } from '../../upstream/pool-lease.js';
import { CallLease } from './call-lease.js';

/** Most re-sends of one request after URL elicitations. */
const MAX_URL_ATTEMPTS = 3;

interface PendingInput {
  key: string;
  request: InputRequest;
  resolve: (value: Record<string, unknown>) => void;
  reject: (err: Error) => void;
}

/** How the Exchange ended. */
export type Outcome = { result: Record<string, unknown> } | { error: GatewayError };

/** What an Exchange needs to start. */
export interface ExchangeInit {
  upstream: string;
  cfg: UpstreamConfig;
  principal: string;
  method: ExchangeMethod;
  /** Legacy params to send upstream (no 2026 envelope, no inputResponses/requestState). */
  params: Record<string, unknown>;
  clientCapabilities: ClientCapabilities;
  pool: SessionPool;
  /** The call's session; none while it waits for the gateway's {@link approval}, which leases one once accepted. */
  lease?: SessionLease;
  /**
   * The gateway's approval (docs/approvals.md, "Tasks"): asked as the call's first input request
   * (key `ask.key`) before any session is leased; on accept `acquire` leases the session (and says
   * whether the call runs as an upstream task) and the call starts; a refusal ends it with the
   * policy's tool result, and nothing reaches the upstream.
   */
  approval?: { ask: CallApproval; acquire: () => Promise<{ lease: SessionLease; legacyTask?: { ttlMs: number } }> };
  log: Logger;
  /**
   * `inputResponses` sent with the first request (no requestState): an input request whose key
   * matches one of them is answered with it at once, without a round, if it is well-formed.
   */
  prefilled?: Record<string, unknown>;
  /** Run the call upstream as a 2025-11-25 task with this TTL (the tool declares taskSupport). */
  legacyTask?: { ttlMs: number };
  /**
   * Replay mode: the questions of the previous run with their answers, in the order they were
   * asked. The run's input requests are matched to them in that order: the n-th request gets the
   * n-th recorded answer when its digest equals the recorded one. A request whose digest differs is
   * a new question, and so is every request after it (the run took another path, so later answers
   * were given for something else); a recorded question left unanswered is asked again. Their keys
   * are never given to new questions.
   */
  replay?: ReplayEntry[];
  /** Called when the secret guard declines a form. */
  onSecretDeclined?: () => void;
  /** Answers `sampling/createMessage` through a provider when the upstream's `sampling` mode says so. */
  sampler?: Pick<Sampler, 'answer'>;
  /** The deprecation census of this call: server-initiated requests, legacy tasks and -32042 are noted. */
  census?: CallTally;
  /** How the upstream sends its batches (shared by the upstream's Exchanges); none: never learned. */
  batching?: BatchLearning;
}

/** The empty input map every Exchange starts with (never written: the first input request gets a map of its own). */
const NO_PENDING = new Map<string, PendingInput>();

/** One legacy request in flight. */
export class Exchange implements CallHandlers {
  readonly id = uniqueId();
  outcome: Outcome | undefined;
  /** Rounds of input_required answered so far (MRTR front end). */
  round = 0;
  /** Outstanding input requests by key ({@link NO_PENDING} until the first: most calls ask nothing). */
  private pending: Map<string, PendingInput> = NO_PENDING;
  private lastInputAt = 0;
  /** True from the moment a batch was complete ({@link settle} said 'input') until no input is outstanding. */
  private batchClosed = false;
  private progressSink: ((p: ProgressParams) => void) | undefined;
  /** Who waits for, or listens to, the call's next change. */
  private readonly changes = new Changes();
  /** Latest human-readable status from the upstream (progress message or upstream task status). */
  statusMessage: string | undefined;
  /** The call's `requestMs` and `totalMs` budgets. */
  private readonly timeouts: CallTimeouts;
  /** The session the call runs on (none while it waits for the gateway's approval) and how it is given back. */
  private readonly call: CallLease;
  /** The keys given to this run's input requests, and in replay mode the recorded questions they match. */
  private readonly questions: Questions;
  /** Provider-answered sampling requests in flight: the call waits on the provider, not the upstream. */
  private providerCalls: Set<AbortController> | undefined;
  /** The upstream request's span, while tracing. */
  private trace: Traced | undefined;

  constructor(private readonly init: ExchangeInit) {
    this.timeouts = new CallTimeouts(init.upstream, init.cfg.timeouts, (error) => this.cancel(error));
    this.questions = new Questions(init.replay);
    this.call = new CallLease(this.id, this, init.lease, init.legacyTask);
  }

  get upstream(): string {
    return this.init.upstream;
  }
  /** The principal the call runs for. */
  get principal(): string {
    return this.init.principal;
  }
  /** True when the call holds an upstream session of its own (an exclusive lease), not a place on a shared one. */
  get holdsSession(): boolean {
    return this.call.lease !== undefined && !this.call.lease.shared;
  }
  get method(): ExchangeMethod {
    return this.init.method;
  }

  /**
   * Opens the session this call holds alone to other calls, when its pool allows that now (a
   * Streamable HTTP upstream seen asking on the stream of the call, `SessionPool.share`): a call
   * that leased its session before that was known then no longer holds one of its own. Not for a
   * call running as a legacy upstream task (what it asks comes on the streams of its `tasks/*`
   * requests). Returns whether the call now shares its session.
   */
  shareSession(): boolean {
    if (this.outcome || this.call.cancelled || this.call.legacyTask || !this.holdsSession) return false;
    return this.init.pool.share(this.call.lease!);
  }

  /** Starts the upstream request (its span a child of the active one), or first asks the gateway's approval. Call once. */
  start(): void {
    const lease = this.call.lease;
    if (!lease) return void this.approveThenStart(this.init.approval!);
    if (tracingActive()) {
      this.trace = startClientSpan({
        method: this.method,
        params: this.init.params,
        upstream: this.upstream,
        endpoint: this.init.cfg,
        protocolVersion: () => lease.session.info.protocolVersion,
      });
    }
    lease.session.attach(this.id, this);
    if (!this.needsRoots()) return this.attempt(1);
    // The server must hold this call's roots before the call reaches it.
    this.armTimers();
    lease.session.resyncRoots().then(
      () => {
        if (!this.outcome) this.attempt(1);
      },
      (err) => this.finish({ error: downstreamError(this.upstream, err, lease.session, this.init) }, false),
    );
  }

  /**
   * Asks the gateway's approval ({@link ExchangeInit.approval}) as the call's first input request,
   * then leases the session and starts the call, or ends it with the policy's refusal.
   */
  private async approveThenStart(step: NonNullable<ExchangeInit['approval']>): Promise<void> {
    try {
      const answer = await this.addPending(step.ask.key, step.ask.request, false);
      if (this.outcome) return;
      const refusal = await step.ask.decide(answer);
      if (this.outcome) return;
      if (refusal) return this.finish({ result: refusal }, true);
      const { lease, legacyTask } = await step.acquire();
      if (this.outcome) return lease.release(true);
      this.call.take(lease, legacyTask);
      this.start();
    } catch (e) {
      if (!this.outcome) this.finish({ error: e instanceof GatewayError ? e : downstreamError(this.upstream, e) }, true);
    }
  }

  /**
   * Whether the server must be given this call's roots before the call goes upstream: it uses roots
   * and holds another call's client's, or this call's client declared roots it may be asked for
   * (`input.allow` has `roots`). Not on a session shared with other calls (a session whose server
   * uses roots takes no more calls, `UpstreamSession.shareable`).
   */
  private needsRoots(): boolean {
    const { cfg, clientCapabilities } = this.init;
    const lease = this.call.lease!;
    if (lease.shared) return false;
    return lease.session.needsRoots(Boolean(clientCapabilities.roots) && cfg.input.allow.includes('roots'));
  }

  /** A `notifications/message` of the upstream while this call was alone on its session (counted in the census). */
  onLog(): void {
    this.init.census?.note('logging');
  }

  /** Progress the upstream sent under this call's `progressToken`. */
  onProgress(p: ProgressParams): void {
    if (this.outcome) return;
    this.armTimers();
    this.statusMessage = p.message ?? (p.total !== undefined ? `${p.progress}/${p.total}` : `${p.progress}`);
    this.progressSink?.({
      progress: p.progress,
      ...(p.total !== undefined ? { total: p.total } : {}),
      ...(p.message !== undefined ? { message: p.message } : {}),
    });
    this.changes.notify();
  }

  /** Sends the upstream request; `attempt` counts re-sends after URL elicitation (2025-11-25 -32042). */
  private attempt(attempt: number): void {
    const { method, params } = this.init;
    const lease = this.call.lease!;
    this.armTimers();
    if (this.call.legacyTask) return void within(this.trace, () => this.runLegacyTask());
    within(this.trace, () =>
      // The upstream span's context goes in `_meta` too (read there on stdio), while tracing.
      // Timed by the Exchange (armTimers) and given up by cancel().
      lease.session.request(
        { method, params: { ...params, _meta: traceMeta({ ...((params._meta as object | undefined) ?? {}), progressToken: this.id }) } },
        LooseResult,
        { timeout: NO_TIMEOUT },
      ),
    ).then(
      (result) => this.finish({ result: result as Record<string, unknown> }, true),
      (err) => {
        if (err instanceof McpError && err.code === URL_ELICITATION_REQUIRED) this.init.census?.note('url_elicitation_required');
        if (err instanceof McpError && err.code === URL_ELICITATION_REQUIRED && !this.outcome && attempt <= MAX_URL_ATTEMPTS) {
          return this.urlElicitationRequired(err, attempt);
        }
        this.finish({ error: downstreamError(this.upstream, err, lease.session, this.init) }, keepsSession(err));
      },
    );
  }

  /**
   * Runs the call as a 2025-11-25 task upstream (`params.task`), following it with upstream
   * `tasks/get` and `tasks/result` (the v1 SDK's requestStream).
   */
  private async runLegacyTask(): Promise<void> {
    const { params } = this.init;
    const lease = this.call.lease!;
    this.init.census?.note('legacy_tasks');
    try {
      const stream = lease.session.callToolAsTask(
        {
          name: String(params.name),
          arguments: params.arguments as Record<string, unknown> | undefined,
          _meta: traceMeta({ progressToken: this.id }),
        },
        this.call.legacyTask!.ttlMs,
        { signal: (this.call.taskAbort = new AbortController()).signal, timeout: NO_TIMEOUT },
      );
      for await (const message of stream) {
        if (this.outcome) return;
        if (message.type === 'taskCreated' || message.type === 'taskStatus') {
          this.call.upstreamTaskId = message.task.taskId;
          if (message.task.statusMessage) this.statusMessage = message.task.statusMessage;
          this.armTimers();
          this.changes.notify();
        } else if (message.type === 'result') {
          return this.finish({ result: withoutRelatedTask(message.result as Record<string, unknown>) }, true);
        } else if (message.type === 'error') {
          return this.finish({ error: downstreamError(this.upstream, message.error, lease.session) }, keepsSession(message.error));
        }
      }
    } catch (err) {
      this.finish({ error: downstreamError(this.upstream, err, lease.session) }, keepsSession(err));
    }
  }

  /**
   * The upstream answered -32042 (URL elicitation required, 2025-11-25): each of its
   * `data.elicitations` becomes a URL-mode input request; when the client accepts them all, the
   * upstream request is sent again, as the 2025-11-25 flow has the client do.
   */
  private urlElicitationRequired(err: McpError, attempt: number): void {
    const requests = urlElicitations(this.upstream, err, this.init.clientCapabilities);
    if (requests instanceof GatewayError) return this.finish({ error: requests }, true);
    const answers = requests.map((r) => this.addPending(this.questions.keyFor('elicitation', {}), r));
    Promise.all(answers).then(
      (results) => {
        if (this.outcome) return;
        const refused = results.find((r) => r.action !== 'accept');
        if (refused) {
          this.finish(
            {
              error: upstreamFailed(
                this.upstream,
                'declined',
                `The upstream requires the user to complete a URL flow (${String(requests[0]!.params.url)}); the client answered ${String(refused.action)}`,
              ),
            },
            true,
          );
          return;
        }
        this.attempt(attempt + 1);
      },
      () => {},
    );
  }

  /** Directs progress to `sink` (undefined: drop progress). */
  setProgressSink(sink: ((p: ProgressParams) => void) | undefined): void {
    this.progressSink = sink;
  }

  /** Outstanding input requests by key, in the order they arrived. */
  outstanding(): Record<string, InputRequest> {
    const out: Record<string, InputRequest> = {};
    for (const p of this.pending.values()) out[p.key] = p.request;
    return out;
  }

  /**
   * Replay mode: the questions of this run in order, answered ones with their answers, then the
   * outstanding ones (without), for the sealed state of the next run.
   */
  replayState(): ReplayEntry[] {
    return this.questions.state((key) => this.pending.has(key));
  }

  /** Milliseconds since the last server-initiated request arrived (Infinity if none yet). */
  get msSinceLastInput(): number {
    return this.lastInputAt ? Date.now() - this.lastInputAt : Infinity;
  }

  /** The outstanding request under `key`, if any. */
  pendingRequest(key: string): InputRequest | undefined {
    return this.pending.get(key)?.request;
  }

  /** Delivers the client's answer for `key` to the waiting upstream request. Unknown keys are ignored; returns whether it was delivered. */
  answer(key: string, value: Record<string, unknown>): boolean {
    const p = this.pending.get(key);
    if (!p) return false;
    this.pending.delete(key);
    this.noteAnswered();
    p.resolve(value);
    this.armTimers();
    this.changes.notify();
    return true;
  }

  /**
   * Waits until the Exchange has finished ('done') or has outstanding input and the batch of
   * server-initiated requests is complete ('input'): the upstream session received nothing for
   * {@link QUIET_TURNS} event-loop turns and `input.batchQuietMs` (or what was learned of the
   * upstream, {@link BatchLearning}) after its last message, or `batchWindowMs` passed since the
   * last request arrived (the cap for servers that send slowly). With `deadline` (epoch ms), it
   * returns 'deadline' once that time passes while the upstream is still working without asking
   * for input. The client's `connection` closing ends the wait only ('aborted').
   */
  async settle(
    batchWindowMs: number,
    connection?: ClientConnection,
    deadline?: number,
  ): Promise<'done' | 'input' | 'aborted' | 'deadline'> {
    for (;;) {
      if (this.outcome) return 'done';
      if (connection?.closed) return 'aborted';
      const now = Date.now();
      if (this.pending.size > 0) {
        if (
          this.lastInputAt + batchWindowMs - now <= 0 ||
          (await upstreamQuiet(this.call.lease!.session, this.init.cfg.input.batchQuietMs, this.init.batching, () => this.lastInputAt))
        ) {
          if (this.pending.size === 0 || this.outcome) continue;
          this.batchClosed = true;
          if (this.pending.size > 1) learn(this.init.batching, SPLIT_QUIET_MS, false);
          return 'input';
        }
      } else if (deadline !== undefined) {
        if (now >= deadline) return 'deadline';
        await this.changes.next(deadline - now, connection);
      } else {
        await this.changes.next(undefined, connection);
      }
    }
  }

  /** The client has answered every outstanding input request: what the upstream asks next is a new batch. */
  private noteAnswered(): void {
    if (this.pending.size === 0) this.batchClosed = false;
  }

  /** Calls `listener` on every change (input, answer, progress, outcome); returns an unsubscribe function. */
  onChange(listener: () => void): () => void {
    return this.changes.listen(listener);
  }

  /**
   * Ends the upstream call's span as a round that ended in `input_required`: replay mode cancels
   * the call after each round by design, which is no failure of the call. Call just before that
   * {@link cancel}, whose error the span then does not record.
   */
  endSpanAsRound(): void {
    endSpan(this.trace, { result: { resultType: 'input_required' } });
    this.trace = undefined;
  }

  /**
   * Ends the Exchange with `error`: pending elicitations get `{action:"cancel"}`, pending sampling
   * and roots requests get an error, then the upstream request is cancelled (the v1 SDK sends
   * `notifications/cancelled` with the upstream's request id).
   */
  cancel(error: GatewayError): void {
    if (this.outcome) return;
    for (const p of this.pending.values()) {
      if (p.request.method === 'elicitation/create') p.resolve({ action: 'cancel' });
      else p.reject(new McpError(ErrorCode.InternalError, `The client request was cancelled: ${error.message}`));
    }
    this.pending.clear();
    // Told upstream after the answers above have been written, so the upstream sees them first.
    this.call.cancel(error.message);
    this.finish({ error }, false);
  }

  /**
   * A server-initiated request of this call: answered from config, the replay state, a sampling
   * provider or `prefilled` answers where those apply, else held as an outstanding input request
   * until the client answers it (the promise settles with the answer sent upstream).
   */
  onRequest(req: ServerInitiatedRequest, extra: ServerRequestExtra): Promise<Record<string, unknown>> {
    this.init.census?.noteMessage(req);
    if (this.outcome) return Promise.reject(new McpError(ErrorCode.InternalError, 'The client request already ended'));
    const kind = INPUT_KIND_OF[req.method];
    if (!kind) return Promise.reject(new McpError(ErrorCode.MethodNotFound, `Method not found: ${req.method}`));
    const request = toInputRequest(req);
    if (kind === 'sampling' && samplingByProvider(this.init.cfg, this.init.clientCapabilities, this.toolName, request)) {
      const { upstream, cfg, principal, sampler, log } = this.init;
      const track = (ctrl: AbortController, running: boolean) => {
        if (running) (this.providerCalls ??= new Set()).add(ctrl);
        else this.providerCalls?.delete(ctrl);
        this.armTimers();
      };
      return sampleByProvider({ id: this.id, upstream, cfg, principal, tool: this.toolName, sampler, log, track }, req, extra);
    }
    const configuredRoots = this.init.cfg.roots;
    if (
      kind === 'roots' &&
      configuredRoots.length > 0 &&
      (!this.init.clientCapabilities.roots || !this.init.cfg.input.allow.includes('roots'))
    ) {
      // The client cannot be asked: the configured roots answer, as they do outside any call.
      return Promise.resolve({ roots: configuredRoots });
    }
    if (!this.init.cfg.input.allow.includes(kind)) {
      return Promise.reject(new McpError(ErrorCode.MethodNotFound, `The gateway does not relay ${req.method} for this upstream`));
    }
    const missing = missingFor(this.init.clientCapabilities, request);
    if (missing) {
      const err = missingCapability(missing, JSON.stringify(missing));
      queueMicrotask(() => this.cancel(err));
      return Promise.reject(new McpError(ErrorCode.InvalidParams, `The client did not declare ${JSON.stringify(missing)}`));
    }
    if (kind === 'elicitation' && request.params.mode !== 'url' && !this.init.cfg.input.allowSecrets) {
      const fields = secretFields(request.params.requestedSchema);
      if (fields.length) {
        this.init.log.warn(
          { exchange: this.id, fields, method: this.method },
          'form asks for secrets: declined upstream, not forwarded to the client',
        );
        this.init.onSecretDeclined?.();
        return Promise.resolve({ action: 'decline' });
      }
    }
    const digest = digestOf(request);
    const recorded = this.questions.recordedAnswer(digest);
    if (recorded) return Promise.resolve(recorded);
    const key = this.questions.keyFor(kind, req.params);
    this.questions.ask({
      d: digest,
      k: key,
      m: request.method,
      ...(request.params.tools || request.params.toolChoice ? { t: 1 as const } : {}),
    });
    const given = this.init.prefilled?.[key];
    if (given !== undefined) {
      delete this.init.prefilled![key];
      if (!invalidResponse(request, given)) {
        this.questions.answeredAtOnce(given as Record<string, unknown>);
        return Promise.resolve(given as Record<string, unknown>);
      }
    }
    this.init.log.debug({ exchange: this.id, key, method: req.method }, 'input request');
    const answer = this.addPending(key, request);
    extra.signal.addEventListener(
      'abort',
      () => {
        // The upstream gave up on this request (its own timeout or cancellation): it is working again.
        if (this.pending.delete(key)) {
          this.noteAnswered();
          this.armTimers();
          this.changes.notify();
        }
      },
      { once: true },
    );
    return answer;
  }

  /** The tool this Exchange calls (`tools/call`), else undefined. */
  private get toolName(): string | undefined {
    return this.method === 'tools/call' && typeof this.init.params.name === 'string' ? this.init.params.name : undefined;
  }

  /**
   * Adds an outstanding input request; resolves with the client's answer. The gateway's own question
   * (not `fromUpstream`) is complete at once: it is no part of an upstream batch.
   */
  private addPending(key: string, request: InputRequest, fromUpstream = true): Promise<Record<string, unknown>> {
    const gapMs = Date.now() - this.lastInputAt;
    // Concurrent with requests whose round already went out: the upstream sent one batch in pieces.
    if (this.batchClosed && this.pending.size > 0 && gapMs < this.init.cfg.input.batchWindowMs)
      learn(this.init.batching, 2 * gapMs + SPLIT_QUIET_MS, true);
    return new Promise((resolve, reject) => {
      if (this.pending === NO_PENDING) this.pending = new Map();
      this.pending.set(key, { key, request, resolve, reject });
      spanEvent(this.trace, 'mcp.input.request', { [ATTR.MCP_METHOD_NAME]: request.method, [ATTR.MCP_INPUT_KEY]: key });
      if (fromUpstream) this.lastInputAt = Date.now();
      this.armTimers();
      this.changes.notify();
    });
  }

  private finish(outcome: Outcome, reusable: boolean): void {
    if (this.outcome) {
      this.call.release(reusable);
      return;
    }
    this.outcome = outcome;
    endSpan(this.trace, outcome);
    this.timeouts.clear();
    for (const p of this.pending.values()) p.reject(new McpError(ErrorCode.InternalError, 'The client request ended'));
    this.pending.clear();
    for (const c of this.providerCalls ?? []) c.abort();
    if ('result' in outcome) {
      if (this.call.lease) this.init.pool.noteSuccess();
    } else this.init.log.debug({ exchange: this.id, code: outcome.error.code, err: outcome.error.message }, 'exchange failed');
    this.call.release(reusable);
    this.changes.notify();
  }

  /**
   * Restarts the silence budget and pauses the working-time budget while the call waits on the
   * client or a provider, or resumes it ({@link CallTimeouts.arm}); stops both once the call ended.
   */
  private armTimers(): void {
    if (this.outcome) return this.timeouts.clear();
    this.timeouts.arm(this.pending.size > 0 || (this.providerCalls?.size ?? 0) > 0);
  }
}
