/**
 * The assembly of the gateway: {@link wire} builds every long-lived object once, from the loaded
 * config, in this order: tracing (when `OTEL_*` asks for it), the shared store (memory or Redis),
 * the task manager and its quota, the upstreams, the requestState sealer and task-id binder, the
 * per-user credentials' parts (the sealed box of the credentials keys, the token exchanger, the
 * OAuth grants and their consent flow), the modern pass-through, the MRTR bridge, metrics, dropped entries, the sampler, the census, the
 * bridge cell and the router; then the front door's parts (federation, authenticator, Host/Origin
 * guard, per-caller limiters, the legacy session registry) and the front door itself. Nothing else
 * constructs a long-lived object.
 *
 * {@link Wiring} owns what spans all of them: this replica's heartbeat, readiness (`GET /readyz`),
 * the drain (the one draining flag, read by the router and the front door), and close, in the order
 * of a graceful stop ({@link Wiring.stop}).
 */
import { randomUUID } from 'node:crypto';
import type { ServerType } from '@hono/node-server';
import type { GatewayConfig } from './config/schema.js';
import { MrtrBridge } from './cells/bridge/mrtr.js';
import { BridgeServer } from './cells/bridge/serve.js';
import { TaskManager } from './cells/bridge/tasks/manager.js';
import { TaskQuota } from './cells/bridge/tasks/quota.js';
import { ModernPassThrough } from './cells/modern/passthrough.js';
import { Credentials } from './credentials/credentials.js';
import { OAuthGrants } from './credentials/grants.js';
import { TokenExchange } from './credentials/token-exchange.js';
import { Federation } from './federation/federation.js';
import { createApp, type AppDeps, type FrontDoor } from './http/app.js';
import type { Readiness } from './http/door.js';
import { legacyRecorder } from './http/request-log.js';
import { CallerLimiter, OriginGuard, callerLimits } from './http/frontdoor.js';
import { LegacySessions } from './http/legacy-sessions.js';
import { UpstreamLimits } from './http/upstream-limits.js';
import { Census, NO_CALL } from './observability/census.js';
import { DroppedEntries } from './observability/dropped.js';
import type { Logger } from './observability/log.js';
import { AuditLog } from './observability/audit.js';
import { Metrics } from './observability/metrics.js';
import { describeTracing, startTracing, tracingActive, type Tracing } from './observability/tracing.js';
import { INPUT_KIND_OF } from './protocol/capabilities.js';
import { shutdownFailure } from './protocol/errors.js';
import { Router } from './router/router.js';
import { Upstream, parkedSessionLimits } from './router/upstream.js';
import { Sampler } from './sampling/sampler.js';
import { Authenticator } from './security/auth.js';
import { StateSealer, TaskIdBinder, generatedKey } from './security/seal.js';
import { SealedBox } from './security/sealed-box.js';
import { RedisStore } from './store/redis.js';
import { LocalSlots, StoreFallback } from './store/limiters.js';
import { MemoryStore, type ReplicaInfo, type SharedStore } from './store/shared.js';
import { endChildrenBy } from './upstream/stdio-child.js';

/**
 * The part of `shutdownGraceMs` kept after the drain for ending upstream sessions and children (a
 * stdio child that ignores SIGTERM gets SIGKILL `KILL_AFTER_MS`, 2 s, after it) and writing the
 * last answers, in ms; at most half of `shutdownGraceMs`.
 */
const CLOSE_RESERVE_MS = 2500;
/** How long before the end of `shutdownGraceMs` stdio children still running get SIGKILL, in ms (at most a quarter of it). */
const REAP_MS = 250;

/**
 * Builds the gateway for `cfg`: starts tracing first when the `OTEL_*` variables ask for it (and it
 * is not running in this process yet), then every long-lived object (see the file header).
 */
export async function wire(cfg: GatewayConfig, log: Logger): Promise<Wiring> {
  // Before anything that makes spans; off (nothing loaded) unless OTEL_* asks for traces.
  const tracing = tracingActive() ? undefined : await startTracing();
  if (tracing) log.info({ tracing: describeTracing() }, 'tracing on: spans exported as OTEL_* configures');
  return new Wiring(cfg, log, tracing);
}

