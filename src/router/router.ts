/**
 * The router: takes a validated 2026-07-28 request for one upstream (`POST /mcp/NAME`, or a member
 * of the federated `/mcp`), finds the upstream by name and the era it speaks (configured, or
 * detected once with `protocol: "auto"`, see src/router/upstream.ts), and hands the request to the
 * cell of the era table that serves it: a 2026-07-28 upstream to the modern pass-through
 * (src/cells/modern/), a legacy one to the bridge (src/cells/bridge/serve.ts: MRTR rounds, tasks).
 * `subscriptions/listen` opens a subscription on either era (src/router/subscriptions.ts).
 * During the drain only what resumes work held here is routed. Nothing here knows about HTTP, and
 * nothing here is built here: src/wiring.ts builds the parts and hands them over.
 *
 * Upstreams whose credential depends on the caller (per-user credentials, `forwardAuthorization`)
 * pass src/router/consent.ts first: the caller's credential is resolved and handed to the cell in
 * `CallContext.credential` (a consent round instead when the user must authorize the upstream
 * first). An upstream that refuses a credential the gateway obtained (HTTP 401/403) has it
 * dropped, and the caller gets -32603 `upstream-authorization`.
 */
import type { GatewayConfig } from '../config/schema.js';
import type { MrtrBridge } from '../cells/bridge/mrtr.js';
import { BridgeServer, type LegacyContext } from '../cells/bridge/serve.js';
import type { StateSealer, TaskIdBinder } from '../security/seal.js';
import { sharedChildRefusal, type ModernPassThrough } from '../cells/modern/passthrough.js';
import {
  ErrorCode,
  GatewayError,
  methodNotFound,
  quoted,
  reasonOf,
  shutdownFailure,
  shuttingDown,
  upstreamFailed,
} from '../protocol/errors.js';
import { HeldElsewhere, type ReplicaInfo, type SharedStore } from '../store/shared.js';
import type { TaskManager } from '../cells/bridge/tasks/manager.js';
import type { ValidatedRequest } from '../protocol/envelope.js';
import { EXCHANGE_METHODS, TASK_METHODS, META_CLIENT_CAPABILITIES } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import type { Census } from '../observability/census.js';
import type { DroppedEntries } from '../observability/dropped.js';
import { openModernSubscription, openSubscription, type ListenFilter, type Subscription } from './subscriptions.js';
import type { Sampler } from '../sampling/sampler.js';
import { toolCallRefusal } from '../upstream/tool-policy.js';
import type { Upstream, UpstreamEra } from './upstream.js';
import { relayTo, type RelayCaller, type RelayHooks } from './relays.js';
import type { LegacyRelay } from '../upstream/legacy-relay.js';
import { declaresTasks } from '../protocol/tasks.js';
import { allowedCapabilities } from '../protocol/capabilities.js';
import type { AuditNote, CallContext } from '../protocol/connection.js';
import { argumentsDigest, audited, auditOutcome, AuditLog, taskOutcome, type AuditOutcome, type CallEnd } from '../observability/audit.js';
import type { UpstreamCredential, UpstreamCredentials } from '../credentials/types.js';
import { CredentialGate } from './consent.js';
import { ApprovalGate, Approvals, listThrough } from './approvals.js';
import { approvalInTask } from './approval-task.js';

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

/** What the router is built from (src/wiring.ts builds each part once). */
export interface RouterParts {
  cfg: GatewayConfig;
  log: Logger;
  /** The configured upstreams, by name. */
  upstreams: Map<string, Upstream>;
  /** The MRTR bridge: parked calls and their requestState. */
  bridge: MrtrBridge;
  /** The bridge cell: serves a request from a legacy upstream session. */
  legacy: BridgeServer;
  /** The modern cell: 2026-07-28 clients to 2026-07-28 upstreams. */
  modern: ModernPassThrough;
  tasks: TaskManager;
  taskIds: TaskIdBinder;
  sealer: StateSealer;
  store: SharedStore;
  /** This replica's id. */
  replica: string;
  metrics: Metrics;
  sampler: Sampler;
  census: Census;
  dropped: DroppedEntries;
  /** True once the gateway drains (the one drain flag, owned by src/wiring.ts). */
  draining: () => boolean;
  /** Per-user upstream credentials (src/credentials/credentials.ts). */
  credentials: UpstreamCredentials;
  /** The audit trail (a line per request whose context has an `origin`); default: none written. */
  audit?: AuditLog;
}

