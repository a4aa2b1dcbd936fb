/**
 * The bridge cell's front: serves one validated 2026-07-28 request from a legacy upstream
 * (2024-11-05 … 2025-11-25) once the router has found that upstream's era. `tools/call`,
 * `prompts/get` and `resources/read` run as an {@link Exchange} driven by the MRTR bridge
 * (server-initiated requests become `input_required` rounds, or a task); `tasks/get|update|cancel`
 * go to the task manager; every other method (`server/discover`, the lists, `completion/complete`
 * …) is one request on a shared session. `tools/call` is checked first against the upstream's
 * cached `tools/list` (unknown tool, `x-mcp-header` / `Mcp-Param-*` headers).
 */
import type { ClientCapabilities as LegacyClientCapabilities, ServerCapabilities } from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../../config/schema.js';
import { Exchange } from './exchange.js';
import type { MrtrBridge, TaskEscalation } from './mrtr.js';
import { detailedTask, type TaskManager } from './tasks/manager.js';
import type { ReplayEntry } from '../../security/seal.js';
import { invalidParams, methodNotFound, shuttingDown } from '../../protocol/errors.js';
import { checkParamHeaders } from '../../protocol/param-headers.js';
import { passedExtensions } from '../../protocol/capabilities.js';
import type { ValidatedRequest } from '../../protocol/envelope.js';
import {
  EXCHANGE_METHODS,
  TASK_METHODS,
  LIST_METHODS,
  META_SERVER_INFO,
  SUPPORTED_VERSIONS,
  UPSTREAM_CAPABILITY_FOR,
  type ClientCapabilities,
  type ExchangeMethod,
} from '../../protocol/wire.js';
import type { Logger } from '../../observability/log.js';
import { endSpan, noteInputRound, startClientSpan, traceMeta, within } from '../../observability/tracing.js';
import { toolLabel, type Census } from '../../observability/census.js';
import { SessionPool, type AcquireOptions } from '../../upstream/pool.js';

import { indexTools, type ListedTool, type ToolCatalog, type ToolHeaders } from '../../upstream/tools.js';
import { unknownTool } from '../../upstream/tool-policy.js';
import type { Sampler } from '../../sampling/sampler.js';
import { TASKS_EXTENSION, declaresTasks, tasksExtensionRequired } from '../../protocol/tasks.js';
import { ClientConnection, type CallContext } from '../../protocol/connection.js';
import type { BatchLearning } from './batching.js';
import { downstreamError, keepsSession } from '../../upstream/failures.js';
import { LooseResult } from '../../upstream/session-connection.js';
import type { SessionLease } from '../../upstream/pool-lease.js';

/**
 * The 2026 `capabilities` advertised for a legacy server: what the gateway serves of it.
 * `listChanged` (tools, prompts, resources) and `resources.subscribe` are passed on when the
 * upstream declared them: the gateway delivers them on `subscriptions/listen`
 * (`toolsListChanged`, `promptsListChanged`, `resourcesListChanged`, `resourceSubscriptions`).
 * The MCP Apps extension is declared when the upstream declared it ({@link passedExtensions}).
 */
export function discoverCapabilities(upstream: ServerCapabilities): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const passed = passedExtensions(upstream);
  if (passed) out.extensions = passed;
  const listChanged = (c: { listChanged?: boolean } | undefined) => (c?.listChanged ? { listChanged: true } : {});
  if (upstream.tools) {
    out.tools = listChanged(upstream.tools);
    out.extensions = { ...passed, [TASKS_EXTENSION]: {} };
  }
  if (upstream.prompts) out.prompts = listChanged(upstream.prompts);
  if (upstream.resources)
    out.resources = { ...(upstream.resources.subscribe ? { subscribe: true } : {}), ...listChanged(upstream.resources) };
  if (upstream.completions) out.completions = {};
  return out;
}

/** `tool` without a 2025-11-25 `execution.taskSupport` (and without `execution` when nothing else is in it). */
function withoutTaskSupport(tool: ListedTool): ListedTool {
  const execution = (tool as { execution?: unknown }).execution;
  if (!execution || typeof execution !== 'object' || !('taskSupport' in execution)) return tool;
  const { taskSupport: _dropped, ...rest } = execution as Record<string, unknown>;
  const { execution: _old, ...others } = tool as ListedTool & { execution?: unknown };
  return (Object.keys(rest).length ? { ...others, execution: rest } : others) as ListedTool;
}

/**
 * Whether a request to a legacy upstream with config `cfg` is a `tools/call` that becomes a task at
 * once, so that the gateway's approval is asked in the task (`CallContext.approval`, docs/approvals.md
 * "Tasks"): a new call (no `requestState`) of a client that declared the tasks extension, for a tool
 * whose effective `taskAfterMs` is 0 or that runs only as a task (`tasks.tools.NAME.required`).
 */
