/**
 * The audit trail (docs/approvals.md "Audit trail"): with `audit.destination` a file, a run of calls
 * against real peers — a 2026-07-28 client (raw HTTP) and the official v1 SDK client (a legacy
 * session) in front of the legacy fixture server over stdio, the federated `/mcp` over it and the
 * 2026-07-28 fixture — leaves one line per call, field by field as the calls were made: approvals
 * asked, accepted and declined, an upstream error, tool-policy refusals, a task and its end, and a 429. No argument and
 * nothing typed into a form is in the file; the principal is hashed.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestOf } from '../../src/security/seal.js';
import { principalHash } from '../../src/security/auth.js';
import { envelope, memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { elicitingClient } from '../helpers/v1client.js';
import { eventually, fixtureStdio, modernStdio } from '../helpers/fixture.js';
import { runCli } from '../helpers/cli.js';

const KEY = 'key-of-auditor-0123456789';
/** The caller's principal as configured (auth apiKeys), and as the gateway names it. */
const PRINCIPAL = 'auditor-principal-raw';
const NAMED = `apikey:${PRINCIPAL}`;
const AUTH = { authorization: `Bearer ${KEY}` };
const FORM = { elicitation: { form: {} } };
/** Distinctive strings: in arguments, and typed into forms. Neither may reach the file. */
const RAW_ARG = 'raw-argument-Kq7Zp';
const TYPED = 'typed-into-form-Wx93Lm';

let dir: string;
let gw: TestGateway;
const clients: Client[] = [];

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'mrtr-audit-'));
  gw = await startGateway({
    auth: { mode: 'apiKeys', keys: [{ principal: PRINCIPAL, key: KEY }] },
    audit: { destination: join(dir, 'audit.jsonl') },
    upstreams: {
      fx: {
        ...fixtureStdio(),
        tools: { deny: ['crash'] },
        approvals: { tools: ['echo_after_ask'] },
        tasks: { tools: { env_token: { taskAfterMs: 0 } } },
      },
      mod: modernStdio(),
    },
    federation: { enabled: true, upstreams: ['fx', 'mod'] },
  });
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await gw?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** The audit file's text and its lines. */
const fileText = (file = join(dir, 'audit.jsonl')) => {
  try {
    return readFileSync(file, 'utf8');
  } catch {
    return '';
  }
};
const lines = (file?: string): Record<string, any>[] =>
  fileText(file)
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));

/** Waits until the file holds `n` lines, and returns them. */
async function linesSoon(n: number, file?: string): Promise<Record<string, any>[]> {
  await eventually(() => lines(file).length >= n);
  return lines(file);
}

/** A 2026-07-28 `tools/call` of `path` (`/fx`, or '' for the federated endpoint) as the caller. */
const call = (path: string, params: Record<string, unknown>, id: number) =>
  rpc(`${gw.base}/mcp${path}`, 'tools/call', params, { caps: FORM, headers: AUTH, id });

const hashed = `sha256:${principalHash(NAMED)}`;
const modern = { principal: hashed, era: '2026-07-28', transport: 'streamable-http' };

