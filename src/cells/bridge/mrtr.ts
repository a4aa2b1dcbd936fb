/**
 * The MRTR front end (SEP-2322, MCP 2026-07-28 basic/patterns/mrtr): drives an Exchange in
 * synchronous rounds. When the Exchange needs input it is parked and the client gets
 * `{"resultType":"input_required", inputRequests, requestState}`; the retry opens the sealed state,
 * finds the parked Exchange, delivers `inputResponses` and waits again.
 */
import { randomUUID } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { invalidParams, upstreamFailed, type GatewayError } from '../../protocol/errors.js';
import type { InputRequest, InputRequiredResult } from '../../protocol/wire.js';
import type { Logger } from '../../observability/log.js';
import { recordInputRound } from '../../observability/tracing.js';
import { HeldElsewhere, predatesLedger, type SpentStates } from '../../store/shared.js';
import type { CallContext } from '../../protocol/connection.js';
import type { Exchange } from './exchange.js';
import { invalidResponse } from './responses.js';
import { digestOf, INVALID_STATE, type ReplayEntry, type StateClaims, type StateSealer } from '../../security/seal.js';

/**
 * Task creation for a client that declared the tasks extension: when the Exchange is still working
 * (not asking for input) `afterMs` after this round started upstream, `create` turns it into a task
 * and returns the CreateTaskResult to answer.
 */
export interface TaskEscalation {
  afterMs: number;
  create: (exchange: Exchange) => Promise<Record<string, unknown>>;
}

/** What a retry must match in the state it presents. */
export interface RetryBinding {
  upstream: string;
  principal: string;
  method: string;
  name: string;
  args: unknown;
}

interface Parked {
  exchange: Exchange;
  timer: NodeJS.Timeout;
  binding: RetryBinding;
  unsubscribe: () => void;
  /** When this round parked, and when it expires (epoch ms). */
  parkedAt: number;
  expiresAt: number;
}

/** A parked call as {@link MrtrBridge.parkedCalls} reports it. */
export interface ParkedCall {
  /** The Exchange id. */
  id: string;
  upstream: string;
  /** The principal as bound into the state (raw: hash it before showing it). */
  principal: string;
  method: string;
  /** Tool or prompt name, or resource URI. */
  name: string;
  /** Rounds answered so far. */
  round: number;
  /** When this round parked, and when the call expires unless retried (epoch ms). */
  parkedAt: number;
  expiresAt: number;
  /** The input requests waiting for the client, by key. */
  inputs: Record<string, InputRequest>;
}

/** An Exchange that ended while parked: its outcome waits for the retry, holding no session. */
interface Ended {
  exchange: Exchange;
  binding: RetryBinding;
}

/** Most ended-while-parked outcomes kept for their retries. */
const MAX_ENDED = 10_000;

/**
 * Bounds on the parked calls of one upstream that hold an upstream session of their own (stdio,
 * or Streamable HTTP without shared sessions): at most `max` of them, and `perPrincipal` for one
 * principal (undefined: no per-principal bound, as with `auth.mode: "none"`).
 */
export interface ParkedSessionLimits {
  max: number;
  perPrincipal?: number;
}

/** Replay mode for one drive: the round number so far and the bound on the state's answers, in bytes. */
export interface ReplayMode {
  round: number;
  maxBytes: number;
}

/** Parks Exchanges between rounds and seals/opens their requestState. */
export class MrtrBridge {
  private readonly parked = new Map<string, Parked>();
  /** Exchanges a client request is waiting on right now. */
  private readonly driving = new Set<Exchange>();
  private readonly parkedPerUpstream = new Map<string, number>();
  private readonly ended: LRUCache<string, Ended>;
  /**
   * Exchanges that parked while holding a session of their own, until they end (answered rounds
   * included, so a call being resumed keeps its place), with their upstream and principal.
   */
  private readonly holding = new Map<string, { upstream: string; principal: string }>();
  /** Set by {@link drain}: no new park-mode state is issued. */
  private draining = false;