/**
 * Routes requests to upstreams (see the file header). Besides routing, it holds the shared parts its
 * callers read (the front door, the admin view, the federation layer): the upstreams, the bridge,
 * the sealer and task-id binder, the store and this replica's id, tasks, metrics, the sampler, the
 * census and the dropped entries. Built by src/wiring.ts, which owns readiness, drain and close.
 */
export class Router {
  readonly cfg: GatewayConfig;
  readonly upstreams: Map<string, Upstream>;
  readonly bridge: MrtrBridge;
  /** Seals and opens every requestState (bridge and pass-through). */
  readonly sealer: StateSealer;
  /** Task records, spent requestState ids and live replicas: in memory, or shared on Redis. */
  readonly store: SharedStore;
  /** This replica's id (sealed into park-mode states and task records). */
  readonly replica: string;
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
  private readonly log: Logger;
  /** The bridge cell (legacy upstreams). */
  private readonly legacy: BridgeServer;
  private readonly draining: () => boolean;
  /** Set by {@link close}: nothing more is routed. */
  private closing = false;
  /** Open `subscriptions/listen` subscriptions, ended gracefully at close. */
  private readonly subscriptions = new Set<Subscription>();
  /** How many open subscriptions deliver the changes of a list, by `upstream\nprincipal\nlist` ({@link hearsListChanges}). */
  private readonly listening = new Map<string, number>();
  /** Per-user upstream credentials, for the front door's consent routes and the admin page. */
  readonly credentials: UpstreamCredentials;
  /** Resolves per-caller credentials and runs consent rounds (src/router/consent.ts). */
  private readonly gate: CredentialGate;
  /** The audit trail (src/observability/audit.ts). */
  private readonly audit: AuditLog;
  /** Which tool calls the user must approve first, and the remembered approvals (src/router/approvals.ts). */
  readonly approvals: Approvals;
  /** Asks 2026-07-28 clients to approve tool calls (src/router/approvals.ts). */
  private readonly approvalGate: ApprovalGate;

  constructor(parts: RouterParts) {
    this.cfg = parts.cfg;
    this.log = parts.log;
    this.upstreams = parts.upstreams;
    this.bridge = parts.bridge;
    this.legacy = parts.legacy;
    this.modern = parts.modern;
    this.tasks = parts.tasks;
    this.taskIds = parts.taskIds;
    this.sealer = parts.sealer;
    this.store = parts.store;
    this.replica = parts.replica;
    this.metrics = parts.metrics;
    this.sampler = parts.sampler;
    this.census = parts.census;
    this.dropped = parts.dropped;
    this.draining = parts.draining;
    this.credentials = parts.credentials;
    this.audit = parts.audit ?? AuditLog.off;
    this.gate = new CredentialGate(
      parts.credentials,
      parts.sealer,
      parts.store.spent,
      parts.cfg.credentials.consentTtlMs,
      (name) => (parts.cfg.upstreams[name]?.credentials.mode ?? 'static') !== 'static',
    );
    this.approvals = new Approvals(
      (name) => parts.cfg.upstreams[name]?.approvals,
      parts.store.approvals,
      listThrough((name, req, ctx) => this.handle(name, req, ctx)),
    );
    for (const [name, up] of parts.upstreams) up.tools.onInvalidate(() => this.approvals.forget(name));
    this.approvalGate = new ApprovalGate(this.approvals, parts.sealer, parts.store.spent, parts.cfg.requestState.ttlMs, parts.log);
  }

  /** True once the gateway drains: only work already held here is routed. */
  get isDraining(): boolean {
    return this.draining();
  }

  /**
   * The live replica `id` (its URL), or undefined when its heartbeat stopped: where a call held
   * elsewhere is forwarded.
   * @throws StoreUnavailable when the registry cannot be read (which says nothing about the replica).
   */
  async replicaInfo(id: string): Promise<ReplicaInfo | undefined> {
    return this.store.replicas.lookup(id);
  }

