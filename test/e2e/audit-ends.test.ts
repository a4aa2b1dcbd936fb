/**
 * The audit trail (docs/approvals.md "Audit trail") of calls refused by an upstream's or a tool's
 * rate limit (`upstreams.NAME.limits`) — on `/mcp/NAME` for a 2026-07-28 client, a legacy session
 * (the v1 SDK over Streamable HTTP) and an HTTP+SSE session, and on the federated `/mcp` for a
 * 2026-07-28 client and a legacy session — and of tasks: the line of the call that became a task,
 * and the line of the task's end, joined by `taskId`. The legacy fixture server over stdio.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestOf } from '../../src/security/seal.js';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, fixtureStdio } from '../helpers/fixture.js';

const PRINCIPALS = ['modern', 'federated', 'legacy', 'legacyfed', 'sse', 'tasks'] as const;
const keyOf = (principal: string) => `key-of-${principal}-0123456789abcdef`;
const auth = (principal: string) => ({ authorization: `Bearer ${keyOf(principal)}` });
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} }, elicitation: { form: {} } };

let dir: string;
let gw: TestGateway;
const clients: Client[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mrtr-audit-ends-'));
  gw = await startGateway({
    auth: { mode: 'apiKeys', keys: PRINCIPALS.map((p) => ({ principal: p, key: keyOf(p) })) },
    audit: { destination: join(dir, 'audit.jsonl'), principal: 'plain' },
    federation: { enabled: true, upstreams: ['f'] },
    upstreams: {
      f: {
        ...fixtureStdio(),
        // One call of env_token per caller in a very long window.
        limits: { tools: { env_token: { requestsPerSecond: 0.001, burst: 1 } } },
        approvals: { tools: ['slow', 'ask_name'] },
        tasks: { tools: { slow: { taskAfterMs: 0 }, ask_name: { required: true }, bad_result: { taskAfterMs: 0 } } },
      },
    },
  });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await gw?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const lines = (): Record<string, any>[] => {
  let text = '';
  try {
    text = readFileSync(join(dir, 'audit.jsonl'), 'utf8');
  } catch {
    // Not written yet.
  }
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
};
/** The lines of `principal` once `n` are there. */
async function linesOf(principal: string, n: number): Promise<Record<string, any>[]> {
  await eventually(() => lines().filter((l) => l.principal === `apikey:${principal}`).length >= n);
  return lines().filter((l) => l.principal === `apikey:${principal}`);
}

const refusedLine = { method: 'tools/call', argsDigest: digestOf({}), outcome: 'refused', code: -32600 };

/** A connected v1 SDK client of `principal` over `transport` ('http': Streamable HTTP, 'sse': HTTP+SSE) on `url`. */
async function legacyClient(url: string, principal: string, transport: 'http' | 'sse'): Promise<Client> {
  const client = new Client({ name: 'audited', version: '1.0.0' });
  const headers = auth(principal);
  await client.connect(
    transport === 'http'
      ? new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } })
      : new SSEClientTransport(new URL(url), {
          requestInit: { headers },
          eventSourceInit: { fetch: (u, init) => fetch(u, { ...init, headers: { ...(init?.headers as object), ...headers } }) },
        }),
  );
  clients.push(client);
  return client;
}

describe('audit lines of upstream and tool limits', () => {
  it('a 2026-07-28 call refused on /mcp/NAME and on /mcp is a refused line (-32600) with its method, name and argsDigest', async () => {
    const call = (url: string, name: string, principal: string, id: number) =>
      rpc(url, 'tools/call', { name, arguments: {} }, { headers: auth(principal), id });
    expect((await call(gw.url('f'), 'env_token', 'modern', 1)).status).toBe(200);
    const refused = await call(gw.url('f'), 'env_token', 'modern', 2);
    expect(refused.status).toBe(429);
    expect((await call(`${gw.base}/mcp`, 'f_env_token', 'federated', 3)).status).toBe(200);
    expect((await call(`${gw.base}/mcp`, 'f_env_token', 'federated', 4)).status).toBe(429);

    const modern = { era: '2026-07-28', transport: 'streamable-http' };
    expect((await linesOf('modern', 2))[1]).toMatchObject({
      ...refusedLine,
      ...modern,
      upstream: 'f',
      name: 'env_token',
      rpcId: 2,
      requestId: refused.headers.get('x-request-id'),
    });
    expect((await linesOf('federated', 2))[1]).toMatchObject({
      ...refusedLine,
      ...modern,
      upstream: '*',
      member: 'f',
      name: 'env_token',
      rpcId: 4,
    });
  });

  it('a legacy session refused on /mcp/NAME (Streamable HTTP and HTTP+SSE) and on /mcp is a refused line of its era and transport', async () => {
    const direct = await legacyClient(gw.url('f'), 'legacy', 'http');
    const federated = await legacyClient(`${gw.base}/mcp`, 'legacyfed', 'http');
    const sse = await legacyClient(`${gw.base}/mcp/f/sse`, 'sse', 'sse');
    for (const [client, name] of [
      [direct, 'env_token'],
      [federated, 'f_env_token'],
      [sse, 'env_token'],
    ] as const) {
      await client.callTool({ name, arguments: {} });
      await expect(client.callTool({ name, arguments: {} })).rejects.toThrow(/Rate limit of tool env_token on upstream f/);
    }
    const http = { era: '2025-11-25', transport: 'streamable-http' };
    expect((await linesOf('legacy', 2))[1]).toMatchObject({ ...refusedLine, ...http, upstream: 'f', name: 'env_token' });
    expect((await linesOf('legacyfed', 2))[1]).toMatchObject({ ...refusedLine, ...http, upstream: '*', member: 'f', name: 'env_token' });
    // The HTTP+SSE session's era is the revision it negotiated, as on the line of its call that ran.
    const [ran, refused] = await linesOf('sse', 2);
    expect(refused).toMatchObject({ ...refusedLine, ...http, transport: 'sse', upstream: 'f', name: 'env_token' });
    expect(ran).toMatchObject({ era: refused!.era, transport: 'sse', outcome: 'complete' });
    expect(typeof (await linesOf('legacy', 2))[1]!.rpcId).toBe('number');
  });
});

