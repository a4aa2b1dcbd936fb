/**
 * One legacy MCP session (2024-11-05 … 2025-11-25) to an upstream, through the v1 SDK `Client`
 * and its stdio, Streamable HTTP and HTTP+SSE client transports.
 *
 * A session is leased to one Exchange at a time; server-initiated requests that arrive while it is
 * leased go to the lease's handler. Outside a lease, `roots/list` is answered from config and other
 * server-initiated requests are refused.
 */
import { randomUUID } from 'node:crypto';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  McpError,
  ProgressNotificationSchema,
  PromptListChangedNotificationSchema,
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
  type ClientCapabilities as LegacyClientCapabilities,
  type Implementation,
  type ServerCapabilities,
} from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { ClientRequest, ClientNotification, ServerRequest, ServerNotification } from '@modelcontextprotocol/sdk/types.js';
import type { UpstreamConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';

/** A server-initiated request as it arrives from the upstream. */
export interface ServerInitiatedRequest {
  method: string;
  params?: Record<string, unknown>;
}

/** Extra information the v1 SDK passes to a request handler (abort signal, ids). */
export type ServerRequestExtra = RequestHandlerExtra<ClientRequest | ServerRequest, ClientNotification | ServerNotification>;

/** Handles a server-initiated request for the Exchange that holds the lease; resolves to the legacy result. */
export type ServerRequestHandler = (request: ServerInitiatedRequest, extra: ServerRequestExtra) => Promise<Record<string, unknown>>;

/** A change notification from the upstream: a tools, prompts or resources `list_changed`, or `notifications/resources/updated`. */
export interface UpstreamNotification {
  method: string;
  params?: Record<string, unknown>;
}

/** The upstream notifications {@link UpstreamSession.onNotification} listeners receive. */
const CHANGE_NOTIFICATIONS = [ToolListChangedNotificationSchema, PromptListChangedNotificationSchema, ResourceListChangedNotificationSchema, ResourceUpdatedNotificationSchema];

/** What the upstream said in its `initialize` result. */
export interface UpstreamInfo {
  protocolVersion: string;
  capabilities: ServerCapabilities;
  serverInfo: Implementation;
  instructions?: string;
}

const GATEWAY_CLIENT_INFO = { name: 'mrtr-gateway', version: '0.1.0' };

/** Configured headers with `extra` replacing any of the same name (header names are case-insensitive). */
function mergeHeaders(configured: Record<string, string>, extra: Record<string, string>): Record<string, string> {
  const h = new Headers(configured);
  for (const [k, v] of Object.entries(extra)) h.set(k, v);
  return Object.fromEntries(h);
}

function createTransport(cfg: UpstreamConfig, log: Logger, extraHeaders: Record<string, string>): Transport {
  switch (cfg.transport) {
    case 'stdio': {
      const t = new StdioClientTransport({ command: cfg.command, args: cfg.args, env: { ...defaultEnv(), ...cfg.env }, cwd: cfg.cwd, stderr: 'pipe' });
      const stderr = t.stderr;
      if (stderr) {
        let buf = '';
        stderr.on('data', (chunk: Buffer) => {
          buf += chunk.toString('utf8');
          let nl: number;
          while ((nl = buf.indexOf('\n')) >= 0) {
            const line = buf.slice(0, nl).trimEnd();
            buf = buf.slice(nl + 1);
            if (line) log.debug({ stderr: line.slice(0, 2000) }, 'upstream stderr');
          }
          if (buf.length > 64_000) buf = '';
        });
      }
      return t;
    }
    case 'streamable-http':
      return new StreamableHTTPClientTransport(new URL(cfg.url), {
        requestInit: { headers: mergeHeaders(cfg.headers, extraHeaders) },
        reconnectionOptions: { maxRetries: 2, initialReconnectionDelay: 100, maxReconnectionDelay: 500, reconnectionDelayGrowFactor: 2 },
      });
    case 'sse':
      // requestInit headers go on the POSTs and on the GET /sse stream alike.
      return new SSEClientTransport(new URL(cfg.url), { requestInit: { headers: mergeHeaders(cfg.headers, extraHeaders) } });
  }
}

/** The minimal environment the v1 SDK gives a child, plus PATH-like basics. */
function defaultEnv(): Record<string, string> {
  const keep = process.platform === 'win32' ? ['APPDATA', 'PATH', 'SYSTEMROOT', 'TEMP', 'USERNAME'] : ['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'LANG', 'TMPDIR', 'NODE_OPTIONS'];
  const env: Record<string, string> = {};
  for (const k of keep) if (process.env[k] !== undefined) env[k] = process.env[k]!;
  return env;
}

/**
 * A connected legacy session. Create with {@link UpstreamSession.open}.
 */
export class UpstreamSession {
  readonly id = randomUUID();
  /** Set when the connection closed or failed; the session is then never reused. */
  deadReason: string | undefined;
  /** Resolves when the connection closes for any reason. */
  readonly closed: Promise<void>;
  private handler: ServerRequestHandler | undefined;
  /** Receives `notifications/progress` params while a lease wants them. */
  progressListener: ((params: { progressToken: string | number; progress: number; total?: number; message?: string }) => void) | undefined;
  private closing = false;
  private onDead: ((reason: string) => void)[] = [];
  private resolveClosed!: () => void;

  private constructor(
    readonly upstream: string,
    readonly transportKind: UpstreamConfig['transport'],
    readonly client: Client,
    private readonly transport: Transport,
    readonly key: string,
    private readonly rootsAnswer: { uri: string; name?: string }[],
    private readonly log: Logger,
  ) {
    this.closed = new Promise((r) => (this.resolveClosed = r));
  }

  /** The upstream's `initialize` result. */
  get info(): UpstreamInfo {
    return {
      protocolVersion: this.negotiated ?? 'unknown',
      capabilities: this.client.getServerCapabilities() ?? {},
      serverInfo: this.client.getServerVersion() ?? { name: this.upstream, version: 'unknown' },
      instructions: this.client.getInstructions(),
    };
  }
  private negotiated: string | undefined;

  /**
   * Spawns or connects, sends `initialize` declaring `capabilities` (mirrored from the client), and
   * sends `notifications/initialized` only after the initialize response (the v1 SDK's order).
   * @throws Error when the connection or initialize fails or exceeds `cfg.timeouts.connectMs`.
   */
  static async open(
    upstream: string,
    cfg: UpstreamConfig,
    capabilities: LegacyClientCapabilities,
    key: string,
    log: Logger,
    extraHeaders: Record<string, string> = {},
  ): Promise<UpstreamSession> {
    const client = new Client(GATEWAY_CLIENT_INFO, { capabilities });
    const transport = createTransport(cfg, log, extraHeaders);
    const session = new UpstreamSession(upstream, cfg.transport, client, transport, key, cfg.roots, log);
    // The SDK hands the negotiated version to HTTP transports only; capture it for every transport.
    const setVersion = transport.setProtocolVersion?.bind(transport);
    transport.setProtocolVersion = (v: string) => {
      session.negotiated = v;
      setVersion?.(v);
    };
    client.fallbackRequestHandler = (request, extra) => session.dispatch(request as ServerInitiatedRequest, extra as ServerRequestExtra);
    // Progress is routed here rather than through the SDK's per-request onprogress, which drops a
    // notification that arrives in the same read as the response it belongs to.
    client.setNotificationHandler(ProgressNotificationSchema, (n) => session.progressListener?.(n.params));
    client.onclose = () => session.markDead(session.closing ? 'closed by the gateway' : 'connection closed');
    client.onerror = (err) => {
      log.debug({ err: err.message, session: session.id }, 'upstream transport error');
      // An HTTP stream that broke (or could not be resumed) means the upstream or its session is gone.
      if (cfg.transport !== 'stdio' && /SSE stream disconnected|Maximum reconnection attempts|Failed to reconnect|SSE error/i.test(err.message)) {
        session.fail(err.message);
      }
    };
    try {
      await client.connect(transport, { timeout: cfg.timeouts.connectMs });
    } catch (e) {
      session.closing = true;
      await client.close().catch(() => {});
      throw e;
    }
    const pid = transport instanceof StdioClientTransport ? (transport.pid ?? undefined) : undefined;
    log.info({ session: session.id, pid, protocolVersion: session.info.protocolVersion }, 'upstream session opened');
    if (transport instanceof StdioClientTransport) {
      const child = (transport as unknown as { _process?: import('node:child_process').ChildProcess })._process;
      child?.once('exit', (code, signal) => log.info({ session: session.id, pid, code, signal }, 'upstream process exited'));
    }
    return session;
  }

  private toolTaskSupport: Promise<Map<string, string>> | undefined;

  /**
   * The 2025-11-25 `execution.taskSupport` the upstream declares for tool `name`
   * ('forbidden' when the upstream does not support task-augmented tools/call). Lists the tools
   * once per session.
   */
  async taskSupportOf(name: string, timeoutMs: number): Promise<'forbidden' | 'optional' | 'required'> {
    const caps = this.info.capabilities as { tasks?: { requests?: { tools?: { call?: unknown } } } };
    if (!caps.tasks?.requests?.tools?.call) return 'forbidden';
    this.toolTaskSupport ??= (async () => {
      const map = new Map<string, string>();
      let cursor: string | undefined;
      do {
        const page = await this.client.listTools(cursor ? { cursor } : undefined, { timeout: timeoutMs });
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

  private changeListeners: Set<(n: UpstreamNotification) => void> | undefined;

  /**
   * Registers `listener` for the upstream's change notifications on this session
   * (`notifications/tools/list_changed`, `notifications/prompts/list_changed`,
   * `notifications/resources/list_changed`, `notifications/resources/updated`), whoever holds the
   * lease. The SDK handlers are installed on first use.
   * @returns a function that removes the listener.
   */
  onNotification(listener: (n: UpstreamNotification) => void): () => void {
    if (!this.changeListeners) {
      const listeners = (this.changeListeners = new Set());
      for (const schema of CHANGE_NOTIFICATIONS) {
        this.client.setNotificationHandler(schema, (n) => {
          for (const l of [...listeners]) l(n as UpstreamNotification);
        });
      }
    }
    this.changeListeners.add(listener);
    return () => void this.changeListeners?.delete(listener);
  }

  /** Installs the handler for server-initiated requests of the current lease (undefined: no lease). */
  setHandler(handler: ServerRequestHandler | undefined): void {
    this.handler = handler;
    if (!handler) this.progressListener = undefined;
  }

  /** Registers a callback for when the connection dies (not when the gateway closes it). */
  onDeath(cb: (reason: string) => void): void {
    this.onDead.push(cb);
  }

  private markDead(reason: string): void {
    if (this.deadReason) return;
    this.deadReason = reason;
    this.resolveClosed();
    if (!this.closing) {
      this.log.warn({ session: this.session, reason }, 'upstream session died');
      for (const cb of this.onDead) cb(reason);
    }
  }

  /** Marks the session dead for `reason` and closes it; calls in flight fail with ConnectionClosed. */
  fail(reason: string): void {
    if (this.deadReason) return;
    this.markDead(reason);
    void this.client.close().catch(() => {});
  }

  private get session(): string {
    return this.id;
  }

  private async dispatch(request: ServerInitiatedRequest, extra: ServerRequestExtra): Promise<Record<string, unknown>> {
    if (this.handler) return this.handler(request, extra);
    if (request.method === 'roots/list') return { roots: this.rootsAnswer };
    throw new McpError(-32603, `${request.method} arrived outside any client request; the gateway has no client to ask`);
  }

  /** Closes the connection (ends a stdio child). Never throws. */
  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    try {
      if (this.transport instanceof StreamableHTTPClientTransport && this.transport.sessionId) {
        await Promise.race([this.transport.terminateSession().catch(() => {}), new Promise((r) => setTimeout(r, 1000))]);
      }
      await this.client.close();
    } catch {
      /* already closed */
    }
    this.markDead('closed by the gateway');
  }
}
