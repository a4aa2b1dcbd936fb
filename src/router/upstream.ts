/**
 * One configured upstream as the router sees it: its legacy session pool, its 2026-07-28 hop, the
 * era it speaks (configured, or detected once with `protocol: "auto"`), its readiness, the
 * cache of its tools' `x-mcp-header` annotations, and the list cache of its 2026-07-28 hop. Also
 * the capability mirroring of legacy `initialize` ({@link mirrorCapabilities}) and the
 * parked-session bounds of an upstream ({@link parkedSessionLimits}).
 */
import type { ClientCapabilities as LegacyClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../config/schema.js';

import type { ParkedSessionLimits } from '../cells/bridge/mrtr.js';
import { upstreamFailed } from '../protocol/errors.js';
import { deepFreeze } from '../protocol/envelope.js';
import { passedExtensions } from '../protocol/capabilities.js';
import type { ClientCapabilities } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import type { DropReport } from '../observability/dropped.js';
import { UpstreamHealth } from '../observability/upstream-health.js';
import { SessionPool } from '../upstream/pool.js';

import { createModernUpstream, ModernHopError, tracedModernUpstream, type ModernUpstream } from '../upstream/modern.js';
import { FirstStart } from '../upstream/stdio-child.js';
import { ToolCatalog } from '../upstream/tools.js';
import { cachedModernUpstream, ListCache } from '../upstream/list-cache.js';
import { upstreamSamplingCapability } from '../sampling/mode.js';
import { servedToolList } from '../upstream/tool-policy.js';
import type { BatchLearning } from '../cells/bridge/batching.js';
import { probeModern, startModern } from '../upstream/modern-probe.js';
import { startTimeoutMessage, unreachableText } from '../upstream/start-errors.js';

/**
 * The legacy `initialize` capabilities that mirror what the client declared (docs/architecture.md, "Decisions and why" 2),
 * limited to the kinds the upstream's input policy relays. `elicitation: {}` counts as form mode.
 * `roots` (always with `listChanged`: the gateway sends `notifications/roots/list_changed` when a
 * call needs the server to hold its client's roots) is declared as well when the upstream has
 * configured roots, which the gateway answers itself for a client that did not declare roots.
 * `sampling` (with `tools`) is declared as well when the upstream's `sampling` config lets the
 * gateway's provider answer ({@link upstreamSamplingCapability}). The client's MCP Apps extension
 * goes on as well ({@link passedExtensions}): a server may offer its apps only to a client that has it.
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
  const extensions = passedExtensions(caps);
  if (extensions) (out as { extensions?: Record<string, unknown> }).extensions = extensions;
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
  /** The kept list and server/discover results of the 2026-07-28 hop (src/upstream/list-cache.ts). */
  readonly lists: ListCache;
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
    this.lists = new ListCache(cfg.cache.maxEntries);
    // A tool list change seen on a legacy session (protocol auto) drops the kept tool lists too.
    this.tools.onInvalidate(() => this.lists.drop('tools/list'));
    this.modern = modern && cachedModernUpstream(tracedModernUpstream(name, cfg, modern), this.lists);
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
   * @param hopHeaders the asking caller's credential headers (HTTP), sent with the probe of an
   *   upstream that wants each user's own token. A probe refused with HTTP 401/403 gives legacy
   *   without remembering it.
   */
  era(hopHeaders?: Readonly<Record<string, string>>): Promise<UpstreamEra> {
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
    this.eraKnown ??= probeModern(this.modern, budgetMs, !stdio, hopHeaders && { ...hopHeaders }).then(
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
        // Refused (HTTP 401/403: this caller's credential, or none yet): legacy for this caller, as
        // any 4xx, but not remembered, so a caller with a credential the upstream takes learns the era.
        if (e instanceof ModernHopError && (e.status === 401 || e.status === 403)) return 'legacy' as const;
        // A stdio child that did not answer in time is stopped (the next call starts another),
        // unless it is still in its first start: the next call waits on it (see keepStarting), and
        // its silence says nothing about its era.
        const timedOut = e instanceof ModernHopError && e.reason === 'timeout';
        const kept = timedOut && this.modern!.keepStarting?.() === true;
        if (timedOut && !kept) void this.modern!.close({ reopen: true });
        if (kept) return this.startFailed(new ModernHopError('timeout', STILL_STARTING, (e as ModernHopError).stderr), budgetMs, setting);
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
    // The upstream may have been replaced: what it promised about its lists no longer holds.
    this.lists.drop();
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

  /**
   * Readiness of a `required` upstream (`GET /readyz`): not ready, without waiting, while it is in
   * its first start (see `timeouts.firstStartMs`) or its first session is starting; else whether
   * it can be started or reached (see {@link reachable}). During a first start not yet begun, the
   * check is begun in the background. Never throws.
   */
  readiness(): { name: string; ready: boolean; reason?: string } | Promise<{ name: string; ready: boolean; reason?: string }> {
    // A first start (an install, maybe) is not waited for, nor a session start before any opened:
    // not ready until a session opened. One not begun yet is begun in the background.
    const first = `Upstream '${this.name}' is in its first start (it may be installing; timeouts.firstStartMs=${this.firstStart.budgetMs()} ms)`;
    if (this.firstStarting) return { name: this.name, ready: false, reason: first };
    if (this.pool.opened === 0 && this.pool.startingNow)
      return { name: this.name, ready: false, reason: `Upstream '${this.name}' is starting` };
    const checked = this.reachable();
    if (!this.firstStart.active) return checked;
    void checked;
    return { name: this.name, ready: false, reason: this.pool.lastError ?? first };
  }

  /** Whether the upstream can be started or reached: its era, then a session (opened now when none has). Never throws. */
  private async reachable(): Promise<{ name: string; ready: boolean; reason?: string }> {
    try {
      if ((await this.era()) === 'modern') return { name: this.name, ready: true };
    } catch (e) {
      return { name: this.name, ready: false, reason: (e as Error).message };
    }
    if (this.pool.lastError === undefined && this.pool.opened > 0) return { name: this.name, ready: true };
    try {
      const lease = await this.pool.acquireShared('gateway:readiness', {});
      lease.release(true);
      return { name: this.name, ready: true };
    } catch (e) {
      return { name: this.name, ready: false, reason: this.pool.lastError ?? (e as Error).message };
    }
  }
}

/** Longest wait for the `server/discover` that tells an HTTP upstream's era, in ms. */
const PROBE_MS = 5000;

/** What a stdio child still silent in its first start is doing, for the message of its timeout. */
const STILL_STARTING = 'still starting: it has said nothing yet, a first run may be installing; it is left to finish';
/** Ends the message of a stdio era probe that got no answer: the era can be set instead of asked. */
const PROTOCOL_HINT =
  '; a server that ignores requests it does not know needs protocol: "legacy" (a 2026-07-28 server can be set to protocol: "2026-07-28")';
