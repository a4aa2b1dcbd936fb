/**
 * Notifications across eras: a v1 SDK client (2025-11-25) of a 2026-07-28 upstream (the v2 SDK
 * fixture over Streamable HTTP, FIXTURE_CHANGES) gets the upstream's list changes and resource
 * updates through the `subscriptions/listen` the reverse bridge holds for its session; SSE polling
 * applies to its request streams; and the gateway's own `subscriptions/listen` ends with its
 * completion result on drain.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, startGateway, type TestGateway } from '../helpers/gateway.js';
import { startModernHttp } from '../helpers/fixture.js';
import type { SpawnedServer } from '../helpers/processes.js';
import { textOf } from '../helpers/v2client.js';

const SUB = 'io.modelcontextprotocol/subscriptionId';

/** A connected v1 client of `url`; `resumed` collects the Last-Event-ID of each GET that resumes a stream. */
async function v1(url: string, resumed: string[] = []) {
  const client = new Client({ name: 'reverse-notifications', version: '1.0.0' }, { capabilities: {} });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: (input, init) => {
      const id = new Headers(init?.headers).get('last-event-id');
      if ((init?.method ?? 'GET') === 'GET' && id) resumed.push(id);
      return fetch(input, init);
    },
  });
  await client.connect(transport);
  return { client, transport };
}

describe('the reverse bridge with SSE polling (legacySessions.closeStreamAfterMs)', () => {
  let srv: SpawnedServer & { config: Record<string, unknown> };
  let gw: TestGateway;
  beforeAll(async () => {
    srv = await startModernHttp();
    gw = await startGateway({ legacySessions: { closeStreamAfterMs: 600, retryMs: 300 }, upstreams: { modern: srv.config } });
  });
  afterAll(async () => {
    await gw?.close();
    await srv?.stop();
  });

  it('a long call has its stream closed after closeStreamAfterMs; the client resumes it once and misses no progress nor the result', async () => {
    const resumed: string[] = [];
    const { client, transport } = await v1(gw.url('modern'), resumed);
    resumed.length = 0;
    const progress: number[] = [];
    // Progress 1 to 4 come at 400, 800, 1200 and 1600 ms; the stream closes at 600 ms.
    const result = await client.callTool({ name: 'slow', arguments: { steps: 4, ms: 400 } }, undefined, {
      onprogress: (p) => void progress.push(p.progress),
    });
    expect(textOf(result as never)).toBe('done in 4 steps');
    expect(progress).toEqual([1, 2, 3, 4]);
    expect(resumed).toHaveLength(1);
    await transport.terminateSession();
    await client.close();
  });
});

describe("the gateway's own subscriptions/listen", () => {
  it('ends with the completion result when the gateway drains', async () => {
    const srv = await startModernHttp(undefined, { FIXTURE_CHANGES: '1' });
    const gw = await startGateway({ upstreams: { modern: srv.config } });
    try {
      const s = await listen(gw.url('modern'), { toolsListChanged: true }, { id: 'drain-1' });
      expect((await s.next(10_000)).params.notifications).toEqual({ toolsListChanged: true });
      const drained = gw.gateway.drain(5000);
      expect(await s.next()).toEqual({ jsonrpc: '2.0', id: 'drain-1', result: { resultType: 'complete', _meta: { [SUB]: 'drain-1' } } });
      expect(await drained).toBe(0);
    } finally {
      await gw.close();
      await srv.stop();
    }
  });
});
