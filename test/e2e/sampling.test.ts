/**
 * The gateway answering a legacy upstream's sampling/createMessage through an LLM provider: the
 * MRTR bridge (2026-07-28 clients) and the legacy pass-through relay (v1 SDK clients), both
 * provider kinds, fallback mode, tool use both ways, budgets, retries, timeouts and what is logged.
 * The providers are local HTTP servers speaking the OpenAI Chat Completions and Anthropic Messages
 * APIs (test/helpers/llm.ts).
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, describe, expect, it } from 'vitest';
import { everythingStdio, memoryLogger, rpc, startGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually, FixtureLog, fixtureStdio } from '../helpers/fixture.js';
import { anthropicMessage, errorBody, hugeAnswer, openaiCompletion, startFakeLlm, type FakeLlm, type Reply } from '../helpers/llm.js';
import { rounds, textOf, v2Client } from '../helpers/v2client.js';
import type { Logger } from '../../src/observability/log.js';
import { parseSamplingParams } from '../../src/sampling/mapping.js';
import { createProvider } from '../../src/sampling/providers.js';
import { scaled } from '../helpers/budget.js';

const OPENAI_KEY = 'sk-test-openai-key-0123456789abcdef';
const ANTHROPIC_KEY = 'sk-ant-test-key-0123456789abcdef';
process.env.TEST_SAMPLING_OPENAI_KEY = OPENAI_KEY;
process.env.TEST_SAMPLING_ANTHROPIC_KEY = ANTHROPIC_KEY;
/** A key whose base64, base64url and URL-encoded forms all differ from it and from one another. */
const ODD_KEY = 'live+key/0123456789=abc~xyz?';
process.env.TEST_SAMPLING_ODD_KEY = ODD_KEY;
/** principalHash('anonymous'). */
const ANONYMOUS = '2f183a4e64493af3';

const gateways: TestGateway[] = [];
const fakes: FakeLlm[] = [];
afterAll(async () => {
  await Promise.all(gateways.map((g) => g.close()));
  await Promise.all(fakes.map((f) => f.close()));
});

async function fake(kind: 'openai' | 'anthropic', reply: (req: any, n: number) => Reply | Promise<Reply>): Promise<FakeLlm> {
  const f = await startFakeLlm(kind, reply);
  fakes.push(f);
  return f;
}

/** A provider config for `f` (`extra` overrides). */
function provider(f: FakeLlm, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    kind: f.kind,
    baseUrl: f.baseUrl,
    apiKey: f.kind === 'openai' ? '${TEST_SAMPLING_OPENAI_KEY}' : '${TEST_SAMPLING_ANTHROPIC_KEY}',
    models: { main: { model: f.kind === 'openai' ? 'gpt-test' : 'claude-test-5' } },
    defaultModel: 'main',
    ...extra,
  };
}

async function gateway(providers: Record<string, unknown>, upstreams: Record<string, unknown>, log?: Logger): Promise<TestGateway> {
  const g = await startGateway({ sampling: { providers }, upstreams }, log ? { log } : {});
  gateways.push(g);
  return g;
}

const call = (name: string, args: Record<string, unknown>) => ({ name, arguments: args });
const resultText = (r: { body: any }) => textOf(r.body.result ?? {});

/** The sample lines of `/metrics` whose metric name starts with `mrtr_sampling_` or `mrtr_input_rounds_` (so a failure prints only those). */
async function metrics(g: TestGateway): Promise<string[]> {
  const text = await (await fetch(`${g.base}/metrics`)).text();
  return text.split('\n').filter((l) => /^mrtr_(sampling|input_rounds)_/.test(l));
}