describe('audit trail', () => {
  it('has one line per call of a 2026-07-28 client and a legacy client, field by field, and nothing typed', async () => {
    const args = { tag: RAW_ARG };
    // 1. Approval asked.
    const asked = await call('/fx', { name: 'echo_after_ask', arguments: args }, 101);
    expect(asked.body.result.resultType).toBe('input_required');
    // 2. Approved: the call runs, and the upstream asks a form of its own.
    const approved = await call(
      '/fx',
      {
        name: 'echo_after_ask',
        arguments: args,
        inputResponses: { approval: { action: 'accept', content: {} } },
        requestState: asked.body.result.requestState,
      },
      102,
    );
    expect(approved.body.result.resultType).toBe('input_required');
    const key = Object.keys(approved.body.result.inputRequests)[0]!;
    // 3. The user types into the upstream's form; the call completes.
    const done = await call(
      '/fx',
      {
        name: 'echo_after_ask',
        arguments: args,
        inputResponses: { [key]: { action: 'accept', content: { name: TYPED } } },
        requestState: approved.body.result.requestState,
      },
      103,
    );
    expect(done.body.result.content[0].text).toContain(TYPED);
    // 4. Declined: refused, the upstream never called.
    const other = { tag: `${RAW_ARG}-2` };
    const asked2 = await call('/fx', { name: 'echo_after_ask', arguments: other }, 104);
    const declined = await call(
      '/fx',
      {
        name: 'echo_after_ask',
        arguments: other,
        inputResponses: { approval: { action: 'decline' } },
        requestState: asked2.body.result.requestState,
      },
      105,
    );
    expect(declined.body.result.isError).toBe(true);
    // 4b. No form capability: -32021; a requestState that is not a sealed state: -32602. Both refused.
    const noForm = await rpc(gw.url('fx'), 'tools/call', { name: 'echo_after_ask', arguments: args }, { headers: AUTH, id: 121 });
    expect(noForm.body.error.code).toBe(-32021);
    const badState = await call('/fx', { name: 'echo_after_ask', arguments: args, inputResponses: {}, requestState: 'not-a-state' }, 122);
    expect(badState.body.error.code).toBe(-32602);
    // 5. The upstream's error (a result its SDK refuses); 6. a tool the policy does not serve; 7. ping and server/discover: no line.
    const bad = await call('/fx', { name: 'bad_result', arguments: {} }, 106);
    const badCode = bad.body.error.code;
    expect(badCode).toBeLessThan(0);
    const denied = await call('/fx', { name: 'crash', arguments: { why: RAW_ARG } }, 107);
    expect(denied.body.error.code).toBe(-32602);
    // ping is gone from 2026-07-28 (404 / -32601), and has no line either.
    expect((await rpc(gw.url('fx'), 'ping', {}, { headers: AUTH, id: 108 })).status).toBe(404);
    expect((await rpc(gw.url('fx'), 'server/discover', {}, { headers: AUTH, id: 109 })).status).toBe(200);
    // 8. The federated endpoint: one line per member.
    const listed = await rpc(`${gw.base}/mcp`, 'tools/list', {}, { headers: AUTH, id: 110 });
    expect(listed.body.result.tools.length).toBeGreaterThan(0);
    // 9. A legacy client: approval asked with elicitation/create, then the upstream's own form.
    const forms: string[] = [];
    const { client } = await elicitingClient(gw.url('fx'), AUTH, false, async (p) => {
      forms.push(p.message);
      return forms.length === 1 ? { action: 'accept', content: {} } : { action: 'accept', content: { name: TYPED } };
    });
    clients.push(client);
    const legacyArgs = { tag: `${RAW_ARG}-legacy` };
    const legacyDone = await client.callTool({ name: 'echo_after_ask', arguments: legacyArgs });
    expect(JSON.stringify(legacyDone)).toContain(TYPED);
    // 10. A legacy call of a tool the policy does not serve.
    await expect(client.callTool({ name: 'crash', arguments: {} })).rejects.toThrow(/crash/);

    // 10b. A task: its line says so; polling it (tasks/get) has none.
    const TASKS = { ...FORM, extensions: { 'io.modelcontextprotocol/tasks': {} } };
    const task = await rpc(gw.url('fx'), 'tools/call', { name: 'env_token', arguments: {} }, { caps: TASKS, headers: AUTH, id: 131 });
    expect(task.body.result.resultType).toBe('task');
    const taskId = task.body.result.taskId ?? task.body.result.task?.taskId;
    const polled = await rpc(gw.url('fx'), 'tasks/get', { taskId }, { caps: TASKS, headers: { ...AUTH, 'mcp-name': taskId }, id: 132 });
    expect(polled.status).toBe(200);
    // 11. A legacy client on the federated /mcp: one line per member call, from the router.
    const fed = await elicitingClient(`${gw.base}/mcp`, AUTH, false, async () => ({ action: 'cancel' }));
    clients.push(fed.client);
    expect((await fed.client.listTools()).tools.length).toBeGreaterThan(0);

    const got = await linesSoon(17);
    expect(got).toHaveLength(17);
    expect(got.filter((l) => l.method === 'tasks/get')).toEqual([]);
    // The task's line, and its end's, joined by its id.
    const ofTask = { ...modern, upstream: 'fx', method: 'tools/call', name: 'env_token', taskId };
    expect(got.filter((l) => l.rpcId === 131)).toEqual([
      expect.objectContaining({ ...ofTask, outcome: 'task' }),
      expect.objectContaining({ ...ofTask, outcome: 'complete' }),
    ]);
    const of2026 = got.filter((l) => l.era === '2026-07-28');
    expect(of2026.slice(5, 7)).toEqual([
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        name: 'echo_after_ask',
        argsDigest: digestOf(args),
        outcome: 'refused',
        code: -32021,
        rpcId: 121,
      }),
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        name: 'echo_after_ask',
        argsDigest: digestOf(args),
        outcome: 'refused',
        code: -32602,
        rpcId: 122,
      }),
    ]);
    of2026.splice(5, 2);
    expect(of2026.slice(0, 7)).toEqual([
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        method: 'tools/call',
        name: 'echo_after_ask',
        argsDigest: digestOf(args),
        approval: 'asked',
        outcome: 'input_required',
        rpcId: 101,
        requestId: asked.headers.get('x-request-id'),
      }),
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        method: 'tools/call',
        name: 'echo_after_ask',
        argsDigest: digestOf(args),
        approval: 'accepted',
        outcome: 'input_required',
        rpcId: 102,
      }),
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        method: 'tools/call',
        name: 'echo_after_ask',
        argsDigest: digestOf(args),
        outcome: 'complete',
        rpcId: 103,
      }),
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        method: 'tools/call',
        argsDigest: digestOf(other),
        approval: 'asked',
        outcome: 'input_required',
        rpcId: 104,
      }),
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        method: 'tools/call',
        argsDigest: digestOf(other),
        approval: 'declined',
        outcome: 'refused',
        rpcId: 105,
      }),
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        method: 'tools/call',
        name: 'bad_result',
        argsDigest: digestOf({}),
        outcome: 'error',
        code: badCode,
        reason: bad.body.error.data?.reason,
        rpcId: 106,
      }),
      expect.objectContaining({
        ...modern,
        upstream: 'fx',
        method: 'tools/call',
        name: 'crash',
        argsDigest: digestOf({ why: RAW_ARG }),
        outcome: 'refused',
        code: -32602,
        rpcId: 107,
      }),
    ]);
    expect(of2026[2].approval).toBeUndefined();
    expect(of2026[5].approval).toBeUndefined();
    // Ping and server/discover have no line; the federated list has one per member.
    expect(got.some((l) => l.method === 'ping' || l.method === 'server/discover')).toBe(false);
    const federated = of2026.filter((l) => l.upstream === '*');
    expect(federated.map((l) => l.member).sort()).toEqual(['fx', 'mod']);
    for (const l of federated) expect(l).toMatchObject({ ...modern, method: 'tools/list', outcome: 'complete', rpcId: 110 });
    expect(federated[0].argsDigest).toBeUndefined();

    const federatedLegacy = got.filter((l) => l.era !== '2026-07-28' && l.upstream === '*');
    expect(federatedLegacy.map((l) => l.member).sort()).toEqual(['fx', 'mod']);
    for (const l of federatedLegacy)
      expect(l).toMatchObject({
        principal: hashed,
        era: '2025-11-25',
        transport: 'streamable-http',
        method: 'tools/list',
        outcome: 'complete',
      });
    const legacy = got.filter((l) => l.era !== '2026-07-28' && l.upstream === 'fx');
    expect(legacy).toEqual([
      expect.objectContaining({
        principal: hashed,
        era: '2025-11-25',
        transport: 'streamable-http',
        upstream: 'fx',
        method: 'tools/call',
        name: 'echo_after_ask',
        argsDigest: digestOf(legacyArgs),
        approval: 'accepted',
        outcome: 'complete',
      }),
      expect.objectContaining({
        principal: hashed,
        era: '2025-11-25',
        transport: 'streamable-http',
        upstream: 'fx',
        method: 'tools/call',
        name: 'crash',
        outcome: 'refused',
        code: -32602,
      }),
    ]);
    expect(typeof legacy[0].rpcId).toBe('number');
    for (const l of got) {
      expect(typeof l.time).toBe('string');
      expect(Number.isNaN(Date.parse(l.time))).toBe(false);
      expect(typeof l.durationMs).toBe('number');
    }

    // Nothing typed, no argument, no raw principal, no key.
    const text = fileText();
    for (const secret of [TYPED, RAW_ARG, PRINCIPAL, KEY]) expect(text).not.toContain(secret);
  });
});

