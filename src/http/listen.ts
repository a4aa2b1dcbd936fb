/**
 * The front door's side of `subscriptions/listen` (MCP 2026-07-28 §Subscriptions): the response is
 * an SSE stream that starts with `notifications/subscriptions/acknowledged` (the honored filter),
 * carries each relayed notification with `_meta["io.modelcontextprotocol/subscriptionId"]` set to
 * the listen request's id, and, when the subscription ends on the gateway's side, ends with the
 * listen result `{"resultType":"complete","_meta":{subscriptionId}}` (or a JSON-RPC error when the
 * upstream session behind it was lost). Closing the stream ends the subscription. What is honored
 * and relayed is decided behind the router (src/router/subscriptions.ts).
 */
import type { Context } from 'hono';
import { ErrorCode, GatewayError } from '../protocol/errors.js';
import type { ValidatedRequest } from '../protocol/envelope.js';
import { META_SUBSCRIPTION_ID } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';
import type { ListenHandle } from '../router/subscriptions.js';
import { errorResponse, sseStream } from './sse.js';

/** Interval of the SSE keep-alive comments on a listen stream, in ms. */
export const LISTEN_KEEPALIVE_MS = 15_000;

/**
 * Serves one `subscriptions/listen` request.
 * @param open opens the subscription (for one upstream, `McpRouter.listen`; on the federated
 *   endpoint, `Federation.listen`).
 * @param recorded called once with the request's outcome (for the request log and metrics).
 * @param closed called when the stream ends, could not open, or its client went away while it
 *   opened (for the caller's count of open listens); it may be called more than once, so it must
 *   be idempotent (as a `LocalSlots.enter` release is).
 * @returns the SSE response, or a JSON-RPC error response when the subscription cannot be opened
 *   (400 / -32021 for `taskIds` without the tasks extension; -32603 when no upstream session can
 *   be had).
 */
export async function serveListen(
  c: Context,
  open: () => Promise<ListenHandle>,
  req: ValidatedRequest,
  log: Logger,
  recorded: (outcome: { error?: GatewayError; resultType?: string }) => void,
  closed: () => void = () => {},
): Promise<Response> {
  // A client that goes away while the subscription opens (waiting for an upstream session) frees its place at once.
  const signal = c.req.raw.signal;
  signal.addEventListener('abort', closed, { once: true });
  let sub: ListenHandle;
  try {
    sub = await open();
  } catch (e) {
    signal.removeEventListener('abort', closed);
    closed();
    const g = e instanceof GatewayError ? e : new GatewayError(ErrorCode.InternalError, 'Internal gateway error');
    if (!(e instanceof GatewayError))
      log.error({ err: e instanceof Error ? { message: e.message, stack: e.stack } : String(e) }, 'unexpected error');
    recorded({ error: g });
    return errorResponse(req.id, g.toJSON(), g.httpStatus);
  }
  signal.removeEventListener('abort', closed);
  const meta = { [META_SUBSCRIPTION_ID]: req.id };
  const sse = sseStream();
  let stopped = false;
  const stop = () => {
    if (stopped) return;
    stopped = true;
    closed();
    clearInterval(keepalive);
    signal.removeEventListener('abort', stop);
    void sub.close();
  };
  const write = (msg: unknown) => sse.send(msg).catch(stop);
  const keepalive = setInterval(() => void sse.comment('keep-alive').catch(stop), LISTEN_KEEPALIVE_MS);
  keepalive.unref();
  void write({ jsonrpc: '2.0', method: 'notifications/subscriptions/acknowledged', params: { notifications: sub.honored, _meta: meta } });
  sub.attach({
    notify: (method, params) => void write({ jsonrpc: '2.0', method, params: { ...params, _meta: meta } }),
    end: (error) => {
      const last = error
        ? { jsonrpc: '2.0', id: req.id, error: error.toJSON() }
        : { jsonrpc: '2.0', id: req.id, result: { resultType: 'complete', _meta: meta } };
      void write(last).then(sse.end);
      stop();
    },
  });
  sse.closed.catch(stop);
  if (signal.aborted) stop();
  else signal.addEventListener('abort', stop, { once: true });
  recorded({ resultType: 'stream' });
  return sse.response;
}
