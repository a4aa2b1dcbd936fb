/**
 * The router: takes a validated 2026-07-28 request for one upstream and serves it from a leased
 * legacy session, through the MRTR bridge for `tools/call`, `prompts/get` and `resources/read`.
 * Nothing here knows about HTTP.
 */
import { randomUUID } from 'node:crypto';
import { type ClientCapabilities as LegacyClientCapabilities, type ServerCapabilities } from '@modelcontextprotocol/sdk/types.js';
import type { GatewayConfig, UpstreamConfig } from '../config/schema.js';
import { Exchange, INPUT_KIND_OF, downstreamError, keepsSession, type BatchLearning } from '../cells/bridge/exchange.js';
import { MrtrBridge, type CallContext, type ParkedSessionLimits, type TaskEscalation } from '../cells/bridge/mrtr.js';
import { StateSealer, TaskIdBinder, generatedKey, type ReplayEntry } from '../security/seal.js';
import { allowedCapabilities, ModernPassThrough } from '../cells/modern/passthrough.js';
import { ErrorCode, GatewayError, invalidParams, methodNotFound, quoted, shutdownFailure, upstreamFailed } from '../protocol/errors.js';
import { checkParamHeaders } from '../protocol/param-headers.js';
import { MemoryStore, type ReplicaInfo, type SharedStore } from '../store/shared.js';
import { RedisStore } from '../store/redis.js';
import { TASKS_EXTENSION, TaskManager, detailedTask, tasksExtensionRequired } from '../cells/bridge/tasks/manager.js';
import { TaskQuota } from '../cells/bridge/tasks/quota.js';
import { deepFreeze, type ValidatedRequest } from '../protocol/envelope.js';
import {
  EXCHANGE_METHODS,
  TASK_METHODS,
  LIST_METHODS,
  META_CLIENT_CAPABILITIES,
  META_SERVER_INFO,
  SUPPORTED_VERSIONS,
  UPSTREAM_CAPABILITY_FOR,
  type ClientCapabilities,
  type ExchangeMethod,
} from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import { endSpan, noteInputRound, startClientSpan, traceMeta, within } from '../observability/tracing.js';
import { Metrics } from '../observability/metrics.js';
import { Census, NO_CALL, toolLabel } from '../observability/census.js';
import { DroppedEntries, type DropReport } from '../observability/dropped.js';
import { UpstreamHealth } from '../observability/upstream-health.js';
import { SessionPool, type AcquireOptions } from '../upstream/pool.js';
import { LooseResult } from '../upstream/session-connection.js';
import { startTimeoutMessage, unreachableText } from '../upstream/start-errors.js';
import { createModernUpstream, ModernHopError, tracedModernUpstream, type ModernUpstream } from '../upstream/modern.js';
import { probeModern, startModern } from '../upstream/modern-probe.js';
import { FirstStart } from '../upstream/stdio-child.js';
import { ToolCatalog, indexTools, type ListedTool, type ToolHeaders } from '../upstream/tools.js';
import { openModernSubscription, openSubscription, type ListenFilter, type Subscription } from './subscriptions.js';
import { upstreamSamplingCapability } from '../sampling/mode.js';
import { Sampler } from '../sampling/sampler.js';
import { servedToolList, toolCallRefusal, unknownTool } from '../upstream/tool-policy.js';

export type { CallContext };

/**
 * The legacy `initialize` capabilities that mirror what the client declared (DESIGN decision 2),
 * limited to the kinds the upstream's input policy relays. `elicitation: {}` counts as form mode.
 * `roots` (always with `listChanged`: the gateway sends `notifications/roots/list_changed` when a
 * call needs the server to hold its client's roots) is declared as well when the upstream has
 * configured roots, which the gateway answers itself for a client that did not declare roots.
 * `sampling` (with `tools`) is declared as well when the upstream's `sampling` config lets the
 * gateway's provider answer ({@link upstreamSamplingCapability}).
 */
export function mirrorCapabilities(
  caps: ClientCapabilities,
  cfg: Pick<UpstreamConfig, 'input' | 'roots' | 'sampling'>,
): LegacyClientCapabilities {
  const allow = cfg.input.allow;
  const out: LegacyClientCapabilities = {};
  const e = caps.elicitation as { form?: unknown; url?: unknown } | undefined;
  if (e && allow.includes('elicitation')) {
    const el: { form?: Record<string, never>; url?: Record<string, never> } = {};
    if (e.form || !e.url) el.form = {};
    if (e.url) el.url = {};
    out.elicitation = el;
  }
  const s = caps.sampling as { tools?: unknown; context?: unknown } | undefined;
  let sampling: { tools?: Record<string, never>; context?: Record<string, never> } | undefined;
  if (s && allow.includes('sampling')) {
    sampling = {};
    if (s.tools) sampling.tools = {};
    if (s.context) sampling.context = {};
  }
  sampling = upstreamSamplingCapability(sampling, cfg.sampling);
  if (sampling) out.sampling = sampling;
  // listChanged: the gateway tells the server when a call brings other roots (UpstreamSession.resyncRoots).
  if ((caps.roots && allow.includes('roots')) || cfg.roots.length > 0) out.roots = { listChanged: true };
  return out;
}

/**
 * The 2026 `capabilities` advertised for a legacy server: what the gateway serves of it.
 * `listChanged` (tools, prompts, resources) and `resources.subscribe` are passed on when the
 * upstream declared them: the gateway delivers them on `subscriptions/listen`
 * (`toolsListChanged`, `promptsListChanged`, `resourcesListChanged`, `resourceSubscriptions`).
 */
export function discoverCapabilities(upstream: ServerCapabilities): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const listChanged = (c: { listChanged?: boolean } | undefined) => (c?.listChanged ? { listChanged: true } : {});
  if (upstream.tools) {
    out.tools = listChanged(upstream.tools);
    out.extensions = { [TASKS_EXTENSION]: {} };
  }
  if (upstream.prompts) out.prompts = listChanged(upstream.prompts);
  if (upstream.resources)
    out.resources = { ...(upstream.resources.subscribe ? { subscribe: true } : {}), ...listChanged(upstream.resources) };
  if (upstream.completions) out.completions = {};
  return out;
}

/**
 * The bounds on parked calls of upstream `cfg` that hold a session of their own: `maxParkedSessions`
 * (default half of `maxSessions`, at least 1) and, when auth identifies callers (`perPrincipal`),
 * `maxParkedSessionsPerPrincipal` (default half of the lower of `maxSessionsPerPrincipal` and
 * `maxParkedSessions`, at least 1: one principal's abandoned forms leave parked sessions to others
 * even where `maxSessionsPerPrincipal` is not below `maxSessions`).
 * An unknown upstream (undefined) has none.
 */
