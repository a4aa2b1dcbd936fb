/**
 * Approvals (docs/approvals.md) for 2026-07-28 clients: the gateway asks the user through a form of
 * its own before a tool call reaches its upstream. Against the real server-filesystem over stdio
 * (its `write_file` is annotated `destructiveHint: true`), the 2026-07-28 fixture server (the
 * pass-through cell), the federated `/mcp` with a 2026-07-28 client and a legacy (v1 SDK)
 * client, whose session the reverse bridge serves over the router, and two replicas on one Redis.
 */
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { elicitingClient } from '../helpers/v1client.js';
import { rounds, textOf, v2Client } from '../helpers/v2client.js';
import { eventually, FixtureLog, modernStdio } from '../helpers/fixture.js';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { scaled } from '../helpers/budget.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';

const FS_SERVER = fileURLToPath(new URL('../../node_modules/@modelcontextprotocol/server-filesystem/dist/index.js', import.meta.url));
const FORM = { elicitation: { form: {} } };
/** How long the `remembering` upstream remembers an accepted approval, in ms. */
const REMEMBER_MS = scaled(3000);

let gw: TestGateway;
let dir: string;
const modernLog = new FixtureLog();

beforeAll(async () => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), 'mrtr-approvals-')));
  const fs = { transport: 'stdio', command: process.execPath, args: [FS_SERVER, dir] };
  gw = await startGateway({
    upstreams: {
      fs: { ...fs, approvals: { destructive: true } },
      remembering: { ...fs, approvals: { tools: ['write_*'], rememberMs: REMEMBER_MS } },
      modern: { ...modernStdio(modernLog, { FIXTURE_EXTRA_TOOLS: '["zap"]' }), approvals: { tools: ['zap', 'two_*'] } },
    },
    federation: { enabled: true, upstreams: ['fs', 'modern'] },
  });
}, scaled(60_000));
afterAll(async () => {
  await gw?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const file = (name: string) => join(dir, name);
const contentOf = (name: string) => (existsSync(file(name)) ? readFileSync(file(name), 'utf8') : undefined);
const write = (name: string, content: string) => ({ name: 'write_file', arguments: { path: file(name), content } });

/** A raw `tools/call` of `upstream` (`path` under /mcp: `/NAME`, or '' for the federated endpoint). */
const call = (path: string, params: Record<string, unknown>, caps: Record<string, unknown> = FORM) =>
  rpc(`${gw.base}/mcp${path}`, 'tools/call', params, { caps });

describe('a 2026-07-28 client of a legacy upstream (server-filesystem)', () => {
  it('is asked through the form, and accepting writes the file', async () => {
    const { client, record } = await v2Client(gw.url('fs'), { elicit: () => ({ action: 'accept', content: {} }) }, FORM);
    try {
      const r = await client.callTool(write('accepted.txt', 'hello'));
      expect(r.isError).toBeFalsy();
      expect(contentOf('accepted.txt')).toBe('hello');
      expect(record.elicitation).toHaveLength(1);
      expect(record.elicitation[0]).toMatchObject({ mode: 'form', requestedSchema: { type: 'object', properties: {} } });
      expect(record.elicitation[0].message).toContain('"write_file"');
      expect(record.elicitation[0].message).toContain('"fs"');
      expect(record.elicitation[0].message).toContain(JSON.stringify(file('accepted.txt')));
      expect(rounds(record)).toBe(1);
      // A read-only tool is not asked.
      expect(textOf((await client.callTool({ name: 'read_text_file', arguments: { path: file('accepted.txt') } })) as never)).toBe('hello');
      expect(record.elicitation).toHaveLength(1);
    } finally {
      await client.close();
    }
  });

  it('declining (or cancelling) runs nothing: an isError result, no file', async () => {
    for (const action of ['decline', 'cancel'] as const) {
      const { client, record } = await v2Client(gw.url('fs'), { elicit: () => ({ action }) }, FORM);
      try {
        const r = await client.callTool(write(`${action}.txt`, 'no'));
        expect(r.isError).toBe(true);
        expect(textOf(r as never)).toContain(action === 'decline' ? 'declined' : 'cancelled');
        expect(record.elicitation).toHaveLength(1);
        expect(contentOf(`${action}.txt`)).toBeUndefined();
      } finally {
        await client.close();
      }
    }
  });

  it('asks again when the retry changes the arguments, and runs only what was approved', async () => {
    const first = await call('/fs', write('changed.txt', 'approved'));
    expect(first.body.result).toMatchObject({
      resultType: 'input_required',
      inputRequests: { approval: { method: 'elicitation/create' } },
    });
    const changed = await call('/fs', {
      ...write('changed.txt', 'swapped'),
      inputResponses: { approval: { action: 'accept' } },
      requestState: first.body.result.requestState,
    });
    expect(changed.body.result.resultType).toBe('input_required');
    expect(changed.body.result.inputRequests.approval.params.message).toContain('swapped');
    expect(contentOf('changed.txt')).toBeUndefined();
    // The first state was spent by that retry.
    const replayed = await call('/fs', {
      ...write('changed.txt', 'approved'),
      inputResponses: { approval: { action: 'accept' } },
      requestState: first.body.result.requestState,
    });
    expect(replayed.body.error.code).toBe(-32602);
    const bad = await call('/fs', {
      ...write('changed.txt', 'swapped'),
      inputResponses: { approval: { action: 'perhaps' } },
      requestState: changed.body.result.requestState,
    });
    expect(bad.body.error.code).toBe(-32602);
    expect(bad.body.error.message).toContain('inputResponses["approval"]');
    const accepted = await call('/fs', {
      ...write('changed.txt', 'swapped'),
      inputResponses: { approval: { action: 'accept' } },
      requestState: changed.body.result.requestState,
    });
    expect(accepted.body.result.isError).toBeFalsy();
    expect(contentOf('changed.txt')).toBe('swapped');
  });

  it('fails closed for a client that cannot answer a form: -32021, nothing written', async () => {
    for (const caps of [{}, { elicitation: { url: {} } }, { sampling: {} }]) {
      const r = await call('/fs', write('no-form.txt', 'x'), caps);
      expect(r.status).toBe(400);
      expect(r.body.error.code).toBe(-32021);
      expect(r.body.error.data.requiredCapabilities).toEqual({ elicitation: { form: {} } });
    }
    expect(contentOf('no-form.txt')).toBeUndefined();
    // Plain `elicitation: {}` means form.
    expect((await call('/fs', write('no-form.txt', 'x'), { elicitation: {} })).body.result.resultType).toBe('input_required');
  });
});

describe('remembered approvals', () => {
  it('a remembered approval is not asked again until rememberMs ends; other arguments are asked', async () => {
    // A warm upstream session first, so that the remembered time is not spent starting it.
    expect((await call('/remembering', { name: 'list_allowed_directories', arguments: {} })).body.result.isError).toBeFalsy();
    const first = await call('/remembering', write('kept.txt', 'one'));
    expect(first.body.result.inputRequests.approval.params.requestedSchema.properties.remember).toMatchObject({ type: 'boolean' });
    const accepted = await call('/remembering', {
      ...write('kept.txt', 'one'),
      inputResponses: { approval: { action: 'accept', content: { remember: true } } },
      requestState: first.body.result.requestState,
    });
    expect(accepted.body.result.isError).toBeFalsy();
    rmSync(file('kept.txt'));
    // The same call again: not asked, it runs.
    const again = await call('/remembering', write('kept.txt', 'one'));
    expect(again.body.result.resultType).toBe('complete');
    expect(contentOf('kept.txt')).toBe('one');
    // Other arguments, or the same call through another upstream: asked.
    expect((await call('/remembering', write('kept.txt', 'two'))).body.result.resultType).toBe('input_required');
    expect((await call('/fs', write('kept.txt', 'one'))).body.result.resultType).toBe('input_required');
    // Once rememberMs has passed, asked again.
    expect(
      await eventually(
        async () => (await call('/remembering', write('kept.txt', 'one'))).body.result.resultType === 'input_required',
        REMEMBER_MS * 4,
        100,
      ),
    ).toBe(true);
  });

  it('an approval accepted without ticking remember is asked again', async () => {
    const first = await call('/remembering', write('once.txt', 'x'));
    await call('/remembering', {
      ...write('once.txt', 'x'),
      inputResponses: { approval: { action: 'accept', content: { remember: false } } },
      requestState: first.body.result.requestState,
    });
    expect(contentOf('once.txt')).toBe('x');
    expect((await call('/remembering', write('once.txt', 'x'))).body.result.resultType).toBe('input_required');
  });
});

describe('a 2026-07-28 upstream (pass-through cell)', () => {
  it('asks before the call reaches the upstream; the upstream’s own rounds follow an accept', async () => {
    const declining = await v2Client(gw.url('modern'), { elicit: () => ({ action: 'decline' }) }, FORM);
    try {
      const r = await declining.client.callTool({ name: 'zap', arguments: {} });
      expect(r.isError).toBe(true);
      expect(declining.record.elicitation[0].message).toContain('"zap"');
      expect(modernLog.of('call', 'zap')).toHaveLength(0);
    } finally {
      await declining.client.close();
    }
    const answers = {
      elicit: (p: any) =>
        /age|old/i.test(p.message) ? { action: 'accept', content: { age: 7 } } : { action: 'accept', content: { name: 'Ada' } },
    };
    const accepting = await v2Client(gw.url('modern'), answers, FORM);
    try {
      expect(textOf((await accepting.client.callTool({ name: 'zap', arguments: {} })) as never)).toBe('zap');
      expect(modernLog.of('call', 'zap')).toHaveLength(1);
      expect(textOf((await accepting.client.callTool({ name: 'two_round', arguments: { tag: 't' } })) as never)).toBe('Ada is 7 (t)');
      // One approval round each, then two_round's own two rounds.
      expect(accepting.record.elicitation.map((e) => /Allow the tool/.test(e.message))).toEqual([true, true, false, false]);
    } finally {
      await accepting.client.close();
    }
  });
});

describe('the federated /mcp', () => {
  it('asks a 2026-07-28 client for a member’s tool', async () => {
    const { client, record } = await v2Client(`${gw.base}/mcp`, { elicit: () => ({ action: 'accept' }) }, FORM);
    try {
      const r = await client.callTool({ name: 'fs_write_file', arguments: { path: file('federated.txt'), content: 'fed' } });
      expect(r.isError).toBeFalsy();
      expect(record.elicitation).toHaveLength(1);
      expect(record.elicitation[0].message).toContain('"write_file"');
      expect(contentOf('federated.txt')).toBe('fed');
    } finally {
      await client.close();
    }
    const refused = await call('', { name: 'fs_write_file', arguments: { path: file('federated-no.txt'), content: 'x' } }, {});
    expect(refused.body.error.code).toBe(-32021);
    expect(contentOf('federated-no.txt')).toBeUndefined();
  });

  it('asks a legacy client with a real elicitation/create: accept writes, decline does not', async () => {
    let action = 'accept';
    const asked: any[] = [];
    const { client } = await elicitingClient(`${gw.base}/mcp`, {}, false, async (p) => (asked.push(p), { action }));
    try {
      await client.callTool({ name: 'fs_write_file', arguments: { path: file('legacy.txt'), content: 'old client' } });
      expect(contentOf('legacy.txt')).toBe('old client');
      expect(asked).toHaveLength(1);
      expect(asked[0]).toMatchObject({ mode: 'form' });
      expect(asked[0].message).toContain('"write_file"');
      action = 'decline';
      const r = await client.callTool({ name: 'fs_write_file', arguments: { path: file('legacy-no.txt'), content: 'x' } });
      expect(r.isError).toBe(true);
      expect(asked).toHaveLength(2);
      expect(contentOf('legacy-no.txt')).toBeUndefined();
    } finally {
      await client.close();
    }
  });
});

describeWith(['redis-server'], 'two replicas on one Redis', () => {
  let redis: TestRedis;
  const replicas: TestGateway[] = [];
  beforeAll(async () => {
    redis = await startRedis();
    const config = {
      store: { kind: 'redis', url: redis.url },
      replicas: { secret: 'replica-secret-0123456789abcdefghij' },
      requestState: { keys: [{ kid: 'shared', secret: 'a-requestState-secret-both-replicas-share' }] },
      upstreams: {
        fs: {
          transport: 'stdio',
          command: process.execPath,
          args: [FS_SERVER, dir],
          approvals: { destructive: true, rememberMs: 600_000 },
        },
      },
    };
    replicas.push(await startGateway(config), await startGateway(config));
  }, scaled(60_000));
  afterAll(async () => {
    await Promise.all(replicas.map((r) => r.close()));
    await redis?.stop();
  });

  it('a round asked by one replica is answered on the other, and what one remembered the other honours', async () => {
    const [a, b] = replicas as [TestGateway, TestGateway];
    const first = await rpc(a.url('fs'), 'tools/call', write('replicas.txt', 'r'), { caps: FORM });
    expect(first.body.result.resultType).toBe('input_required');
    const answered = await rpc(
      b.url('fs'),
      'tools/call',
      {
        ...write('replicas.txt', 'r'),
        inputResponses: { approval: { action: 'accept', content: { remember: true } } },
        requestState: first.body.result.requestState,
      },
      { caps: FORM },
    );
    expect(answered.body.result.isError).toBeFalsy();
    expect(contentOf('replicas.txt')).toBe('r');
    rmSync(file('replicas.txt'));
    // Remembered through b, honoured by a (no form capability needed for a remembered approval).
    const again = await rpc(a.url('fs'), 'tools/call', write('replicas.txt', 'r'), { caps: {} });
    expect(again.body.result.resultType).toBe('complete');
    expect(contentOf('replicas.txt')).toBe('r');
  });
});
