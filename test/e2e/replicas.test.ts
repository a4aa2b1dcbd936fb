/**
 * Several replicas: gateway processes sharing a real Redis, behind a real round-robin load
 * balancer (haproxy, with the recipe's config/replicas/haproxy.cfg), all started by the test on
 * 127.0.0.1. Parked calls and tasks are served wherever their requests land (forwarded to the
 * replica holding the call), single use holds across replicas, a stopped replica's calls fail at
 * once, replay mode needs no replica at all, the internal hop takes nothing without its secret, and
 * Redis going away and coming back is survived.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient, type RedisClientType } from 'redis';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { listen, rpc } from '../helpers/gateway.js';
import { CONCURRENT_INPUT, eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { alive, startCli, type CliGateway } from '../helpers/cli.js';
import { startHaproxy, startRedis, type TestBalancer, type TestRedis } from '../helpers/infra.js';
import { describeWith } from '../helpers/installed.js';
import { rounds, textOf, v2Client } from '../helpers/v2client.js';
import { scaled } from '../helpers/budget.js';

const SECRET = 'replica-secret-0123456789abcdefghij';
const TASKS = { extensions: { 'io.modelcontextprotocol/tasks': {} } };
const ELICIT = { elicitation: {} };
const INFRA = ['redis-server', 'haproxy'] as const;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A replica's config: the shared store and hop secret, and `upstreams` with room for the tests' sessions (tasks at once). */
function replicaConfig(
  redisUrl: string,
  upstreams: Record<string, Record<string, unknown>>,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    store: { kind: 'redis', url: redisUrl },
    replicas: { secret: SECRET, heartbeatMs: 200, deadAfterMs: 1000 },
    requestState: { keys: [{ kid: 'shared', secret: 'a-requestState-secret-both-replicas-share' }] },
    limits: { rateLimit: { requestsPerSecond: 10_000, burst: 10_000 }, maxConcurrentPerPrincipal: 1000 },
    upstreams: Object.fromEntries(
      Object.entries(upstreams).map(([name, u]) => [
        name,
        { ...u, maxSessions: 32, maxSessionsPerPrincipal: 32, tasks: { taskAfterMs: 0 } },
      ]),
    ),
    ...extra,
  };
}

/** Request log lines of requests this replica forwarded to another (of `method`, or any). */
const forwardedIn = (g: CliGateway, method?: string) =>
  g.logs.filter((l) => l.msg === 'request' && l.outcome === 'forwarded' && (method === undefined || l.method === method)).length;

/** The sum of the samples of metric `name` whose labels include every one of `labels`, on replica `g`. */
async function metric(g: CliGateway, name: string, labels: Record<string, string>): Promise<number> {
  const text = await (await fetch(`${g.base}/metrics`)).text();
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  return text
    .split('\n')
    .filter((l) => l.startsWith(`${name}{`) && want.every((w) => l.includes(w)))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

/** Upstream sessions of `upstream` on `g` not ready for a call: leased, being opened, or kept out of use after a cancelled call. */
const sessionsInUse = async (g: CliGateway, upstream = 'f') =>
  (await metric(g, 'mrtr_upstream_sessions', { upstream, state: 'leased' })) +
  (await metric(g, 'mrtr_upstream_sessions', { upstream, state: 'unavailable' }));
const parkedOn = (g: CliGateway, upstream = 'f') => metric(g, 'mrtr_parked_calls', { upstream });

/** Resolves with the text of a plain call (no shared state needed) to `url`, or what came instead. */
async function plainCall(url: string, headers: Record<string, string> = {}): Promise<string> {
  const r = await rpc(url, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } }, { headers });
  return r.body?.result?.content?.[0]?.text ?? `HTTP ${r.status}: ${JSON.stringify(r.body)}`;
}

