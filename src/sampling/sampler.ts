/**
 * The gateway answering a legacy upstream's `sampling/createMessage` itself, through a configured
 * LLM provider (MCP 2026-07-28 deprecated.mdx: sampling's migration path is "integrate directly
 * with LLM provider APIs"). The Exchange (MRTR bridge and tasks) and the legacy pass-through relay
 * call {@link Sampler.answer}; nothing here knows about either.
 *
 * One request: validate → pick the model → map → reserve budget → wait for a slot → attempts with
 * backoff → map the answer → count. Everything within the provider's `timeoutMs`.
 */
import type { GatewayConfig, SamplingProviderConfig, UpstreamSamplingConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import type { Metrics } from '../observability/metrics.js';
import { principalHash } from '../security/auth.js';
import { Slots, TokenBudgets, type BudgetLimit, type Reservation, type SharedBudgetOptions } from './budget.js';
import { SamplingError } from './errors.js';
import { estimateInputTokens, parseSamplingParams, selectModel } from './mapping.js';
import type { ProviderAdapter } from './providers.js';

/** One `sampling/createMessage` the gateway answers. */
export interface SamplingRequest {
  /** Upstream name (budgets, metrics, logs). */
  upstream: string;
  /** The upstream's `sampling` config (provider, caps, budgets). */
  cfg: UpstreamSamplingConfig;
  /** The tool whose call asked, when known (metrics, logs). */
  tool?: string;
  /** The caller's principal (per-principal budget; hashed in metrics and logs). */
  principal: string;
  /** The upstream's request params as received (legacy CreateMessageRequestParams). */
  params: unknown;
  /** Aborts when the upstream withdraws its request or the call it belongs to ends. */
  signal?: AbortSignal;
}

/** The providers' module (both SDKs), loaded on demand. */
type Providers = typeof import('./providers.js');

/** One request's state, shared with its attempts ({@link Sampler.send}). */
interface Run {
  /** The provider's name and config. */
  provider: string;
  cfg: SamplingProviderConfig;
  /** When the provider's `timeoutMs` runs out (epoch ms), and the signal that aborts the request. */
  deadline: number;
  signal: AbortSignal;
  /** The request's log line so far. */
  line: Record<string, unknown>;
  /** Attempts made so far. */
  attempts: number;
  /** The error of a request that timed out (`timeout`) or was withdrawn (`cancelled`). */
  stopped(): SamplingError;
}

const BACKOFF_BASE_MS = 500;
const BACKOFF_MAX_MS = 8000;

/** Answers sampling requests through the providers of `sampling.providers`. */
export class Sampler {
  /** Per configured provider: its config, its adapter once made (on its first request) and its slots. */
  private readonly providers = new Map<string, { cfg: SamplingProviderConfig; adapter?: ProviderAdapter; slots: Slots }>();
  private readonly budgets: TokenBudgets;
  /**
   * The adapters' module, which loads both provider SDKs (a third of a second or more): loaded in
   * the background when a provider is configured, never by a gateway without one.
   */
  private readonly sdk: Promise<typeof import('./providers.js')> | undefined;

  /**
   * @param shared the fleet-wide token windows (the Redis store), and where a request counted in
   *   memory because Redis was unreachable is reported; without it, budgets count in this process.
   */
  constructor(
    cfg: GatewayConfig['sampling'],
    private readonly metrics: Metrics,
    private readonly log: Logger,
    shared?: SharedBudgetOptions,
  ) {
    this.budgets = new TokenBudgets(shared);
    for (const [name, p] of Object.entries(cfg.providers))
      this.providers.set(name, { cfg: p, slots: new Slots(p.maxConcurrent, p.maxQueued) });
    if (this.providers.size) {
      this.sdk = import('./providers.js');
      // A failure to load is reported by the first request, which awaits it.
      this.sdk.catch(() => {});
    }
  }

  /** Requests holding a slot, per provider (for the `mrtr_sampling_in_flight` gauge). */
  inFlight(): { provider: string; count: number }[] {
    return [...this.providers].map(([provider, p]) => ({ provider, count: p.slots.inFlight }));
  }

  /**
   * Answers one `sampling/createMessage` through the upstream's provider (MCP 2025-11-25
   * client/sampling). Within the provider's `timeoutMs` from arrival: the params are validated, a
   * model is picked from `modelPreferences`, `maxTokens` is capped (provider `maxTokens`, upstream
   * `sampling.maxTokens`), the budgets are checked, a slot is awaited, and the provider is asked,
   * with retries after 408/409/429/5xx/connection failures (backoff 0.5 s·2ⁿ up to 8 s, or the
   * provider's Retry-After) while they fit in the time left.
   * @returns a CreateMessageResult (CreateMessageResultWithTools when the request had tools):
   *   `{role:"assistant", content, model, stopReason?}` with the provider's model and stop reason.
   * @throws SamplingError: `invalid-request`/`unsupported-content` (-32602); `budget`, `busy`,
   *   `provider-auth`, `provider-rate-limited`, `provider-unavailable`, `provider-rejected`,
   *   `provider-protocol`, `timeout`, `cancelled` (-32603). Never the API key or message content.
   */
  async answer(req: SamplingRequest): Promise<Record<string, unknown>> {
    const started = Date.now();
    const name = req.cfg.provider ?? '';
    const provider = this.providers.get(name);
    const who = principalHash(req.principal);
    const line: Record<string, unknown> = { upstream: req.upstream, tool: req.tool, principal: who, provider: name };
    if (!provider) {
      const err = new SamplingError('invalid-request', `No sampling provider '${name}' is configured for upstream '${req.upstream}'`);
      this.done(line, started, err);
      throw err;
    }
    const { cfg: providerCfg, slots } = provider;
    const run = openRun(name, providerCfg, started, line, req.signal);
    const { deadline, signal, stopped } = run;
    let reservation: Reservation | undefined;
    let releaseSlot: (() => void) | undefined;
    try {
      if (req.signal?.aborted) throw stopped();
      const params = parseSamplingParams(req.params);
      const { classifyFailure, createProvider } = await this.sdk!;
      const adapter = (provider.adapter ??= createProvider(name, providerCfg));
      const choice = selectModel(providerCfg, params.modelPreferences);
      const maxTokens = Math.min(params.maxTokens, providerCfg.maxTokens, req.cfg.maxTokens ?? Infinity);
      Object.assign(line, { modelAlias: choice.alias, modelBy: choice.by, maxTokens });
      const body = adapter.build(params, choice, maxTokens);
      reservation = await this.budgets.acquire(this.limits(req), maxTokens);
      releaseSlot = await slots.acquire(deadline, signal).catch((e: SamplingError) => {
        throw e.reason === 'cancelled' ? stopped() : new SamplingError(e.reason, e.message, { ...e.data, provider: name });
      });
      const response = await this.send(adapter, classifyFailure, body, run);
      const mapped = adapter.parse(response, params);
      // What is relayed upstream is held to the same bound as what was received (mapping can
      // grow text: each invalid UTF-8 byte of the body becomes a 3-byte U+FFFD).
      const size = Buffer.byteLength(JSON.stringify(mapped.result));
      if (size > providerCfg.maxResponseBytes) {
        throw new SamplingError(
          'provider-protocol',
          `provider '${name}' answered a result of ${size} bytes, more than maxResponseBytes=${providerCfg.maxResponseBytes} bytes; it was dropped`,
          { provider: name, attempts: run.attempts },
        );
      }
      // A count the provider left out is charged as an estimate: the input from the request's
      // text, the output as the capped maxTokens (the most the provider was asked for).
      const { input, output } = mapped.usage;
      const inputTokens = input ?? estimateInputTokens(params);
      const outputTokens = output ?? maxTokens;
      reservation.commit(inputTokens + outputTokens);
      reservation = undefined;
      const labels = { upstream: req.upstream, tool: req.tool ?? '', principal: who, provider: name, model: mapped.result.model };
      if (input !== undefined) this.metrics.samplingTokens.inc({ ...labels, direction: 'input' }, input);
      if (output !== undefined) this.metrics.samplingTokens.inc({ ...labels, direction: 'output' }, output);
      const estimated = input === undefined || output === undefined;
      Object.assign(line, {
        model: mapped.result.model,
        stopReason: mapped.result.stopReason,
        inputTokens,
        outputTokens,
        ...(estimated ? { usageEstimated: true } : {}),
        attempts: run.attempts,
      });
      this.done(line, started);
      return { ...mapped.result };
    } catch (e) {
      const err =
        e instanceof SamplingError
          ? e
          : new SamplingError('provider-protocol', `Provider '${name}' failed unexpectedly`, { provider: name });
      if (err.reason === 'budget') this.metrics.samplingBudgetExhausted.inc({ upstream: req.upstream, scope: String(err.data.scope) });
      this.done({ ...line, attempts: run.attempts }, started, err);
      throw err;
    } finally {
      run.close();
      reservation?.release();
      releaseSlot?.();
    }
  }

  /**
   * Asks the provider for `body`, retrying after a retryable failure (408/409/429/5xx, connection
   * failures) with backoff 0.5 s·2ⁿ up to 8 s, or the provider's Retry-After, at most `maxRetries`
   * times and while the wait fits before `run.deadline`. `run.attempts` counts the attempts made.
   * @returns the provider's response, as the adapter parses it.
   * @throws SamplingError: the failure's reason (with `attempts`, `status`, `retryAfterMs`), or
   *   `run.stopped()` once the request timed out or was withdrawn.
   */
  private async send(adapter: ProviderAdapter, classifyFailure: Providers['classifyFailure'], body: unknown, run: Run): Promise<unknown> {
    for (;;) {
      run.attempts++;
      try {
        return await adapter.send(body, { signal: run.signal, timeoutMs: run.deadline - Date.now() });
      } catch (e) {
        if (run.signal.aborted || Date.now() >= run.deadline) throw run.stopped();
        const f = classifyFailure(e, adapter);
        const extra = {
          provider: run.provider,
          attempts: run.attempts,
          ...(f.status !== undefined ? { status: f.status } : {}),
          ...(f.retryAfterMs !== undefined ? { retryAfterMs: f.retryAfterMs } : {}),
        };
        if (!f.retryable) throw new SamplingError(f.reason, f.detail, extra);
        if (run.attempts > run.cfg.maxRetries)
          throw new SamplingError(f.reason, `${f.detail}; gave up after ${run.attempts} attempts`, extra);
        const wait = f.retryAfterMs ?? Math.min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (run.attempts - 1)) * (0.75 + Math.random() * 0.25);
        if (Date.now() + wait >= run.deadline) {
          throw new SamplingError(
            f.reason,
            `${f.detail}; no time left within timeoutMs=${run.cfg.timeoutMs} ms to retry after ${Math.round(wait)} ms`,
            extra,
          );
        }
        this.metrics.samplingRetries.inc({ provider: run.provider, status: f.status !== undefined ? String(f.status) : 'connection' });
        this.log.debug(
          { ...run.line, attempt: run.attempts, status: f.status, waitMs: Math.round(wait) },
          'sampling: provider attempt failed, retrying',
        );
        await sleep(wait, run.signal);
        if (run.signal.aborted) throw run.stopped();
      }
    }
  }

  /** The budgets a request of `req` counts against. */
  private limits(req: SamplingRequest): BudgetLimit[] {
    const b = req.cfg.budget;
    const out: BudgetLimit[] = [];
    if (b.tokens !== undefined) out.push({ scope: 'upstream', key: `u\u0000${req.upstream}`, limit: b.tokens, windowMs: b.windowMs });
    if (b.tokensPerPrincipal !== undefined)
      out.push({
        scope: 'principal',
        key: `p\u0000${req.upstream}\u0000${req.principal}`,
        limit: b.tokensPerPrincipal,
        windowMs: b.windowMs,
      });
    return out;
  }

  /** Counts and logs one finished request (no content, no key). */
  private done(line: Record<string, unknown>, started: number, err?: SamplingError): void {
    const durationMs = Date.now() - started;
    const outcome = err ? err.reason : 'complete';
    this.metrics.samplingRequests.inc({ upstream: String(line.upstream), provider: String(line.provider), outcome });
    this.metrics.samplingSeconds.observe({ provider: String(line.provider) }, durationMs / 1000);
    const fields = { ...line, durationMs, outcome, ...(err ? { status: err.data.status, err: err.message } : {}) };
    if (!err || err.reason === 'cancelled' || err.reason === 'budget') this.log.info(fields, 'sampling');
    else this.log.warn(fields, 'sampling');
  }
}