describe('provider mode, a 2026-07-28 client that did not declare sampling (MRTR bridge, server-everything)', () => {
  it('OpenAI-compatible: trigger-sampling-request gets the provider text, no input_required is sent, the provider gets the mapped request field by field', async () => {
    const llm = await fake('openai', () => ({
      body: openaiCompletion({ content: 'Paris is the capital of France.', usage: { prompt: 31, completion: 8 } }),
    }));
    const g = await gateway({ oa: provider(llm) }, { everything: { ...everythingStdio, sampling: { mode: 'provider', provider: 'oa' } } });
    const r = await rpc(
      g.url('everything'),
      'tools/call',
      call('trigger-sampling-request', { prompt: 'Capital of France?', maxTokens: 50 }),
      { caps: {} },
    );
    expect(r.status).toBe(200);
    expect(r.body.result.resultType).toBe('complete');
    expect(r.body.result.inputRequests).toBeUndefined();
    const sampled = JSON.parse(resultText(r).replace(/^LLM sampling result: \n/, ''));
    expect(sampled).toEqual({
      role: 'assistant',
      content: { type: 'text', text: 'Paris is the capital of France.' },
      model: 'gpt-test-2026-01-01',
      stopReason: 'endTurn',
    });

    expect(llm.requests).toHaveLength(1);
    const [sent] = llm.requests;
    expect(sent!.path).toBe('/v1/chat/completions');
    expect(sent!.headers.authorization).toBe(`Bearer ${OPENAI_KEY}`);
    expect(sent!.body).toEqual({
      model: 'gpt-test',
      messages: [
        { role: 'system', content: 'You are a helpful test server.' },
        { role: 'user', content: 'Resource trigger-sampling-request context: Capital of France?' },
      ],
      stream: false,
      max_completion_tokens: 50,
      temperature: 0.7,
    });

    const m = await metrics(g);
    expect(m).toContain(`mrtr_sampling_requests_total{upstream="everything",provider="oa",outcome="complete"} 1`);
    expect(m).toContain(
      `mrtr_sampling_tokens_total{upstream="everything",tool="trigger-sampling-request",principal="${ANONYMOUS}",provider="oa",model="gpt-test-2026-01-01",direction="input"} 31`,
    );
    expect(m).toContain(
      `mrtr_sampling_tokens_total{upstream="everything",tool="trigger-sampling-request",principal="${ANONYMOUS}",provider="oa",model="gpt-test-2026-01-01",direction="output"} 8`,
    );
    expect(m.filter((l) => l.startsWith('mrtr_input_rounds_total{'))).toEqual([]);
  });

  it('Anthropic: the same call through the Messages API, with its headers, system, max_tokens and no temperature', async () => {
    const llm = await fake('anthropic', () => ({
      body: anthropicMessage({ content: [{ type: 'text', text: 'Paris.' }], stop: 'max_tokens' }),
    }));
    const g = await gateway(
      { an: provider(llm, { maxTokens: 40 }) },
      { everything: { ...everythingStdio, sampling: { mode: 'provider', provider: 'an' } } },
    );
    const r = await rpc(
      g.url('everything'),
      'tools/call',
      call('trigger-sampling-request', { prompt: 'Capital of France?', maxTokens: 50 }),
      { caps: {} },
    );
    expect(r.body.result.resultType).toBe('complete');
    const sampled = JSON.parse(resultText(r).replace(/^LLM sampling result: \n/, ''));
    expect(sampled).toEqual({
      role: 'assistant',
      content: { type: 'text', text: 'Paris.' },
      model: 'claude-test-5-20261101',
      stopReason: 'maxTokens',
    });
    expect(llm.requests).toHaveLength(1);
    const [sent] = llm.requests;
    expect(sent!.path).toBe('/v1/messages');
    expect(sent!.headers.authorization).toBe(`Bearer ${ANTHROPIC_KEY}`);
    expect(sent!.headers['anthropic-version']).toBe('2026-10-21');
    expect(sent!.body).toEqual({
      model: 'claude-test-5',
      // maxTokens 50 capped by the provider's maxTokens 40.
      max_tokens: 40,
      system: 'You are a helpful test server.',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Resource trigger-sampling-request context: Capital of France?' }] }],
      stream: false,
    });
  });
});

describe('fallback mode', () => {
  it('a client that declares sampling gets the input_required round; one that does not gets the provider answer', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'from the provider' }) }));
    const g = await gateway({ oa: provider(llm) }, { everything: { ...everythingStdio, sampling: { mode: 'fallback', provider: 'oa' } } });
    const url = g.url('everything');

    // Declares sampling: the round goes to the client, the provider is not asked.
    const round = await rpc(url, 'tools/call', call('trigger-sampling-request', { prompt: 'hello', maxTokens: 20 }), {
      caps: { sampling: {} },
    });
    expect(round.body.result.resultType).toBe('input_required');
    const requests = Object.values(round.body.result.inputRequests) as any[];
    expect(requests.map((q) => q.method)).toEqual(['sampling/createMessage']);
    const { client, record } = await v2Client(url, {}, { sampling: {} });
    const viaClient = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'hello', maxTokens: 20 } });
    expect(textOf(viaClient as never)).toContain('sampled text');
    expect(record.sampling).toHaveLength(1);
    expect(rounds(record)).toBeGreaterThanOrEqual(1);
    await client.close();
    expect(llm.requests).toHaveLength(0);

    // Does not declare sampling: the provider answers, no round.
    const direct = await rpc(url, 'tools/call', call('trigger-sampling-request', { prompt: 'hello', maxTokens: 20 }), { caps: {} });
    expect(direct.body.result.resultType).toBe('complete');
    expect(resultText(direct)).toContain('from the provider');
    expect(llm.requests).toHaveLength(1);
  });

  it('mode "client" (the default) keeps today\'s answer for a client without sampling: -32021, and the provider is never asked', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'never' }) }));
    const g = await gateway({ oa: provider(llm) }, { f: { ...fixtureStdio(), sampling: { provider: 'oa' } } });
    const r = await rpc(g.url('f'), 'tools/call', call('summarize', { text: 'x' }), { caps: {} });
    // The fixture's summarize samples whatever was declared; the client cannot answer.
    expect(r.status).toBe(400);
    expect(r.body.error.code).toBe(-32021);
    expect(llm.requests).toHaveLength(0);
  });

  it('a per-tool mode overrides the upstream mode (sampling.tools.NAME.mode)', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'tool-level provider' }) }));
    const g = await gateway(
      { oa: provider(llm) },
      { f: { ...fixtureStdio(), sampling: { mode: 'client', provider: 'oa', tools: { summarize: { mode: 'provider' } } } } },
    );
    // summarize: provider, even for a client that declares sampling.
    const a = await rpc(g.url('f'), 'tools/call', call('summarize', { text: 'x' }), { caps: { sampling: {} } });
    expect(a.body.result.resultType).toBe('complete');
    expect(resultText(a)).toContain('summary=tool-level provider');
    // three_rounds stays with the client: its elicitation round comes first, as before.
    const b = await rpc(g.url('f'), 'tools/call', call('three_rounds', {}), { caps: { sampling: {}, elicitation: {}, roots: {} } });
    expect(b.body.result.resultType).toBe('input_required');
    expect(llm.requests).toHaveLength(1);
  });
});

