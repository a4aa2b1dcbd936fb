/**
 * Per-upstream and per-tool rate limits on the federated `POST /mcp`: a call routed to a member
 * counts against the member's limits under the same caller key as on `/mcp/NAME`, so both
 * endpoints count together, for 2026-07-28 clients and legacy clients (the v1 SDK) on `/mcp`.
 * One gateway on its memory store, the legacy fixture over stdio as members `f` (a tool limit) and
 * `g` (an upstream limit).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fixtureStdio } from '../helpers/fixture.js';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { scaled } from '../helpers/budget.js';

const PRINCIPALS = ['modern', 'legacy', 'upstream', 'rounds', 'batch'] as const;
const keyOf = (principal: string) => `key-of-${principal}-0123456789abcdef`;
const auth = (principal: string) => ({ headers: { authorization: `Bearer ${keyOf(principal)}` } });
const TOOL_REFUSED = /Rate limit of tool env_token on upstream f exceeded for this caller; retry after \d+ s/;

describe('upstream and tool limits on the federated /mcp', () => {
  let gw: TestGateway;
  const clients: Client[] = [];

  /** The v1 SDK client (2025-11-25, Streamable HTTP) of `principal` on `url`. */
  async function legacyClient(url: string, principal: string): Promise<Client> {
    const client = new Client({ name: 'legacy', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: { name: 'Ada' } }));
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: auth(principal) }));
    clients.push(client);
    return client;
  }

  /** `tools/call` of `name` by `principal` on `url` (2026-07-28); `slow` tools sleep 1 ms. */
  const call = (url: string, name: string, principal: string) =>
    rpc(url, 'tools/call', { name, arguments: name.endsWith('slow') ? { ms: 1, steps: 1 } : {} }, auth(principal));

  beforeAll(async () => {
    gw = await startGateway({
      federation: { enabled: true },
      auth: { mode: 'apiKeys', keys: PRINCIPALS.map((p) => ({ principal: p, key: keyOf(p) })) },
      upstreams: {
        // Two calls of env_token, and of ask_name, per caller every ten seconds.
        f: {
          ...fixtureStdio(),
          limits: { tools: { env_token: { requestsPerSecond: 0.2, burst: 2 }, ask_name: { requestsPerSecond: 0.2, burst: 2 } } },
        },
        // Four requests per caller every ten seconds.
        g: { ...fixtureStdio(), limits: { rateLimit: { requestsPerSecond: 0.4, burst: 4 } } },
      },
    });
  }, scaled(30_000));
  afterAll(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await gw?.close();
  });

  it(
    'a tool limit of 2 per 10 s holds across /mcp/NAME and /mcp together for a 2026-07-28 client: 429, -32600, Retry-After',
    async () => {
      const first = await call(gw.url('f'), 'env_token', 'modern');
      const second = await call(`${gw.base}/mcp`, 'f_env_token', 'modern');
      expect([first, second].map((r) => r.body.result?.content?.[0]?.text)).toEqual(['(unset)', '(unset)']);
      for (const url of [`${gw.base}/mcp`, gw.url('f')]) {
        const refused = await call(url, url.endsWith('/f') ? 'env_token' : 'f_env_token', 'modern');
        expect(refused.status, url).toBe(429);
        expect(refused.body.error).toMatchObject({ code: -32600, message: expect.stringMatching(TOOL_REFUSED) });
        expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      }
      // Other tools of the member are not counted by the tool limit.
      expect((await call(`${gw.base}/mcp`, 'f_slow', 'modern')).status).toBe(200);
    },
    scaled(30_000),
  );

  it(
    'a legacy client on /mcp counts with /mcp/NAME: refused with -32600 naming the tool; a legacy client on /mcp/NAME is refused too',
    async () => {
      const federated = await legacyClient(`${gw.base}/mcp`, 'legacy');
      expect(await federated.callTool({ name: 'f_env_token', arguments: {} })).toMatchObject({ content: [{ text: '(unset)' }] });
      expect((await call(gw.url('f'), 'env_token', 'legacy')).body.result.content[0].text).toBe('(unset)');
      await expect(federated.callTool({ name: 'f_env_token', arguments: {} })).rejects.toMatchObject({
        code: -32600,
        message: expect.stringMatching(TOOL_REFUSED),
      });
      const direct = await legacyClient(gw.url('f'), 'legacy');
      await expect(direct.callTool({ name: 'env_token', arguments: {} })).rejects.toThrow(TOOL_REFUSED);
      // Lists the federation merges are not calls of the tool.
      expect((await federated.listTools()).tools.map((t) => t.name)).toContain('f_env_token');
    },
    scaled(30_000),
  );

  it(
    "an upstream's rate limit counts the calls routed to it on /mcp with those on /mcp/NAME; the merged lists count nothing",
    async () => {
      const fed = `${gw.base}/mcp`;
      expect((await rpc(fed, 'tools/list', {}, auth('upstream'))).status).toBe(200);
      const answers = [
        await call(gw.url('g'), 'slow', 'upstream'),
        await call(fed, 'g_slow', 'upstream'),
        await call(gw.url('g'), 'slow', 'upstream'),
        await call(fed, 'g_env_token', 'upstream'),
        await call(fed, 'g_slow', 'upstream'),
      ];
      expect(answers.map((r) => r.status)).toEqual([200, 200, 200, 200, 429]);
      expect(answers[4]!.body.error).toMatchObject({ code: -32600, message: expect.stringMatching(/Rate limit of upstream g exceeded/) });
      expect(Number(answers[4]!.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    },
    scaled(30_000),
  );

  it(
    "an upstream's rate limit counts each request of a legacy client's JSON-RPC batch",
    async () => {
      const post = (body: unknown, session?: string) =>
        fetch(gw.url('g'), {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            accept: 'application/json, text/event-stream',
            ...auth('batch').headers,
            ...(session ? { 'mcp-session-id': session, 'mcp-protocol-version': '2025-03-26' } : {}),
          },
          body: JSON.stringify(body),
        });
      const init = await post({
        jsonrpc: '2.0',
        id: 0,
        method: 'initialize',
        params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'batching', version: '1.0.0' } },
      });
      expect(init.status).toBe(200);
      const session = init.headers.get('mcp-session-id')!;
      await init.text();
      expect((await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, session)).status).toBe(202);
      // Five calls in one body, against four requests per caller every ten seconds (initialize took one).
      const batch = [1, 2, 3, 4, 5].map((id) => ({
        jsonrpc: '2.0',
        id,
        method: 'tools/call',
        params: { name: 'slow', arguments: { ms: 1, steps: 1 } },
      }));
      const refused = await post(batch, session);
      expect(refused.status).toBe(429);
      expect(Number(refused.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      expect(JSON.stringify(await refused.json())).toMatch(/Rate limit of upstream g exceeded/);
    },
    scaled(30_000),
  );

  it(
    "a legacy client's call with an elicitation round on /mcp counts once",
    async () => {
      const client = await legacyClient(`${gw.base}/mcp`, 'rounds');
      const ask = () => client.callTool({ name: 'f_ask_name', arguments: {} });
      expect(await ask()).toMatchObject({ content: [{ text: 'Hello, Ada!' }] });
      expect(await ask()).toMatchObject({ content: [{ text: 'Hello, Ada!' }] });
      await expect(ask()).rejects.toMatchObject({
        code: -32600,
        message: expect.stringMatching(/Rate limit of tool ask_name on upstream f/),
      });
    },
    scaled(30_000),
  );
});
