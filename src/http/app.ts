/**
 * The HTTP front door: MCP 2026-07-28 Streamable HTTP, POST only, one endpoint per upstream at
 * `POST /mcp/NAME`. Responses are `application/json`, or `text/event-stream` once an upstream
 * progress notification has to reach a client that sent `_meta.progressToken` and accepts SSE.
 * Closing that stream (or the connection) cancels the call upstream.
 */
import { Hono, type Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { Gateway } from '../gateway.js';
import { TASKS_EXTENSION, detailedTask } from '../tasks/manager.js';
import { isTerminal } from '../tasks/store.js';
import { ErrorCode, GatewayError, methodNotFound, missingCapability, type JsonRpcErrorObject } from '../protocol/errors.js';
import { idOf, parseJsonRpc, validateRequest, type ValidatedRequest } from '../protocol/envelope.js';
import type { RequestId } from '../protocol/wire.js';
import type { ProgressParams } from '../exchange/exchange.js';
import type { Logger } from '../observability/log.js';

/** The principal of a request; anonymous until downstream auth is configured. */
export const ANONYMOUS = 'anonymous';

const jsonHeaders = { 'content-type': 'application/json' };

function errorResponse(id: RequestId | null, err: JsonRpcErrorObject, status: number, extraHeaders: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ jsonrpc: '2.0', id, error: err }), { status, headers: { ...jsonHeaders, ...extraHeaders } });
}

function asGatewayError(e: unknown, log: Logger): GatewayError {
  if (e instanceof GatewayError) return e;
  log.error({ err: e instanceof Error ? { message: e.message, stack: e.stack } : String(e) }, 'unexpected error');
  return new GatewayError(ErrorCode.InternalError, 'Internal gateway error');
}

/**
 * Builds the Hono app for `gateway`.
 * Routes: `POST /mcp/:name` (MCP), any other method on it → 405 with `Allow: POST`,
 * anything else → 404 with a JSON-RPC error body.
 */
export function createApp(gateway: Gateway, log: Logger): Hono {
  const app = new Hono();
  const maxBody = gateway.cfg.limits.maxBodyBytes;

  app.post(
    '/mcp/:name',
    bodyLimit({
      maxSize: maxBody,
      onError: () =>
        errorResponse(null, { code: ErrorCode.InvalidRequest, message: `Request body exceeds the limit of ${maxBody} bytes` }, 413),
    }),
    (c) => handleMcp(c, gateway, log),
  );
  app.all('/mcp/:name', (c) =>
    gateway.upstreams.has(c.req.param('name'))
      ? errorResponse(null, { code: ErrorCode.MethodNotFound, message: `${c.req.method} is not supported; MCP 2026-07-28 uses POST only` }, 405, { allow: 'POST' })
      : unknownUpstream(gateway, c.req.param('name'), null),
  );
  app.notFound((c) => {
    const names = [...gateway.upstreams.keys()].map((n) => `/mcp/${n}`).join(', ');
    return errorResponse(null, { code: ErrorCode.MethodNotFound, message: `No endpoint at ${c.req.path}; this gateway serves ${names}` }, 404);
  });
  app.onError((e) => {
    const g = asGatewayError(e, log);
    return errorResponse(null, g.toJSON(), g.httpStatus);
  });
  return app;
}

async function handleMcp(c: Context, gateway: Gateway, log: Logger): Promise<Response> {
  const name = c.req.param('name')!;
  const started = performance.now();
  const text = await c.req.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (e) {
    if (!gateway.upstreams.has(name)) return unknownUpstream(gateway, name, null);
    return errorResponse(null, { code: ErrorCode.ParseError, message: `Parse error: the body is not valid JSON (${(e as Error).message})` }, 400);
  }
  const id = idOf(body);
  if (!gateway.upstreams.has(name)) return unknownUpstream(gateway, name, id);
  let rpc;
  try {
    rpc = parseJsonRpc(body);
  } catch (e) {
    const g = asGatewayError(e, log);
    return errorResponse(id, g.toJSON(), g.httpStatus);
  }
  if (rpc.id === undefined) {
    // Notifications carry nothing the gateway acts on over HTTP (cancellation is closing the stream).
    return new Response(null, { status: 202 });
  }
  const reqId = rpc.id;
  let validated;
  try {
    validated = validateRequest({ ...rpc, id: reqId }, c.req.raw.headers);
  } catch (e) {
    const g = asGatewayError(e, log);
    logRequest(log, name, rpc.method, undefined, started, g);
    return errorResponse(reqId, g.toJSON(), g.httpStatus);
  }

  if (validated.method === 'subscriptions/listen') return listen(c, gateway, validated, name, log);

  const progressToken = validated.progressToken;
  const wantsSse = progressToken !== undefined && (c.req.header('accept') ?? '').includes('text/event-stream');
  const callName = (validated.params.name ?? validated.params.uri) as string | undefined;

  return new Promise<Response>((resolveResponse) => {
    const abort = new AbortController();
    c.req.raw.signal.addEventListener('abort', () => abort.abort(), { once: true });
    let sse: WritableStreamDefaultWriter<Uint8Array> | undefined;
    const encoder = new TextEncoder();
    const writeEvent = (msg: unknown) => sse!.write(encoder.encode(`event: message\ndata: ${JSON.stringify(msg)}\n\n`));

    const onProgress = wantsSse
      ? (p: ProgressParams) => {
          if (!sse) {
            const stream = new TransformStream<Uint8Array, Uint8Array>();
            sse = stream.writable.getWriter();
            sse.closed.catch(() => abort.abort());
            resolveResponse(
              new Response(stream.readable, {
                status: 200,
                headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' },
              }),
            );
          }
          writeEvent({ jsonrpc: '2.0', method: 'notifications/progress', params: { ...p, progressToken } }).catch(() => abort.abort());
        }
      : undefined;

    gateway
      .handle(name, validated, { principal: ANONYMOUS, signal: abort.signal, onProgress })
      .then(
        (result) => {
          logRequest(log, name, validated.method, callName, started, undefined, result.resultType as string);
          return { message: { jsonrpc: '2.0', id: reqId, result }, status: 200 };
        },
        (e) => {
          const g = asGatewayError(e, log);
          logRequest(log, name, validated.method, callName, started, g);
          return { message: { jsonrpc: '2.0', id: reqId, error: g.toJSON() }, status: g.httpStatus };
        },
      )
      .then(({ message, status }) => {
        if (sse) {
          writeEvent(message)
            .then(() => sse!.close())
            .catch(() => {});
        } else {
          resolveResponse(new Response(JSON.stringify(message), { status, headers: jsonHeaders }));
        }
      });
  });
}