describe('sampling with tools (2025-11-25): tool_use back to the upstream, tool_result on to the provider', () => {
  const upstream = (log: FixtureLog) => ({ f: { ...fixtureStdio(log), sampling: { mode: 'provider', provider: 'p' } } });

  it('OpenAI-compatible: tool_calls become tool_use, the follow-up tool_result becomes a tool message', async () => {
    const llm = await fake('openai', (_req, n) =>
      n === 1
        ? { body: openaiCompletion({ content: null, toolCalls: [{ id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' }] }) }
        : { body: openaiCompletion({ content: 'It is sunny in Paris.' }) },
    );
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm) }, upstream(log));
    const r = await rpc(g.url('f'), 'tools/call', call('sample_with_tools', { city: 'Paris' }), { caps: {} });
    expect(r.body.result.resultType).toBe('complete');
    expect(resultText(r)).toBe('final=It is sunny in Paris. model=gpt-test-2026-01-01 stop=endTurn');

    const [first, second] = log.of('sample-result', 'sample_with_tools');
    expect(first!.result).toEqual({
      role: 'assistant',
      content: { type: 'tool_use', id: 'call_w1', name: 'get_weather', input: { city: 'Paris' } },
      model: 'gpt-test-2026-01-01',
      stopReason: 'toolUse',
    });
    expect(second!.result.content).toEqual({ type: 'text', text: 'It is sunny in Paris.' });

    expect(llm.requests).toHaveLength(2);
    const tools = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Current weather for a city',
          parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
      },
    ];
    expect(llm.requests[0]!.body).toEqual({
      model: 'gpt-test',
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      stream: false,
      max_completion_tokens: 200,
      tools,
      tool_choice: 'auto',
    });
    expect(llm.requests[1]!.body).toEqual({
      model: 'gpt-test',
      messages: [
        { role: 'user', content: 'What is the weather in Paris?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
        },
        { role: 'tool', tool_call_id: 'call_w1', content: 'Sunny, 21°C in Paris' },
      ],
      stream: false,
      max_completion_tokens: 200,
      tools,
    });
  });

  it('Anthropic: tool_use blocks come back as tool_use, the follow-up tool_result reaches the Messages API', async () => {
    const llm = await fake('anthropic', (_req, n) =>
      n === 1
        ? {
            body: anthropicMessage({
              content: [
                { type: 'text', text: 'Let me check.' },
                { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
              ],
              stop: 'tool_use',
            }),
          }
        : { body: anthropicMessage({ content: [{ type: 'text', text: 'Sunny in Paris.' }] }) },
    );
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm) }, upstream(log));
    const r = await rpc(g.url('f'), 'tools/call', call('sample_with_tools', { city: 'Paris' }), { caps: {} });
    expect(resultText(r)).toBe('final=Sunny in Paris. model=claude-test-5-20261101 stop=endTurn');

    const [first] = log.of('sample-result', 'sample_with_tools');
    expect(first!.result).toEqual({
      role: 'assistant',
      content: [
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
      ],
      model: 'claude-test-5-20261101',
      stopReason: 'toolUse',
    });
    expect(llm.requests).toHaveLength(2);
    const tools = [
      {
        name: 'get_weather',
        description: 'Current weather for a city',
        input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    ];
    expect(llm.requests[0]!.body).toEqual({
      model: 'claude-test-5',
      max_tokens: 200,
      messages: [{ role: 'user', content: [{ type: 'text', text: 'What is the weather in Paris?' }] }],
      stream: false,
      tools,
      tool_choice: { type: 'auto' },
    });
    expect(llm.requests[1]!.body.messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'What is the weather in Paris?' }] },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Let me check.' },
          { type: 'tool_use', id: 'toolu_01', name: 'get_weather', input: { city: 'Paris' } },
        ],
      },
      {
        role: 'user',
        content: [{ type: 'tool_result', tool_use_id: 'toolu_01', content: [{ type: 'text', text: 'Sunny, 21°C in Paris' }] }],
      },
    ]);
    expect(llm.requests[1]!.body.tools).toEqual(tools);
  });
});

