/**
 * input_required rounds over raw HTTP, against the legacy fixture over stdio, with the fixture's
 * event log showing what reached the upstream.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { scaled } from '../helpers/budget.js';

const ELICIT = { elicitation: {} };

describe('input_required over raw HTTP', () => {
  let gw: TestGateway;
  let shortTtl: TestGateway;
  const log = new FixtureLog();
  const shortLog = new FixtureLog();
  let url: string;

  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        fixture: { ...fixtureStdio(log), roots: [{ uri: 'file:///srv/configured', name: 'configured' }] },
        other: fixtureStdio(),
      },
    });
    url = gw.url('fixture');
    shortTtl = await startGateway({ requestState: { ttlMs: 1000 }, upstreams: { fixture: fixtureStdio(shortLog) } });
  });
  afterAll(async () => {
    await gw?.close();
    await shortTtl?.close();
  });

  async function firstRound(tool: string, args: Record<string, unknown> = {}, target = url) {
    const r = await rpc(target, 'tools/call', { name: tool, arguments: args }, { caps: ELICIT });
    expect(r.status).toBe(200);
    expect(r.body.result.resultType).toBe('input_required');
    return r.body.result as { inputRequests: Record<string, { method: string; params: any }>; requestState: string };
  }

  it('answers input_required with a sealed, opaque requestState, and the retry completes the call', async () => {
    const first = await firstRound('ask_name', { greeting: 'Hi' });
    expect(Object.keys(first.inputRequests)).toEqual(['elicitation-1']);
    const req = first.inputRequests['elicitation-1']!;
    expect(req.method).toBe('elicitation/create');
    expect(req.params.message).toBe('What is your name?');
    expect(req.params.requestedSchema.properties.name.type).toBe('string');
    expect(req.params._meta).toBeUndefined();
    // A JWE in compact form: five base64url parts; nothing readable inside.
    expect(first.requestState.split('.')).toHaveLength(5);
    expect(Buffer.from(first.requestState.split('.')[3]!, 'base64url').toString('latin1')).not.toContain('ask_name');

    const done = await rpc(
      url,
      'tools/call',
      {
        name: 'ask_name',
        arguments: { greeting: 'Hi' },
        requestState: first.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Ada' } } },
      },
      { caps: ELICIT },
    );
    expect(done.status).toBe(200);
    expect(done.body.result).toEqual({ content: [{ type: 'text', text: 'Hi, Ada!' }], resultType: 'complete' });
  });

  it('delivers decline to the upstream as the elicitation result', async () => {
    const first = await firstRound('ask_name');
    const done = await rpc(
      url,
      'tools/call',
      { name: 'ask_name', arguments: {}, requestState: first.requestState, inputResponses: { 'elicitation-1': { action: 'decline' } } },
      { caps: ELICIT },
    );
    expect(done.body.result.content[0].text).toBe('elicitation decline');
    expect(log.of('elicit-result', 'ask_name').some((e) => e.result.action === 'decline')).toBe(true);
  });

  it('rejects a tampered requestState with -32602; nothing reaches the upstream and the parked call still completes', async () => {
    const first = await firstRound('echo_after_ask', { tag: 'tamper' });
    const parts = first.requestState.split('.');
    const ct = Buffer.from(parts[3]!, 'base64url');
    ct[0] = ct[0]! ^ 0x01;
    parts[3] = ct.toString('base64url');
    const answer = { 'elicitation-1': { action: 'accept', content: { name: 'Mallory' } } };
    const bad = await rpc(
      url,
      'tools/call',
      { name: 'echo_after_ask', arguments: { tag: 'tamper' }, requestState: parts.join('.'), inputResponses: answer },
      { caps: ELICIT },
    );
    expect(bad.status).toBe(200);
    expect(bad.body.error.code).toBe(-32602);
    expect(bad.body.error.message).toMatch(/requestState/);
    expect(log.of('elicit-result', 'echo_after_ask').filter((e) => e.tag === 'tamper')).toHaveLength(0);

    const good = await rpc(
      url,
      'tools/call',
      {
        name: 'echo_after_ask',
        arguments: { tag: 'tamper' },
        requestState: first.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Alice' } } },
      },
      { caps: ELICIT },
    );
    expect(good.body.result.content[0].text).toBe('tag=tamper action=accept name=Alice');
  });

  it('accepts a genuine requestState only in its exact compact form: whitespace, padding or other unused bits get -32602', async () => {
    const first = await firstRound('echo_after_ask', { tag: 'canonical' });
    const state = first.requestState;
    const parts = state.split('.');
    // A base64url segment whose length leaves unused bits in its last character (length % 4 of 2 or 3).
    const i = parts.findIndex((p) => p.length % 4 === 2 || p.length % 4 === 3);
    expect(i).toBeGreaterThanOrEqual(0);
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
    const last = parts[i]!.at(-1)!;
    const otherBits = [...parts];
    // Flipping the lowest bit of the last character changes only bits the decoder drops.
    otherBits[i] = parts[i]!.slice(0, -1) + alphabet[alphabet.indexOf(last) ^ 1];
    expect(Buffer.from(otherBits[i]!, 'base64url').equals(Buffer.from(parts[i]!, 'base64url'))).toBe(true);
    const variants = [`${state} `, ` ${state}`, `${state}\n`, `${state}=`, `${state}==`, otherBits.join('.')];
    const answer = { 'elicitation-1': { action: 'accept', content: { name: 'Mallory' } } };
    for (const variant of variants) {
      const bad = await rpc(
        url,
        'tools/call',
        { name: 'echo_after_ask', arguments: { tag: 'canonical' }, requestState: variant, inputResponses: answer },
        { caps: ELICIT },
      );
      expect(bad.body.error?.code, JSON.stringify(variant)).toBe(-32602);
    }
    expect(log.of('elicit-result', 'echo_after_ask').filter((e) => e.tag === 'canonical')).toHaveLength(0);
    const good = await rpc(
      url,
      'tools/call',
      {
        name: 'echo_after_ask',
        arguments: { tag: 'canonical' },
        requestState: state,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Alice' } } },
      },
      { caps: ELICIT },
    );
    expect(good.body.result.content[0].text).toBe('tag=canonical action=accept name=Alice');
  });

  it('rejects a replayed requestState with -32602; the upstream saw exactly one answer', async () => {
    const first = await firstRound('echo_after_ask', { tag: 'replay' });
    const params = {
      name: 'echo_after_ask',
      arguments: { tag: 'replay' },
      requestState: first.requestState,
      inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Once' } } },
    };
    const ok = await rpc(url, 'tools/call', params, { caps: ELICIT });
    expect(ok.body.result.content[0].text).toBe('tag=replay action=accept name=Once');
    const again = await rpc(url, 'tools/call', params, { caps: ELICIT });
    expect(again.body.error.code).toBe(-32602);
    expect(log.of('elicit-result', 'echo_after_ask').filter((e) => e.tag === 'replay')).toHaveLength(1);
  });

  it('rejects a state presented with other arguments, another tool or another upstream; the parked call is untouched', async () => {
    const first = await firstRound('echo_after_ask', { tag: 'mine' });
    const answer = { 'elicitation-1': { action: 'accept', content: { name: 'Eve' } } };
    const otherArgs = await rpc(
      url,
      'tools/call',
      { name: 'echo_after_ask', arguments: { tag: 'theirs' }, requestState: first.requestState, inputResponses: answer },
      { caps: ELICIT },
    );
    expect(otherArgs.body.error.code).toBe(-32602);
    const otherTool = await rpc(
      url,
      'tools/call',
      { name: 'ask_name', arguments: {}, requestState: first.requestState, inputResponses: answer },
      { caps: ELICIT },
    );
    expect(otherTool.body.error.code).toBe(-32602);
    const otherUpstream = await rpc(
      gw.url('other'),
      'tools/call',
      { name: 'echo_after_ask', arguments: { tag: 'mine' }, requestState: first.requestState, inputResponses: answer },
      { caps: ELICIT },
    );
    expect(otherUpstream.body.error.code).toBe(-32602);
    expect(log.of('elicit-result', 'echo_after_ask').filter((e) => e.tag === 'mine' || e.tag === 'theirs')).toHaveLength(0);

    const good = await rpc(
      url,
      'tools/call',
      {
        name: 'echo_after_ask',
        arguments: { tag: 'mine' },
        requestState: first.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Bob' } } },
      },
      { caps: ELICIT },
    );
    expect(good.body.result.content[0].text).toBe('tag=mine action=accept name=Bob');
  });

  it('expires a parked call after the state TTL: the upstream gets cancel then notifications/cancelled, and the late retry gets -32602', async () => {
    const target = shortTtl.url('fixture');
    const first = await firstRound('ask_name', {}, target);
    expect(shortTtl.gateway.bridge.parkedCount).toBe(1);
    const call = shortLog.of('call', 'ask_name')[0]!;
    // About ttlMs (1 s) after parking; the bound leaves room for a loaded machine.
    const cancelled = await eventually(
      () => shortLog.of('notification-cancelled').some((e) => e.pid === call.pid && e.requestId === call.requestId),
      10_000,
    );
    expect(cancelled).toBe(true);
    expect(await eventually(() => shortLog.of('elicit-result', 'ask_name').length > 0, 2000)).toBe(true);
    const results = shortLog.of('elicit-result', 'ask_name');
    expect(results).toHaveLength(1);
    expect(results[0]!.result).toEqual({ action: 'cancel' });
    // On the wire, the elicitation answer reached the upstream before the cancellation of the call.
    const wire = shortLog.events().filter((e) => e.event === 'response' || e.event === 'notification-cancelled');
    expect(wire.map((e) => e.event)).toEqual(['response', 'notification-cancelled']);
    expect(wire[0]!.result).toEqual({ action: 'cancel' });
    expect(shortTtl.gateway.bridge.parkedCount).toBe(0);

    const late = await rpc(
      target,
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Late' } } },
      },
      { caps: ELICIT },
    );
    expect(late.body.error.code).toBe(-32602);
    expect(shortLog.of('elicit-result', 'ask_name')).toHaveLength(1);
  });

  it('answers -32021 (HTTP 400) with data.requiredCapabilities when the upstream asks for sampling the client did not declare', async () => {
    const r = await rpc(url, 'tools/call', { name: 'summarize', arguments: { text: 'x' } }, { caps: ELICIT });
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe(-32021);
    expect(r.body.error.data.requiredCapabilities).toEqual({ sampling: {} });
  });

  it('rejects a malformed inputResponses value with -32602 and keeps the call parked for a correct retry', async () => {
    const first = await firstRound('echo_after_ask', { tag: 'malformed' });
    const bad = await rpc(
      url,
      'tools/call',
      {
        name: 'echo_after_ask',
        arguments: { tag: 'malformed' },
        requestState: first.requestState,
        inputResponses: { 'elicitation-1': { action: 'maybe' } },
      },
      { caps: ELICIT },
    );
    expect(bad.body.error.code).toBe(-32602);
    expect(bad.body.error.message).toContain('elicitation-1');
    const good = await rpc(
      url,
      'tools/call',
      {
        name: 'echo_after_ask',
        arguments: { tag: 'malformed' },
        requestState: first.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Fixed' } } },
      },
      { caps: ELICIT },
    );
    expect(good.body.result.content[0].text).toBe('tag=malformed action=accept name=Fixed');
  });

  it('refuses accepted content that does not match the requestedSchema with -32602 naming the field, before the upstream sees it; the call stays parked for a correct retry', async () => {
    const first = await firstRound('echo_after_ask', { tag: 'schema' });
    const results = log.of('elicit-result', 'echo_after_ask').length;
    const retry = (content: Record<string, unknown>) =>
      rpc(
        url,
        'tools/call',
        {
          name: 'echo_after_ask',
          arguments: { tag: 'schema' },
          requestState: first.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content } },
        },
        { caps: ELICIT },
      );
    const wrongType = await retry({ name: 42 });
    expect(wrongType.body.error).toMatchObject({
      code: -32602,
      message: 'inputResponses["elicitation-1"] content does not match the requestedSchema: name must be string',
      data: { key: 'elicitation-1' },
    });
    const missing = await retry({ nickname: 'Al' });
    expect(missing.body.error).toMatchObject({
      code: -32602,
      message: 'inputResponses["elicitation-1"] content does not match the requestedSchema: content must have required property \'name\'',
    });
    expect(log.of('elicit-result', 'echo_after_ask')).toHaveLength(results);
    const good = await retry({ name: 'Typed' });
    expect(good.body.result.content[0].text).toBe('tag=schema action=accept name=Typed');
  });

  it('answers a roots/list that arrives outside any call from the upstream roots config', async () => {
    const r = await rpc(url, 'tools/call', { name: 'later_roots', arguments: {} }, { caps: { roots: {} } });
    expect(r.body.result.content[0].text).toContain('will ask for roots');
    expect(await eventually(() => log.of('late-roots').length > 0, 3000)).toBe(true);
    expect(log.of('late-roots')[0]!.roots).toEqual([{ uri: 'file:///srv/configured', name: 'configured' }]);
  });
});

describe('single use across a restart (replay mode, configured keys, memory store)', () => {
  it(
    'a state spent before the gateway restarted is refused after it, as is one sealed before it and never used; the upstream sees one answer',
    async () => {
      const log = new FixtureLog();
      const cfg = {
        requestState: { keys: [{ kid: 'k1', secret: 'a-requestState-secret-that-outlives-restarts' }] },
        upstreams: { fixture: { ...fixtureStdio(log), input: { mode: 'replay' } } },
      };
      const call = (g: TestGateway, params: Record<string, unknown>) =>
        rpc(g.url('fixture'), 'tools/call', { name: 'echo_after_ask', ...params }, { caps: ELICIT });
      const before = await startGateway(cfg);
      let spent: Record<string, unknown>;
      let unused: Record<string, unknown>;
      try {
        const first = await call(before, { arguments: { tag: 'restart' } });
        expect(first.body.result.resultType).toBe('input_required');
        spent = {
          arguments: { tag: 'restart' },
          requestState: first.body.result.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Once' } } },
        };
        expect((await call(before, spent)).body.result.content[0].text).toBe('tag=restart action=accept name=Once');
        const other = await call(before, { arguments: { tag: 'unused' } });
        unused = {
          arguments: { tag: 'unused' },
          requestState: other.body.result.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Later' } } },
        };
      } finally {
        await before.close();
      }
      // The next process starts at least a second later, so its ledger's start is past every iat above.
      await new Promise((r) => setTimeout(r, 1100));
      const after = await startGateway(cfg);
      try {
        for (const params of [spent, unused]) {
          const again = await call(after, params);
          expect(again.body.error, JSON.stringify(again.body)).toMatchObject({
            code: -32602,
            message: 'Invalid or expired requestState; start the request again without requestState',
          });
        }
        // A state the new process sealed is served.
        const fresh = await call(after, { arguments: { tag: 'fresh' } });
        const done = await call(after, {
          arguments: { tag: 'fresh' },
          requestState: fresh.body.result.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'New' } } },
        });
        expect(done.body.result.content[0].text).toBe('tag=fresh action=accept name=New');
        const restart = log.of('elicit-result', 'echo_after_ask').filter((e) => e.tag === 'restart');
        expect(
          restart.filter((e) => (e.result as { action?: string } | undefined)?.action === 'accept'),
          JSON.stringify(restart),
        ).toHaveLength(1);
      } finally {
        await after.close();
      }
    },
    scaled(60_000),
  );
});