export function parkedSessionLimits(
  cfg: Pick<UpstreamConfig, 'maxSessions' | 'maxSessionsPerPrincipal' | 'maxParkedSessions' | 'maxParkedSessionsPerPrincipal'> | undefined,
  perPrincipal: boolean,
): ParkedSessionLimits | undefined {
  if (!cfg) return undefined;
  const half = (n: number) => Math.max(1, Math.floor(n / 2));
  const max = cfg.maxParkedSessions ?? half(cfg.maxSessions);
  return {
    max,
    ...(perPrincipal ? { perPrincipal: cfg.maxParkedSessionsPerPrincipal ?? half(Math.min(cfg.maxSessionsPerPrincipal, max)) } : {}),
  };
}

/** -32603 "gateway shutting down" with HTTP 503: during the drain, a request that starts new work here. */
const shuttingDown = (upstream: string) =>
  new GatewayError(ErrorCode.InternalError, 'gateway shutting down', { upstream, reason: 'shutting-down' }, 503);

/** The era an upstream speaks. */
export type UpstreamEra = 'legacy' | 'modern';

/**
 * One configured upstream: its legacy session pool, its 2026-07-28 connection, the era it speaks,
 * and the cache of its tools' `x-mcp-header` annotations.
 */
export class Upstream {
  readonly pool: SessionPool;
  /** The 2026-07-28 hop (absent for HTTP+SSE upstreams and `protocol: "legacy"`). */
  readonly modern: ModernUpstream | undefined;
  readonly tools = new ToolCatalog();
  /** Sessions opened, died and failed, and the last failure (the admin view). */
  readonly health = new UpstreamHealth();
  private eraKnown: Promise<UpstreamEra> | undefined;
  /** With `protocol: "2026-07-28"`: the start (first answer) of the upstream, until it fails or its child exits. */
  private started: Promise<UpstreamEra> | undefined;
  /** The era `protocol: "auto"` detected, until forgotten. */
  private detected: UpstreamEra | undefined;
  /** The start budget until a start succeeded (`timeouts.firstStartMs`), shared by the pool and the 2026-07-28 hop. */
  readonly firstStart: FirstStart;
  /** The logger of this upstream's calls (`upstream` bound once, not per call). */
  readonly callLog: Logger;
  /** Counts a form elicitation declined upstream for asking secrets (set by the gateway's metrics). */
  onSecretDeclined: () => void = () => {};
  /** Records an entry of this upstream left out of a list answer (set by the gateway: logged, counted, shown on the admin page). */
  onDropped: (r: DropReport) => void = () => {};
  /** How this upstream sends its batches of input requests, learned from its calls. */
  readonly batching: BatchLearning;
  /** {@link mirrorCapabilities} of each parsed (shared, frozen) clientCapabilities object. */
  private readonly mirroredOf = new WeakMap<ClientCapabilities, LegacyClientCapabilities>();

  /**
   * The `initialize` capabilities that mirror `caps` on this upstream ({@link mirrorCapabilities}),
   * made once per capabilities object (the envelope check shares one per distinct JSON) and frozen.
   */
  mirrored(caps: ClientCapabilities): LegacyClientCapabilities {
    let m = this.mirroredOf.get(caps);
    if (!m) {
      m = deepFreeze(mirrorCapabilities(caps, this.cfg));
      this.mirroredOf.set(caps, m);
    }
    return m;
  }
  /**
   * @param perPrincipalBound whether `maxSessionsPerPrincipal` applies (auth identifies callers).
   * @param stopping true once the gateway drains (see `SessionOptions.stopping`).
   */
  constructor(
    readonly name: string,
    readonly cfg: UpstreamConfig,
    private readonly log: Logger,
    perPrincipalBound = true,
    stopping: () => boolean = () => false,
  ) {
    this.firstStart = new FirstStart(cfg);
    this.pool = new SessionPool(name, cfg, log, perPrincipalBound, stopping, this.firstStart);
    this.callLog = log.child({ upstream: name });
    this.batching = {
      quietMs: 0,
      onLearned: (quietMs, split) =>
        this.callLog.info(
          { quietMs },
          split
            ? 'upstream sent one batch of input requests in pieces; its batches now wait longer for upstream silence'
            : 'upstream sends concurrent input requests; its batches now wait for upstream silence',
        ),
    };
    this.pool.observer = {
      opened: () => this.health.noteOpened(),
      died: (reason, stderr) => this.health.noteDied(reason, stderr),
      openFailed: (message, stderr) => this.health.noteOpenFailed(message, stderr),
    };
    const modern =
      cfg.protocol === 'legacy'
        ? undefined
        : createModernUpstream(cfg, log.child({ upstream: name }), this.pool.http, stopping, this.firstStart);
    if (modern && cfg.protocol === '2026-07-28') modern.onLost = () => (this.started = undefined);
    this.modern = modern && tracedModernUpstream(name, cfg, modern);
  }

  /**
   * True while the upstream is in its first start ({@link FirstStart.active}) and a start is under
   * way: the era probe or a pinned 2026-07-28 start waits for the child's first answer, or a legacy
   * session (one on the probe's child too) has not finished `initialize`.
   */
  get firstStarting(): boolean {
    if (!this.firstStart.active) return false;
    return (this.eraKnown !== undefined && this.detected === undefined) || this.started !== undefined || this.pool.startingNow;
  }

  /** The era as known now: configured, or detected; undefined while `protocol: "auto"` has not asked yet. */
  get knownEra(): UpstreamEra | undefined {
    if (!this.modern) return 'legacy';
    if (this.cfg.protocol === '2026-07-28') return 'modern';
    return this.detected;
  }

