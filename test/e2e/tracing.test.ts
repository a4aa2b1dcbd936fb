/**
 * Traces in process, with the SDK's in-memory exporter: the spans of a call with an input round
 * (request, upstream call, round, then the retry), their links to the client's trace context
 * (HTTP headers and `_meta`), the trace context the upstreams receive (a legacy Streamable HTTP
 * or HTTP+SSE upstream: headers; a 2026-07-28 upstream: headers and `_meta`), a task's span, and the spans of a
 * legacy client's session. Then a gateway process configured by `OTEL_*` alone, exporting over
 * OTLP/HTTP (JSON and protobuf) to a collector stand-in on 127.0.0.1, and the same process with
 * tracing off.
 */
import { fileURLToPath } from 'node:url';
import { SpanKind, SpanStatusCode } from '@opentelemetry/api';
import { InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { ReadableSpan } from '@opentelemetry/sdk-trace-base';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTracing, tracingActive, type Tracing } from '../../src/observability/tracing.js';
import { eventually, FixtureLog, startFixtureHttp } from '../helpers/fixture.js';
import { rpc, startGateway, envelope, type TestGateway } from '../helpers/gateway.js';
import { spawnListening, type SpawnedServer } from '../helpers/processes.js';
import { startCli, type CliGateway } from '../helpers/cli.js';
import { startOtlpCollector, type OtlpCollector } from '../helpers/otlp.js';

const MODERN = fileURLToPath(new URL('../fixtures/modern-server.ts', import.meta.url));
const ELICIT = { elicitation: {} };
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };

/** A client's trace context: trace id, its span id, the traceparent header. */
function clientContext(traceId: string, spanId: string): { traceId: string; spanId: string; traceparent: string } {
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}
const CLIENT = clientContext('4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7');
const RETRY = clientContext('4bf92f3577b34da6a3ce929d0e0e4736', 'b7ad6b7169203331');