/** The shared store of `cfg.store`: Redis, or this process's memory. */
function storeOf(cfg: GatewayConfig, log: Logger): SharedStore {
  return cfg.store.kind === 'redis'
    ? RedisStore.create({
        url: cfg.store.url,
        keyPrefix: cfg.store.keyPrefix,
        connectTimeoutMs: cfg.store.connectTimeoutMs,
        log: log.child({ component: 'store' }),
      })
    : new MemoryStore(cfg.tasks.maxRecords);
}

/** The configured upstreams, by name; `draining` tells their sessions when the gateway drains. */
function upstreamsOf(cfg: GatewayConfig, log: Logger, draining: () => boolean): Map<string, Upstream> {
  const upstreams = new Map<string, Upstream>();
  for (const [name, ucfg] of Object.entries(cfg.upstreams)) {
    // Without auth every caller is the one principal `anonymous`: a per-principal bound would only shrink the pool.
    const effective = cfg.auth.mode === 'none' ? { ...ucfg, maxSessionsPerPrincipal: ucfg.maxSessions } : ucfg;
    upstreams.set(name, new Upstream(name, effective, log, cfg.auth.mode !== 'none', draining));
  }
  return upstreams;
}

/** Whether an upstream uses per-user OAuth grants (`credentials.mode: "oauth"`). */
const usesOAuth = (cfg: GatewayConfig) => Object.values(cfg.upstreams).some((u) => u.credentials.mode === 'oauth');

/** Every long-lived object of one gateway, and its readiness, drain and close. */
export class Wiring {
  /** Task records, spent requestState ids and live replicas: in memory, or shared on Redis. */
  readonly store: SharedStore;
  /** This replica's id (sealed into park-mode states and task records). */
  readonly replica = randomUUID();
  readonly tasks: TaskManager;
  readonly upstreams: Map<string, Upstream>;
  /** True when no requestState key was configured and one was generated. */
  readonly generatedStateKey: boolean;
  /** Seals and opens every requestState (bridge and pass-through). */
  readonly sealer: StateSealer;
  /** Client-facing ids of tasks that 2026-07-28 upstreams created. */
  readonly taskIds: TaskIdBinder;
  /** RFC 8693 token exchange of the `tokenExchange` upstreams (a `TokenExchanger`). */
  readonly exchanger: TokenExchange;
  /** Per-user grants of the `oauth` upstreams and their consent flow (a `UserGrants`). */
  readonly userGrants: OAuthGrants;
  /** The base URL this replica listens on (set by {@link startReplica}): consent links use it without `http.publicUrl`. */
  private listenUrl: string | undefined;
  /** 2026-07-28 clients to 2026-07-28 upstreams. */
  readonly modern: ModernPassThrough;
  readonly bridge: MrtrBridge;
  readonly metrics: Metrics;
  /** Notes limits counted per replica because the shared store failed (one warning, `mrtr_limits_store_fallback_total`). */
  readonly limitsFallback: StoreFallback;
  /** Entries left out of list answers (invalid tool names and annotations, federation conflicts). */
  readonly dropped: DroppedEntries;
  /** Answers legacy upstreams' sampling through the configured LLM providers. */
  readonly sampler: Sampler;
  /** Uses of features 2026-07-28 deprecated or removed, by upstream, tool and feature. */
  readonly census: Census;
  readonly router: Router;
  /** The audit trail (`audit`): written by the router, the legacy sessions and the front door's limits; flushed by {@link close}. */
  readonly audit: AuditLog;
  /** Per-user upstream credentials: the router resolves them, the front door's consent routes and the admin page use them. */
  readonly credentials: Credentials;
  /** The front door's parts (`createApp` gets them as they are). */
  readonly deps: AppDeps;
  /** The sessions of legacy clients. */
  readonly legacy: LegacySessions;
  /** The HTTP front door. */
  readonly front: FrontDoor;
  /** Set by {@link drain}: the router and the front door serve only work already held here. */
  private draining = false;
  /** Set by {@link close}: not ready any more. */
  private closing = false;
  private heartbeat: NodeJS.Timeout | undefined;
  /** The heartbeat written when the store becomes reachable; cleared when the replica leaves. */
  private beatOnReachable: (() => void) | undefined;

