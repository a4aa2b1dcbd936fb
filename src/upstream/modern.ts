/**
 * The hop to an upstream that speaks MCP 2026-07-28 (stateless: every request carries its own
 * `_meta` envelope; no sessions, no server-initiated requests). Built on the v2 SDK's client
 * transports (`@modelcontextprotocol/client`) used on their own, because the gateway relays the
 * requests of many clients with each one's envelope and needs the raw result back (`input_required`
 * with the upstream's `requestState`, `resultType: "task"`), which the SDK's `Client` rewrites.
 *
 * - Streamable HTTP: one transport object per request over the upstream's shared keep-alive pool
 *   (undici); the transport adds `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` from the body,
 *   the gateway adds `Mcp-Param-*`. Everything on that request's SSE stream belongs to it.
 *   Cancelling closes the stream (2026-07-28 transports/streamable-http §Cancellation). A JSON body
 *   or one SSE event over `MAX_MESSAGE_BYTES` (10 MiB) is not read further: the request fails with
 *   ModernHopError `protocol`.
 * - stdio: one child per upstream, requests multiplexed by the gateway's own ids; progress is
 *   routed by `progressToken`, the notifications of a `subscriptions/listen` by their
 *   `_meta["io.modelcontextprotocol/subscriptionId"]` (the listen request's id); cancelling sends
 *   `notifications/cancelled`. A child that exits is started again on the next request. The
 *   child of a `protocol: "auto"` era probe that found a legacy server is handed over to the
 *   legacy pool ({@link ModernUpstream.handOver}) rather than stopped.
 */
import { SdkHttpError, StreamableHTTPClientTransport, type JSONRPCMessage } from '@modelcontextprotocol/client';
import { secretRedactor } from '../security/redact.js';
import type { UpstreamConfig } from '../config/schema.js';
import { idKey, META_SUBSCRIPTION_ID, PROTOCOL_VERSION } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import { endSpan, startClientSpan, traceMeta, within } from '../observability/tracing.js';
import { errorText, validationProblem } from '../protocol/errors.js';
import { boundedResponse, type FetchLike, type HttpHop } from './http.js';
import { MAX_MESSAGE_BYTES, TOO_LARGE } from './http-exchange.js';
import { startFailureText, UpstreamStartError } from './start-errors.js';
import { FirstStart, KILL_AFTER_MS, StderrTail, childOf, createStdioChild, endStdioChild, type StdioChild } from './stdio-child.js';
import { guardStdout } from './stdout-guard.js';

/** A JSON-RPC error object as the upstream sent it. */
export interface ModernError {
  code: number;
  message: string;
  data?: unknown;
}

/** The upstream's answer: its result as it is, or its error (with the HTTP status when not 200). */
export type ModernResponse = { result: Record<string, unknown> } | { error: ModernError; httpStatus?: number };

/** A notification the upstream sent for one request (progress, `notifications/message`). */
export interface ModernNotification {
  method: string;
  params?: Record<string, unknown>;
}

/** Per-request options. */
export interface ModernCallOptions {
  /** Notifications for this request. */
  onNotification?: (n: ModernNotification) => void;
  /** Aborts (cancels) the request upstream. */
  signal?: AbortSignal;
  /** Extra HTTP headers for this request (`Mcp-Param-*`); ignored on stdio. */
  headers?: Record<string, string>;
  /** Headers of the hop itself for this request (a forwarded `Authorization`); ignored on stdio. */
  hopHeaders?: Record<string, string>;
  /** Longest silence (no notification, no answer) before the request fails, in ms. */
  idleMs?: number;
  /** The caller (the router's principal), for the list cache (src/upstream/list-cache.ts); absent: never answered from it. */
  principal?: string;
}

/** Why a modern request did not get an answer: `data.reason` of the -32603 the router answers. */
export class ModernHopError extends Error {
  override name = 'ModernHopError';
  constructor(
    readonly reason: 'unreachable' | 'crashed' | 'timeout' | 'cancelled' | 'protocol' | 'shutting-down',
    message: string,
    readonly stderr: string[] = [],
    /** The HTTP status the upstream refused the request with, when it did. */
    readonly status?: number,
  ) {
    super(message);
  }
}