  /**
   * @param limits.total most parked Exchanges overall; limits.perUpstream(name) most for one
   *   upstream; limits.sessions(name) the bounds on parked calls holding sessions of their own.
   */
  constructor(
    private readonly sealer: StateSealer,
    private readonly ttlMs: number,
    private readonly log: Logger,
    private readonly ledger: SpentStates,
    /** This replica's id, sealed into each park-mode state. */
    readonly replica: string,
    /** Whether other replicas share the store: a park-mode retry for another replica is forwarded there. */
    private readonly forwarding: boolean,
    private readonly limits: {
      total: number;
      perUpstream: (upstream: string) => number;
      sessions?: (upstream: string) => ParkedSessionLimits | undefined;
    } = {
      total: Infinity,
      perUpstream: () => Infinity,
    },
  ) {
    this.ended = new LRUCache<string, Ended>({ max: MAX_ENDED, ttl: ttlMs, ttlAutopurge: true });
  }

  /** Called for each input_required round answered, with the methods it asks. */
  onRound: ((upstream: string, methods: string[]) => void) | undefined;

  /** Number of parked Exchanges. */
  get parkedCount(): number {
    return this.parked.size;
  }

  /** Parked Exchanges by upstream. */
  parkedByUpstream(): { upstream: string; count: number }[] {
    return [...this.parkedPerUpstream].map(([upstream, count]) => ({ upstream, count }));
  }

  /** Every parked call, oldest first (a read-only view for the admin page). */
  parkedCalls(): ParkedCall[] {
    return [...this.parked.values()]
      .map((p) => ({
        id: p.exchange.id,
        upstream: p.binding.upstream,
        principal: p.binding.principal,
        method: p.binding.method,
        name: p.binding.name,
        round: p.exchange.round,
        parkedAt: p.parkedAt,
        expiresAt: p.expiresAt,
        inputs: p.exchange.outstanding(),
      }))
      .sort((a, b) => a.parkedAt - b.parkedAt);
  }

  /** Number of parked Exchanges of one upstream. */
  parkedFor(upstream: string): number {
    return this.parkedPerUpstream.get(upstream) ?? 0;
  }

  /**
   * Waits for the Exchange's next event and answers it: the result, the error (thrown), or an
   * input_required result with a freshly sealed state (the Exchange is then parked).
   * @throws GatewayError from the Exchange's outcome.
   */
  async drive(
    exchange: Exchange,
    binding: RetryBinding,
    ctx: CallContext,
    batchWindowMs: number,
    task?: TaskEscalation,
    replay?: ReplayMode,
  ): Promise<Record<string, unknown>> {
    exchange.setProgressSink(ctx.onProgress);
    let state: 'done' | 'input' | 'aborted' | 'deadline';
    const waitStart = performance.now();
    this.driving.add(exchange);
    try {
      state = await exchange.settle(batchWindowMs, ctx.connection, task ? Date.now() + task.afterMs : undefined);
    } finally {
      this.driving.delete(exchange);
      exchange.setProgressSink(undefined);
      if (ctx.timing) ctx.timing.upstreamMs += performance.now() - waitStart;
    }
    if (state === 'deadline') return this.toTask(exchange, binding, task!);
    if (state === 'aborted') {
      const err = upstreamFailed(binding.upstream, 'cancelled', 'The client closed the request; the upstream call was cancelled');
      exchange.cancel(err);
      throw err;
    }
    if (state === 'done') {
      const o = exchange.outcome!;
      if ('error' in o) throw o.error;
      return o.result;
    }
    const inputRequests = exchange.outstanding();
    if (replay) return this.replayRound(exchange, binding, inputRequests, replay, waitStart);
    if (this.draining) {
      // A parked call would only be cancelled at the end of the grace period: say so now.
      const err = upstreamFailed(
        binding.upstream,
        'shutting-down',
        'The call asks for client input, but the gateway is shutting down and parks no new calls; the call was cancelled upstream, start it again',
      );
      exchange.cancel(err);
      throw err;
    }
    // A call that leased its session alone before the upstream was seen asking on call streams
    // lets other calls join it now: it holds no session of its own while parked.
    if (exchange.shareSession()) this.holding.delete(exchange.id);
    if (!this.parked.has(exchange.id) && exchange.round === 0) {
      const full = this.parkingFull(exchange, binding);
      if (full) {
        const err = upstreamFailed(
          binding.upstream,
          'parked-limit',
          `Too many calls are waiting for client input (limit ${full}); this call was cancelled upstream, retry later`,
        );
        this.log.warn({ upstream: binding.upstream, limit: full }, 'parked-call limit reached');
        exchange.cancel(err);
        throw err;
      }
    }
    const claims = this.claimsFor(binding, inputRequests, { ex: exchange.id, rep: this.replica, rnd: exchange.round + 1 });
    const requestState = await this.sealer.seal(claims);
    this.hold(exchange, binding);
    this.park(exchange, binding);
    this.onRound?.(
      binding.upstream,
      Object.values(inputRequests).map((r) => r.method),
    );
    recordInputRound({
      start: waitStart,
      round: claims.rnd,
      upstream: binding.upstream,
      method: binding.method,
      name: binding.name,
      inputRequests,
      mode: 'park',
    });
    const result: InputRequiredResult = { resultType: 'input_required', inputRequests, requestState };
    return result;
  }

