/**
 * subscriptions/listen filters in front of the legacy conformance fixture over stdio. The fixture's
 * `test_trigger_*` tools change its tool, prompt or resource list or report a resource updated;
 * its processes share the change, so the session a listen stream holds notifies it too.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conformanceUpstream } from '../helpers/fixture.js';
import { listen, rpc, startGateway, type ListenStream, type TestGateway } from '../helpers/gateway.js';
import { scaled } from '../helpers/budget.js';

const SUB = 'io.modelcontextprotocol/subscriptionId';

/** Reads the next message of the stream and expects it to be a `method` notification. */
async function nextOf(stream: ListenStream, method: string, timeoutMs = 5000): Promise<any> {
  const msg = await stream.next(timeoutMs);
  expect(msg?.method, JSON.stringify(stream.messages)).toBe(method);
  return msg;
}

describe('subscriptions/listen: list changes and resource subscriptions', () => {
  let gw: TestGateway;
  let url: string;
  const open: ListenStream[] = [];
  const trigger = async (name: string, args: Record<string, unknown> = {}) => {
    const r = await rpc(url, 'tools/call', { name, arguments: args });
    expect(r.body.result?.isError, JSON.stringify(r.body)).toBeFalsy();
  };
  const subscribe = async (filter: Record<string, unknown>, id: string) => {
    const s = await listen(url, filter, { id });
    open.push(s);
    return s;
  };

  let stateDir: string;
  /** The URIs the fixture processes hold a legacy resources/subscribe for. */
  const upstreamSubscriptions = () =>
    readdirSync(stateDir)
      .filter((f) => f.startsWith('subscriptions.'))
      .flatMap((f) => JSON.parse(readFileSync(join(stateDir, f), 'utf8')) as string[]);

  beforeAll(async () => {
    const upstream = conformanceUpstream();
    stateDir = (upstream.env as Record<string, string>).CONFORMANCE_FIXTURE_STATE!;
    gw = await startGateway({ upstreams: { conformance: upstream } });
    url = gw.url('conformance');
    // Two warm sessions: one for the stream, one for the calls that trigger changes.
    await Promise.all([rpc(url, 'tools/list'), rpc(url, 'tools/list')]);
  });
  afterAll(async () => {
    for (const s of open) s.close();
    await gw?.close();
  });

  it('server/discover passes on listChanged and resources.subscribe', async () => {
    const caps = (await rpc(url, 'server/discover')).body.result.capabilities;
    expect(caps.tools).toEqual({ listChanged: true });
    expect(caps.prompts).toEqual({ listChanged: true });
    expect(caps.resources).toEqual({ subscribe: true, listChanged: true });
  });

  it('toolsListChanged: acknowledged, then notifications/tools/list_changed with the subscriptionId', async () => {
    const s = await subscribe({ toolsListChanged: true }, 'tools-1');
    expect(s.headers.get('content-type')).toContain('text/event-stream');
    expect(await s.next()).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/subscriptions/acknowledged',
      params: { notifications: { toolsListChanged: true }, _meta: { [SUB]: 'tools-1' } },
    });
    await trigger('test_trigger_tool_change');
    expect(await nextOf(s, 'notifications/tools/list_changed')).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/tools/list_changed',
      params: { _meta: { [SUB]: 'tools-1' } },
    });
    s.close();
  });

  it('promptsListChanged: relayed; a tool list change is not', async () => {
    const s = await subscribe({ promptsListChanged: true }, 'prompts-1');
    expect((await s.next()).params.notifications).toEqual({ promptsListChanged: true });
    await trigger('test_trigger_tool_change');
    await trigger('test_trigger_prompt_change');
    const msg = await nextOf(s, 'notifications/prompts/list_changed');
    expect(msg.params._meta[SUB]).toBe('prompts-1');
    expect(await s.next(300)).toBeUndefined();
    expect(s.messages.some((m) => m.method === 'notifications/tools/list_changed')).toBe(false);
    s.close();
  });

  it('resourcesListChanged: relayed; a prompt list change is not', async () => {
    const s = await subscribe({ resourcesListChanged: true }, 'resources-1');
    expect((await s.next()).params.notifications).toEqual({ resourcesListChanged: true });
    await trigger('test_trigger_prompt_change');
    await trigger('test_trigger_resource_change');
    const msg = await nextOf(s, 'notifications/resources/list_changed');
    expect(msg.params._meta[SUB]).toBe('resources-1');
    expect(await s.next(300)).toBeUndefined();
    s.close();
  });

  it('resourceSubscriptions: subscribed upstream; updates of those URIs relayed, others and list changes not', async () => {
    const s = await subscribe({ resourceSubscriptions: ['test://watched-resource', 'test://watched-resource'] }, 'res-sub-1');
    expect((await s.next()).params.notifications).toEqual({ resourceSubscriptions: ['test://watched-resource'] });
    await trigger('test_trigger_tool_change');
    await trigger('test_trigger_resource_update', { uri: 'test://static-text' });
    await trigger('test_trigger_resource_update', { uri: 'test://watched-resource' });
    expect(await nextOf(s, 'notifications/resources/updated')).toEqual({
      jsonrpc: '2.0',
      method: 'notifications/resources/updated',
      params: { uri: 'test://watched-resource', _meta: { [SUB]: 'res-sub-1' } },
    });
    expect(await s.next(300)).toBeUndefined();
    s.close();
  });

  it('the stream holds one upstream session while open; closing it unsubscribes upstream and gives the session back', async () => {
    const pool = gw.gateway.upstreams.get('conformance')!.pool;
    // The streams of the tests before have been closed: their sessions come back.
    await expect.poll(() => pool.stats().leased, { timeout: scaled(3000) }).toBe(0);
    const s = await subscribe({ toolsListChanged: true, resourceSubscriptions: ['test://watched-resource'] }, 'held-1');
    await s.next();
    expect(pool.stats().leased).toBe(1);
    expect(upstreamSubscriptions()).toEqual(['test://watched-resource']);
    s.close();
    await expect.poll(() => pool.stats().leased, { timeout: scaled(3000) }).toBe(0);
    // resources/unsubscribe went upstream before the session was given back.
    expect(upstreamSubscriptions()).toEqual([]);
  });

  it('several filters at once: each honored type relayed on one stream', async () => {
    const s = await subscribe(
      { toolsListChanged: true, promptsListChanged: true, resourceSubscriptions: ['test://watched-resource'] },
      'all-1',
    );
    expect((await s.next()).params.notifications).toEqual({
      toolsListChanged: true,
      promptsListChanged: true,
      resourceSubscriptions: ['test://watched-resource'],
    });
    await trigger('test_trigger_prompt_change');
    expect((await nextOf(s, 'notifications/prompts/list_changed')).params._meta[SUB]).toBe('all-1');
    await trigger('test_trigger_resource_update', { uri: 'test://watched-resource' });
    expect((await nextOf(s, 'notifications/resources/updated')).params.uri).toBe('test://watched-resource');
    s.close();
  });

  it('an empty filter is acknowledged empty and the stream ends with the listen result', async () => {
    const s = await subscribe({}, 'empty-1');
    expect(await s.next()).toMatchObject({ method: 'notifications/subscriptions/acknowledged', params: { notifications: {} } });
    expect(await s.next()).toEqual({ jsonrpc: '2.0', id: 'empty-1', result: { resultType: 'complete', _meta: { [SUB]: 'empty-1' } } });
  });

  it('taskIds without the tasks extension → 400 / -32021', async () => {
    const s = await subscribe({ taskIds: ['t-1'] }, 'tasks-1');
    expect(s.status).toBe(400);
    expect((await s.next()).error.code).toBe(-32021);
  });

  it('at shutdown an open stream ends with the listen result', async () => {
    const other = await startGateway({ upstreams: { conformance: conformanceUpstream() } });
    const s = await listen(other.url('conformance'), { toolsListChanged: true }, { id: 'bye-1' });
    expect((await s.next(10_000)).params.notifications).toEqual({ toolsListChanged: true });
    await other.close();
    expect(await s.next()).toEqual({ jsonrpc: '2.0', id: 'bye-1', result: { resultType: 'complete', _meta: { [SUB]: 'bye-1' } } });
  });
});
