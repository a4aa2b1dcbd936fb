/**
 * One connection of a legacy session (src/upstream/session.ts): the v1 SDK `Client` and its
 * transport, the requests the session sends on it ({@link SentRequest}: its own JSON-RPC ids,
 * timers and `notifications/cancelled`), the `progressToken` of each request by id (so that
 * progress and late answers find their call), and the barrier that waits until what the server
 * asked at start or after a roots change was answered ({@link quiesce}).
 */
import { setTimeout as delay } from 'node:timers/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { jsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { McpError, type ClientCapabilities as LegacyClientCapabilities, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { UpstreamRequestLost } from '../protocol/errors.js';
import { StdioChild, childOf, untilIdle, type StderrTail } from './stdio-child.js';

const GATEWAY_CLIENT_INFO = { name: 'mrtr-gateway', version: '0.1.0' };

/**
 * One JSON Schema validator for every upstream `Client`, built on first use. The SDK otherwise
 * builds an Ajv instance per `Client` (tens of KiB per upstream session), although the gateway
 * never asks it to validate a tool's output.
 */
let sharedValidator: AjvJsonSchemaValidator | undefined;
const SCHEMA_VALIDATOR: jsonSchemaValidator = {
  getValidator: (schema) => (sharedValidator ??= new AjvJsonSchemaValidator()).getValidator(schema),
};

/** Longest wait for the start barrier's `ping`, in ms (a server that ignores ping costs no more). */
export const BARRIER_PING_MS = 2000;

/** A request timeout (ms) that never fires: the largest delay `setTimeout` takes. */
export const NO_TIMEOUT = 2_147_483_647;

/** Options of {@link UpstreamSession.request}. */
export interface SessionRequestOptions {
  /** Give up after this many ms (default: the SDK's 60 s; {@link NO_TIMEOUT}: never). */
  timeout?: number;
  /** Give up when it aborts. */
  signal?: AbortSignal;
  /** Run the request as a 2025-11-25 task upstream (`params.task`). */
  task?: { ttl: number };
}

/** The result schema of requests whose result is passed on as the upstream sent it: any JSON object. */
export const LooseResult = z.looseObject({});

/**
 * The next JSON-RPC id of `client`'s own sequence, so that the requests the session sends itself
 * and those the SDK sends (`initialize`, `ping`) never share an id.
 */
export function nextRequestId(client: Client): number {
  const c = client as unknown as { _requestMessageId: number };
  return c._requestMessageId++;
}
/**
 * Least quiet time after the gateway answered the last request a server made during a barrier
 * (the start barrier, a roots resync), before the session is used, in ms. A server may apply an
 * answer asynchronously (server-filesystem resolves and checks each root directory first), so the
 * wait is also {@link QUIET_PER_PING} times the slowest ping round trip of the barrier: on a loaded
 * host both ends are slow alike.
 */
const START_QUIET_MS = 100;
const QUIET_PER_PING = 4;
/** Most rounds of a barrier (ping, wait for the answers, quiet) while the server keeps asking. */
const BARRIER_ROUNDS = 3;

/** One connection (client and transport) carrying the session; replaced when the upstream forgot the session. */
export interface Connection {
  client: Client;
  transport: Transport;
  negotiated?: string;
  stderr?: StderrTail;
  /** False until the start barrier passed: server-initiated requests before then belong to no call. */
  ready: boolean;
  /** True once the client's transport closed (set before the SDK fails the requests in flight). */
  closed: boolean;
  /** Server-initiated requests received on this connection so far, and how many of them are still unanswered. */
  asked: number;
  asking: number;
  /** When the last server-initiated request was answered (`performance.now()`, ms). */
  lastAnsweredAt: number;
  /** Called when no server-initiated request is left unanswered (see {@link quiesce}). */
  onAllAnswered: Set<() => void>;
  /** Messages being written (an HTTP POST in flight). */
  sending: Set<Promise<void>>;
  /** Requests sent with a `progressToken`, by JSON-RPC id, until their response arrives; and the reverse. */
  tokenOf: Map<string | number, string>;
  idOf: Map<string, string | number>;
  /** The requests {@link UpstreamSession.request} sent on this connection, by JSON-RPC id, until they settle. */
  pending: Map<number, PendingRequest>;
}

/** A request sent by {@link UpstreamSession.request}, waiting for its response. */
export interface PendingRequest {
  method: string;
  /** Settles the request with the upstream's response (a result or a JSON-RPC error). */
  answer(response: { result?: unknown; error?: { code: number; message: string; data?: unknown } }): void;
  /** Fails the request: the connection closed before the response. */
  lost(): void;
  /** Fails the request with `error` while the connection goes on (its answer cannot arrive); `notifications/cancelled` goes upstream. */
  fail(error: Error): void;
  /** Gives the request up: `notifications/cancelled` goes upstream with `reason`. */
  cancel(reason: string): void;
}

