/**
 * A stand-in OTLP/HTTP collector on 127.0.0.1 for the tracing-on path: accepts
 * `POST /v1/traces` (JSON encoding), counts the spans, and answers 200 with an empty
 * `ExportTraceServiceResponse`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** The sink: its base URL (for `OTEL_EXPORTER_OTLP_ENDPOINT`) and the spans received so far. */
export interface OtlpSink {
  url: string;
  readonly spans: number;
  stop(): Promise<void>;
}

export async function startOtlpSink(): Promise<OtlpSink> {
  let spans = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { resourceSpans?: { scopeSpans?: { spans?: unknown[] }[] }[] };
        for (const rs of body.resourceSpans ?? []) for (const ss of rs.scopeSpans ?? []) spans += ss.spans?.length ?? 0;
      } catch {
        /* not JSON: counted as nothing */
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    get spans() {
      return spans;
    },
    stop: () => new Promise<void>((r) => server.close(() => r())),
  };
}

/** The standard OpenTelemetry variables that switch the gateway's tracing on, exporting to `endpoint`. */
export function tracingEnv(endpoint: string): Record<string, string> {
  return {
    OTEL_TRACES_EXPORTER: 'otlp',
    OTEL_EXPORTER_OTLP_ENDPOINT: endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_SERVICE_NAME: 'mrtr-gateway-bench',
    OTEL_BSP_SCHEDULE_DELAY: '200',
  };
}