describe('audit destination', () => {
  it('a file whose directory does not exist stops the start with exit code 2, naming audit.destination', async () => {
    const file = join(dir, 'gateway.config.json');
    writeFileSync(file, JSON.stringify({ audit: { destination: join(dir, 'missing', 'audit.jsonl') }, upstreams: { fx: fixtureStdio() } }));
    const r = await runCli(['--config', file, '--port', '0']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^mrtr-gateway: audit\.destination: cannot open '.*missing\/audit\.jsonl' for appending/);
  });
});

describe('audit trail of the limits', () => {
  let limited: TestGateway | undefined;
  afterAll(async () => {
    await limited?.close();
  });

  it('a 429 is a refused line with the method and name of the Mcp-Method and Mcp-Name headers', async () => {
    const file = join(dir, 'limits.jsonl');
    limited = await startGateway({
      auth: { mode: 'apiKeys', keys: [{ principal: PRINCIPAL, key: KEY }] },
      audit: { destination: file, principal: 'plain' },
      limits: { rateLimit: { requestsPerSecond: 0.001, burst: 1 } },
      upstreams: { fx: fixtureStdio() },
    });
    const first = await rpc(limited.url('fx'), 'tools/list', {}, { headers: AUTH, id: 1 });
    expect(first.status).toBe(200);
    const refused = await rpc(
      limited.url('fx'),
      'tools/call',
      { name: 'echo_after_ask', arguments: { tag: RAW_ARG } },
      { headers: AUTH, id: 2, meta: envelope(FORM) },
    );
    expect(refused.status).toBe(429);
    const got = await linesSoon(2, file);
    expect(got[0]).toMatchObject({ principal: NAMED, upstream: 'fx', method: 'tools/list', outcome: 'complete' });
    expect(got[1]).toMatchObject({
      principal: NAMED,
      upstream: 'fx',
      method: 'tools/call',
      name: 'echo_after_ask',
      outcome: 'refused',
      code: -32600,
      era: '2026-07-28',
      requestId: refused.headers.get('x-request-id'),
    });
    expect(got[1].argsDigest).toBeUndefined();
    expect(fileText(file)).not.toContain(RAW_ARG);
  });
});

