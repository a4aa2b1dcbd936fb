/**
 * Prometheus metrics (prom-client), served at `GET /metrics` in the text exposition format.
 * Each gateway has its own registry. Times are in seconds, as Prometheus expects.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/** Live numbers the gauges read at scrape time. */
export interface MetricsSource {
  /**
   * Upstream sessions by upstream: `total` counts every session that exists or is being opened
   * (what `maxSessions` bounds), `idle` those ready for a call, `leased` those a call holds.
   */
  sessions(): { upstream: string; total: number; idle: number; leased: number }[];
  parked(): { upstream: string; count: number }[];
  runningTasks(): number;
  /** Provider-answered sampling requests holding a provider slot, by provider. */
  samplingInFlight?(): { provider: string; count: number }[];
  /** The deprecation census rows (first and last use as ISO 8601). */
  census?(): { upstream: string; tool: string; feature: string; firstSeen: string; lastSeen: string }[];
}

const BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The gateway's metrics. */
export class Metrics {
  readonly registry = new Registry();
  /** Requests by upstream, method and outcome (complete, input_required, task, error code). */
  readonly requests = new Counter({
    name: 'mrtr_requests_total',
    help: 'Downstream requests by upstream, method and outcome',
    labelNames: ['upstream', 'method', 'outcome'] as const,
    registers: [this.registry],
  });
  /** Label children of {@link requests}, {@link upstreamSeconds} and {@link gatewaySeconds} by upstream, method and outcome. */
  private readonly requestChildren = new Map<
    string,
    { count: { inc(): void }; upstream: { observe(v: number): void }; gateway: { observe(v: number): void } }
  >();

  /**
   * Counts one downstream request in {@link requests} and observes its times (seconds) in
   * {@link upstreamSeconds} and {@link gatewaySeconds}, through label children kept per upstream,
   * method and outcome (no label hashing per request).
   */
  observeRequest(upstream: string, method: string, outcome: string, upstreamSeconds: number, gatewaySeconds: number): void {
    const key = `${upstream}\n${method}\n${outcome}`;
    let c = this.requestChildren.get(key);
    if (!c) {
      c = {
        count: this.requests.labels(upstream, method, outcome),
        upstream: this.upstreamSeconds.labels(upstream, method),
        gateway: this.gatewaySeconds.labels(upstream, method),
      };
      this.requestChildren.set(key, c);
    }
    c.count.inc();
    c.upstream.observe(upstreamSeconds);
    c.gateway.observe(gatewaySeconds);
  }