describeWith(INFRA, 'two replicas behind haproxy, sharing Redis', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;
  let lb: TestBalancer;
  const log = new FixtureLog();

  beforeAll(async () => {
    redis = await startRedis();
    const cfg = replicaConfig(redis.url, { f: fixtureStdio(log) });
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
    lb = await startHaproxy([a.port, b.port]);
  }, scaled(60_000));
  afterAll(async () => {
    await lb?.stop();
    for (const g of [a, b]) g?.child.kill('SIGTERM');
    await Promise.all([a?.exited, b?.exited]);
    await redis?.stop();
  });

  it(
    'the bridge cases through the balancer, 20 times each: 0 failures, and retries forwarded to the replica holding the call',
    async () => {
      const url = `${lb.base}/mcp/f`;
      const failures: string[] = [];
      const forwardedBefore = forwardedIn(a) + forwardedIn(b);
      for (let i = 0; i < 20; i++) {
        const { client, record } = await v2Client(url, {
          elicit: (p) =>
            String(p.message).includes('topic')
              ? { action: 'accept', content: { topic: `t${i}` } }
              : { action: 'accept', content: { name: `N${i}`, ok: true } },
          sample: () => ({ role: 'assistant', model: 'm', content: { type: 'text', text: `s${i}` } }),
        });
        const check = (what: string, ok: boolean) => ok || failures.push(`${what} #${i}`);
        try {
          check('elicit', textOf(await client.callTool({ name: 'ask_name', arguments: { greeting: 'Hi' } })) === `Hi, N${i}!`);
          check('three rounds', JSON.parse(textOf(await client.callTool({ name: 'three_rounds', arguments: {} }))).topic === `t${i}`);
          check(
            'two inputs in one round',
            textOf(await client.callTool({ name: 'concurrent_inputs', arguments: {} })) === `name=N${i} sample=s${i}`,
          );
          const prompt = await client.getPrompt({ name: 'greeting_prompt', arguments: {} });
          check('prompts/get', JSON.stringify(prompt.messages).includes(`Greet N${i}`));
          const note = await client.readResource({ uri: 'fixture://notes/secret' });
          check('resources/read', JSON.stringify(note.contents).includes('the note says hi'));
          check('rounds', rounds(record) >= 7);
        } catch (e) {
          failures.push(`#${i}: ${(e as Error).message}`);
        } finally {
          await client.close();
        }
        const declined = await v2Client(url, { elicit: () => ({ action: 'decline' }) });
        try {
          check('decline', textOf(await declined.client.callTool({ name: 'ask_name', arguments: {} })) === 'elicitation decline');
        } catch (e) {
          failures.push(`decline #${i}: ${(e as Error).message}`);
        } finally {
          await declined.client.close();
        }
      }
      expect(failures).toEqual([]);
      // Round robin sends about half of the retries to the other replica, which forwards them.
      expect(forwardedIn(a) + forwardedIn(b) - forwardedBefore).toBeGreaterThan(20);
    },
    scaled(240_000),
  );

  it(
    'tasks through the balancer, 20 times: created, polled to completed, answered with tasks/update, cancelled upstream',
    async () => {
      const url = `${lb.base}/mcp/f`;
      const failures: string[] = [];
      const cancelsBefore = forwardedIn(a, 'tasks/cancel') + forwardedIn(b, 'tasks/cancel');
      const call = (name: string, args: Record<string, unknown> = {}) =>
        rpc(url, 'tools/call', { name, arguments: args }, { caps: { ...TASKS, ...ELICIT } });
      const task = (method: string, taskId: string, params: Record<string, unknown> = {}) =>
        rpc(url, method, { taskId, ...params }, { caps: { ...TASKS, ...ELICIT }, headers: { 'mcp-name': taskId } });
      const until = async (taskId: string, status: string) => {
        for (let n = 0; n < 100; n++) {
          const r = await task('tasks/get', taskId);
          if (r.body.result?.status === status) return r.body.result;
          if (r.body.error || ['completed', 'failed', 'cancelled'].includes(r.body.result?.status)) return r.body.result ?? r.body.error;
          await new Promise((res) => setTimeout(res, 50));
        }
        return undefined;
      };
      for (let i = 0; i < 20; i++) {
        const slow = await call('slow', { ms: 200, steps: 2 });
        const done = slow.body.result?.taskId ? await until(slow.body.result.taskId, 'completed') : undefined;
        if (done?.status !== 'completed' || done.result?.content?.[0]?.text !== 'slept 200ms')
          failures.push(`complete #${i}: ${JSON.stringify(done ?? slow.body)}`);

        const asking = await call('slow_then_ask', { ms: 50 });
        const waiting = asking.body.result?.taskId ? await until(asking.body.result.taskId, 'input_required') : undefined;
        const key = waiting?.inputRequests ? Object.keys(waiting.inputRequests)[0] : undefined;
        if (!key) failures.push(`input_required #${i}: ${JSON.stringify(waiting ?? asking.body)}`);
        else {
          const upd = await task('tasks/update', asking.body.result.taskId, {
            inputResponses: { [key]: { action: 'accept', content: { name: `W${i}` } } },
          });
          if (upd.body.error) failures.push(`update #${i}: ${JSON.stringify(upd.body.error)}`);
          const signed = await until(asking.body.result.taskId, 'completed');
          if (signed?.result?.content?.[0]?.text !== `Report signed by W${i}`) failures.push(`signed #${i}: ${JSON.stringify(signed)}`);
        }

        const long = await call('slow', { ms: 20_000, steps: 20 });
        const cancel = await task('tasks/cancel', long.body.result?.taskId ?? 'none');
        if (cancel.body.error) failures.push(`cancel #${i}: ${JSON.stringify(cancel.body.error)}`);
        const cancelled = await until(long.body.result.taskId, 'cancelled');
        if (cancelled?.status !== 'cancelled') failures.push(`cancelled #${i}: ${JSON.stringify(cancelled)}`);
      }
      expect(failures).toEqual([]);
      // Each cancellation reached the upstream as notifications/cancelled.
      expect(await eventually(() => log.of('cancelled', 'slow').length >= 20, 5000)).toBe(true);
      // Task commands landing on the replica that does not run the task were forwarded to it: a
      // tasks/cancel follows its task's creation at once, so round robin sends it to the other one.
      expect(forwardedIn(a, 'tasks/cancel') + forwardedIn(b, 'tasks/cancel') - cancelsBefore).toBeGreaterThanOrEqual(10);
    },
    scaled(240_000),
  );

  it('the same requestState sent to both replicas at once: exactly one succeeds, the other gets -32602', async () => {
    for (let i = 0; i < 5; i++) {
      const first = await rpc(
        `${a.base}/mcp/f`,
        'tools/call',
        { name: 'echo_after_ask', arguments: { tag: `race${i}` } },
        { caps: ELICIT },
      );
      const retry = {
        name: 'echo_after_ask',
        arguments: { tag: `race${i}` },
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'X' } } },
      };
      const answers = await Promise.all([
        rpc(`${a.base}/mcp/f`, 'tools/call', retry, { caps: ELICIT }),
        rpc(`${b.base}/mcp/f`, 'tools/call', retry, { caps: ELICIT }),
      ]);
      expect(answers.filter((r) => r.body.result?.content?.[0]?.text === `tag=race${i} action=accept name=X`)).toHaveLength(1);
      expect(answers.filter((r) => r.body.error?.code === -32602)).toHaveLength(1);
    }
  });

  it(
    'a replica shutting down: what it refuses (503) the balancer sends to the other replica; its health check stays green meanwhile',
    async () => {
      const calls = log.of('call', 'slow').length;
      // A call in flight keeps a draining (most of shutdownGraceMs, 8 s by default) while the test looks.
      const long = rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 20_000, steps: 20 } }).catch(() => undefined);
      // Bounded by what a loaded machine needs to start the call (the upstream session may spawn first).
      expect(await eventually(() => log.of('call', 'slow').length > calls, 20_000)).toBe(true);
      a.child.kill('SIGTERM');
      // Draining: a refuses new MCP requests, yet /healthz (what the balancer checks) answers 200.
      expect(await eventually(async () => (await rpc(`${a.base}/mcp/f`, 'tools/list')).status === 503, 5000)).toBe(true);
      expect((await fetch(`${a.base}/healthz`)).status).toBe(200);
      const through: string[] = [];
      for (let i = 0; i < 6; i++) through.push(await plainCall(`${lb.base}/mcp/f`));
      expect(through).toEqual(Array(6).fill('slept 5ms'));
      a.child.kill('SIGKILL');
      await long;
    },
    scaled(60_000),
  );
});