  /**
   * The era the upstream speaks: configured, or (with `protocol: "auto"`) learned once by asking
   * `server/discover` (2026-07-28 basic/versioning: a legacy server answers with an error, or an
   * HTTP 4xx that wants `initialize`) and remembered until {@link forgetEra}. Over stdio the
   * child's first answer decides, within its start budget (`connectMs`, or `firstStartMs` for a
   * first start); silence that long is a start `timeout`. Over HTTP the probe waits at most half
   * of `timeouts.connectMs` (and at most 5 s), and silence counts as legacy. A stdio child
   * the probe spawned and found legacy is handed to the first legacy session (see {@link SessionPool.adopt}),
   * which sends `initialize` on it within what is left of its start budget since the spawn. With
   * `protocol: "2026-07-28"`, the upstream is started first (see {@link startModern}: its first
   * answer, to a `server/discover`, within `timeouts.connectMs`, or `firstStartMs` for a first
   * start), once until a call fails with `unreachable`, `crashed` or `protocol`, or its stdio child exits.
   * @throws GatewayError -32603 `unreachable` when the upstream cannot be reached to ask (or to
   *   start); `timeout` when a stdio upstream or a pinned 2026-07-28 one did not answer within its
   *   start budget;
   *   `protocol` when it broke the protocol.
   */
  era(): Promise<UpstreamEra> {
    if (!this.modern) return Promise.resolve('legacy');
    if (this.cfg.protocol === '2026-07-28') {
      const budgetMs = this.firstStart.budgetMs();
      const setting = this.firstStart.setting();
      this.started ??= startModern(this.modern, budgetMs).then(
        () => 'modern' as const,
        (e: Error) => {
          this.started = undefined;
          // A stdio child that did not answer in time is stopped (the next call starts another),
          // unless it is still in its first start: the next call waits on it (see keepStarting).
          if (e instanceof ModernHopError && e.reason === 'timeout' && !this.modern!.keepStarting?.())
            void this.modern!.close({ reopen: true });
          return this.startFailed(e, budgetMs, setting);
        },
      );
      return this.started;
    }
    // Over stdio the child's first answer tells the era, within its whole start budget (a slow
    // server is not taken for a silent legacy one); over HTTP half of connectMs at most, and what
    // the probe leaves of it is the first session's start budget.
    const stdio = this.cfg.transport === 'stdio';
    const budgetMs = stdio ? this.firstStart.budgetMs() : Math.min(this.cfg.timeouts.connectMs / 2, PROBE_MS);
    const setting = stdio ? this.firstStart.setting() : 'timeouts.connectMs';
    this.eraKnown ??= probeModern(this.modern, budgetMs, !stdio).then(
      async (discovered) => {
        const era: UpstreamEra = discovered ? 'modern' : 'legacy';
        this.detected = era;
        this.log.info({ upstream: this.name, era }, 'upstream era detected');
        if (era === 'legacy') {
          // The stdio child that was asked goes on as the first legacy session's (it is started
          // once, and a slow one keeps its whole budget); over HTTP nothing is left to close.
          const child = this.modern!.handOver?.();
          if (child) this.pool.adopt(child);
          else void this.modern!.close({ reopen: true });
        }
        return era;
      },
      (e: Error) => {
        this.eraKnown = undefined;
        // A stdio child that did not answer in time is stopped (the next call starts another),
        // unless it is still in its first start: the next call waits on it (see keepStarting).
        if (e instanceof ModernHopError && e.reason === 'timeout' && !this.modern!.keepStarting?.())
          void this.modern!.close({ reopen: true });
        return stdio ? this.startFailed(e, budgetMs, setting, PROTOCOL_HINT) : this.startFailed(e);
      },
    );
    return this.eraKnown;
  }

  /**
   * The era when it is known without waiting: a legacy-only upstream, or one whose
   * `protocol: "auto"` probe has answered (until {@link forgetEra}); else undefined (ask {@link era}).
   */
  settledEra(): UpstreamEra | undefined {
    if (!this.modern) return 'legacy';
    return this.cfg.protocol === 'auto' && this.eraKnown ? this.detected : undefined;
  }

  /**
   * Records and logs that the era probe or the start of a 2026-07-28 upstream failed with `e`
   * (`budgetMs` was its start budget, given by `setting`; `hint` ends a timeout's message).
   * @throws GatewayError -32603 `timeout` (no answer within `budgetMs`), `protocol` or `unreachable`.
   */
  private startFailed(e: Error, budgetMs = this.cfg.timeouts.connectMs, setting = 'timeouts.connectMs', hint = ''): never {
    const stderr = e instanceof ModernHopError ? e.stderr : [];
    const extra = stderr.length ? { stderr } : undefined;
    this.health.noteProbeFailed(e.message, stderr);
    this.log.warn({ upstream: this.name, err: e.message, ...extra }, 'upstream session failed to open');
    if (e instanceof ModernHopError && e.reason === 'protocol')
      throw upstreamFailed(this.name, 'protocol', `Upstream '${this.name}' failed: ${e.message}`);
    if (e instanceof ModernHopError && e.reason === 'timeout') {
      throw upstreamFailed(
        this.name,
        'timeout',
        startTimeoutMessage(this.name, budgetMs, e.message, 'server/discover', setting) + hint,
        extra,
      );
    }
    throw upstreamFailed(this.name, 'unreachable', unreachableText(this.name, e.message, stderr), extra);
  }

  /**
   * With `protocol: "auto"`, asks the upstream's era again at next use (after a failure: it may have
   * been replaced); with `protocol: "2026-07-28"`, starts it again at next use.
   */
  forgetEra(): void {
    if (this.cfg.protocol === 'auto') this.eraKnown = this.detected = undefined;
    if (this.cfg.protocol === '2026-07-28') this.started = undefined;
  }

  /**
   * A call to this upstream failed with `data.reason` `reason`. With `protocol: "auto"`, the era is
   * asked again at next use after the failures that a replaced upstream shows: it cannot be reached
   * (`unreachable`, which includes an `initialize` it refused), its process exited (`crashed`), or,
   * taken for 2026-07-28, it broke that protocol (`protocol`). A pinned 2026-07-28 upstream is
   * started again at next use after the same failures.
   */
  noteFailure(reason: string | undefined): void {
    const modern = this.detected === 'modern' || this.cfg.protocol === '2026-07-28';
    if (reason === 'unreachable' || reason === 'crashed' || (modern && reason === 'protocol')) this.forgetEra();
  }

  /**
   * Reports that tool `tool` is left out of a `tools/list` answer: its `x-mcp-header` annotations
   * are invalid (`invalid-x-mcp-header`), or its name breaks the tool-name rules (`invalid-name`);
   * `detail` says how.
   */
  noteDropped(tool: string, reason: 'invalid-x-mcp-header' | 'invalid-name', detail: string): void {
    this.onDropped({
      upstream: this.name,
      kind: 'tool',
      name: tool,
      reason,
      detail: reason === 'invalid-name' ? `the name ${detail}` : detail,
    });
  }

  /** `tools` of a `tools/list` result as the gateway serves them: without the tools the `tools` lists leave out or whose names break the tool-name rules (reported). */
  servedList<T>(tools: T): T {
    return servedToolList(this.cfg.tools, tools, (name, problem) => this.noteDropped(name, 'invalid-name', problem));
  }
}

/** `tool` without a 2025-11-25 `execution.taskSupport` (and without `execution` when nothing else is in it). */
function withoutTaskSupport(tool: ListedTool): ListedTool {
  const execution = (tool as { execution?: unknown }).execution;
  if (!execution || typeof execution !== 'object' || !('taskSupport' in execution)) return tool;
  const { taskSupport: _dropped, ...rest } = execution as Record<string, unknown>;
  const { execution: _old, ...others } = tool as ListedTool & { execution?: unknown };
  return (Object.keys(rest).length ? { ...others, execution: rest } : others) as ListedTool;
}