export function approvesInTask(cfg: UpstreamConfig, req: ValidatedRequest): boolean {
  if (req.method !== 'tools/call' || req.params.requestState !== undefined || !declaresTasks(req)) return false;
  const tool = cfg.tasks.tools[String(req.params.name)];
  return tool?.required === true || (tool?.taskAfterMs ?? cfg.tasks.taskAfterMs) === 0;
}

/**
 * A request to a legacy upstream: what is left of `timeouts.connectMs` for a session it opens, in
 * ms; and whether the caller has a `subscriptions/listen` open on this upstream that delivers the
 * changes of a list (absent: none is).
 */
export type LegacyContext = CallContext & { startMs?: number; hearsListChanges?: (list: ListKind) => boolean };

/** The capability a list belongs to. */
type ListKind = 'tools' | 'prompts' | 'resources';

/** The pool options of a request's session acquisition: its abort signal, timing and start budget. */
function acquireOptions(ctx: LegacyContext): AcquireOptions {
  return { signal: ctx.connection.signal, timing: ctx.timing, startMs: ctx.startMs };
}

/** What the bridge needs of an upstream (the router's `Upstream`). */
export interface BridgeUpstream {
  readonly name: string;
  readonly cfg: UpstreamConfig;
  readonly pool: SessionPool;
  readonly tools: ToolCatalog;
  /** The logger of this upstream's calls. */
  readonly callLog: Logger;
  /** How this upstream sends its batches of input requests, learned from its calls. */
  readonly batching: BatchLearning;
  /** Counts a form elicitation declined upstream for asking secrets. */
  readonly onSecretDeclined: () => void;
  /** The legacy `initialize` capabilities that mirror the client's `caps` on this upstream. */
  mirrored(caps: ClientCapabilities): LegacyClientCapabilities;
  /** Reports that tool `tool` is left out of a `tools/list` answer (`detail` says why). */
  noteDropped(tool: string, reason: 'invalid-x-mcp-header' | 'invalid-name', detail: string): void;
}

/** The long-lived parts the bridge cell serves with. */
export interface BridgeServerParts {
  bridge: MrtrBridge;
  tasks: TaskManager;
  sampler: Sampler;
  census: Census;
  /** True once the gateway drains (see `Router.isDraining`). */
  draining: () => boolean;
}

/** Serves 2026-07-28 requests from legacy upstream sessions (see the file header). */
export class BridgeServer {
  private readonly bridge: MrtrBridge;
  private readonly tasks: TaskManager;
  private readonly sampler: Sampler;
  private readonly census: Census;
  private readonly draining: () => boolean;

  constructor(parts: BridgeServerParts) {
    this.bridge = parts.bridge;
    this.tasks = parts.tasks;
    this.sampler = parts.sampler;
    this.census = parts.census;
    this.draining = parts.draining;
  }

  /**
   * Serves one validated request from legacy upstream `up`.
   * @returns the JSON-RPC `result` (always with `resultType`).
   * @throws GatewayError: -32601 (404) a capability the upstream lacks; -32602 bad
   *   requestState/inputResponses or an unknown tool; -32020 (400) bad `Mcp-Param-*` headers;
   *   -32021 (400) the tasks extension missing where needed; -32603 upstream failure, or
   *   (503) "gateway shutting down" for a replay-mode retry during the drain.
   */
  handle(up: BridgeUpstream, req: ValidatedRequest, ctx: LegacyContext): Promise<Record<string, unknown>> {
    if ((EXCHANGE_METHODS as readonly string[]).includes(req.method)) return this.exchange(up, req, ctx);
    if ((TASK_METHODS as readonly string[]).includes(req.method)) return this.task(up, req, ctx);
    return this.simple(up, req, ctx);
  }