/** A 2026-07-28 upstream connection. */
export interface ModernUpstream {
  /**
   * Sends one request (`params` with its `_meta` envelope) and resolves with the upstream's answer.
   * @throws ModernHopError when no answer arrives (unreachable, crashed, timeout, cancelled).
   */
  request(method: string, params: Record<string, unknown>, opts?: ModernCallOptions): Promise<ModernResponse>;
  /**
   * Ends the connection: requests in flight fail with ModernHopError `shutting-down` and are
   * cancelled upstream (their HTTP streams close; a stdio child gets `notifications/cancelled`),
   * and a stdio child ends (SIGTERM, then SIGKILL after {@link KILL_AFTER_MS} ms). Requests made
   * afterwards fail the same way, except after the close of a probe-only child (`reopen`), after
   * which the next request starts it again.
   */
  close(opts?: { reopen?: boolean }): Promise<void>;
  /** Called when the connection ends by itself (a stdio child exited); the next request starts it again. */
  onLost?: () => void;
  /**
   * Gives up the running stdio child without ending it, for a legacy session to use (the era
   * probe found a legacy upstream): undefined over HTTP, when no child runs, or while requests
   * are in flight. The next request starts a child again.
   */
  handOver?(): StdioChild | undefined;
  /**
   * After a start ran out of its budget: keeps a stdio child still in its first start (spawned as
   * `installing` and silent so far: it may be installing) as the start the next request waits on,
   * with a fresh budget from that request, so an install never runs twice at once. Returns false,
   * keeping nothing, for any other child (the caller then closes it) and over HTTP.
   */
  keepStarting?(): boolean;
}

/** The 2026-07-28 `_meta` envelope the gateway sends on its own requests (probes, readiness). */
export function gatewayEnvelope(clientCapabilities: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
    'io.modelcontextprotocol/clientCapabilities': clientCapabilities,
    'io.modelcontextprotocol/clientInfo': { name: 'mrtr-gateway', version: '0.1.0' },
  };
}

/** The abort reason of the requests the gateway's shutdown ends. */
const SHUTTING_DOWN = 'shutting-down';
const shuttingDownError = () => new ModernHopError('shutting-down', 'gateway shutting down');

let nextId = 1;
const newId = () => `gw-${nextId++}`;

type Incoming = {
  id?: string | number;
  method?: string;
  params?: Record<string, unknown>;
  result?: Record<string, unknown>;
  error?: ModernError;
};

/** Arms an idle timer that `touch` restarts; calls `onIdle` when it fires. */
function idleTimer(ms: number | undefined, onIdle: () => void): { touch: () => void; stop: () => void } {
  if (!ms) return { touch: () => {}, stop: () => {} };
  let t = setTimeout(onIdle, ms);
  return {
    touch: () => {
      clearTimeout(t);
      t = setTimeout(onIdle, ms);
    },
    stop: () => clearTimeout(t),
  };
}

/** Streamable HTTP: one SDK transport per request over the upstream's keep-alive pool. */
class ModernHttpUpstream implements ModernUpstream {
  /** The abort controllers of the requests in flight. */
  private readonly inFlight = new Set<AbortController>();
  private closed = false;

  constructor(
    private readonly url: URL,
    private readonly http: HttpHop,
    private readonly headers: Record<string, string>,
  ) {}

