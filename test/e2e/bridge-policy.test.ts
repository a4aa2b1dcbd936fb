/**
 * Bridge policy: partial retries, parked-call bounds, and many concurrent eliciting calls.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { ROOT } from '../helpers/processes.js';
import { rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { textOf, v2Client } from '../helpers/v2client.js';
import { scaled } from '../helpers/budget.js';

const CAPS = { elicitation: {}, sampling: {} };

describe('bridge policy', () => {
  let gw: TestGateway;
  let bounded: TestGateway;
  const log = new FixtureLog();
  beforeAll(async () => {
    // Every session may carry a parked call here: the test is about attribution under concurrency.
    gw = await startGateway({ upstreams: { f: { ...fixtureStdio(log), maxSessions: 8, maxParkedSessions: 8 } } });
    bounded = await startGateway({ upstreams: { f: { ...fixtureStdio(), maxParked: 2 } } });
  });
  afterAll(async () => {
    await gw?.close();
    await bounded?.close();
  });

  it('a retry that leaves out a key gets input_required for exactly that key; unknown keys are ignored', async () => {
    const url = gw.url('f');
    const first = await rpc(url, 'tools/call', { name: 'concurrent_inputs', arguments: {} }, { caps: CAPS });
    expect(Object.keys(first.body.result.inputRequests).sort()).toEqual(['hello', 'who']);
    const partial = await rpc(
      url,
      'tools/call',
      {
        name: 'concurrent_inputs',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { who: { action: 'accept', content: { name: 'Kim' } }, bogus: { anything: true } },
      },
      { caps: CAPS },
    );
    expect(partial.body.result.resultType).toBe('input_required');
    expect(Object.keys(partial.body.result.inputRequests)).toEqual(['hello']);
    expect(partial.body.result.inputRequests.hello.method).toBe('sampling/createMessage');
    expect(partial.body.result.requestState).not.toBe(first.body.result.requestState);
    const done = await rpc(
      url,
      'tools/call',
      {
        name: 'concurrent_inputs',
        arguments: {},
        requestState: partial.body.result.requestState,
        inputResponses: { hello: { role: 'assistant', model: 'm', content: { type: 'text', text: 'yo' } } },
      },
      { caps: CAPS },
    );
    expect(done.body.result.content[0].text).toBe('name=Kim sample=yo');
  });

  it('a key hint that clashes with a key already used in the call falls back to a generated key', async () => {
    const url = gw.url('f');
    const first = await rpc(url, 'tools/call', { name: 'same_hint_twice', arguments: {} }, { caps: CAPS });
    expect(Object.keys(first.body.result.inputRequests)).toEqual(['person']);
    const second = await rpc(
      url,
      'tools/call',
      {
        name: 'same_hint_twice',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { person: { action: 'accept', content: { name: 'Ann' } } },
      },
      { caps: CAPS },
    );
    expect(Object.keys(second.body.result.inputRequests)).toEqual(['elicitation-1']);
    const done = await rpc(
      url,
      'tools/call',
      {
        name: 'same_hint_twice',
        arguments: {},
        requestState: second.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Ben' } } },
      },
      { caps: CAPS },
    );
    expect(done.body.result.content[0].text).toBe('Ann and Ben');
  });

  it('with maxParked 2, a third call that would park gets -32603 while the first two still complete', async () => {
    const url = bounded.url('f');
    const a = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: CAPS });
    const b = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: CAPS });
    expect([a.body.result.resultType, b.body.result.resultType]).toEqual(['input_required', 'input_required']);
    expect(bounded.gateway.bridge.parkedCount).toBe(2);
    const c = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: CAPS });
    expect(c.body.error.code).toBe(-32603);
    expect(c.body.error.data).toEqual({ upstream: 'f', reason: 'parked-limit' });
    expect(c.body.error.message).toMatch(/waiting for client input/);
    expect(bounded.gateway.bridge.parkedCount).toBe(2);
    for (const [r, name] of [
      [a, 'A'],
      [b, 'B'],
    ] as const) {
      const done = await rpc(
        url,
        'tools/call',
        {
          name: 'ask_name',
          arguments: {},
          requestState: r.body.result.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content: { name } } },
        },
        { caps: CAPS },
      );
      expect(done.body.result.content[0].text).toBe(`Hello, ${name}!`);
    }
    expect(bounded.gateway.bridge.parkedCount).toBe(0);
  });

  it('20 parallel eliciting calls through one upstream each get their own answer back', async () => {
    const url = gw.url('f');
    const results = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const { client, record } = await v2Client(url, { elicit: () => ({ action: 'accept', content: { name: `user-${i}` } }) });
        try {
          const r = await client.callTool({ name: 'echo_after_ask', arguments: { tag: `t${i}` } });
          return { text: textOf(r), asked: record.elicitation.length };
        } finally {
          await client.close();
        }
      }),
    );
    results.forEach((r, i) => {
      expect(r.text).toBe(`tag=t${i} action=accept name=user-${i}`);
      expect(r.asked).toBe(1);
    });
    expect(gw.gateway.bridge.parkedCount).toBe(0);
  });

  it('an upstream seen sending several input requests at once gets a quiet wait for its batches', async () => {
    // A batch window long enough that a batch split by a loaded machine (the second request read
    // tens of ms after the first) still counts as one batch sent in pieces.
    const learner = await startGateway({ upstreams: { f: { ...fixtureStdio(), input: { batchWindowMs: 1000 } } } });
    try {
      const batching = learner.gateway.upstreams.get('f')!.batching;
      expect(batching.quietMs).toBe(0);
      const url = learner.url('f');
      // A call that asks one thing at a time teaches nothing.
      const one = await rpc(url, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: CAPS });
      expect(Object.keys(one.body.result.inputRequests)).toHaveLength(1);
      expect(batching.quietMs).toBe(0);
      const first = await rpc(url, 'tools/call', { name: 'concurrent_inputs', arguments: {} }, { caps: CAPS });
      expect(first.body.result.resultType).toBe('input_required');
      // Both in one round (5 ms from then on), or split on a loaded machine: learned from the gap
      // when the second request arrives, which may be after the first round was answered.
      await vi.waitFor(() => expect(batching.quietMs).toBeGreaterThanOrEqual(5), { timeout: scaled(5000), interval: 20 });
    } finally {
      await learner.close();
    }
  });

  it('an upstream that sends one batch in pieces is learned: its later batches wait for the gap and arrive in one round', async () => {
    const learner = await startGateway({ upstreams: { f: { ...fixtureStdio(), input: { batchWindowMs: 1000 } } } });
    try {
      const url = learner.url('f');
      const call = (extra: Record<string, unknown> = {}) =>
        rpc(url, 'tools/call', { name: 'ask_two_apart', arguments: { gapMs: 100 }, ...extra }, { caps: CAPS });
      const answer = (name: string) => ({ action: 'accept', content: { name } });
      const batching = learner.gateway.upstreams.get('f')!.batching;
      expect(batching.quietMs).toBe(0);
      // First call: the batch closes once the upstream is quiet, before the second question is sent.
      const first = await call();
      expect(Object.keys(first.body.result.inputRequests)).toEqual(['first']);
      // The user takes a while: the second question arrives while the first round is with the client.
      await new Promise((r) => setTimeout(r, 600));
      const second = await call({ requestState: first.body.result.requestState, inputResponses: { first: answer('Ada') } });
      expect(Object.keys(second.body.result.inputRequests)).toEqual(['second']);
      const done = await call({ requestState: second.body.result.requestState, inputResponses: { second: answer('Alan') } });
      expect(done.body.result.content[0].text).toBe('Ada and Alan');
      // Twice the gap seen plus 5 ms; the gap as seen here may be a little shorter than the
      // upstream's 100 ms timer when its first message was read late.
      expect(batching.quietMs).toBeGreaterThanOrEqual(2 * 90 + 5);
      // Later calls wait for the gap the upstream showed: both questions in one round.
      const again = await call();
      expect(Object.keys(again.body.result.inputRequests).sort()).toEqual(['first', 'second']);
      const both = await call({
        requestState: again.body.result.requestState,
        inputResponses: { first: answer('Grace'), second: answer('Edsger') },
      });
      expect(both.body.result.content[0].text).toBe('Grace and Edsger');
    } finally {
      await learner.close();
    }
  });
});

describe('parked calls leave sessions for other calls (default gateway.config.json: server-everything over stdio)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    const defaults = JSON.parse(readFileSync(join(ROOT, 'gateway.config.json'), 'utf8'));
    gw = await startGateway({ requestState: defaults.requestState, upstreams: defaults.upstreams });
  });
  afterAll(() => gw?.close());

  it(
    '10 abandoned eliciting calls: half of maxSessions park, the rest get parked-limit at once, and plain calls are still served',
    async () => {
      const url = gw.url('everything');
      const started = Date.now();
      const asks = await Promise.all(
        Array.from({ length: 10 }, () =>
          rpc(url, 'tools/call', { name: 'trigger-elicitation-request', arguments: {} }, { caps: { elicitation: { form: {} } } }),
        ),
      );
      const parked = asks.filter((r) => r.body.result?.resultType === 'input_required');
      const refused = asks.filter((r) => r.body.error);
      // maxSessions is 8 in the default config: 4 parked calls at most.
      expect(parked.length).toBe(4);
      expect(refused.length).toBe(6);
      for (const r of refused) {
        expect(r.body.error).toMatchObject({ code: -32603, data: { upstream: 'everything', reason: 'parked-limit' } });
        expect(r.body.error.message).toContain('maxParkedSessions=4');
      }
      // Refused when they asked, not after waiting queueMs (10 s) for a session.
      expect(Date.now() - started).toBeLessThan(scaled(8000));
      expect(gw.gateway.bridge.parkedCount).toBe(4);
      const plain = await Promise.all(
        Array.from({ length: 4 }, (_, i) => rpc(url, 'tools/call', { name: 'echo', arguments: { message: `m${i}` } })),
      );
      plain.forEach((r, i) => expect(r.body.result?.content?.[0]?.text).toBe(`Echo: m${i}`));
    },
    scaled(60_000),
  );
});
