/**
 * Traces in process, with the SDK's in-memory exporter: the spans of a call with an input round
 * (request, upstream call, round, then the retry), their links to the client's trace context
 * (HTTP headers and `_meta`), the trace context the upstreams receive (a legacy Streamable HTTP
 * upstream: headers; a 2026-07-28 upstream: headers and `_meta`), a task's span, and the spans of a
 * legacy client's session.
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
  let modern: SpawnedServer;
  let gw: TestGateway;
  const legacyLog = new FixtureLog();
  const modernLog = new FixtureLog();

  const spans = () => exporter.getFinishedSpans();
  const named = (name: string) => spans().filter((s) => s.name === name);
  const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;
  const idOf = (s: ReadableSpan) => s.spanContext().spanId;
  const traceOf = (s: ReadableSpan) => s.spanContext().traceId;

  beforeAll(async () => {
    tracing = await startTracing({ env: {}, spanProcessors: [new SimpleSpanProcessor(exporter)] });
    [legacy, modern] = await Promise.all([startFixtureHttp('http', legacyLog), spawnListening(['--import', 'tsx', MODERN, 'http'], { FIXTURE_LOG: modernLog.file })]);
    gw = await startGateway({
      upstreams: {
        legacy: { ...legacy.config, protocol: 'legacy', tasks: { tools: { slow: { taskAfterMs: 0 } } } },
        modern: { transport: 'streamable-http', url: `http://127.0.0.1:${modern.port}/mcp`, protocol: '2026-07-28' },
      },
    });
  });
  afterAll(async () => {
    await gw?.close();
    await Promise.all([legacy?.stop(), modern?.stop()]);
    await tracing?.shutdown();
  });
  beforeEach(() => exporter.reset());

  it('starts with span processors given, whatever the environment', () => {
    expect(tracing).toBeDefined();
    expect(tracingActive()).toBe(true);
  });

  it('one call with an input round: request, upstream call and round spans in the client trace, then the retry', async () => {
    const url = gw.url('legacy');
    const first = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT, id: 'call-1', headers: { traceparent: CLIENT.traceparent, tracestate: 'vendor=1' } });
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
    expect(round!.attributes).toMatchObject({ 'mcp.input.round': 1, 'mcp.input.kinds': ['elicitation'], 'mcp.input.keys': ['elicitation-1'], 'mcp.input.mode': 'park', 'gen_ai.tool.name': 'ask_name' });

    // The upstream call is still parked: its span ends with the call.
    expect(spans().filter((s) => s.kind === SpanKind.CLIENT)).toHaveLength(0);

    // The retry, with its own span of the client's trace in _meta (and another in the headers).
    const retry = await rpc(
      url,
      'tools/call',
      { name: 'ask_name', arguments: {}, requestState: first.body.result.requestState, inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Ada' } } } },
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
    const first = await rpc(url, 'tools/call', { name: 'two_round', arguments: { tag: 't' } }, { caps: ELICIT, meta: envelope(ELICIT, { traceparent: CLIENT.traceparent }) });
    expect(first.body.result.resultType).toBe('input_required');
    const server = named('tools/call two_round').find((s) => s.kind === SpanKind.SERVER)!;
    const hop = named('tools/call two_round').find((s) => s.kind === SpanKind.CLIENT)!;
    expect(parentOf(server)).toBe(CLIENT.spanId);
    expect(parentOf(hop)).toBe(idOf(server));
    expect(hop.attributes).toMatchObject({ 'mcp.protocol.version': '2026-07-28', 'mcp.result.type': 'input_required', 'server.port': modern.port });
    const expected = `00-${CLIENT.traceId}-${idOf(hop)}-01`;
    expect(modernLog.of('call', 'two_round').at(-1)?.traceparent).toBe(expected);
    expect(modernLog.events().filter((e) => e.event === 'http' && e.mcpMethodHeader === 'tools/call').at(-1)?.traceparent).toBe(expected);
    const [round] = named('mcp.input_round');
    expect(round!.attributes).toMatchObject({ 'mcp.input.round': 1, 'mcp.input.mode': 'pass-through', 'mcp.input.kinds': ['elicitation'], 'mcp.input.keys': ['name'] });

    // The retry's span knows its round.
    exporter.reset();
    const second = await rpc(url, 'tools/call', { name: 'two_round', arguments: { tag: 't' }, requestState: first.body.result.requestState, inputResponses: { name: { action: 'accept', content: { name: 'Ada' } } } }, { caps: ELICIT });
    expect(second.body.result.resultType).toBe('input_required');
    expect(named('tools/call two_round').find((s) => s.kind === SpanKind.SERVER)!.attributes['mcp.input.round']).toBe(1);
    expect(named('mcp.input_round')[0]!.attributes['mcp.input.round']).toBe(2);
  });

  it('a task has a span of its own, from creation to its terminal status, linked to the request that created it', async () => {
    const url = gw.url('legacy');
    const r = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 200, steps: 2 } }, { caps: TASKS, headers: { traceparent: CLIENT.traceparent } });
    expect(r.body.result.resultType).toBe('task');
    const taskId = r.body.result.taskId as string;
    const creator = named('tools/call slow').find((s) => s.kind === SpanKind.SERVER)!;
    expect(creator.attributes).toMatchObject({ 'mcp.result.type': 'task', 'mcp.task.id': taskId });
    const task = await vitestEventually(() => named('mcp.task')[0]);
    expect(task.parentSpanContext).toBeUndefined();
    expect(traceOf(task)).not.toBe(CLIENT.traceId);
    expect(task.links.map((l) => l.context.spanId)).toEqual([idOf(creator)]);
    expect(task.attributes).toMatchObject({ 'mcp.task.id': taskId, 'mcp.task.status': 'completed', 'gen_ai.tool.name': 'slow', 'mcp.upstream': 'legacy' });
    expect(task.events.map((e) => e.attributes?.['mcp.task.status'])).toEqual(['working', 'completed']);

    const get = await rpc(url, 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
    expect(get.body.result.status).toBe('completed');
    expect(named('tasks/get')[0]!.attributes['mcp.task.id']).toBe(taskId);
  });

  it('a legacy client session: a server span per request and a client span for the relayed request', async () => {
    const client = new Client({ name: 'legacy-client', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    const transport = new StreamableHTTPClientTransport(new URL(gw.url('legacy')), { requestInit: { headers: { traceparent: CLIENT.traceparent } } });
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
});

/** Polls `get` until it returns something (5 s at most). */
async function vitestEventually<T>(get: () => T | undefined): Promise<T> {
  let value: T | undefined;
  await eventually(() => (value = get()) !== undefined);
  if (value === undefined) throw new Error('not found in time');
  return value;
}
