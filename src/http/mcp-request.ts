/**
 * One MCP POST on `/mcp/NAME`, the federated `/mcp` or the internal hop, once the admission
 * middleware let it in ({@link handleMcp}): the body is read and checked, the client's era chosen
 * (a legacy client's request goes to its legacy session), and a 2026-07-28 request parsed,
 * validated and served by its target, the router for one upstream or the federation layer.
 * The answer is `application/json`, or `text/event-stream` once progress or log messages have to
 * reach a client that asked for them; `subscriptions/listen` gets its own stream (src/http/listen.ts).
 * Closing the response (or the connection) cancels the call upstream. A call another replica holds
 * is forwarded to it over the internal hop, and its answer relayed.
 */
import type { ServerResponse } from 'node:http';
import { getConnInfo } from '@hono/node-server/conninfo';
import type { Context } from 'hono';
import { ErrorCode, GatewayError, upstreamFailed } from '../protocol/errors.js';
import { idOf, parseJsonRpc, validateRequest, type ValidatedRequest } from '../protocol/envelope.js';
import { META_LOG_LEVEL, META_PROTOCOL_VERSION, type RequestId } from '../protocol/wire.js';
import { ClientConnection } from '../protocol/connection.js';

import { endSpan, startServerSpan, tracingActive, within, type Traced } from '../observability/tracing.js';
import type { Caller } from '../security/auth.js';
import { HeldElsewhere } from '../store/shared.js';
import { FEDERATED_LABEL, type FederationContext } from '../federation/federation.js';
import type { ListenHandle } from '../router/subscriptions.js';
import { readBody } from './body.js';
import type { AppEnv, Door, RequestVars, WorkTracker } from './door.js';
import { headerOf, requestHeaders, responseHeadersFor } from './headers.js';
import { clientEraOf, type ClientEra } from './legacy-sessions.js';
import { serveListen } from './listen.js';
import { bodyNotRead, jsonBody, mediaRefused } from './post-checks.js';
import { asGatewayError, CLOSE, refuseDraining, unknownUpstream } from './refusals.js';
import { forwardToReplica } from './replicas.js';
import { RateLimited, retryAfter, upstreamLimited } from './upstream-limits.js';
import { record, type RequestLog } from './request-log.js';
import { errorResponse, jsonHeaders, sseStream, type SseStream } from './sse.js';
import type { ProgressParams } from '../protocol/connection.js';

/**
 * The check of a request that came over the internal hop, by its method and raw params: undefined
 * when it may be served, else the error to answer (see `hopRefusal`).
 */
export type HopGate = (method: string, params: Record<string, unknown> | undefined) => Promise<GatewayError | undefined>;

/** One MCP POST, as its route hands it to {@link handleMcp}. */
export interface McpRequest {
  c: Context<AppEnv>;
  door: Door;
  /** Who sent it: as authenticated here, or as the replica that forwarded it authenticated it. */
  caller: Caller;
  requestId: string;
  /** Counts the request's work as in flight. */
  track: WorkTracker;
  /** Serves a request of a legacy client (an `initialize`, or a request of a legacy session), given its era and JSON body. */
  legacy: (clientEra: Exclude<ClientEra, 'modern'>, body: unknown) => Response | Promise<Response>;
  /** Set on the internal hop only (a request that came over it is never forwarded again): whether it may be served. */
  hop?: HopGate;
}

/** The answer to a 2026-07-28 request: a JSON-RPC message and its HTTP status, or the response another replica gave. */
interface Answer {
  message: unknown;
  status: number;
  /** Headers of the refusal (`Retry-After` of a rate limit). */
  headers?: Record<string, string>;
  forwarded?: Response;
}

/** Who serves the MCP requests of a route: one upstream's router, or the federation layer. */
interface McpTarget {
  /** `upstream` in the request log line and the metrics: the upstream's name, or `*` on the federated endpoint. */
  label: string;
  /** The upstream in the path of the internal hop to another replica; undefined on the federated endpoint. */
  upstream: string | undefined;
  handle(req: ValidatedRequest, ctx: FederationContext): Promise<Record<string, unknown>>;
  listen(req: ValidatedRequest, who: { principal: string; token?: string }): Promise<ListenHandle>;
}

/** A 2026-07-28 request being served: the request, its target, its log record and its validated form. */
interface Served {
  req: McpRequest;
  target: McpTarget;
  rl: RequestLog;
  validated: ValidatedRequest;
}

/**
 * Serves one MCP POST: the body's checks (413, 400, 415, 406, -32700, -32600), 404 for an unknown
 * upstream, the client's era, then the 2026-07-28 request (202 for a notification).
 */