describe('bounds: budgets, retries, errors and timeouts reach the upstream as clear JSON-RPC errors, within their limits', () => {
  /** The fixture over stdio with provider mode and `sampling` overrides. */
  const upstream = (log: FixtureLog, sampling: Record<string, unknown> = {}) => ({
    f: { ...fixtureStdio(log), sampling: { mode: 'provider', provider: 'p', ...sampling } },
  });
  /** The JSON-RPC answers the fixture received for its own requests (here: its sampling requests). */
  const answers = (log: FixtureLog) => log.of('response');
  const summarize = (g: TestGateway, caps: Record<string, unknown> = {}) =>
    rpc(g.url('f'), 'tools/call', call('summarize', { text: 'a confidential paragraph' }), { caps });

  it('budget exhausted: the second call is refused before the provider is asked, the upstream gets -32603 with data.reason "budget", and it is counted', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'short', usage: { prompt: 100, completion: 20 } }) }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm) }, upstream(log, { budget: { tokensPerPrincipal: 150, windowMs: 60_000 } }));
    const first = await summarize(g);
    expect(resultText(first)).toContain('summary=short');
    const second = await summarize(g);
    expect(second.body.result.isError).toBe(true);
    expect(resultText(second)).toMatch(
      /Sampling token budget of this principal on this upstream exhausted: 120 of 150 tokens spent in the last 60000 ms/,
    );
    expect(llm.requests).toHaveLength(1);
    const refused = answers(log).at(-1)!;
    expect(refused.error).toMatchObject({ code: -32603, data: { reason: 'budget', scope: 'principal', limit: 150, windowMs: 60_000 } });
    expect(refused.error.data.retryAfterMs).toBeGreaterThan(0);
    expect(refused.error.data.retryAfterMs).toBeLessThanOrEqual(60_000);
    const m = await metrics(g);
    expect(m).toContain('mrtr_sampling_budget_exhausted_total{upstream="f",scope="principal"} 1');
    expect(m).toContain('mrtr_sampling_requests_total{upstream="f",provider="p",outcome="budget"} 1');
  });

  it('an upstream-wide budget counts every principal together', async () => {
    const llm = await fake('anthropic', () => ({
      body: anthropicMessage({ content: [{ type: 'text', text: 'ok' }], usage: { input: 60, output: 10 } }),
    }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm) }, upstream(log, { budget: { tokens: 150 } }));
    expect(resultText(await summarize(g))).toContain('summary=ok');
    // 70 spent + 100 reserved (maxTokens) > 150.
    expect(resultText(await summarize(g, { elicitation: {} }))).toMatch(/budget of this upstream exhausted/);
    expect(answers(log).at(-1)!.error.data).toMatchObject({ reason: 'budget', scope: 'upstream', limit: 150 });
    expect(llm.requests).toHaveLength(1);
  });

  it('a provider that reports no usage is charged an estimate (input from the request text, output as maxTokens), so the budget still holds', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'short', usage: null }) }));
    const log = new FixtureLog();
    const mem = memoryLogger('debug');
    const g = await gateway(
      { p: provider(llm) },
      upstream(log, { maxTokens: 30, budget: { tokensPerPrincipal: 100, windowMs: 60_000 } }),
      mem.log,
    );
    const outcomes: string[] = [];
    for (let i = 0; i < 8; i++) outcomes.push(resultText(await summarize(g)).includes('summary=short') ? 'answered' : 'refused');
    // Each answer is charged 30 (maxTokens) plus the estimate of its input (the summarize request,
    // 96 characters of JSON: 24 tokens): 54, 108, then no room for another 30.
    expect(outcomes).toEqual(['answered', 'answered', ...Array(6).fill('refused')]);
    expect(llm.requests).toHaveLength(2);
    expect(answers(log).at(-1)!.error).toMatchObject({ code: -32603, data: { reason: 'budget', scope: 'principal', limit: 100 } });
    expect(resultText(await summarize(g))).toMatch(/108 of 100 tokens spent in the last 60000 ms; this request needs room for 30/);
    const lines = mem.lines().filter((l) => l.msg === 'sampling' && l.outcome === 'complete');
    expect(lines).toEqual([
      expect.objectContaining({ inputTokens: 24, outputTokens: 30, usageEstimated: true }),
      expect.objectContaining({ inputTokens: 24, outputTokens: 30, usageEstimated: true }),
    ]);
    // Nothing reported, nothing counted as reported.
    expect((await metrics(g)).filter((l) => l.startsWith('mrtr_sampling_tokens_total'))).toEqual([]);
  });

  it('429 with Retry-After, then success: retried after the wait, the upstream gets the answer', async () => {
    const llm = await fake('openai', (_r, n) =>
      n === 1
        ? { status: 429, headers: { 'retry-after': '1' }, body: errorBody('openai', 429, 'requests', 'Rate limit reached') }
        : { body: openaiCompletion({ content: 'after the wait' }) },
    );
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { timeoutMs: 10_000 }) }, upstream(log));
    const r = await summarize(g);
    expect(resultText(r)).toContain('summary=after the wait');
    expect(llm.requests).toHaveLength(2);
    const waited = llm.requests[1]!.at - llm.requests[0]!.at;
    expect(waited).toBeGreaterThanOrEqual(950);
    expect(waited).toBeLessThan(scaled(5000));
    expect(await metrics(g)).toContain('mrtr_sampling_retries_total{provider="p",status="429"} 1');
  });

  it('429 asking for a wait longer than the time left: no retry, the upstream gets provider-rate-limited with retryAfterMs at once', async () => {
    const llm = await fake('anthropic', () => ({
      status: 429,
      headers: { 'retry-after': '30' },
      body: errorBody('anthropic', 429, 'rate_limit_error', 'Number of request tokens has exceeded your per-minute rate limit'),
    }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { timeoutMs: 5000 }) }, upstream(log));
    const r = await summarize(g);
    expect(answers(log).at(-1)!.at - llm.requests[0]!.at).toBeLessThan(scaled(2000));
    expect(resultText(r)).toMatch(
      /rate limiting \(HTTP 429\): Number of request tokens has exceeded your per-minute rate limit; no time left within timeoutMs=5000 ms to retry after 30000 ms/,
    );
    expect(answers(log).at(-1)!.error).toMatchObject({
      code: -32603,
      data: { reason: 'provider-rate-limited', provider: 'p', status: 429, retryAfterMs: 30_000, attempts: 1 },
    });
    expect(llm.requests).toHaveLength(1);
  });

  it('500 every time: maxRetries retries with backoff, then provider-unavailable, well within timeoutMs', async () => {
    const llm = await fake('openai', () => ({ status: 500, body: errorBody('openai', 500, 'server_error', 'The server had an error') }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { timeoutMs: 10_000, maxRetries: 2 }) }, upstream(log));
    const r = await summarize(g);
    expect(llm.requests).toHaveLength(3);
    // Backoff 0.5 s then 1 s (with up to 25 % jitter off).
    expect(llm.requests[2]!.at - llm.requests[0]!.at).toBeGreaterThanOrEqual(1100);
    expect(answers(log).at(-1)!.at - llm.requests[0]!.at).toBeLessThan(scaled(5000));
    expect(resultText(r)).toMatch(/provider 'p' failed \(HTTP 500\): The server had an error; gave up after 3 attempts/);
    expect(answers(log).at(-1)!.error).toMatchObject({ code: -32603, data: { reason: 'provider-unavailable', status: 500, attempts: 3 } });
    expect(await metrics(g)).toContain('mrtr_sampling_retries_total{provider="p",status="500"} 2');
  });

  it('a provider silent past timeoutMs: the upstream gets "timeout" at the limit, never a hang', async () => {
    const llm = await fake('anthropic', () => 'hang');
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { timeoutMs: 1500 }) }, upstream(log));
    const r = await summarize(g);
    // From the provider receiving the request to the upstream receiving the error.
    const took = answers(log).at(-1)!.at - llm.requests[0]!.at;
    // The clock starts when the request reaches the gateway, a little before the provider sees it.
    expect(took).toBeGreaterThanOrEqual(1000);
    expect(took).toBeLessThan(scaled(3500));
    expect(resultText(r)).toContain("Provider 'p' gave no answer within timeoutMs=1500 ms");
    expect(answers(log).at(-1)!.error).toMatchObject({ code: -32603, data: { reason: 'timeout', provider: 'p' } });
    expect(llm.requests).toHaveLength(1);
  });

  it('401: not retried, the error names the credentials problem, and neither it nor any log line carries the key or the content', async () => {
    const llm = await fake('openai', () => ({
      status: 401,
      body: errorBody('openai', 401, 'invalid_request_error', `Incorrect API key provided: ${OPENAI_KEY}.`),
    }));
    const log = new FixtureLog();
    const mem = memoryLogger('debug');
    const g = await gateway({ p: provider(llm) }, upstream(log), mem.log);
    const r = await summarize(g);
    expect(llm.requests).toHaveLength(1);
    expect(resultText(r)).toContain("provider 'p' refused the gateway's credentials (HTTP 401); check sampling.providers.p.apiKey");
    const upstreamSaw = JSON.stringify(answers(log));
    expect(upstreamSaw).toContain('provider-auth');
    expect(upstreamSaw).not.toContain(OPENAI_KEY);
    expect(resultText(r)).not.toContain(OPENAI_KEY);
    const lines = mem.lines();
    const sampling = lines.filter((l) => l.msg === 'sampling');
    expect(sampling).toHaveLength(1);
    expect(sampling[0]).toMatchObject({
      upstream: 'f',
      tool: 'summarize',
      principal: ANONYMOUS,
      provider: 'p',
      outcome: 'provider-auth',
      status: 401,
      attempts: 1,
    });
    const all = JSON.stringify(lines);
    expect(all).not.toContain(OPENAI_KEY);
    expect(all).not.toContain('confidential paragraph');
  });

  it('a provider error quoting the key in base64, base64url or URL-encoded form reaches neither the upstream nor the sampling log line', async () => {
    const forms = [Buffer.from(ODD_KEY).toString('base64'), Buffer.from(ODD_KEY).toString('base64url'), encodeURIComponent(ODD_KEY)];
    const llm = await fake('openai', () => ({
      status: 400,
      body: errorBody('openai', 400, 'invalid_request_error', `Bad header: ${forms[0]} / ${forms[1]} / ${forms[2]}`),
    }));
    const log = new FixtureLog();
    const mem = memoryLogger('debug');
    const g = await gateway({ p: provider(llm, { apiKey: '${TEST_SAMPLING_ODD_KEY}' }) }, upstream(log), mem.log);
    const r = await summarize(g);
    expect(llm.requests[0]!.headers.authorization).toBe(`Bearer ${ODD_KEY}`);
    const refused = answers(log).at(-1)!.error;
    expect(refused).toMatchObject({ code: -32603, data: { reason: 'provider-rejected', status: 400 } });
    expect(refused.message).toBe("provider 'p' rejected the request (HTTP 400): Bad header: [redacted] / [redacted] / [redacted]");
    const [line] = mem.lines().filter((l) => l.msg === 'sampling');
    expect(line).toMatchObject({ outcome: 'provider-rejected', err: refused.message });
    const seen = JSON.stringify([answers(log), resultText(r), mem.lines()]);
    for (const form of [ODD_KEY, ...forms]) expect(seen).not.toContain(form);
  });

  const MiB = 1024 * 1024;
  /** A promise of a streamed reply's end, and the `onEnd` that settles it. */
  const streamEnd = () => {
    let onEnd!: (bytes: number, complete: boolean) => void;
    const ended = new Promise<{ bytes: number; complete: boolean }>(
      (resolve) => (onEnd = (bytes, complete) => resolve({ bytes, complete })),
    );
    return { ended, onEnd };
  };

  it('a 2 GiB answer streamed without content-length is cut off at maxResponseBytes (default 4 MiB): provider-protocol, not retried, the provider stops writing, and RSS stays bounded', async () => {
    const { ended, onEnd } = streamEnd();
    const llm = await fake('openai', () => ({ stream: hugeAnswer('openai', 2 * 1024 * MiB), onEnd }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { timeoutMs: 60_000 }) }, upstream(log));
    const before = process.memoryUsage.rss();
    let peak = before;
    const watch = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 5);
    try {
      const r = await summarize(g);
      const end = await ended;
      peak = Math.max(peak, process.memoryUsage.rss());
      expect(end.complete).toBe(false);
      // The gateway dropped the connection after 4 MiB; what else was written sat in socket buffers.
      expect(end.bytes).toBeLessThan(64 * MiB);
      expect(peak - before).toBeLessThan(256 * MiB);
      const refused = answers(log).at(-1)!.error;
      expect(refused).toEqual({
        code: -32603,
        message: "provider 'p' answered more than maxResponseBytes=4194304 bytes; it was cut off and dropped",
        data: { reason: 'provider-protocol', provider: 'p', attempts: 1 },
      });
      expect(resultText(r)).toContain('maxResponseBytes=4194304');
      expect(llm.requests).toHaveLength(1);
    } finally {
      clearInterval(watch);
    }
  });

  it('Anthropic: a content-length over maxResponseBytes is refused before the body is read', async () => {
    const text = 1024 * MiB;
    const length = [...hugeAnswer('anthropic', 0)].reduce((n, c) => n + c.byteLength, text);
    const { ended, onEnd } = streamEnd();
    const llm = await fake('anthropic', () => ({
      headers: { 'content-length': String(length) },
      stream: hugeAnswer('anthropic', text),
      onEnd,
    }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { maxResponseBytes: 64 * 1024 }) }, upstream(log));
    await summarize(g);
    const end = await ended;
    expect(end.complete).toBe(false);
    expect(end.bytes).toBeLessThan(64 * MiB);
    expect(answers(log).at(-1)!.error).toEqual({
      code: -32603,
      message: `provider 'p' answered more than maxResponseBytes=65536 bytes (content-length ${length}); it was cut off and dropped`,
      data: { reason: 'provider-protocol', provider: 'p', attempts: 1 },
    });
    expect(llm.requests).toHaveLength(1);
  });

  it.each([
    ['HTTP 500 streamed without content-length', 500, false],
    ['HTTP 400 with a content-length', 400, true],
  ])('an error answer over maxResponseBytes (%s) is cut off too: provider-protocol, not retried', async (_what, status, declared) => {
    const text = 8 * MiB;
    const length = [...hugeAnswer('openai', 0)].reduce((n, c) => n + c.byteLength, text);
    const { ended, onEnd } = streamEnd();
    const llm = await fake('openai', () => ({
      status,
      ...(declared ? { headers: { 'content-length': String(length) } } : {}),
      stream: hugeAnswer('openai', text),
      onEnd,
    }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { maxResponseBytes: MiB, maxRetries: 2 }) }, upstream(log));
    await summarize(g);
    expect((await ended).complete).toBe(false);
    const refused = answers(log).at(-1)!.error;
    expect(refused).toEqual({
      code: -32603,
      message: `provider 'p' answered (HTTP ${status}) more than maxResponseBytes=1048576 bytes${declared ? ` (content-length ${length})` : ''}; it was cut off and dropped`,
      data: { reason: 'provider-protocol', provider: 'p', attempts: 1 },
    });
    expect(llm.requests).toHaveLength(1);
  });

  it('the result relayed upstream is held to maxResponseBytes too (invalid UTF-8 in the body grows threefold as U+FFFD)', async () => {
    const llm = await fake('openai', () => ({ stream: hugeAnswer('openai', 2000, 0xff) }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { maxResponseBytes: 4096 }) }, upstream(log));
    await summarize(g);
    const refused = answers(log).at(-1)!.error;
    expect(refused).toMatchObject({ code: -32603, data: { reason: 'provider-protocol', provider: 'p', attempts: 1 } });
    expect(refused.message).toMatch(/^provider 'p' answered a result of \d+ bytes, more than maxResponseBytes=4096 bytes; it was dropped$/);
    expect(log.of('sample-result', 'summarize')).toEqual([]);
  });

  it('includeContext "thisServer": the upstream gets -32602 invalid-request (the gateway declared no sampling.context), the provider and the client are never asked', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'never' }) }));
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm) }, upstream(log));
    // The client declares sampling with context; in provider mode the upstream is told sampling without it.
    const r = await rpc(g.url('f'), 'tools/call', call('summarize', { text: 'x', includeContext: 'thisServer' }), {
      caps: { sampling: { context: {} } },
    });
    expect(r.status).toBe(200);
    expect(r.body.result.resultType).toBe('complete');
    expect(r.body.result.inputRequests).toBeUndefined();
    expect(r.body.result.isError).toBe(true);
    expect(log.of('initialized').at(-1)!.capabilities.sampling).toEqual({ tools: {} });
    expect(answers(log).at(-1)!.error).toEqual({
      code: -32602,
      message:
        'includeContext "thisServer" is not served when the gateway answers sampling: it does not declare sampling.context (MCP 2025-11-25); omit includeContext or send "none"',
      data: { reason: 'invalid-request' },
    });
    expect(llm.requests).toHaveLength(0);
    expect(await metrics(g)).toContain('mrtr_sampling_requests_total{upstream="f",provider="p",outcome="invalid-request"} 1');
    // includeContext "none" is served.
    const none = await rpc(g.url('f'), 'tools/call', call('summarize', { text: 'x', includeContext: 'none' }), { caps: {} });
    expect(resultText(none)).toContain('summary=never');
    expect(llm.requests).toHaveLength(1);
  });

  it('maxConcurrent 1, maxQueued 0: while the provider holds the first request, a second is refused at once with busy; the first then completes', async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    const llm = await fake('openai', (_r, n) =>
      n === 1
        ? held.then(() => ({ body: openaiCompletion({ content: 'first answer' }) }))
        : { body: openaiCompletion({ content: 'second answer' }) },
    );
    const log = new FixtureLog();
    const g = await gateway({ p: provider(llm, { maxConcurrent: 1, maxQueued: 0, timeoutMs: 30_000 }) }, upstream(log));
    const first = summarize(g);
    expect(await eventually(() => llm.requests.length === 1, 15_000)).toBe(true);
    expect(await metrics(g)).toContain('mrtr_sampling_in_flight{provider="p"} 1');
    const started = Date.now();
    const second = await summarize(g);
    // Refused without waiting for the held request (timeoutMs is 30 s).
    expect(Date.now() - started).toBeLessThan(scaled(10_000));
    expect(second.body.result.isError).toBe(true);
    expect(resultText(second)).toContain('The provider has 1 requests in flight and 0 waiting (maxConcurrent, maxQueued)');
    expect(answers(log).at(-1)!.error).toEqual({
      code: -32603,
      message: 'The provider has 1 requests in flight and 0 waiting (maxConcurrent, maxQueued)',
      data: { reason: 'busy', provider: 'p' },
    });
    expect(llm.requests).toHaveLength(1);
    release();
    expect(resultText(await first)).toContain('summary=first answer');
    expect(llm.requests).toHaveLength(1);
    const m = await metrics(g);
    expect(m).toContain('mrtr_sampling_requests_total{upstream="f",provider="p",outcome="busy"} 1');
    expect(m).toContain('mrtr_sampling_requests_total{upstream="f",provider="p",outcome="complete"} 1');
    expect(m).toContain('mrtr_sampling_in_flight{provider="p"} 0');
  });

  it('a successful answer is logged with tokens and model, and without the key or any content', async () => {
    const llm = await fake('openai', () => ({
      body: openaiCompletion({ content: 'a secret summary', usage: { prompt: 40, completion: 5 } }),
    }));
    const mem = memoryLogger('debug');
    const g = await gateway({ p: provider(llm) }, upstream(new FixtureLog()), mem.log);
    expect(resultText(await summarize(g))).toContain('summary=a secret summary');
    const lines = mem.lines();
    expect(lines.filter((l) => l.msg === 'sampling')).toEqual([
      expect.objectContaining({
        upstream: 'f',
        tool: 'summarize',
        principal: ANONYMOUS,
        provider: 'p',
        model: 'gpt-test-2026-01-01',
        modelAlias: 'main',
        inputTokens: 40,
        outputTokens: 5,
        maxTokens: 100,
        outcome: 'complete',
        stopReason: 'endTurn',
        attempts: 1,
      }),
    ]);
    const all = JSON.stringify(lines);
    expect(all).not.toContain(OPENAI_KEY);
    expect(all).not.toContain('confidential paragraph');
    expect(all).not.toContain('a secret summary');
  });
});

