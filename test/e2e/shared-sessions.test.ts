/**
 * Shared upstream sessions on Streamable HTTP: once the upstream has sent a server-initiated request
 * on the POST stream of the call it belongs to, calls share sessions (up to maxCallsPerSession) and
 * every question still reaches only its own call; a question on the GET stream cannot be attributed
 * and sends the upstream back to one call per session.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, startFixtureHttp } from '../helpers/fixture.js';
import type { SpawnedServer } from '../helpers/processes.js';
import type { SessionPool } from '../../src/upstream/pool.js';
import { textOf, v2Client } from '../helpers/v2client.js';

const CAPS = { elicitation: {}, sampling: {} };
const accept = (name: string) => ({ action: 'accept', content: { name } });

describe('shared upstream sessions (Streamable HTTP)', () => {
  let fixture: SpawnedServer & { config: Record<string, unknown> };
  const log = new FixtureLog();
  const gateways: TestGateway[] = [];
  const start = async (extra: Record<string, unknown> = {}, top: Record<string, unknown> = {}) => {
    const gw = await startGateway({ ...top, upstreams: { f: { ...fixture.config, maxSessions: 8, maxCallsPerSession: 8, ...extra } } });
    gateways.push(gw);
    return gw;
  };
  const poolOf = (gw: TestGateway): SessionPool => gw.gateway.upstreams.get('f')!.pool;
  const call = (gw: TestGateway, name: string, args: Record<string, unknown>, more: Record<string, unknown> = {}) =>
    rpc(gw.url('f'), 'tools/call', { name, arguments: args, ...more }, { caps: CAPS });
  /** Proves to the gateway that the upstream asks on the call's own stream. */
  const prove = async (gw: TestGateway) => {
    const first = await call(gw, 'ask_name', {});
    const [key] = Object.keys(first.body.result.inputRequests);
    const done = await call(
      gw,
      'ask_name',
      {},
      { requestState: first.body.result.requestState, inputResponses: { [key!]: accept('Ada') } },
    );
    expect(done.body.result.content[0].text).toBe('Hello, Ada!');
    expect(poolOf(gw).attribution).toBe('post');
  };

  beforeAll(async () => {
    fixture = await startFixtureHttp('http', log);
  });
  afterAll(async () => {
    for (const gw of gateways) await gw.close();
    await fixture?.stop();
  });

  it('parked calls share sessions once the upstream asked on a call stream, and each answer reaches its own call', async () => {
    const gw = await start();
    await prove(gw);
    const n = 12;
    const parked = await Promise.all(Array.from({ length: n }, (_, i) => call(gw, 'echo_after_ask', { tag: `t${i}` })));
    for (const p of parked) expect(p.body.result.resultType).toBe('input_required');
    const stats = poolOf(gw).stats();
    // 12 calls at 8 per session: two sessions, not twelve.
    expect(stats.total).toBeLessThanOrEqual(2);
    expect(stats.sharedCalls).toBe(n);
    // Answered in reverse order, each with a name of its own.
    const done = await Promise.all(
      parked
        .map((p, i) => ({ p, i }))
        .reverse()
        .map(({ p, i }) => {
          const [key] = Object.keys(p.body.result.inputRequests);
          return call(
            gw,
            'echo_after_ask',
            { tag: `t${i}` },
            { requestState: p.body.result.requestState, inputResponses: { [key!]: accept(`N${i}`) } },
          ).then((r) => ({ r, i }));
        }),
    );
    for (const { r, i } of done) expect(r.body.result.content[0].text).toBe(`tag=t${i} action=accept name=N${i}`);
    expect(poolOf(gw).stats().sharedCalls).toBe(0);
  });

  it('a parked call that expires on a shared session is cancelled upstream while the others on it go on', async () => {
    const gw = await start({}, { requestState: { ttlMs: 4000 } });
    await prove(gw);
    const doomed = await call(gw, 'echo_after_ask', { tag: 'doomed' });
    expect(doomed.body.result.resultType).toBe('input_required');
    await new Promise((r) => setTimeout(r, 2000));
    const kept = await Promise.all([call(gw, 'echo_after_ask', { tag: 'k1' }), call(gw, 'echo_after_ask', { tag: 'k2' })]);
    expect(poolOf(gw).stats()).toMatchObject({ total: 1, sharedCalls: 3 });
    // The first state expires; its call is cancelled upstream (its place is given back within 1 s,
    // the longest wait for an answer to the cancelled request), the session stays for the two others.
    expect(await eventually(() => poolOf(gw).stats().sharedCalls === 2, 4000)).toBe(true);
    expect(
      await eventually(
        () => log.events().some((e) => e.event === 'elicit-result' && e.tag === 'doomed' && e.result?.action === 'cancel'),
        5000,
      ),
    ).toBe(true);
    expect(poolOf(gw).stats().total).toBe(1);
    const done = await Promise.all(
      kept.map((p, i) => {
        const [key] = Object.keys(p.body.result.inputRequests);
        return call(
          gw,
          'echo_after_ask',
          { tag: `k${i + 1}` },
          { requestState: p.body.result.requestState, inputResponses: { [key!]: accept(`K${i + 1}`) } },
        );
      }),
    );
    expect(done.map((r) => r.body.result.content[0].text)).toEqual(['tag=k1 action=accept name=K1', 'tag=k2 action=accept name=K2']);
    // A session that carried a cancelled call is closed (DELETE upstream) when its last call is done, never reused.
    expect(await eventually(() => log.events().some((e) => e.event === 'http' && e.httpMethod === 'DELETE'), 5000)).toBe(true);
    expect(poolOf(gw).stats().sharedCalls).toBe(0);
  });

  it('an upstream that asks on its GET stream keeps one call per session, and each question reaches its call', async () => {
    const gw = await start();
    const first = await call(gw, 'ask_unrelated', { tag: 'solo' });
    expect(first.body.result.resultType).toBe('input_required');
    expect(poolOf(gw).attribution).toBe('get');
    const others = await Promise.all([1, 2, 3].map((i) => call(gw, 'ask_unrelated', { tag: `g${i}` })));
    expect(poolOf(gw).stats()).toMatchObject({ total: 4, sharedCalls: 0 });
    const all = [first, ...others];
    const tags = ['solo', 'g1', 'g2', 'g3'];
    const done = await Promise.all(
      all.map((p, i) => {
        const [key, req] = Object.entries(p.body.result.inputRequests as Record<string, { params: { message: string } }>)[0]!;
        expect(req.params.message).toBe(`Who is asking for ${tags[i]}?`);
        return call(
          gw,
          'ask_unrelated',
          { tag: tags[i] },
          { requestState: p.body.result.requestState, inputResponses: { [key]: accept(`U${i}`) } },
        );
      }),
    );
    expect(done.map((r) => r.body.result.content[0].text)).toEqual(tags.map((t, i) => `tag=${t} action=accept name=U${i}`));
  });

  it.each([
    ['its session alone, the second sent 300 ms after the first answer arrived', false, { gapMs: 300, afterAnswer: true }, 0],
    ['a shared session, the second sent 300 ms after the first answer arrived', true, { gapMs: 300, afterAnswer: true }, 0],
    ['a shared session, the second sent 300 ms after the first, while the client still decides', true, { gapMs: 300 }, 800],
  ])('a call on %s: both questions are asked, each in its round, and the tool completes', async (_what, shared, args, thinkMs) => {
    const gw = await start();
    if (shared) await prove(gw);
    // The user takes thinkMs to answer each question (the client's handler may return a promise).
    const answer = (p: { message: string }) => accept(p.message.replace('?', ''));
    const { client, record } = await v2Client(gw.url('f'), {
      elicit: (p) => (thinkMs ? (new Promise((r) => setTimeout(() => r(answer(p)), thinkMs)) as never) : answer(p)),
    });
    try {
      const r = await client.callTool({ name: 'ask_two_apart', arguments: args });
      expect(textOf(r as never)).toBe('First and Second');
      expect(record.elicitation.map((e) => e.message)).toEqual(['First?', 'Second?']);
      expect(record.results.filter((x) => x.resultType === 'input_required').map((x) => Object.keys(x.inputRequests))).toEqual([
        ['first'],
        ['second'],
      ]);
      expect(poolOf(gw).stats().sharedCalls).toBe(0);
    } finally {
      await client.close();
    }
  });

  it('calls that leased sessions alone before the upstream was seen asking on call streams share them once parked: 20 at once all park under maxParkedSessions 16, and later calls join their sessions', async () => {
    const gw = await start({ maxSessions: 32, maxCallsPerSession: 16 });
    // Each call asks only after 500 ms: all 20 have leased a session alone before the first question shows where the upstream asks.
    const parked = await Promise.all(Array.from({ length: 20 }, () => call(gw, 'ask_later', { ms: 500 })));
    expect(parked.map((p) => p.body.error?.message ?? p.body.result.resultType)).toEqual(Array(20).fill('input_required'));
    expect(poolOf(gw).attribution).toBe('post');
    expect(poolOf(gw).stats()).toMatchObject({ total: 20, sharedCalls: 20 });
    // Parked calls hold no session of their own: new calls join their sessions instead of opening more.
    const more = await Promise.all(Array.from({ length: 5 }, () => call(gw, 'ask_later', { ms: 0 })));
    for (const p of more) expect(p.body.result.resultType).toBe('input_required');
    expect(poolOf(gw).stats()).toMatchObject({ total: 20, sharedCalls: 25 });
    const done = await Promise.all(
      [...parked, ...more].map((p, i) => {
        const [key] = Object.keys(p.body.result.inputRequests);
        return call(
          gw,
          'ask_later',
          { ms: i < 20 ? 500 : 0 },
          { requestState: p.body.result.requestState, inputResponses: { [key!]: accept(`L${i}`) } },
        );
      }),
    );
    expect(done.map((r) => r.body.result?.content[0].text)).toEqual(Array.from({ length: 25 }, (_, i) => `Hello, L${i}!`));
  });

  it('calls that hold sessions alone (no sharing) count against maxParkedSessions; the refusal says how many are parked and when the oldest expires', async () => {
    const gw = await start({ maxSessions: 4, maxCallsPerSession: 1 }, { requestState: { ttlMs: 60_000 } });
    const first = await call(gw, 'ask_name', {});
    const second = await call(gw, 'ask_name', {});
    for (const p of [first, second]) expect(p.body.result.resultType).toBe('input_required');
    const before = Date.now();
    const refused = await call(gw, 'ask_name', {});
    expect(refused.body.error).toMatchObject({ code: -32603, data: { upstream: 'f', reason: 'parked-limit' } });
    const message: string = refused.body.error.message;
    expect(message).toContain('maxParkedSessions=2');
    expect(message).toContain('2 calls hold a session of their own (2 parked waiting for input)');
    const at = /the oldest parked one expires at (\S+) \(in (\d+) s\) unless retried/.exec(message);
    expect(at, message).not.toBeNull();
    const expires = Date.parse(at![1]!);
    expect(expires).toBeGreaterThan(before + 50_000);
    expect(expires).toBeLessThanOrEqual(before + 60_000);
    expect(Number(at![2])).toBeGreaterThan(50);
    expect(Number(at![2])).toBeLessThanOrEqual(60);
  });

  /**
   * Answers the elicitation `first` (an `ask_then_sample_unrelated` round) asks; expects the next
   * round to ask the sampling the server sent on its GET stream, answers it and expects the result.
   */
  async function answerThenSample(gw: TestGateway, first: Awaited<ReturnType<typeof call>>): Promise<void> {
    const [ek] = Object.keys(first.body.result.inputRequests);
    const second = await call(
      gw,
      'ask_then_sample_unrelated',
      {},
      { requestState: first.body.result.requestState, inputResponses: { [ek!]: accept('Ada') } },
    );
    expect(second.body.result?.resultType, JSON.stringify(second.body)).toBe('input_required');
    const [sk, sampling] = Object.entries(second.body.result.inputRequests as Record<string, { method: string }>)[0]!;
    expect(sampling.method).toBe('sampling/createMessage');
    const sample = { role: 'assistant', content: { type: 'text', text: 'Hi Ada' }, model: 'm', stopReason: 'endTurn' };
    const done = await call(
      gw,
      'ask_then_sample_unrelated',
      {},
      { requestState: second.body.result.requestState, inputResponses: { [sk]: sample } },
    );
    expect(done.body.result.content[0].text).toBe('name=Ada sample=Hi Ada');
  }

  it("a question on the GET stream of a shared session with one call in flight is that call's: asked in its next round, and the call completes", async () => {
    const gw = await start();
    await prove(gw);
    const first = await call(gw, 'ask_then_sample_unrelated', {});
    expect(Object.values(first.body.result.inputRequests).map((r: any) => r.method)).toEqual(['elicitation/create']);
    // The call's session is shared (the upstream asks on call streams) and the call is alone on it.
    expect(poolOf(gw).stats()).toMatchObject({ total: 1, sharedCalls: 1 });
    await answerThenSample(gw, first);
    // A question on the GET stream: calls get sessions of their own from now on.
    expect(poolOf(gw).attribution).toBe('get');
  });

  it("a question on the GET stream of a shared session whose other call ended is the one call in flight's: asked in its round, the call completes, and the session takes no other call", async () => {
    const gw = await start();
    await prove(gw);
    const other = await call(gw, 'echo_after_ask', { tag: 'other' });
    const first = await call(gw, 'ask_then_sample_unrelated', {});
    expect(Object.values(first.body.result.inputRequests).map((r: any) => r.method)).toEqual(['elicitation/create']);
    // Both calls were on one shared session; the other one ends, this one is alone in flight.
    expect(poolOf(gw).stats()).toMatchObject({ total: 1, sharedCalls: 2 });
    const [ok] = Object.keys(other.body.result.inputRequests);
    const ended = await call(
      gw,
      'echo_after_ask',
      { tag: 'other' },
      { requestState: other.body.result.requestState, inputResponses: { [ok!]: accept('Bo') } },
    );
    expect(ended.body.result.content[0].text).toBe('tag=other action=accept name=Bo');
    expect(poolOf(gw).stats().sharedCalls).toBe(1);
    await answerThenSample(gw, first);
    expect(poolOf(gw).attribution).toBe('get');
    // The session that carried the unattributed question is held by one call at a time from now on.
    const session = [...(poolOf(gw) as unknown as { live: Set<{ shareable: boolean }> }).live][0]!;
    expect(session.shareable).toBe(false);
  });

  it('a question on the GET stream of a shared session is refused upstream, never given to a call, and sharing stops', async () => {
    const gw = await start();
    await prove(gw);
    const parked = await Promise.all([call(gw, 'echo_after_ask', { tag: 'p1' }), call(gw, 'echo_after_ask', { tag: 'p2' })]);
    expect(poolOf(gw).stats()).toMatchObject({ total: 1, sharedCalls: 2 });
    const stray = await call(gw, 'ask_unrelated', { tag: 'stray' });
    // The tool's question could not be attributed: the upstream got an error, and said so in its result.
    expect(stray.body.result.isError).toBe(true);
    expect(stray.body.result.content[0].text).toMatch(/outside any client request/);
    expect(poolOf(gw).attribution).toBe('get');
    // The parked calls were not handed the stray question and still complete with their own answers.
    const done = await Promise.all(
      parked.map((p, i) => {
        expect(Object.keys(p.body.result.inputRequests)).toHaveLength(1);
        const [key] = Object.keys(p.body.result.inputRequests);
        return call(
          gw,
          'echo_after_ask',
          { tag: `p${i + 1}` },
          { requestState: p.body.result.requestState, inputResponses: { [key!]: accept(`P${i + 1}`) } },
        );
      }),
    );
    expect(done.map((r) => r.body.result.content[0].text)).toEqual(['tag=p1 action=accept name=P1', 'tag=p2 action=accept name=P2']);
    // From now on a call gets a session of its own, so the same tool works.
    const again = await call(gw, 'ask_unrelated', { tag: 'own' });
    expect(again.body.result.resultType).toBe('input_required');
    expect(poolOf(gw).stats().sharedCalls).toBe(0);
  });
});
