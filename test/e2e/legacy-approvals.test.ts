/**
 * Approvals for legacy client sessions (src/router/approval-relay.ts, docs/approvals.md): the
 * official v1 SDK client (Streamable HTTP) through the gateway in front of the real
 * server-filesystem (stdio, a legacy upstream: the pass-through) with `approvals.destructive`, whose
 * `write_file` is annotated `destructiveHint: true`; and in front of the 2026-07-28 fixture (v2 SDK,
 * stdio: the reverse bridge) with `approvals.tools`. The gateway asks with its own
 * `elicitation/create` form on the call's stream; nothing reaches the upstream unless the user accepts.
 */
import { existsSync, mkdtempSync, readFileSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, McpError, type JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memoryLogger, startGateway, type TestGateway } from '../helpers/gateway.js';
import { elicitingClient } from '../helpers/v1client.js';
import { eventually, FixtureLog, modernStdio } from '../helpers/fixture.js';
import { textOf } from '../helpers/v2client.js';

const FILESYSTEM = fileURLToPath(new URL('../../node_modules/@modelcontextprotocol/server-filesystem/dist/index.js', import.meta.url));

let gw: TestGateway;
let dir: string;
const fixture = new FixtureLog();
const logs = memoryLogger('info');
const clients: Client[] = [];

beforeAll(async () => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), 'mrtr-approvals-')));
  gw = await startGateway(
    {
      upstreams: {
        fs: {
          transport: 'stdio',
          command: process.execPath,
          args: [FILESYSTEM, dir],
          protocol: 'legacy',
          approvals: { destructive: true, rememberMs: 60_000 },
        },
        modern: { ...modernStdio(fixture, { FIXTURE_EXTRA_TOOLS: '["extra_write"]' }), approvals: { tools: ['extra_*'] } },
      },
    },
    { log: logs.log },
  );
});
afterAll(async () => {
  await Promise.all(clients.map((c) => c.close().catch(() => {})));
  await gw?.close();
});

/** A v1 SDK client of upstream `name` declaring form-mode elicitation; `onElicit` answers each form (its params). */
async function asking(name: string, onElicit: (params: any) => Promise<Record<string, unknown>>): Promise<Client> {
  const { client } = await elicitingClient(gw.url(name), {}, false, onElicit);
  clients.push(client);
  return client;
}

const write = (client: Client, file: string, content: string) =>
  client.callTool({ name: 'write_file', arguments: { path: join(dir, file), content } });

/** The legacy request log lines of `tools/call` of `tool`. */
const logged = (tool: string) => logs.lines().filter((l) => l.msg === 'request' && l.era === 'legacy' && l.name === tool);