  /** `tasks/get`, `tasks/update`, `tasks/cancel` for this caller's tasks on `up` (400 / -32021 without the tasks extension). */
  private async task(up: BridgeUpstream, req: ValidatedRequest, ctx: CallContext): Promise<Record<string, unknown>> {
    if (!declaresTasks(req)) throw tasksExtensionRequired();
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

  /**
   * A method served on a shared session: `server/discover` from the session's `initialize` result,
   * any other forwarded as it is (list results with the upstream's `cache` hints; `tools/list`
   * through {@link servedTools}).
   */
  private async simple(up: BridgeUpstream, req: ValidatedRequest, ctx: LegacyContext): Promise<Record<string, unknown>> {
    const caps = up.mirrored(req.clientCapabilities);
    const lease = await up.pool.acquireShared(ctx.principal, caps, ctx.credential, acquireOptions(ctx));
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
          cacheScope: cacheScopeFor(up, ctx),
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
          SessionPool.keyOf(ctx.principal, caps, ctx.credential),
          result.tools as ListedTool[],
          req.params.cursor === undefined && result.nextCursor === undefined,
        );
      }
      if ((LIST_METHODS as readonly string[]).includes(req.method)) {
        out.ttlMs = listTtlMs(up, UPSTREAM_CAPABILITY_FOR[req.method] as ListKind, info.capabilities, ctx);
        out.cacheScope = cacheScopeFor(up, ctx);
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
  private servedTools(up: BridgeUpstream, key: string, tools: ListedTool[], complete: boolean): ListedTool[] {
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
  private async listTools(up: BridgeUpstream, ctx: LegacyContext, caps: LegacyClientCapabilities): Promise<ListedTool[]> {
    const lease = await up.pool.acquireShared(ctx.principal, caps, ctx.credential, acquireOptions(ctx));
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
    up: BridgeUpstream,
    req: ValidatedRequest,
    ctx: LegacyContext,
    name: string,
    args: unknown,
  ): ToolHeaders | Promise<ToolHeaders> {
    const caps = up.mirrored(req.clientCapabilities);
    const key = SessionPool.keyOf(ctx.principal, caps, ctx.credential);
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
  private static replays(up: BridgeUpstream, method: ExchangeMethod, name: string, tool: ToolHeaders | undefined): boolean {
    const mode = (method === 'tools/call' ? up.cfg.input.tools[name]?.mode : undefined) ?? up.cfg.input.mode;
    if (mode !== 'auto') return mode === 'replay';
    return method !== 'tools/call' || tool?.replayable === true;
  }

  /**
   * Serves `tools/call`, `prompts/get` or `resources/read` as an {@link Exchange}: a new call (run,
   * or replayed from its answers in `input.mode` replay), or the retry of a parked one (its
   * `requestState` and `inputResponses`). What the upstream asks becomes `input_required`, and a
   * call of a client that declared the tasks extension becomes a task after `taskAfterMs`.
   */
  private async exchange(up: BridgeUpstream, req: ValidatedRequest, ctx: LegacyContext): Promise<Record<string, unknown>> {
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
    const tasksDeclared = method === 'tools/call' && declaresTasks(req);
    const toolTasks = method === 'tools/call' ? up.cfg.tasks.tools[name] : undefined;
    if (toolTasks?.required && !tasksDeclared) {
      throw tasksExtensionRequired(`tool '${name}' runs only as a task`);
    }
    const taskAfterMs = toolTasks?.taskAfterMs ?? up.cfg.tasks.taskAfterMs;
    // A caller holding tasks.maxRecordsPerPrincipal records gets no new task: its call is answered
    // in the request, or, for a tool that runs only as a task, refused before it reaches the upstream.
    const taskRoom = !tasksDeclared || (await this.tasks.admits(ctx.principal));
    if (!taskRoom && toolTasks?.required && requestState === undefined) throw this.tasks.recordsFull(up.name);
    // During the drain a resumed call is answered in this request; a task would be cancelled at the end.
    const escalation: TaskEscalation | undefined =
      tasksDeclared && taskRoom && !this.draining()
        ? {
            afterMs: taskAfterMs,
            create: (ex) =>
              this.tasks.create(
                ex,
                { principal: ctx.principal, upstream: up.name },
                { ...up.cfg.tasks, batchWindowMs: window, tool: name, onEnd: ctx.audit?.taskEnded },
              ),
          }
        : undefined;
    if (ctx.approval) {
      if (!approvesInTask(up.cfg, req)) throw new Error('The gateway approval reached a call that does not become a task at once');
      if (!escalation) throw taskRoom ? shuttingDown(up.name) : this.tasks.recordsFull(up.name);
    }
    let result: Record<string, unknown>;
    let replay: { entries: ReplayEntry[]; round: number } | undefined;
    if (claims) {
      // A replay-mode retry runs the call again: during the drain another replica does that, and its state stays unspent.
      if (this.draining() && claims.rp) throw shuttingDown(up.name);
      noteInputRound(claims.rnd);
      if (claims.rp) replay = { entries: await this.bridge.replayAnswers(claims, inputResponses), round: claims.rnd };
      else return this.completed(up, method, true, await this.bridge.resume(claims, binding, inputResponses, ctx, window, escalation), ctx);
    } else if (BridgeServer.replays(up, method, name, tool)) {
      replay = { entries: [], round: 0 };
    }
    const caps = up.mirrored(req.clientCapabilities);
    // With the gateway's approval to ask, the session is leased once the user accepted (this request has ended by then).
    const approval = ctx.approval && {
      ask: ctx.approval,
      acquire: () =>
        this.callLease(up, method, name, caps, { ...ctx, connection: new ClientConnection(), timing: undefined, startMs: undefined }, true),
    };
    const { lease, legacyTask } = approval ? {} : await this.callLease(up, method, name, caps, ctx, tasksDeclared && taskAfterMs === 0);
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
      approval,
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
    // The approval is the task's first input request: the call is a task at once.
    if (approval) return this.bridge.toTask(ex, binding, escalation!);
    result = await this.bridge.drive(
      ex,
      binding,
      ctx,
      window,
      escalation,
      replay ? { round: replay.round, maxBytes: up.cfg.input.maxReplayStateBytes } : undefined,
    );
    return this.completed(up, method, requestState !== undefined, result, ctx);
  }

  /**
   * A session for one Exchange call: one with room for another call (`maxCallsPerSession`), or a
   * session of its own when `tools/call` runs as an upstream task (2025-11-25 `taskSupport`
   * `required`, or `optional` when `taskAtOnce`: the client declared tasks and `taskAfterMs` is 0).
   * @returns the lease and the upstream task's `ttlMs` (undefined: no upstream task).
   * @throws GatewayError -32601 (404) when the upstream does not offer what `method` needs; the pool's failure.
   */
  private async callLease(
    up: BridgeUpstream,
    method: ExchangeMethod,
    name: string,
    caps: LegacyClientCapabilities,
    ctx: LegacyContext,
    taskAtOnce: boolean,
  ): Promise<{ lease: SessionLease; legacyTask: { ttlMs: number } | undefined }> {
    let lease =
      up.pool.tryAcquireCall(ctx.principal, caps, ctx.credential) ??
      (await up.pool.acquireCall(ctx.principal, caps, ctx.credential, acquireOptions(ctx)));
    up.tools.watch(lease.session);
    const needed = UPSTREAM_CAPABILITY_FOR[method]!;
    if (!lease.session.serverCapabilities[needed]) {
      lease.release(true);
      throw methodNotFound(`Method not found: ${method} (upstream '${up.name}' does not offer ${needed})`);
    }
    let legacyTask: { ttlMs: number } | undefined;
    if (method === 'tools/call') {
      const support = lease.session.knownTaskSupport() ?? (await lease.session.taskSupportOf(name, up.cfg.timeouts.requestMs));
      if (support === 'required' || (support === 'optional' && taskAtOnce)) legacyTask = { ttlMs: up.cfg.tasks.ttlMs };
    }
    if (legacyTask && lease.shared) {
      // What an upstream task asks comes on the streams of its tasks/* requests: the call needs a session of its own.
      lease.release(true);
      lease = await up.pool.acquire(ctx.principal, caps, ctx.credential, acquireOptions(ctx));
    }
    return { lease, legacyTask };
  }

  /** The answer to an Exchange method: input_required and tasks as they are, else `complete` (with the caching hints of resources/read). */
  private completed(
    up: BridgeUpstream,
    method: ExchangeMethod,
    retried: boolean,
    result: Record<string, unknown>,
    ctx: LegacyContext,
  ): Record<string, unknown> {
    if (result.resultType === 'task') return result;
    if (result.resultType === 'input_required') return result;
    const out: Record<string, unknown> = { ...result, resultType: 'complete' };
    if (method === 'resources/read') {
      // Results of requests that carried requestState must not be cached (SEP-2549).
      out.ttlMs = retried ? 0 : up.cfg.cache.ttlMs;
      out.cacheScope = retried ? 'private' : cacheScopeFor(up, ctx);
    }
    return out;
  }
}

/**
 * The `ttlMs` of a list answer: the upstream's `cache.ttlMs`, but 0 when the upstream declared
 * `listChanged` for the list and the caller listens to none of its changes (it would not learn of one).
 */
function listTtlMs(up: BridgeUpstream, list: ListKind, declared: ServerCapabilities, ctx: LegacyContext): number {
  const changes = (declared[list] as { listChanged?: boolean } | undefined)?.listChanged === true;
  return changes && !ctx.hearsListChanges?.(list) ? 0 : up.cfg.cache.ttlMs;
}

/** The `cacheScope` of an answer: the upstream's `cache.scope`, but `private` when the upstream got the caller's own credential. */
function cacheScopeFor(up: BridgeUpstream, ctx: LegacyContext): 'public' | 'private' {
  return ctx.credential ? 'private' : up.cfg.cache.scope;
}