describe('legacy (v1 SDK) clients through the pass-through relay', () => {
  async function v1(url: string, declareSampling: boolean) {
    const asked: any[] = [];
    const client = new Client({ name: 'legacy-sampling', version: '1.0.0' }, { capabilities: declareSampling ? { sampling: {} } : {} });
    if (declareSampling) {
      client.setRequestHandler(CreateMessageRequestSchema, async (r) => {
        asked.push(r.params);
        return { role: 'assistant', model: 'client-model', content: { type: 'text', text: 'answered by the client' } };
      });
    }
    const transport = new StreamableHTTPClientTransport(new URL(url));
    await client.connect(transport);
    return { client, transport, asked };
  }

  it('provider mode: the tool result comes back without the client being asked, whether it declared sampling or not', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'relay answered by the provider' }) }));
    const g = await gateway({ oa: provider(llm) }, { everything: { ...everythingStdio, sampling: { mode: 'provider', provider: 'oa' } } });
    for (const declare of [true, false]) {
      const { client, transport, asked } = await v1(g.url('everything'), declare);
      const names = (await client.listTools()).tools.map((t) => t.name);
      expect(names).toContain('trigger-sampling-request');
      const r = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'hi', maxTokens: 20 } });
      expect(textOf(r as never)).toContain('relay answered by the provider');
      expect(asked).toHaveLength(0);
      await transport.terminateSession();
      await client.close();
    }
    expect(llm.requests).toHaveLength(2);
    expect(llm.requests[0]!.body.messages).toEqual([
      { role: 'system', content: 'You are a helpful test server.' },
      { role: 'user', content: 'Resource trigger-sampling-request context: hi' },
    ]);
    expect(await metrics(g)).toContain(
      `mrtr_sampling_tokens_total{upstream="everything",tool="trigger-sampling-request",principal="${ANONYMOUS}",provider="oa",model="gpt-test-2026-01-01",direction="output"} 14`,
    );
  });

  it('fallback mode: a client that declared sampling is asked as before; the provider is not', async () => {
    const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'not used' }) }));
    const g = await gateway({ oa: provider(llm) }, { everything: { ...everythingStdio, sampling: { mode: 'fallback', provider: 'oa' } } });
    const { client, transport, asked } = await v1(g.url('everything'), true);
    const r = await client.callTool({ name: 'trigger-sampling-request', arguments: { prompt: 'hi', maxTokens: 20 } });
    expect(textOf(r as never)).toContain('answered by the client');
    expect(asked).toHaveLength(1);
    expect(llm.requests).toHaveLength(0);
    await transport.terminateSession();
    await client.close();
  });
});

