/**
 * The official v2 client pinned to 2026-07-28, through the gateway, in front of
 * @modelcontextprotocol/server-everything (a legacy 2025-11-25 server) over stdio and over
 * Streamable HTTP. The client's ordinary request handlers are driven by input_required rounds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { everythingStdio, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startEverythingHttp, type SpawnedServer } from '../helpers/processes.js';
import { textOf as text, v2Client } from '../helpers/v2client.js';

/** The v2 client declaring form elicitation and sampling; its sampling handler answers about Paris. */
async function connect(url: string, elicitAnswer: Record<string, unknown>) {
  const { client, record } = await v2Client(
    url,
    {
      elicit: () => elicitAnswer,
      sample: () => ({
        role: 'assistant',
        model: 'test-model',
        content: { type: 'text', text: 'Paris is the capital.' },
        stopReason: 'endTurn',
      }),
    },
    { elicitation: { form: {} }, sampling: {} },
  );
  return { client, calls: record };
}

const transports: [string, () => Promise<{ config: Record<string, unknown>; stop: () => Promise<void> }>][] = [
  ['stdio', async () => ({ config: everythingStdio, stop: async () => {} })],
  [
    'streamable-http',
    async () => {
      const srv: SpawnedServer = await startEverythingHttp();
      return { config: { transport: 'streamable-http', url: `http://127.0.0.1:${srv.port}/mcp` }, stop: () => srv.stop() };
    },
  ],
];

describe.each(transports)('v2 client through the gateway to server-everything over %s', (_label, upstream) => {
  let gw: TestGateway;
  let stopUpstream: () => Promise<void>;
  let url: string;

  beforeAll(async () => {
    const u = await upstream();
    stopUpstream = u.stop;
    gw = await startGateway({ upstreams: { everything: u.config } });
    url = gw.url('everything');
  });
  afterAll(async () => {
    await gw?.close();
    await stopUpstream?.();
  });

  it('negotiates 2026-07-28 and lists the tools, including the capability-gated ones', async () => {
    const { client } = await connect(url, {});
    try {
      expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
      const { tools } = await client.listTools();
      const names = tools.map((t) => t.name);
      expect(names).toEqual(
        expect.arrayContaining([
          'echo',
          'get-sum',
          'trigger-elicitation-request',
          'trigger-sampling-request',
          'trigger-long-running-operation',
        ]),
      );
    } finally {
      await client.close();
    }
  });

  it('calls echo and get-sum', async () => {
    const { client } = await connect(url, {});
    try {
      expect(text(await client.callTool({ name: 'echo', arguments: { message: 'hello gateway' } }))).toBe('Echo: hello gateway');
      expect(text(await client.callTool({ name: 'get-sum', arguments: { a: 2, b: 40 } }))).toContain('42');
    } finally {
      await client.close();
    }
  });

  it('trigger-elicitation-request with accept: the handler is called once and the result shows the answer', async () => {
    const { client, calls } = await connect(url, {
      action: 'accept',
      content: { name: 'Ada Lovelace', check: true, email: 'ada@example.com', integer: 7 },
    });
    try {
      const r = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      expect(calls.elicitation).toHaveLength(1);
      expect((calls.elicitation[0] as { message: string }).message).toContain('Please provide inputs');
      expect(text(r)).toContain('Ada Lovelace');
      expect(text(r)).toContain('User provided the requested information');
    } finally {
      await client.close();
    }
  });

  it('trigger-elicitation-request with decline: the tool sees the decline', async () => {
    const { client, calls } = await connect(url, { action: 'decline' });
    try {
      const r = await client.callTool({ name: 'trigger-elicitation-request', arguments: {} });
      expect(calls.elicitation).toHaveLength(1);
      expect(text(r)).toContain('declined');
    } finally {
      await client.close();
    }
  });

  it('trigger-sampling-request: the client sampling handler answers', async () => {
    const { client, calls } = await connect(url, {});
    try {
      const r = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'Capital of France?', maxTokens: 50 } });
      expect(calls.sampling).toHaveLength(1);
      expect(JSON.stringify(calls.sampling[0])).toContain('Capital of France?');
      expect(text(r)).toContain('Paris is the capital.');
      expect(text(r)).toContain('test-model');
    } finally {
      await client.close();
    }
  });

  it('trigger-long-running-operation delivers progress notifications before the result', async () => {
    const { client } = await connect(url, {});
    try {
      const progress: { progress: number; total?: number }[] = [];
      const r = await client.callTool(
        { name: 'trigger-long-running-operation', arguments: { duration: 1, steps: 3 } },
        { onprogress: (p: { progress: number; total?: number }) => progress.push(p) },
      );
      expect(text(r)).toContain('Long running operation completed');
      expect(progress.map((p) => p.progress)).toEqual([1, 2, 3]);
      expect(progress.every((p) => p.total === 3)).toBe(true);
    } finally {
      await client.close();
    }
  });
});