/**
 * A new connection on `transport` (not started): a `Client` declaring `capabilities`, with every
 * message it sends tracked ({@link trackSends}; `pinned`: the `protocolVersion` the upstream's
 * config pins, asked for in `initialize`).
 */
export function newConnection(
  capabilities: LegacyClientCapabilities,
  transport: Transport,
  stderr: StderrTail | undefined,
  pinned: string | undefined,
): Connection {
  const client = new Client(GATEWAY_CLIENT_INFO, { capabilities, jsonSchemaValidator: SCHEMA_VALIDATOR });
  const conn: Connection = {
    client,
    transport,
    stderr,
    ready: false,
    closed: false,
    asked: 0,
    asking: 0,
    lastAnsweredAt: 0,
    onAllAnswered: new Set(),
    sending: new Set(),
    tokenOf: new Map(),
    idOf: new Map(),
    pending: new Map(),
  };
  trackSends(conn, pinned);
  return conn;
}

/**
 * Wraps the transport of `conn` so that each request sent with a `progressToken` is noted by id
 * (`tokenOf`, `idOf`), `initialize` asks for the `pinned` revision, every message being written is
 * in `sending`, and the negotiated revision is kept (`negotiated`).
 */
function trackSends(conn: Connection, pinned: string | undefined): void {
  const { transport } = conn;
  const send = transport.send.bind(transport);
  transport.send = (message: JSONRPCMessage, options) => {
    const m = message as { id?: string | number; method?: string; params?: Record<string, unknown> };
    const token = (m.params?._meta as { progressToken?: string | number } | undefined)?.progressToken;
    if (m.method !== undefined && m.id !== undefined && token !== undefined) {
      conn.tokenOf.set(m.id, String(token));
      conn.idOf.set(String(token), m.id);
    }
    // The v1 SDK always asks for its latest revision; a pinned upstream is asked for its own.
    const out =
      pinned && m.method === 'initialize' && m.params
        ? ({ ...message, params: { ...m.params, protocolVersion: pinned } } as JSONRPCMessage)
        : message;
    const sent = send(out, options);
    // Tracked so that closing waits for what was already on its way (a cancellation, an answer).
    conn.sending.add(sent);
    const forget = () => void conn.sending.delete(sent);
    sent.then(forget, forget);
    return sent;
  };
  // The SDK hands the negotiated version to HTTP transports only; capture it for every transport.
  const setVersion = transport.setProtocolVersion?.bind(transport);
  transport.setProtocolVersion = (v: string) => {
    conn.negotiated = v;
    setVersion?.(v);
  };
}

/**
 * Pings, and while the server has asked something since `asked` requests (the answer to a ping
 * comes after whatever the server sent before it: stdio is ordered): waits until every request
 * it asked has been answered (for as long as that takes), then until the server has been quiet
 * since the last answer went out for {@link START_QUIET_MS}, or {@link QUIET_PER_PING} times
 * the slowest ping round trip if longer, and a stdio child is idle ({@link untilIdle}): it may
 * apply an answer asynchronously. Then it pings once more; at most {@link BARRIER_ROUNDS}
 * rounds, and no new round after `until` (`performance.now()`, ms). A server that does not
 * answer ping (its own error, or no answer within `pingMs`, at most {@link BARRIER_PING_MS}) is
 * let through at once; the quiet and idle waits take at most as long as a ping may.
 * `closed`: resolves when the session closed (a wait for answers ends then).
 * @throws what the ping throws when the connection closed.
 */
export async function quiesce(conn: Connection, closed: Promise<void>, asked: number, pingMs: number, until = Infinity): Promise<void> {
  const timeout = Math.min(BARRIER_PING_MS, pingMs);
  let slowest = 0;
  const ping = async () => {
    const t = performance.now();
    const ok = await conn.client.ping({ timeout }).then(
      () => true,
      (e) => {
        // A server that does not answer ping (its own error, or the SDK's timeout) is let through.
        if (e instanceof McpError && !conn.closed) return false;
        throw e;
      },
    );
    slowest = Math.max(slowest, performance.now() - t);
    return ok;
  };
  for (let round = 0; ; round++) {
    if (!(await ping()) || (conn.asked === asked && conn.asking === 0) || round === BARRIER_ROUNDS || performance.now() >= until) return;
    asked = conn.asked;
    while (conn.asking > 0 && !conn.closed) {
      await new Promise<void>((resolve) => {
        const done = () => {
          conn.onAllAnswered.delete(done);
          resolve();
        };
        conn.onAllAnswered.add(done);
        void closed.then(done);
      });
    }
    const quietMs = Math.min(timeout, Math.max(START_QUIET_MS, QUIET_PER_PING * slowest));
    let left: number;
    while (!conn.closed && (left = quietMs - (performance.now() - conn.lastAnsweredAt)) > 0) {
      await delay(left);
    }
    const pid = conn.transport instanceof StdioClientTransport ? conn.transport.pid : null;
    if (pid) await untilIdle(pid, performance.now() + timeout);
  }
}