  /**
   * Turns `exchange` into a task and returns its CreateTaskResult (`task.create`). A call that
   * cannot become one is cancelled: with no task record nobody could follow it.
   * @throws what `task.create` throws (-32603 `busy` for a full task quota, a store failure).
   */
  async toTask(exchange: Exchange, binding: RetryBinding, task: TaskEscalation): Promise<Record<string, unknown>> {
    try {
      return await task.create(exchange);
    } catch (e) {
      exchange.cancel(upstreamFailed(binding.upstream, 'cancelled', `The call could not become a task: ${(e as Error).message}`));
      throw e;
    }
  }

  /**
   * Which parking limit a first round of `exchange` would exceed (as words for the error), or
   * undefined: `maxParked` for the upstream, `limits.maxParked` overall, and for a call holding a
   * session of its own `maxParkedSessions` for the upstream and `maxParkedSessionsPerPrincipal`.
   */
  private parkingFull(exchange: Exchange, binding: RetryBinding): string | undefined {
    const limit = this.limits.perUpstream(binding.upstream);
    if (this.parkedFor(binding.upstream) >= limit) return `${limit} for upstream '${binding.upstream}'`;
    if (this.parked.size >= this.limits.total) return `${this.limits.total} over all upstreams`;
    const sessions = exchange.holdsSession ? this.limits.sessions?.(binding.upstream) : undefined;
    if (!sessions) return undefined;
    let upstream = 0;
    let principal = 0;
    for (const h of this.holding.values()) {
      if (h.upstream !== binding.upstream) continue;
      upstream++;
      if (h.principal === binding.principal) principal++;
    }
    if (upstream >= sessions.max) {
      return `maxParkedSessions=${sessions.max} for upstream '${binding.upstream}': the rest of its sessions stay free for other calls; ${this.holdersText(binding.upstream)}`;
    }
    if (sessions.perPrincipal !== undefined && principal >= sessions.perPrincipal) {
      return `maxParkedSessionsPerPrincipal=${sessions.perPrincipal} for this caller on upstream '${binding.upstream}'; ${this.holdersText(binding.upstream, binding.principal)}`;
    }
    return undefined;
  }