/** A request to a legacy upstream: what is left of `timeouts.connectMs` for a session it opens, in ms. */
type LegacyContext = CallContext & { startMs?: number };

/** The pool options of a request's session acquisition: its abort signal, timing and start budget. */
function acquireOptions(ctx: LegacyContext): AcquireOptions {
  return { signal: ctx.connection.signal, timing: ctx.timing, startMs: ctx.startMs };
}

/**
 * `work`, or -32603 `cancelled` as soon as `signal` aborts (the client went away): the request is
 * released at once, and `work` goes on for whoever else waits on it.
 */
function untilAborted<T>(work: Promise<T>, signal: AbortSignal | undefined, upstream: string): Promise<T> {
  if (!signal) return work;
  return new Promise<T>((resolve, reject) => {
    const gone = () => reject(upstreamFailed(upstream, 'cancelled', `The client went away while upstream '${upstream}' was starting`));
    if (signal.aborted) return gone();
    signal.addEventListener('abort', gone, { once: true });
    work.then(resolve, reject).finally(() => signal.removeEventListener('abort', gone));
  });
}

/** Longest wait for the `server/discover` that tells an HTTP upstream's era, in ms. */
const PROBE_MS = 5000;

/** Ends the message of a stdio era probe that got no answer: the era can be set instead of asked. */
const PROTOCOL_HINT =
  '; a server that ignores requests it does not know needs protocol: "legacy" (a 2026-07-28 server can be set to protocol: "2026-07-28")';

/** The gateway core: upstreams, the MRTR bridge and request routing. */
export class Gateway {
  readonly upstreams = new Map<string, Upstream>();
  readonly bridge: MrtrBridge;
  /** Seals and opens every requestState (bridge and pass-through). */
  readonly sealer: StateSealer;
  /** Task records, spent requestState ids and live replicas: in memory, or shared on Redis. */
  readonly store: SharedStore;
  /** This replica's id (sealed into park-mode states and task records). */
  readonly replica: string;
  private heartbeat: NodeJS.Timeout | undefined;
  /** The heartbeat written when the store becomes reachable; cleared when the replica leaves. */
  private beatOnReachable: (() => void) | undefined;
  /** Client-facing ids of tasks that 2026-07-28 upstreams created. */
  readonly taskIds: TaskIdBinder;
  /** 2026-07-28 clients to 2026-07-28 upstreams. */
  readonly modern: ModernPassThrough;
  readonly tasks: TaskManager;
  readonly metrics: Metrics;
  /** Answers legacy upstreams' sampling through the configured LLM providers (none configured: no provider calls). */
  readonly sampler: Sampler;
  /** Uses of features 2026-07-28 deprecated or removed, by upstream, tool and feature. */
  readonly census: Census;
  /** Entries left out of list answers (invalid tool names and annotations, federation conflicts). */
  readonly dropped: DroppedEntries;
  /** True when no requestState key was configured and one was generated. */
  readonly generatedStateKey: boolean;
  private closing = false;
  /** Set by {@link drain}: only work already held here is served. */
  private draining = false;
  private readonly closers: (() => Promise<void>)[] = [];
  /** Open `subscriptions/listen` subscriptions, ended gracefully at shutdown. */
  private readonly subscriptions = new Set<Subscription>();

  constructor(
    readonly cfg: GatewayConfig,
    private readonly log: Logger,
  ) {
    this.store =
      cfg.store.kind === 'redis'
        ? RedisStore.create({
            url: cfg.store.url,
            keyPrefix: cfg.store.keyPrefix,
            connectTimeoutMs: cfg.store.connectTimeoutMs,
            log: log.child({ component: 'store' }),
          })
        : new MemoryStore(cfg.tasks.maxRecords);
    this.replica = randomUUID();
    this.tasks = new TaskManager(this.store, log, this.replica, new TaskQuota(cfg.tasks));
    for (const [name, ucfg] of Object.entries(cfg.upstreams)) {
      // Without auth every caller is the one principal `anonymous`: a per-principal bound would only shrink the pool.
      const effective = cfg.auth.mode === 'none' ? { ...ucfg, maxSessionsPerPrincipal: ucfg.maxSessions } : ucfg;
      this.upstreams.set(name, new Upstream(name, effective, log, cfg.auth.mode !== 'none', () => this.draining));
    }
    const keys = cfg.requestState.keys.length ? cfg.requestState.keys : [generatedKey()];
    this.generatedStateKey = cfg.requestState.keys.length === 0;
    this.sealer = new StateSealer(keys);
    this.taskIds = new TaskIdBinder(keys[0]!);
    this.modern = new ModernPassThrough(this.sealer, this.store.spent, this.taskIds, cfg.requestState.ttlMs, log);
    this.bridge = new MrtrBridge(this.sealer, cfg.requestState.ttlMs, log, this.store.spent, this.replica, this.store.kind !== 'memory', {
      total: cfg.limits.maxParked,
      perUpstream: (name) => cfg.upstreams[name]?.maxParked ?? Infinity,
      sessions: (name) => parkedSessionLimits(cfg.upstreams[name], cfg.auth.mode !== 'none'),
    });
    this.metrics = new Metrics({
      sessions: () => [...this.upstreams.values()].map((u) => ({ upstream: u.name, ...u.pool.stats() })),
      parked: () => this.bridge.parkedByUpstream(),
      runningTasks: () => this.tasks.running,
      samplingInFlight: () => this.sampler.inFlight(),
      census: () => this.census.snapshot(),
    });
    for (const up of this.upstreams.values()) up.onSecretDeclined = () => this.metrics.secretDeclines.inc({ upstream: up.name });
    this.dropped = new DroppedEntries(log, (upstream, kind, reason) => this.metrics.droppedEntries.inc({ upstream, kind, reason }));
    for (const up of this.upstreams.values()) up.onDropped = (r) => this.dropped.note(r);
    this.sampler = new Sampler(cfg.sampling, this.metrics, log.child({ component: 'sampling' }));
    this.census = new Census({
      upstreams: [...this.upstreams.keys()],
      onCount: (upstream, tool, feature) => this.metrics.deprecatedFeatureCalls.inc({ upstream, tool, feature }),
    });
    for (const up of this.upstreams.values()) up.pool.observer.unclaimed = (m) => this.census.countMessage(up.name, NO_CALL, m);
    this.bridge.onRound = (upstream, methods) => {
      for (const kind of new Set(methods.map((m) => INPUT_KIND_OF[m] ?? m))) this.metrics.inputRounds.inc({ upstream, kind });
    };
    this.tasks.onStatus = (status) => this.metrics.tasks.inc({ status });
  }