/**
 * Starts one request's clock: its `signal` aborts when the provider's `timeoutMs` (from `started`,
 * epoch ms) runs out or `withdrawn` aborts. Call `close` when the request is over.
 */
function openRun(
  provider: string,
  cfg: SamplingProviderConfig,
  started: number,
  line: Record<string, unknown>,
  withdrawn: AbortSignal | undefined,
): Run & { close(): void } {
  const deadline = started + cfg.timeoutMs;
  const ctrl = new AbortController();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    ctrl.abort();
  }, cfg.timeoutMs);
  const onCancel = () => ctrl.abort();
  withdrawn?.addEventListener('abort', onCancel, { once: true });
  const run = {
    provider,
    cfg,
    deadline,
    signal: ctrl.signal,
    line,
    attempts: 0,
    stopped: () =>
      timedOut || Date.now() >= deadline
        ? new SamplingError('timeout', `Provider '${provider}' gave no answer within timeoutMs=${cfg.timeoutMs} ms`, {
            provider,
            attempts: run.attempts,
          })
        : new SamplingError('cancelled', 'The sampling request was withdrawn before the provider answered', {
            provider,
            attempts: run.attempts,
          }),
    close: () => {
      clearTimeout(timer);
      withdrawn?.removeEventListener('abort', onCancel);
    },
  };
  return run;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}