describeWith(INFRA, 'replay mode across replicas, the internal hop, and a replica that stops', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;
  let c: CliGateway;
  let lb: TestBalancer;
  const log = new FixtureLog();
  const autoLog = new FixtureLog();
  const questionFile = join(mkdtempSync(join(tmpdir(), 'mrtr-question-')), 'question.txt');
  const ALICE = { authorization: 'Bearer alice-key-0123456789abcdef' };
  const BOB = { authorization: 'Bearer bob-key-0123456789abcdef' };

  beforeAll(async () => {
    redis = await startRedis();
    const replayed = Object.fromEntries(
      ['drifting_ask', 'three_rounds', 'echo_after_ask', 'ordered_asks'].map((t) => [t, { mode: 'replay' }]),
    );
    const cfg = replicaConfig(
      redis.url,
      {
        f: { ...fixtureStdio(log, { FIXTURE_QUESTION_FILE: questionFile }), input: { ...CONCURRENT_INPUT, mode: 'park', tools: replayed } },
        auto: { ...fixtureStdio(autoLog), input: { ...CONCURRENT_INPUT, mode: 'auto' } },
        tiny: { ...fixtureStdio(), input: { ...CONCURRENT_INPUT, mode: 'replay', maxReplayStateBytes: 400 } },
      },
      {
        auth: {
          mode: 'apiKeys',
          keys: [
            { principal: 'alice', key: 'alice-key-0123456789abcdef' },
            { principal: 'bob', key: 'bob-key-0123456789abcdef' },
          ],
        },
      },
    );
    [a, b, c] = await Promise.all([startCli(cfg), startCli(cfg), startCli(cfg)]);
    // Checks every 2 s, as the recipe does: a replica just killed still gets requests for a while, which the balancer must send elsewhere.
    lb = await startHaproxy([a.port, b.port, c.port], 2000);
  }, scaled(60_000));
  afterAll(async () => {
    await lb?.stop();
    for (const g of [a, b, c]) g?.child.kill('SIGKILL');
    await Promise.all([a?.exited, b?.exited, c?.exited]);
    await redis?.stop();
  });

  /** A `tools/call` of `name` to `base`'s upstream `upstream`, as alice unless `headers` say otherwise. */
  const call = (
    base: string,
    name: string,
    params: Record<string, unknown> = {},
    opts: { upstream?: string; caps?: Record<string, unknown>; headers?: Record<string, string> } = {},
  ) =>
    rpc(
      `${base}/mcp/${opts.upstream ?? 'f'}`,
      'tools/call',
      { name, arguments: {}, ...params },
      { caps: opts.caps ?? ELICIT, headers: opts.headers ?? ALICE },
    );
  /** The retry answering the only input request of `r` with `answer`. */
  const answering = (r: { body: any }, answer: Record<string, unknown>) => {
    const [key] = Object.keys(r.body.result.inputRequests);
    return { requestState: r.body.result.requestState, inputResponses: { [key!]: answer } };
  };
  const named = (name: string) => ({ action: 'accept', content: { name } });
  const question = (r: { body: any }) =>
    (Object.values(r.body.result?.inputRequests ?? {}) as { params: { message: string } }[]).map((x) => x.params.message);

  it('a replay-mode requestState sent to two replicas at once: exactly one wins (the shared spent-id set), the other gets -32602', async () => {
    for (let i = 0; i < 3; i++) {
      const first = await call(a.base, 'echo_after_ask', { arguments: { tag: `rr${i}` } });
      expect(first.body.result.resultType).toBe('input_required');
      // Replay: nothing is parked, so no replica holds anything that could decide.
      expect(await parkedOn(a)).toBe(0);
      const retry = { arguments: { tag: `rr${i}` }, ...answering(first, named('X')) };
      const answers = await Promise.all([call(a.base, 'echo_after_ask', retry), call(b.base, 'echo_after_ask', retry)]);
      expect(answers.filter((r) => r.body.result?.content?.[0]?.text === `tag=rr${i} action=accept name=X`)).toHaveLength(1);
      expect(answers.filter((r) => r.body.error?.code === -32602)).toHaveLength(1);
      // The loser never ran the call with the answer (the first run got "cancel" when it was cancelled).
      expect(log.of('elicit-result', 'echo_after_ask').filter((e) => e.tag === `rr${i}` && e.result.action === 'accept')).toHaveLength(1);
    }
  });

  it('the internal hop: 404 without the secret, with a wrong one or without a principal; a principal header from a client is not trusted', async () => {
    const answered = log.of('elicit-result', 'ask_name').length;
    const parked = await call(b.base, 'ask_name', { arguments: { greeting: 'Hop' } });
    const retry = { name: 'ask_name', arguments: { greeting: 'Hop' }, ...answering(parked, named('Ann')) };
    // The principal the gateway gives alice's API key, as the hop carries it.
    const alice = Buffer.from('apikey:alice', 'utf8').toString('base64url');
    const hop = (headers: Record<string, string>) =>
      rpc(`${b.base}/_replicas/forward/mcp/f`, 'tools/call', retry, { caps: ELICIT, headers });
    const refused: Record<string, string>[] = [
      { 'x-mrtr-principal': alice },
      { 'x-mrtr-principal': alice, 'x-mrtr-replica-secret': `${SECRET.slice(0, -1)}X` },
      { 'x-mrtr-principal': alice, 'x-mrtr-replica-secret': 'short' },
      { 'x-mrtr-replica-secret': SECRET },
    ];
    for (const headers of refused) expect((await hop(headers)).status).toBe(404);
    // bob presenting alice's state with her principal (and even the secret) on the MCP endpoint stays bob.
    for (const g of [c, b]) {
      const spoofed = await rpc(`${g.base}/mcp/f`, 'tools/call', retry, {
        caps: ELICIT,
        headers: { ...BOB, 'x-mrtr-principal': alice, 'x-mrtr-replica-secret': SECRET },
      });
      expect(spoofed.body.error?.code).toBe(-32602);
    }
    // None of it reached the call: it is still parked, unanswered.
    expect(await parkedOn(b)).toBe(1);
    expect(log.of('elicit-result', 'ask_name')).toHaveLength(answered);
    // The same request with the secret is served: the route is there, and opens only with it.
    expect((await hop({ 'x-mrtr-principal': alice, 'x-mrtr-replica-secret': SECRET })).body.result.content[0].text).toBe('Hop, Ann!');
  });

  it('the internal hop, even with the secret, serves only retries and task commands held there, for the principal they belong to; the rest is refused and counted', async () => {
    const as = (principal: string) => Buffer.from(principal, 'utf8').toString('base64url');
    const hop = (
      g: CliGateway,
      principal: string,
      method: string,
      params: Record<string, unknown>,
      caps: Record<string, unknown> = ELICIT,
      headers: Record<string, string> = {},
    ) =>
      rpc(`${g.base}/_replicas/forward/mcp/f`, method, params, {
        caps,
        headers: { 'x-mrtr-replica-secret': SECRET, 'x-mrtr-principal': as(principal), ...headers },
      });
    const refused = (g: CliGateway, reason: string) => metric(g, 'mrtr_forward_refused_total', { reason });
    const answered = log.of('elicit-result', 'ask_name').length;
    const calls = log.of('call', 'slow').length;
    const parked = await call(b.base, 'ask_name', { arguments: { greeting: 'Forge' } });
    const retry = { name: 'ask_name', arguments: { greeting: 'Forge' }, ...answering(parked, named('Ann')) };
    const before = {
      principal: await refused(b, 'principal'),
      method: await refused(b, 'method'),
      task: await refused(b, 'task'),
      state: await refused(b, 'state'),
    };

    // alice's state forwarded as bob, or as a principal no key or issuer produces.
    for (const principal of ['apikey:bob', 'root']) {
      const forged = await hop(b, principal, 'tools/call', retry);
      expect(forged.status).toBe(403);
      expect(forged.body.error).toMatchObject({ code: -32600, message: expect.stringMatching(/^Forbidden: .*principal/) });
    }
    expect(await refused(b, 'principal')).toBe(before.principal + 2);
    // Anything but a retry or a task command: a new call, a listing, tasks/get.
    const newCall = await hop(b, 'root', 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } });
    expect(newCall.status).toBe(403);
    expect(newCall.body.error.message).toMatch(/^Forbidden: the internal hop takes only retries/);
    expect((await hop(b, 'apikey:alice', 'tools/list', {})).status).toBe(403);
    // A legacy client's initialize: legacy sessions are never forwarded.
    const init = await fetch(`${b.base}/_replicas/forward/mcp/f`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'x-mrtr-replica-secret': SECRET,
        'x-mrtr-principal': as('apikey:alice'),
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'forged', version: '1' } },
      }),
    });
    expect(init.status).toBe(403);
    expect(((await init.json()) as any).error.message).toMatch(/^Forbidden: the internal hop takes no legacy session requests/);
    expect(await refused(b, 'method')).toBe(before.method + 3);
    // A state parked on another replica (a) is not b's to serve.
    const elsewhere = await call(a.base, 'ask_name', { arguments: { greeting: 'Else' } });
    expect(
      (
        await hop(b, 'apikey:alice', 'tools/call', {
          name: 'ask_name',
          arguments: { greeting: 'Else' },
          ...answering(elsewhere, named('X')),
        })
      ).status,
    ).toBe(403);
    expect(await refused(b, 'state')).toBe(before.state + 1);

    // A task b runs for alice: bob's forwarded tasks/cancel is refused, and so is one sent to a, which does not run it.
    const task = await call(b.base, 'slow', { arguments: { ms: 30_000, steps: 30 } }, { caps: TASKS });
    const taskId = task.body.result.taskId as string;
    const taskHeaders = { 'mcp-name': taskId };
    expect((await hop(b, 'apikey:bob', 'tasks/cancel', { taskId }, TASKS, taskHeaders)).status).toBe(403);
    expect(await refused(b, 'principal')).toBe(before.principal + 3);
    expect((await hop(a, 'apikey:alice', 'tasks/cancel', { taskId }, TASKS, taskHeaders)).status).toBe(403);
    expect(await refused(a, 'task')).toBeGreaterThanOrEqual(1);
    const got = await rpc(`${b.base}/mcp/f`, 'tasks/get', { taskId }, { caps: TASKS, headers: { ...ALICE, ...taskHeaders } });
    expect(got.body.result.status).toBe('working');

    // Nothing of it reached the upstream: no new call ran, the parked call is unanswered.
    expect(log.of('call', 'slow').length).toBe(calls + 1);
    expect(log.of('elicit-result', 'ask_name')).toHaveLength(answered);
    // What forwarding is for still passes: alice's retry, alice's tasks/cancel.
    expect((await hop(b, 'apikey:alice', 'tools/call', retry)).body.result.content[0].text).toBe('Forge, Ann!');
    expect((await hop(b, 'apikey:alice', 'tasks/cancel', { taskId }, TASKS, taskHeaders)).body.result).toMatchObject({
      resultType: 'complete',
    });
    await call(a.base, 'ask_name', { arguments: { greeting: 'Else' }, ...answering(elsewhere, named('X')) });
  });

  it('a retry of a call parked on another replica is forwarded without this replica opening an upstream session or listing tools for it', async () => {
    // A caller and capabilities c has served nothing for: it holds no tool list and no session for them.
    const caps = { ...ELICIT, sampling: {} };
    const parked = await call(a.base, 'ask_name', {}, { caps, headers: BOB });
    expect(parked.body.result.resultType).toBe('input_required');
    const opened = c.logs.filter((l) => l.msg === 'upstream session opened').length;
    const forwarded = forwardedIn(c, 'tools/call');
    const retry = await call(c.base, 'ask_name', answering(parked, named('Bo')), { caps, headers: BOB });
    expect(retry.body.result?.content?.[0]?.text).toBe('Hello, Bo!');
    // The request log line reaches the test through c's stdout after the answer; a session c opened
    // for the call would have been logged on the same stream before it.
    expect(await eventually(() => forwardedIn(c, 'tools/call') === forwarded + 1, 2000)).toBe(true);
    expect(c.logs.filter((l) => l.msg === 'upstream session opened')).toHaveLength(opened);
  });

  it('replay state size: answers beyond input.maxReplayStateBytes fail with -32603 replay-limit, naming the setting', async () => {
    const caps = { ...ELICIT, sampling: {}, roots: {} };
    const round = async (topic: string) => {
      const first = await call(a.base, 'three_rounds', {}, { upstream: 'tiny', caps });
      return call(b.base, 'three_rounds', answering(first, { action: 'accept', content: { topic } }), { upstream: 'tiny', caps });
    };
    expect((await round('cranes')).body.result.resultType).toBe('input_required');
    const big = await round('x'.repeat(1000));
    expect(big.body.error).toMatchObject({ code: -32603, data: { upstream: 'tiny', reason: 'replay-limit' } });
    expect(big.body.error.message).toMatch(/exceed input\.maxReplayStateBytes=400/);
  });

  it('input.mode "auto": tools annotated readOnlyHint or idempotentHint are replayed, an unannotated one is parked', async () => {
    for (const tool of ['lookup_ask', 'idempotent_ask']) {
      const runs = autoLog.of('call', tool).length;
      const first = await call(a.base, tool, {}, { upstream: 'auto' });
      expect(first.body.result.resultType).toBe('input_required');
      expect(await parkedOn(a, 'auto')).toBe(0);
      const done = await call(b.base, tool, answering(first, named('Zed')), { upstream: 'auto' });
      expect(done.body.result.content[0].text).toBe(`${tool}: Zed`);
      // It ran again for the answer, on b: a replay.
      expect(autoLog.of('call', tool).length - runs).toBe(2);
    }
    const runs = autoLog.of('call', 'ask_name').length;
    const first = await call(a.base, 'ask_name', {}, { upstream: 'auto' });
    expect(await parkedOn(a, 'auto')).toBe(1);
    const done = await call(b.base, 'ask_name', answering(first, named('Zed')), { upstream: 'auto' });
    expect(done.body.result.content[0].text).toBe('Hello, Zed!');
    // Parked on a and answered there (forwarded from b): it ran once.
    expect(autoLog.of('call', 'ask_name').length - runs).toBe(1);
    expect(await parkedOn(a, 'auto')).toBe(0);
  });

  it('replay answers are matched in order: a question that comes in another place, or reads differently, is asked again', async () => {
    // ordered_asks asks First? then Second?; once both are answered, it asks them the other way round.
    writeFileSync(questionFile, 'forward');
    const q1 = await call(a.base, 'ordered_asks');
    expect(question(q1)).toEqual(['First?']);
    const q2 = await call(b.base, 'ordered_asks', answering(q1, named('F')));
    expect(question(q2)).toEqual(['Second?']);
    writeFileSync(questionFile, 'reversed');
    // The state holds First?=F, Second?=S; this run asks Second? first: not what was asked first, so asked again.
    const q3 = await call(a.base, 'ordered_asks', answering(q2, named('S')));
    expect(question(q3)).toEqual(['Second?']);
    const q4 = await call(b.base, 'ordered_asks', answering(q3, named('S2')));
    expect(question(q4)).toEqual(['First?']);
    const q5 = await call(a.base, 'ordered_asks', answering(q4, named('F2')));
    expect(q5.body.result.content[0].text).toBe('first=F2 second=S2');

    // drifting_ask: its first question changes between runs, so the recorded answer is not reused.
    writeFileSync(questionFile, 'question one');
    const d1 = await call(a.base, 'drifting_ask');
    expect(question(d1)).toEqual(['Answer question one']);
    const d2 = await call(b.base, 'drifting_ask', answering(d1, { action: 'accept', content: { answer: 'one' } }));
    expect(question(d2)).toEqual(['Who answered?']);
    writeFileSync(questionFile, 'question two');
    const d3 = await call(a.base, 'drifting_ask', answering(d2, named('Ann')));
    // The first question now reads differently: it is asked again, under a new key.
    expect(question(d3)).toEqual(['Answer question two']);
    expect(Object.keys(d3.body.result.inputRequests)).not.toContain('elicitation-1');
    const d4 = await call(b.base, 'drifting_ask', answering(d3, { action: 'accept', content: { answer: 'two' } }));
    // Ann answered after the old question: her answer is not reused after the new one.
    expect(question(d4)).toEqual(['Who answered?']);
    const d5 = await call(a.base, 'drifting_ask', answering(d4, named('Bo')));
    expect(d5.body.result.content[0].text).toBe('question two: two by Bo');
  });

  it(
    'replay: three rounds, the replica of the first round killed, the others alternating: the call completes, one run per round, no session in use while waiting',
    async () => {
      const caps = { ...ELICIT, sampling: {}, roots: {} };
      const answers: Record<string, unknown> = {
        'elicitation/create': { action: 'accept', content: { topic: 'cranes' } },
        'sampling/createMessage': { role: 'assistant', model: 'm', content: { type: 'text', text: 'a line' } },
        'roots/list': { roots: [{ uri: 'file:///cranes' }] },
      };
      const runs = () => log.of('call', 'three_rounds').length;
      const before = runs();
      // A cancelled call's session stays out of use (not leased) for up to a second, then is closed
      // and replaced; what counts is that none stays in use while the client decides.
      const noneInUse = (gs: CliGateway[]) =>
        eventually(async () => (await Promise.all(gs.map((g) => sessionsInUse(g)))).every((n) => n === 0), 10_000, 100);
      let r = await call(a.base, 'three_rounds', {}, { caps });
      expect(r.body.result.resultType).toBe('input_required');
      expect(runs()).toBe(before + 1);
      expect(await noneInUse([a])).toBe(true);
      a.child.kill('SIGKILL');
      await a.exited;
      const replicas = [b, c, b];
      const keys: string[] = [];
      for (let round = 0; r.body.result?.resultType === 'input_required'; round++) {
        expect(round).toBeLessThan(3);
        const [key, request] = Object.entries(r.body.result.inputRequests as Record<string, { method: string }>)[0]!;
        keys.push(key);
        r = await call(
          replicas[round]!.base,
          'three_rounds',
          { requestState: r.body.result.requestState, inputResponses: { [key]: answers[request.method] } },
          { caps },
        );
        // Each retry ran the tool once more (replayed, not resumed from a parked call).
        expect(runs()).toBe(before + round + 2);
        if (r.body.result?.resultType === 'input_required') expect(await noneInUse([b, c])).toBe(true);
      }
      // Keys stay unique over the whole call.
      expect(new Set(keys).size).toBe(3);
      expect(JSON.parse(r.body.result.content[0].text)).toEqual({ topic: 'cranes', line: 'a line', roots: ['file:///cranes'] });
    },
    scaled(90_000),
  );

  it(
    'the replica holding a parked call is killed: requests the balancer sends it go elsewhere, the retry through the balancer gets the clear error within a second of the heartbeat timeout, and its task reads failed with the reason',
    async () => {
      const parked = await call(b.base, 'ask_name');
      expect(parked.body.result.resultType).toBe('input_required');
      const task = await call(b.base, 'slow', { arguments: { ms: 30_000, steps: 30 } }, { caps: TASKS });
      const taskId = task.body.result.taskId as string;
      // The replicas left (a is stopped by the test before, unless it runs alone) are warm: they know
      // the upstream's era, so what follows measures the failure only.
      for (const g of [a, c].filter((g) => alive(g.child.pid!))) expect(await plainCall(`${g.base}/mcp/f`, ALICE)).toBe('slept 5ms');
      b.child.kill('SIGKILL');
      await b.exited;
      const killed = Date.now();
      const retry = await call(lb.base, 'ask_name', answering(parked, named('Late')));
      // deadAfterMs (1 s) plus a second.
      expect(Date.now() - killed).toBeLessThan(scaled(2000));
      expect(retry.body.error).toMatchObject({ code: -32603, data: { reason: 'replica-gone' } });
      expect(retry.body.error.message).toMatch(/stopped; start the call again/);
      // The balancer has not noticed yet (it checks every 2 s, and needs two failures): what lands on b is sent to c.
      const through: string[] = [];
      for (let i = 0; i < 4; i++) through.push(await plainCall(`${lb.base}/mcp/f`, ALICE));
      expect(through).toEqual(Array(4).fill('slept 5ms'));
      // Once its heartbeat is gone, the task it ran reads failed, with the reason.
      await sleep(Math.max(0, killed + 1200 - Date.now()));
      const got = await rpc(`${lb.base}/mcp/f`, 'tasks/get', { taskId }, { caps: TASKS, headers: { ...ALICE, 'mcp-name': taskId } });
      expect(got.body.result).toMatchObject({ status: 'failed', error: { code: -32603, data: { reason: 'replica-gone' } } });
    },
    scaled(60_000),
  );
});