  async request(method: string, params: Record<string, unknown>, opts: ModernCallOptions = {}): Promise<ModernResponse> {
    if (this.closed) throw shuttingDownError();
    const id = newId();
    // A message over MAX_MESSAGE_BYTES (the bound of every upstream transport) fails the request.
    let tooLarge: (sse: boolean) => void = () => {};
    const fetch: FetchLike = async (url, init) =>
      boundedResponse(await this.http.fetch(url, init), MAX_MESSAGE_BYTES, (sse) => tooLarge(sse));
    const transport = new StreamableHTTPClientTransport(this.url, {
      fetch: fetch as never,
      requestInit: { headers: { ...this.headers, ...opts.hopHeaders } },
    });
    await transport.start();
    const abort = new AbortController();
    const onAbort = () => abort.abort(opts.signal?.reason);
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    this.inFlight.add(abort);
    try {
      return await new Promise<ModernResponse>((resolve, reject) => {
        const idle = idleTimer(opts.idleMs, () => {
          reject(new ModernHopError('timeout', `the upstream sent nothing for requestMs=${opts.idleMs} ms`));
          abort.abort('timeout');
        });
        const settle =
          <T>(fn: (v: T) => void) =>
          (v: T) => {
            idle.stop();
            fn(v);
          };
        const ok = settle(resolve);
        const fail = settle(reject);
        tooLarge = (sse) => {
          fail(
            new ModernHopError(
              'protocol',
              `the upstream returned an invalid ${sse ? `message on the SSE stream of ${method}:` : `answer to ${method}: the body is`} ${TOO_LARGE}`,
            ),
          );
          abort.abort('protocol');
        };
        transport.onmessage = (message: JSONRPCMessage) => {
          const m = message as Incoming;
          if (m.id === id && m.result) ok({ result: m.result });
          else if (m.id === id && m.error) ok({ error: m.error });
          else if (m.method && m.id === undefined) {
            idle.touch();
            opts.onNotification?.({ method: m.method, params: m.params });
          }
        };
        transport.onerror = () => {};
        abort.signal.addEventListener(
          'abort',
          () => {
            const why = abort.signal.reason;
            fail(
              why === SHUTTING_DOWN
                ? shuttingDownError()
                : new ModernHopError(why === 'timeout' ? 'timeout' : 'cancelled', 'the request was cancelled'),
            );
          },
          { once: true },
        );
        transport
          .send(
            { jsonrpc: '2.0', id, method, params } as JSONRPCMessage,
            {
              requestSignal: abort.signal,
              headers: opts.headers,
              onRequestStreamEnd: () => fail(new ModernHopError('protocol', 'the upstream closed the response stream without an answer')),
            } as never,
          )
          .catch((e: unknown) => {
            if (e instanceof SdkHttpError) {
              // A non-400 HTTP error (404 -32601, 5xx …) carries its JSON-RPC body as text.
              const d = (e as { data?: { status?: number; text?: string } }).data ?? {};
              try {
                const body = JSON.parse(d.text ?? '') as Incoming;
                if (body?.error) return ok({ error: body.error, httpStatus: d.status });
              } catch {
                /* not JSON-RPC */
              }
              return fail(new ModernHopError('unreachable', `HTTP ${d.status ?? '?'} from the upstream`, [], d.status));
            }
            const problem = validationProblem(e) ?? (e instanceof SyntaxError ? `not JSON (${e.message})` : undefined);
            fail(
              problem
                ? new ModernHopError('protocol', `the upstream returned an invalid JSON-RPC message: ${problem}`)
                : new ModernHopError('unreachable', errorText(e)),
            );
          });
      });
    } finally {
      this.inFlight.delete(abort);
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }

  async close(opts: { reopen?: boolean } = {}): Promise<void> {
    if (!opts.reopen) this.closed = true;
    for (const abort of [...this.inFlight]) abort.abort(SHUTTING_DOWN);
  }
}

interface Pending {
  resolve: (r: ModernResponse) => void;
  reject: (e: Error) => void;
  onNotification?: (n: ModernNotification) => void;
  progressToken?: string | number;
  /** The request's `_meta` envelope, for its `notifications/cancelled`. */
  meta: unknown;
  touch: () => void;
  /** A `subscriptions/listen`: its notifications name it, so it never gets another's. */
  listen?: boolean;
}

/** A message to a stdio child (the v1 SDK transport's type; the shapes are the same). */
const wire = (m: Record<string, unknown>) => m as unknown as Parameters<StdioChild['send']>[0];

/** stdio: one child, requests multiplexed by the gateway's ids. */
class ModernStdioUpstream implements ModernUpstream {
  private transport: StdioChild | undefined;
  private starting: Promise<StdioChild> | undefined;
  /** Set by {@link keepStarting}: the next request gives the kept child a fresh start budget. */
  private freshBudget = false;
  /** Requests sent to the running child that it has not answered (for a hand-over: their late answers are dropped). */
  private unanswered = new Set<string>();
  private readonly pending = new Map<string, Pending>();
  private readonly byToken = new Map<string | number, string>();
  private stderr: StderrTail;
  private closed = false;
  /** Whether the running child has sent any message yet. */
  private heard = false;
  /** Set by a close that is not `reopen`: no request goes upstream any more. */
  private shutDown = false;

