/**
 * Notifications across eras: a v1 SDK client (2025-11-25) of a 2026-07-28 upstream (the v2 SDK
 * fixture over Streamable HTTP, FIXTURE_CHANGES) gets the upstream's list changes and resource
 * updates through the `subscriptions/listen` the reverse bridge holds for its session; SSE polling
 * applies to its request streams; and the gateway's own `subscriptions/listen` ends with its
 * completion result on drain.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  LoggingMessageNotificationSchema,
  ResourceUpdatedNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, modernStdio, startModernHttp } from '../helpers/fixture.js';
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

/** Resolves with the params of the next notification of `schema` the client gets. */
function next<T>(client: Client, schema: typeof ToolListChangedNotificationSchema | typeof ResourceUpdatedNotificationSchema): Promise<T> {
  return new Promise((resolve) =>
    client.setNotificationHandler(schema as typeof ToolListChangedNotificationSchema, (n) => resolve(n.params as T)),
  );
}

describe('a v1 client of a 2026-07-28 upstream: list changes and resource updates', () => {
  let srv: SpawnedServer & { config: Record<string, unknown> };
  let gw: TestGateway;
  const log = new FixtureLog();
  /** Listens open upstream (opened minus ended). */
  const openListens = () => log.of('listen-open').length - log.of('listen-closed').length;
  beforeAll(async () => {
    srv = await startModernHttp(log, { FIXTURE_CHANGES: '1' });
    gw = await startGateway({ upstreams: { modern: srv.config } });
  });
  afterAll(async () => {
    await gw?.close();
    await srv?.stop();
  });

  it('initialize offers listChanged and resources.subscribe as the upstream does; a tool added upstream reaches the client as tools/list_changed', async () => {
    const { client, transport } = await v1(gw.url('modern'));
    expect(client.getServerCapabilities()).toMatchObject({
      tools: { listChanged: true },
      resources: { subscribe: true, listChanged: true },
    });
    expect(await eventually(() => openListens() === 1)).toBe(true);
    const changed = next(client, ToolListChangedNotificationSchema);
    await client.callTool({ name: 'add_tool', arguments: { name: 'fresh_tool' } });
    await changed;
    expect((await client.listTools()).tools.map((t) => t.name)).toContain('fresh_tool');
    await transport.terminateSession();
    await client.close();
  });

  it("a subscribed resource's update reaches the client as resources/updated", async () => {
    const { client, transport } = await v1(gw.url('modern'));
    expect(await client.subscribeResource({ uri: 'fixture://public/note' })).toEqual({});
    const updated = next<{ uri: string }>(client, ResourceUpdatedNotificationSchema);
    await client.callTool({ name: 'update_resource', arguments: { uri: 'fixture://public/note' } });
    expect((await updated).uri).toBe('fixture://public/note');
    // Once unsubscribed, the listen upstream no longer names the URI.
    const listens = log.of('listen-open').length;
    expect(await client.unsubscribeResource({ uri: 'fixture://public/note' })).toEqual({});
    expect(log.of('listen-open').length).toBeGreaterThan(listens);
    await transport.terminateSession();
    await client.close();
  });

  it('ending the session (DELETE) closes the listen upstream', async () => {
    expect(await eventually(() => openListens() === 0)).toBe(true);
    const { client, transport } = await v1(gw.url('modern'));
    expect(await eventually(() => openListens() === 1)).toBe(true);
    await transport.terminateSession();
    expect(await eventually(() => openListens() === 0)).toBe(true);
    await client.close();
  });

  it('a listen the upstream completes is opened again, and relays again', async () => {
    expect(await eventually(() => openListens() === 0)).toBe(true);
    const { client, transport } = await v1(gw.url('modern'));
    expect(await eventually(() => openListens() === 1)).toBe(true);
    const opened = log.of('listen-open').length;
    await client.callTool({ name: 'end_listens', arguments: {} });
    expect(await eventually(() => log.of('listen-open').length > opened && openListens() === 1)).toBe(true);
    const changed = next(client, ToolListChangedNotificationSchema);
    await client.callTool({ name: 'add_tool', arguments: { name: 'after_reopen' } });
    await changed;
    await transport.terminateSession();
    await client.close();
  });

  it('a listen the upstream completes 10 times in a row is opened again each time at once, and relays after', async () => {
    expect(await eventually(() => openListens() === 0)).toBe(true);
    const { client, transport } = await v1(gw.url('modern'));
    expect(await eventually(() => openListens() === 1)).toBe(true);
    for (let i = 0; i < 10; i++) {
      const opened = log.of('listen-open').length;
      await client.callTool({ name: 'end_listens', arguments: {} });
      // A completion is a normal end: no growing backoff, no giving up.
      expect(await eventually(() => log.of('listen-open').length > opened && openListens() === 1, 2000)).toBe(true);
    }
    const changed = next(client, ToolListChangedNotificationSchema);
    await client.callTool({ name: 'add_tool', arguments: { name: 'after_ten_completions' } });
    await changed;
    await transport.terminateSession();
    await client.close();
  });
});

describe('a v1 client of a 2026-07-28 upstream over stdio, whose listen shares the child with its calls', () => {
  let gw: TestGateway;
  const log = new FixtureLog();
  beforeAll(async () => {
    gw = await startGateway({ upstreams: { modern: modernStdio(log) } });
  });
  afterAll(() => gw?.close());

  it("a call's log messages and progress still reach the client while the session's listen is open", async () => {
    const { client, transport } = await v1(gw.url('modern'));
    expect(client.getServerCapabilities()?.tools).toEqual({ listChanged: true });
    const logs: unknown[] = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => void logs.push(n.params.data));
    await client.setLoggingLevel('info');
    const progress: number[] = [];
    const result = await client.callTool({ name: 'slow', arguments: { steps: 2, ms: 50 } }, undefined, {
      onprogress: (p) => void progress.push(p.progress),
    });
    expect(textOf(result as never)).toBe('done in 2 steps');
    expect(progress).toEqual([1, 2]);
    expect(logs).toEqual(['step 1', 'step 2']);
    await transport.terminateSession();
    await client.close();
  });
});

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
