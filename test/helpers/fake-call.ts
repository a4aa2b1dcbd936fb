/**
 * Fakes at the edges of an Exchange for unit tests: a legacy upstream session that records what the
 * Exchange sends and lets a test play the server (send a server-initiated request during the call,
 * answer or fail the call, report progress), a session lease and a pool. {@link fakeCall} builds an
 * Exchange over them with an upstream config parsed from a minimal Streamable HTTP entry (every
 * other setting at its default).
 */
import { vi } from 'vitest';
import { parseConfig } from '../../src/config/load.js';
import type { UpstreamConfig } from '../../src/config/schema.js';
import { silentLogger } from '../../src/observability/log.js';
import type { ClientCapabilities, ExchangeMethod } from '../../src/protocol/wire.js';
import { Exchange, type ExchangeInit } from '../../src/cells/bridge/exchange.js';

import type { SessionPool } from '../../src/upstream/pool.js';
import type { SessionLease } from '../../src/upstream/pool-lease.js';
import type { CallHandlers, ServerRequestExtra } from '../../src/upstream/session-calls.js';

/** A server-initiated request the fake server sent, with the upstream's view of its answer. */
export interface Asked {
  /** Settles with what the gateway answered the upstream (or the JSON-RPC error it refused it with). */
  answer: Promise<Record<string, unknown>>;
  /** The upstream withdraws the request (its own timeout or cancellation). */
  withdraw(): void;
}

/** The upstream side of one legacy session, played by the test. */
export class FakeSession {
  readonly info = { protocolVersion: '2025-06-18' };
  transportKind: UpstreamConfig['transport'] = 'streamable-http';
  deadReason: string | undefined;
  deadKind: string | undefined;
  received = 0;
  lastReceivedAt = 0;
  /** Calls attached by progress token. */
  readonly calls = new Map<string, CallHandlers>();
  /** Requests sent upstream, in order. */
  readonly sent: { method: string; params?: Record<string, unknown> }[] = [];
  /** `notifications/cancelled` the gateway sent: the progress token of the call and the reason. */
  readonly cancels: { token: string; reason: string }[] = [];
  private readonly inFlight: { resolve: (r: unknown) => void; reject: (e: unknown) => void }[] = [];

  attach(token: string, handlers: CallHandlers): void {
    this.calls.set(token, handlers);
  }
  detach(token: string, handlers: CallHandlers): void {
    if (this.calls.get(token) === handlers) this.calls.delete(token);
  }
  needsRoots(): boolean {
    return false;
  }
  request(req: { method: string; params?: Record<string, unknown> }): Promise<unknown> {
    this.sent.push(req);
    return new Promise((resolve, reject) => this.inFlight.push({ resolve, reject }));
  }
  cancel(token: string, reason: string): void {
    this.cancels.push({ token, reason });
  }
  whenAnswered(): Promise<boolean> {
    return Promise.resolve(false);
  }

  /** The only attached call (as the real session attributes a request no stream names). */
  private get call(): CallHandlers {
    if (this.calls.size !== 1) throw new Error(`expected one attached call, found ${this.calls.size}`);
    return this.calls.values().next().value!;
  }

  /** The server sends `method` during the call (`keyHint`: the gateway's input-key hint in `_meta`). */
  ask(method: string, params: Record<string, unknown> = {}, keyHint?: string): Asked {
    this.received++;
    this.lastReceivedAt = performance.now();
    const ctrl = new AbortController();
    const p = keyHint ? { ...params, _meta: { 'mrtr-gateway/inputKey': keyHint } } : params;
    const answer = this.call.onRequest({ method, params: p }, { signal: ctrl.signal } as ServerRequestExtra);
    // Observed by the test; never an unhandled rejection.
    answer.catch(() => {});
    return { answer, withdraw: () => ctrl.abort() };
  }

  /** The server reports progress on the call. */
  progress(p: { progress: number; total?: number; message?: string }): void {
    this.received++;
    this.lastReceivedAt = performance.now();
    this.call.onProgress?.({ progressToken: 'x', ...p });
  }

  /** The server answers the oldest request in flight with `result`. */
  resolve(result: Record<string, unknown>): void {
    this.received++;
    this.lastReceivedAt = performance.now();
    this.inFlight.shift()!.resolve(result);
  }

  /** The oldest request in flight fails with `err` (an upstream error answer, or the connection lost). */
  reject(err: unknown): void {
    this.received++;
    this.lastReceivedAt = performance.now();
    this.inFlight.shift()!.reject(err);
  }
}

/** The lease an Exchange holds: records how it was given back. */
export function fakeLease(session: FakeSession, shared = false) {
  return {
    session,
    shared,
    release: vi.fn<(reusable: boolean) => void>(),
    releaseWhen: vi.fn<(ended: Promise<boolean>) => void>(),
  };
}

/** The pool of the lease: no sharing; records successes. */
export function fakePool() {
  return { share: vi.fn(() => false), noteSuccess: vi.fn() };
}

/** The default upstream config, parsed once. */
let defaultConfig: UpstreamConfig | undefined;

/** An upstream config with defaults, `over` merged into the raw entry (for example `{ input: { allow: ['elicitation'] } }`). */
export function upstreamConfig(over: Record<string, unknown> = {}): UpstreamConfig {
  if (Object.keys(over).length === 0) return (defaultConfig ??= upstreamConfig({ input: {} }));
  return parseConfig({ upstreams: { u: { transport: 'streamable-http', url: 'http://127.0.0.1:1/mcp', ...over } } }, {}).upstreams.u!;
}

/** Client capabilities of a 2026-07-28 client that can answer every kind of input request. */
export const ALL_CAPS: ClientCapabilities = { elicitation: { form: {}, url: {} }, sampling: { tools: {} }, roots: {} };

export interface FakeCallOptions {
  method?: ExchangeMethod;
  params?: Record<string, unknown>;
  principal?: string;
  clientCapabilities?: ClientCapabilities;
  cfg?: UpstreamConfig;
  /** More ExchangeInit fields (prefilled, replay …). */
  init?: Partial<ExchangeInit>;
}

/** An Exchange for `tools/call` of tool `ask` on upstream `u`, over fakes; not started. */
export function fakeCall(opts: FakeCallOptions = {}) {
  const session = new FakeSession();
  const lease = fakeLease(session);
  const pool = fakePool();
  const cfg = opts.cfg ?? upstreamConfig();
  const ex = new Exchange({
    upstream: 'u',
    cfg,
    principal: opts.principal ?? 'alice',
    method: opts.method ?? 'tools/call',
    params: opts.params ?? { name: 'ask', arguments: { q: 1 } },
    clientCapabilities: opts.clientCapabilities ?? ALL_CAPS,
    pool: pool as unknown as SessionPool,
    lease: lease as unknown as SessionLease,
    log: silentLogger,
    ...opts.init,
  });
  return { ex, session, lease, pool, cfg };
}

/** Lets queued microtasks, immediates and `ms` of timers run. */
export function tick(ms = 0): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Waits until `ok()` holds, polling every 5 ms; throws after `ms` (a bound for a loaded host, not a timing). */
export async function eventually(ok: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`condition not met within ${ms} ms`);
    await tick(5);
  }
}