describeWith(INFRA, 'Redis stopped and started again', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;
  let lb: TestBalancer;

  beforeAll(async () => {
    redis = await startRedis();
    const cfg = replicaConfig(redis.url, { f: fixtureStdio() });
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
    lb = await startHaproxy([a.port, b.port], 300);
  }, scaled(60_000));
  afterAll(async () => {
    await lb?.stop();
    for (const g of [a, b]) g?.child.kill('SIGKILL');
    await Promise.all([a?.exited, b?.exited]);
    await redis?.stop();
  });

  it(
    'plain calls through the balancer keep working throughout, readiness turns 503 and back on both replicas, and tasks and forwarded retries work after the restart',
    async () => {
      const readiness = async () => Promise.all([a, b].map(async (g) => (await fetch(`${g.base}/readyz`)).status));
      // Both replicas warm (an upstream session open), so the calls below take milliseconds.
      for (const g of [a, b]) expect(await plainCall(`${g.base}/mcp/f`)).toBe('slept 5ms');
      expect(await readiness()).toEqual([200, 200]);

      // A plain call every 150 ms through the balancer, from before the outage until after it.
      const plain: { at: number; text: string }[] = [];
      let looping = true;
      const loop = (async () => {
        while (looping) {
          const started = Date.now();
          plain.push({ at: started, text: await plainCall(`${lb.base}/mcp/f`).catch((e: Error) => e.message) });
          await sleep(Math.max(0, 150 - (Date.now() - started)));
        }
      })();

      await redis.stop();
      const down = Date.now();
      expect(await eventually(async () => (await readiness()).every((s) => s === 503), 3000)).toBe(true);
      const body = await (await fetch(`${b.base}/readyz`)).json();
      expect(body.store).toMatch(/cannot be reached/);
      // What needs the store fails fast, with a clear error.
      const started = Date.now();
      const taskDown = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } }, { caps: TASKS });
      expect(taskDown.body.error).toMatchObject({ code: -32603, data: { reason: 'store-unavailable' } });
      // The store's address is for the operator (readiness, logs), not for callers.
      expect(taskDown.body.error.message).toBe('The shared store of the gateway cannot be reached; retry shortly');
      expect(Date.now() - started).toBeLessThan(scaled(2000));
      // Long enough for the balancer's checks (every 300 ms, 2 failures) to drain both replicas, were they checking readiness.
      await sleep(Math.max(0, down + 2000 - Date.now()));
      // Six plain calls through the balancer started and answered while Redis is down (however slow the machine).
      expect(await eventually(() => plain.filter((p) => p.at > down).length >= 6, 20_000)).toBe(true);

      await redis.start();
      expect(await eventually(async () => (await readiness()).every((s) => s === 200), 10_000, 200)).toBe(true);
      await sleep(300);
      looping = false;
      await loop;
      expect(plain.filter((p) => p.text !== 'slept 5ms')).toEqual([]);

      // Tasks again: created, polled to completed.
      const t = await rpc(`${lb.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 100, steps: 1 } }, { caps: TASKS });
      expect(t.body.result.resultType).toBe('task');
      const taskId = t.body.result.taskId as string;
      let status: string | undefined;
      for (let i = 0; i < 60 && status !== 'completed'; i++) {
        const got = await rpc(`${lb.base}/mcp/f`, 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
        status = got.body.result?.status;
        if (status !== 'completed') await sleep(50);
      }
      expect(status).toBe('completed');

      // A retry for a call parked on a, sent to b, is forwarded again.
      const first = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT });
      const forwarded = forwardedIn(b);
      const viaB = await rpc(
        `${b.base}/mcp/f`,
        'tools/call',
        {
          name: 'ask_name',
          arguments: {},
          requestState: first.body.result.requestState,
          inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Back' } } },
        },
        { caps: ELICIT },
      );
      expect(viaB.body.result.content[0].text).toBe('Hello, Back!');
      // b's request log line (read from its stdout) says so.
      expect(await eventually(() => forwardedIn(b) === forwarded + 1, 2000)).toBe(true);
    },
    scaled(60_000),
  );
  it(
    'a retry that must be forwarded while Redis is down gets store-unavailable at once (not replica-gone), and the same retry completes once Redis is back',
    async () => {
      const readiness = async () => Promise.all([a, b].map(async (g) => (await fetch(`${g.base}/readyz`)).status));
      expect(await eventually(async () => (await readiness()).every((s) => s === 200), 10_000, 50)).toBe(true);
      // Both warm (the upstream's era known), so the time below is the failure's alone.
      for (const g of [a, b]) expect(await plainCall(`${g.base}/mcp/f`)).toBe('slept 5ms');
      const first = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT });
      expect(first.body.result.resultType).toBe('input_required');
      const retry = {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name: 'Patient' } } },
      };
      await redis.stop();
      expect(await eventually(async () => (await readiness()).every((s) => s === 503), 3000)).toBe(true);
      const started = Date.now();
      const down = await rpc(`${b.base}/mcp/f`, 'tools/call', retry, { caps: ELICIT });
      // b cannot tell whether a lives: the call is not said to be gone.
      expect(down.body.error).toMatchObject({ code: -32603, data: { reason: 'store-unavailable' } });
      expect(Date.now() - started).toBeLessThan(scaled(1000));
      expect(await metric(a, 'mrtr_parked_calls', { upstream: 'f' })).toBe(1);
      await redis.start();
      expect(await eventually(async () => (await readiness()).every((s) => s === 200), 10_000, 50)).toBe(true);
      // The same retry (until a's heartbeat is written again): the state was not spent, and the call waited on a.
      let back: any;
      expect(
        await eventually(
          async () =>
            (back = (await rpc(`${b.base}/mcp/f`, 'tools/call', retry, { caps: ELICIT })).body).error?.data?.reason !== 'replica-gone',
          3000,
          100,
        ),
      ).toBe(true);
      expect(back.result?.content?.[0]?.text).toBe('Hello, Patient!');
    },
    scaled(60_000),
  );
});

describeWith(['redis-server'], 'a Redis user whose ACL does not cover the key prefix', () => {
  let redis: TestRedis;
  let admin: RedisClientType;
  let a: CliGateway;

  beforeAll(async () => {
    redis = await startRedis();
    admin = createClient({ url: redis.url }) as RedisClientType;
    await admin.connect();
    // Every command and channel, but keys only under another prefix than the gateway's (mrtr:).
    await admin.sendCommand([
      'ACL',
      'SETUSER',
      'narrow',
      'on',
      '>narrow-password-0123456789',
      'resetkeys',
      '~otherprefix:*',
      '&*',
      '+@all',
    ]);
    a = await startCli(replicaConfig(`redis://narrow:narrow-password-0123456789@127.0.0.1:${redis.port}`, { f: fixtureStdio() }));
  }, scaled(60_000));
  afterAll(async () => {
    a?.child.kill('SIGKILL');
    await a?.exited;
    await admin?.quit().catch(() => {});
    await redis?.stop();
  });

  it(
    '/readyz answers 503 naming the prefix and NOPERM, and 200 once the user may use the prefix',
    async () => {
      let last: { status: number; body: any } | undefined;
      const readyz = async () => {
        const r = await fetch(`${a.base}/readyz`);
        return (last = { status: r.status, body: await r.json() });
      };
      // Connected and subscribed (the channel is allowed), yet every key under mrtr: is refused.
      expect(await eventually(async () => /NOPERM/.test((await readyz()).body.store ?? ''), 10_000, 100)).toBe(true);
      expect(last!.status).toBe(503);
      expect(last!.body.store).toMatch(/key prefix "mrtr:"/);
      expect(last!.body.store).not.toMatch(/narrow-password/);
      // What readiness says is what requests meet.
      const task = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 5, steps: 1 } }, { caps: TASKS });
      expect(task.body.error).toMatchObject({ code: -32603, data: { reason: 'store-unavailable' } });
      await admin.sendCommand(['ACL', 'SETUSER', 'narrow', '~mrtr:*']);
      expect(await eventually(async () => (await readyz()).status === 200, 10_000, 100)).toBe(true);
    },
    scaled(60_000),
  );
});