  /** Hides the values of the child's `env` in what it writes (stderr, stray stdout). */
  private readonly redact: (text: string) => string;

  /**
   * True while the children of a `protocol: "auto"` upstream have only been asked the era probe:
   * until one answers a request with a result (a legacy server refuses `server/discover`). It
   * names the child's start in the log.
   */
  private eraProbe: boolean;

  /**
   * @param stopping true once the gateway begins to stop: a child that exits by itself then went with it (logged at info).
   * @param firstStart the upstream's first-start budget (shared with its legacy pool): a child's first answer ends it.
   */
  constructor(
    private readonly cfg: Extract<UpstreamConfig, { transport: 'stdio' }>,
    private readonly log: Logger,
    private readonly stopping: () => boolean = () => false,
    private readonly firstStart: FirstStart = new FirstStart(cfg),
  ) {
    this.eraProbe = cfg.protocol === 'auto';
    this.redact = secretRedactor(cfg.env);
    this.stderr = new StderrTail(this.redact);
  }

  private start(): Promise<StdioChild> {
    if (this.transport) return Promise.resolve(this.transport);
    this.starting ??= (async () => {
      this.closed = false;
      const stderr = (this.stderr = new StderrTail(this.redact));
      this.heard = false;
      this.unanswered = new Set();
      const t = createStdioChild(this.cfg, this.log, stderr, this.firstStart.active);
      t.budgetMs = this.firstStart.budgetMs();
      t.onmessage = (message) => this.receive(message as Incoming);
      t.onerror = (e) => this.log.debug({ err: e.message }, 'modern upstream transport error');
      t.onclose = () => this.lost(t);
      t.strays = guardStdout(t, (reason) => t.onFlood?.(reason), this.redact);
      t.onFlood = (reason) => {
        this.log.warn({ pid: t.pid ?? undefined, reason }, 'upstream stdout is not JSON-RPC: stopping the process');
        childOf(t)?.kill('SIGTERM');
        for (const [id, p] of this.pending) {
          this.forget(id);
          p.reject(new ModernHopError('protocol', reason, stderr.get()));
        }
      };
      try {
        await t.start();
      } catch (e) {
        throw new UpstreamStartError(startFailureText(e, this.cfg), stderr.get());
      } finally {
        this.starting = undefined;
      }
      this.transport = t;
      this.log.info(
        { pid: t.pid ?? undefined },
        this.eraProbe ? 'era probe process started (protocol: auto)' : 'modern upstream process started',
      );
      return t;
    })();
    return this.starting;
  }

  onLost?: () => void;

  keepStarting(): boolean {
    const t = this.transport;
    if (!t || !t.installing || t.heard || !t.child) return false;
    this.freshBudget = true;
    this.log.info({ pid: t.pid ?? undefined }, 'upstream process still in its first start (it may be installing): kept for the next call');
    return true;
  }

  handOver(): StdioChild | undefined {
    const t = this.transport;
    if (!t || !t.child || this.pending.size) return undefined;
    this.transport = undefined;
    t.adopt(this.unanswered);
    this.log.info({ pid: t.pid ?? undefined }, 'era probe process handed to the first legacy session');
    return t;
  }