describe('audit lines of tasks', () => {
  const url = () => gw.url('f');
  const opts = (id: number, taskId?: string) => ({
    caps: TASKS,
    headers: { ...auth('tasks'), ...(taskId ? { 'mcp-name': taskId } : {}) },
    id,
  });
  /** Starts a task of `name`; returns its id. */
  async function task(name: string, args: Record<string, unknown>, id: number): Promise<string> {
    const created = await rpc(url(), 'tools/call', { name, arguments: args }, opts(id));
    expect(created.body.result?.resultType, JSON.stringify(created.body)).toBe('task');
    return created.body.result.taskId;
  }
  /** The two lines of task `taskId` (its creation, its end), once both are written. */
  async function linesOfTask(taskId: string): Promise<Record<string, any>[]> {
    await eventually(() => lines().filter((l) => l.taskId === taskId).length >= 2, 10_000);
    return lines().filter((l) => l.taskId === taskId);
  }
  const base = { principal: 'apikey:tasks', upstream: 'f', method: 'tools/call', era: '2026-07-28', transport: 'streamable-http' };

  it('a task has a line when created (outcome task) and one when it ends, joined by taskId; approval and outcome as answered', async () => {
    const args = { ms: 5, steps: 1 };
    const accepted = await task('slow', args, 11);
    await rpc(
      url(),
      'tasks/update',
      { taskId: accepted, inputResponses: { approval: { action: 'accept', content: {} } } },
      opts(12, accepted),
    );
    const declined = await task('slow', args, 13);
    await rpc(url(), 'tasks/update', { taskId: declined, inputResponses: { approval: { action: 'decline' } } }, opts(14, declined));
    const cancelled = await task('ask_name', { greeting: 'Hi' }, 15);
    await rpc(url(), 'tasks/cancel', { taskId: cancelled }, opts(16, cancelled));
    const failed = await task('bad_result', {}, 17);

    const created = { ...base, approval: 'asked', outcome: 'task' };
    expect(await linesOfTask(accepted)).toEqual([
      expect.objectContaining({ ...created, name: 'slow', argsDigest: digestOf(args), rpcId: 11 }),
      expect.objectContaining({ ...base, name: 'slow', argsDigest: digestOf(args), approval: 'accepted', outcome: 'complete', rpcId: 11 }),
    ]);
    expect(await linesOfTask(declined)).toEqual([
      expect.objectContaining({ ...created, rpcId: 13 }),
      expect.objectContaining({ ...base, approval: 'declined', outcome: 'refused', rpcId: 13 }),
    ]);
    expect(await linesOfTask(cancelled)).toEqual([
      expect.objectContaining({ ...created, name: 'ask_name', rpcId: 15 }),
      expect.objectContaining({ ...base, name: 'ask_name', approval: 'asked', outcome: 'cancelled', rpcId: 15 }),
    ]);
    const [began, ended] = await linesOfTask(failed);
    expect(began).toMatchObject({ ...base, name: 'bad_result', outcome: 'task', rpcId: 17 });
    expect(ended).toMatchObject({ ...base, name: 'bad_result', outcome: 'error', rpcId: 17 });
    expect(ended!.code).toBeLessThan(0);
    expect(ended!.approval).toBeUndefined();
    // The end's duration runs from the task's creation; each task ends once.
    for (const taskId of [accepted, declined, cancelled, failed]) {
      const [first, last] = await linesOfTask(taskId);
      expect(last!.durationMs).toBeGreaterThanOrEqual(0);
      expect(Date.parse(last!.time)).toBeGreaterThanOrEqual(Date.parse(first!.time));
    }
    expect((await linesOfTask(accepted)).length).toBe(2);
  });
});
