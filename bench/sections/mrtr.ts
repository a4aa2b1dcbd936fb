/**
 * Figure 3: one input_required round. The `ask` tool elicits a name once.
 *
 * - direct: a legacy v1-SDK client on its own session, whose elicitation handler answers at once;
 *   timed from `callTool` to its result.
 * - gateway: a raw 2026-07-28 `tools/call` that gets `input_required`, then the retry with
 *   `inputResponses` and the `requestState`, sent at once; timed from the first POST to the final
 *   result.
 *
 * Calls are sequential. Each run makes `calls` calls per path, paths taking turns run by run; the
 * figure is the median of the runs' medians.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { ELICIT_CAPS, modern, send, textOf } from '../lib/mcp.js';
import { figure, median, type Figure } from '../lib/stats.js';

const ANSWER = { action: 'accept', content: { name: 'Ada' } } as const;
const EXPECTED = 'Hello, Ada!';

/** A path that runs one complete call with its round and returns its duration in ms. */
interface Path {
  key: string;
  label: string;
  once: () => Promise<number>;
}

/** The direct path: a v1 client connected to the fixture's Streamable HTTP endpoint. */
export async function directPath(url: string): Promise<Path & { close: () => Promise<void> }> {
  const client = new Client({ name: 'mrtr-gateway-bench', version: '1.0.0' }, { capabilities: { elicitation: {} } });
  let elicited = 0;
  client.setRequestHandler(ElicitRequestSchema, async () => {
    elicited++;
    return ANSWER;
  });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return {
    key: 'direct',
    label: 'direct: legacy v1 client, elicitation answered at once',
    once: async () => {
      const before = elicited;
      const t0 = performance.now();
      const r = await client.callTool({ name: 'ask', arguments: {} });
      const ms = performance.now() - t0;
      if (r.isError || textOf(r) !== EXPECTED || elicited !== before + 1)
        throw new Error(`direct ask: unexpected result ${JSON.stringify(r)}`);
      return ms;
    },
    close: () => client.close(),
  };
}

/** The gateway path: input_required, then the retry (sent to `retryUrl` when given: another replica). */
export function gatewayPath(key: string, label: string, url: string, retryUrl = url): Path {
  let id = 0;
  return {
    key,
    label,
    once: async () => {
      const t0 = performance.now();
      const first = (await send(modern(url, 'tools/call', { name: 'ask', arguments: {} }, ELICIT_CAPS), `r${++id}`)).message.result;
      if (
        first?.resultType !== 'input_required' ||
        first.inputRequests?.['elicitation-1']?.method !== 'elicitation/create' ||
        typeof first.requestState !== 'string'
      ) {
        throw new Error(`gateway ask: expected input_required with elicitation-1, got ${JSON.stringify(first)}`);
      }
      const retry = modern(
        retryUrl,
        'tools/call',
        { name: 'ask', arguments: {}, requestState: first.requestState, inputResponses: { 'elicitation-1': ANSWER } },
        ELICIT_CAPS,
      );
      const done = (await send(retry, `r${++id}`)).message.result;
      const ms = performance.now() - t0;
      if (done?.resultType !== 'complete' || textOf(done) !== EXPECTED)
        throw new Error(`gateway ask retry: unexpected result ${JSON.stringify(done)}`);
      return ms;
    },
  };
}

/** Medians per path: the figure is over the runs' medians. */
export async function measureRounds(paths: Path[], calls: number, runs: number, log: (s: string) => void): Promise<Map<string, Figure>> {
  // Warm-up: a few calls per path (sessions open, code paths compiled).
  for (const p of paths) for (let i = 0; i < Math.min(20, calls); i++) await p.once();
  const perRun = new Map<string, number[]>(paths.map((p) => [p.key, []]));
  for (let run = 1; run <= runs; run++) {
    for (const p of paths) {
      const times: number[] = [];
      for (let i = 0; i < calls; i++) times.push(await p.once());
      const m = median(times);
      perRun.get(p.key)!.push(m);
      log(`  run ${run}/${runs}  ${p.label}: median ${m.toFixed(2)} ms over ${calls} calls`);
    }
  }
  return new Map([...perRun].map(([k, v]) => [k, figure(v)]));
}