/**
 * Gives up a start that failed: the child (if any) gets SIGTERM, except one still in its first
 * start (it may be installing: it is left to finish, see {@link StdioChild.release}); the client
 * closes (waited for up to 250 ms); the child's last stderr lines are waited for up to 500 ms.
 */
export async function abandonStart(conn: Connection): Promise<void> {
  const { client, transport, stderr } = conn;
  // A child still in its first start may be installing: it is left to finish, not killed.
  if (!(transport instanceof StdioChild && transport.release())) childOf(transport)?.kill('SIGTERM');
  await Promise.race([client.close().catch(() => {}), delay(250)]);
  // Let the child's last words arrive before reporting.
  if (stderr) await Promise.race([stderr.ended, delay(500)]);
}

/** The session a {@link SentRequest} belongs to: it names the error of a request its closed connection lost. */
export interface RequestOwner {
  lostText(method: string): UpstreamRequestLost;
}

/**
 * A request {@link UpstreamSession.request} sent on a connection, until it settles: answered,
 * given up (its timer, its signal, {@link UpstreamSession.cancel}), or lost with its connection.
 * One object per request rather than a closure per outcome: every call upstream makes one.
 */
export class SentRequest<S extends z.ZodType> implements PendingRequest {
  private timer: NodeJS.Timeout | undefined;
  private signal: AbortSignal | undefined;
  private onAbort: (() => void) | undefined;

  constructor(
    private readonly session: RequestOwner,
    private readonly conn: Connection,
    private readonly id: number,
    readonly method: string,
    private readonly schema: S,
    private readonly resolve: (value: z.infer<S>) => void,
    private readonly reject: (error: unknown) => void,
  ) {}

  /** Registers the request on its connection, arms its timer (`timeoutMs`) and `signal`, and sends it. */
  start(params: Record<string, unknown> | undefined, timeoutMs: number, signal: AbortSignal | undefined): void {
    const { conn, id } = this;
    conn.pending.set(id, this);
    if (timeoutMs < NO_TIMEOUT)
      this.timer = setTimeout(
        () => this.giveUp('Request timed out', new UpstreamRequestLost('timeout', `${this.method} got no answer within ${timeoutMs} ms`)),
        timeoutMs,
      );
    if (signal) {
      this.signal = signal;
      this.onAbort = () => this.cancel(String(signal.reason));
      signal.addEventListener('abort', this.onAbort, { once: true });
    }
    conn.transport
      .send({ jsonrpc: '2.0', id, method: this.method, ...(params !== undefined ? { params } : {}) } as JSONRPCMessage)
      .catch((e: unknown) => {
        if (!this.settle()) return;
        this.reject(conn.closed && e instanceof Error && e.message === 'Not connected' ? this.session.lostText(this.method) : e);
      });
  }

  /** Takes the request off its connection; false when it had settled already. */
  private settle(): boolean {
    if (this.conn.pending.get(this.id) !== this) return false;
    this.conn.pending.delete(this.id);
    clearTimeout(this.timer);
    if (this.onAbort) this.signal!.removeEventListener('abort', this.onAbort);
    return true;
  }

  answer(response: { result?: unknown; error?: { code: number; message: string; data?: unknown } }): void {
    if (!this.settle()) return;
    // Every transport checked the error's shape (an integer code, a string message) before it got here.
    if (response.error) return this.reject(McpError.fromError(response.error.code, response.error.message, response.error.data));
    const result = response.result;
    if (this.schema === (LooseResult as z.ZodType) && result !== null && typeof result === 'object' && !Array.isArray(result))
      return this.resolve(result as z.infer<S>);
    const parsed = this.schema.safeParse(result);
    if (parsed.success) this.resolve(parsed.data);
    else this.reject(parsed.error);
  }

  lost(): void {
    if (this.settle()) this.reject(this.session.lostText(this.method));
  }

  cancel(reason: string): void {
    this.giveUp(reason, new UpstreamRequestLost('aborted', `${this.method} was cancelled: ${reason}`));
  }

  fail(error: Error): void {
    this.giveUp(`the gateway cannot receive the answer: ${error.message}`, error);
  }

  /** Settles the request with `error` and tells the upstream (`notifications/cancelled` with `reason`). */
  private giveUp(reason: string, error: Error): void {
    if (!this.settle()) return;
    this.conn.transport.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: this.id, reason } }).catch(() => {});
    this.reject(error);
  }
}