describeWith(['redis-server'], 'a replica is registered as soon as the store is reachable', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;

  beforeAll(async () => {
    redis = await startRedis();
    // A heartbeat far longer than the test: only the registration on connecting can make a findable.
    const cfg = replicaConfig(
      redis.url,
      { f: fixtureStdio() },
      { replicas: { secret: SECRET, heartbeatMs: 120_000, deadAfterMs: 240_000 } },
    );
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
  }, scaled(60_000));
  afterAll(async () => {
    for (const g of [a, b]) g?.child.kill('SIGKILL');
    await Promise.all([a?.exited, b?.exited]);
    await redis?.stop();
  });

  /** A call parked on a, its retry sent to b: the greeting, or what came instead. */
  async function parkOnAretryOnB(name: string): Promise<string> {
    const first = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'ask_name', arguments: {} }, { caps: ELICIT });
    expect(first.body.result?.resultType).toBe('input_required');
    const viaB = await rpc(
      `${b.base}/mcp/f`,
      'tools/call',
      {
        name: 'ask_name',
        arguments: {},
        requestState: first.body.result.requestState,
        inputResponses: { 'elicitation-1': { action: 'accept', content: { name } } },
      },
      { caps: ELICIT },
    );
    return viaB.body.result?.content?.[0]?.text ?? JSON.stringify(viaB.body);
  }

  it(
    'a retry forwarded to a replica just started, and again right after Redis restarted empty, reaches it',
    async () => {
      const readiness = async () => Promise.all([a, b].map(async (g) => (await fetch(`${g.base}/readyz`)).status));
      expect(await eventually(async () => (await readiness()).every((s) => s === 200), 10_000, 50)).toBe(true);
      expect(await parkOnAretryOnB('Early')).toBe('Hello, Early!');

      await redis.stop();
      expect(await eventually(async () => (await readiness()).every((s) => s === 503), 3000)).toBe(true);
      // Started again without the data it had: the heartbeats written before are gone.
      await redis.start();
      expect(await eventually(async () => (await readiness()).every((s) => s === 200), 10_000, 50)).toBe(true);
      expect(await eventually(async () => (await parkOnAretryOnB('Again')) === 'Hello, Again!', 1000, 100)).toBe(true);
    },
    scaled(60_000),
  );
});