  /**
   * Serves one validated request for upstream `name`. The upstream's `tools` policy applies to
   * both eras: a tool it does not serve is left out of `tools/list`, and its `tools/call` is
   * refused before anything goes upstream.
   * A `tools/call` of a tool the upstream's `approvals` name is asked of the user first, after the
   * credential gate and before routing (src/router/approvals.ts).
   * @returns the JSON-RPC `result` (always with `resultType`), or a consent round's `input_required`
   *   (src/router/consent.ts), or an approval round's, or the refusal the user chose (`isError`).
   * @throws GatewayError: -32601 (404) unknown upstream or capability the upstream lacks; -32602 bad
   *   requestState/inputResponses, or a tool the `tools` policy does not serve ("Unknown tool");
   *   -32021 (400) missing client capability (`elicitation.url` for a consent round,
   *   `elicitation.form` for an approval round); -32603
   *   upstream failure (`upstream-authorization`: the user must authorize the upstream first, a
   *   token endpoint failed, or the upstream refused the user's token).
   * A request whose context has an `origin` (a client's request) gets its audit line here, once
   * answered (src/observability/audit.ts); its gates note in `ctx.audit` what they did.
   * `ctx.admit` (the front door's limits of a member of the federated `/mcp`) runs first: its
   * rejection is the answer, and the audit line's.
   */
  async handle(
    name: string,
    req: ValidatedRequest,
    { admit, ...given }: CallContext & { paramHeaders?: Record<string, string>; admit?: () => Promise<void> },
  ): Promise<Record<string, unknown>> {
    // The request's own note: the members of a federated request each get theirs.
    const note: AuditNote = {};
    const ctx: CallContext & { paramHeaders?: Record<string, string> } = { ...given, audit: note };
    const origin = ctx.origin;
    if (!origin || !this.audit.enabled || !audited(req.method)) {
      await admit?.();
      return this.serve(name, req, ctx);
    }
    const started = performance.now();
    const line = (end: CallEnd, outcome: AuditOutcome, durationMs: number, taskId?: string) =>
      this.audit.record({
        principal: ctx.principal,
        ...(origin.endpoint === undefined ? { upstream: name } : { upstream: origin.endpoint, member: name }),
        method: req.method,
        name: (req.params.name ?? req.params.uri) as string | undefined,
        argsDigest: argumentsDigest(req.method, req.params),
        approval: note.approval,
        outcome,
        code: end.error?.code,
        reason: reasonOf((end.error as { data?: unknown } | undefined)?.data),
        durationMs,
        taskId,
        requestId: origin.requestId,
        rpcId: origin.rpcId,
        era: origin.era,
        transport: origin.transport,
      });
    const answered = (end: CallEnd, taskId?: string) =>
      line(end, auditOutcome({ ...end, approval: note.approval, refused: note.refused }), performance.now() - started, taskId);
    // The task's own line, when it ends (written by the replica running it).
    note.taskEnded = (t) => line({ error: t.error }, taskOutcome(t.status, t.error, note.approval), t.durationMs, t.taskId);
    try {
      await admit?.();
      const result = await this.serve(name, req, ctx);
      const taskId = result.resultType === 'task' && typeof result.taskId === 'string' ? result.taskId : undefined;
      answered({ resultType: result.resultType as string | undefined }, taskId);
      return result;
    } catch (e) {
      // A call another replica holds gets its line there.
      if (!(e instanceof HeldElsewhere)) {
        answered(e instanceof GatewayError ? { error: e, httpStatus: e.httpStatus } : { error: { code: ErrorCode.InternalError } });
      }
      throw e;
    }
  }

  /** {@link handle}, its audit line aside. */
  private async serve(
    name: string,
    req: ValidatedRequest,
    ctx: CallContext & { paramHeaders?: Record<string, string> },
  ): Promise<Record<string, unknown>> {
    const up = this.upstreams.get(name);
    if (!up) throw methodNotFound(`Unknown upstream '${quoted(name)}'`);
    if (this.closing) throw shutdownFailure(name);
    if (this.draining() && !Router.drainAdmits(req)) throw shuttingDown(name);
    if (req.method === 'subscriptions/listen')
      throw methodNotFound('subscriptions/listen needs a streaming response; use the HTTP front door');
    if (req.method === 'tools/call') {
      const refused = toolCallRefusal(up.cfg.tools, String(req.params.name));
      if (refused) {
        ctx.audit!.refused = true;
        throw refused;
      }
    }
    if (this.gate.applies(name)) {
      const admitted = await this.gate.admit(name, req, ctx);
      if (admitted.answer) return admitted.answer;
      ({ req, ctx } = admitted);
      // A consent round's retry runs as a fresh call, which the drain does not admit.
      if (this.draining() && !Router.drainAdmits(req)) throw shuttingDown(name);
    } else if (ctx.credential) ctx = { ...ctx, credential: undefined };
    if (req.method === 'tools/call' && this.approvals.applies(name)) {
      // A call that becomes a task at once on a legacy upstream is asked in its task (src/router/approval-task.ts),
      // unless the caller holds all the task records it may: the round below asks it then.
      const inTask = (await this.tasks.admits(ctx.principal)) ? await approvalInTask(this.approvals, up, req, ctx, this.log) : undefined;
      if (inTask) ctx = inTask;
      else {
        const approved = await this.approvalGate.admit(name, req, ctx);
        if (approved.answer) return approved.answer;
        // An approval round's retry runs as a fresh call, which the drain does not admit.
        if (approved.req !== req && this.draining() && !Router.drainAdmits(approved.req)) throw shuttingDown(name);
        req = approved.req;
      }
    }
    try {
      const result = await this.route(up, req, ctx);
      if (req.method === 'tools/list' && result.tools !== undefined) {
        result.tools = up.servedList(result.tools);
        // A complete listing tells the approval policy the tools' annotations.
        if (req.params.cursor === undefined && result.nextCursor === undefined && Array.isArray(result.tools))
          this.approvals.saw(name, result.tools as unknown[]);
      }
      return result;
    } catch (e) {
      throw await this.refusedOr(up, ctx, e);
    }
  }

