/**
 * The approval form (src/security/approval-form.ts: what the user sees, masking, cutting, reading
 * the answer), the remembered-approvals store in memory and on a real Redis (src/store/approvals.ts),
 * and the approval policy's choice of tools (src/router/approvals.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamApprovalsSchema } from '../../src/config/approvals-schema.js';
import { silentLogger } from '../../src/observability/log.js';
import { GatewayError } from '../../src/protocol/errors.js';
import { ClientConnection, type AuditNote } from '../../src/protocol/connection.js';
import type { ValidatedRequest } from '../../src/protocol/envelope.js';
import { ApprovalGate, Approvals } from '../../src/router/approvals.js';
import { generatedKey, StateSealer } from '../../src/security/seal.js';
import { MemorySpentStates } from '../../src/store/shared.js';
import { APPROVAL_KEY, approvalAnswer, approvalRefusal, approvalRequest, MAX_SHOWN_CHARS } from '../../src/security/approval-form.js';
import { MemoryRememberedApprovals, type RememberedApprovals } from '../../src/store/approvals.js';
import { RedisStore } from '../../src/store/redis.js';
import { eventually } from '../helpers/fixture.js';
import { startRedis, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';

describe('approval form', () => {
  it('names the tool and the upstream and lists the arguments, secrets masked', () => {
    const req = approvalRequest(
      'fs',
      'write_file',
      { path: '/tmp/a.txt', apiKey: 'hunter2', nested: { db_password: 'pw', auth: 'Bearer abc.def' }, note: 'key sk-1234567890abcdef' },
      0,
    );
    expect(req.method).toBe('elicitation/create');
    expect(req.params).toMatchObject({ mode: 'form', requestedSchema: { type: 'object', properties: {} } });
    const message = String(req.params.message);
    expect(message).toContain('"write_file"');
    expect(message).toContain('"fs"');
    expect(message).toContain('"path": "/tmp/a.txt"');
    expect(message).toContain('"apiKey": "[redacted]"');
    for (const secret of ['hunter2', '"pw"', 'abc.def', 'sk-1234567890abcdef']) expect(message).not.toContain(secret);
  });

  it('hides the values of credential headers among the arguments (Authorization, Cookie)', () => {
    const message = String(
      approvalRequest(
        'http',
        'fetch',
        { url: 'https://x', headers: { Authorization: 'opaque-Zk41', cookie: 'sid=Qv82', 'Set-Cookie': 'a=Hh3' } },
        0,
      ).params.message,
    );
    expect(message).toContain('"Authorization":"[redacted]"');
    for (const secret of ['opaque-Zk41', 'Qv82', 'Hh3']) expect(message).not.toContain(secret);
    expect(message).toContain('https://x');
  });

  it('cuts a long value and says how much was left out', () => {
    const message = String(approvalRequest('fs', 'write_file', { content: 'x'.repeat(5000) }, 0).params.message);
    expect(message).toContain(`"content": "${'x'.repeat(MAX_SHOWN_CHARS - 1)}… (${5002 - MAX_SHOWN_CHARS} more characters)`);
    expect(message.length).toBeLessThan(600);
  });

  it('escapes characters one cannot see, so a value shows what it holds', () => {
    // U+202E makes "/tmp/txt.exe" read as "/tmp/exe.txt"; U+200B and U+2028 hide a part; U+0085 is a control JSON leaves as is.
    const message = String(
      approvalRequest('fs', 'write_file', { path: '/tmp/\u202Eexe.txt', ['a\u200Bb']: 'x\u2028y\u0085z\u2066' }, 0).params.message,
    );
    expect(message).toContain('"path": "/tmp/\\u202eexe.txt"');
    expect(message).toContain('"a\\u200bb": "x\\u2028y\\u0085z\\u2066"');
    expect(message).not.toMatch(/[\u202E\u200B\u2028\u0085\u2066]/);
  });

  it('offers a remember box only when approvals are remembered', () => {
    const schema = approvalRequest('fs', 't', {}, 600_000).params.requestedSchema as Record<string, any>;
    expect(schema.properties.remember).toMatchObject({ type: 'boolean', default: false, title: 'Remember this approval for 10 minutes' });
    expect(String(approvalRequest('fs', 't', undefined, 0).params.message)).toContain('(no arguments)');
  });

  it('reads accept, decline and cancel; remember only with an accept that asks for it', () => {
    expect(approvalAnswer({ action: 'accept', content: { remember: true } })).toEqual({ action: 'accept', remember: true });
    expect(approvalAnswer({ action: 'accept' })).toEqual({ action: 'accept', remember: false });
    expect(approvalAnswer({ action: 'decline', content: { remember: true } })).toEqual({ action: 'decline', remember: false });
    expect(approvalAnswer({ action: 'cancel' })).toEqual({ action: 'cancel', remember: false });
  });

  it('refuses an answer that is not an ElicitResult with -32602 naming the key', () => {
    for (const bad of [undefined, 'yes', { action: 'maybe' }, { action: 'accept', content: 'x' }]) {
      let err: unknown;
      try {
        approvalAnswer(bad);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(GatewayError);
      expect((err as GatewayError).code).toBe(-32602);
      expect((err as GatewayError).message).toContain(`inputResponses["${APPROVAL_KEY}"]`);
    }
  });

  it('gives decline and cancel as an isError tool result', () => {
    const r = approvalRefusal('decline', 'fs', 'write_file');
    expect(r.isError).toBe(true);
    expect((r.content as { text: string }[])[0]!.text).toMatch(/declined .*"write_file".*"fs".*did not run/);
    expect((approvalRefusal('cancel', 'fs', 'w').content as { text: string }[])[0]!.text).toContain('cancelled');
  });
});

/** The store contract, for memory and Redis. */
function storeContract(store: () => Promise<RememberedApprovals>): void {
  it('remembers a key for its time only', async () => {
    const s = await store();
    expect(await s.remembered('k1')).toBe(false);
    await s.remember('k1', 150);
    await s.remember('k2', 60_000);
    expect(await s.remembered('k1')).toBe(true);
    expect(await s.remembered('other')).toBe(false);
    expect(await eventually(async () => !(await s.remembered('k1')))).toBe(true);
    expect(await s.remembered('k2')).toBe(true);
  });
}

