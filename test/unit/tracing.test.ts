/**
 * Tracing's switch and names: when the `OTEL_*` environment turns traces on, what the start-up log
 * line says, that the attribute names are those of `@opentelemetry/semantic-conventions`, and that
 * with nothing set tracing costs nothing: no OpenTelemetry package is loaded, no SDK started, no
 * span object made (checked in a fresh process, where nothing else registered one).
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as semconv from '@opentelemetry/semantic-conventions';
import * as incubating from '@opentelemetry/semantic-conventions/incubating';
import { describe, expect, it } from 'vitest';
import { ATTR, describeTracing, tracingWanted } from '../../src/observability/tracing.js';
import { ROOT } from '../helpers/processes.js';
import { scaled } from '../helpers/budget.js';

const TRACING = fileURLToPath(new URL('../../src/observability/tracing.ts', import.meta.url));
const GATEWAY = fileURLToPath(new URL('../../src/wiring.ts', import.meta.url));
const APP = fileURLToPath(new URL('../../src/http/app.ts', import.meta.url));

describe('tracingWanted', () => {
  it.each([
    [{}, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, true],
    [{ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }, true],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }, false],
    [{ OTEL_TRACES_EXPORTER: 'otlp' }, true],
    [{ OTEL_TRACES_EXPORTER: 'console' }, true],
    [{ OTEL_TRACES_EXPORTER: 'none' }, false],
    [{ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'true' }, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'TRUE' }, false],
    [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'false' }, true],
    // Only variables that say where traces go count.
    [{ OTEL_SERVICE_NAME: 'gw', OTEL_TRACES_SAMPLER: 'always_on', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' }, false],
  ])('%j → %s', (env, wanted) => {
    expect(tracingWanted(env as NodeJS.ProcessEnv)).toBe(wanted);
  });
});

describe('describeTracing', () => {
  it('derives the traces endpoint from the base endpoint, per protocol', () => {
    expect(describeTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318/' })).toEqual({
      exporter: 'otlp',
      endpoint: 'http://collector:4318/v1/traces',
      protocol: 'http/protobuf',
      sampler: 'parentbased_always_on',
      serviceName: 'mrtr-gateway',
    });
    expect(describeTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).endpoint).toBe(
      'http://collector:4317/',
    );
    expect(
      describeTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:2/t' }).endpoint,
    ).toBe('http://b:2/t');
  });

  it('reports no credentials or query of the endpoint, and no endpoint for other exporters', () => {
    const d = describeTracing({
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://user:pw@collector/v1/traces?token=s3cret',
      OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer s3cret',
    });
    expect(d.endpoint).toBe('https://collector/v1/traces');
    expect(JSON.stringify(d)).not.toMatch(/s3cret|pw/);
    expect(describeTracing({ OTEL_TRACES_EXPORTER: 'console', OTEL_SERVICE_NAME: 'gw', OTEL_TRACES_SAMPLER: 'traceidratio' })).toEqual({
      exporter: 'console',
      sampler: 'traceidratio',
      serviceName: 'gw',
    });
  });
});

describe('attribute names', () => {
  it('are those of the semantic conventions where these have one', () => {
    const expected: Record<string, string> = {
      MCP_METHOD_NAME: incubating.ATTR_MCP_METHOD_NAME,
      MCP_PROTOCOL_VERSION: incubating.ATTR_MCP_PROTOCOL_VERSION,
      MCP_RESOURCE_URI: incubating.ATTR_MCP_RESOURCE_URI,
      MCP_SESSION_ID: incubating.ATTR_MCP_SESSION_ID,
      GEN_AI_TOOL_NAME: incubating.ATTR_GEN_AI_TOOL_NAME,
      GEN_AI_PROMPT_NAME: incubating.ATTR_GEN_AI_PROMPT_NAME,
      GEN_AI_OPERATION_NAME: incubating.ATTR_GEN_AI_OPERATION_NAME,
      JSONRPC_REQUEST_ID: incubating.ATTR_JSONRPC_REQUEST_ID,
      RPC_RESPONSE_STATUS_CODE: incubating.ATTR_RPC_RESPONSE_STATUS_CODE,
      ERROR_TYPE: semconv.ATTR_ERROR_TYPE,
      CLIENT_ADDRESS: semconv.ATTR_CLIENT_ADDRESS,
      CLIENT_PORT: semconv.ATTR_CLIENT_PORT,
      SERVER_ADDRESS: semconv.ATTR_SERVER_ADDRESS,
      SERVER_PORT: semconv.ATTR_SERVER_PORT,
      NETWORK_TRANSPORT: semconv.ATTR_NETWORK_TRANSPORT,
      NETWORK_PROTOCOL_NAME: semconv.ATTR_NETWORK_PROTOCOL_NAME,
      SERVICE_NAME: semconv.ATTR_SERVICE_NAME,
      SERVICE_VERSION: semconv.ATTR_SERVICE_VERSION,
    };
    for (const [key, name] of Object.entries(expected)) expect([key, ATTR[key as keyof typeof ATTR]]).toEqual([key, name]);
    // The gateway's own names stay out of the conventions' namespaces other than mcp.*.
    const own = Object.entries(ATTR).filter(([k]) => !(k in expected));
    for (const [, name] of own) expect(name).toMatch(/^mcp\./);
    for (const [, name] of own) expect(Object.values(incubating)).not.toContain(name);
  });
});

describe('nothing set', () => {
  /** Resolve hook run in the loader thread: posts the name of every @opentelemetry package resolved. */
  const HOOK = `
    let port;
    export function initialize(data) { port = data.port; }
    export async function resolve(specifier, context, next) {
      const r = await next(specifier, context);
      const m = /node_modules\\/(@opentelemetry\\/[^/]+)\\//.exec(r.url);
      if (m) port.postMessage(m[1]);
      return r;
    }`;

  interface Probe {
    started: boolean;
    active: boolean;
    /** The OpenTelemetry API registered a global (tracer provider, propagator, context manager). */
    globalApi: boolean;
    /** @opentelemetry packages loaded by the gateway's modules and startTracing. */
    loaded: string[];
    /** The span objects the tracing hooks made (server, client, task). */
    spans: number;
    spanRecording: boolean;
    /** traceHeaders, addTraceHeaders and traceMeta gave back what they got. */
    passThrough: boolean;
    /** Afterwards, the API's global tracer provider: a tracer from it makes recording spans. */
    providerRecords: boolean;
  }

  /**
   * Imports the gateway's modules and runs `startTracing` with `env` in a fresh Node process, then
   * calls the tracing hooks as a request would; says what got loaded, registered and made.
   */
  function probe(env: Record<string, string>): Probe {
    const script = `
      import { register } from 'node:module';
      import { MessageChannel } from 'node:worker_threads';
      const { port1, port2 } = new MessageChannel();
      const loaded = new Set();
      port1.on('message', (name) => loaded.add(name));
      port1.unref();
      register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(HOOK)}), { data: { port: port2 }, transferList: [port2] });
      await import(${JSON.stringify(GATEWAY)});
      await import(${JSON.stringify(APP)});
      const t = await import(${JSON.stringify(TRACING)});
      const tracing = await t.startTracing({ env: ${JSON.stringify(env)} });
      const globalApi = Symbol.for('opentelemetry.js.api.1') in globalThis;
      const server = t.startServerSpan({ method: 'tools/call', params: { name: 'x' }, upstream: 'u', headers: { traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } });
      const made = [server, t.within(server, () => t.startClientSpan({ method: 'tools/call', params: { name: 'x' }, upstream: 'u', endpoint: { transport: 'stdio' } })), t.within(server, () => t.startTaskSpan({ method: 'tools/call', name: 'x', upstream: 'u', taskId: 't', ttlMs: 1000 }))];
      const headers = { a: '1' }, plain = { a: '1' }, meta = { m: 1 };
      const passThrough = t.within(server, () => t.traceHeaders(headers) === headers && t.addTraceHeaders(plain) === plain && Object.keys(plain).length === 1 && t.traceMeta(meta) === meta);
      const spanRecording = server?.span.isRecording() ?? false;
      for (const m of made) t.endSpan(m, { result: {} });
      await tracing?.shutdown(1000);
      // Let the loader thread's messages arrive before the API is imported here.
      await new Promise((r) => setTimeout(r, 200));
      const names = [...loaded].sort();
      const api = await import('@opentelemetry/api');
      const providerRecords = api.trace.getTracerProvider().getTracer('probe').startSpan('probe').isRecording();
      const out = { started: tracing !== undefined, active: t.tracingActive(), globalApi, loaded: names, spans: made.filter(Boolean).length, spanRecording, passThrough, providerRecords };
      // An exporter still retrying an unreachable endpoint may hold the loop: leave as the CLI does.
      process.stdout.write(JSON.stringify(out), () => process.exit(0));
    `;
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_')));
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: ROOT,
      env: { ...clean, ...env },
      encoding: 'utf8',
      timeout: scaled(60_000),
    });
    return JSON.parse(out);
  }

  it(
    'loads no OpenTelemetry SDK package, registers nothing with the API, makes no span object and adds no header; the global tracer provider stays the no-op one',
    () => {
      // No OpenTelemetry package at all: the provider SDKs (the Anthropic SDK imports the API) are
      // loaded only when a sampling provider is configured.
      expect(probe({})).toEqual({
        started: false,
        active: false,
        globalApi: false,
        loaded: [],
        spans: 0,
        spanRecording: false,
        passThrough: true,
        providerRecords: false,
      });
    },
    scaled(90_000),
  );

  it(
    'starts the SDK when an exporter is configured (same probe, so it can tell)',
    () => {
      const sampledOff = probe({ OTEL_TRACES_EXPORTER: 'console', OTEL_TRACES_SAMPLER: 'always_off' });
      expect(sampledOff).toMatchObject({ started: true, active: false, globalApi: true, spans: 3, spanRecording: false });
      expect(sampledOff.loaded).toEqual(
        expect.arrayContaining(['@opentelemetry/api', '@opentelemetry/sdk-node', '@opentelemetry/resources']),
      );
      const on = probe({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_BSP_EXPORT_TIMEOUT: '100' });
      expect(on).toMatchObject({ started: true, spans: 3, spanRecording: true, passThrough: false });
    },
    scaled(90_000),
  );
});