describe('a legacy client on a legacy upstream (server-filesystem, pass-through)', () => {
  it('accept: the form names the tool, the upstream and the arguments, other requests go on meanwhile, and the file is written', async () => {
    const asked: any[] = [];
    let listedMeanwhile = '';
    const client = await asking('fs', async (params) => {
      asked.push(params);
      // The call waits for this answer; the session's other requests do not.
      listedMeanwhile = textOf((await client.callTool({ name: 'list_allowed_directories', arguments: {} })) as never);
      return { action: 'accept' };
    });
    const r = await write(client, 'accepted.txt', 'hello');
    expect(r.isError).toBeFalsy();
    expect(readFileSync(join(dir, 'accepted.txt'), 'utf8')).toBe('hello');
    expect(listedMeanwhile).toContain(dir);
    expect(asked).toEqual([
      {
        mode: 'form',
        message: expect.stringMatching(/write_file[\s\S]*fs|fs[\s\S]*write_file/),
        requestedSchema: expect.objectContaining({ type: 'object', properties: expect.objectContaining({ remember: expect.anything() }) }),
      },
    ]);
    expect(asked[0].message).toContain('accepted.txt');
    // A read-only tool is not asked about.
    expect(asked).toHaveLength(1);
    expect(await eventually(() => logged('write_file').some((l) => l.approval === 'accepted'))).toBe(true);
  });

  it('decline: nothing is written and the call is an isError tool result', async () => {
    const client = await asking('fs', async () => ({ action: 'decline' }));
    const r = await write(client, 'declined.txt', 'nope');
    expect(r.isError).toBe(true);
    expect(textOf(r as never)).toMatch(/declined/i);
    expect(existsSync(join(dir, 'declined.txt'))).toBe(false);
    expect(await eventually(() => logged('write_file').some((l) => l.approval === 'declined' && l.outcome === 'complete'))).toBe(true);
  });

  it('an accept remembered for exactly these arguments: the same call again is not asked; changed arguments are asked again', async () => {
    const asked: any[] = [];
    const client = await asking('fs', async (params) => {
      asked.push(params);
      return asked.length === 1 ? { action: 'accept', content: { remember: true } } : { action: 'decline' };
    });
    expect((await write(client, 'remembered.txt', 'one')).isError).toBeFalsy();
    expect((await write(client, 'remembered.txt', 'one')).isError).toBeFalsy();
    expect(asked).toHaveLength(1);
    const changed = await write(client, 'remembered.txt', 'two');
    expect(asked).toHaveLength(2);
    expect(asked[1].message).toContain('two');
    expect(changed.isError).toBe(true);
    expect(readFileSync(join(dir, 'remembered.txt'), 'utf8')).toBe('one');
    expect(await eventually(() => logged('write_file').some((l) => l.approval === 'remembered'))).toBe(true);
  });

  it('a client without the elicitation capability gets -32021 naming it, and nothing is written', async () => {
    const client = new Client({ name: 'plain-client', version: '1.0.0' }, { capabilities: {} });
    clients.push(client);
    await client.connect(new StreamableHTTPClientTransport(new URL(gw.url('fs'))));
    const err = (await write(client, 'refused.txt', 'x').catch((e: unknown) => e)) as McpError;
    expect(err).toBeInstanceOf(McpError);
    expect(err.code).toBe(-32021);
    expect(err.data).toEqual({ requiredCapabilities: { elicitation: { form: {} } } });
    expect(err.message).toMatch(/write_file.*approval.*elicitation\.form.*initialize/);
    expect(existsSync(join(dir, 'refused.txt'))).toBe(false);
  });

  it('the client cancels the call while the form is open: the form is withdrawn and nothing is written', async () => {
    const abort = new AbortController();
    let withdrawn!: () => void;
    const formWithdrawn = new Promise<void>((r) => (withdrawn = r));
    const { client } = await elicitingClient(gw.url('fs'), {}, false, async () => ({ action: 'accept' }));
    clients.push(client);
    client.setRequestHandler(ElicitRequestSchema, async (_r, extra) => {
      abort.abort('the user went away');
      // The gateway withdraws its form (notifications/cancelled), which aborts this handler.
      await new Promise<void>((r) => extra.signal.addEventListener('abort', () => r(), { once: true }));
      withdrawn();
      return { action: 'accept' };
    });
    const call = client.callTool({ name: 'write_file', arguments: { path: join(dir, 'withdrawn.txt'), content: 'x' } }, undefined, {
      signal: abort.signal,
    });
    await expect(call).rejects.toThrow();
    await formWithdrawn;
    // The session serves on; the withdrawn call never ran.
    expect(textOf((await client.callTool({ name: 'list_allowed_directories', arguments: {} })) as never)).toContain(dir);
    expect(existsSync(join(dir, 'withdrawn.txt'))).toBe(false);
  });

  it('a second tools/call with the id of a call waiting for its approval is refused, not relayed unasked', async () => {
    const client = new Client({ name: 'reusing-client', version: '1.0.0' }, { capabilities: { elicitation: { form: {} } } });
    clients.push(client);
    const transport = new StreamableHTTPClientTransport(new URL(gw.url('fs')));
    let heldId: string | number | undefined;
    const send = transport.send.bind(transport);
    transport.send = (m: JSONRPCMessage, o?: Parameters<typeof send>[1]) => {
      if ('method' in m && m.method === 'tools/call' && 'id' in m) heldId = m.id;
      return send(m, o);
    };
    let answered!: (m: any) => void;
    const duplicate = new Promise<any>((r) => (answered = r));
    client.setRequestHandler(ElicitRequestSchema, async () => {
      // While the form is open, the same JSON-RPC id again, for a call the user is never asked about.
      const res = await fetch(gw.url('fs'), {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
          'mcp-session-id': transport.sessionId!,
          'mcp-protocol-version': transport.protocolVersion!,
        },
        body: JSON.stringify({
          jsonrpc: '2.0',
          id: heldId,
          method: 'tools/call',
          params: { name: 'write_file', arguments: { path: join(dir, 'same-id.txt'), content: 'unasked' } },
        }),
      });
      const text = await res.text();
      answered(
        JSON.parse(
          text
            .split('\n')
            .find((l) => l.startsWith('data: {'))
            ?.slice(6) ?? text,
        ),
      );
      return { action: 'decline' };
    });
    await client.connect(transport);
    // The first call's answer shares its id with the refused one: only the refusal is awaited.
    void write(client, 'held.txt', 'asked').catch(() => {});
    expect(await duplicate).toMatchObject({ id: heldId, error: { code: -32600, message: expect.stringMatching(/already in use/) } });
    expect(existsSync(join(dir, 'same-id.txt'))).toBe(false);
  });

  it('a 2025-06-18 session gets the form without mode, which that revision does not have', async () => {
    const asked: any[] = [];
    const client = new Client({ name: 'older-client', version: '1.0.0' }, { capabilities: { elicitation: {} } });
    clients.push(client);
    client.setRequestHandler(ElicitRequestSchema, async (r) => {
      asked.push(r.params);
      return { action: 'accept' };
    });
    const transport = new StreamableHTTPClientTransport(new URL(gw.url('fs')));
    // The v1 SDK client always asks for its newest revision: ask for 2025-06-18 instead.
    const send = transport.send.bind(transport);
    transport.send = (m: JSONRPCMessage, o?: Parameters<typeof send>[1]) =>
      send(
        'method' in m && m.method === 'initialize'
          ? ({ ...m, params: { ...m.params, protocolVersion: '2025-06-18' } } as JSONRPCMessage)
          : m,
        o,
      );
    await client.connect(transport);
    expect(transport.protocolVersion).toBe('2025-06-18');
    expect((await write(client, 'older.txt', 'old')).isError).toBeFalsy();
    expect(readFileSync(join(dir, 'older.txt'), 'utf8')).toBe('old');
    expect(asked).toHaveLength(1);
    expect(asked[0]).not.toHaveProperty('mode');
    expect(asked[0]).toMatchObject({ message: expect.stringContaining('write_file'), requestedSchema: { type: 'object' } });
  });
});

describe('a legacy client on a 2026-07-28 upstream (the reverse bridge)', () => {
  it('the call is asked about too: decline reaches nothing upstream, accept runs it', async () => {
    const answers = ['decline', 'accept'];
    const asked: any[] = [];
    const client = await asking('modern', async (params) => {
      asked.push(params);
      return { action: answers[asked.length - 1]! };
    });
    const declined = await client.callTool({ name: 'extra_write', arguments: { n: 1 } });
    expect(declined.isError).toBe(true);
    expect(fixture.of('call', 'extra_write')).toHaveLength(0);
    const accepted = await client.callTool({ name: 'extra_write', arguments: { n: 1 } });
    expect(accepted.isError).toBeFalsy();
    expect(textOf(accepted as never)).toBe('extra_write');
    expect(fixture.of('call', 'extra_write')).toHaveLength(1);
    expect(asked).toHaveLength(2);
    expect(asked[0]).toMatchObject({ mode: 'form', message: expect.stringContaining('modern') });
  });
});