  /**
   * Starts this replica's heartbeat in the store, under `url` (the base URL other replicas forward
   * to). With the memory store it only records the URL.
   */
  startReplica(url: string): void {
    const self: ReplicaInfo = { id: this.replica, url: this.cfg.replicas.advertiseUrl?.replace(/\/$/, '') ?? url };
    const beat = () =>
      this.store.replicas
        .heartbeat(self, this.cfg.replicas.deadAfterMs)
        .catch((e: Error) => this.log.debug({ err: e.message }, 'replica heartbeat not written'));
    void beat();
    // The first beat fails while the store is still connecting, and a restarted Redis forgets it:
    // beat again whenever the store becomes reachable, so other replicas can forward here at once.
    clearInterval(this.heartbeat);
    this.beatOnReachable = beat;
    if (!this.heartbeat) this.store.onReachable(() => void this.beatOnReachable?.());
    this.heartbeat = setInterval(beat, this.cfg.replicas.heartbeatMs);
    this.heartbeat.unref();
    this.log.info({ replica: this.replica, url: self.url, store: this.store.kind }, 'replica registered');
  }

  /**
   * The live replica `id` (its URL), or undefined when its heartbeat stopped.
   * @throws StoreUnavailable when the registry cannot be read (which says nothing about the replica).
   */
  async replicaInfo(id: string): Promise<ReplicaInfo | undefined> {
    return this.store.replicas.lookup(id);
  }

  /** Registers work to do when the gateway closes (before upstream sessions close). */
  onClose(fn: () => Promise<void>): void {
    this.closers.push(fn);
  }

  /**
   * Readiness: every upstream marked `required` can be started or reached (probing those that
   * have not succeeded yet, or failed last, by opening a session, all at once; one with a first
   * start ahead or under way, see `timeouts.firstStartMs`, is not ready, without waiting: its start
   * is begun in the background), and the shared store is
   * reachable and takes a write and a read under its key prefix (`store` says why not).
   */
  async readiness(): Promise<{ ready: boolean; upstreams: { name: string; ready: boolean; reason?: string }[]; store?: string }> {
    const required = [...this.upstreams.values()].filter((up) => up.cfg.required);
    // Checked side by side: one upstream's slow start does not hold up the others'.
    const out = await Promise.all(
      required.map((up) => {
        // A first start (an install, maybe) is not waited for, nor a session start before any opened:
        // not ready until a session opened. One not begun yet is begun in the background.
        const first = `Upstream '${up.name}' is in its first start (it may be installing; timeouts.firstStartMs=${up.firstStart.budgetMs()} ms)`;
        if (up.firstStarting) return { name: up.name, ready: false, reason: first };
        if (up.pool.opened === 0 && up.pool.startingNow)
          return { name: up.name, ready: false, reason: `Upstream '${up.name}' is starting` };
        const checked = this.upstreamReady(up);
        if (!up.firstStart.active) return checked;
        void checked;
        return { name: up.name, ready: false, reason: up.pool.lastError ?? first };
      }),
    );
    const store = await this.store.unavailable();
    return { ready: !this.closing && !store && out.every((u) => u.ready), upstreams: out, ...(store ? { store } : {}) };
  }

  /** Whether required upstream `up` can be started or reached: its era, then a session (opened now when none has). Never throws. */
  private async upstreamReady(up: Upstream): Promise<{ name: string; ready: boolean; reason?: string }> {
    try {
      if ((await up.era()) === 'modern') return { name: up.name, ready: true };
    } catch (e) {
      return { name: up.name, ready: false, reason: (e as Error).message };
    }
    if (up.pool.lastError === undefined && up.pool.opened > 0) return { name: up.name, ready: true };
    try {
      const lease = await up.pool.acquireShared('gateway:readiness', {});
      lease.release(true);
      return { name: up.name, ready: true };
    } catch (e) {
      return { name: up.name, ready: false, reason: up.pool.lastError ?? (e as Error).message };
    }
  }

  /**
   * Serves one validated request for upstream `name`. The upstream's `tools` policy applies to
   * both eras: a tool it does not serve is left out of `tools/list`, and its `tools/call` is
   * refused before anything goes upstream.
   * @returns the JSON-RPC `result` (always with `resultType`).
   * @throws GatewayError: -32601 (404) unknown upstream or capability the upstream lacks; -32602 bad
   *   requestState/inputResponses, or a tool the `tools` policy does not serve ("Unknown tool");
   *   -32021 (400) missing client capability; -32603 upstream failure.
   */
  async handle(
    name: string,
    req: ValidatedRequest,
    ctx: CallContext & { paramHeaders?: Record<string, string> },
  ): Promise<Record<string, unknown>> {
    const up = this.upstreams.get(name);
    if (!up) throw methodNotFound(`Unknown upstream '${quoted(name)}'`);
    if (this.closing) throw shutdownFailure(name);
    if (this.draining && !Gateway.drainAdmits(req)) throw shuttingDown(name);
    if (req.method === 'subscriptions/listen')
      throw methodNotFound('subscriptions/listen needs a streaming response; use the HTTP front door');
    if (req.method === 'tools/call') {
      const refused = toolCallRefusal(up.cfg.tools, String(req.params.name));
      if (refused) throw refused;
    }
    try {
      const result = await this.route(up, req, ctx);
      if (req.method === 'tools/list' && result.tools !== undefined) result.tools = up.servedList(result.tools);
      return result;
    } catch (e) {
      // An upstream that failed this way may come back as another era.
      if (e instanceof GatewayError) up.noteFailure((e.data as { reason?: string } | undefined)?.reason);
      throw e;
    }
  }

  /** Serves one request of upstream `up` by the era it speaks and the method. */
  private async route(
    up: Upstream,
    req: ValidatedRequest,
    ctx: CallContext & { paramHeaders?: Record<string, string> },
  ): Promise<Record<string, unknown>> {
    let era = up.settledEra();
    let probeMs = 0;
    if (!era) {
      const asked = performance.now();
      era = await untilAborted(this.eraOf(up), ctx.connection.signal, up.name);
      // Waiting for the era probe is upstream start-up time, and it counts against connectMs.
      probeMs = performance.now() - asked;
      if (ctx.timing) ctx.timing.upstreamMs += probeMs;
    }
    if (era === 'modern') {
      // A 2026-07-28 upstream's retry is a new request upstream: nothing of it is held here.
      if (this.draining && !(TASK_METHODS as readonly string[]).includes(req.method)) throw shuttingDown(up.name);
      return this.modern.handle(up, req, ctx);
    }
    // Over HTTP the probe's time counts against connectMs; a stdio session takes over the probe's
    // child with what is left of its budget since the spawn (or spawns one with a whole budget).
    const legacy: LegacyContext =
      up.cfg.transport === 'stdio' ? ctx : { ...ctx, startMs: Math.max(1, up.cfg.timeouts.connectMs - probeMs) };
    if ((EXCHANGE_METHODS as readonly string[]).includes(req.method)) return this.exchange(up, req, legacy);
    if ((TASK_METHODS as readonly string[]).includes(req.method)) return this.task(up, req, ctx);
    return this.simple(up, req, legacy);
  }

