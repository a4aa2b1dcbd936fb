/**
 * Tracing's switch and names: when the `OTEL_*` environment turns traces on, what the start-up log
 * line says, that the attribute names are those of `@opentelemetry/semantic-conventions`, and that
 * with nothing set no SDK is started (checked in a fresh process, where nothing else registered one).
 */
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import * as semconv from '@opentelemetry/semantic-conventions';
import * as incubating from '@opentelemetry/semantic-conventions/incubating';
import { describe, expect, it } from 'vitest';
import { ATTR, describeTracing, tracingWanted } from '../../src/observability/tracing.js';
import { ROOT } from '../helpers/processes.js';

const TRACING = fileURLToPath(new URL('../../src/observability/tracing.ts', import.meta.url));

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
    expect(describeTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }).endpoint).toBe('http://collector:4317/');
    expect(describeTracing({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:1', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:2/t' }).endpoint).toBe('http://b:2/t');
  });

  it('reports no credentials or query of the endpoint, and no endpoint for other exporters', () => {
    const d = describeTracing({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'https://user:pw@collector/v1/traces?token=s3cret', OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer s3cret' });
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
  /** Runs `startTracing` with `env` in a fresh Node process; says whether a tracer provider got registered globally. */
  function probe(env: Record<string, string>): { started: boolean; active: boolean; globalApi: boolean; spanRecording: boolean } {
    const script = `
      const t = await import(${JSON.stringify(TRACING)});
      const tracing = await t.startTracing({ env: ${JSON.stringify(env)} });
      const globalApi = Symbol.for('opentelemetry.js.api.1') in globalThis;
      const span = t.startServerSpan({ method: 'tools/call', params: { name: 'x' }, upstream: 'u' });
      const out = { started: tracing !== undefined, active: t.tracingActive(), globalApi, spanRecording: span?.span.isRecording() ?? false };
      t.endSpan(span, { result: {} });
      await tracing?.shutdown(1000);
      // An exporter still retrying an unreachable endpoint may hold the loop: leave as the CLI does.
      process.stdout.write(JSON.stringify(out), () => process.exit(0));
    `;
    const clean = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('OTEL_')));
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { cwd: ROOT, env: { ...clean, ...env }, encoding: 'utf8', timeout: 20_000 });
    return JSON.parse(out);
  }

  it('starts no SDK and registers nothing with the API; spans are not even created', () => {
    expect(probe({})).toEqual({ started: false, active: false, globalApi: false, spanRecording: false });
  });

  it('starts the SDK when an exporter is configured (same probe, so it can tell)', () => {
    expect(probe({ OTEL_TRACES_EXPORTER: 'console', OTEL_TRACES_SAMPLER: 'always_off' })).toEqual({ started: true, active: true, globalApi: true, spanRecording: false });
    expect(probe({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:9', OTEL_BSP_EXPORT_TIMEOUT: '100' }).spanRecording).toBe(true);
  });
});