  /** Use {@link wire}, which starts tracing first. `tracing`: the tracing it started, shut down by {@link stop}. */
  constructor(
    readonly cfg: GatewayConfig,
    private readonly log: Logger,
    private readonly tracing?: Tracing,
  ) {
    const draining = () => this.draining;
    this.audit = AuditLog.open(cfg.audit, log);
    this.store = storeOf(cfg, log);
    // Fleet-wide limits that fall back to this replica's memory count while Redis is unreachable.
    this.limitsFallback = new StoreFallback(log.child({ component: 'limits' }), (limit) => this.metrics.limitsStoreFallback.inc({ limit }));
    const counters = this.store.counters;
    const quota = new TaskQuota(cfg.tasks, counters && { quota: counters.taskQuota, fallback: this.limitsFallback });
    this.tasks = new TaskManager(this.store, log, this.replica, quota);
    this.upstreams = upstreamsOf(cfg, log, draining);
    const keys = cfg.requestState.keys.length ? cfg.requestState.keys : [generatedKey()];
    this.generatedStateKey = cfg.requestState.keys.length === 0;
    this.sealer = new StateSealer(keys);
    this.taskIds = new TaskIdBinder(keys[0]!);
    this.exchanger = new TokenExchange(cfg, log.child({ component: 'credentials' }));
    this.userGrants = new OAuthGrants({
      cfg,
      store: this.store.grants,
      spent: this.store.spent,
      // Grants at rest and consent state: the credentials keys, else the requestState keys (or the generated one).
      box: new SealedBox(cfg.credentials.keys.length ? cfg.credentials.keys : keys),
      log: log.child({ component: 'credentials' }),
      listenUrl: () => this.listenUrl,
    });
    if (this.store.kind === 'redis' && !cfg.credentials.keys.length && this.generatedStateKey && usesOAuth(cfg))
      log.warn(
        'no credentials or requestState key configured: grants on Redis are sealed with a key of this process; other replicas and a restart cannot read them (set credentials.keys)',
      );
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
    this.dropped = new DroppedEntries(log, (upstream, kind, reason) => this.metrics.droppedEntries.inc({ upstream, kind, reason }));
    this.sampler = new Sampler(
      cfg.sampling,
      this.metrics,
      log.child({ component: 'sampling' }),
      counters && { windows: counters.tokens, fallback: this.limitsFallback },
    );
    this.census = new Census({
      upstreams: [...this.upstreams.keys()],
      onCount: (upstream, tool, feature) => this.metrics.deprecatedFeatureCalls.inc({ upstream, tool, feature }),
    });
    this.observe();
    this.credentials = new Credentials(cfg, this.exchanger, this.userGrants);
    this.credentials.warnAtStart(log);
    const { bridge, tasks, sampler, census } = this;
    this.router = new Router({
      cfg,
      log,
      upstreams: this.upstreams,
      bridge,
      legacy: new BridgeServer({ bridge, tasks, sampler, census, draining }),
      modern: this.modern,
      tasks,
      taskIds: this.taskIds,
      sealer: this.sealer,
      store: this.store,
      replica: this.replica,
      metrics: this.metrics,
      sampler,
      census,
      dropped: this.dropped,
      draining,
      credentials: this.credentials,
      audit: this.audit,
    });
    if (this.generatedStateKey) {
      log.warn('no requestState key configured: generated one for this process; parked calls and their requestState die with it');
    }
    this.deps = this.frontDoorParts();
    this.legacy = this.deps.legacy;
    this.front = createApp(this.deps);
  }

