/**
 * One legacy MCP session (2024-11-05 … 2025-11-25) to an upstream, through the v1 SDK `Client`
 * and its stdio, Streamable HTTP and HTTP+SSE client transports.
 *
 * A session is leased to one Exchange at a time; server-initiated requests that arrive while it is
 * leased go to the lease's handler. Outside a lease, and while the session is still starting,
 * `roots/list` is answered from config and other server-initiated requests are refused upstream.
 * A server that uses roots is told `notifications/roots/list_changed` before a call that must run
 * with its own client's roots ({@link UpstreamSession.resyncRoots}).
 *
 * A Streamable HTTP upstream that was restarted or reaped the session answers 404 on its session
 * id; the request was not processed, so the session initializes a new upstream session and sends
 * the request once more, transparently to the caller (MCP 2025-11-25 basic/transports
 * §Session Management: "the client MUST start a new session").
 */
import { randomUUID } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import { setTimeout as delay } from 'node:timers/promises';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { jsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/types.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { DEFAULT_REQUEST_TIMEOUT_MSEC, type RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { ResponseMessage } from '@modelcontextprotocol/sdk/shared/responseMessage.js';
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  ErrorCode,
  GetTaskResultSchema,
  ListToolsResultSchema,
  LoggingMessageNotificationSchema,
  McpError,
  ProgressNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
  type CallToolResult,
  type ClientCapabilities as LegacyClientCapabilities,
  type ClientNotification,
  type ClientRequest,
  type Implementation,
  type JSONRPCMessage,
  type ServerCapabilities,
  type ServerNotification,
  type ServerRequest,
} from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import { cwdProblem, safeChildEnv } from '../config/child-env.js';
import { secretRedactor } from '../security/redact.js';
import { canonicalJson } from '../protocol/canonical.js';
import type { UpstreamConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import type { HttpHop } from './http.js';
import { UpstreamProtocolError, UpstreamRequestLost, errorText, withoutMcpPrefix } from '../protocol/errors.js';
import { HttpClientTransport, RELATED_TOKEN_HEADER } from './http-transport.js';
import { StdioChild } from './stdio-child.js';
import { guardStdout, straysText, type StdoutStrays } from './stdout-guard.js';

/** A server-initiated request as it arrives from the upstream. */
export interface ServerInitiatedRequest {
  method: string;
  params?: Record<string, unknown>;
}

/** Extra information the v1 SDK passes to a request handler (abort signal, ids). */
export type ServerRequestExtra = RequestHandlerExtra<ClientRequest | ServerRequest, ClientNotification | ServerNotification>;

/** Handles a server-initiated request for the Exchange that holds the lease; resolves to the legacy result. */
export type ServerRequestHandler = (request: ServerInitiatedRequest, extra: ServerRequestExtra) => Promise<Record<string, unknown>>;

/** Progress params of an upstream `notifications/progress`. */
export interface UpstreamProgress {
  progressToken: string | number;
  progress: number;
  total?: number;
  message?: string;
}

/** What a call attached to a session receives: its server-initiated requests and its progress. */
export interface CallHandlers {
  onRequest: ServerRequestHandler;
  onProgress?: (params: UpstreamProgress) => void;
  /** A `notifications/message` the upstream sent while this call was the session's only call. */
  onLog?: (params: Record<string, unknown>) => void;
}

/**
 * Where the upstream was seen to send a server-initiated request during a call: on the POST stream
 * of that call ('post', so calls can share a session and still be told apart), or on the standalone
 * GET stream ('get', so they cannot).
 */
export type Attribution = 'post' | 'get';

/** A change notification from the upstream: a tools, prompts or resources `list_changed`, or `notifications/resources/updated`. */
export interface UpstreamNotification {
  method: string;
  params?: Record<string, unknown>;
}

/** The upstream notifications {@link UpstreamSession.onNotification} listeners receive. */
const CHANGE_NOTIFICATIONS = [
  ToolListChangedNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
];

/** What the upstream said in its `initialize` result. */
export interface UpstreamInfo {
  protocolVersion: string;
  capabilities: ServerCapabilities;
  serverInfo: Implementation;
  instructions?: string;
}

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

/** Lines of a stdio child's stderr kept for error reports, and the longest line kept, in characters. */
const STDERR_LINES = 20;
const STDERR_LINE_CHARS = 500;

/** Longest wait for the start barrier's `ping`, in ms (a server that ignores ping costs no more). */
const BARRIER_PING_MS = 2000;
/** Poll interval of an upstream task whose `tasks/get` names none, in ms (the v1 SDK's default). */
const DEFAULT_TASK_POLL_MS = 1000;
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
function nextRequestId(client: Client): number {
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

/** Interval between two looks at a stdio child's threads while waiting for it to be idle, in ms. */
const IDLE_SAMPLE_MS = 5;

/**
 * The scheduler's view of process `pid` (Linux `/proc/PID/task/*`): whether every thread sleeps
 * (state `S`: waiting for input, a timer or work; not running, runnable or in disk I/O) and the
 * total time its threads have run, in ns. Undefined where `/proc` cannot tell (not Linux, the
 * process is gone).
 */
async function threadsOf(pid: number): Promise<{ asleep: boolean; ranNs: number } | undefined> {
  try {
    const dir = `/proc/${pid}/task`;
    let asleep = true;
    let ranNs = 0;
    for (const tid of await readdir(dir)) {
      const [stat, sched] = await Promise.all([readFile(`${dir}/${tid}/stat`, 'utf8'), readFile(`${dir}/${tid}/schedstat`, 'utf8')]);
      // "tid (comm) S …": the name may hold spaces and parentheses, the state follows the last ')'.
      if (stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'S') asleep = false;
      ranNs += Number(sched.split(' ')[0]);
    }
    return Number.isFinite(ranNs) ? { asleep, ranNs } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Waits until stdio child `pid` is idle: every thread asleep at two looks {@link IDLE_SAMPLE_MS}
 * apart with no run time between them (a server applying an answer asynchronously, as
 * server-filesystem resolves each root directory, is busy or waits on disk until it is done; one
 * that waits for the CPU on a loaded host is runnable). Gives up at `until`
 * (`performance.now()`, ms), and at once where `/proc` cannot tell.
 */
async function untilIdle(pid: number, until: number): Promise<void> {
  let before = await threadsOf(pid);
  while (before && performance.now() < until) {
    await delay(IDLE_SAMPLE_MS);
    const now = await threadsOf(pid);
    if (!now || (before.asleep && now.asleep && now.ranNs === before.ranNs)) return;
    before = now;
  }
}

/**
 * A start budget in words: `startMs` (ms) from when the start began, what the era probe left of
 * `connectMs` (an HTTP upstream of `protocol: "auto"`), or, for a child the era probe spawned and
 * handed over, the budget it was spawned with (`spawnBudgetMs`), counted from the spawn.
 */
function budgetText(startMs: number, cfg: UpstreamConfig, spawnBudgetMs?: number): string {
  if (spawnBudgetMs !== undefined) return `${Math.round(spawnBudgetMs)} ms since the process was spawned (the era probe asked it first)`;
  const ms = Math.round(startMs);
  const probed = cfg.transport !== 'stdio' && cfg.protocol === 'auto' && ms < cfg.timeouts.connectMs;
  return probed ? `the ${ms} ms the era probe left of it` : `${ms} ms`;
}

/**
 * The last lines a stdio child wrote to stderr, with the values of its configured `env` hidden
 * (`redact`, from {@link secretRedactor}): these lines reach callers (`data.stderr`, the message of
 * a failed start) and the logs.
 */
export class StderrTail {
  private readonly lines: string[] = [];
  private partial = '';
  /** Resolves when the child's stderr ended. */
  ended: Promise<void> = Promise.resolve();

  constructor(private readonly redact: (text: string) => string) {}

  /** Adds a chunk of output; complete lines are kept, the oldest dropped beyond the bound. */
  push(chunk: string, onLine?: (line: string) => void): void {
    this.partial += chunk;
    let nl: number;
    while ((nl = this.partial.indexOf('\n')) >= 0) {
      this.keep(this.partial.slice(0, nl), onLine);
      this.partial = this.partial.slice(nl + 1);
    }
    // Hidden before the cut, so that a value the cut splits cannot show its last part.
    if (this.partial.length > 64_000) this.partial = this.redact(this.partial).slice(-STDERR_LINE_CHARS);
  }

  private keep(raw: string, onLine?: (line: string) => void): void {
    // Hidden before the cut, so that a value the cut splits cannot show its first part.
    const line = this.redact(raw.trimEnd()).slice(0, STDERR_LINE_CHARS);
    if (!line) return;
    onLine?.(line);
    this.lines.push(line);
    if (this.lines.length > STDERR_LINES) this.lines.shift();
  }

  /** The kept lines, oldest first, with an unterminated last line included. */
  get(): string[] {
    const last = this.redact(this.partial.trimEnd()).slice(0, STDERR_LINE_CHARS);
    return last ? [...this.lines, last] : [...this.lines];
  }
}

/**
 * The upstream could not be started or reached. `stderr` holds the last lines a stdio child wrote
 * before it failed (empty for HTTP upstreams); `fault` is set when it was reached but answered
 * `initialize` with something that breaks the protocol.
 */
export class UpstreamStartError extends Error {
  override name = 'UpstreamStartError';
  /**
   * @param reason `timeout` when the start did not finish within its budget (`timeouts.connectMs`),
   *   else `unreachable` (the `data.reason` of the -32603 the caller gets).
   */
  constructor(
    message: string,
    readonly stderr: string[],
    readonly reason: 'unreachable' | 'timeout' = 'unreachable',
    readonly fault?: UpstreamProtocolError,
  ) {
    const said = stderrSummary(stderr);
    super(said ? `${message}; the process said: ${said}` : message);
  }
}

/**
 * The message of a failure to start or reach the upstream, without the SDK's `MCP error <code>: `
 * prefixes. For a stdio child that could not be spawned because its `cwd` is gone, it says so:
 * Node reports that as `spawn COMMAND ENOENT`, as if the command were missing.
 */
export function startFailureText(e: unknown, cfg: UpstreamConfig): string {
  const text = withoutMcpPrefix(errorText(e));
  if (cfg.transport !== 'stdio' && e instanceof StreamableHTTPError && (e.code === 401 || e.code === 403)) {
    const whose = cfg.forwardAuthorization
      ? "the caller's token (forwardAuthorization) or the configured headers"
      : 'the configured headers';
    return `the upstream refused the credentials (HTTP ${e.code}): check ${whose} (${text})`;
  }
  if (cfg.transport !== 'stdio' || !cfg.cwd || (e as NodeJS.ErrnoException | undefined)?.code !== 'ENOENT') return text;
  const problem = cwdProblem(cfg.cwd);
  return problem ? `${problem} (${text})` : text;
}

/** The stderr line that most likely says what went wrong: the first that reads like an error, else the last. */
export function stderrSummary(lines: string[]): string | undefined {
  const telling = lines.find(
    (l) =>
      !/^\s+at /.test(l) && /\b(error|cannot|can't|fatal|exception|not found|denied|refused|invalid|missing|unknown|failed)\b/i.test(l),
  );
  return telling ?? lines[lines.length - 1];
}

/**
 * The message of a -32603 `unreachable`: `Upstream 'NAME' could not be started or reached: WHY`,
 * followed by the stderr line that most likely says why (see {@link stderrSummary}).
 */
export function unreachableText(upstream: string, why: string, stderr: string[]): string {
  const said = stderrSummary(stderr);
  return `Upstream '${upstream}' could not be started or reached: ${why}${said ? `; the process said: ${said}` : ''}`;
}

/** Configured headers with `extra` replacing any of the same name (header names are case-insensitive). */
function mergeHeaders(configured: Record<string, string>, extra: Record<string, string>): Record<string, string> {
  const h = new Headers(configured);
  for (const [k, v] of Object.entries(extra)) h.set(k, v);
  return Object.fromEntries(h);
}

/**
 * The stdio child of upstream `cfg` (not started): a minimal environment plus the configured
 * `env`, its stderr kept in `stderrTail` and logged at debug. `installing`: spawned for a first
 * start (see src/upstream/stdio-child.ts).
 */
export function createStdioChild(
  cfg: Extract<UpstreamConfig, { transport: 'stdio' }>,
  log: Logger,
  stderrTail: StderrTail | undefined,
  installing = false,
): StdioChild {
  const t = new StdioChild(
    { command: cfg.command, args: cfg.args, env: { ...defaultChildEnv(), ...cfg.env }, cwd: cfg.cwd, stderr: 'pipe' },
    installing,
    log,
  );
  const stderr = t.stderr;
  if (stderr && stderrTail) {
    stderrTail.ended = new Promise((resolve) => {
      stderr.once('end', resolve);
      stderr.once('close', resolve);
    });
    stderr.on('data', (chunk: Buffer) => stderrTail.push(chunk.toString('utf8'), (line) => log.debug({ stderr: line }, 'upstream stderr')));
  }
  t.stderrTail = stderrTail;
  return t;
}

/**
 * A v1 SDK client transport for a legacy upstream: stdio ({@link createStdioChild}), Streamable
 * HTTP or HTTP+SSE (over the upstream's HTTP hop, with the configured headers and `extraHeaders`).
 */
export function createLegacyTransport(
  cfg: UpstreamConfig,
  log: Logger,
  extraHeaders: Record<string, string>,
  http: HttpHop | undefined,
  stderrTail: StderrTail | undefined,
  installing = false,
): Transport {
  switch (cfg.transport) {
    case 'stdio':
      return createStdioChild(cfg, log, stderrTail, installing);
    case 'streamable-http':
      if (http) {
        const url = new URL(cfg.url);
        return new HttpClientTransport(url, {
          dispatcher: http.sessionPool(url.origin),
          ownsDispatcher: true,
          headers: mergeHeaders(cfg.headers, extraHeaders),
        });
      }
      return new StreamableHTTPClientTransport(new URL(cfg.url), {
        requestInit: { headers: mergeHeaders(cfg.headers, extraHeaders) },
        reconnectionOptions: { maxRetries: 2, initialReconnectionDelay: 100, maxReconnectionDelay: 500, reconnectionDelayGrowFactor: 2 },
      });
    case 'sse':
      // requestInit headers go on the POSTs and on the GET /sse stream alike.
      return new SSEClientTransport(new URL(cfg.url), {
        requestInit: { headers: mergeHeaders(cfg.headers, extraHeaders) },
        ...(http ? { fetch: http.fetch } : {}),
      });
  }
}

/**
 * The safe set of the gateway's environment every stdio child gets (`SAFE_CHILD_ENV` in
 * `src/config/child-env.ts`). A child's configured `env` goes on top of it; config loading has
 * already added the variables its `envPassthrough` names to that `env`.
 */
export function defaultChildEnv(): Record<string, string> {
  return safeChildEnv(process.env);
}

/** True when `err` is the Streamable HTTP 404 an upstream answers for a session id it does not know. */
export function isSessionNotFound(err: unknown): boolean {
  return err instanceof StreamableHTTPError && err.code === 404;
}

/** One connection (client and transport) carrying the session; replaced when the upstream forgot the session. */
interface Connection {
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
  /** Called when no server-initiated request is left unanswered (see {@link UpstreamSession.quiesce}). */
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
interface PendingRequest {
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

/** What a session needs to connect. */
export interface SessionOptions {
  upstream: string;
  cfg: UpstreamConfig;
  /** The `initialize` capabilities (already fitted to the upstream's revision). */
  capabilities: LegacyClientCapabilities;
  /** The pool key the session belongs to. */
  key: string;
  log: Logger;
  /** Headers added to every upstream HTTP request (a forwarded Authorization). */
  extraHeaders?: Record<string, string>;
  /** The upstream's HTTP hop (HTTP transports). */
  http?: HttpHop;
  /** Told which stream carried a server-initiated request that arrived during a call (HTTP transports). */
  onAttribution?: (seen: Attribution) => void;
  /** Sees each server-initiated request and `notifications/message` that arrives outside any call (read-only). */
  onUnclaimed?: (message: ServerInitiatedRequest) => void;
  /** The whole start's budget (spawn or connect, `initialize`, start barrier), in ms; default `timeouts.connectMs`. */
  startMs?: number;
  /**
   * A stdio child that runs already (the era probe's, handed over): the session sends `initialize`
   * on it instead of spawning one; `startMs` is then what is left of its budget since its spawn.
   */
  adopt?: StdioChild;
  /** A stdio child spawned now is spawned for a first start (see src/upstream/stdio-child.ts). */
  installing?: boolean;
  /** Aborts the start (the pool closes): the open fails with the signal's reason. */
  signal?: AbortSignal;
  /**
   * True once the gateway stops: a connection that ends by itself then (a stdio child that got
   * the terminal's Ctrl-C with the gateway) is logged at info, not as a dying session.
   */
  stopping?: () => boolean;
}

/** The child process of a stdio transport (v1 or v2 SDK), while it runs. */
export function childOf(transport: object): import('node:child_process').ChildProcess | undefined {
  return (transport as { _process?: import('node:child_process').ChildProcess })._process;
}

/** How long a stdio child may run on after the gateway sent it SIGTERM at close before it gets SIGKILL, in ms. */
export const KILL_AFTER_MS = 2000;

/** The stdio children {@link endStdioChild} is ending that have not exited yet. */
const ending = new Set<import('node:child_process').ChildProcess>();
/** When every child being ended gets SIGKILL at the latest (`performance.now()`, ms); see {@link endChildrenBy}. */
let killBy = Infinity;

/**
 * Bounds the end of stdio children from now on (the gateway stops within `shutdownGraceMs`): a
 * child {@link endStdioChild} ends gets SIGKILL at `at` (`performance.now()`, ms) if that comes
 * before its `killAfterMs`; children being ended already get it at `at` too.
 */
export function endChildrenBy(at: number): void {
  killBy = at;
  const timer = setTimeout(
    () => {
      for (const child of ending) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
    Math.max(0, at - performance.now()),
  );
  timer.unref();
}

/**
 * Closes a stdio transport (v1 or v2 SDK) and makes sure its child ends (except a child left to
 * finish its first start, see {@link StdioChild.release}): `close` runs the SDK's
 * close (stdin ends, then SIGTERM), the child gets SIGTERM at once as well, and SIGKILL when it
 * still runs `killAfterMs` (ms) later, or at the time {@link endChildrenBy} set if sooner. Resolves
 * when the child has exited (or at once without one) and `close` has settled. Never throws.
 */
export async function endStdioChild(transport: object, close: () => Promise<unknown>, killAfterMs = KILL_AFTER_MS): Promise<void> {
  // A child still in its first start may be installing: it is left to finish (stdio-child.ts).
  if (transport instanceof StdioChild && transport.release()) {
    await close().catch(() => {});
    return;
  }
  const child = childOf(transport);
  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  if (!running()) {
    await close().catch(() => {});
    return;
  }
  ending.add(child!);
  const exited = new Promise<void>((r) =>
    child!.once('exit', () => {
      ending.delete(child!);
      r();
    }),
  );
  child!.kill('SIGTERM');
  const timer = setTimeout(
    () => {
      if (running()) child!.kill('SIGKILL');
    },
    Math.max(0, Math.min(killAfterMs, killBy - performance.now())),
  );
  await Promise.all([exited, close().catch(() => {})]);
  clearTimeout(timer);
}

/** What a start was doing, for the message of a start that took too long. */
function firstStage(cfg: UpstreamConfig): string {
  if (cfg.transport === 'stdio') return `spawning '${cfg.command}'`;
  if (cfg.transport === 'sse') return 'waiting for the endpoint event on the HTTP+SSE stream';
  return 'connecting';
}

/**
 * A connected legacy session. Create with {@link UpstreamSession.open}.
 */
export class UpstreamSession {
  readonly id = randomUUID();
  /** Set when the connection closed or failed; the session is then never reused. */
  deadReason: string | undefined;
  /**
   * `protocol` when the gateway ended the session because the upstream broke the protocol (stdout
   * that is not JSON-RPC, a message past the stdio bound); `stopping` when the connection ended by
   * itself while the gateway stops (see `SessionOptions.stopping`).
   */
  deadKind: 'protocol' | 'stopping' | undefined;
  /** Resolves when the connection closes for any reason. */
  readonly closed: Promise<void>;
  /** The calls running on this session, by the `progressToken` each sent upstream. */
  private readonly calls = new Map<string, CallHandlers>();
  /**
   * True while several calls may run on this session at once: a server-initiated request is then
   * delivered only to the call whose POST stream carried it, or to the one call left on it.
   */
  shared = false;
  /**
   * True once the server sent a request that named no call (the GET stream of a Streamable HTTP
   * upstream): such a request is told from no other call's, so the session never carries several
   * calls again (see {@link shareable}).
   */
  private unattributed = false;
  /** True once the server asked `roots/list` on this session: it uses roots. */
  usesRoots = false;
  /**
   * True when the roots the server last received came from a call's client (they differ from the
   * upstream's configured `roots`): the next call must give the server its own first.
   */
  rootsFromCall = false;
  private closing = false;
  private onDead: ((reason: string) => void)[] = [];
  private resolveClosed!: () => void;
  private conn!: Connection;
  private replacing: Promise<Connection> | undefined;
  private readonly log: Logger;
  /** Messages received from the upstream so far, over every connection of this session. */
  received = 0;
  /** When the last message from the upstream arrived (`performance.now()`, ms). */
  lastReceivedAt = 0;

  private constructor(private readonly opts: SessionOptions) {
    this.closed = new Promise((r) => (this.resolveClosed = r));
    this.log = opts.log;
  }

  get upstream(): string {
    return this.opts.upstream;
  }
  get transportKind(): UpstreamConfig['transport'] {
    return this.opts.cfg.transport;
  }
  get key(): string {
    return this.opts.key;
  }
  /** The capabilities this session declared in `initialize`. */
  get capabilities(): LegacyClientCapabilities {
    return this.opts.capabilities;
  }
  /** The headers added to its upstream HTTP requests (a forwarded Authorization). */
  get extraHeaders(): Record<string, string> {
    return this.opts.extraHeaders ?? {};
  }
  /** The upstream's `initialize` result. */
  get info(): UpstreamInfo {
    const client = this.conn.client;
    return {
      protocolVersion: this.conn.negotiated ?? 'unknown',
      capabilities: client.getServerCapabilities() ?? {},
      serverInfo: client.getServerVersion() ?? { name: this.upstream, version: 'unknown' },
      instructions: client.getInstructions(),
    };
  }

  /**
   * Spawns or connects, sends `initialize` declaring `opts.capabilities` (with `protocolVersion`
   * pinned when the upstream's config says so), sends `notifications/initialized`, then waits for a
   * `ping` answer so that what the server asks right after `initialized` (for example `roots/list`)
   * is answered from config before any call can be charged with it.
   * The whole start is bounded by `opts.startMs` (default `timeouts.connectMs`): past it the
   * transport is closed (a stdio child is sent SIGTERM) and the open fails with reason `timeout`.
   * A stdio child that floods stdout with lines that are not JSON-RPC fails it as well
   * (src/upstream/stdout-guard.ts).
   * @throws UpstreamStartError when the connection or initialize fails or exceeds its budget.
   */
  static async open(opts: SessionOptions): Promise<UpstreamSession> {
    const session = new UpstreamSession(opts);
    session.conn = await session.connect(opts.startMs ?? opts.cfg.timeouts.connectMs);
    const pid = session.conn.transport instanceof StdioClientTransport ? (session.conn.transport.pid ?? undefined) : undefined;
    session.log.info({ session: session.id, pid, protocolVersion: session.info.protocolVersion }, 'upstream session opened');
    return session;
  }

  private async connect(startMs: number = this.opts.cfg.timeouts.connectMs): Promise<Connection> {
    const { cfg, capabilities, extraHeaders = {}, http } = this.opts;
    const client = new Client(GATEWAY_CLIENT_INFO, { capabilities, jsonSchemaValidator: SCHEMA_VALIDATOR });
    const redact = secretRedactor(cfg.transport === 'stdio' ? cfg.env : undefined);
    // A handed-over child is used by the first connection only (a later one, after a 404, is HTTP only).
    const adopted = cfg.transport === 'stdio' ? this.opts.adopt : undefined;
    this.opts.adopt = undefined;
    const stderr = adopted ? adopted.stderrTail : cfg.transport === 'stdio' ? new StderrTail(redact) : undefined;
    const transport: Transport = adopted ?? createLegacyTransport(cfg, this.log, extraHeaders, http, stderr, this.opts.installing);
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
    const send = transport.send.bind(transport);
    const pinned = cfg.protocolVersion;
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
    client.fallbackRequestHandler = (request, extra) => this.dispatch(conn, request as ServerInitiatedRequest, extra as ServerRequestExtra);
    // Progress is routed here rather than through the SDK's per-request onprogress, which drops a
    // notification that arrives in the same read as the response it belongs to.
    client.setNotificationHandler(ProgressNotificationSchema, (n) =>
      this.calls.get(String(n.params.progressToken))?.onProgress?.(n.params),
    );
    // A log message names no request: it is a call's only when that call is alone on the session.
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => {
      const only = !this.shared && this.calls.size === 1 ? this.calls.values().next().value : undefined;
      if (only?.onLog) only.onLog(n.params);
      else this.opts.onUnclaimed?.({ method: n.method, params: n.params });
    });
    for (const schema of CHANGE_NOTIFICATIONS) {
      client.setNotificationHandler(schema, (n) => {
        for (const l of [...this.changeListeners]) l(n as UpstreamNotification);
      });
    }
    client.onclose = () => {
      conn.closed = true;
      if (this.conn === conn) this.markDead(this.closing ? 'closed by the gateway' : 'connection closed');
      for (const p of [...conn.pending.values()]) p.lost();
    };
    // A request whose own SSE stream broke fails alone; the session goes on with its other calls.
    if (transport instanceof HttpClientTransport) {
      transport.onrequesterror = (id, error) => {
        const pending = conn.pending.get(Number(id));
        // Once started, a request not pending here has settled already (answered, cancelled, timed
        // out): nothing waits for its stream. Before, it is the SDK's initialize or ping: the start fails.
        if (!pending) return conn.ready;
        this.log.debug({ err: error.message, session: this.id, method: pending.method }, 'upstream request failed on its own stream');
        pending.fail(error);
        return true;
      };
    }
    client.onerror = (err) => {
      if (this.conn !== conn && conn.ready) return;
      this.log.debug({ err: err.message, session: this.id }, 'upstream transport error');
      // An HTTP stream that broke (or could not be resumed) means the upstream or its session is gone.
      if (
        cfg.transport !== 'stdio' &&
        /SSE stream disconnected|Maximum reconnection attempts|Failed to reconnect|SSE error/i.test(err.message)
      ) {
        this.fail(err.message);
      }
    };
    // The start ends early when it runs out of time or the child floods stdout.
    let stopStart!: (e: Error) => void;
    const stopped = new Promise<never>((_, reject) => (stopStart = reject));
    stopped.catch(() => {});
    let strays: StdoutStrays | undefined;
    if (transport instanceof StdioChild) {
      // A handed-over child is guarded already (by its first owner): only the reaction changes.
      if (!adopted) transport.strays = guardStdout(transport, (reason) => transport.onFlood?.(reason), redact);
      strays = transport.strays;
      transport.onFlood = (reason) => {
        this.log.warn(
          { session: this.id, pid: transport.pid ?? undefined, reason },
          'upstream stdout is not JSON-RPC: stopping the process',
        );
        childOf(transport)?.kill('SIGTERM');
        if (!conn.ready) stopStart(new UpstreamProtocolError('stdout stream', reason));
        else if (this.conn === conn) this.fail(reason, 'protocol');
      };
    }
    let stage = adopted ? 'waiting for the initialize result' : firstStage(cfg);
    const start = transport.start.bind(transport);
    transport.start = async () => {
      await start();
      stage = 'waiting for the initialize result';
    };
    const timer = setTimeout(() => stopStart(new UpstreamStartError('', [], 'timeout')), startMs);
    const abort = () => stopStart(new Error(String(this.opts.signal?.reason ?? 'aborted')));
    if (this.opts.signal?.aborted) abort();
    this.opts.signal?.addEventListener('abort', abort, { once: true });
    try {
      await Promise.race([this.handshake(conn, startMs), stopped]);
    } catch (e) {
      // A child still in its first start may be installing: it is left to finish, not killed.
      if (!(transport instanceof StdioChild && transport.release())) childOf(transport)?.kill('SIGTERM');
      await Promise.race([client.close().catch(() => {}), delay(250)]);
      // Let the child's last words arrive before reporting.
      if (stderr) await Promise.race([stderr.ended, delay(500)]);
      // Only the start's own timer counts: a -32001 answer to initialize is the upstream's error.
      const timedOut = e instanceof UpstreamStartError && e.reason === 'timeout';
      throw new UpstreamStartError(
        timedOut
          ? [`${stage} took longer than ${budgetText(startMs, cfg, adopted?.budgetMs)}`, straysText(strays)].filter(Boolean).join('; ')
          : startFailureText(e, cfg),
        stderr?.get() ?? [],
        timedOut ? 'timeout' : 'unreachable',
        e instanceof UpstreamProtocolError ? e : undefined,
      );
    } finally {
      clearTimeout(timer);
      this.opts.signal?.removeEventListener('abort', abort);
    }
    conn.ready = true;
    if (transport instanceof StdioClientTransport) {
      const pid = transport.pid ?? undefined;
      childOf(transport)?.once('exit', (code, signal) => this.log.info({ session: this.id, pid, code, signal }, 'upstream process exited'));
    }
    return conn;
  }

  /** `initialize` (the SDK starts the transport first), then the start barrier, within `startMs`. */
  private async handshake(conn: Connection, startMs: number): Promise<void> {
    const { client, transport } = conn;
    // The start's own timer (in connect) bounds the handshake; the SDK's is a backstop behind it.
    await client.connect(transport, { timeout: startMs * 2 });
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
      this.received++;
      this.lastReceivedAt = performance.now();
      const r = message as { id?: string | number; method?: string };
      if (r.method === undefined && r.id !== undefined) {
        // Every request sent here has a number id; a server may send it back as a string.
        const id = typeof r.id === 'number' ? r.id : Number(r.id);
        const token = conn.tokenOf.get(id);
        if (token !== undefined) {
          conn.tokenOf.delete(id);
          if (conn.idOf.get(token) === id) conn.idOf.delete(token);
          this.answered.get(token)?.();
        }
        // A response to a request of this session's own is settled here; the SDK's requests (ping,
        // initialize) and late answers of given-up requests go on to the SDK.
        const pending = conn.pending.get(id);
        if (pending) return pending.answer(message as { result?: unknown; error?: { code: number; message: string; data?: unknown } });
      }
      deliver?.(message, extra);
    };
    await this.barrier(conn);
  }

  /**
   * The start barrier: pings after `initialized`, so that what the server asks in reaction to it
   * (answered from config: the connection is not ready) is over before any call can be charged with
   * it; see {@link quiesce}.
   */
  private async barrier(conn: Connection): Promise<void> {
    const pingMs = Math.min(BARRIER_PING_MS, this.opts.cfg.timeouts.connectMs);
    await this.quiesce(conn, 0, pingMs, performance.now() + 2 * pingMs);
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
   * @throws what the ping throws when the connection closed.
   */
  private async quiesce(conn: Connection, asked: number, pingMs: number, until = Infinity): Promise<void> {
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
          void this.closed.then(done);
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

  private toolTaskSupport: Promise<Map<string, string>> | undefined;

  /** The capabilities the upstream declared in its `initialize` result. */
  get serverCapabilities(): ServerCapabilities {
    return this.conn.client.getServerCapabilities() ?? {};
  }

  /**
   * 'forbidden' when the upstream does not support task-augmented tools/call (2025-11-25
   * `capabilities.tasks.requests.tools.call`), so no tool of it runs as an upstream task; undefined
   * when {@link taskSupportOf} must ask the upstream's tool list.
   */
  knownTaskSupport(): 'forbidden' | undefined {
    const caps = this.serverCapabilities as { tasks?: { requests?: { tools?: { call?: unknown } } } };
    return caps.tasks?.requests?.tools?.call ? undefined : 'forbidden';
  }

  /**
   * The 2025-11-25 `execution.taskSupport` the upstream declares for tool `name`
   * ('forbidden' when the upstream does not support task-augmented tools/call). Lists the tools
   * once per session.
   */
  async taskSupportOf(name: string, timeoutMs: number): Promise<'forbidden' | 'optional' | 'required'> {
    if (this.knownTaskSupport()) return 'forbidden';
    this.toolTaskSupport ??= (async () => {
      const map = new Map<string, string>();
      let cursor: string | undefined;
      do {
        const page = (await this.request({ method: 'tools/list', params: cursor ? { cursor } : {} }, ListToolsResultSchema, {
          timeout: timeoutMs,
        })) as z.infer<typeof ListToolsResultSchema>;
        for (const t of page.tools) map.set(t.name, (t as { execution?: { taskSupport?: string } }).execution?.taskSupport ?? 'forbidden');
        cursor = page.nextCursor;
      } while (cursor);
      return map;
    })();
    try {
      const v = (await this.toolTaskSupport).get(name);
      return v === 'required' || v === 'optional' ? v : 'forbidden';
    } catch {
      this.toolTaskSupport = undefined;
      return 'forbidden';
    }
  }

  /**
   * Sends one request upstream. When a Streamable HTTP upstream answers 404 for the session (it
   * restarted or reaped the session, so the request was not processed), a new upstream session is
   * initialized in place and the request is sent once more. Every request the gateway sends on a
   * session goes through here (the calls of clients and the gateway's own: tool listings,
   * `resources/subscribe`, upstream task polling and `tasks/cancel`).
   * @throws McpError with the upstream's own error (any code, -32000 and -32001 included);
   *   UpstreamRequestLost when the connection closed, `options.timeout` (ms) passed or
   *   `options.signal` aborted before it answered; the transport's error when the upstream cannot
   *   be reached.
   */
  async request<S extends z.ZodType>(
    request: { method: string; params?: Record<string, unknown> },
    schema: S,
    options?: SessionRequestOptions,
  ): Promise<z.infer<S>> {
    const conn = this.conn;
    try {
      return await this.send(conn, request, schema, options);
    } catch (e) {
      if (!isSessionNotFound(e) || this.deadReason || options?.signal?.aborted) throw e;
      const fresh = await this.replace(conn);
      return this.send(fresh, request, schema, options);
    }
  }

  /**
   * One request on `conn`: sent on the transport under a JSON-RPC id from the SDK client's own
   * sequence, its response taken from the transport before the SDK sees it (the SDK's request path
   * validates every message and result with zod again and keeps a timer and abort listeners per
   * request; the gateway needs none of that). Timed by the session (`options.timeout`, ms; the SDK's
   * 60 s when absent), so that a failure of the gateway's side is told from an error the upstream
   * answered with the same code. Giving up (timer, `options.signal`) sends
   * `notifications/cancelled` for the request (MCP 2025-11-25 utilities §Cancellation).
   * @returns the result, checked with `schema` ({@link LooseResult}: any JSON object, as sent).
   * @throws UpstreamRequestLost when the connection closed, the timer fired or `options.signal`
   *   aborted before the upstream answered; McpError with the upstream's own error; the schema's
   *   ZodError for a result that does not match; the transport's error when the request could not
   *   be sent.
   */
  private send<S extends z.ZodType>(
    conn: Connection,
    request: { method: string; params?: Record<string, unknown> },
    schema: S,
    options?: SessionRequestOptions,
  ): Promise<z.infer<S>> {
    const { method } = request;
    const outer = options?.signal;
    if (outer?.aborted) return Promise.reject(new UpstreamRequestLost('aborted', `${method} was cancelled: ${String(outer.reason)}`));
    if (conn.closed) return Promise.reject(this.lostText(method));
    const params = options?.task ? { ...request.params, task: options.task } : request.params;
    return new Promise<z.infer<S>>((resolve, reject) => {
      const sent = new SentRequest(this, conn, nextRequestId(conn.client), method, schema, resolve, reject);
      sent.start(params, options?.timeout ?? DEFAULT_REQUEST_TIMEOUT_MSEC, outer);
    });
  }

  /** The error of a request whose connection closed before the upstream answered it. */
  lostText(method: string): UpstreamRequestLost {
    return new UpstreamRequestLost(
      'closed',
      `the connection closed before the upstream answered ${method} (${this.deadReason ?? 'connection closed'})`,
    );
  }

  /**
   * Runs `tools/call` as a 2025-11-25 task upstream (`params.task` with `ttlMs`), then polls
   * `tasks/get` (every `pollInterval` the upstream names, else 1 s) and fetches `tasks/result`
   * once the task completed or needs input, as the v1 SDK's `callToolStream` does; each of these
   * requests goes through {@link request}, so a session the upstream forgot is re-initialized and
   * the request sent once more.
   * @yields `taskCreated`, then `taskStatus` per poll, then one `result` or `error` (the task
   *   failed or was cancelled upstream, -32603).
   * @throws what {@link request} throws; the abort reason once `options.signal` aborts.
   */
  async *callToolAsTask(
    params: Record<string, unknown>,
    ttlMs: number,
    options: SessionRequestOptions,
  ): AsyncGenerator<ResponseMessage<CallToolResult>> {
    const created = await this.request({ method: 'tools/call', params }, CreateTaskResultSchema, { ...options, task: { ttl: ttlMs } });
    const taskId = created.task.taskId;
    yield { type: 'taskCreated', task: created.task };
    for (;;) {
      const task = await this.request({ method: 'tasks/get', params: { taskId } }, GetTaskResultSchema, options);
      yield { type: 'taskStatus', task };
      if (task.status === 'completed' || task.status === 'input_required') {
        // tasks/result blocks until the task is terminal, delivering its queued requests meanwhile.
        const result = await this.request({ method: 'tasks/result', params: { taskId } }, CallToolResultSchema, options);
        yield { type: 'result', result };
        return;
      }
      if (task.status === 'failed' || task.status === 'cancelled') {
        yield {
          type: 'error',
          error: new McpError(ErrorCode.InternalError, `Task ${taskId} ${task.status === 'failed' ? 'failed' : 'was cancelled'}`),
        };
        return;
      }
      await delay(task.pollInterval ?? DEFAULT_TASK_POLL_MS, undefined, { signal: options.signal });
    }
  }

  /**
   * Gives up the request sent with `progressToken` ({@link request}, still unanswered):
   * `notifications/cancelled` goes upstream with `reason`, and the request fails with
   * UpstreamRequestLost `aborted`. Nothing happens when it was answered already.
   */
  cancel(progressToken: string, reason: string): void {
    const conn = this.conn;
    const id = conn.idOf.get(progressToken);
    if (id !== undefined) conn.pending.get(Number(id))?.cancel(reason);
  }

  /** Initializes a new upstream session in place of `stale` (once, however many requests found it stale). */
  private replace(stale: Connection): Promise<Connection> {
    if (this.conn !== stale) return Promise.resolve(this.conn);
    this.replacing ??= (async () => {
      this.log.info({ session: this.id }, 'upstream no longer knows the session (404): initializing a new one');
      try {
        const fresh = await this.connect();
        this.conn = fresh;
        return fresh;
      } catch (e) {
        this.fail(`the upstream forgot the session and a new one could not be opened: ${(e as Error).message}`);
        throw e;
      } finally {
        this.replacing = undefined;
        // The upstream has forgotten it: no DELETE, just drop the connection.
        void stale.client.close().catch(() => {});
      }
    })();
    return this.replacing;
  }

  private readonly changeListeners = new Set<(n: UpstreamNotification) => void>();

  /**
   * Registers `listener` for the upstream's change notifications on this session
   * (`notifications/tools/list_changed`, `notifications/prompts/list_changed`,
   * `notifications/resources/list_changed`, `notifications/resources/updated`), whoever holds the
   * lease, across a re-initialized upstream session too.
   * @returns a function that removes the listener.
   */
  onNotification(listener: (n: UpstreamNotification) => void): () => void {
    this.changeListeners.add(listener);
    return () => void this.changeListeners.delete(listener);
  }

  /**
   * Attaches a call: server-initiated requests that came on the POST stream of the request carrying
   * `progressToken` reach `handlers.onRequest`, as do those that came with no stream to name them
   * (stdio, the GET stream) while it is the only call on the session, shared or not; its progress
   * notifications reach `handlers.onProgress`. {@link detach} undoes it.
   */
  attach(progressToken: string, handlers: CallHandlers): void {
    this.calls.set(progressToken, handlers);
  }

  /**
   * Whether other calls may join this session: not once the server sent a request that named no
   * call (several calls could not be told apart), nor once it uses roots (it holds one set of roots
   * at a time, and each call must run with its own client's; see {@link needsRoots}).
   */
  get shareable(): boolean {
    return !this.unattributed && !this.usesRoots;
  }

  /**
   * Whether a call must give the server its roots before its request goes upstream
   * ({@link resyncRoots}): the server uses roots, and the call's client declared roots it may be
   * asked for (`clientRoots`), or the server holds another call's client's roots.
   */
  needsRoots(clientRoots: boolean): boolean {
    return this.usesRoots && (clientRoots || this.rootsFromCall);
  }

  /**
   * Makes the server ask for roots again before a call's request goes upstream: sends
   * `notifications/roots/list_changed`, then waits as the start barrier does ({@link quiesce}) until
   * what the server asked meanwhile has been answered (its `roots/list` goes to the call attached
   * alone on the session, so its client is asked in an `input_required` round, however long that
   * takes) and the server has been quiet since.
   * @throws UpstreamRequestLost when the connection closed meanwhile.
   */
  async resyncRoots(): Promise<void> {
    const conn = this.conn;
    if (conn.closed) throw this.lostText('notifications/roots/list_changed');
    const before = conn.asked;
    await conn.client.notification({ method: 'notifications/roots/list_changed' });
    await this.quiesce(conn, before, Infinity);
    if (conn.closed) throw this.lostText('notifications/roots/list_changed');
  }

  /** Detaches the call `handlers` attached under `progressToken`: what arrives for it afterwards is refused upstream. */
  detach(progressToken: string, handlers: CallHandlers): void {
    if (this.calls.get(progressToken) !== handlers) return;
    this.calls.delete(progressToken);
  }

  /** Resolvers of {@link whenAnswered}, by progress token. */
  private readonly answered = new Map<string, () => void>();

  /**
   * Whether the upstream answered the request sent with `progressToken` (a result or an error),
   * waiting up to `ms` for it: after `notifications/cancelled`, a legacy server that still answers
   * shows that the cancelled call ended, so its session is quiet again. Resolves false when no
   * answer came in time (the call may still run upstream).
   */
  whenAnswered(progressToken: string, ms: number): Promise<boolean> {
    const conn = this.conn;
    if (!conn.idOf.has(progressToken)) return Promise.resolve(true);
    return new Promise<boolean>((resolve) => {
      const done = (ok: boolean) => {
        clearTimeout(timer);
        this.answered.delete(progressToken);
        if (!ok) {
          const id = conn.idOf.get(progressToken);
          conn.idOf.delete(progressToken);
          if (id !== undefined) conn.tokenOf.delete(id);
        }
        resolve(ok);
      };
      const timer = setTimeout(() => done(false), ms);
      this.answered.set(progressToken, () => done(true));
      void this.closed.then(() => done(false));
    });
  }

  /** Detaches every call. */
  detachAll(): void {
    this.calls.clear();
  }

  /** The call a server-initiated request belongs to, if it can be known. */
  private callFor(conn: Connection, extra: ServerRequestExtra): CallHandlers | undefined {
    const token = (extra.requestInfo?.headers as Record<string, string | string[] | undefined> | undefined)?.[RELATED_TOKEN_HEADER];
    if (typeof token === 'string') {
      const call = this.calls.get(token);
      if (call) this.opts.onAttribution?.('post');
      return call;
    }
    if (conn.transport instanceof HttpClientTransport) {
      // The GET stream: no other call may join this session from now on.
      this.unattributed = true;
      if (this.calls.size > 0) this.opts.onAttribution?.('get');
    }
    // Named by no stream (stdio, the GET stream): it is the call's when that call is the only one
    // in flight on the session, shared or not; with several, it is nobody's.
    return this.calls.size === 1 ? this.calls.values().next().value : undefined;
  }

  /** Registers a callback for when the connection dies (not when the gateway closes it). */
  onDeath(cb: (reason: string) => void): void {
    this.onDead.push(cb);
  }

  /** The last lines the stdio child wrote to stderr (empty for HTTP upstreams). */
  stderrTail(): string[] {
    return this.conn?.stderr?.get() ?? [];
  }

  private markDead(reason: string): void {
    if (this.deadReason) return;
    this.deadReason = reason;
    this.resolveClosed();
    if (!this.closing) {
      if (this.opts.stopping?.()) {
        this.deadKind ??= 'stopping';
        this.log.info({ session: this.id, reason }, 'upstream session ended while the gateway stops');
      } else this.log.warn({ session: this.id, reason, stderr: this.stderrTail().slice(-5) }, 'upstream session died');
      for (const cb of this.onDead) cb(reason);
    }
  }

  /**
   * Marks the session dead for `reason` and closes it; calls in flight fail with ConnectionClosed
   * (reported to their callers as `protocol` when `kind` says the upstream broke the protocol).
   */
  fail(reason: string, kind?: 'protocol'): void {
    if (this.deadReason) return;
    this.deadKind = kind;
    this.markDead(reason);
    void this.conn?.client.close().catch(() => {});
  }

  /**
   * A server-initiated request: to the call it belongs to ({@link callFor}) once the connection is
   * ready; else `roots/list` is answered from the configured `roots` and anything else refused
   * upstream with -32603. Counted for {@link quiesce}.
   */
  private async dispatch(conn: Connection, request: ServerInitiatedRequest, extra: ServerRequestExtra): Promise<Record<string, unknown>> {
    conn.asked++;
    conn.asking++;
    try {
      return await this.answer(conn, request, extra);
    } finally {
      conn.lastAnsweredAt = performance.now();
      if (--conn.asking === 0) for (const done of [...conn.onAllAnswered]) done();
    }
  }

  private async answer(conn: Connection, request: ServerInitiatedRequest, extra: ServerRequestExtra): Promise<Record<string, unknown>> {
    const roots = request.method === 'roots/list';
    if (roots) this.usesRoots = true;
    if (conn.ready && conn === this.conn) {
      const call = this.callFor(conn, extra);
      if (call) {
        const result = await call.onRequest(request, extra);
        // Roots other than the configured ones are that call's client's: the next call resyncs.
        if (roots) this.rootsFromCall = canonicalJson(result.roots ?? null) !== canonicalJson(this.opts.cfg.roots);
        return result;
      }
    }
    this.opts.onUnclaimed?.(request);
    if (roots) {
      this.rootsFromCall = false;
      return { roots: this.opts.cfg.roots };
    }
    throw new McpError(
      -32603,
      `${request.method} arrived outside any client request in progress on this session; the gateway has no client to ask`,
    );
  }

  /** Closes the connection (ends a stdio child). Never throws. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const conn = this.conn;
    try {
      if (conn?.sending.size) await Promise.race([Promise.allSettled([...conn.sending]), new Promise((r) => setTimeout(r, 1000))]);
      if (
        conn &&
        (conn.transport instanceof StreamableHTTPClientTransport || conn.transport instanceof HttpClientTransport) &&
        conn.transport.sessionId &&
        !this.deadReason
      ) {
        await Promise.race([conn.transport.terminateSession().catch(() => {}), new Promise((r) => setTimeout(r, 1000))]);
      }
      if (conn?.transport instanceof StdioClientTransport) await endStdioChild(conn.transport, () => conn.client.close());
      else await conn?.client.close();
    } catch {
      /* already closed */
    }
    this.markDead('closed by the gateway');
  }
}

/**
 * A request {@link UpstreamSession.request} sent on a connection, until it settles: answered,
 * given up (its timer, its signal, {@link UpstreamSession.cancel}), or lost with its connection.
 * One object per request rather than a closure per outcome: every call upstream makes one.
 */
class SentRequest<S extends z.ZodType> implements PendingRequest {
  private timer: NodeJS.Timeout | undefined;
  private signal: AbortSignal | undefined;
  private onAbort: (() => void) | undefined;

  constructor(
    private readonly session: UpstreamSession,
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