  private lost(t: StdioChild): void {
    if (this.transport !== t) return;
    this.transport = undefined;
    this.onLost?.();
    const stderr = this.stderr.get();
    const stopping = this.stopping();
    if (stopping && !this.closed) this.log.info('modern upstream process exited while the gateway stops');
    else if (!this.closed) this.log.warn({ stderr: stderr.slice(-5) }, 'modern upstream process exited');
    // A child that exits before it ever answered did not start: unreachable, as in the legacy era.
    // While the gateway stops, the child went with it (a Ctrl-C reaches both): the calls end as the shutdown's.
    const failure = stopping
      ? shuttingDownError
      : this.heard
        ? () => new ModernHopError('crashed', 'the upstream process exited during the request', stderr)
        : () => new ModernHopError('unreachable', 'the process exited before it answered', stderr);
    for (const [id, p] of this.pending) {
      this.pending.delete(id);
      p.reject(failure());
    }
  }

  private receive(m: Incoming): void {
    this.heard = true;
    // The child answers: it started (whatever its first start installed is in place).
    this.firstStart.done();
    if (m.id !== undefined && m.method === undefined) {
      this.unanswered.delete(idKey(m.id));
      const p = this.pending.get(idKey(m.id));
      if (!p) return;
      this.forget(idKey(m.id));
      if (!m.error) this.eraProbe = false;
      p.resolve(m.error ? { error: m.error } : { result: m.result ?? {} });
      return;
    }
    if (m.method && m.id === undefined) {
      // Progress names its request by token, a subscriptions/listen notification by subscriptionId
      // (the listen request's id); anything else belongs to the one other request in flight, if one.
      const token = m.params?.progressToken as string | number | undefined;
      const subscription = (m.params?._meta as Record<string, unknown> | undefined)?.[META_SUBSCRIPTION_ID];
      const id = token !== undefined ? this.byToken.get(token) : subscription !== undefined ? String(subscription) : this.soleCall();
      const p = id !== undefined ? this.pending.get(id) : undefined;
      p?.touch();
      p?.onNotification?.({ method: m.method, params: m.params });
      return;
    }
    if (m.method && m.id !== undefined) {
      // 2026-07-28 servers send no requests; answer one anyway so it does not hang.
      void this.transport?.send(
        wire({
          jsonrpc: '2.0',
          id: m.id,
          error: { code: -32601, message: 'Method not found: server-initiated requests are not part of MCP 2026-07-28' },
        }),
      );
    }
  }

  /** The one request in flight that is not a `subscriptions/listen`, if there is exactly one. */
  private soleCall(): string | undefined {
    const calls = [...this.pending].filter(([, p]) => !p.listen);
    return calls.length === 1 ? calls[0]![0] : undefined;
  }

  private forget(id: string): void {
    const p = this.pending.get(id);
    if (p?.progressToken !== undefined) this.byToken.delete(p.progressToken);
    this.pending.delete(id);
  }

  async request(method: string, params: Record<string, unknown>, opts: ModernCallOptions = {}): Promise<ModernResponse> {
    if (this.shutDown) throw shuttingDownError();
    let t: StdioChild;
    try {
      t = await this.start();
    } catch (e) {
      const stderr = e instanceof UpstreamStartError ? e.stderr : [];
      throw new ModernHopError('unreachable', errorText(e), stderr);
    }
    if (this.shutDown) throw shuttingDownError();
    if (this.freshBudget) {
      // A kept first start: its budget (for a legacy session it goes on to as well) counts from now.
      this.freshBudget = false;
      t.spawnedAt = performance.now();
      t.budgetMs = this.firstStart.budgetMs();
    }
    const id = newId();
    const progressToken = (params._meta as { progressToken?: string | number } | undefined)?.progressToken;
    return new Promise<ModernResponse>((resolve, reject) => {
      const cancel = (reason: ModernHopError) => {
        if (!this.pending.has(id)) return;
        this.forget(id);
        void t
          .send(
            wire({
              jsonrpc: '2.0',
              method: 'notifications/cancelled',
              params: { requestId: id, reason: reason.message, _meta: params._meta },
            }),
          )
          .catch(() => {});
        reject(reason);
      };
      const idle = idleTimer(opts.idleMs, () =>
        cancel(new ModernHopError('timeout', `the upstream sent nothing for requestMs=${opts.idleMs} ms`)),
      );
      const onAbort = () => cancel(new ModernHopError('cancelled', 'the request was cancelled'));
      opts.signal?.addEventListener('abort', onAbort, { once: true });
      const done = () => {
        idle.stop();
        opts.signal?.removeEventListener('abort', onAbort);
      };
      this.pending.set(id, {
        resolve: (r) => (done(), resolve(r)),
        reject: (e) => (done(), reject(e)),
        onNotification: opts.onNotification,
        progressToken,
        meta: params._meta,
        touch: idle.touch,
        listen: method === 'subscriptions/listen',
      });
      if (progressToken !== undefined) this.byToken.set(progressToken, id);
      this.unanswered.add(id);
      t.send(wire({ jsonrpc: '2.0', id, method, params })).catch((e: Error) => {
        const p = this.pending.get(id);
        this.forget(id);
        p?.reject(new ModernHopError('crashed', e.message, this.stderr.get()));
      });
    });
  }