describe('MemoryRememberedApprovals', () => {
  storeContract(async () => new MemoryRememberedApprovals());
});

describeWith(['redis-server'], 'RedisStore approvals', () => {
  let redis: TestRedis;
  const stores: RedisStore[] = [];
  beforeAll(async () => {
    redis = await startRedis();
  });
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()));
    await redis?.stop();
  });
  storeContract(async () => {
    const s = RedisStore.create({ url: redis.url, keyPrefix: `a${stores.length}:`, connectTimeoutMs: 2000, log: silentLogger });
    stores.push(s);
    expect(await eventually(async () => (await s.unavailable()) === undefined)).toBe(true);
    return s.approvals;
  });

  it('shares what one replica remembered with another', async () => {
    const a = RedisStore.create({ url: redis.url, keyPrefix: 'shared:', connectTimeoutMs: 2000, log: silentLogger });
    const b = RedisStore.create({ url: redis.url, keyPrefix: 'shared:', connectTimeoutMs: 2000, log: silentLogger });
    stores.push(a, b);
    expect(await eventually(async () => (await a.unavailable()) === undefined && (await b.unavailable()) === undefined)).toBe(true);
    await a.approvals.remember('k', 60_000);
    expect(await b.approvals.remembered('k')).toBe(true);
  });
});

describe('Approvals policy', () => {
  const tools = [
    { name: 'write_file', annotations: { destructiveHint: true, readOnlyHint: false } },
    { name: 'edit_file', annotations: { readOnlyHint: false, destructiveHint: false } },
    { name: 'read_file', annotations: { readOnlyHint: true } },
    { name: 'run', description: 'no annotations' },
  ];
  const policy = (cfg: Record<string, unknown>) => {
    let listings = 0;
    const approvals = new Approvals(
      (name) => (name === 'fs' ? UpstreamApprovalsSchema.parse(cfg) : undefined),
      new MemoryRememberedApprovals(),
      async () => (listings++, tools),
    );
    return { approvals, listings: () => listings };
  };
  const who = { principal: 'alice' };

  it('asks for tools matching a pattern, without listing', async () => {
    const { approvals, listings } = policy({ tools: ['move_*', 'delete'] });
    expect(await approvals.needs('fs', 'move_file', who)).toBe(true);
    expect(await approvals.needs('fs', 'delete', who)).toBe(true);
    expect(await approvals.needs('fs', 'deleted', who)).toBe(false);
    expect(await approvals.needs('other', 'move_file', who)).toBe(false);
    expect(listings()).toBe(0);
  });

  it('asks for tools by their annotations, listing once', async () => {
    const destructive = policy({ destructive: true });
    expect(await destructive.approvals.needs('fs', 'write_file', who)).toBe(true);
    expect(await destructive.approvals.needs('fs', 'edit_file', who)).toBe(false);
    expect(await destructive.approvals.needs('fs', 'read_file', who)).toBe(false);
    expect(destructive.listings()).toBe(1);
    const notReadOnly = policy({ notReadOnly: true });
    expect(await notReadOnly.approvals.needs('fs', 'edit_file', who)).toBe(true);
    expect(await notReadOnly.approvals.needs('fs', 'read_file', who)).toBe(false);
  });

  it('takes the spec defaults for hints left out, and fails closed for a tool the listing lacks', async () => {
    const destructive = policy({ destructive: true });
    expect(await destructive.approvals.needs('fs', 'run', who)).toBe(true);
    expect(await destructive.approvals.needs('fs', 'unlisted', who)).toBe(true);
    // destructiveHint is meaningful only when not read-only.
    expect(await destructive.approvals.needs('fs', 'read_file', who)).toBe(false);
    const notReadOnly = policy({ notReadOnly: true });
    expect(await notReadOnly.approvals.needs('fs', 'run', who)).toBe(true);
    expect(await notReadOnly.approvals.needs('fs', 'unlisted', who)).toBe(true);
  });

  it('takes a served listing, and lists again after the tools changed', async () => {
    const { approvals, listings } = policy({ destructive: true });
    approvals.saw('fs', [{ name: 'write_file', annotations: { destructiveHint: false } }]);
    expect(await approvals.needs('fs', 'write_file', who)).toBe(false);
    expect(listings()).toBe(0);
    approvals.forget('fs');
    expect(await approvals.needs('fs', 'write_file', who)).toBe(true);
    expect(listings()).toBe(1);
  });

  it('remembers per principal, upstream, tool and arguments, only with rememberMs', async () => {
    const { approvals } = policy({ tools: ['*'], rememberMs: 60_000 });
    const call = { principal: 'alice', upstream: 'fs', tool: 'write_file', args: { path: 'a', content: 'x' } };
    expect(await approvals.remembered(call)).toBe(false);
    await approvals.remember(call);
    expect(await approvals.remembered(call)).toBe(true);
    expect(await approvals.remembered({ ...call, args: { content: 'x', path: 'a' } })).toBe(true);
    expect(await approvals.remembered({ ...call, args: { path: 'b', content: 'x' } })).toBe(false);
    expect(await approvals.remembered({ ...call, principal: 'bob' })).toBe(false);
    expect(await approvals.remembered({ ...call, tool: 'edit_file' })).toBe(false);
    const never = policy({ tools: ['*'] }).approvals;
    await never.remember(call);
    expect(await never.remembered(call)).toBe(false);
  });
});

