/**
 * The MRTR bridge's rounds (MCP 2026-07-28 basic/patterns/mrtr) over an Exchange on a fake legacy
 * session, with the real StateSealer and the in-memory spent-state ledger: the first round, the
 * retry that resumes the parked call, and the retries it refuses.
 */
import { describe, expect, it } from 'vitest';
import { MrtrBridge, type RetryBinding } from '../../src/cells/bridge/mrtr.js';
import { ClientConnection } from '../../src/protocol/connection.js';
import { silentLogger } from '../../src/observability/log.js';
import { INVALID_STATE, StateSealer, generatedKey } from '../../src/security/seal.js';
import { HeldElsewhere, MemoryStore } from '../../src/store/shared.js';
import type { InputRequest } from '../../src/protocol/wire.js';
import { eventually, fakeCall, tick } from '../helpers/fake-call.js';
import type { CallContext } from '../../src/protocol/connection.js';

const FORM = { message: 'Your name?', requestedSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } };
const ACCEPT = { action: 'accept', content: { name: 'Ada' } };
const RESULT = { content: [{ type: 'text', text: 'Hello Ada' }] };
const WINDOW_MS = 1000;

/** An input_required answer as the bridge makes it (every field present). */
interface Round {
  resultType: 'input_required';
  inputRequests: Record<string, InputRequest>;
  requestState: string;
}

function setup(
  opts: { ttlMs?: number; replica?: string; forwarding?: boolean; limits?: ConstructorParameters<typeof MrtrBridge>[6] } = {},
) {
  const sealer = new StateSealer([generatedKey()]);
  const store = new MemoryStore(100);
  const bridge = new MrtrBridge(
    sealer,
    opts.ttlMs ?? 60_000,
    silentLogger,
    store.spent,
    opts.replica ?? 'r1',
    opts.forwarding ?? false,
    opts.limits,
  );
  return { sealer, store, bridge };
}

const binding = (over: Partial<RetryBinding> = {}): RetryBinding => ({
  upstream: 'u',
  principal: 'alice',
  method: 'tools/call',
  name: 'ask',
  args: { q: 1 },
  ...over,
});
const context = (): CallContext => ({ principal: 'alice', connection: new ClientConnection() });

/** A call on a fake session that asks one form, driven to its first round. */
async function firstRound(bridge: MrtrBridge) {
  const call = fakeCall();
  call.ex.start();
  const asked = call.session.ask('elicitation/create', FORM);
  const first = (await bridge.drive(call.ex, binding(), context(), WINDOW_MS)) as unknown as Round;
  return { ...call, asked, first };
}