  /**
   * The calls of `upstream` (of `principal`, when given) counted against the parked-session
   * bounds, in words: how many hold a session of their own, how many of them are parked now, and
   * when the oldest parked one expires unless retried (ISO time and seconds from now).
   */
  private holdersText(upstream: string, principal?: string): string {
    let holders = 0;
    let parked = 0;
    let oldest = Infinity;
    for (const [id, h] of this.holding) {
      if (h.upstream !== upstream || (principal !== undefined && h.principal !== principal)) continue;
      holders++;
      const p = this.parked.get(id);
      if (!p) continue;
      parked++;
      oldest = Math.min(oldest, p.expiresAt);
    }
    const whose = principal !== undefined ? "this caller's calls" : 'calls';
    const resumed = holders - parked;
    const counted = `${holders} ${whose} hold a session of their own (${parked} parked waiting for input${resumed ? `, ${resumed} resumed and running` : ''})`;
    if (oldest === Infinity) return counted;
    return `${counted}; the oldest parked one expires at ${new Date(oldest).toISOString()} (in ${Math.max(0, Math.ceil((oldest - Date.now()) / 1000))} s) unless retried`;
  }

  /** Counts `exchange` against the parked-session bounds until it ends. */
  private hold(exchange: Exchange, binding: RetryBinding): void {
    if (!exchange.holdsSession || this.holding.has(exchange.id) || exchange.outcome) return;
    this.holding.set(exchange.id, { upstream: binding.upstream, principal: binding.principal });
    const stop = exchange.onChange(() => {
      if (!exchange.outcome) return;
      this.holding.delete(exchange.id);
      stop();
    });
  }

  /**
   * A replay-mode round: the questions so far (answered, with their answers) and the new ones go
   * into the sealed state with their digests, and the upstream call is cancelled, holding nothing.
   * @throws GatewayError -32603 `replay-limit` when the answers exceed `maxBytes`.
   */
  private async replayRound(
    exchange: Exchange,
    binding: RetryBinding,
    inputRequests: Record<string, InputRequest>,
    replay: ReplayMode,
    started: number,
  ): Promise<Record<string, unknown>> {
    const entries = exchange.replayState();
    const bytes = Buffer.byteLength(JSON.stringify(entries));
    if (bytes > replay.maxBytes) {
      const err = upstreamFailed(
        binding.upstream,
        'replay-limit',
        `The answers of this call (${bytes} bytes) exceed input.maxReplayStateBytes=${replay.maxBytes}; raise it, or park this tool (input.mode "park")`,
      );
      exchange.cancel(err);
      throw err;
    }
    const claims = this.claimsFor(binding, inputRequests, { ex: '', rep: '', rnd: replay.round + 1, rp: entries });
    const requestState = await this.sealer.seal(claims);
    // The call is asked again on the retry: nothing of it is kept here.
    exchange.endSpanAsRound();
    exchange.cancel(upstreamFailed(binding.upstream, 'cancelled', 'Replay mode: the call runs again when the client answers'));
    this.onRound?.(
      binding.upstream,
      Object.values(inputRequests).map((r) => r.method),
    );
    recordInputRound({
      start: started,
      round: claims.rnd,
      upstream: binding.upstream,
      method: binding.method,
      name: binding.name,
      inputRequests,
      mode: 'replay',
    });
    return { resultType: 'input_required', inputRequests, requestState } satisfies InputRequiredResult;
  }

  /**
   * The claims of a new `requestState` for a round of `binding` asking `inputRequests`, single use
   * (a fresh `jti`) and valid for the state TTL; `round` gives the parked call (or none, in
   * replay), the replica holding it, the round number and replay entries.
   */
  private claimsFor(
    binding: RetryBinding,
    inputRequests: Record<string, InputRequest>,
    round: Pick<StateClaims, 'ex' | 'rep' | 'rnd' | 'rp'>,
  ): StateClaims {
    return {
      up: binding.upstream,
      sub: binding.principal,
      m: binding.method,
      n: binding.name,
      d: digestOf(binding.args),
      ...round,
      keys: Object.keys(inputRequests),
      jti: randomUUID(),
      expMs: Date.now() + this.ttlMs,
    };
  }