describeWith(INFRA, 'Redis (with its append-only file) stopped while tasks run, and a replica started while it is down', () => {
  let redis: TestRedis;
  let a: CliGateway;
  let b: CliGateway;
  let late: CliGateway | undefined;
  let cfg: Record<string, unknown>;
  const readyz = async (g: CliGateway) => (await fetch(`${g.base}/readyz`)).status;
  const getTask = (g: CliGateway, taskId: string) =>
    rpc(`${g.base}/mcp/f`, 'tasks/get', { taskId }, { caps: TASKS, headers: { 'mcp-name': taskId } });
  /** The task as `g` reads it once it is completed, or the last answer after `timeoutMs`. */
  async function completedOn(g: CliGateway, taskId: string, timeoutMs: number): Promise<any> {
    let last: any;
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      last = (await getTask(g, taskId)).body;
      if (last.result?.status === 'completed') return last.result;
      await sleep(100);
    }
    return last;
  }

  beforeAll(async () => {
    redis = await startRedis({ appendOnly: true });
    cfg = replicaConfig(redis.url, { f: fixtureStdio() });
    [a, b] = await Promise.all([startCli(cfg), startCli(cfg)]);
  }, scaled(60_000));
  afterAll(async () => {
    for (const g of [a, b, late]) g?.child.kill('SIGKILL');
    await Promise.all([a?.exited, b?.exited, late?.exited]);
    await redis?.stop();
  });

  it(
    'a task that completes while Redis is stopped reads completed, with its result, on both replicas once Redis is back',
    async () => {
      expect(await eventually(async () => (await readyz(a)) === 200 && (await readyz(b)) === 200, 10_000, 50)).toBe(true);
      // Warm: the upstream session is open, so the task starts at once.
      expect(await plainCall(`${a.base}/mcp/f`)).toBe('slept 5ms');
      const created = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 1500, steps: 3 } }, { caps: TASKS });
      expect(created.body.result).toMatchObject({ resultType: 'task', status: 'working' });
      const taskId = created.body.result.taskId as string;
      const createdAt = Date.now();
      await redis.stop();
      // Stopped before the tool ends: its progress and its result reach a while Redis is down.
      expect(Date.now() - createdAt).toBeLessThan(scaled(1200));
      expect(await eventually(async () => (await readyz(a)) === 503, 3000)).toBe(true);
      expect((await getTask(a, taskId)).body.error).toMatchObject({ code: -32603, data: { reason: 'store-unavailable' } });
      // The tool has ended (1.5 s) and a tried to write its result; then Redis comes back.
      await sleep(Math.max(0, createdAt + 2500 - Date.now()));
      await redis.start();
      // The replica running the task writes the result once it reconnects (backoff up to 2 s).
      const onA = await completedOn(a, taskId, 10_000);
      expect(onA).toMatchObject({ taskId, status: 'completed', result: { content: [{ type: 'text', text: 'slept 1500ms' }] } });
      // The record in Redis has it: the other replica reads the same.
      const onB = await completedOn(b, taskId, 5000);
      expect(onB).toMatchObject({ taskId, status: 'completed', result: { content: [{ type: 'text', text: 'slept 1500ms' }] } });
    },
    scaled(60_000),
  );

  it(
    'a replica started while Redis is down follows, once Redis is up, a task another replica runs on a subscriptions/listen stream',
    async () => {
      await redis.stop();
      expect(await eventually(async () => (await readyz(a)) === 503, 3000)).toBe(true);
      late = await startCli(cfg);
      expect(await readyz(late)).toBe(503);
      await redis.start();
      expect(await eventually(async () => (await readyz(a)) === 200 && (await readyz(late!)) === 200, 10_000, 50)).toBe(true);
      // Long enough to be still running once the stream is open, on a loaded machine too.
      const created = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 6000, steps: 1 } }, { caps: TASKS });
      const taskId = created.body.result.taskId as string;
      const stream = await listen(`${late.base}/mcp/f`, { taskIds: [taskId] }, { caps: TASKS, id: 'late-listen' });
      try {
        expect(await stream.next()).toMatchObject({
          method: 'notifications/subscriptions/acknowledged',
          params: { notifications: { taskIds: [taskId] } },
        });
        // Still running once the stream is acknowledged: its end can reach the stream only as a's publication on the task channel.
        expect((await getTask(a, taskId)).body.result.status).toBe('working');
        const end = Date.now() + 15_000;
        while (!stream.messages.some((m) => m.method === 'notifications/tasks' && m.params.status === 'completed') && Date.now() < end)
          await stream.next(500);
        const done = stream.messages.find((m) => m.method === 'notifications/tasks' && m.params.status === 'completed');
        expect(done?.params).toMatchObject({ taskId, status: 'completed', result: { content: [{ type: 'text', text: 'slept 6000ms' }] } });
      } finally {
        stream.close();
      }
    },
    scaled(60_000),
  );
});