  async close(opts: { reopen?: boolean } = {}): Promise<void> {
    this.closed = true;
    if (!opts.reopen) this.shutDown = true;
    const t = this.transport ?? (await this.starting?.catch(() => undefined));
    this.transport = undefined;
    if (!t) return;
    for (const [id, p] of [...this.pending]) {
      this.forget(id);
      void t
        .send(
          wire({
            jsonrpc: '2.0',
            method: 'notifications/cancelled',
            params: { requestId: id, reason: 'gateway shutting down', _meta: p.meta },
          }),
        )
        .catch(() => {});
      p.reject(shuttingDownError());
    }
    await endStdioChild(t, () => t.close());
  }
}

/**
 * The 2026-07-28 connection for an upstream (HTTP transports use `http`, the upstream's pool).
 * HTTP+SSE upstreams are legacy by definition and get none. `stopping`: true once the gateway
 * begins to stop (a stdio child that exits then ends its calls as `shutting-down`); `firstStart`:
 * the upstream's first-start budget, shared with its legacy pool (src/upstream/stdio-child.ts).
 */
export function createModernUpstream(
  cfg: UpstreamConfig,
  log: Logger,
  http: HttpHop | undefined,
  stopping?: () => boolean,
  firstStart?: FirstStart,
): ModernUpstream | undefined {
  if (cfg.transport === 'stdio') return new ModernStdioUpstream(cfg, log, stopping, firstStart);
  if (cfg.transport === 'streamable-http' && http) return new ModernHttpUpstream(new URL(cfg.url), http, cfg.headers);
  return undefined;
}

/**
 * `up` with a CLIENT span for each request (a child of the active span, see
 * src/observability/tracing.ts) whose trace context goes upstream in `params._meta`
 * (`traceparent`, `tracestate`; SEP-414) and, over HTTP, in the request's headers. While tracing is
 * off, requests go through untouched.
 */
export function tracedModernUpstream(name: string, cfg: UpstreamConfig, up: ModernUpstream): ModernUpstream {
  return {
    async request(method, params, opts) {
      const t = startClientSpan({ method, params, upstream: name, endpoint: cfg, protocolVersion: PROTOCOL_VERSION });
      if (!t) return up.request(method, params, opts);
      try {
        const answer = await within(t, () =>
          up.request(method, { ...params, _meta: traceMeta((params._meta ?? {}) as Record<string, unknown>) }, opts),
        );
        endSpan(t, answer);
        return answer;
      } catch (e) {
        endSpan(t, { failed: e instanceof ModernHopError ? e.reason : 'unreachable', message: (e as Error).message });
        throw e;
      }
    },
    close: (opts) => up.close(opts),
    ...(up.handOver ? { handOver: () => up.handOver!() } : {}),
    ...(up.keepStarting ? { keepStarting: () => up.keepStarting!() } : {}),
  };
}