  /**
   * Opens a `subscriptions/listen` subscription (MCP 2026-07-28 §Subscriptions) for upstream
   * `name`, with the filter of `req.params.notifications` (see src/router/subscriptions.ts for what is
   * honored and how). The caller acknowledges `honored`, then attaches its sink.
   * @throws GatewayError -32601 (404) unknown upstream; -32021 (400) `taskIds` without the tasks
   *   extension; -32603 no upstream session (`data.reason`), or shutting down.
   */
  async listen(name: string, req: ValidatedRequest, ctx: { principal: string; token?: string }): Promise<Subscription> {
    const up = this.upstreams.get(name);
    if (!up) throw methodNotFound(`Unknown upstream '${quoted(name)}'`);
    if (this.closing) throw shutdownFailure(name);
    const filter = (req.params.notifications ?? {}) as ListenFilter;
    const sub =
      (await this.eraOf(up)) === 'modern'
        ? await openModernSubscription(
            { name, modern: up.modern! },
            filter,
            {
              ...req.meta,
              [META_CLIENT_CAPABILITIES]: allowedCapabilities(req.clientCapabilities as Record<string, unknown>, up.cfg.input.allow),
            },
            { declaresTasks: Gateway.declaresTasks(req) },
            { wrap: (id) => this.taskIds.wrap(name, ctx.principal, id), unwrap: (id) => this.taskIds.unwrap(name, ctx.principal, id) },
            up.cfg.timeouts.requestMs,
          )
        : await this.legacySubscription(up, req, filter, ctx);
    if (this.closing) {
      sub.end();
    } else {
      this.subscriptions.add(sub);
      sub.onEnd(() => this.subscriptions.delete(sub));
    }
    return sub;
  }

  private legacySubscription(
    up: Upstream,
    req: ValidatedRequest,
    filter: ListenFilter,
    ctx: { principal: string; token?: string },
  ): Promise<Subscription> {
    return openSubscription(
      up,
      this.tasks,
      filter,
      { principal: ctx.principal, token: ctx.token, caps: up.mirrored(req.clientCapabilities), declaresTasks: Gateway.declaresTasks(req) },
      this.log.child({ upstream: up.name }),
    );
  }

  /**
   * The upstream's era, learned when needed; a failure to reach it is the upstream's failure.
   * @throws GatewayError -32603 `unreachable`.
   */
  private async eraOf(up: Upstream): Promise<UpstreamEra> {
    return up.era();
  }

  /** True when the request declared the tasks extension in its clientCapabilities. */
  static declaresTasks(req: ValidatedRequest): boolean {
    return Boolean((req.clientCapabilities.extensions as Record<string, unknown> | undefined)?.[TASKS_EXTENSION]);
  }

  private async task(up: Upstream, req: ValidatedRequest, ctx: CallContext): Promise<Record<string, unknown>> {
    if (!Gateway.declaresTasks(req)) throw tasksExtensionRequired();
    const caller = { principal: ctx.principal, upstream: up.name };
    const { taskId } = req.params;
    switch (req.method) {
      case 'tasks/get':
        return { resultType: 'complete', ...detailedTask(await this.tasks.get(taskId, caller)) };
      case 'tasks/update':
        await this.tasks.update(taskId, caller, req.params.inputResponses);
        return { resultType: 'complete' };
      default:
        await this.tasks.cancel(taskId, caller);
        return { resultType: 'complete' };
    }
  }

  private async simple(up: Upstream, req: ValidatedRequest, ctx: LegacyContext): Promise<Record<string, unknown>> {
    const caps = up.mirrored(req.clientCapabilities);
    const lease = await up.pool.acquireShared(ctx.principal, caps, ctx.token, acquireOptions(ctx));
    let reusable = true;
    const upstreamStart = performance.now();
    try {
      up.tools.watch(lease.session);
      const info = lease.session.info;
      if (req.method === 'server/discover') {
        return {
          resultType: 'complete',
          supportedVersions: [...SUPPORTED_VERSIONS],
          capabilities: discoverCapabilities(info.capabilities),
          ...(info.instructions ? { instructions: info.instructions } : {}),
          ttlMs: up.cfg.cache.ttlMs,
          cacheScope: up.cfg.cache.scope,
          _meta: { [META_SERVER_INFO]: info.serverInfo },
        };
      }
      const needed = UPSTREAM_CAPABILITY_FOR[req.method];
      if (needed && !info.capabilities[needed]) {
        throw methodNotFound(`Method not found: ${req.method} (upstream '${up.name}' does not offer ${needed})`);
      }
      const trace = startClientSpan({
        method: req.method,
        params: req.params,
        upstream: up.name,
        endpoint: up.cfg,
        protocolVersion: info.protocolVersion,
      });
      let result: Record<string, unknown>;
      try {
        result = (await within(trace, () =>
          lease.session.request({ method: req.method, params: trace ? { ...req.params, _meta: traceMeta({}) } : req.params }, LooseResult, {
            timeout: up.cfg.timeouts.requestMs,
            signal: ctx.connection.signal,
          }),
        )) as Record<string, unknown>;
        endSpan(trace, { result });
      } catch (e) {
        if (trace) endSpan(trace, { error: downstreamError(up.name, e, lease.session) });
        throw e;
      }
      up.pool.noteSuccess();
      if (ctx.timing) ctx.timing.upstreamMs += performance.now() - upstreamStart;
      const out: Record<string, unknown> = { ...result, resultType: 'complete' };
      if (req.method === 'tools/list' && Array.isArray(result.tools)) {
        out.tools = this.servedTools(
          up,
          SessionPool.keyOf(ctx.principal, caps),
          result.tools as ListedTool[],
          req.params.cursor === undefined && result.nextCursor === undefined,
        );
      }
      if ((LIST_METHODS as readonly string[]).includes(req.method)) {
        out.ttlMs = up.cfg.cache.ttlMs;
        out.cacheScope = up.cfg.cache.scope;
      }
      return out;
    } catch (e) {
      reusable = keepsSession(e);
      throw downstreamError(up.name, e, lease.session);
    } finally {
      lease.release(reusable);
    }
  }