describe('traces (in-memory exporter)', () => {
  const exporter = new InMemorySpanExporter();
  let tracing: Tracing | undefined;
  let legacy: SpawnedServer & { config: Record<string, unknown> };
  let sse: SpawnedServer & { config: Record<string, unknown> };
  let modern: SpawnedServer;
  let gw: TestGateway;
  const legacyLog = new FixtureLog();
  const sseLog = new FixtureLog();
  const modernLog = new FixtureLog();

  const spans = () => exporter.getFinishedSpans();
  const named = (name: string) => spans().filter((s) => s.name === name);
  const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
  const idOf = (s: ReadableSpan) => s.spanContext().spanId;
  const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

  beforeAll(async () => {
    tracing = await startTracing({ env: {}, spanProcessors: [new SimpleSpanProcessor(exporter)] });
    [legacy, sse, modern] = await Promise.all([
      startFixtureHttp('http', legacyLog),
      startFixtureHttp('sse', sseLog),
      spawnListening(['--import', 'tsx', MODERN, 'http'], { FIXTURE_LOG: modernLog.file }),
    ]);
    gw = await startGateway({
      upstreams: {
        legacy: { ...legacy.config, protocol: 'legacy', tasks: { tools: { slow: { taskAfterMs: 0 } } } },
        sse: { ...sse.config, protocol: 'legacy' },
        replay: { ...legacy.config, protocol: 'legacy', input: { mode: 'replay' } },
        modern: { transport: 'streamable-http', url: `http://127.0.0.1:${modern.port}/mcp`, protocol: '2026-07-28' },
      },
    });
  });
  afterAll(async () => {
    await gw?.close();
    await Promise.all([legacy?.stop(), sse?.stop(), modern?.stop()]);
    await tracing?.shutdown();
  });
  beforeEach(() => exporter.reset());

  it('starts with span processors given, whatever the environment', () => {
    expect(tracing).toBeDefined();
    expect(tracingActive()).toBe(true);
  });

  it('one call with an input round: request, upstream call and round spans in the client trace, then the retry', async () => {
    const url = gw.url('legacy');
    const first = await rpc(
      url,
      'tools/call',
      { name: 'ask_name', arguments: {} },
      { caps: ELICIT, id: 'call-1', headers: { traceparent: CLIENT.traceparent, tracestate: 'vendor=1' } },
    );
    expect(first.body.result.resultType).toBe('input_required');

    // The first request's span: a child of the client's span, in its trace.
    const [req1] = named('tools/call ask_name').filter((s) => s.kind === SpanKind.SERVER);
    expect(req1).toBeDefined();
    expect(traceOf(req1!)).toBe(CLIENT.traceId);
    expect(parentOf(req1!)).toBe(CLIENT.spanId);
    expect(req1!.spanContext().traceState?.get('vendor')).toBe('1');
    expect(req1!.attributes).toMatchObject({
      'mcp.method.name': 'tools/call',
      'gen_ai.tool.name': 'ask_name',
      'gen_ai.operation.name': 'execute_tool',
      'mcp.upstream': 'legacy',
      'mcp.protocol.version': '2026-07-28',
      'jsonrpc.request.id': 'call-1',
      'mcp.result.type': 'input_required',
      'mcp.input.round': 0,
      'network.transport': 'tcp',
      'client.address': '127.0.0.1',
    });
    expect(req1!.status.code).toBe(SpanStatusCode.UNSET);

    // The round that ended in input_required.
    const [round] = named('mcp.input_round');
    expect(round).toBeDefined();
    expect(parentOf(round!)).toBe(idOf(req1!));
    expect(round!.attributes).toMatchObject({
      'mcp.input.round': 1,
      'mcp.input.kinds': ['elicitation'],
      'mcp.input.keys': ['elicitation-1'],
      'mcp.input.mode': 'park',
      'gen_ai.tool.name': 'ask_name',
    });

    // The upstream call is still parked: its span ends with the call.
    expect(spans().filter((s) => s.kind === SpanKind.CLIENT)).toHaveLength(0);

    // The retry, with its own span of the client's trace in _meta (and another in the headers).
    const retry = await rpc(
      url,
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Ada' } } },
      },
      { id: 'call-2', headers: { traceparent: CLIENT.traceparent }, meta: envelope(ELICIT, { traceparent: RETRY.traceparent }) },
    );
    expect(retry.body.result.content[0].text).toBe('Hello, Ada!');
    const req2 = named('tools/call ask_name').find((s) => s.kind === SpanKind.SERVER && s.attributes['jsonrpc.request.id'] === 'call-2')!;
    expect(traceOf(req2)).toBe(CLIENT.traceId);
    expect(parentOf(req2)).toBe(RETRY.spanId);
    // The HTTP context differs from _meta's: it is a link.
    expect(req2.links.map((l) => l.context.spanId)).toEqual([CLIENT.spanId]);
    expect(req2.attributes).toMatchObject({ 'mcp.input.round': 1, 'mcp.result.type': 'complete', 'jsonrpc.request.id': 'call-2' });

    // The upstream call: a client span under the first request, ended with the result.
    const up = await vitestEventually(() => named('tools/call ask_name').find((s) => s.kind === SpanKind.CLIENT));
    expect(traceOf(up)).toBe(CLIENT.traceId);
    expect(parentOf(up)).toBe(idOf(req1!));
    expect(up.attributes).toMatchObject({
      'mcp.method.name': 'tools/call',
      'gen_ai.tool.name': 'ask_name',
      'mcp.upstream': 'legacy',
      'mcp.result.type': 'complete',
      'network.transport': 'tcp',
      'server.address': '127.0.0.1',
      'server.port': legacy.port,
    });
    expect(up.attributes['mcp.protocol.version']).toMatch(/^\d{4}-\d{2}-\d{2}$/);
    expect(up.events.map((e) => [e.name, e.attributes?.['mcp.input.key']])).toEqual([['mcp.input.request', 'elicitation-1']]);

    // The legacy HTTP upstream received the upstream span's context in the traceparent header.
    const posted = legacyLog.events().filter((e) => e.event === 'http' && e.rpcMethod === 'tools/call');
    expect(posted.at(-1)?.traceparent).toBe(`00-${CLIENT.traceId}-${idOf(up)}-01`);
    expect(posted.at(-1)?.tracestate).toBe('vendor=1');
    // And in the call's params._meta (what a stdio upstream reads).
    expect(legacyLog.of('call', 'ask_name').at(-1)?.traceparent).toBe(`00-${CLIENT.traceId}-${idOf(up)}-01`);
  });

  it("an HTTP+SSE upstream gets the upstream call span's context in the traceparent header of its POST", async () => {
    const seen = sseLog.of('http').length;
    const r = await rpc(
      gw.url('sse'),
      'tools/call',
      { name: 'slow', arguments: { ms: 10, steps: 1 } },
      { id: 'sse-1', headers: { traceparent: CLIENT.traceparent, tracestate: 'vendor=2' } },
    );
    expect(r.body.result.content[0].text).toBe('slept 10ms');
    const req = named('tools/call slow').find((s) => s.kind === SpanKind.SERVER)!;
    const up = await vitestEventually(() => named('tools/call slow').find((s) => s.kind === SpanKind.CLIENT));
    expect(parentOf(req)).toBe(CLIENT.spanId);
    expect(parentOf(up)).toBe(idOf(req));
    expect(up.attributes).toMatchObject({ 'mcp.upstream': 'sse', 'server.address': '127.0.0.1', 'server.port': sse.port });
    // The call went as a POST to the SSE transport's message endpoint, with the span's context.
    const posted = sseLog
      .of('http')
      .slice(seen)
      .filter((e) => e.rpcMethod === 'tools/call');
    expect(posted).toHaveLength(1);
    expect(posted[0]).toMatchObject({ httpMethod: 'POST', traceparent: `00-${CLIENT.traceId}-${idOf(up)}-01`, tracestate: 'vendor=2' });
  });

  it('replay mode: each round is an upstream call of its own, ended as input_required, not as the cancellation it is', async () => {
    const url = gw.url('replay');
    const first = await rpc(
      url,
      'tools/call',
      { name: 'ask_name', arguments: {} },
      { caps: ELICIT, id: 'r-1', headers: { traceparent: CLIENT.traceparent } },
    );
    expect(first.body.result.resultType).toBe('input_required');
    const req1 = named('tools/call ask_name').find((s) => s.kind === SpanKind.SERVER)!;
    const call1 = await vitestEventually(() => named('tools/call ask_name').find((s) => s.kind === SpanKind.CLIENT));
    expect(parentOf(call1)).toBe(idOf(req1));
    expect(call1.attributes['mcp.result.type']).toBe('input_required');
    expect(call1.attributes['error.type']).toBeUndefined();
    expect(call1.status.code).toBe(SpanStatusCode.UNSET);
    expect(named('mcp.input_round')[0]!.attributes).toMatchObject({ 'mcp.input.round': 1, 'mcp.input.mode': 'replay' });

    exporter.reset();
    const retry = await rpc(
      url,
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Ada' } } },
      },
      { caps: ELICIT, id: 'r-2', headers: { traceparent: RETRY.traceparent } },
    );
    expect(retry.body.result.content[0].text).toBe('Hello, Ada!');
    const req2 = named('tools/call ask_name').find((s) => s.kind === SpanKind.SERVER)!;
    const call2 = named('tools/call ask_name').find((s) => s.kind === SpanKind.CLIENT)!;
    expect(req2.attributes['mcp.input.round']).toBe(1);
    expect(parentOf(call2)).toBe(idOf(req2));
    expect(traceOf(call2)).toBe(CLIENT.traceId);
    expect(call2.attributes['mcp.result.type']).toBe('complete');
  });

  it('a request without trace context starts a trace of its own; errors carry their code', async () => {
    const r = await rpc(gw.url('legacy'), 'tools/call', { name: 'ask_name', arguments: {}, requestState: 'not-a-state' }, { caps: ELICIT });
    expect(r.body.error.code).toBe(-32602);
    const [span] = named('tools/call ask_name');
    expect(span!.parentSpanContext).toBeUndefined();
    expect(span!.attributes).toMatchObject({ 'error.type': '-32602', 'rpc.response.status_code': '-32602' });
    expect(span!.status.code).toBe(SpanStatusCode.ERROR);
  });

  it('a 2026-07-28 upstream gets the hop span context in its headers and in _meta; the client _meta traceparent is replaced', async () => {
    const url = gw.url('modern');
    const first = await rpc(
      url,
      'tools/call',
      { name: 'two_round', arguments: { tag: 't' } },
      { caps: ELICIT, meta: envelope(ELICIT, { traceparent: CLIENT.traceparent }) },
    );
    expect(first.body.result.resultType).toBe('input_required');
    const server = named('tools/call two_round').find((s) => s.kind === SpanKind.SERVER)!;
    const hop = named('tools/call two_round').find((s) => s.kind === SpanKind.CLIENT)!;
    expect(parentOf(server)).toBe(CLIENT.spanId);
    expect(parentOf(hop)).toBe(idOf(server));
    expect(hop.attributes).toMatchObject({
      'mcp.protocol.version': '2026-07-28',
      'mcp.result.type': 'input_required',
      'server.port': modern.port,
    });
    const expected = `00-${CLIENT.traceId}-${idOf(hop)}-01`;
    expect(modernLog.of('call', 'two_round').at(-1)?.traceparent).toBe(expected);
    expect(
      modernLog
        .events()
        .filter((e) => e.event === 'http' && e.mcpMethodHeader === 'tools/call')
        .at(-1)?.traceparent,
    ).toBe(expected);
    const [round] = named('mcp.input_round');
    expect(round!.attributes).toMatchObject({
      'mcp.input.round': 1,
      'mcp.input.mode': 'pass-through',
      'mcp.input.kinds': ['elicitation'],
      'mcp.input.keys': ['name'],
    });

    // The retry's span knows its round.
    exporter.reset();
    const second = await rpc(
      url,
      'tools/call',
      {
        name: 'two_round',
        arguments: { tag: 't' },
        requestState: first.body.result.requestState,
        inputResponses: { name: { action: 'accept', content: { name: 'Ada' } } },
      },
      { caps: ELICIT },
    );
    expect(second.body.result.resultType).toBe('input_required');
    expect(named('tools/call two_round').find((s) => s.kind === SpanKind.SERVER)!.attributes['mcp.input.round']).toBe(1);
    expect(named('mcp.input_round')[0]!.attributes['mcp.input.round']).toBe(2);
  });

  it('a task has a span of its own, from creation to its terminal status, linked to the request that created it', async () => {
    const url = gw.url('legacy');
    const r = await rpc(
      url,
      'tools/call',
      { name: 'slow', arguments: { ms: 200, steps: 2 } },
      { caps: TASKS, headers: { traceparent: CLIENT.traceparent } },
    );
    expect(r.body.result.resultType).toBe('task');
    const taskId = r.body.result.taskId as string;
    const creator = named('tools/call slow').find((s) => s.kind === SpanKind.SERVER)!;
    expect(creator.attributes).toMatchObject({ 'mcp.result.type': 'task', 'mcp.task.id': taskId });
    const task = await vitestEventually(() => named('mcp.task')[0]);
    expect(task.parentSpanContext).toBeUndefined();
    expect(traceOf(task)).not.toBe(CLIENT.traceId);
    expect(task.links.map((l) => l.context.spanId)).toEqual([idOf(creator)]);
    expect(task.attributes).toMatchObject({
      'mcp.task.id': taskId,
      'mcp.task.status': 'completed',
      'gen_ai.tool.name': 'slow',
      'mcp.upstream': 'legacy',
    });
    expect(task.events.map((e) => e.attributes?.['mcp.task.status'])).toEqual(['working', 'completed']);

    const get = await rpc(url, 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
    expect(get.body.result.status).toBe('completed');
    expect(named('tasks/get')[0]!.attributes['mcp.task.id']).toBe(taskId);
  });

  it('a legacy client session: a server span per request and a client span for the relayed request', async () => {
    const client = new Client({ name: 'legacy-client', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    const transport = new StreamableHTTPClientTransport(new URL(gw.url('legacy')), {
      requestInit: { headers: { traceparent: CLIENT.traceparent } },
    });
    await client.connect(transport);
    try {
      const listed = await client.listTools();
      expect(listed.tools.length).toBeGreaterThan(0);
    } finally {
      await client.close();
    }
    const server = named('tools/list').find((s) => s.kind === SpanKind.SERVER)!;
    const relayed = named('tools/list').find((s) => s.kind === SpanKind.CLIENT)!;
    expect(parentOf(server)).toBe(CLIENT.spanId);
    expect(parentOf(relayed)).toBe(idOf(server));
    expect(server.attributes['mcp.session.id']).toBe(transport.sessionId);
    expect(server.attributes['mcp.protocol.version']).toBe(relayed.attributes['mcp.protocol.version']);
    const posted = legacyLog.events().filter((e) => e.event === 'http' && e.rpcMethod === 'tools/list');
    expect(posted.at(-1)?.traceparent).toBe(`00-${CLIENT.traceId}-${idOf(relayed)}-01`);
  });

  it('a legacy client session on a 2026-07-28 upstream (reverse bridge): server span, then the hop span whose context the upstream receives', async () => {
    const client = new Client({ name: 'legacy-client', version: '1.0.0' }, { capabilities: {} });
    const transport = new StreamableHTTPClientTransport(new URL(gw.url('modern')), {
      requestInit: { headers: { traceparent: CLIENT.traceparent } },
    });
    await client.connect(transport);
    try {
      expect((await client.listTools()).tools.length).toBeGreaterThan(0);
    } finally {
      await client.close();
    }
    const server = named('tools/list').find((s) => s.kind === SpanKind.SERVER)!;
    const hop = named('tools/list').find((s) => s.kind === SpanKind.CLIENT)!;
    expect(parentOf(server)).toBe(CLIENT.spanId);
    expect(parentOf(hop)).toBe(idOf(server));
    expect(hop.attributes).toMatchObject({ 'mcp.upstream': 'modern', 'mcp.protocol.version': '2026-07-28', 'server.port': modern.port });
    const posted = modernLog.events().filter((e) => e.event === 'http' && e.mcpMethodHeader === 'tools/list');
    expect(posted.at(-1)?.traceparent).toBe(`00-${CLIENT.traceId}-${idOf(hop)}-01`);
  });
});

describe('traces exported over OTLP/HTTP by a gateway process configured by OTEL_* only', () => {
  let collector: OtlpCollector;
  let legacy: SpawnedServer & { config: Record<string, unknown> };
  const legacyLog = new FixtureLog();
  const gateways: CliGateway[] = [];
  /** The parent's own OTEL_* variables, blanked so only those a test sets count. */
  const blank = Object.fromEntries(
    Object.keys(process.env)
      .filter((k) => k.startsWith('OTEL_'))
      .map((k) => [k, '']),
  );

  async function gateway(env: Record<string, string>): Promise<CliGateway> {
    const gw = await startCli({ upstreams: { legacy: { ...legacy.config, protocol: 'legacy' } } }, undefined, { ...blank, ...env });
    gateways.push(gw);
    return gw;
  }
  async function stop(gw: CliGateway): Promise<{ code: number | null }> {
    if (gw.child.exitCode === null && gw.child.signalCode === null) gw.child.kill('SIGTERM');
    return gw.exited;
  }
  /** One call with an input round, then its retry, with the client's trace context in the HTTP headers. */
  async function callWithRound(gw: CliGateway): Promise<void> {
    const url = `${gw.base}/mcp/legacy`;
    const first = await rpc(
      url,
      'tools/call',
      { name: 'ask_name', arguments: {} },
      { caps: ELICIT, id: 'otlp-1', headers: { traceparent: CLIENT.traceparent } },
    );
    expect(first.body.result.resultType).toBe('input_required');
    const second = await rpc(
      url,
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Ada' } } },
      },
      { caps: ELICIT, id: 'otlp-2', headers: { traceparent: RETRY.traceparent } },
    );
    expect(second.body.result.content[0].text).toBe('Hello, Ada!');
  }
  const postedCalls = () => legacyLog.events().filter((e) => e.event === 'http' && e.rpcMethod === 'tools/call');

  beforeAll(async () => {
    collector = await startOtlpCollector();
    legacy = await startFixtureHttp('http', legacyLog);
  });
  afterAll(async () => {
    await Promise.all(gateways.map(stop));
    await legacy?.stop();
    await collector?.close();
  });

  it('OTLP/JSON: the request, upstream call and input round spans of one call, in the client trace; the upstream gets that trace', async () => {
    const gw = await gateway({
      OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
      OTEL_BSP_SCHEDULE_DELAY: '50',
    });
    expect(gw.logs.find((l) => /^tracing on/.test(l.msg))?.tracing).toMatchObject({
      exporter: 'otlp',
      endpoint: `${collector.endpoint}/v1/traces`,
      protocol: 'http/json',
    });
    const seen = postedCalls().length;
    await callWithRound(gw);

    const inTrace = () => collector.spans().filter((s) => s.traceId === CLIENT.traceId);
    // Two request spans, the upstream call and the round.
    expect(await eventually(() => inTrace().length >= 4, 10_000)).toBe(true);
    const spans = inTrace();
    const servers = spans.filter((s) => s.kind === 2 && s.name === 'tools/call ask_name');
    const req1 = servers.find((s) => s.attributes['jsonrpc.request.id'] === 'otlp-1')!;
    const req2 = servers.find((s) => s.attributes['jsonrpc.request.id'] === 'otlp-2')!;
    const upstream = spans.find((s) => s.kind === 3 && s.name === 'tools/call ask_name')!;
    const round = spans.find((s) => s.name === 'mcp.input_round')!;
    expect([req1, req2, upstream, round].every(Boolean)).toBe(true);

    // Parent links: client span → request span → upstream call and round; the retry under the client's second span.
    expect(req1.parentSpanId).toBe(CLIENT.spanId);
    expect(req2.parentSpanId).toBe(RETRY.spanId);
    expect(upstream.parentSpanId).toBe(req1.spanId);
    expect(round.parentSpanId).toBe(req1.spanId);
    expect(round.kind).toBe(1);

    expect(req1.attributes).toMatchObject({
      'mcp.method.name': 'tools/call',
      'gen_ai.tool.name': 'ask_name',
      'mcp.upstream': 'legacy',
      'mcp.result.type': 'input_required',
      'mcp.input.round': 0,
    });
    expect(req2.attributes).toMatchObject({ 'mcp.result.type': 'complete', 'mcp.input.round': 1 });
    expect(round.attributes).toMatchObject({
      'mcp.input.round': 1,
      'mcp.input.kinds': ['elicitation'],
      'mcp.input.mode': 'park',
      'mcp.upstream': 'legacy',
      'gen_ai.tool.name': 'ask_name',
    });
    expect(upstream.attributes).toMatchObject({
      'mcp.method.name': 'tools/call',
      'mcp.result.type': 'complete',
      'server.address': '127.0.0.1',
      'server.port': legacy.port,
    });
    // The round lasts from the request to its input_required answer: within the request's span.
    expect(round.startTimeUnixNano >= req1.startTimeUnixNano && round.endTimeUnixNano <= req1.endTimeUnixNano).toBe(true);
    // The upstream call outlives the first request (parked) and ends after the retry's answer came from it.
    expect(upstream.endTimeUnixNano > req1.endTimeUnixNano).toBe(true);
    expect(req1.resource['service.name']).toBe('mrtr-gateway');
    expect(req1.scope).toBe('mrtr-gateway');

    // The HTTP upstream received the upstream call span's context on its POST.
    const posted = postedCalls().slice(seen);
    expect(posted).toHaveLength(1);
    expect(posted[0]!.traceparent).toBe(`00-${CLIENT.traceId}-${upstream.spanId}-01`);
    expect(legacyLog.of('call', 'ask_name').at(-1)?.traceparent).toBe(`00-${CLIENT.traceId}-${upstream.spanId}-01`);

    // The request log line names the trace.
    expect(gw.logs.find((l) => l.msg === 'request' && l.traceId === CLIENT.traceId && l.spanId === req1.spanId)).toBeDefined();
    expect((await stop(gw)).code).toBe(0);
  });

  it('OTLP/protobuf (the default protocol): spans still buffered are exported when the gateway stops', async () => {
    // The default batch delay (5 s) is longer than the test: only the shutdown flush can send them.
    const gw = await gateway({ OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint, OTEL_SERVICE_NAME: 'gw-under-test' });
    const before = collector.requests.length;
    await callWithRound(gw);
    expect(collector.requests.length).toBe(before);
    expect((await stop(gw)).code).toBe(0);
    const sent = collector.requests.slice(before);
    expect(sent.length).toBeGreaterThan(0);
    expect(sent.every((r) => r.path === '/v1/traces' && r.contentType === 'application/x-protobuf')).toBe(true);
    const body = Buffer.concat(sent.map((r) => r.body));
    // Trace and span ids are raw bytes in protobuf; strings are UTF-8.
    expect(body.includes(Buffer.from(CLIENT.traceId, 'hex'))).toBe(true);
    expect(body.includes(Buffer.from(RETRY.spanId, 'hex'))).toBe(true);
    for (const text of ['mcp.input_round', 'tools/call ask_name', 'gw-under-test']) expect(body.includes(Buffer.from(text))).toBe(true);
  });

  it.each([
    ['no OTEL_* variable set', {}],
    ['OTEL_SDK_DISABLED=true', { OTEL_SDK_DISABLED: 'true' }],
    ['OTEL_TRACES_EXPORTER=none', { OTEL_TRACES_EXPORTER: 'none' }],
  ])('%s: no tracing, nothing exported, no trace context sent upstream', async (_label, env) => {
    const gw = await gateway({
      ...(Object.keys(env).length ? { OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint } : {}),
      OTEL_BSP_SCHEDULE_DELAY: '50',
      ...env,
    });
    expect(gw.logs.some((l) => /^tracing on/.test(l.msg))).toBe(false);
    const before = collector.requests.length;
    const seen = postedCalls().length;
    await callWithRound(gw);
    expect((await stop(gw)).code).toBe(0);
    expect(collector.requests.length).toBe(before);
    const posted = postedCalls().slice(seen);
    expect(posted).toHaveLength(1);
    expect(posted[0]!.traceparent).toBeUndefined();
    expect(legacyLog.of('call', 'ask_name').at(-1)?.traceparent).toBeUndefined();
    expect(gw.logs.find((l) => l.msg === 'request')?.traceId).toBeUndefined();
  });
});

/** Polls `get` until it returns something (5 s at most). */
async function vitestEventually<T>(get: () => T | undefined): Promise<T> {
  let value: T | undefined;
  await eventually(() => (value = get()) !== undefined);
  if (value === undefined) throw new Error('not found in time');
  return value;
}