  private park(exchange: Exchange, binding: RetryBinding): void {
    const prev = this.parked.get(exchange.id);
    if (prev) {
      clearTimeout(prev.timer);
      prev.unsubscribe();
    } else this.parkedPerUpstream.set(binding.upstream, this.parkedFor(binding.upstream) + 1);
    const timer = setTimeout(() => this.expire(exchange.id), this.ttlMs);
    timer.unref();
    // An Exchange that ends while parked (its upstream died, or the upstream gave up and answered)
    // leaves the parked set at once; its outcome waits for the retry.
    const unsubscribe = exchange.onChange(() => {
      if (!exchange.outcome) return;
      const p = this.unpark(exchange.id);
      if (p) this.ended.set(exchange.id, { exchange, binding });
    });
    const parkedAt = Date.now();
    this.parked.set(exchange.id, { exchange, timer, binding, unsubscribe, parkedAt, expiresAt: parkedAt + this.ttlMs });
  }

  private unpark(id: string): Parked | undefined {
    const p = this.parked.get(id);
    if (!p) return undefined;
    clearTimeout(p.timer);
    p.unsubscribe();
    this.parked.delete(id);
    this.parkedPerUpstream.set(p.binding.upstream, this.parkedFor(p.binding.upstream) - 1);
    return p;
  }

  private expire(id: string): void {
    const p = this.unpark(id);
    if (!p) return;
    this.log.info({ exchange: id, upstream: p.binding.upstream, method: p.binding.method, name: p.binding.name }, 'parked call expired');
    p.exchange.cancel(
      upstreamFailed(p.binding.upstream, 'cancelled', `The client did not answer within the requestState TTL (${this.ttlMs} ms)`),
    );
  }

  /**
   * Opens a retry's `requestState` and checks it is bound to this request (upstream, principal,
   * method, name, arguments), a bridge state (not pass-through), and unspent. A park-mode state
   * must belong to this replica; a replay-mode state (`rp`) may come from any.
   * @throws HeldElsewhere for a park-mode state of another replica when replicas forward (before
   *   the spent check, which the owner makes: the request is forwarded as it came).
   * @throws GatewayError -32602 for an invalid, expired, replayed or foreign state.
   */
  async open(binding: RetryBinding, requestState: unknown): Promise<StateClaims> {
    const claims = await this.sealer.open(requestState);
    if (
      claims.up !== binding.upstream ||
      claims.sub !== binding.principal ||
      claims.m !== binding.method ||
      claims.n !== binding.name ||
      claims.d !== digestOf(binding.args) ||
      claims.pt ||
      claims.cs
    ) {
      throw invalidParams(INVALID_STATE);
    }
    if (!claims.rp && claims.rep !== this.replica) {
      if (this.forwarding) throw new HeldElsewhere(claims.rep);
      throw invalidParams(INVALID_STATE);
    }
    if (predatesLedger(this.ledger, claims.iat) || (await this.ledger.isSpent(claims.jti))) throw invalidParams(INVALID_STATE);
    return claims;
  }