  /**
   * What a failed request of `up` answers: -32603 `upstream-authorization` when the upstream refused
   * (HTTP 401/403) a credential the gateway obtained for the caller, which is then dropped
   * ({@link CredentialGate.refusal}); else `e` itself, noted as the upstream's failure.
   */
  private async refusedOr(up: Upstream, ctx: { principal: string; credential?: UpstreamCredential }, e: unknown): Promise<unknown> {
    if (!(e instanceof GatewayError)) return e;
    const status = e.upstreamStatus;
    if (ctx.credential && (status === 401 || status === 403) && this.gate.owns(up.name))
      return this.gate.refusal(up.name, ctx.principal, ctx.credential, status);
    // An upstream that failed this way may come back as another era.
    up.noteFailure(e.reason);
    return e;
  }

  /** Serves one request of upstream `up` by the cell of the era it speaks. */
  private async route(
    up: Upstream,
    req: ValidatedRequest,
    ctx: CallContext & { paramHeaders?: Record<string, string> },
  ): Promise<Record<string, unknown>> {
    let era = up.settledEra();
    let probeMs = 0;
    if (!era) {
      const asked = performance.now();
      era = await untilAborted(this.upstreamEra(up, ctx.credential?.headers), ctx.connection.signal, up.name);
      // Waiting for the era probe is upstream start-up time, and it counts against connectMs.
      probeMs = performance.now() - asked;
      if (ctx.timing) ctx.timing.upstreamMs += probeMs;
    }
    if (era === 'modern') {
      // A 2026-07-28 upstream's retry is a new request upstream: nothing of it is held here.
      if (this.draining() && !(TASK_METHODS as readonly string[]).includes(req.method)) throw shuttingDown(up.name);
      return this.modern.handle(up, req, ctx);
    }
    // Over HTTP the probe's time counts against connectMs; a stdio session takes over the probe's
    // child with what is left of its budget since the spawn (or spawns one with a whole budget).
    const legacy: LegacyContext = {
      ...ctx,
      ...(up.cfg.transport === 'stdio' ? {} : { startMs: Math.max(1, up.cfg.timeouts.connectMs - probeMs) }),
      hearsListChanges: (list) => (this.listening.get(`${up.name}\n${ctx.principal}\n${list}`) ?? 0) > 0,
    };
    return this.legacy.handle(up, req, legacy);
  }

  /**
   * The relay of a legacy client session to upstream `name` ({@link relayTo}): the legacy
   * pass-through for a legacy upstream, the reverse bridge for a 2026-07-28 one.
   * @param upstreamEra the upstream's era, as `Upstream.era()` found it.
   */
  openRelay(name: string, upstreamEra: UpstreamEra, who: RelayCaller, hooks: RelayHooks): LegacyRelay {
    return relayTo(this.upstreams.get(name)!, upstreamEra, who, hooks, this);
  }