  /** Connects the upstreams, the bridge and the tasks to the metrics, the dropped entries and the census. */
  private observe(): void {
    for (const up of this.upstreams.values()) {
      up.onSecretDeclined = () => this.metrics.secretDeclines.inc({ upstream: up.name });
      up.onDropped = (r) => this.dropped.note(r);
      up.lists.onLookup = (method, hit) => this.metrics.listCacheRequests.inc({ upstream: up.name, method, result: hit ? 'hit' : 'miss' });
      up.pool.observer.unclaimed = (m) => this.census.countMessage(up.name, NO_CALL, m);
    }
    this.bridge.onRound = (upstream, methods) => {
      for (const kind of new Set(methods.map((m) => INPUT_KIND_OF[m] ?? m))) this.metrics.inputRounds.inc({ upstream, kind });
    };
    this.tasks.onStatus = (status) => this.metrics.tasks.inc({ status });
  }

  /** The front door's parts: federation, authenticator, Host/Origin guard, per-caller limiters, legacy sessions. */
  private frontDoorParts(): AppDeps {
    const { cfg, log, router } = this;
    const federation = cfg.federation.enabled ? new Federation(router, log.child({ component: 'federation' })) : undefined;
    // Rate and concurrency limits per principal, or per client address when auth does not identify callers.
    const limits = callerLimits(cfg);
    const upstreamLimits = new UpstreamLimits(cfg.upstreams, this.store, this.limitsFallback);
    const legacy = new LegacySessions({
      router,
      cfg: cfg.legacySessions,
      log,
      record: legacyRecorder(log, this.metrics),
      federation,
      audit: this.audit,
      memberGate: (owner) => upstreamLimits.gate(owner, (limit) => this.metrics.rateLimited.inc({ limit })),
    });
    return {
      router,
      cfg,
      log,
      metrics: this.metrics,
      federation,
      census: this.census,
      sampler: this.sampler,
      hop: { replica: this.replica, sealer: this.sealer, tasks: this.store.tasks },
      storeKind: this.store.kind,
      parked: this.bridge,
      tasks: this.tasks,
      dropped: this.dropped,
      auth: new Authenticator(cfg.auth),
      guard: new OriginGuard(cfg.listen.host, cfg.http.allowedHosts, cfg.http.allowedOrigins),
      limits,
      limiter: new CallerLimiter(limits, this.store, this.limitsFallback),
      // Open subscriptions/listen streams per caller (a listen stops counting as in flight once it streams).
      listens: new LocalSlots(cfg.limits.maxListensPerPrincipal),
      upstreamLimits,
      legacy,
      credentials: usesOAuth(cfg)
        ? {
            consent: this.userGrants.consent,
            grants: (upstream) => this.credentials.grants(upstream),
            revoke: (upstream, principal) => this.credentials.revoke(upstream, principal),
          }
        : undefined,
      draining: () => this.draining,
      readiness: () => this.readiness(),
      audit: this.audit,
    };
  }