describe('MRTR bridge', () => {
  it('first round: input_required with the input requests and a sealed requestState; the call is parked', async () => {
    const { bridge, sealer } = setup();
    const { first, ex } = await firstRound(bridge);
    expect(first).toEqual({
      resultType: 'input_required',
      inputRequests: { 'elicitation-1': { method: 'elicitation/create', params: FORM } },
      requestState: expect.any(String),
    });
    expect(first.requestState.split('.')).toHaveLength(5);
    expect(bridge.parkedCount).toBe(1);
    const claims = await sealer.open(first.requestState);
    expect(claims).toMatchObject({
      up: 'u',
      sub: 'alice',
      m: 'tools/call',
      n: 'ask',
      ex: ex.id,
      rep: 'r1',
      rnd: 1,
      keys: ['elicitation-1'],
    });
  });

  it('the retry with inputResponses and the state answers the parked Exchange; the result arrives', async () => {
    const { bridge } = setup();
    const { first, session, asked } = await firstRound(bridge);
    const claims = await bridge.open(binding(), first.requestState);
    const retry = bridge.resume(claims, binding(), { 'elicitation-1': ACCEPT }, context(), WINDOW_MS);
    await expect(asked.answer).resolves.toEqual(ACCEPT);
    expect(bridge.parkedCount).toBe(0);
    session.resolve(RESULT);
    await expect(retry).resolves.toEqual(RESULT);
  });

  it('refuses a state presented with other arguments, another tool, another upstream or another principal (-32602); the call stays parked', async () => {
    const { bridge } = setup();
    const { first } = await firstRound(bridge);
    for (const other of [{ args: { q: 2 } }, { name: 'other' }, { upstream: 'v' }, { principal: 'mallory' }, { method: 'prompts/get' }]) {
      await expect(bridge.open(binding(other), first.requestState), JSON.stringify(other)).rejects.toMatchObject({
        code: -32602,
        message: INVALID_STATE,
      });
    }
    expect(bridge.parkedCount).toBe(1);
    await expect(bridge.open(binding(), first.requestState)).resolves.toMatchObject({ rnd: 1 });
  });

  it('refuses a state that was already used (-32602)', async () => {
    const { bridge } = setup();
    const { first, session } = await firstRound(bridge);
    const claims = await bridge.open(binding(), first.requestState);
    const retry = bridge.resume(claims, binding(), { 'elicitation-1': ACCEPT }, context(), WINDOW_MS);
    session.resolve(RESULT);
    await retry;
    await expect(bridge.open(binding(), first.requestState)).rejects.toMatchObject({ code: -32602, message: INVALID_STATE });
    // Spent between open and resume (two retries at once): the second is refused too.
    await expect(bridge.resume(claims, binding(), { 'elicitation-1': ACCEPT }, context(), WINDOW_MS)).rejects.toMatchObject({
      code: -32602,
    });
  });

  it('refuses a tampered or foreign state (-32602)', async () => {
    const { bridge } = setup();
    const { first } = await firstRound(bridge);
    const parts = first.requestState.split('.');
    parts[3] = parts[3]!.slice(0, -2) + (parts[3]!.endsWith('AA') ? 'BA' : 'AA');
    await expect(bridge.open(binding(), parts.join('.'))).rejects.toMatchObject({ code: -32602, message: INVALID_STATE });
    const other = setup();
    await expect(other.bridge.open(binding(), first.requestState)).rejects.toMatchObject({ code: -32602, message: INVALID_STATE });
  });

  it('a state parked on another replica sealed with the same key: -32602 alone, HeldElsewhere naming it when replicas forward', async () => {
    const a = setup({ replica: 'r1' });
    const { first } = await firstRound(a.bridge);
    const alone = new MrtrBridge(a.sealer, 60_000, silentLogger, a.store.spent, 'r2', false);
    await expect(alone.open(binding(), first.requestState)).rejects.toMatchObject({ code: -32602 });
    const forwarding = new MrtrBridge(a.sealer, 60_000, silentLogger, a.store.spent, 'r2', true);
    const err = await forwarding.open(binding(), first.requestState).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(HeldElsewhere);
    expect((err as HeldElsewhere).replica).toBe('r1');
  });

  it('a malformed inputResponses value is refused with -32602 naming the key; the state stays unspent and the call parked', async () => {
    const { bridge } = setup();
    const { first, session, asked } = await firstRound(bridge);
    const claims = await bridge.open(binding(), first.requestState);
    await expect(bridge.resume(claims, binding(), { 'elicitation-1': { action: 'maybe' } }, context(), WINDOW_MS)).rejects.toMatchObject({
      code: -32602,
      message: expect.stringMatching(/^inputResponses\["elicitation-1"\] is not a valid ElicitResult/),
      data: { key: 'elicitation-1' },
    });
    await expect(
      bridge.resume(claims, binding(), { 'elicitation-1': { action: 'accept', content: { name: 7 } } }, context(), WINDOW_MS),
    ).rejects.toMatchObject({ code: -32602, message: expect.stringContaining('content does not match the requestedSchema: name') });
    await expect(bridge.resume(claims, binding(), ['no'], context(), WINDOW_MS)).rejects.toMatchObject({
      code: -32602,
      message: 'inputResponses must be an object mapping input keys to responses',
    });
    expect(bridge.parkedCount).toBe(1);
    // A correct retry with the same state still goes through.
    const again = await bridge.open(binding(), first.requestState);
    const retry = bridge.resume(again, binding(), { 'elicitation-1': ACCEPT }, context(), WINDOW_MS);
    await expect(asked.answer).resolves.toEqual(ACCEPT);
    session.resolve(RESULT);
    await expect(retry).resolves.toEqual(RESULT);
  });

  it('a retry without an answer for an outstanding key is asked again in a new round with a new state', async () => {
    const { bridge } = setup();
    const { first, ex } = await firstRound(bridge);
    const claims = await bridge.open(binding(), first.requestState);
    const second = (await bridge.resume(claims, binding(), {}, context(), WINDOW_MS)) as unknown as Round;
    expect(second.resultType).toBe('input_required');
    expect(second.inputRequests).toEqual(first.inputRequests);
    expect(second.requestState).not.toBe(first.requestState);
    await expect(bridge.open(binding(), second.requestState)).resolves.toMatchObject({ ex: ex.id, rnd: 2 });
    // The first state was spent by that retry.
    await expect(bridge.open(binding(), first.requestState)).rejects.toMatchObject({ code: -32602 });
  });

  it('answering one of two outstanding inputs leaves only the other in the next round', async () => {
    const { bridge } = setup();
    const { ex, session } = fakeCall();
    ex.start();
    session.ask('elicitation/create', FORM);
    session.ask('roots/list');
    const first = (await bridge.drive(ex, binding(), context(), WINDOW_MS)) as unknown as Round;
    expect(Object.keys(first.inputRequests)).toEqual(['elicitation-1', 'roots-2']);
    const claims = await bridge.open(binding(), first.requestState);
    const second = (await bridge.resume(claims, binding(), { 'roots-2': { roots: [] } }, context(), WINDOW_MS)) as unknown as Round;
    expect(Object.keys(second.inputRequests)).toEqual(['elicitation-1']);
  });

  it('a parked call not retried within the TTL is cancelled upstream; the late retry gets -32602', async () => {
    const { bridge } = setup({ ttlMs: 100 });
    const { first, asked, session, ex } = await firstRound(bridge);
    await expect(asked.answer).resolves.toEqual({ action: 'cancel' });
    expect(bridge.parkedCount).toBe(0);
    expect(ex.outcome).toMatchObject({ error: { code: -32603, data: { reason: 'cancelled' } } });
    await eventually(() => session.cancels.length > 0);
    expect(session.cancels).toHaveLength(1);
    await expect(bridge.open(binding(), first.requestState)).rejects.toMatchObject({ code: -32602 });
  });

  it('a call that ends while parked gives its outcome to the retry', async () => {
    const { bridge } = setup();
    const { first, session } = await firstRound(bridge);
    // The upstream gives up on its question and answers the call.
    session.reject(new Error('boom'));
    await tick();
    expect(bridge.parkedCount).toBe(0);
    const claims = await bridge.open(binding(), first.requestState);
    await expect(bridge.resume(claims, binding(), { 'elicitation-1': ACCEPT }, context(), WINDOW_MS)).rejects.toMatchObject({
      code: -32603,
      data: { upstream: 'u', reason: 'unreachable' },
    });
  });

  it('the client closing its connection during a round cancels the call upstream (-32603 cancelled)', async () => {
    const { bridge } = setup();
    const { ex, session } = fakeCall();
    ex.start();
    const ctx = context();
    const driven = bridge.drive(ex, binding(), ctx, WINDOW_MS);
    ctx.connection.close();
    await expect(driven).rejects.toMatchObject({ code: -32603, data: { reason: 'cancelled' } });
    await eventually(() => session.cancels.length > 0);
    expect(session.cancels).toEqual([{ token: ex.id, reason: expect.stringContaining('The client closed the request') }]);
  });

  it('beyond maxParked for the upstream the first round is refused with -32603 parked-limit and the call cancelled', async () => {
    const { bridge } = setup({ limits: { total: 10, perUpstream: () => 1 } });
    await firstRound(bridge);
    const second = fakeCall();
    second.ex.start();
    second.session.ask('elicitation/create', FORM);
    await expect(bridge.drive(second.ex, binding(), context(), WINDOW_MS)).rejects.toMatchObject({
      code: -32603,
      data: { reason: 'parked-limit' },
      message: expect.stringContaining("limit 1 for upstream 'u'"),
    });
    expect(bridge.parkedCount).toBe(1);
    await eventually(() => second.session.cancels.length > 0);
    expect(second.session.cancels).toHaveLength(1);
  });

  it('replay mode: the round cancels the call and seals the questions; the retry answers them in order and spends the state', async () => {
    const { bridge } = setup();
    const { ex, session } = fakeCall();
    ex.start();
    session.ask('elicitation/create', FORM);
    const first = (await bridge.drive(ex, binding(), context(), WINDOW_MS, undefined, {
      round: 0,
      maxBytes: 32_768,
    })) as unknown as Round;
    expect(first.resultType).toBe('input_required');
    expect(bridge.parkedCount).toBe(0);
    expect(ex.outcome).toMatchObject({ error: { data: { reason: 'cancelled' } } });
    const claims = await bridge.open(binding(), first.requestState);
    expect(claims).toMatchObject({ ex: '', rep: '', rnd: 1, rp: [{ k: 'elicitation-1', m: 'elicitation/create' }] });
    await expect(bridge.replayAnswers(claims, { 'elicitation-1': { action: 'nope' } })).rejects.toMatchObject({ code: -32602 });
    const entries = await bridge.replayAnswers(claims, { 'elicitation-1': ACCEPT });
    expect(entries).toEqual([expect.objectContaining({ k: 'elicitation-1', v: ACCEPT })]);
    await expect(bridge.replayAnswers(claims, { 'elicitation-1': ACCEPT })).rejects.toMatchObject({ code: -32602, message: INVALID_STATE });
  });
  it('while draining, a call that asks for input is cancelled with -32603 shutting-down instead of parked; a parked call is still resumed', async () => {
    const { bridge } = setup();
    const parked = await firstRound(bridge);
    bridge.drain();
    const { ex, session } = fakeCall();
    ex.start();
    session.ask('elicitation/create', FORM);
    await expect(bridge.drive(ex, binding(), context(), WINDOW_MS)).rejects.toMatchObject({
      code: -32603,
      data: { reason: 'shutting-down' },
    });
    expect(bridge.parkedCount).toBe(1);
    const claims = await bridge.open(binding(), parked.first.requestState);
    const retry = bridge.resume(claims, binding(), { 'elicitation-1': ACCEPT }, context(), WINDOW_MS);
    await expect(parked.asked.answer).resolves.toEqual(ACCEPT);
    parked.session.resolve(RESULT);
    await expect(retry).resolves.toEqual(RESULT);
  });
});
