/**
 * OpenTelemetry traces, configured only by the standard `OTEL_*` environment variables.
 *
 * Tracing starts when the environment says where traces go: `OTEL_TRACES_EXPORTER` (other than
 * `none`), `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, and
 * `OTEL_SDK_DISABLED` is not `true`. Then {@link startTracing} starts the official Node SDK
 * (`@opentelemetry/sdk-node`), which reads every other `OTEL_*` variable itself (exporter and its
 * protocol, endpoint, headers and timeout, sampler, batch sizes, resource attributes, propagators).
 * Otherwise no SDK package is loaded and nothing registers with `@opentelemetry/api` (which the
 * Anthropic SDK imports anyway): the global tracer provider stays the API's no-op one, and every
 * hook below returns at once, making no span object.
 *
 * Spans (MCP semantic conventions, https://opentelemetry.io/docs/specs/semconv/gen-ai/mcp/, where
 * they have a name; `mcp.upstream`, `mcp.result.type`, `mcp.input.*`, `mcp.task.*` and
 * `mcp.error.reason` are the gateway's own):
 *
 * - `{method} {target}`, SERVER: one per downstream request. Its parent is the context in the
 *   request's `params._meta` (`traceparent`, `tracestate`, `baggage`; SEP-414), else the one in
 *   its HTTP headers; when both are there and differ, the HTTP one is a link.
 * - `{method} {target}`, CLIENT: one per upstream request (a legacy Exchange's call, a list request
 *   on a leased session, a 2026-07-28 hop request, a relayed request of a legacy session). Its
 *   context goes upstream in the HTTP `traceparent`/`tracestate` headers of HTTP upstreams
 *   ({@link traceHeaders}), and in `params._meta` of 2026-07-28 upstreams.
 * - `mcp.input_round`, INTERNAL: one per round that ended in `input_required`, from the start of
 *   the request to the answer, with the kinds and keys of its input requests.
 * - `mcp.task`, INTERNAL: one per task, from its creation to its terminal status, in a trace of its
 *   own with a link to the request that created it.
 */
import type * as Api from '@opentelemetry/api';
import { reasonOf } from '../protocol/errors.js';
import type { Attributes, Context, Link, Span, SpanContext, TextMapGetter } from '@opentelemetry/api';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';

/** Attribute names. Those of the semantic conventions are checked against `@opentelemetry/semantic-conventions` in the tests. */
export const ATTR = {
  // MCP semantic conventions (development status).
  MCP_METHOD_NAME: 'mcp.method.name',
  MCP_PROTOCOL_VERSION: 'mcp.protocol.version',
  MCP_RESOURCE_URI: 'mcp.resource.uri',
  MCP_SESSION_ID: 'mcp.session.id',
  GEN_AI_TOOL_NAME: 'gen_ai.tool.name',
  GEN_AI_PROMPT_NAME: 'gen_ai.prompt.name',
  GEN_AI_OPERATION_NAME: 'gen_ai.operation.name',
  JSONRPC_REQUEST_ID: 'jsonrpc.request.id',
  RPC_RESPONSE_STATUS_CODE: 'rpc.response.status_code',
  // General (stable) conventions.
  ERROR_TYPE: 'error.type',
  CLIENT_ADDRESS: 'client.address',
  CLIENT_PORT: 'client.port',
  SERVER_ADDRESS: 'server.address',
  SERVER_PORT: 'server.port',
  NETWORK_TRANSPORT: 'network.transport',
  NETWORK_PROTOCOL_NAME: 'network.protocol.name',
  SERVICE_NAME: 'service.name',
  SERVICE_VERSION: 'service.version',
  // The gateway's own.
  MCP_UPSTREAM: 'mcp.upstream',
  MCP_RESULT_TYPE: 'mcp.result.type',
  MCP_ERROR_REASON: 'mcp.error.reason',
  MCP_INPUT_ROUND: 'mcp.input.round',
  MCP_INPUT_KINDS: 'mcp.input.kinds',
  MCP_INPUT_KEYS: 'mcp.input.keys',
  MCP_INPUT_MODE: 'mcp.input.mode',
  MCP_INPUT_KEY: 'mcp.input.key',
  MCP_TASK_ID: 'mcp.task.id',
  MCP_TASK_STATUS: 'mcp.task.status',
} as const;

/** Span names of the gateway's own spans. */
export const SPAN = { INPUT_ROUND: 'mcp.input_round', TASK: 'mcp.task' } as const;