describe('what leaves the gateway', () => {
  it('an OpenAI-compatible provider without apiKey gets no Authorization header, and OPENAI_* variables are not read', async () => {
    const saved = { ...process.env };
    Object.assign(process.env, {
      OPENAI_API_KEY: 'sk-from-env-must-not-leak',
      OPENAI_ORG_ID: 'org-from-env',
      OPENAI_PROJECT_ID: 'proj-from-env',
      OPENAI_BASE_URL: 'http://127.0.0.1:9/v1',
    });
    try {
      const llm = await fake('openai', () => ({ body: openaiCompletion({ content: 'ok' }) }));
      const cfg = {
        kind: 'openai',
        baseUrl: llm.baseUrl,
        models: { m: { model: 'local-model', hints: [], image: true, audio: false } },
        defaultModel: 'm',
        maxTokens: 10,
        timeoutMs: 5000,
        maxConcurrent: 1,
        maxQueued: 0,
        maxRetries: 0,
      };
      const adapter = createProvider('local', cfg as never);
      const params = parseSamplingParams({ messages: [{ role: 'user', content: { type: 'text', text: 'hi' } }], maxTokens: 5 });
      await adapter.send(adapter.build(params, { alias: 'm', model: cfg.models.m, by: 'default' } as never, 5), {
        signal: new AbortController().signal,
        timeoutMs: 5000,
      });
      expect(llm.requests).toHaveLength(1);
      const headers = llm.requests[0]!.headers;
      expect(headers.authorization).toBeUndefined();
      expect(headers['openai-organization']).toBeUndefined();
      expect(headers['openai-project']).toBeUndefined();
      expect(JSON.stringify(headers)).not.toContain('from-env');
    } finally {
      for (const k of ['OPENAI_API_KEY', 'OPENAI_ORG_ID', 'OPENAI_PROJECT_ID', 'OPENAI_BASE_URL']) if (!(k in saved)) delete process.env[k];
    }
  });
});
