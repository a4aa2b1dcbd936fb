/**
 * A stand-in for an OpenTelemetry collector: an HTTP server on 127.0.0.1 that receives OTLP/HTTP
 * trace exports (`POST /v1/traces`, OTLP 1.x) and keeps them. JSON bodies (`http/json`) are decoded
 * into {@link OtlpSpan}s; protobuf bodies (`http/protobuf`, the SDK's default) are kept as bytes.
 * Every export is answered 200 with an empty `ExportTraceServiceResponse`.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One span as an OTLP/JSON export carries it, with attributes flattened to plain values. */
export interface OtlpSpan {
  /** 32 lower-case hex digits. */
  traceId: string;
  /** 16 lower-case hex digits. */
  spanId: string;
  /** 16 hex digits, or undefined for a root span. */
  parentSpanId?: string;
  name: string;
  /** OTLP `SpanKind`: 1 INTERNAL, 2 SERVER, 3 CLIENT. */
  kind: number;
  attributes: Record<string, unknown>;
  links: { traceId: string; spanId: string }[];
  events: { name: string; attributes: Record<string, unknown> }[];
  /** OTLP `StatusCode`: 0 UNSET, 1 OK, 2 ERROR. */
  status: { code: number; message?: string };
  /** Start and end, in ns since the epoch. */
  startTimeUnixNano: bigint;
  endTimeUnixNano: bigint;
  /** The attributes of the resource that exported the span. */
  resource: Record<string, unknown>;
  /** The instrumentation scope's name. */
  scope: string;
}

/** One export request as received. */
export interface OtlpRequest {
  path: string;
  contentType: string;
  body: Buffer;
}

/** A running collector stand-in. */
export interface OtlpCollector {
  /** `http://127.0.0.1:PORT`: the value for `OTEL_EXPORTER_OTLP_ENDPOINT`. */
  endpoint: string;
  /** Every export request received, in order (none kept with `keep: false`). */
  requests: OtlpRequest[];
  /** Export requests received and their body bytes in all (kept or not). */
  received: { requests: number; bytes: number };
  /** The spans of every JSON export received, in order. */
  spans(): OtlpSpan[];
  close(): Promise<void>;
}

type AnyValue = {
  stringValue?: string;
  intValue?: string | number;
  doubleValue?: number;
  boolValue?: boolean;
  arrayValue?: { values?: AnyValue[] };
};
type KeyValue = { key: string; value?: AnyValue };

function valueOf(v: AnyValue | undefined): unknown {
  if (!v) return undefined;
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.arrayValue !== undefined) return (v.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

function attrs(list: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, valueOf(kv.value)]));
}

/** Decodes the spans of one OTLP/JSON `ExportTraceServiceRequest`. */
export function decodeOtlpJson(body: unknown): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  for (const rs of (body as { resourceSpans?: any[] }).resourceSpans ?? []) {
    const resource = attrs(rs.resource?.attributes);
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        out.push({
          traceId: s.traceId,
          spanId: s.spanId,
          parentSpanId: s.parentSpanId || undefined,
          name: s.name,
          kind: s.kind,
          attributes: attrs(s.attributes),
          links: (s.links ?? []).map((l: any) => ({ traceId: l.traceId, spanId: l.spanId })),
          events: (s.events ?? []).map((e: any) => ({ name: e.name, attributes: attrs(e.attributes) })),
          status: { code: s.status?.code ?? 0, ...(s.status?.message ? { message: s.status.message } : {}) },
          startTimeUnixNano: BigInt(s.startTimeUnixNano),
          endTimeUnixNano: BigInt(s.endTimeUnixNano),
          resource,
          scope: ss.scope?.name ?? '',
        });
      }
    }
  }
  return out;
}

/**
 * Starts the collector stand-in on 127.0.0.1 with an ephemeral port.
 * @param opts.keep keep each request (default true); false only counts them (`received`), for a
 *   sink under load such as a benchmark's.
 */
export async function startOtlpCollector(opts: { keep?: boolean } = {}): Promise<OtlpCollector> {
  const keep = opts.keep ?? true;
  const requests: OtlpRequest[] = [];
  const received = { requests: 0, bytes: 0 };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      received.bytes += c.length;
      if (keep) chunks.push(c);
    });
    req.on('end', () => {
      const contentType = String(req.headers['content-type'] ?? '');
      received.requests++;
      if (keep) requests.push({ path: req.url ?? '', contentType, body: Buffer.concat(chunks) });
      if (contentType.includes('json')) {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      } else {
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    requests,
    received,
    spans: () => requests.filter((r) => r.contentType.includes('json')).flatMap((r) => decodeOtlpJson(JSON.parse(r.body.toString('utf8')))),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