describe('audit trail of resources', () => {
  let gw2: TestGateway | undefined;
  afterAll(async () => {
    await gw2?.close();
  });

  it("a resource URI's password and secret-named query values are redacted in its line and its request log line", async () => {
    const file = join(dir, 'resources.jsonl');
    const logs = memoryLogger('info');
    gw2 = await startGateway(
      {
        auth: { mode: 'apiKeys', keys: [{ principal: PRINCIPAL, key: KEY }] },
        audit: { destination: file },
        upstreams: { fx: fixtureStdio() },
      },
      { log: logs.log },
    );
    const uri = 'postgres://admin:Pw-Qz81xx@db.local/app?api_key=Kx-77abc&sslmode=require#t';
    const read = await rpc(gw2.url('fx'), 'resources/read', { uri }, { headers: AUTH, id: 1 });
    expect(read.status).toBe(200);
    const [line] = await linesSoon(1, file);
    expect(line).toMatchObject({
      method: 'resources/read',
      name: 'postgres://admin:[redacted]@db.local/app?api_key=[redacted]&sslmode=require#t',
    });
    expect(fileText(file)).not.toMatch(/Pw-Qz81xx|Kx-77abc/);
    const logged = logs.lines().find((l) => l.msg === 'request' && l.method === 'resources/read');
    expect(logged?.name).toBe(line!.name);
    expect(JSON.stringify(logs.lines())).not.toMatch(/Pw-Qz81xx|Kx-77abc/);
  });
});