  /**
   * The tools of one `tools/list` page as served downstream: tools whose `x-mcp-header`
   * annotations are invalid are left out (MCP 2026-07-28 Streamable HTTP §"Schema Extension"), a
   * 2025-11-25 `execution.taskSupport` is removed (2026-07-28 has no such field: the gateway's
   * tasks extension decides, see `tasks.tools`), and a complete listing (one page) refreshes the
   * annotation cache of view `key`.
   */
  private servedTools(up: Upstream, key: string, tools: ListedTool[], complete: boolean): ListedTool[] {
    const index = indexTools(tools);
    if (complete) up.tools.store(key, index);
    const served: ListedTool[] = [];
    for (const t of tools) {
      const h = index.get(t.name);
      if (h && 'invalid' in h) {
        up.noteDropped(t.name, 'invalid-x-mcp-header', h.invalid);
        continue;
      }
      served.push(withoutTaskSupport(t));
    }
    return served;
  }

  /**
   * Every tool the upstream lists for this caller (all pages), on a shared session.
   * @throws GatewayError -32601 (HTTP 404) when the upstream offers no tools; the upstream's failure.
   */
  private async listTools(up: Upstream, ctx: LegacyContext, caps: ReturnType<typeof mirrorCapabilities>): Promise<ListedTool[]> {
    const lease = await up.pool.acquireShared(ctx.principal, caps, ctx.token, acquireOptions(ctx));
    let reusable = true;
    const upstreamStart = performance.now();
    try {
      up.tools.watch(lease.session);
      if (!lease.session.info.capabilities.tools)
        throw methodNotFound(`Method not found: tools/call (upstream '${up.name}' does not offer tools)`);
      const tools: ListedTool[] = [];
      let cursor: string | undefined;
      do {
        const page = (await lease.session.request({ method: 'tools/list', params: cursor ? { cursor } : {} }, LooseResult, {
          timeout: up.cfg.timeouts.requestMs,
          signal: ctx.connection.signal,
        })) as { tools?: ListedTool[]; nextCursor?: string };
        tools.push(...(Array.isArray(page.tools) ? page.tools : []));
        cursor = typeof page.nextCursor === 'string' && page.nextCursor ? page.nextCursor : undefined;
      } while (cursor);
      return tools;
    } catch (e) {
      reusable = keepsSession(e);
      throw downstreamError(up.name, e, lease.session);
    } finally {
      if (ctx.timing) ctx.timing.upstreamMs += performance.now() - upstreamStart;
      lease.release(reusable);
    }
  }

  /**
   * Checks that the upstream lists the tool of a `tools/call` (MCP 2026-07-28 basic §Error Codes:
   * an unknown tool is -32602 Invalid params), and its `Mcp-Param-*` headers against
   * the tool's `x-mcp-header` annotations (Streamable HTTP §"Server Behavior for Custom Headers").
   * Both come from the upstream's cached `tools/list` for this caller's view, listed on a miss and
   * listed again before a tool missing from it is refused.
   * @returns what the gateway knows of the tool.
   * @throws GatewayError -32602 "Unknown tool: NAME" for a tool the upstream does not list, or one
   *   left out of tools/list for its invalid annotations; -32020 (HTTP 400) for a missing, malformed
   *   or mismatched header; -32601 (HTTP 404) when the upstream offers no tools.
   */
  private checkToolHeaders(
    up: Upstream,
    req: ValidatedRequest,
    ctx: LegacyContext,
    name: string,
    args: unknown,
  ): ToolHeaders | Promise<ToolHeaders> {
    const caps = up.mirrored(req.clientCapabilities);
    const key = SessionPool.keyOf(ctx.principal, caps);
    const check = (tool: ToolHeaders | undefined): ToolHeaders => {
      if (!tool) throw unknownTool(name);
      if ('invalid' in tool) throw invalidParams(`Unknown tool: ${name} (left out of tools/list: ${tool.invalid})`);
      checkParamHeaders(tool.params, args as Record<string, unknown> | undefined, req.paramHeaders);
      return tool;
    };
    // Known (the usual case): checked at once, without a listing.
    const cached = up.tools.cached(key, name);
    return cached ? check(cached) : up.tools.lookup(key, name, () => this.listTools(up, ctx, caps)).then(check);
  }

  /**
   * Whether a call waits parked between rounds or is replayed (`input.mode`, per tool or per
   * upstream): `auto` replays what is safe to run again: tools annotated `readOnlyHint` or
   * `idempotentHint`, `prompts/get` and `resources/read`.
   */
  private static replays(up: Upstream, method: ExchangeMethod, name: string, tool: ToolHeaders | undefined): boolean {
    const mode = (method === 'tools/call' ? up.cfg.input.tools[name]?.mode : undefined) ?? up.cfg.input.mode;
    if (mode !== 'auto') return mode === 'replay';
    return method !== 'tools/call' || tool?.replayable === true;
  }

