import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

/** What the v2 client's handlers saw, and the results the gateway sent back. */
export interface ClientRecord {
  elicitation: any[];
  sampling: any[];
  roots: number;
  /** Every JSON-RPC result received (in order), to count input_required rounds. */
  results: any[];
}

/** Answers the client gives; functions get the request params. */
export interface Answers {
  elicit?: (params: any) => Record<string, unknown>;
  sample?: (params: any) => Record<string, unknown>;
  roots?: { uri: string; name?: string }[];
}

/**
 * The official v2 client pinned to 2026-07-28, declaring `caps` (default: elicitation form+url,
 * sampling and roots), with handlers that record what they are asked. A wrapped fetch records each result on the wire.
 * `headers` go on every request (e.g. `authorization`).
 */
export async function v2Client(
  url: string,
  answers: Answers = {},
  caps: Record<string, unknown> = { elicitation: { form: {}, url: {} }, sampling: {}, roots: {} },
  headers: Record<string, string> = {},
) {
  const record: ClientRecord = { elicitation: [], sampling: [], roots: 0, results: [] };
  const client = new Client(
    { name: 'gateway-e2e', version: '1.0.0' },
    { capabilities: caps as never, versionNegotiation: { mode: { pin: '2026-07-28' } } },
  );
  // A handler only for what `caps` declares (the SDK refuses the others).
  if (caps.elicitation) {
    client.setRequestHandler('elicitation/create', async (req) => {
      record.elicitation.push(req.params);
      return (answers.elicit?.(req.params) ?? { action: 'accept', content: {} }) as never;
    });
  }
  if (caps.sampling) {
    client.setRequestHandler('sampling/createMessage', async (req) => {
      record.sampling.push(req.params);
      return (answers.sample?.(req.params) ?? {
        role: 'assistant',
        model: 'test-model',
        content: { type: 'text', text: 'sampled text' },
        stopReason: 'endTurn',
      }) as never;
    });
  }
  if (caps.roots) {
    client.setRequestHandler('roots/list', async () => {
      record.roots++;
      return { roots: answers.roots ?? [{ uri: 'file:///workspace', name: 'workspace' }] };
    });
  }
  const fetchAndRecord: typeof fetch = async (input, init) => {
    const res = await fetch(input, init);
    if ((res.headers.get('content-type') ?? '').includes('application/json')) {
      const body = await res
        .clone()
        .json()
        .catch(() => undefined);
      if (body?.result) record.results.push(body.result);
    }
    return res;
  };
  await client.connect(new StreamableHTTPClientTransport(new URL(url), { fetch: fetchAndRecord, requestInit: { headers } }));
  return { client, record };
}

/** The text of a tool result's text blocks, joined by newlines. */
export function textOf(r: { content?: unknown }): string {
  return ((r.content ?? []) as { type: string; text?: string }[])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}

/** Number of input_required rounds among recorded results. */
export function rounds(record: ClientRecord): number {
  return record.results.filter((r) => r.resultType === 'input_required').length;
}