export async function handleMcp(req: McpRequest): Promise<Response> {
  const { c, door, caller, requestId } = req;
  // Undefined on the federated endpoint.
  const name: string | undefined = c.req.param('name');
  const target = targetOf(door, name);
  const rl: RequestLog = {
    log: door.log,
    metrics: door.metrics,
    requestId,
    upstream: target?.label ?? name ?? FEDERATED_LABEL,
    principal: caller.principal,
    started: performance.now(),
    timing: { upstreamMs: 0 },
  };
  const parsed = await checkedBody(req, target, name);
  if (parsed instanceof Response) return parsed;
  const { body, text } = parsed;
  const sessionId = headerOf(c, 'mcp-session-id');
  const clientEra = clientEraOf(body, sessionId);
  // The internal hop counts nothing: the replica the client reached did.
  const era = clientEra === 'modern' ? '2026-07-28' : (door.legacy.eraOf(sessionId) ?? 'legacy');
  const limited =
    name !== undefined && !req.hop
      ? await upstreamLimited(door, c, name, body, { era, transport: 'streamable-http', started: rl.started })
      : undefined;
  if (limited) return limited;
  if (clientEra !== 'modern' && door.draining()) return refuseDraining(requestId, idOf(body));
  if (clientEra !== 'modern') return req.legacy(clientEra, body);
  const validated = await validated2026(req, target!, rl, body);
  if (validated instanceof Response) return validated;
  const served: Served = { req, target: target!, rl, validated };
  if (validated.method === 'subscriptions/listen') return listenRequest(served);
  return call(served, text);
}

/** The body of an MCP POST as JSON, once its size, upstream, media types and JSON passed their checks; else the refusal. */
async function checkedBody(
  { c, door, requestId }: McpRequest,
  target: McpTarget | undefined,
  name: string | undefined,
): Promise<{ body: unknown; text: string } | Response> {
  const maxBody = door.cfg.limits.maxBodyBytes;
  const pendingRead = readBody(c, maxBody);
  const read = pendingRead instanceof Promise ? await pendingRead : pendingRead;
  if ('broken' in read) door.log.debug({ requestId, err: read.broken.message }, 'request body not received');
  const unread = bodyNotRead(read, maxBody);
  if (unread) return unread;
  if (!target) {
    let id: RequestId | null = null;
    if ('text' in read) {
      try {
        id = idOf(JSON.parse(read.text));
      } catch {
        // No usable id.
      }
    }
    return unknownUpstream(c, door.router.upstreams.keys(), name ?? '', id);
  }
  return mediaRefused(c) ?? jsonBody(read, door.cfg.limits.maxJsonDepth);
}

/**
 * The 2026-07-28 request of `body`, parsed, let through the internal hop's check and validated
 * (its span started); else the answer: the JSON-RPC error, or 202 for a notification.
 */
async function validated2026(req: McpRequest, target: McpTarget, rl: RequestLog, body: unknown): Promise<ValidatedRequest | Response> {
  const { c, door, hop } = req;
  let rpc;
  try {
    rpc = parseJsonRpc(body);
  } catch (e) {
    const g = asGatewayError(e, door.log);
    return errorResponse(idOf(body), g.toJSON(), g.httpStatus);
  }
  if (hop) {
    let refused: GatewayError | undefined;
    try {
      refused = await hop(rpc.method, rpc.params as Record<string, unknown> | undefined);
    } catch (e) {
      refused = asGatewayError(e, door.log);
    }
    if (refused) return errorResponse(rpc.id ?? null, refused.toJSON(), refused.httpStatus);
  }
  if (rpc.id === undefined) {
    // Notifications carry nothing the gateway acts on over HTTP (cancellation is closing the stream).
    return new Response(null, { status: 202 });
  }
  const reqId = rpc.id;
  if (tracingActive()) rl.trace = serverSpanOf(c, rpc, target.label);
  try {
    return validateRequest({ ...rpc, id: reqId }, requestHeaders(c));
  } catch (e) {
    const g = asGatewayError(e, door.log);
    record(rl, rpc.method, undefined, { error: g });
    endSpan(rl.trace, { error: g });
    return errorResponse(reqId, g.toJSON(), g.httpStatus);
  }
}