const SUBSCRIPTION_ID = 'io.modelcontextprotocol/subscriptionId';

/**
 * `subscriptions/listen` (MCP 2026-07-28) for task status: an SSE response that starts with
 * `notifications/subscriptions/acknowledged` (the honored filter), then carries
 * `notifications/tasks` (the full DetailedTask) on each status change of the listed tasks, and
 * ends with the listen result once all of them are terminal. Only `taskIds` is honored.
 */
async function listen(c: Context, gateway: Gateway, req: ValidatedRequest, name: string, log: Logger): Promise<Response> {
  const notifications = (req.params.notifications ?? {}) as { taskIds?: unknown };
  const requested = Array.isArray(notifications.taskIds) ? notifications.taskIds.filter((t): t is string => typeof t === 'string') : [];
  if (requested.length && !Gateway.declaresTasks(req)) {
    const g = missingCapability({ extensions: { [TASKS_EXTENSION]: {} } }, `extensions["${TASKS_EXTENSION}"]`);
    return errorResponse(req.id, g.toJSON(), g.httpStatus);
  }
  const caller = { principal: ANONYMOUS, upstream: name };
  const open = new Set<string>();
  const honored: string[] = [];
  for (const id of requested) {
    try {
      const record = await gateway.tasks.get(id, caller);
      honored.push(id);
      if (!isTerminal(record.status)) open.add(id);
    } catch {
      /* unknown or foreign ids are left out of the acknowledged filter */
    }
  }
  const meta = { [SUBSCRIPTION_ID]: req.id };
  const stream = new TransformStream<Uint8Array, Uint8Array>();
  const writer = stream.writable.getWriter();
  const encoder = new TextEncoder();
  const write = (msg: unknown) => writer.write(encoder.encode(`event: message\ndata: ${JSON.stringify(msg)}\n\n`)).catch(() => stop());
  let unsubscribe = () => {};
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    unsubscribe();
  };
  const finish = () => {
    if (stopped) return;
    void write({ jsonrpc: '2.0', id: req.id, result: { resultType: 'complete', _meta: meta } }).then(() => writer.close().catch(() => {}));
    stop();
  };
  void write({ jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged', params: { notifications: { taskIds: honored }, _meta: meta } });
  unsubscribe = gateway.tasks.subscribe((record) => {
    if (!honored.includes(record.taskId) || stopped) return;
    void write({ jsonrpc: '2.0', method: 'notifications/tasks', params: { ...detailedTask(record), _meta: meta } });
    if (isTerminal(record.status)) {
      open.delete(record.taskId);
      if (open.size === 0) finish();
    }
  });
  writer.closed.catch(() => stop());
  c.req.raw.signal.addEventListener('abort', stop, { once: true });
  if (open.size === 0) finish();
  log.info({ upstream: name, method: 'subscriptions/listen', taskIds: honored.length }, 'request');
  return new Response(stream.readable, { status: 200, headers: { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' } });
}

function unknownUpstream(gateway: Gateway, name: string, id: RequestId | null): Response {
  const err = methodNotFound(`Unknown upstream '${name}'; this gateway serves: ${[...gateway.upstreams.keys()].join(', ')}`);
  return errorResponse(id, err.toJSON(), 404);
}

function logRequest(log: Logger, upstream: string, method: string, name: string | undefined, started: number, err?: GatewayError, resultType?: string): void {
  const durationMs = Math.round((performance.now() - started) * 10) / 10;
  if (err) log.info({ upstream, method, name, durationMs, outcome: 'error', code: err.code }, 'request');
  else log.info({ upstream, method, name, durationMs, outcome: resultType ?? 'complete' }, 'request');
}