describe('ApprovalGate', () => {
  const approvals = new Approvals(
    () => UpstreamApprovalsSchema.parse({ tools: ['write_*'], rememberMs: 60_000 }),
    new MemoryRememberedApprovals(),
    async () => [],
  );
  const gate = new ApprovalGate(approvals, new StateSealer([generatedKey()]), new MemorySpentStates(), 60_000, silentLogger);
  const req = (params: Record<string, unknown>, caps: Record<string, unknown> = { elicitation: {} }): ValidatedRequest => ({
    id: 1,
    method: 'tools/call',
    params,
    meta: {},
    protocolVersion: '2026-07-28',
    clientCapabilities: caps,
    paramHeaders: {},
  });
  const ctx = (principal = 'alice') => ({ principal, connection: new ClientConnection(), audit: {} as AuditNote });
  const asked = async (args: unknown, principal = 'alice') => {
    const c = ctx(principal);
    const r = await gate.admit('fs', req({ name: 'write_file', arguments: args }), c);
    expect(c.audit.approval).toBe('asked');
    return (r.answer as { requestState: string }).requestState;
  };

  it('notes what it did in ctx.audit: asked, then the answer, then remembered', async () => {
    const args = { path: 'a' };
    for (const [action, note] of [
      ['decline', 'declined'],
      ['cancel', 'cancelled'],
      ['accept', 'accepted'],
    ] as const) {
      const state = await asked(args);
      const c = ctx();
      const r = await gate.admit(
        'fs',
        req({
          name: 'write_file',
          arguments: args,
          requestState: state,
          inputResponses: { approval: { action, content: { remember: true } } },
        }),
        c,
      );
      expect(c.audit.approval).toBe(note);
      if (action === 'accept') expect(r.req?.params).toEqual({ name: 'write_file', arguments: args });
      else expect(r.answer).toMatchObject({ resultType: 'complete', isError: true });
    }
    const c = ctx();
    expect((await gate.admit('fs', req({ name: 'write_file', arguments: args }, {}), c)).req).toBeDefined();
    expect(c.audit.approval).toBe('remembered');
    const other = ctx();
    expect((await gate.admit('fs', req({ name: 'read_file', arguments: args }), other)).req).toBeDefined();
    expect(other.audit.approval).toBeUndefined();
  });

  it("refuses another principal's or another tool's approval state with -32602", async () => {
    const state = await asked({ path: 'b' });
    const answer = { approval: { action: 'accept' } };
    await expect(
      gate.admit('fs', req({ name: 'write_file', arguments: { path: 'b' }, requestState: state, inputResponses: answer }), ctx('bob')),
    ).rejects.toMatchObject({ code: -32602 });
    await expect(
      gate.admit('fs', req({ name: 'write_x', arguments: { path: 'b' }, requestState: state, inputResponses: answer }), ctx()),
    ).rejects.toMatchObject({ code: -32602 });
    await expect(
      gate.admit('other', req({ name: 'write_file', arguments: { path: 'b' }, requestState: state, inputResponses: answer }), ctx()),
    ).rejects.toMatchObject({ code: -32602 });
  });
});