  /**
   * A replay-mode retry: the questions of the state in the order they were asked, with the answers
   * so far plus the retry's `inputResponses` for the questions the state left outstanding (each
   * checked against the response shape of its method), for the next run of the call. Spends the
   * state.
   * @throws GatewayError -32602 for a malformed answer (the state stays unspent) or a spent state.
   */
  async replayAnswers(claims: StateClaims, inputResponses: unknown): Promise<ReplayEntry[]> {
    if (inputResponses !== undefined && (inputResponses === null || typeof inputResponses !== 'object' || Array.isArray(inputResponses))) {
      throw invalidParams('inputResponses must be an object mapping input keys to responses');
    }
    const answers = (inputResponses ?? {}) as Record<string, unknown>;
    const entries: ReplayEntry[] = [];
    for (const e of claims.rp ?? []) {
      if (e.v !== undefined) {
        entries.push(e);
        continue;
      }
      if (!(e.k in answers)) {
        // Left unanswered: it keeps its place, and the next run asks it again.
        entries.push(e);
        continue;
      }
      const request = { method: e.m, params: e.t ? { tools: [] } : {} } as InputRequest;
      const problem = invalidResponse(request, answers[e.k]);
      if (problem) throw invalidParams(`inputResponses["${e.k}"] ${problem}`, { key: e.k });
      entries.push({ ...e, v: answers[e.k] as Record<string, unknown> });
    }
    if (!(await this.ledger.spend(claims.jti, claims.expMs))) throw invalidParams(INVALID_STATE);
    return entries;
  }

  /**
   * A park-mode retry: finds the parked Exchange, validates `inputResponses`, delivers them and
   * drives the Exchange again.
   * @throws GatewayError -32602 when the Exchange is not parked here (any more), or for a malformed
   *   `inputResponses` value (the call stays parked).
   */
  async resume(
    claims: StateClaims,
    binding: RetryBinding,
    inputResponses: unknown,
    ctx: CallContext,
    batchWindowMs: number,
    task?: TaskEscalation,
  ): Promise<Record<string, unknown>> {
    const parked = this.parked.get(claims.ex) ?? this.ended.get(claims.ex);
    if (!parked) throw invalidParams(INVALID_STATE);
    const { exchange } = parked;
    if (exchange.outcome) {
      // It ended while parked: the retry receives what the upstream did meanwhile.
      if (!(await this.ledger.spend(claims.jti, claims.expMs))) throw invalidParams(INVALID_STATE);
      this.ended.delete(claims.ex);
      return this.drive(exchange, binding, ctx, batchWindowMs, task);
    }

    if (inputResponses !== undefined && (inputResponses === null || typeof inputResponses !== 'object' || Array.isArray(inputResponses))) {
      throw invalidParams('inputResponses must be an object mapping input keys to responses');
    }
    const answers = (inputResponses ?? {}) as Record<string, unknown>;
    const deliver: [string, Record<string, unknown>][] = [];
    for (const key of claims.keys) {
      if (!(key in answers)) continue;
      const request = exchange.pendingRequest(key);
      if (!request) continue;
      const problem = invalidResponse(request, answers[key]);
      if (problem) throw invalidParams(`inputResponses["${key}"] ${problem}`, { key });
      deliver.push([key, answers[key] as Record<string, unknown>]);
    }

    // Checks passed: the state is spent and the Exchange leaves the parking lot.
    if (!(await this.ledger.spend(claims.jti, claims.expMs))) throw invalidParams(INVALID_STATE);
    if (!this.parked.has(claims.ex)) throw invalidParams(INVALID_STATE);
    this.unpark(claims.ex);
    exchange.round = claims.rnd;
    for (const [key, value] of deliver) exchange.answer(key, value);
    return this.drive(exchange, binding, ctx, batchWindowMs, task);
  }

  /**
   * Shutdown has begun: retries of parked calls are still served, but a call that asks for input
   * is cancelled with -32603 `shutting-down` instead of being parked (replay-mode rounds, which
   * hold nothing here, go on).
   */
  drain(): void {
    this.draining = true;
  }

  /**
   * Cancels every Exchange a client is waiting on and every parked one, with the error
   * `errorFor(upstream)` gives (shutdown).
   */
  cancelAll(errorFor: (upstream: string) => GatewayError): void {
    for (const ex of this.driving) ex.cancel(errorFor(ex.upstream));
    for (const id of [...this.parked.keys()]) {
      const p = this.unpark(id);
      p?.exchange.cancel(errorFor(p.binding.upstream));
    }
  }
}