  private async exchange(up: Upstream, req: ValidatedRequest, ctx: LegacyContext): Promise<Record<string, unknown>> {
    // A legacy `task` param from the client is ignored: the gateway alone decides about tasks.
    const { inputResponses, requestState, task: _legacyTask, ...legacyParams } = req.params;
    const method = req.method as ExchangeMethod;
    const name = String(method === 'resources/read' ? legacyParams.uri : legacyParams.name);
    const binding = { upstream: up.name, principal: ctx.principal, method, name, args: legacyParams.arguments };
    // Before the tool check: a call parked on another replica is forwarded there (HeldElsewhere),
    // which checks the tool and its headers; this replica lists no tools for it.
    const claims = requestState !== undefined ? await this.bridge.open(binding, requestState) : undefined;
    const checked = method === 'tools/call' ? this.checkToolHeaders(up, req, ctx, name, legacyParams.arguments) : undefined;
    const tool = checked instanceof Promise ? await checked : checked;
    const window = up.cfg.input.batchWindowMs;
    const tasksDeclared = method === 'tools/call' && Gateway.declaresTasks(req);
    const toolTasks = method === 'tools/call' ? up.cfg.tasks.tools[name] : undefined;
    if (toolTasks?.required && !tasksDeclared) {
      throw tasksExtensionRequired(`tool '${name}' runs only as a task`);
    }
    const taskAfterMs = toolTasks?.taskAfterMs ?? up.cfg.tasks.taskAfterMs;
    // A caller holding tasks.maxRecordsPerPrincipal records gets no new task: its call is answered
    // in the request, or, for a tool that runs only as a task, refused before it reaches the upstream.
    const taskRoom = !tasksDeclared || this.tasks.admits(ctx.principal);
    if (!taskRoom && toolTasks?.required && requestState === undefined) throw this.tasks.recordsFull(up.name);
    // During the drain a resumed call is answered in this request; a task would be cancelled at the end.
    const escalation: TaskEscalation | undefined =
      tasksDeclared && taskRoom && !this.draining
        ? {
            afterMs: taskAfterMs,
            create: (ex) =>
              this.tasks.create(
                ex,
                { principal: ctx.principal, upstream: up.name },
                { ...up.cfg.tasks, batchWindowMs: window, tool: name },
              ),
          }
        : undefined;
    let result: Record<string, unknown>;
    let replay: { entries: ReplayEntry[]; round: number } | undefined;
    if (claims) {
      // A replay-mode retry runs the call again: during the drain another replica does that, and its state stays unspent.
      if (this.draining && claims.rp) throw shuttingDown(up.name);
      noteInputRound(claims.rnd);
      if (claims.rp) replay = { entries: await this.bridge.replayAnswers(claims, inputResponses), round: claims.rnd };
      else return this.completed(up, method, true, await this.bridge.resume(claims, binding, inputResponses, ctx, window, escalation));
    } else if (Gateway.replays(up, method, name, tool)) {
      replay = { entries: [], round: 0 };
    }
    const caps = up.mirrored(req.clientCapabilities);
    let lease =
      up.pool.tryAcquireCall(ctx.principal, caps, ctx.token) ??
      (await up.pool.acquireCall(ctx.principal, caps, ctx.token, acquireOptions(ctx)));
    up.tools.watch(lease.session);
    const needed = UPSTREAM_CAPABILITY_FOR[method]!;
    if (!lease.session.serverCapabilities[needed]) {
      lease.release(true);
      throw methodNotFound(`Method not found: ${method} (upstream '${up.name}' does not offer ${needed})`);
    }
    let legacyTask: { ttlMs: number } | undefined;
    if (method === 'tools/call') {
      const support = lease.session.knownTaskSupport() ?? (await lease.session.taskSupportOf(name, up.cfg.timeouts.requestMs));
      if (support === 'required' || (support === 'optional' && tasksDeclared && taskAfterMs === 0))
        legacyTask = { ttlMs: up.cfg.tasks.ttlMs };
    }
    if (legacyTask && lease.shared) {
      // What an upstream task asks comes on the streams of its tasks/* requests: the call needs a session of its own.
      lease.release(true);
      lease = await up.pool.acquire(ctx.principal, caps, ctx.token, acquireOptions(ctx));
    }
    const census = this.census.call(up.name, toolLabel(method, name));
    const ex = new Exchange({
      upstream: up.name,
      cfg: up.cfg,
      principal: ctx.principal,
      method,
      params: legacyParams,
      clientCapabilities: req.clientCapabilities,
      pool: up.pool,
      lease,
      log: up.callLog,
      prefilled:
        requestState === undefined && inputResponses && typeof inputResponses === 'object' && !Array.isArray(inputResponses)
          ? { ...(inputResponses as Record<string, unknown>) }
          : undefined,
      legacyTask,
      replay: replay?.entries,
      onSecretDeclined: up.onSecretDeclined,
      batching: up.batching,
      sampler: this.sampler,
      census,
    });
    ex.start();
    result = await this.bridge.drive(
      ex,
      binding,
      ctx,
      window,
      escalation,
      replay ? { round: replay.round, maxBytes: up.cfg.input.maxReplayStateBytes } : undefined,
    );
    return this.completed(up, method, requestState !== undefined, result);
  }

  /** The answer to an Exchange method: input_required and tasks as they are, else `complete` (with the caching hints of resources/read). */
  private completed(up: Upstream, method: ExchangeMethod, retried: boolean, result: Record<string, unknown>): Record<string, unknown> {
    if (result.resultType === 'task') return result;
    if (result.resultType === 'input_required') return result;
    const out: Record<string, unknown> = { ...result, resultType: 'complete' };
    if (method === 'resources/read') {
      // Results of requests that carried requestState must not be cached (SEP-2549).
      out.ttlMs = retried ? 0 : up.cfg.cache.ttlMs;
      out.cacheScope = retried ? 'private' : up.cfg.cache.scope;
    }
    return out;
  }

  /**
   * Whether a request may be served during the drain: the retry of a parked call (a call with
   * `requestState`; the router then refuses one that is not parked here, or is a replay-mode
   * state) and `tasks/get|update|cancel`, which start no upstream call.
   */
  private static drainAdmits(req: ValidatedRequest): boolean {
    if ((TASK_METHODS as readonly string[]).includes(req.method)) return true;
    return (EXCHANGE_METHODS as readonly string[]).includes(req.method) && req.params.requestState !== undefined;
  }

  /**
   * Begins shutdown (before {@link close}): new calls get 503 / -32603 "gateway shutting down";
   * retries of calls parked here and `tasks/*` requests are still served, and a call that asks
   * for input is answered -32603 `shutting-down` instead of being parked.
   */
  drain(): void {
    this.draining = true;
    this.bridge.drain();
  }

  /** True once {@link drain} was called. */
  get isDraining(): boolean {
    return this.draining;
  }

  /** Work held here that a retry or `tasks/update` may still need: parked calls and tasks running here. */
  get heldWork(): number {
    return this.bridge.parkedCount + this.tasks.running;
  }

  /**
   * Stops serving: open `subscriptions/listen` streams end gracefully, work registered with
   * {@link onClose} runs (legacy sessions end), calls still waiting get -32603 "gateway shutting
   * down" and are cancelled upstream, as are running tasks and parked calls; then every upstream
   * session closes, and so does every 2026-07-28 hop: its requests in flight are cancelled upstream
   * and answered -32603 "gateway shutting down" (`shutting-down`), and stdio children end (SIGTERM,
   * then SIGKILL after `KILL_AFTER_MS`, 2 s).
   */
  async close(): Promise<void> {
    this.closing = true;
    for (const sub of [...this.subscriptions]) sub.end();
    await Promise.all(this.closers.map((fn) => fn().catch(() => {})));
    this.tasks.cancelAll();
    this.bridge.cancelAll((upstream) => shutdownFailure(upstream));
    // Let the cancellations reach the upstreams before their sessions close.
    await new Promise((r) => setTimeout(r, 20));
    await Promise.all([...this.upstreams.values()].flatMap((u) => [u.pool.close(), u.modern?.close()]));
    clearInterval(this.heartbeat);
    this.beatOnReachable = undefined;
    await this.store.replicas.leave(this.replica).catch(() => {});
    await this.store.close();
  }
}
