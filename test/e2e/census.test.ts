/**
 * The deprecation census counts what legacy upstreams use, in both era paths: the Exchange (a
 * 2026-07-28 client in front of a legacy upstream) and the pass-through relay of a legacy
 * client's session, plus what arrives on a pooled session outside any call. Upstreams: the
 * legacy fixture (over stdio and over Streamable HTTP), the conformance fixture (log messages)
 * and server-everything (a 2025-11-25 task tool). The census is read from `/admin/api/census` and from `/metrics`.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  CallToolResultSchema,
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { conformanceUpstream, fixtureStdio, startFixtureHttp } from '../helpers/fixture.js';
import type { SpawnedServer } from '../helpers/processes.js';
import { everythingStdio, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { scaled } from '../helpers/budget.js';

const ALL = { elicitation: { form: {}, url: {} }, sampling: { tools: {} }, roots: {}, extensions: { 'io.modelcontextprotocol/tasks': {} } };

interface Entry {
  upstream: string;
  tool: string;
  feature: string;
  calls: number;
  firstSeen: string;
  lastSeen: string;
}

/** A v1 SDK (2025-11-25) client on a legacy session, answering elicitation with `elicit`, sampling and roots itself. */
async function legacyClient(
  url: string,
  elicit: (params: any) => Promise<Record<string, unknown>> | Record<string, unknown> = () => ({
    action: 'accept',
    content: { name: 'Ada', topic: 'bees' },
  }),
) {
  const client = new Client(
    { name: 'census-e2e', version: '1.0.0' },
    { capabilities: { elicitation: { form: {}, url: {} }, sampling: {}, roots: {} } },
  );
  client.setRequestHandler(ElicitRequestSchema, async (r) => (await elicit(r.params)) as never);
  client.setRequestHandler(CreateMessageRequestSchema, async () => ({
    role: 'assistant',
    model: 'm',
    content: { type: 'text', text: 'ok' },
    stopReason: 'endTurn',
  }));
  client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: 'file:///work' }] }));
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  return { client, transport };
}