/** `subscriptions/listen`: 429 when the caller has `limits.maxListensPerPrincipal` streams open, else its SSE stream. */
function listenRequest({ req, target, rl, validated }: Served): Response | Promise<Response> {
  const { c, door, caller } = req;
  // The internal hop between replicas counts nothing here: the replica the client reached did.
  const enter = c.get('enterListen') as RequestVars['enterListen'] | undefined;
  const leave = enter ? enter() : () => {};
  if (!leave) {
    const max = door.cfg.limits.maxListensPerPrincipal;
    const g = new GatewayError(
      ErrorCode.InvalidRequest,
      `Too many subscriptions/listen streams open for this caller (limit ${max}, limits.maxListensPerPrincipal); close one first`,
      undefined,
      429,
    );
    door.metrics.rateLimited.inc({ limit: 'listens' });
    record(rl, 'subscriptions/listen', undefined, { error: g });
    endSpan(rl.trace, { error: g });
    return errorResponse(validated.id, g.toJSON(), 429, { 'retry-after': '1' });
  }
  return within(rl.trace, () =>
    serveListen(
      c,
      () => target.listen(validated, { principal: caller.principal, token: caller.token }),
      validated,
      door.log,
      (outcome) => {
        record(rl, 'subscriptions/listen', undefined, outcome);
        endSpan(rl.trace, outcome.error ? { error: outcome.error } : { result: { resultType: outcome.resultType ?? 'complete' } });
      },
      leave,
    ),
  );
}

/**
 * Any other request: served by its target, answered as JSON, or on an SSE stream once progress (the
 * client sent a `progressToken`) or log messages (2026-07-28 `_meta` logLevel) have to reach it.
 */
function call(served: Served, text: string): Promise<Response> {
  const { req, rl, validated } = served;
  const { c, door } = req;
  const progressToken = validated.progressToken;
  // The client accepts SSE (checked above): progress goes on an SSE stream when it sent a progressToken,
  // and so do the log messages of the request (2026-07-28 `_meta` logLevel).
  const wantsSse = progressToken !== undefined;
  const wantsLogs = validated.meta[META_LOG_LEVEL] !== undefined;

  return new Promise<Response>((resolveResponse) => {
    const connection = new ClientConnection();
    // The client went away: the response closed before it was finished. The listener goes when the
    // call ends (the connection can outlive the request, with keep-alive).
    const stopWatching = onClientGone(c, () => connection.close());
    let sse: SseStream | undefined;
    const stream = (message: unknown) => {
      if (!sse) {
        sse = sseStream();
        sse.closed.catch(() => connection.close());
        resolveResponse(sse.response);
      }
      sse.send(message).catch(() => connection.close());
    };
    const work = answer(served, text, {
      principal: req.caller.principal,
      token: req.caller.token,
      connection,
      onProgress: wantsSse
        ? (p: ProgressParams) => stream({ jsonrpc: '2.0', method: 'notifications/progress', params: { ...p, progressToken } })
        : undefined,
      onNotification: wantsLogs
        ? (n: { method: string; params?: Record<string, unknown> }) => {
            if (n.method === 'notifications/message') stream({ jsonrpc: '2.0', method: n.method, params: n.params ?? {} });
          }
        : undefined,
      timing: rl.timing,
      paramHeaders: validated.paramHeaders,
      origin: {
        requestId: req.requestId,
        rpcId: validated.id,
        era: validated.protocolVersion,
        transport: 'streamable-http',
        ...(served.target.upstream === undefined ? { endpoint: FEDERATED_LABEL } : {}),
      },
      // On /mcp, a request the federation routes to one member counts against that upstream's limits
      // (as on /mcp/NAME, where handleMcp counted it); the internal hop counts nothing.
      memberGate:
        served.target.upstream === undefined && !req.hop
          ? door.upstreamLimits.gate(door.limitKey(c, req.caller), (limit) => door.metrics.rateLimited.inc({ limit }))
          : undefined,
    });
    const ended = req.track(work);
    void work.then((done) => {
      stopWatching();
      ended(sse !== undefined);
      if (done.forwarded) return resolveResponse(done.forwarded);
      if (sse) sse.send(done.message).then(sse.end, () => {});
      else
        resolveResponse(
          new Response(JSON.stringify(done.message), {
            status: done.status,
            headers: responseHeadersFor(c, { ...jsonHeaders, ...done.headers, ...(done.status === 503 && door.draining() ? CLOSE : {}) }),
          }),
        );
    });
  });
}

/**
 * The answer of the target to a request, logged and counted: its result, its error, or (when the
 * call lives on another replica) that replica's response over the internal hop. Settles, never rejects.
 */
