/**
 * The Exchange: one legacy request (`tools/call`, `prompts/get` or `resources/read`) running on one
 * leased upstream session (DESIGN "The one idea").
 *
 * It turns the upstream's server-initiated `elicitation/create`, `sampling/createMessage` and
 * `roots/list` into outstanding input requests keyed for `inputRequests`, takes answers for them,
 * forwards progress, and ends with a result or a JSON-RPC error. A `sampling/createMessage` that
 * the upstream's `sampling.mode` gives to the gateway's provider is answered through the
 * {@link Sampler} instead (src/sampling/). Front ends (MRTR, tasks) drive it
 * through {@link Exchange.settle}, {@link Exchange.answer} and {@link Exchange.cancel}.
 */
import { uniqueId } from '../../observability/ids.js';
import { CancelTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../../config/schema.js';
import {
  ErrorCode,
  GatewayError,
  UpstreamProtocolError,
  UpstreamRequestLost,
  missingCapability,
  shutdownFailure,
  upstreamFailed,
  upstreamProtocolFault,
  validationProblem,
  withoutMcpPrefix,
} from '../../protocol/errors.js';
import { META_INPUT_KEY_HINT, type ClientCapabilities, type ExchangeMethod, type InputRequest } from '../../protocol/wire.js';
import type { Logger } from '../../observability/log.js';
import { ATTR, endSpan, spanEvent, startClientSpan, traceMeta, tracingActive, within, type Traced } from '../../observability/tracing.js';
import type { CallTally } from '../../observability/census.js';
import { secretFields } from '../../security/secrets.js';
import { invalidResponse } from './responses.js';
import { digestOf, type ReplayEntry } from '../../security/seal.js';
import type { SessionPool } from '../../upstream/pool.js';
import type { SessionLease } from '../../upstream/pool-lease.js';
import type { ClientConnection } from '../../protocol/connection.js';
import type { CallHandlers, ServerInitiatedRequest, ServerRequestExtra } from '../../upstream/session-calls.js';
import { LooseResult, NO_TIMEOUT } from '../../upstream/session-connection.js';
import { asRpcError, SamplingError } from '../../sampling/errors.js';
import { samplingModeFor, samplingRoute } from '../../sampling/mode.js';
import type { Sampler } from '../../sampling/sampler.js';

/** Input kinds and the server-initiated method each comes from. */
export type InputKind = 'elicitation' | 'sampling' | 'roots';
export const INPUT_KIND_OF: Record<string, InputKind> = {
  'elicitation/create': 'elicitation',
  'sampling/createMessage': 'sampling',
  'roots/list': 'roots',
};

/** 2025-11-25 error code: URL elicitation required (`data.elicitations`). Never sent downstream. */
const URL_ELICITATION_REQUIRED = -32042;
/** Accepted key hints: a letter or digit, then letters, digits, '_', '.', ':' or '-' (at most 128). */
const KEY_HINT = /^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$/;

/**
 * Longest wait, after `notifications/cancelled`, for the upstream's answer to the cancelled request,
 * in ms: an answer shows the call ended, and its session is reused; without one it is closed.
 */
const CANCEL_ANSWER_WAIT_MS = 1000;

/** Longest wait for an upstream `tasks/cancel` answer before the cancelled call's session is closed, in ms. */
const CANCEL_TASK_WAIT_MS = 2000;

/** Event-loop turns without an upstream message after which a batch of input requests is complete. */
const QUIET_TURNS = 2;

/** Least upstream silence, in ms, that the batches of an upstream seen sending concurrent requests wait for. */
export const SPLIT_QUIET_MS = 5;

/**
 * What the gateway has learned of how one upstream sends a batch of concurrent server-initiated
 * requests (one object per upstream, shared by its Exchanges). Until it has sent one, a batch is
 * complete after two quiet event-loop turns. Once a batch held more than one request, its batches
 * also wait for {@link SPLIT_QUIET_MS} of upstream silence, so a server preempted between two
 * writes is not split. A batch was split when a request arrives while earlier requests of the same
 * call are still unanswered and their round has already gone to the client, within
 * `input.batchWindowMs` of the one before: the wait becomes twice the gap seen plus
 * {@link SPLIT_QUIET_MS} (the largest learned so far; `batchWindowMs` still caps every wait).
 */
export interface BatchLearning {
  /** The learned silence to wait for, in ms (0 until a batch of several requests is seen). */
  quietMs: number;
  /** Called when {@link quietMs} rises, with the new value and whether a split batch showed it. */
  onLearned?: (quietMs: number, split: boolean) => void;
}

/** Raises the learned wait of `learning` to `quietMs`. */
function learn(learning: BatchLearning | undefined, quietMs: number, split: boolean): void {
  if (!learning || quietMs <= learning.quietMs) return;
  learning.quietMs = quietMs;
  learning.onLearned?.(quietMs, split);
}

/** Most re-sends of one request after URL elicitations. */
const MAX_URL_ATTEMPTS = 3;

/** A progress notification's params without the token (the front end adds the client's token). */
export interface ProgressParams {
  progress: number;
  total?: number;
  message?: string;
}

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
  lease: SessionLease;
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

/**
 * Whether `caps` (a 2026 ClientCapabilities) can answer `request`; returns the missing capability
 * as a ClientCapabilities object, or undefined when it can.
 */
export function missingFor(caps: ClientCapabilities, request: InputRequest): Record<string, unknown> | undefined {
  switch (request.method) {
    case 'elicitation/create': {
      const mode = request.params.mode === 'url' ? 'url' : 'form';
      const e = caps.elicitation as { form?: unknown; url?: unknown } | undefined;
      if (!e) return { elicitation: mode === 'url' ? { url: {} } : {} };
      if (mode === 'url' && !e.url) return { elicitation: { url: {} } };
      if (mode === 'form' && e.url && !e.form) return { elicitation: { form: {} } };
      return undefined;
    }
    case 'sampling/createMessage': {
      const s = caps.sampling as { tools?: unknown } | undefined;
      if (!s) return { sampling: {} };
      if ((request.params.tools || request.params.toolChoice) && !s.tools) return { sampling: { tools: {} } };
      return undefined;
    }
    case 'roots/list':
      return caps.roots ? undefined : { roots: {} };
  }
}

/** Maps a legacy server-initiated request to a 2026 `inputRequests` entry (no `_meta`, no `elicitationId`, no `task`). */
export function toInputRequest(req: ServerInitiatedRequest): InputRequest {
  const method = req.method as InputRequest['method'];
  if (method === 'roots/list') return { method, params: {} };
  const { _meta, task, elicitationId, ...params } = (req.params ?? {}) as Record<string, unknown>;
  void _meta;
  void task;
  void elicitationId;
  return { method, params };
}

/**
 * Whether the upstream session is still fit for reuse after `err` ended a request on it: an error
 * the upstream itself answered (an McpError, whatever its code) leaves it usable; a transport
 * failure, a closed connection, a timeout or a cancellation ({@link UpstreamRequestLost}) does not.
 */
export function keepsSession(err: unknown): boolean {
  return err instanceof McpError;
}

/** A result without the 2025-11-25 `_meta["io.modelcontextprotocol/related-task"]` (not used in 2026-07-28). */
export function withoutRelatedTask(result: Record<string, unknown>): Record<string, unknown> {
  const meta = result._meta as Record<string, unknown> | undefined;
  if (!meta || !('io.modelcontextprotocol/related-task' in meta)) return result;
  const { 'io.modelcontextprotocol/related-task': _rt, ...rest } = meta;
  const { _meta: _m, ...body } = result;
  return Object.keys(rest).length ? { ...body, _meta: rest } : body;
}

/**
 * Maps an upstream failure to the downstream JSON-RPC error (legacy codes translated).
 * A `resources/read` that failed with the legacy -32002 or with -32602 becomes MCP 2026-07-28's
 * "Resource not found" shape (SEP-2164): -32602 with `data.uri`, taken from the upstream's data or
 * else from `request.params.uri`.
 * @param request the legacy request that failed, when known.
 */
export function downstreamError(
  upstream: string,
  err: unknown,
  session?: { deadReason?: string; deadKind?: string; transportKind: string },
  request?: { method: string; params: Record<string, unknown> },
): GatewayError {
  const mapped = mapUpstreamError(upstream, err, session, request);
  if (request?.method !== 'resources/read' || mapped.code !== ErrorCode.InvalidParams || !(err instanceof McpError)) return mapped;
  const data = mapped.data;
  if (data !== undefined && (data === null || typeof data !== 'object' || Array.isArray(data))) return mapped;
  const d = (data ?? {}) as Record<string, unknown>;
  return typeof d.uri === 'string'
    ? mapped
    : new GatewayError(mapped.code, mapped.message, { ...d, uri: request.params.uri }, mapped.httpStatus);
}

function mapUpstreamError(
  upstream: string,
  err: unknown,
  session?: { deadReason?: string; deadKind?: string; transportKind: string },
  request?: { method: string },
): GatewayError {
  if (err instanceof GatewayError) return err;
  if (err instanceof UpstreamRequestLost) {
    if (err.kind !== 'closed') return upstreamFailed(upstream, 'timeout', `Upstream '${upstream}' timed out`);
    const reason = err.reason ?? session?.deadReason ?? 'connection closed';
    if (session?.deadKind === 'protocol')
      return upstreamFailed(upstream, 'protocol', `Upstream '${upstream}' broke the protocol during the request: ${reason}`);
    if (session?.deadKind === 'stopping') return shutdownFailure(upstream);
    return session?.transportKind === 'stdio'
      ? upstreamFailed(upstream, 'crashed', `Upstream '${upstream}' exited or closed stdio during the request (${reason})`)
      : upstreamFailed(upstream, 'session-lost', `Upstream '${upstream}' lost the connection or session during the request (${reason})`);
  }
  if (err instanceof McpError) {
    // Past this point the error is the upstream's own answer: its code is relayed, -32000 and -32001 included.
    if (err.code === -32002) {
      return new GatewayError(ErrorCode.InvalidParams, 'Resource not found', err.data);
    }
    // McpError prefixes "MCP error N: " (once per SDK it crossed); relay the upstream's own message.
    const message = withoutMcpPrefix(err.message);
    if (err.code === URL_ELICITATION_REQUIRED) {
      // 2025-11-25 only; MUST NOT be sent to 2026-07-28 clients.
      return upstreamFailed(upstream, 'protocol', `Upstream '${upstream}' kept requiring URL elicitation: ${message}`);
    }
    const invalid = err.code === ErrorCode.InvalidParams ? /^Invalid ([\w/ ]+ result): /.exec(message) : null;
    if (invalid) {
      // A v1-SDK upstream rejected its own tool's malformed result and said so with -32602 and the
      // validator's issues; the client's request was fine, so this is the upstream's protocol fault.
      return upstreamProtocolFault(upstream, invalid[1]!, validationProblem(message) ?? message.slice(invalid[0].length).split('\n')[0]!);
    }
    return new GatewayError(err.code, message, err.data);
  }
  if (err instanceof UpstreamProtocolError) return upstreamProtocolFault(upstream, err.what, err.problem);
  const problem = validationProblem(err);
  if (problem) return upstreamProtocolFault(upstream, request ? `${request.method} result` : 'answer', problem);
  const msg = err instanceof Error ? err.message : String(err);
  if (/\b404\b/.test(msg) || /session/i.test(msg)) {
    return upstreamFailed(upstream, 'session-lost', `Upstream '${upstream}' lost the session: ${msg}`);
  }
  return upstreamFailed(upstream, 'unreachable', `Upstream '${upstream}' failed: ${msg}`);
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
  /** Keys given out so far (a parked call holds this Exchange for minutes: collections are made on first use). */
  private usedKeys: Set<string> | undefined;
  private seq = 0;
  private lastInputAt = 0;
  /** True from the moment a batch was complete ({@link settle} said 'input') until no input is outstanding. */
  private batchClosed = false;
  private waiters: Set<() => void> | undefined;
  private progressSink: ((p: ProgressParams) => void) | undefined;
  private listeners: Set<() => void> | undefined;
  /** Latest human-readable status from the upstream (progress message or upstream task status). */
  statusMessage: string | undefined;
  /** The upstream's own task id when the call runs as a 2025-11-25 task upstream. */
  upstreamTaskId: string | undefined;
  /** Aborted when the call is cancelled, for the requests of a 2025-11-25 task upstream (made for those only). */
  private taskAbort: AbortController | undefined;
  /** One timer for both budgets below: it fires at the earlier deadline (`timerAt`), or re-arms when activity moved it. */
  private timer: NodeJS.Timeout | undefined;
  private timerAt = 0;
  /** Silence deadline (`requestMs` after the last upstream activity) and working-time deadline (`totalMs`), epoch ms, while active. */
  private idleAt = 0;
  private totalAt = 0;
  private activeUsedMs = 0;
  private activeSince: number | undefined;
  private released = false;
  private cancelled = false;
  private cancelSent = false;
  /** Replay mode: the index in `init.replay` of the recorded question the next input request is matched to (its length once the run differed). */
  private replayNext = 0;
  /** Replay mode: the questions of this run in order. */
  private readonly asked: ReplayEntry[] = [];
  /** Provider-answered sampling requests in flight: the call waits on the provider, not the upstream. */
  private providerCalls: Set<AbortController> | undefined;
  /** The upstream request's span, while tracing. */
  private trace: Traced | undefined;

  constructor(private readonly init: ExchangeInit) {
    if (init.replay?.length) this.usedKeys = new Set(init.replay.map((e) => e.k));
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
    return !this.init.lease.shared;
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
    if (this.outcome || this.cancelled || this.init.legacyTask || !this.holdsSession) return false;
    return this.init.pool.share(this.init.lease);
  }

  /** Starts the upstream request (its span a child of the active one). Call once. */
  start(): void {
    const { lease } = this.init;
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
   * Whether the server must be given this call's roots before the call goes upstream: it uses roots
   * and holds another call's client's, or this call's client declared roots it may be asked for
   * (`input.allow` has `roots`). Not on a session shared with other calls (a session whose server
   * uses roots takes no more calls, `UpstreamSession.shareable`).
   */
  private needsRoots(): boolean {
    const { lease, cfg, clientCapabilities } = this.init;
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
    this.notify();
  }

  /** Sends the upstream request; `attempt` counts re-sends after URL elicitation (2025-11-25 -32042). */
  private attempt(attempt: number): void {
    const { lease, method, params } = this.init;
    this.armTimers();
    if (this.init.legacyTask) return void within(this.trace, () => this.runLegacyTask());
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
    const { lease, params } = this.init;
    this.init.census?.note('legacy_tasks');
    try {
      const stream = lease.session.callToolAsTask(
        {
          name: String(params.name),
          arguments: params.arguments as Record<string, unknown> | undefined,
          _meta: traceMeta({ progressToken: this.id }),
        },
        this.init.legacyTask!.ttlMs,
        { signal: (this.taskAbort = new AbortController()).signal, timeout: NO_TIMEOUT },
      );
      for await (const message of stream) {
        if (this.outcome) return;
        if (message.type === 'taskCreated' || message.type === 'taskStatus') {
          this.upstreamTaskId = message.task.taskId;
          if (message.task.statusMessage) this.statusMessage = message.task.statusMessage;
          this.armTimers();
          this.notify();
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
    const list = (err.data as { elicitations?: unknown } | undefined)?.elicitations;
    if (!Array.isArray(list) || list.length === 0) {
      this.finish(
        {
          error: upstreamFailed(
            this.upstream,
            'protocol',
            `Upstream '${this.upstream}' required URL elicitation without saying which (${err.message})`,
          ),
        },
        true,
      );
      return;
    }
    const requests = list.map((e) => toInputRequest({ method: 'elicitation/create', params: { ...(e as object), mode: 'url' } }));
    for (const r of requests) {
      const missing = missingFor(this.init.clientCapabilities, r);
      if (missing) {
        this.finish({ error: missingCapability(missing, JSON.stringify(missing)) }, true);
        return;
      }
    }
    const answers = requests.map((r) => this.addPending(this.keyFor('elicitation', {}), r));
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
    return this.asked.filter((e) => e.v !== undefined || this.pending.has(e.k));
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
    this.notify();
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
        if (this.lastInputAt + batchWindowMs - now <= 0 || (await this.upstreamQuiet())) {
          if (this.pending.size === 0 || this.outcome) continue;
          this.batchClosed = true;
          if (this.pending.size > 1) learn(this.init.batching, SPLIT_QUIET_MS, false);
          return 'input';
        }
      } else if (deadline !== undefined) {
        if (now >= deadline) return 'deadline';
        await this.changed(deadline - now, connection);
      } else {
        await this.changed(undefined, connection);
      }
    }
  }

  /**
   * Whether the upstream session received no message during {@link QUIET_TURNS} event-loop turns
   * and for `input.batchQuietMs` (or the silence learned of the upstream) after its last message:
   * whatever the server sent together with its last request has been read by then.
   */
  private async upstreamQuiet(): Promise<boolean> {
    const session = this.init.lease.session;
    const seen = session.received;
    const inputs = this.lastInputAt;
    const same = () => session.received === seen && inputs === this.lastInputAt;
    for (let i = 0; i < QUIET_TURNS; i++) await new Promise((r) => setImmediate(r));
    if (!same()) return false;
    // A server preempted between two writes of one batch is given time to go on.
    const quietMs = Math.max(this.init.cfg.input.batchQuietMs, this.init.batching?.quietMs ?? 0);
    const left = quietMs - (performance.now() - session.lastReceivedAt);
    if (left > 0) await new Promise((r) => setTimeout(r, left));
    return same();
  }

  /** The client has answered every outstanding input request: what the upstream asks next is a new batch. */
  private noteAnswered(): void {
    if (this.pending.size === 0) this.batchClosed = false;
  }

  /** Calls `listener` on every change (input, answer, progress, outcome); returns an unsubscribe function. */
  onChange(listener: () => void): () => void {
    const listeners = (this.listeners ??= new Set());
    listeners.add(listener);
    return () => listeners.delete(listener);
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
    this.cancelled = true;
    this.finish({ error }, false);
    // After the answers above have been written, so the upstream sees them first.
    setImmediate(() => {
      this.init.lease.session.cancel(this.id, error.message);
      this.taskAbort?.abort(error.message);
      const cancelTask = this.upstreamTaskId
        ? this.init.lease.session.request({ method: 'tasks/cancel', params: { taskId: this.upstreamTaskId } }, CancelTaskResultSchema).then(
            () => {},
            () => {},
          )
        : Promise.resolve();
      // A legacy server sends nothing once a request is cancelled, so the call may still run on this
      // session and ask something later: the session goes back to no one, unless the upstream
      // answered the request anyway (it had finished), which shows the call is over.
      void Promise.race([cancelTask, new Promise((r) => setTimeout(r, CANCEL_TASK_WAIT_MS))]).then(() => {
        this.cancelSent = true;
        this.releaseLease(false);
      });
    });
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
    if (kind === 'sampling' && this.samplingByProvider(request)) return this.sampleByProvider(req, extra);
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
    const replay = this.init.replay;
    if (replay && this.replayNext < replay.length) {
      const recorded = replay[this.replayNext]!;
      if (recorded.d !== digest) {
        // The run differs from the recorded one here: nothing recorded answers it, or what follows.
        this.replayNext = replay.length;
      } else {
        this.replayNext++;
        if (recorded.v !== undefined) {
          // Asked before at this point, in the same words: the answer the client gave then.
          this.asked.push(recorded);
          return Promise.resolve(recorded.v);
        }
      }
    }
    const key = this.keyFor(kind, req);
    this.asked.push({
      d: digest,
      k: key,
      m: request.method,
      ...(request.params.tools || request.params.toolChoice ? { t: 1 as const } : {}),
    });
    const given = this.init.prefilled?.[key];
    if (given !== undefined) {
      delete this.init.prefilled![key];
      if (!invalidResponse(request, given)) {
        this.asked[this.asked.length - 1]!.v = given as Record<string, unknown>;
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
          this.notify();
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
   * Whether the gateway's provider answers this `sampling/createMessage` (the upstream's or the
   * tool's `sampling.mode`: always in provider mode; in fallback mode when the client did not
   * declare what the request needs, or `input.allow` does not relay sampling).
   */
  private samplingByProvider(request: InputRequest): boolean {
    const cfg = this.init.cfg.sampling;
    const relayed = this.init.cfg.input.allow.includes('sampling')
      ? (this.init.clientCapabilities.sampling as { tools?: unknown } | undefined)
      : undefined;
    return samplingRoute(samplingModeFor(cfg, this.toolName), relayed, request.params) === 'provider';
  }

  /**
   * Answers the upstream's `sampling/createMessage` through the provider. While it runs the call
   * waits on the gateway, so `requestMs`/`totalMs` are paused as they are for a client's answer;
   * the provider's own `timeoutMs` bounds it. The provider call is aborted when the upstream
   * withdraws its request or the Exchange ends. Failures reach the upstream as the JSON-RPC error
   * of its request (`SamplingError`); the call goes on and the tool decides.
   */
  private async sampleByProvider(req: ServerInitiatedRequest, extra: ServerRequestExtra): Promise<Record<string, unknown>> {
    const sampler = this.init.sampler;
    if (!sampler) throw asRpcError(new SamplingError('invalid-request', 'No sampling provider is available for this upstream'));
    const ctrl = new AbortController();
    const onAbort = () => ctrl.abort();
    extra.signal.addEventListener('abort', onAbort, { once: true });
    (this.providerCalls ??= new Set()).add(ctrl);
    this.armTimers();
    this.init.log.debug({ exchange: this.id, method: req.method }, 'sampling answered by the provider');
    try {
      const { _meta, task, ...params } = (req.params ?? {}) as Record<string, unknown>;
      void _meta;
      void task;
      return await sampler.answer({
        upstream: this.upstream,
        cfg: this.init.cfg.sampling,
        tool: this.toolName,
        principal: this.init.principal,
        params,
        signal: ctrl.signal,
      });
    } catch (e) {
      throw e instanceof SamplingError ? asRpcError(e) : e;
    } finally {
      extra.signal.removeEventListener('abort', onAbort);
      this.providerCalls?.delete(ctrl);
      this.armTimers();
    }
  }

  /** Adds an outstanding input request; resolves with the client's answer. */
  private addPending(key: string, request: InputRequest): Promise<Record<string, unknown>> {
    const gapMs = Date.now() - this.lastInputAt;
    // Concurrent with requests whose round already went out: the upstream sent one batch in pieces.
    if (this.batchClosed && this.pending.size > 0 && gapMs < this.init.cfg.input.batchWindowMs)
      learn(this.init.batching, 2 * gapMs + SPLIT_QUIET_MS, true);
    return new Promise((resolve, reject) => {
      if (this.pending === NO_PENDING) this.pending = new Map();
      this.pending.set(key, { key, request, resolve, reject });
      spanEvent(this.trace, 'mcp.input.request', { [ATTR.MCP_METHOD_NAME]: request.method, [ATTR.MCP_INPUT_KEY]: key });
      this.lastInputAt = Date.now();
      this.armTimers();
      this.notify();
    });
  }

  private keyFor(kind: InputKind, req: Pick<ServerInitiatedRequest, 'params'>): string {
    const hint = (req.params?._meta as Record<string, unknown> | undefined)?.[META_INPUT_KEY_HINT];
    let key: string;
    if (typeof hint === 'string' && KEY_HINT.test(hint) && !this.usedKeys?.has(hint)) key = hint;
    else {
      do key = `${kind}-${++this.seq}`;
      while (this.usedKeys?.has(key));
    }
    (this.usedKeys ??= new Set()).add(key);
    return key;
  }

  private finish(outcome: Outcome, reusable: boolean): void {
    if (this.outcome) {
      this.releaseLease(reusable);
      return;
    }
    this.outcome = outcome;
    endSpan(this.trace, outcome);
    this.clearTimers();
    for (const p of this.pending.values()) p.reject(new McpError(ErrorCode.InternalError, 'The client request ended'));
    this.pending.clear();
    for (const c of this.providerCalls ?? []) c.abort();
    if ('result' in outcome) this.init.pool.noteSuccess();
    else this.init.log.debug({ exchange: this.id, code: outcome.error.code, err: outcome.error.message }, 'exchange failed');
    this.releaseLease(reusable);
    this.notify();
  }

  /**
   * Gives the session back: warm when `reusable`, closed otherwise. A cancelled call is detached at
   * once (nothing it asks later reaches a client) and its session is given back once the
   * cancellation went out, never to be reused by another call of its own (a shared session goes on
   * carrying the calls it has).
   */
  private releaseLease(reusable: boolean): void {
    if (this.released) return;
    if (this.cancelled) {
      this.init.lease.session.detach(this.id, this);
      if (!this.cancelSent) return;
    }
    this.released = true;
    this.init.lease.session.detach(this.id, this);
    if (!this.cancelled) return this.init.lease.release(reusable);
    // The call is over upstream only if the upstream answers the cancelled request anyway.
    const answered =
      this.upstreamTaskId || this.init.legacyTask
        ? Promise.resolve(false)
        : this.init.lease.session.whenAnswered(this.id, CANCEL_ANSWER_WAIT_MS);
    this.init.lease.releaseWhen(answered);
  }

  /**
   * Restarts the silence budget (`requestMs`, upstream activity) and pauses the working-time budget
   * (`totalMs`) while the call waits on the client or a provider, or resumes it.
   */
  private armTimers(): void {
    if (this.outcome) return this.clearTimers();
    const now = Date.now();
    const waitingOnOthers = this.pending.size > 0 || (this.providerCalls?.size ?? 0) > 0;
    if (waitingOnOthers) {
      if (this.activeSince !== undefined) this.activeUsedMs += now - this.activeSince;
      this.activeSince = undefined;
      return this.clearTimers();
    }
    if (this.activeSince === undefined) {
      this.activeSince = now;
      this.totalAt = now + Math.max(0, this.init.cfg.timeouts.totalMs - this.activeUsedMs);
    }
    this.idleAt = now + this.init.cfg.timeouts.requestMs;
    const due = Math.min(this.idleAt, this.totalAt);
    // A timer due no later checks the deadlines when it fires.
    if (this.timer && this.timerAt <= due) return;
    clearTimeout(this.timer);
    this.setTimer(due, now);
  }

  private setTimer(due: number, now: number): void {
    this.timerAt = due;
    this.timer = setTimeout(() => this.onTimer(), due - now);
  }

  /** The timer fired: the call ran out of working time or was silent too long, or activity moved the deadline. */
  private onTimer(): void {
    this.timer = undefined;
    const now = Date.now();
    const { requestMs, totalMs } = this.init.cfg.timeouts;
    if (now >= this.totalAt)
      return this.cancel(
        upstreamFailed(this.upstream, 'timeout', `Upstream '${this.upstream}' did not finish within totalMs=${totalMs} ms`),
      );
    if (now >= this.idleAt)
      return this.cancel(
        upstreamFailed(this.upstream, 'timeout', `Upstream '${this.upstream}' sent nothing for requestMs=${requestMs} ms`),
      );
    this.setTimer(Math.min(this.idleAt, this.totalAt), now);
  }

  private clearTimers(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private notify(): void {
    const ws = this.waiters;
    this.waiters = undefined;
    for (const w of ws ?? []) w();
    for (const l of this.listeners ?? []) l();
  }

  /** Resolves on the Exchange's next change, after `timeoutMs` (ms), or when `connection` closes. */
  private changed(timeoutMs: number | undefined, connection?: ClientConnection): Promise<void> {
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      let stopWatching: (() => void) | undefined;
      const done = () => {
        clearTimeout(timer);
        stopWatching?.();
        this.waiters?.delete(done);
        resolve();
      };
      (this.waiters ??= new Set()).add(done);
      if (timeoutMs !== undefined) timer = setTimeout(done, timeoutMs);
      stopWatching = connection?.onClose(done);
    });
  }
}