  /**
   * The era of upstream `name` for a legacy session of `who` (see `McpRouter.relayEra`).
   * @throws GatewayError -32603 `unreachable`.
   */
  async relayEra(name: string, who: RelayCaller): Promise<UpstreamEra> {
    const up = this.upstreams.get(name)!;
    const settled = up.settledEra();
    if (settled || !this.credentials.perCaller(name)) return settled ?? this.upstreamEra(up);
    const credential = await this.credentials.resolve(name, who).catch(() => undefined);
    return this.upstreamEra(up, credential?.headers);
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
    const credential = this.gate.applies(name)
      ? await this.credentials.resolve(name, ctx).catch((e: unknown) => {
          throw this.gate.askFirst(name, e);
        })
      : undefined;
    const filter = (req.params.notifications ?? {}) as ListenFilter;
    const sub = await this.subscribe(up, req, filter, { principal: ctx.principal, credential }).catch(async (e: unknown) => {
      throw await this.refusedOr(up, { principal: ctx.principal, credential }, e);
    });
    if (this.closing || this.draining()) {
      sub.end();
    } else {
      this.subscriptions.add(sub);
      sub.onEnd(() => this.subscriptions.delete(sub));
      this.noteListening(name, ctx.principal, sub);
    }
    return sub;
  }

  /** Counts the lists whose changes `sub` delivers to `principal` until it ends (the `ttlMs` of legacy upstreams' lists). */
  private noteListening(name: string, principal: string, sub: Subscription): void {
    const { toolsListChanged: tools, promptsListChanged: prompts, resourcesListChanged: resources } = sub.honored;
    const keys = Object.entries({ tools, prompts, resources })
      .filter(([, honored]) => honored)
      .map(([list]) => `${name}\n${principal}\n${list}`);
    const add = (key: string, n: number) => {
      const count = (this.listening.get(key) ?? 0) + n;
      if (count > 0) this.listening.set(key, count);
      else this.listening.delete(key);
    };
    for (const key of keys) add(key, 1);
    sub.onEnd(() => keys.forEach((key) => add(key, -1)));
  }

  /** Opens a subscription of `up` for the caller `who` on the upstream's era. */
  private async subscribe(
    up: Upstream,
    req: ValidatedRequest,
    filter: ListenFilter,
    who: { principal: string; credential?: UpstreamCredential },
  ): Promise<Subscription> {
    const { name } = up;
    const modern = (await this.upstreamEra(up, who.credential?.headers)) === 'modern';
    if (modern && who.credential && up.cfg.transport === 'stdio') throw sharedChildRefusal(name);
    return modern
      ? await openModernSubscription(
          { name, modern: up.modern! },
          filter,
          {
            ...req.meta,
            [META_CLIENT_CAPABILITIES]: allowedCapabilities(req.clientCapabilities as Record<string, unknown>, up.cfg.input.allow),
          },
          { declaresTasks: declaresTasks(req), credential: who.credential },
          { wrap: (id) => this.taskIds.wrap(name, who.principal, id), unwrap: (id) => this.taskIds.unwrap(name, who.principal, id) },
          up.cfg.timeouts.requestMs,
        )
      : await this.legacySubscription(up, req, filter, who);
  }

  private legacySubscription(
    up: Upstream,
    req: ValidatedRequest,
    filter: ListenFilter,
    ctx: { principal: string; credential?: UpstreamCredential },
  ): Promise<Subscription> {
    return openSubscription(
      up,
      this.tasks,
      filter,
      {
        principal: ctx.principal,
        credential: ctx.credential,
        caps: up.mirrored(req.clientCapabilities),
        declaresTasks: declaresTasks(req),
      },
      this.log.child({ upstream: up.name }),
    );
  }

  /**
   * The upstream's era, learned when needed; a failure to reach it is the upstream's failure.
   * @throws GatewayError -32603 `unreachable`.
   */
  private async upstreamEra(up: Upstream, hopHeaders?: Readonly<Record<string, string>>): Promise<UpstreamEra> {
    return up.era(hopHeaders);
  }

  /**
   * Whether a request may be served during the drain: the retry of a parked call (a call with
   * `requestState`; the bridge then refuses one that is not parked here, or is a replay-mode
   * state) and `tasks/get|update|cancel`, which start no upstream call.
   */
  private static drainAdmits(req: ValidatedRequest): boolean {
    if ((TASK_METHODS as readonly string[]).includes(req.method)) return true;
    return (EXCHANGE_METHODS as readonly string[]).includes(req.method) && req.params.requestState !== undefined;
  }

  /**
   * Ends every open `subscriptions/listen` gracefully (the drain): each stream ends with the listen's
   * completion result, and its client listens again (elsewhere, behind a balancer).
   */
  endListens(): void {
    for (const sub of [...this.subscriptions]) sub.end();
  }

  /** Stops routing (new requests get -32603 "gateway shutting down") and ends open `subscriptions/listen` streams gracefully. */
  close(): void {
    this.closing = true;
    this.endListens();
  }
}

/** The name the front door, the admin view and the federation layer know the router by. */