function answer({ req, target, rl, validated }: Served, text: string, ctx: FederationContext): Promise<Answer> {
  const { c, door, caller } = req;
  const reqId = validated.id;
  const callName = (validated.params.name ?? validated.params.uri) as string | undefined;
  const failed = (e: unknown): Answer => {
    const g = asGatewayError(e, door.log);
    record(rl, validated.method, callName, { error: g });
    endSpan(rl.trace, { error: g });
    const headers = g instanceof RateLimited ? retryAfter(g.refusal) : undefined;
    return { message: { jsonrpc: '2.0', id: reqId, error: g.toJSON() }, status: g.httpStatus, headers };
  };
  const forwarded = (relayed: Response | undefined): Answer => {
    if (relayed) {
      record(rl, validated.method, callName, { resultType: 'forwarded' });
      endSpan(rl.trace, { forwarded: relayed.status });
      door.metrics.forwarded.inc({ outcome: String(relayed.status) });
      return { forwarded: relayed, message: undefined, status: relayed.status };
    }
    door.metrics.forwarded.inc({ outcome: 'replica-gone' });
    return failed(
      upstreamFailed(target.label, 'replica-gone', 'The replica holding this call stopped; start the call again without requestState'),
    );
  };
  return within(rl.trace, () => target.handle(validated, ctx)).then(
    (result): Answer => {
      record(rl, validated.method, callName, { resultType: result.resultType as string });
      endSpan(rl.trace, { result });
      return { message: { jsonrpc: '2.0', id: reqId, result }, status: 200 };
    },
    (e): Answer | Promise<Answer> => {
      if (!(e instanceof HeldElsewhere)) return failed(e);
      // The call lives on another replica: it answers, over the internal hop (never again from the hop).
      const held = e;
      return (
        req.hop !== undefined
          ? Promise.resolve(undefined)
          : within(rl.trace, () => forwardHeld(door, held.replica, target.upstream, text, c.req.raw.headers, caller.principal))
      ).then(forwarded, failed);
    },
  );
}

/** The target of `/mcp/NAME` (undefined for an unknown upstream), or of the federated `/mcp` (name undefined). */
function targetOf({ router, federation }: Door, name: string | undefined): McpTarget | undefined {
  if (name === undefined) {
    return (
      federation && {
        label: FEDERATED_LABEL,
        upstream: undefined,
        handle: (req, ctx) => federation.handle(req, ctx),
        listen: (req, who) => federation.listen(req, who),
      }
    );
  }
  if (!router.upstreams.has(name)) return undefined;
  return {
    label: name,
    upstream: name,
    handle: (req, ctx) => router.handle(name, req, ctx),
    listen: (req, who) => router.listen(name, req, who),
  };
}

/** The client's address and port, when the socket is still there (for the request's span). */
function clientEndpoint(c: Context): { address?: string; port?: number } | undefined {
  try {
    const { address, port } = getConnInfo(c).remote;
    return { address, port };
  } catch {
    return undefined;
  }
}

/** The SERVER span of a 2026-07-28 request (its parent from `params._meta`, else the HTTP headers). */
function serverSpanOf(
  c: Context,
  rpc: { id?: RequestId; method: string; params?: Record<string, unknown> },
  upstream: string,
): Traced | undefined {
  const rawMeta = rpc.params?._meta;
  const meta = rawMeta && typeof rawMeta === 'object' && !Array.isArray(rawMeta) ? (rawMeta as Record<string, unknown>) : undefined;
  return startServerSpan({
    method: rpc.method,
    params: rpc.params,
    upstream,
    id: rpc.id,
    protocolVersion: typeof meta?.[META_PROTOCOL_VERSION] === 'string' ? (meta[META_PROTOCOL_VERSION] as string) : undefined,
    meta,
    headers: c.req.raw.headers,
    client: clientEndpoint(c),
    inputRounds: true,
  });
}

/**
 * Calls `gone` when the client closes the connection before its response is finished (at once when it
 * has already); returns the function that stops watching. On @hono/node-server it watches the Node
 * response (cheap); else the request's abort signal.
 */
function onClientGone(c: Context, gone: () => void): () => void {
  const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
  if (outgoing) {
    const closed = () => {
      if (!outgoing.writableFinished) gone();
    };
    // Closed already (while the token was checked or the body read): 'close' will not come again.
    if (outgoing.destroyed) {
      closed();
      return () => {};
    }
    outgoing.once('close', closed);
    return () => void outgoing.off('close', closed);
  }
  const signal = c.req.raw.signal;
  if (signal.aborted) {
    gone();
    return () => {};
  }
  signal.addEventListener('abort', gone, { once: true });
  return () => signal.removeEventListener('abort', gone);
}

/**
 * Forwards a request to the live replica `replica` (for upstream `name`, or the federated endpoint).
 * @returns the owner's response, or undefined when it is gone (no heartbeat, or unreachable).
 * @throws StoreUnavailable when the registry cannot be read: whether the owner lives is not known,
 *   and the call may well still be held there (-32603 `store-unavailable`, not `replica-gone`).
 */
async function forwardHeld(
  { cfg, router, hop }: Door,
  replica: string,
  name: string | undefined,
  body: string,
  headers: Headers,
  principal: string,
): Promise<Response | undefined> {
  const secret = cfg.replicas.secret;
  const owner = secret ? await router.replicaInfo(replica) : undefined;
  if (!owner || !secret || owner.id === hop.replica) return undefined;
  return forwardToReplica(owner, name, body, headers, principal, secret);
}