  /**
   * Starts this replica's heartbeat in the store, under `url` (the base URL other replicas forward
   * to). With the memory store it only records the URL.
   */
  startReplica(url: string): void {
    this.listenUrl = url.replace(/\/$/, '');
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
   * Readiness: every upstream marked `required` can be started or reached (see
   * `Upstream.readiness`: probed side by side; one in its first start is not ready, without
   * waiting), and the shared store is reachable and takes a write and a read under its key prefix
   * (`store` says why not). Not ready once closing.
   */
  async readiness(): Promise<Readiness> {
    const required = [...this.upstreams.values()].filter((up) => up.cfg.required);
    // Checked side by side: one upstream's slow start does not hold up the others'.
    const out = await Promise.all(required.map((up) => up.readiness()));
    const store = await this.store.unavailable();
    return { ready: !this.closing && !store && out.every((u) => u.ready), upstreams: out, ...(store ? { store } : {}) };
  }

  /** Work held here that a retry or `tasks/update` may still need: parked calls and tasks running here. */
  get heldWork(): number {
    return this.bridge.parkedCount + this.tasks.running;
  }

  /**
   * Begins shutdown (before {@link close}): new MCP calls get 503 / -32603 "gateway shutting down"
   * and `/readyz` 503; retries of calls parked here and `tasks/*` requests are still served, and a
   * call that asks for input is answered -32603 `shutting-down` instead of being parked; open
   * `subscriptions/listen` streams end with their completion result. Waits up
   * to `graceMs` for requests in flight, parked calls and tasks running here to finish; resolves
   * with how many are still in flight or held.
   */
  drain(graceMs: number): Promise<number> {
    this.draining = true;
    this.bridge.drain();
    this.router.endListens();
    // Parked calls and tasks held here are work in flight too: their retries may still come.
    return this.front.settle(graceMs, () => this.heldWork);
  }

  /**
   * Stops serving: open `subscriptions/listen` streams end gracefully, legacy client sessions end,
   * calls still waiting get -32603 "gateway shutting down" and are cancelled upstream, as are
   * running tasks and parked calls; then every upstream session closes, and so does every
   * 2026-07-28 hop: its requests in flight are cancelled upstream and answered -32603 "gateway
   * shutting down" (`shutting-down`), and stdio children end (SIGTERM, then SIGKILL after
   * `KILL_AFTER_MS`, 2 s). Last, this replica leaves the registry, the store closes and the audit
   * trail is flushed.
   */
  async close(): Promise<void> {
    this.closing = true;
    this.router.close();
    await this.legacy.close().catch(() => {});
    this.tasks.cancelAll();
    this.bridge.cancelAll((upstream) => shutdownFailure(upstream));
    // Let the cancellations reach the upstreams before their sessions close.
    await new Promise((r) => setTimeout(r, 20));
    await Promise.all([...this.upstreams.values()].flatMap((u) => [u.pool.close(), u.modern?.close()]));
    clearInterval(this.heartbeat);
    this.beatOnReachable = undefined;
    await this.store.replicas.leave(this.replica).catch(() => {});
    await this.store.close();
    // The lines of the last calls are still buffered.
    await this.audit.flush();
  }

  /**
   * Graceful stop after `signal`, all of it within `shutdownGraceMs` (ms), so that a container
   * runtime's stop timeout (Docker 10 s, Kubernetes 30 s) sees exit code 0 rather than its SIGKILL.
   * While requests, parked calls or tasks are in flight, until CLOSE_RESERVE_MS (at most half of it)
   * before the end, `server` keeps listening: new MCP calls get 503 / -32603 "gateway shutting
   * down" (retries of parked calls and tasks/* are still served), `/readyz` 503 and `/healthz` 200
   * ({@link drain}). Then it stops listening, answers calls still running with -32603 "gateway
   * shutting down", ends upstream sessions and children ({@link close}), and exports the spans
   * still buffered. Stdio children still running REAP_MS before the end get SIGKILL. The caller
   * exits (0) when this resolves, and at the end of `shutdownGraceMs` whatever is left.
   */
  async stop(server: ServerType, signal: string): Promise<void> {
    const { log } = this;
    const graceMs = this.cfg.shutdownGraceMs;
    const deadline = performance.now() + graceMs;
    const left = () => Math.max(0, deadline - performance.now());
    // Stdio children still running just before the end get SIGKILL, so they have exited when it comes.
    endChildrenBy(deadline - Math.min(REAP_MS, graceMs / 4));
    const drainMs = graceMs - Math.min(CLOSE_RESERVE_MS, graceMs / 2);
    log.info({ signal, graceMs, drainMs }, 'stopping: draining requests in flight');
    const inFlight = await this.drain(drainMs);
    if (inFlight) log.warn({ inFlight }, 'grace period over: answering the rest with gateway shutting down');
    // Stop accepting connections; idle keep-alive connections are closed now, busy ones below.
    server.close();
    // Bounded by the caller's timer: shutdown never waits on an upstream past shutdownGraceMs.
    await this.close().catch(() => {});
    await this.front.settle(Math.min(2000, left()));
    (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
    // The spans of the last requests are still buffered: export them (bounded).
    await this.tracing?.shutdown(Math.min(5000, left()));
    log.info('stopped');
  }
}