describeWith(['redis-server'], 'a running task whose record a Redis restart lost', () => {
  let redis: TestRedis;
  let a: CliGateway;

  beforeAll(async () => {
    redis = await startRedis();
    [a] = await Promise.all([startCli(replicaConfig(redis.url, { f: fixtureStdio() }, { admin: { enabled: true } }))]);
  }, scaled(60_000));
  afterAll(async () => {
    a?.child.kill('SIGKILL');
    await a?.exited;
    await redis?.stop();
  });

  it(
    'leaves the running tasks and the status counts of /admin once its tool ends',
    async () => {
      const tasks = async () => (await fetch(`${a.base}/admin/api/tasks`)).json();
      expect(await eventually(async () => (await fetch(`${a.base}/readyz`)).status === 200, 10_000, 50)).toBe(true);
      expect(await plainCall(`${a.base}/mcp/f`)).toBe('slept 5ms');
      const created = await rpc(`${a.base}/mcp/f`, 'tools/call', { name: 'slow', arguments: { ms: 1500, steps: 1 } }, { caps: TASKS });
      expect(created.body.result).toMatchObject({ resultType: 'task', status: 'working' });
      expect((await tasks()).counts.working).toBe(1);
      // Restarted empty (no persistence) while the tool runs: the record is gone when its result comes.
      await redis.stop();
      await redis.start();
      expect(
        await eventually(
          async () => {
            const t = await tasks();
            return t.running.length === 0 && t.counts.working === 0;
          },
          8000,
          100,
        ),
      ).toBe(true);
    },
    scaled(30_000),
  );
});
