import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { parseConfig } from '../../src/config/load.js';
import { wire, type Wiring } from '../../src/wiring.js';
import type { LegacySessions } from '../../src/http/legacy-sessions.js';
import { pino } from 'pino';
import { fetch as undiciFetch, type Dispatcher } from 'undici';
import { httpServerOptions } from '../../src/http/server.js';
import { createLogger, silentLogger, type Logger } from '../../src/observability/log.js';
import { EVERYTHING, ROOT } from './processes.js';
import { scaled } from './budget.js';

/** A gateway running in this process on 127.0.0.1 with an ephemeral port. */
export interface TestGateway {
  /** Every long-lived object of the gateway (src/wiring.ts). */
  gateway: Wiring;
  /** The front door's legacy client sessions. */
  legacy: LegacySessions;
  base: string;
  url(upstream: string): string;
  close(): Promise<void>;
}

/** The stdio upstream config for server-everything. */
export const everythingStdio = { transport: 'stdio', command: process.execPath, args: [EVERYTHING, 'stdio'] } as const;

/** `auth` of two API-key principals, `alice` and `bob`, and the headers each sends. */
export const TWO_KEYS = {
  mode: 'apiKeys',
  keys: [
    { principal: 'alice', key: 'key-of-alice-0123456789' },
    { principal: 'bob', key: 'key-of-bob-0123456789ab' },
  ],
} as const;
export const ALICE = { authorization: 'Bearer key-of-alice-0123456789' };
export const BOB = { authorization: 'Bearer key-of-bob-0123456789ab' };

/** A logger whose JSON lines are kept in memory, for tests that assert on logs. */
export function memoryLogger(level = 'debug'): { log: Logger; lines: () => Record<string, any>[] } {
  const chunks: string[] = [];
  const log = pino({ level }, { write: (s: string) => void chunks.push(s) });
  return {
    log,
    lines: () =>
      chunks
        .join('')
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l)),
  };
}

/**
 * Starts a gateway from a raw config object (validated like a file; listen is forced to
 * 127.0.0.1:0), with the CLI's HTTP server options. Logs go to `log`, else to stdout at the level
 * in `TEST_LOG`, else nowhere. Like the CLI (through `wire`), it starts tracing when the `OTEL_*`
 * environment asks for it (once per process; nothing happens when no such variable is set or
 * tracing already runs). The audit trail is off unless `raw.audit` configures it.
 */
export async function startGateway(raw: Record<string, unknown>, opts: { log?: Logger } = {}): Promise<TestGateway> {
  // The audit trail stays off the test run's stdout unless the test configures it.
  const cfg = parseConfig({ audit: { enabled: false }, ...raw, listen: { host: '127.0.0.1', port: 0 } }, process.env, ROOT);
  const log = opts.log ?? (process.env.TEST_LOG ? createLogger(process.env.TEST_LOG) : silentLogger);
  const gateway = await wire(cfg, log);
  const { app } = gateway.front;
  const server: ServerType = await new Promise((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', serverOptions: httpServerOptions(cfg.limits) }, () => resolve(s));
  });
  const port = (server.address() as AddressInfo).port;
  const base = `http://127.0.0.1:${port}`;
  gateway.startReplica(base);
  return {
    gateway,
    legacy: gateway.legacy,
    base,
    url: (upstream) => `${base}/mcp/${upstream}`,
    close: async () => {
      await gateway.close();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** The 2026-07-28 `_meta` envelope. */
export function envelope(caps: Record<string, unknown> = {}, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': caps,
    ...extra,
  };
}

let nextId = 1;

/** Options for {@link rpc}. */
export interface RpcOptions {
  caps?: Record<string, unknown>;
  headers?: Record<string, string | null>;
  id?: string | number;
  meta?: Record<string, unknown>;
  /** Send with undici's fetch over this dispatcher instead of the global one. */
  dispatcher?: Dispatcher;
}

/** Raw JSON-RPC POST with correct 2026-07-28 headers (override or drop any with `headers`, null drops). */
export async function rpc(
  url: string,
  method: string,
  params: Record<string, unknown> = {},
  opts: RpcOptions = {},
): Promise<{ status: number; body: any; headers: Headers }> {
  const id = opts.id ?? nextId++;
  const name = (params.name ?? params.uri) as string | undefined;
  const headers: Record<string, string | null> = {
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2026-07-28',
    'mcp-method': method,
    ...(name !== undefined ? { 'mcp-name': name } : {}),
    ...opts.headers,
  };
  const init = {
    method: 'POST',
    headers: Object.fromEntries(Object.entries(headers).filter(([, v]) => v !== null)) as Record<string, string>,
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: opts.meta ?? envelope(opts.caps ?? {}) } }),
  };
  const res = opts.dispatcher
    ? ((await undiciFetch(url, { ...init, dispatcher: opts.dispatcher })) as unknown as Response)
    : await fetch(url, init);
  const text = await res.text();
  let body: any = text;
  if ((res.headers.get('content-type') ?? '').includes('application/json')) body = JSON.parse(text);
  return { status: res.status, body, headers: res.headers };
}

/** An open `subscriptions/listen` stream, read message by message. */
export interface ListenStream {
  status: number;
  headers: Headers;
  /** Every message read so far, in order. */
  messages: any[];
  /** The next message, or undefined when none arrives within `timeoutMs` or the stream ended. */
  next(timeoutMs?: number): Promise<any>;
  /** Closes the stream (the client goes away). */
  close(): void;
}

/** Opens `subscriptions/listen` with `filter` as `params.notifications` (a JSON body is read whole); `opts.headers` are added (null drops nothing here). */
export async function listen(url: string, filter: Record<string, unknown>, opts: RpcOptions = {}): Promise<ListenStream> {
  const id = opts.id ?? `listen-${nextId++}`;
  const abort = new AbortController();
  const res = await fetch(url, {
    method: 'POST',
    signal: abort.signal,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2026-07-28',
      'mcp-method': 'subscriptions/listen',
      ...(Object.fromEntries(Object.entries(opts.headers ?? {}).filter(([, v]) => v !== null)) as Record<string, string>),
    },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id,
      method: 'subscriptions/listen',
      params: { notifications: filter, _meta: opts.meta ?? envelope(opts.caps ?? {}) },
    }),
  });
  const messages: any[] = [];
  const queue: any[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  if (!(res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    const body = await res.json();
    messages.push(body);
    queue.push(body);
    ended = true;
  } else {
    void (async () => {
      const decoder = new TextDecoder();
      let buf = '';
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          buf += decoder.decode(chunk, { stream: true });
          let i: number;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const event = buf.slice(0, i);
            buf = buf.slice(i + 2);
            const data = event.split('\n').find((l) => l.startsWith('data:'));
            if (!data) continue;
            const msg = JSON.parse(data.slice(5));
            messages.push(msg);
            queue.push(msg);
            wake?.();
          }
        }
      } catch {
        /* aborted */
      }
      ended = true;
      wake?.();
    })();
  }
  return {
    status: res.status,
    headers: res.headers,
    messages,
    async next(timeoutMs = 5000) {
      const end = Date.now() + scaled(timeoutMs);
      while (!queue.length && !ended && Date.now() < end) {
        await new Promise<void>((r) => {
          wake = r;
          setTimeout(r, Math.max(0, end - Date.now()));
        });
        wake = undefined;
      }
      return queue.shift();
    },
    close: () => abort.abort(),
  };
}