const SERVICE_NAME = 'mrtr-gateway';
const SERVICE_VERSION = '0.1.0';

/** The API, once tracing started; undefined while it is off (nothing is traced then). */
let api: typeof Api | undefined;

/** True while tracing runs (started by {@link startTracing} and not shut down). */
export function tracingActive(): boolean {
  return api !== undefined;
}

const set = (v: string | undefined) => v !== undefined && v.trim() !== '';

/**
 * Whether `env` asks for traces: an exporter (`OTEL_TRACES_EXPORTER` other than `none`) or an OTLP
 * endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, and the
 * SDK is not disabled (`OTEL_SDK_DISABLED=true`).
 */
export function tracingWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return false;
  const exporters = (env.OTEL_TRACES_EXPORTER ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (exporters.length) return exporters[0] !== 'none';
  return set(env.OTEL_EXPORTER_OTLP_ENDPOINT) || set(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
}

/** What {@link describeTracing} reports (no credentials: OTLP headers are never read here). */
export interface TracingSummary {
  exporter: string;
  endpoint?: string;
  protocol?: string;
  sampler: string;
  serviceName: string;
}

/** An endpoint without credentials or query. */
function bareUrl(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname}`;
  } catch {
    return '(not a URL)';
  }
}

/** Where traces go and how they are sampled, as the SDK reads `env` (for the start-up log line). */
export function describeTracing(env: NodeJS.ProcessEnv = process.env): TracingSummary {
  const exporter = (env.OTEL_TRACES_EXPORTER ?? '').trim() || 'otlp';
  const protocol = (env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? '').trim() || 'http/protobuf';
  let endpoint: string | undefined;
  if (exporter.split(',').includes('otlp')) {
    const signal = (env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT ?? '').trim();
    const base = (env.OTEL_EXPORTER_OTLP_ENDPOINT ?? '').trim();
    endpoint = bareUrl(
      signal ||
        (base
          ? protocol === 'grpc'
            ? base
            : `${base.replace(/\/$/, '')}/v1/traces`
          : protocol === 'grpc'
            ? 'http://localhost:4317'
            : 'http://localhost:4318/v1/traces'),
    );
  }
  return {
    exporter,
    ...(endpoint ? { endpoint, protocol } : {}),
    sampler: (env.OTEL_TRACES_SAMPLER ?? '').trim() || 'parentbased_always_on',
    serviceName: (env.OTEL_SERVICE_NAME ?? '').trim() || SERVICE_NAME,
  };
}

/** A running tracing set-up. */
export interface Tracing {
  /** Exports the spans still buffered and stops the SDK; resolves within `timeoutMs` whatever the exporter does. */
  shutdown(timeoutMs?: number): Promise<void>;
}

/**
 * Starts the OpenTelemetry Node SDK when `env` asks for traces ({@link tracingWanted}); the SDK
 * then reads its configuration from `process.env`. Only traces: no metric readers, no log
 * processors, no auto-instrumentation. The resource is `service.name` `mrtr-gateway` (unless
 * `OTEL_SERVICE_NAME` or `OTEL_RESOURCE_ATTRIBUTES` say otherwise) with the SDK's detectors.
 * @param opts.spanProcessors span processors to use instead of the exporters `OTEL_*` configure
 *   (tests: an in-memory exporter); tracing then starts whatever `env` says.
 * @returns the running set-up, or undefined when tracing stays off.
 */
export async function startTracing(opts: { env?: NodeJS.ProcessEnv; spanProcessors?: SpanProcessor[] } = {}): Promise<Tracing | undefined> {
  if (api) throw new Error('tracing already started');
  if (!opts.spanProcessors && !tracingWanted(opts.env ?? process.env)) return undefined;
  const [apiModule, { NodeSDK }, { defaultResource, resourceFromAttributes }] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-node'),
    import('@opentelemetry/resources'),
  ]);
  const sdk = new NodeSDK({
    // Detected attributes (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES, process, host) come on top.
    resource: defaultResource().merge(
      resourceFromAttributes({ [ATTR.SERVICE_NAME]: SERVICE_NAME, [ATTR.SERVICE_VERSION]: SERVICE_VERSION }),
    ),
    metricReaders: [],
    logRecordProcessors: [],
    instrumentations: [],
    ...(opts.spanProcessors ? { spanProcessors: opts.spanProcessors } : {}),
  });
  sdk.start();
  api = apiModule;
  let stopped: Promise<void> | undefined;
  return {
    shutdown: (timeoutMs = 5000) => {
      stopped ??= (async () => {
        api = undefined;
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([sdk.shutdown().catch(() => {}), new Promise<void>((r) => (timer = setTimeout(r, timeoutMs)))]);
        clearTimeout(timer);
      })();
      return stopped;
    },
  };
}

/** A span and the context it is active in. */
export interface Traced {
  span: Span;
  ctx: Context;
}

/** Runs `fn` with `t`'s span active (so child spans and upstream headers refer to it); just `fn()` without a span. */
export function within<T>(t: Traced | undefined, fn: () => T): T {
  if (!t || !api) return fn();
  return api.context.with(t.ctx, fn);
}

/** Minimal header access (Fetch `Headers` fits). */
export interface HeaderGetter {
  get(name: string): string | null;
}

/** Request headers as a plain object (the v1 SDK's `requestInfo.headers`), lower-case names. */
export type PlainHeaders = Record<string, string | string[] | undefined>;

/** Reads request headers for the configured propagators (`OTEL_PROPAGATORS`: W3C by default, B3 or Jaeger too). */
const headerGetter: TextMapGetter<HeaderGetter | PlainHeaders> = {
  get(h, key) {
    const name = key.toLowerCase();
    if (typeof (h as HeaderGetter).get === 'function') return (h as HeaderGetter).get(name) ?? undefined;
    return (h as PlainHeaders)[name];
  },
  keys(h) {
    if (typeof (h as HeaderGetter).get === 'function') return [...((h as Headers).keys?.() ?? [])];
    return Object.keys(h);
  },
};

/**
 * The parent of a server span: the context in `_meta` when it holds a valid `traceparent`, with the
 * HTTP headers' context as a link when that differs (MCP semantic conventions §Context
 * propagation); else the HTTP headers' context. Baggage from the headers is kept when `_meta` has
 * none.
 */
function remoteParent(
  a: typeof Api,
  meta: Record<string, unknown> | undefined,
  headers: HeaderGetter | PlainHeaders | undefined,
): { parent: Context; links: Link[] } {
  const root = a.ROOT_CONTEXT;
  const fromHeaders = headers ? a.propagation.extract(root, headers, headerGetter) : root;
  if (!meta || typeof meta.traceparent !== 'string') return { parent: fromHeaders, links: [] };
  let fromMeta = a.propagation.extract(root, meta);
  const m = a.trace.getSpanContext(fromMeta);
  if (!m || !a.trace.isSpanContextValid(m)) return { parent: fromHeaders, links: [] };
  const h = a.trace.getSpanContext(fromHeaders);
  const links = h && a.trace.isSpanContextValid(h) && (h.traceId !== m.traceId || h.spanId !== m.spanId) ? [{ context: h }] : [];
  const baggage = a.propagation.getBaggage(fromHeaders);
  if (baggage && !a.propagation.getBaggage(fromMeta)) fromMeta = a.propagation.setBaggage(fromMeta, baggage);
  return { parent: fromMeta, links };
}

/** The low-cardinality target of a span name: the tool or prompt name (never a resource URI). */
function targetOf(method: string, params: Record<string, unknown> | undefined): string | undefined {
  if ((method === 'tools/call' || method === 'prompts/get') && typeof params?.name === 'string') return params.name;
  return undefined;
}

/** `{method} {target}`, or `{method}`. */
function spanName(method: string, params: Record<string, unknown> | undefined): string {
  const target = targetOf(method, params);
  return target ? `${method} ${target}` : method;
}

/** The MCP attributes of a request: method, tool or prompt name, resource URI, task id. */
function requestAttributes(method: string, params: Record<string, unknown> | undefined, upstream: string): Attributes {
  const attrs: Attributes = { [ATTR.MCP_METHOD_NAME]: method, [ATTR.MCP_UPSTREAM]: upstream };
  if (method === 'tools/call' && typeof params?.name === 'string') {
    attrs[ATTR.GEN_AI_TOOL_NAME] = params.name;
    attrs[ATTR.GEN_AI_OPERATION_NAME] = 'execute_tool';
  } else if (method === 'prompts/get' && typeof params?.name === 'string') attrs[ATTR.GEN_AI_PROMPT_NAME] = params.name;
  else if (method.startsWith('resources/') && typeof params?.uri === 'string') attrs[ATTR.MCP_RESOURCE_URI] = params.uri;
  else if (method.startsWith('tasks/') && typeof params?.taskId === 'string') attrs[ATTR.MCP_TASK_ID] = params.taskId;
  return attrs;
}

const tracer = (a: typeof Api) => a.trace.getTracer(SERVICE_NAME, SERVICE_VERSION);

/** What a downstream request is, for its server span. */
export interface ServerSpanInit {
  method: string;
  /** The request's params (`_meta` included or not). */
  params?: Record<string, unknown>;
  upstream: string;
  /** The JSON-RPC id (not recorded when absent). */
  id?: string | number | null;
  protocolVersion?: string;
  /** The request's `params._meta`, searched for `traceparent`, `tracestate` and `baggage`. */
  meta?: Record<string, unknown>;
  /** The HTTP request's headers, searched for `traceparent`, `tracestate` and `baggage`. */
  headers?: HeaderGetter | PlainHeaders;
  /** The client's address and port. */
  client?: { address?: string; port?: number };
  /** The legacy session id (`Mcp-Session-Id`). */
  sessionId?: string;
  /** A 2026-07-28 request, which may be a round of input_required (`mcp.input.round` 0 without `requestState`). */
  inputRounds?: boolean;
}

/** Starts the SERVER span of one downstream request (see the module doc for its parent); undefined while tracing is off. */
export function startServerSpan(init: ServerSpanInit): Traced | undefined {
  const a = api;
  if (!a) return undefined;
  const { parent, links } = remoteParent(a, init.meta, init.headers);
  const attributes = requestAttributes(init.method, init.params, init.upstream);
  attributes[ATTR.NETWORK_TRANSPORT] = 'tcp';
  attributes[ATTR.NETWORK_PROTOCOL_NAME] = 'http';
  if (init.id !== undefined && init.id !== null) attributes[ATTR.JSONRPC_REQUEST_ID] = String(init.id);
  if (init.protocolVersion) attributes[ATTR.MCP_PROTOCOL_VERSION] = init.protocolVersion;
  if (init.client?.address) attributes[ATTR.CLIENT_ADDRESS] = init.client.address;
  if (init.client?.port) attributes[ATTR.CLIENT_PORT] = init.client.port;
  if (init.sessionId) attributes[ATTR.MCP_SESSION_ID] = init.sessionId;
  // A first request (no requestState) is round 0; a retry's round is set once its state is opened.
  if (
    init.inputRounds &&
    init.params &&
    (init.method === 'tools/call' || init.method === 'prompts/get' || init.method === 'resources/read') &&
    init.params.requestState === undefined
  ) {
    attributes[ATTR.MCP_INPUT_ROUND] = 0;
  }
  const span = tracer(a).startSpan(spanName(init.method, init.params), { kind: a.SpanKind.SERVER, attributes, links }, parent);
  return { span, ctx: a.trace.setSpan(parent, span) };
}

/** Where an upstream is: its transport and, for HTTP, its URL. */
export interface UpstreamEndpoint {
  transport: 'stdio' | 'streamable-http' | 'sse';
  url?: string;
}

/** What an upstream request is, for its client span. */
export interface ClientSpanInit {
  method: string;
  params?: Record<string, unknown>;
  upstream: string;
  endpoint: UpstreamEndpoint;
  /** The JSON-RPC id used upstream, when the gateway knows it. */
  id?: string | number;
  /** The revision spoken upstream (or a function giving it, asked only while tracing). */
  protocolVersion?: string | (() => string | undefined);
}

/** Starts the CLIENT span of one upstream request, a child of the active span; undefined while tracing is off. */
export function startClientSpan(init: ClientSpanInit): Traced | undefined {
  const a = api;
  if (!a) return undefined;
  const attributes = requestAttributes(init.method, init.params, init.upstream);
  if (init.endpoint.transport === 'stdio') attributes[ATTR.NETWORK_TRANSPORT] = 'pipe';
  else {
    attributes[ATTR.NETWORK_TRANSPORT] = 'tcp';
    attributes[ATTR.NETWORK_PROTOCOL_NAME] = 'http';
    try {
      const u = new URL(init.endpoint.url ?? '');
      attributes[ATTR.SERVER_ADDRESS] = u.hostname.replace(/^\[|\]$/g, '');
      attributes[ATTR.SERVER_PORT] = Number(u.port) || (u.protocol === 'https:' ? 443 : 80);
    } catch {
      /* no URL */
    }
  }
  if (init.id !== undefined) attributes[ATTR.JSONRPC_REQUEST_ID] = String(init.id);
  const version = typeof init.protocolVersion === 'function' ? init.protocolVersion() : init.protocolVersion;
  if (version) attributes[ATTR.MCP_PROTOCOL_VERSION] = version;
  const parent = a.context.active();
  const span = tracer(a).startSpan(spanName(init.method, init.params), { kind: a.SpanKind.CLIENT, attributes }, parent);
  return { span, ctx: a.trace.setSpan(parent, span) };
}

/** How a request ended: its result, its JSON-RPC error, or a failure without an answer. */
export type Outcome =
  | { result: Record<string, unknown> }
  | { error: { code: number; message: string; data?: unknown } }
  | { failed: string; message: string }
  | { forwarded: number };

/**
 * Ends a server or client span with the request's outcome: `mcp.result.type`
 * (complete, input_required, task) and, for a task, `mcp.task.id`; for a JSON-RPC error
 * `error.type` and `rpc.response.status_code` (the code), `mcp.error.reason` (the gateway's
 * `data.reason`) and status ERROR with the message; a tool result with `isError` gets `error.type`
 * `tool_error`; a failure without an answer (timeout, unreachable) gets that as `error.type`.
 */
export function endSpan(t: Traced | undefined, outcome: Outcome): void {
  const a = api;
  if (!t || !a) return;
  const { span } = t;
  if ('result' in outcome) {
    const r = outcome.result;
    const type = typeof r.resultType === 'string' ? r.resultType : 'complete';
    span.setAttribute(ATTR.MCP_RESULT_TYPE, type);
    if (type === 'task' && typeof r.taskId === 'string') span.setAttribute(ATTR.MCP_TASK_ID, r.taskId);
    if (r.isError === true) {
      span.setAttribute(ATTR.ERROR_TYPE, 'tool_error');
      span.setStatus({ code: a.SpanStatusCode.ERROR, message: 'tool_error' });
    }
  } else if ('error' in outcome) {
    const { code, message, data } = outcome.error;
    span.setAttribute(ATTR.ERROR_TYPE, String(code));
    span.setAttribute(ATTR.RPC_RESPONSE_STATUS_CODE, String(code));
    const reason = reasonOf(data);
    if (reason !== undefined) span.setAttribute(ATTR.MCP_ERROR_REASON, reason);
    span.setStatus({ code: a.SpanStatusCode.ERROR, message });
  } else if ('failed' in outcome) {
    span.setAttribute(ATTR.ERROR_TYPE, outcome.failed);
    span.setStatus({ code: a.SpanStatusCode.ERROR, message: outcome.message });
  } else {
    span.setAttribute(ATTR.MCP_RESULT_TYPE, 'forwarded');
  }
  span.end();
}

/** Sets the input round of the request whose span is active (a retry, once its requestState is open). */
export function noteInputRound(round: number): void {
  api?.trace.getActiveSpan()?.setAttribute(ATTR.MCP_INPUT_ROUND, round);
}

/** Adds an event to `t`'s span. */
export function spanEvent(t: Traced | undefined, name: string, attributes?: Attributes): void {
  if (t && api) t.span.addEvent(name, attributes);
}

/** What one round that ended in `input_required` was. */
export interface InputRoundInit {
  /** When the round started: `performance.now()` or epoch ms. */
  start: number;
  /** The round this input_required opens (the retry answering it carries the same number). */
  round: number;
  upstream: string;
  method: string;
  /** The tool or prompt name, or the resource URI. */
  name?: string;
  inputRequests: Record<string, { method: string }>;
  /** park, replay (the bridge) or pass-through (a 2026-07-28 upstream asked). */
  mode: 'park' | 'replay' | 'pass-through';
}

/**
 * Records a round that ended in `input_required`: an INTERNAL span `mcp.input_round`, child of the
 * active span, from `start` to now, with the kinds (`elicitation`, `sampling`, `roots`) and keys of
 * its input requests.
 */
export function recordInputRound(init: InputRoundInit): void {
  const a = api;
  if (!a) return;
  const keys = Object.keys(init.inputRequests);
  const kinds = [...new Set(Object.values(init.inputRequests).map((r) => r.method.split('/')[0]!))];
  const attributes = requestAttributes(
    init.method,
    init.method === 'resources/read' ? { uri: init.name } : { name: init.name },
    init.upstream,
  );
  attributes[ATTR.MCP_INPUT_ROUND] = init.round;
  attributes[ATTR.MCP_INPUT_KINDS] = kinds;
  attributes[ATTR.MCP_INPUT_KEYS] = keys;
  attributes[ATTR.MCP_INPUT_MODE] = init.mode;
  tracer(a).startSpan(SPAN.INPUT_ROUND, { kind: a.SpanKind.INTERNAL, attributes, startTime: init.start }, a.context.active()).end();
}

/** What a task is, for its span. */
export interface TaskSpanInit {
  taskId: string;
  upstream: string;
  method: string;
  /** The tool's name. */
  name?: string;
  ttlMs: number;
}

/**
 * Starts the span of a task (`mcp.task`, INTERNAL), the root of a trace of its own with a link to
 * the active span (the request that created the task); undefined while tracing is off.
 */
export function startTaskSpan(init: TaskSpanInit): Traced | undefined {
  const a = api;
  if (!a) return undefined;
  const creator: SpanContext | undefined = a.trace.getActiveSpan()?.spanContext();
  const attributes = requestAttributes(init.method, { name: init.name }, init.upstream);
  attributes[ATTR.MCP_TASK_ID] = init.taskId;
  attributes['mcp.task.ttl_ms'] = init.ttlMs;
  const span = tracer(a).startSpan(SPAN.TASK, {
    kind: a.SpanKind.INTERNAL,
    attributes,
    root: true,
    links: creator && a.trace.isSpanContextValid(creator) ? [{ context: creator }] : [],
  });
  return { span, ctx: a.trace.setSpan(a.ROOT_CONTEXT, span) };
}

/** Records a task's new status: an event `mcp.task.status`, and for a terminal one the end of its span (failed: status ERROR). */
export function taskStatus(
  t: Traced | undefined,
  status: string,
  error?: { code: number; message: string; data?: unknown },
  terminal = false,
): void {
  const a = api;
  if (!t || !a) return;
  t.span.addEvent('mcp.task.status', { [ATTR.MCP_TASK_STATUS]: status });
  if (!terminal) return;
  t.span.setAttribute(ATTR.MCP_TASK_STATUS, status);
  if (error) endSpan(t, { error });
  else t.span.end();
}

/**
 * The trace context headers (`traceparent`, `tracestate`, `baggage` as the configured propagators
 * write them) of the active span, added to `headers` for an upstream HTTP request. Returns
 * `headers` itself while tracing is off or no span is active.
 */
export function traceHeaders<H>(headers: H): H | Headers {
  const a = api;
  if (!a) return headers;
  const ctx = a.context.active();
  if (!a.trace.getSpan(ctx)) return headers;
  const out = new Headers(headers as HeadersInit | undefined);
  out.delete('traceparent');
  out.delete('tracestate');
  a.propagation.inject(ctx, out, { set: (h, k, v) => h.set(k, v) });
  return out;
}

/**
 * Adds the trace context headers (`traceparent`, `tracestate`, `baggage` as the configured
 * propagators write them) of the active span to `headers`, a plain object with lower-case names as
 * undici's `request` takes, replacing any there. Leaves `headers` as it is while tracing is off or
 * no span is active.
 * @returns `headers`.
 */
export function addTraceHeaders(headers: Record<string, string>): Record<string, string> {
  const a = api;
  if (!a) return headers;
  const ctx = a.context.active();
  if (!a.trace.getSpan(ctx)) return headers;
  delete headers.traceparent;
  delete headers.tracestate;
  a.propagation.inject(ctx, headers, { set: (h, k, v) => (h[k.toLowerCase()] = v) });
  return headers;
}

/**
 * `meta` with the active span's context in `traceparent`/`tracestate` (and `baggage`), replacing
 * what the client put there, for a 2026-07-28 upstream (SEP-414). Returns `meta` itself while
 * tracing is off or no span is active.
 */
export function traceMeta(meta: Record<string, unknown>): Record<string, unknown> {
  const a = api;
  if (!a) return meta;
  const ctx = a.context.active();
  if (!a.trace.getSpan(ctx)) return meta;
  const { traceparent: _p, tracestate: _s, ...out } = meta;
  a.propagation.inject(ctx, out, { set: (c, k, v) => (c[k] = v) });
  return out;
}

/** The trace and span id of `t` (for the request log line). */
export function traceIds(t: Traced | undefined): { traceId: string; spanId: string } | undefined {
  if (!t) return undefined;
  const c = t.span.spanContext();
  return { traceId: c.traceId, spanId: c.spanId };
}