  /** Time the gateway itself added to a request (total minus upstream time). */
  readonly gatewaySeconds = new Histogram({
    name: 'mrtr_gateway_added_seconds',
    help: 'Time added by the gateway per request (total minus upstream time)',
    labelNames: ['upstream', 'method'] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });
  /** Time spent waiting on the upstream per request. */
  readonly upstreamSeconds = new Histogram({
    name: 'mrtr_upstream_seconds',
    help: 'Time spent waiting on the upstream per request',
    labelNames: ['upstream', 'method'] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });
  /** input_required rounds answered, by input kind (a round with two kinds counts once for each). */
  readonly inputRounds = new Counter({
    name: 'mrtr_input_rounds_total',
    help: 'input_required rounds by upstream and input kind',
    labelNames: ['upstream', 'kind'] as const,
    registers: [this.registry],
  });
  /** Task status changes, by the status reached (a new task counts as its first status). */
  readonly tasks = new Counter({
    name: 'mrtr_tasks_total',
    help: 'Task status changes by status reached',
    labelNames: ['status'] as const,
    registers: [this.registry],
  });
  /** Forms declined by the secret guard. */
  readonly secretDeclines = new Counter({
    name: 'mrtr_secret_guard_declines_total',
    help: 'Form elicitations asking for secrets, declined upstream',
    labelNames: ['upstream'] as const,
    registers: [this.registry],
  });
  /** Requests sent to the replica holding their call (outcome: the owner's HTTP status, or replica-gone). */
  readonly forwarded = new Counter({
    name: 'mrtr_forwarded_total',
    help: 'Requests forwarded to the replica holding their call, by outcome',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  /** Requests the internal hop refused although they carried the replica secret, by reason (see `hopRefusal` in src/http/replicas.ts). */
  readonly forwardRefused = new Counter({
    name: 'mrtr_forward_refused_total',
    help: 'Requests with the replica secret refused by the internal hop: not a retry or task command held here, or for another principal than the state or task',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });
  /** Upstream calls that used a feature 2026-07-28 deprecated or removed (see src/observability/census.ts). */
  readonly deprecatedFeatureCalls = new Counter({
    name: 'mrtr_deprecated_feature_calls_total',
    help: 'Upstream calls that used a feature MCP 2026-07-28 deprecated or removed, by upstream, tool and feature',
    labelNames: ['upstream', 'tool', 'feature'] as const,
    registers: [this.registry],
  });
  /** Entries left out of list answers (see src/observability/dropped.ts), by upstream, kind and reason. */
  readonly droppedEntries = new Counter({
    name: 'mrtr_list_entries_dropped_total',
    help: 'Entries left out of list answers, by upstream, kind (tool, prompt, resource, resourceTemplate) and reason (invalid-name, invalid-x-mcp-header, conflict)',
    labelNames: ['upstream', 'kind', 'reason'] as const,
    registers: [this.registry],
  });
  /** Lookups of the list cache of 2026-07-28 upstreams (src/upstream/list-cache.ts), by upstream, method and result (`hit`, `miss`). */
  readonly listCacheRequests = new Counter({
    name: 'mrtr_list_cache_requests_total',
    help: 'tools/list, prompts/list, resources/list and server/discover requests of 2026-07-28 upstreams answered from the list cache (hit) or sent upstream (miss)',
    labelNames: ['upstream', 'method', 'result'] as const,
    registers: [this.registry],
  });
  /** Requests refused by the rate or concurrency limit. */
  readonly rateLimited = new Counter({
    name: 'mrtr_rate_limited_total',
    help: 'Requests refused with 429 by limit',
    labelNames: ['limit'] as const,
    registers: [this.registry],
  });
  /**
   * Requests a limit counted per replica in memory because the shared store (Redis) failed, by limit
   * (`rate`, `concurrency`, `sampling-budget`, `task-quota`).
   */
  readonly limitsStoreFallback = new Counter({
    name: 'mrtr_limits_store_fallback_total',
    help: 'Requests counted by a limit in this replica only, because the shared store could not be reached, by limit',
    labelNames: ['limit'] as const,
    registers: [this.registry],
  });

  /** Sampling requests the gateway answered (or failed to) through a provider, by outcome (`complete` or the failure reason). */
  readonly samplingRequests = new Counter({
    name: 'mrtr_sampling_requests_total',
    help: 'sampling/createMessage requests answered through a provider, by upstream, provider and outcome',
    labelNames: ['upstream', 'provider', 'outcome'] as const,
    registers: [this.registry],
  });
  /** Tokens the provider reported, by upstream, tool, hashed principal, provider, model and direction (input or output). */
  readonly samplingTokens = new Counter({
    name: 'mrtr_sampling_tokens_total',
    help: 'Provider tokens spent answering sampling, by upstream, tool, principal hash, provider, model and direction',
    labelNames: ['upstream', 'tool', 'principal', 'provider', 'model', 'direction'] as const,
    registers: [this.registry],
  });
  /** Sampling requests refused by a token budget, by scope (upstream or principal). */
  readonly samplingBudgetExhausted = new Counter({
    name: 'mrtr_sampling_budget_exhausted_total',
    help: 'Sampling requests refused because a token budget was exhausted',
    labelNames: ['upstream', 'scope'] as const,
    registers: [this.registry],
  });
  /** Provider attempts retried, by provider and what failed (HTTP status or `connection`). */
  readonly samplingRetries = new Counter({
    name: 'mrtr_sampling_retries_total',
    help: 'Provider attempts retried after 408, 409, 429, 5xx or a connection failure',
    labelNames: ['provider', 'status'] as const,
    registers: [this.registry],
  });
  /** Time from a sampling request's arrival to its answer or error, by provider. */
  readonly samplingSeconds = new Histogram({
    name: 'mrtr_sampling_seconds',
    help: 'Time to answer a sampling request through a provider (queue, attempts and backoff)',
    labelNames: ['provider'] as const,
    buckets: BUCKETS,
    registers: [this.registry],
  });

  constructor(source: MetricsSource) {
    const registers = [this.registry];
    new Gauge({
      name: 'mrtr_sampling_in_flight',
      help: 'Sampling requests holding a provider slot',
      labelNames: ['provider'] as const,
      registers,
      collect() {
        this.reset();
        for (const p of source.samplingInFlight?.() ?? []) this.set({ provider: p.provider }, p.count);
      },
    });
    new Gauge({
      name: 'mrtr_upstream_sessions',
      help: 'Upstream sessions by state',
      labelNames: ['upstream', 'state'] as const,
      registers,
      collect() {
        this.reset();
        for (const s of source.sessions()) {
          this.set({ upstream: s.upstream, state: 'idle' }, s.idle);
          this.set({ upstream: s.upstream, state: 'leased' }, s.leased);
          // Neither idle nor leased: being opened, or kept out of use after a cancelled call until
          // the upstream answers it (at most about a second), then closed.
          this.set({ upstream: s.upstream, state: 'unavailable' }, Math.max(0, s.total - s.idle - s.leased));
        }
      },
    });
    new Gauge({
      name: 'mrtr_parked_calls',
      help: 'Calls parked waiting for client input',
      labelNames: ['upstream'] as const,
      registers,
      collect() {
        this.reset();
        for (const p of source.parked()) this.set({ upstream: p.upstream }, p.count);
      },
    });
    new Gauge({
      name: 'mrtr_tasks_running',
      help: 'Tasks whose upstream call is still running',
      registers,
      collect() {
        this.set(source.runningTasks());
      },
    });
    const censusTimes = (which: 'firstSeen' | 'lastSeen') =>
      function (this: Gauge<'upstream' | 'tool' | 'feature'>) {
        this.reset();
        for (const e of source.census?.() ?? [])
          this.set({ upstream: e.upstream, tool: e.tool, feature: e.feature }, Date.parse(e[which]) / 1000);
      };
    new Gauge({
      name: 'mrtr_deprecated_feature_first_seen_timestamp_seconds',
      help: 'When an upstream tool first used a feature MCP 2026-07-28 deprecated or removed (Unix time)',
      labelNames: ['upstream', 'tool', 'feature'] as const,
      registers,
      collect: censusTimes('firstSeen'),
    });
    new Gauge({
      name: 'mrtr_deprecated_feature_last_seen_timestamp_seconds',
      help: 'When an upstream tool last used a feature MCP 2026-07-28 deprecated or removed (Unix time)',
      labelNames: ['upstream', 'tool', 'feature'] as const,
      registers,
      collect: censusTimes('lastSeen'),
    });
    collectDefaultMetrics({ register: this.registry, prefix: 'mrtr_process_' });
  }

  /** The exposition text and its content type. */
  async render(): Promise<{ body: string; contentType: string }> {
    return { body: await this.registry.metrics(), contentType: this.registry.contentType };
  }
}