describe('deprecation census', () => {
  let gw: TestGateway;
  let http: SpawnedServer & { config: Record<string, unknown> };
  beforeAll(async () => {
    http = await startFixtureHttp('http');
    gw = await startGateway({
      admin: { enabled: true },
      upstreams: {
        f: fixtureStdio(),
        h: http.config,
        c: conformanceUpstream(),
        e: { ...everythingStdio, tasks: { taskAfterMs: 0 } },
      },
    });
  }, scaled(60_000));
  afterAll(async () => {
    await gw?.close();
    await http?.stop();
  });

  const census = async (): Promise<Entry[]> => (await (await fetch(`${gw.base}/admin/api/census`)).json()).entries;
  const row = (entries: Entry[], upstream: string, tool: string, feature: string) =>
    entries.find((e) => e.upstream === upstream && e.tool === tool && e.feature === feature);

  it(
    'counts, through the Exchange, every feature a 2026-07-28 client meets, once per call',
    async () => {
      const call = (upstream: string, name: string, args: Record<string, unknown> = {}, extra: Record<string, unknown> = {}) =>
        rpc(gw.url(upstream), 'tools/call', { name, arguments: args, ...extra }, { caps: ALL });
      expect((await call('f', 'ask_name')).body.result.resultType).toBe('input_required');
      expect((await call('f', 'url_consent')).body.result.resultType).toBe('input_required');
      expect((await call('f', 'summarize', { text: 'x' })).body.result.resultType).toBe('input_required');
      expect((await call('f', 'sample_with_tools')).body.result.resultType).toBe('input_required');
      // Elicitation and sampling answered up front: the call reaches its roots/list.
      const three = await call(
        'f',
        'three_rounds',
        {},
        {
          inputResponses: {
            'elicitation-1': { action: 'accept', content: { topic: 'bees' } },
            'sampling-2': { role: 'assistant', model: 'm', content: { type: 'text', text: 'buzz' }, stopReason: 'endTurn' },
          },
        },
      );
      expect(Object.values(three.body.result.inputRequests).map((r: any) => r.method)).toEqual(['roots/list']);
      const url = await call('f', 'url_required');
      expect(Object.values(url.body.result.inputRequests).map((r: any) => r.params.mode)).toEqual(['url']);
      expect((await call('c', 'test_tool_with_logging')).body.result.resultType).toBe('complete');
      expect((await call('e', 'simulate-research-query', { topic: 'census' })).body.result.resultType).toBe('task');
      // Returns at once; the upstream asks roots/list 300 ms later, outside any call.
      expect((await call('f', 'later_roots')).body.result.resultType).toBe('complete');
      let entries = await census();
      for (let i = 0; i < 50 && !row(entries, 'f', '(none)', 'roots_list'); i++) {
        await new Promise((r) => setTimeout(r, 100));
        entries = await census();
      }
      const expected: [string, string, string][] = [
        ['f', 'ask_name', 'elicitation_form'],
        ['f', 'url_consent', 'elicitation_url'],
        ['f', 'summarize', 'sampling'],
        ['f', 'sample_with_tools', 'sampling_tools'],
        ['f', 'three_rounds', 'elicitation_form'],
        ['f', 'three_rounds', 'sampling'],
        ['f', 'three_rounds', 'roots_list'],
        ['f', 'url_required', 'url_elicitation_required'],
        ['c', 'test_tool_with_logging', 'logging'],
        ['e', 'simulate-research-query', 'legacy_tasks'],
        ['f', '(none)', 'roots_list'],
      ];
      for (const [upstream, tool, feature] of expected) {
        const r = row(entries, upstream, tool, feature);
        expect(r, `${upstream} ${tool} ${feature}`).toBeDefined();
        // Three log messages, one call.
        expect(r!.calls, `${upstream} ${tool} ${feature}`).toBe(1);
        expect(Date.parse(r!.firstSeen)).toBeLessThanOrEqual(Date.parse(r!.lastSeen));
        expect(r!.lastSeen).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      }
      // url_required's URL elicitations are the gateway's own rendering of -32042, not elicitation/create.
      expect(row(entries, 'f', 'url_required', 'elicitation_url')).toBeUndefined();

      const metrics = await (await fetch(`${gw.base}/metrics`)).text();
      expect(metrics).toContain('mrtr_deprecated_feature_calls_total{upstream="f",tool="ask_name",feature="elicitation_form"} 1');
      expect(metrics).toContain('mrtr_deprecated_feature_calls_total{upstream="c",tool="test_tool_with_logging",feature="logging"} 1');
      expect(metrics).toContain(
        'mrtr_deprecated_feature_calls_total{upstream="e",tool="simulate-research-query",feature="legacy_tasks"} 1',
      );
      // First and last use as Unix time, the same instants as the JSON's.
      const askName = row(entries, 'f', 'ask_name', 'elicitation_form')!;
      const seen = (which: string) =>
        Number(
          metrics.match(
            new RegExp(
              `^mrtr_deprecated_feature_${which}_seen_timestamp_seconds\\{upstream="f",tool="ask_name",feature="elicitation_form"\\} (\\S+)$`,
              'm',
            ),
          )?.[1],
        );
      expect(seen('first')).toBe(Date.parse(askName.firstSeen) / 1000);
      expect(seen('last')).toBe(Date.parse(askName.lastSeen) / 1000);
      expect(metrics).toContain('# TYPE mrtr_deprecated_feature_last_seen_timestamp_seconds gauge');
    },
    scaled(60_000),
  );

  it(
    'counts, in a legacy session, under the one tool call in flight, else under (unknown)',
    async () => {
      // While ask_name's question is open, echo_after_ask starts: its question arrives with two tool calls in flight.
      let second: Promise<unknown> | undefined;
      let secondAsked!: () => void;
      const asked = new Promise<void>((r) => (secondAsked = r));
      const { client, transport } = await legacyClient(gw.url('f'), async (p) => {
        if (p.message === 'Who is asking?') {
          secondAsked();
          return { action: 'accept', content: { name: 'Bob' } };
        }
        if (p.message === 'What is your name?' && !second) {
          second = client.callTool({ name: 'echo_after_ask', arguments: { tag: 't' } });
          await asked;
        }
        return { action: 'accept', content: { name: 'Ada', topic: 'bees' } };
      });
      await client.callTool({ name: 'ask_name', arguments: {} });
      await second;
      await client.callTool({ name: 'three_rounds', arguments: {} });
      await expect(client.callTool({ name: 'url_required', arguments: {} })).rejects.toThrow(/-32042|URL elicitation/i);
      await transport.terminateSession();

      // A 2025-11-25 task run by the client itself, and log messages.
      const e = await legacyClient(gw.url('e'));
      const stream = e.client.experimental.tasks.callToolStream(
        { name: 'simulate-research-query', arguments: { topic: 'relay' } },
        CallToolResultSchema,
        { task: { ttl: 60_000 } },
      );
      for await (const m of stream) if (m.type === 'result' || m.type === 'error') break;
      await e.transport.terminateSession();
      const c = await legacyClient(gw.url('c'));
      await c.client.callTool({ name: 'test_tool_with_logging', arguments: {} });
      await c.transport.terminateSession();

      const entries = await census();
      const at = (upstream: string, tool: string, feature: string) => row(entries, upstream, tool, feature)?.calls;
      expect(at('f', 'ask_name', 'elicitation_form')).toBe(2); // once through the Exchange, once here
      expect(at('f', '(unknown)', 'elicitation_form')).toBe(1);
      expect(at('f', 'echo_after_ask', 'elicitation_form')).toBeUndefined();
      expect(at('f', 'three_rounds', 'roots_list')).toBe(2);
      expect(at('f', 'three_rounds', 'sampling')).toBe(2);
      expect(at('f', 'url_required', 'url_elicitation_required')).toBe(2);
      expect(at('e', 'simulate-research-query', 'legacy_tasks')).toBe(2);
      expect(at('c', 'test_tool_with_logging', 'logging')).toBe(2);
    },
    scaled(60_000),
  );

  it(
    'counts the same over a Streamable HTTP upstream: in a call, and on the standalone stream outside any call',
    async () => {
      const call = (name: string) => rpc(gw.url('h'), 'tools/call', { name, arguments: {} }, { caps: ALL });
      // Asked on the standalone stream while no call is in flight (a call alone on its session would get it).
      expect((await call('later_roots')).body.result.resultType).toBe('complete');
      let entries = await census();
      for (const end = Date.now() + scaled(5000); Date.now() < end && !row(entries, 'h', '(none)', 'roots_list');) {
        await new Promise((r) => setTimeout(r, 100));
        entries = await census();
      }
      expect((await call('ask_name')).body.result.resultType).toBe('input_required');
      entries = await census();
      expect(row(entries, 'h', 'ask_name', 'elicitation_form')?.calls).toBe(1);
      expect(row(entries, 'h', '(none)', 'roots_list')?.calls).toBe(1);
      expect(row(entries, 'h', 'later_roots', 'roots_list')).toBeUndefined();
    },
    scaled(30_000),
  );
});
