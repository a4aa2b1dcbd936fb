/**
 * Sampling through a provider, piece by piece: model choice, params validation, the mapping to and
 * from both provider APIs, budgets and the concurrency cap, provider error classification, modes
 * and capabilities, and the config rules.
 */
import type { MessageCreateParamsNonStreaming } from '@anthropic-ai/sdk/resources/messages';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../../src/config/load.js';
import { mirrorCapabilities } from '../../src/router/upstream.js';
import { Slots, TokenBudgets } from '../../src/sampling/budget.js';
import { SamplingError } from '../../src/sampling/errors.js';
import {
  anthropicStopReason,
  estimateInputTokens,
  fromAnthropicResponse,
  fromOpenAIResponse,
  parseSamplingParams,
  selectModel,
  toAnthropicRequest,
  toOpenAIRequest,
  type ModelChoice,
} from '../../src/sampling/mapping.js';
import { samplingModeFor, samplingRoute, upstreamSamplingCapability } from '../../src/sampling/mode.js';
import { classifyFailure, createProvider, retryAfterMs, scrub } from '../../src/sampling/providers.js';

const model = (m: Record<string, unknown> = {}) => ({ model: 'm-1', hints: [], image: true, audio: false, ...m }) as ModelChoice['model'];
const choice = (m: Record<string, unknown> = {}): ModelChoice => ({ alias: 'main', model: model(m), by: 'default' });
const params = (p: Record<string, unknown>) => parseSamplingParams({ maxTokens: 100, ...p });
const user = (content: unknown) => ({ role: 'user', content });
const text = (t: string) => ({ type: 'text', text: t });

/** The SamplingError `fn` throws. */
function failure(fn: () => unknown): SamplingError {
  try {
    fn();
  } catch (e) {
    if (e instanceof SamplingError) return e;
    throw e;
  }
  throw new Error('did not throw');
}

describe('selectModel (modelPreferences)', () => {
  const provider = {
    defaultModel: 'small',
    models: {
      small: model({ model: 'gpt-4o-mini', hints: ['fast-one'], cost: 0.1, speed: 0.9, intelligence: 0.4 }),
      large: model({ model: 'gpt-4o', cost: 0.8, speed: 0.4, intelligence: 0.9 }),
      local: model({ model: 'llama3.1:8b' }),
    },
  };
  it('hints in order: an exact name first, then a substring of an alias, model id or configured hint', () => {
    expect(selectModel(provider, { hints: [{ name: 'claude-3-sonnet' }, { name: 'gpt-4o' }] })).toMatchObject({
      alias: 'large',
      by: 'hint',
    });
    expect(selectModel(provider, { hints: [{ name: 'LLAMA' }] })).toMatchObject({ alias: 'local', by: 'hint' });
    expect(selectModel(provider, { hints: [{ name: 'fast' }] })).toMatchObject({ alias: 'small', by: 'hint' });
    expect(selectModel(provider, { hints: [{ name: 'gpt' }] })).toMatchObject({ alias: 'small', by: 'hint' });
    expect(selectModel(provider, { hints: [{}, { name: 'nothing-like-it' }] })).toMatchObject({ alias: 'small', by: 'default' });
  });
  it('priorities choose among models that declare the figures; no preference → the default', () => {
    expect(selectModel(provider, { intelligencePriority: 1 })).toMatchObject({ alias: 'large', by: 'priorities' });
    expect(selectModel(provider, { costPriority: 1 })).toMatchObject({ alias: 'small', by: 'priorities' });
    expect(selectModel(provider, { speedPriority: 0.2, intelligencePriority: 0.9 })).toMatchObject({ alias: 'large' });
    expect(selectModel(provider, undefined)).toMatchObject({ alias: 'small', by: 'default' });
    expect(selectModel({ defaultModel: 'local', models: { local: provider.models.local } }, { intelligencePriority: 1 })).toMatchObject({
      alias: 'local',
      by: 'default',
    });
  });
  it('a tie keeps the default model', () => {
    const tied = { defaultModel: 'b', models: { a: model({ intelligence: 0.5 }), b: model({ intelligence: 0.5 }) } };
    expect(selectModel(tied, { intelligencePriority: 1 }).alias).toBe('b');
  });
});

describe('parseSamplingParams', () => {
  it('refuses includeContext other than "none" with -32602 (the gateway never declares sampling.context)', () => {
    const err = failure(() => params({ messages: [user(text('hi'))], includeContext: 'thisServer' }));
    expect(err.code).toBe(-32602);
    expect(err.data.reason).toBe('invalid-request');
    expect(err.message).toMatch(/includeContext "thisServer"/);
    expect(params({ messages: [user(text('hi'))], includeContext: 'none' }).messages).toHaveLength(1);
  });
  it('refuses malformed params naming the field, and maxTokens below 1', () => {
    expect(failure(() => parseSamplingParams({ maxTokens: 10 })).message).toMatch(/at messages/);
    expect(failure(() => params({ messages: [user(text('hi'))], maxTokens: 0 })).message).toMatch(/maxTokens must be a positive integer/);
  });
});

describe('toOpenAIRequest', () => {
  it('maps system, text, image, audio, temperature, stop sequences and maxTokens', () => {
    const p = params({
      systemPrompt: 'Be brief.',
      temperature: 0.2,
      stopSequences: ['###'],
      messages: [
        user([
          text('Look:'),
          { type: 'image', data: 'aW1n', mimeType: 'image/png' },
          { type: 'audio', data: 'd2F2', mimeType: 'audio/wav' },
        ]),
        { role: 'assistant', content: [text('One'), text('Two')] },
      ],
    });
    expect(toOpenAIRequest(p, choice({ audio: true }), 64)).toEqual({
      model: 'm-1',
      stream: false,
      max_completion_tokens: 64,
      temperature: 0.2,
      stop: ['###'],
      messages: [
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look:' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,aW1n' } },
            { type: 'input_audio', input_audio: { data: 'd2F2', format: 'wav' } },
          ],
        },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'One' },
            { type: 'text', text: 'Two' },
          ],
        },
      ],
    });
    expect(toOpenAIRequest(params({ messages: [user(text('x'))] }), choice(), 5, 'max_tokens')).toMatchObject({ max_tokens: 5 });
    expect(toOpenAIRequest(params({ messages: [user(text('x'))] }), choice(), 5, 'max_tokens')).not.toHaveProperty('max_completion_tokens');
  });
  it('tool choice modes, and tool results from structuredContent', () => {
    const tools = [{ name: 't', inputSchema: { type: 'object' } }];
    const p = (mode: string) => params({ messages: [user(text('x'))], tools, toolChoice: { mode } });
    expect(toOpenAIRequest(p('required'), choice(), 5).tool_choice).toBe('required');
    expect(toOpenAIRequest(p('none'), choice(), 5).tool_choice).toBe('none');
    const withResult = params({
      messages: [
        { role: 'assistant', content: { type: 'tool_use', id: 'c1', name: 't', input: { a: 1 } } },
        user({ type: 'tool_result', toolUseId: 'c1', content: [], structuredContent: { temp: 21 } }),
      ],
      tools,
    });
    expect(toOpenAIRequest(withResult, choice(), 5).messages).toEqual([
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 't', arguments: '{"a":1}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: '{"temp":21}' },
    ]);
  });
  it('refuses what Chat Completions cannot take, with -32602 unsupported-content', () => {
    const audio = { type: 'audio', data: 'eA==', mimeType: 'audio/wav' };
    const e1 = failure(() => toOpenAIRequest(params({ messages: [user(audio)] }), choice(), 5));
    expect([e1.code, e1.data.reason]).toEqual([-32602, 'unsupported-content']);
    expect(e1.message).toMatch(/audio content cannot be sent to the model 'main'/);
    expect(
      failure(() => toOpenAIRequest(params({ messages: [user({ ...audio, mimeType: 'audio/ogg' })] }), choice({ audio: true }), 5)).message,
    ).toMatch(/audio\/ogg/);
    expect(
      failure(() =>
        toOpenAIRequest(
          params({ messages: [{ role: 'assistant', content: { type: 'image', data: 'eA==', mimeType: 'image/png' } }] }),
          choice(),
          5,
        ),
      ).message,
    ).toMatch(/image content in an assistant message/);
    expect(
      failure(() =>
        toOpenAIRequest(params({ messages: [user({ type: 'image', data: 'eA==', mimeType: 'image/png' })] }), choice({ image: false }), 5),
      ).data.reason,
    ).toBe('unsupported-content');
    const imageResult = user({ type: 'tool_result', toolUseId: 'c1', content: [{ type: 'image', data: 'eA==', mimeType: 'image/png' }] });
    expect(failure(() => toOpenAIRequest(params({ messages: [imageResult] }), choice(), 5)).message).toMatch(
      /tool_result with image content/,
    );
    expect(
      failure(() => toOpenAIRequest(params({ messages: [user({ type: 'tool_use', id: 'c', name: 't', input: {} })] }), choice(), 5)).data
        .reason,
    ).toBe('invalid-request');
  });
});

describe('toAnthropicRequest', () => {
  it('maps system, images, tool results (image, isError) and tool choice; temperature is not sent', () => {
    const p = params({
      systemPrompt: 'Be brief.',
      temperature: 0.9,
      stopSequences: ['END'],
      tools: [{ name: 't', description: 'd', inputSchema: { type: 'object', properties: {} } }],
      toolChoice: { mode: 'required' },
      messages: [
        user([text('Look:'), { type: 'image', data: 'aW1n', mimeType: 'image/jpeg' }]),
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 't', input: { q: 1 } }] },
        user({
          type: 'tool_result',
          toolUseId: 'toolu_1',
          isError: true,
          content: [text('failed'), { type: 'image', data: 'cG5n', mimeType: 'image/png' }],
        }),
      ],
    });
    expect(toAnthropicRequest(p, choice(), 64)).toEqual({
      model: 'm-1',
      max_tokens: 64,
      stream: false,
      system: 'Be brief.',
      stop_sequences: ['END'],
      tools: [{ name: 't', description: 'd', input_schema: { type: 'object', properties: {} } }],
      tool_choice: { type: 'any' },
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look:' },
            { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: 'aW1n' } },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 't', input: { q: 1 } }] },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 'toolu_1',
              is_error: true,
              content: [
                { type: 'text', text: 'failed' },
                { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'cG5n' } },
              ],
            },
          ],
        },
      ],
    });
    const none = params({
      messages: [user(text('x'))],
      tools: [{ name: 't', inputSchema: { type: 'object' } }],
      toolChoice: { mode: 'none' },
    });
    expect(toAnthropicRequest(none, choice(), 5).tool_choice).toEqual({ type: 'none' });
  });
  it("the SDK's Messages params (API version 2026-10-21) have no temperature, top_p or top_k (checked by tsc)", () => {
    const body: MessageCreateParamsNonStreaming = toAnthropicRequest(
      params({ messages: [user(text('x'))], temperature: 0.3 }),
      choice(),
      5,
    );
    expect(Object.keys(body).sort()).toEqual(['max_tokens', 'messages', 'model', 'stream']);
    // @ts-expect-error the field does not exist in this API version: a request carrying it gets a 400
    const withTemperature: MessageCreateParamsNonStreaming = { ...body, temperature: 0.3 };
    // @ts-expect-error likewise
    const withTopP: MessageCreateParamsNonStreaming = { ...body, top_p: 0.9 };
    // @ts-expect-error likewise
    const withTopK: MessageCreateParamsNonStreaming = { ...body, top_k: 5 };
    expect([withTemperature, withTopP, withTopK].map((b) => Object.keys(b).length)).toEqual([5, 5, 5]);
  });
  it('refuses audio and image types the Messages API does not take', () => {
    const e = failure(() =>
      toAnthropicRequest(params({ messages: [user({ type: 'audio', data: 'eA==', mimeType: 'audio/wav' })] }), choice({ audio: true }), 5),
    );
    expect([e.code, e.data.reason, e.message]).toEqual([
      -32602,
      'unsupported-content',
      'audio content cannot be sent to the Anthropic Messages API',
    ]);
    expect(
      failure(() => toAnthropicRequest(params({ messages: [user({ type: 'image', data: 'eA==', mimeType: 'image/bmp' })] }), choice(), 5))
        .message,
    ).toMatch(/image\/bmp/);
  });
});

describe('answers mapped back to CreateMessageResult', () => {
  const plain = params({ messages: [user(text('x'))], stopSequences: ['###'] });
  const withTools = params({ messages: [user(text('x'))], tools: [{ name: 't', inputSchema: { type: 'object' } }] });
  const completion = (message: Record<string, unknown>, finish: string | null, extra: Record<string, unknown> = {}) =>
    ({
      id: 'c',
      object: 'chat.completion',
      created: 0,
      model: 'reported-model',
      choices: [{ index: 0, message: { role: 'assistant', refusal: null, ...message }, finish_reason: finish, logprobs: null, ...extra }],
    }) as never;

  it('OpenAI finish_reason → stopReason, as reported when there is no MCP equivalent', () => {
    expect(fromOpenAIResponse(completion({ content: 'a' }, 'length'), plain).result).toEqual({
      role: 'assistant',
      content: { type: 'text', text: 'a' },
      model: 'reported-model',
      stopReason: 'maxTokens',
    });
    expect(fromOpenAIResponse(completion({ content: 'a' }, 'content_filter'), plain).result.stopReason).toBe('content_filter');
    // vLLM reports the matched stop string.
    expect(fromOpenAIResponse(completion({ content: 'a' }, 'stop', { stop_reason: '###' }), plain).result.stopReason).toBe('stopSequence');
    expect(fromOpenAIResponse(completion({ content: 'a' }, 'stop'), plain).result.stopReason).toBe('endTurn');
    expect(fromOpenAIResponse(completion({ content: null, refusal: 'I cannot help with that.' }, 'stop'), plain).result.content).toEqual({
      type: 'text',
      text: 'I cannot help with that.',
    });
    expect(
      fromOpenAIResponse(
        {
          ...(completion({ content: 'a' }, 'stop') as object),
          usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
        } as never,
        plain,
      ).usage,
    ).toEqual({ input: 3, output: 4 });
  });
  it('OpenAI text plus tool calls → an array of blocks; unusable answers are provider-protocol errors', () => {
    const call = (args: string) => ({ id: 'call_1', type: 'function', function: { name: 't', arguments: args } });
    expect(fromOpenAIResponse(completion({ content: 'Checking.', tool_calls: [call('{"x":1}')] }, 'tool_calls'), withTools).result).toEqual(
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'call_1', name: 't', input: { x: 1 } },
        ],
        model: 'reported-model',
        stopReason: 'toolUse',
      },
    );
    expect(
      failure(() => fromOpenAIResponse(completion({ content: null, tool_calls: [call('{not json')] }, 'tool_calls'), withTools)).data
        .reason,
    ).toBe('provider-protocol');
    expect(
      failure(() => fromOpenAIResponse(completion({ content: null, tool_calls: [call('[1]')] }, 'tool_calls'), withTools)).message,
    ).toMatch(/not a JSON object/);
    expect(failure(() => fromOpenAIResponse(completion({ content: null, tool_calls: [call('{}')] }, 'tool_calls'), plain)).message).toMatch(
      /offered none/,
    );
    expect(failure(() => fromOpenAIResponse({ choices: [] } as never, plain)).code).toBe(-32603);
  });
  it('usage left out by the provider is undefined, not 0 (the sampler then charges an estimate)', () => {
    expect(fromOpenAIResponse(completion({ content: 'a' }, 'stop') as never, plain).usage).toEqual({ input: undefined, output: undefined });
    expect(
      fromOpenAIResponse({ ...(completion({ content: 'a' }, 'stop') as object), usage: { prompt_tokens: 3 } } as never, plain).usage,
    ).toEqual({ input: 3, output: undefined });
    const res = { model: 'm', content: [{ type: 'text', text: 'x' }], stop_reason: 'end_turn' };
    expect(fromAnthropicResponse(res as never, plain).usage).toEqual({ input: undefined, output: undefined });
    expect(fromAnthropicResponse({ ...res, usage: { output_tokens: 4, cache_read_input_tokens: 9 } } as never, plain).usage).toEqual({
      input: undefined,
      output: 4,
    });
  });
  it('estimateInputTokens: a token per 4 characters of the request JSON, base64 media left out', () => {
    const small = params({ messages: [user(text('x'.repeat(400)))] });
    expect(estimateInputTokens(small)).toBeGreaterThanOrEqual(100);
    expect(estimateInputTokens(small)).toBeLessThan(130);
    const image = params({ messages: [user({ type: 'image', data: 'A'.repeat(100_000), mimeType: 'image/png' })] });
    expect(estimateInputTokens(image)).toBeLessThan(50);
  });
  it('Anthropic stop_reason, usage with cache tokens, thinking blocks left out', () => {
    expect(['end_turn', 'stop_sequence', 'max_tokens', 'tool_use', 'refusal', 'pause_turn'].map(anthropicStopReason)).toEqual([
      'endTurn',
      'stopSequence',
      'maxTokens',
      'toolUse',
      'refusal',
      'pause_turn',
    ]);
    const res = {
      id: 'm',
      type: 'message',
      role: 'assistant',
      model: 'claude-reported',
      content: [
        { type: 'thinking', thinking: '…', signature: 's' },
        { type: 'text', text: 'Done.' },
      ],
      stop_reason: 'stop_sequence',
      stop_sequence: '###',
      usage: { input_tokens: 10, output_tokens: 5, cache_creation_input_tokens: 2, cache_read_input_tokens: 100 },
    } as never;
    expect(fromAnthropicResponse(res, plain)).toEqual({
      result: { role: 'assistant', content: { type: 'text', text: 'Done.' }, model: 'claude-reported', stopReason: 'stopSequence' },
      usage: { input: 112, output: 5 },
    });
  });
});

describe('TokenBudgets', () => {
  const limit = (l: number, scope: 'upstream' | 'principal' = 'upstream') => [{ scope, key: 'k', limit: l, windowMs: 60_000 }];
  it('admits while spent + reserved leaves room for the request, then refuses until spent tokens leave the window', () => {
    const b = new TokenBudgets();
    const t0 = 1_000_000;
    b.reserve(limit(100), 50, t0).commit(70, t0);
    const err = failure(() => b.reserve(limit(100), 50, t0 + 1000));
    expect(err.data).toMatchObject({ reason: 'budget', scope: 'upstream', limit: 100, windowMs: 60_000 });
    expect(err.data.retryAfterMs as number).toBeGreaterThan(55_000);
    expect(err.data.retryAfterMs as number).toBeLessThanOrEqual(60_000);
    expect(() => b.reserve(limit(100), 50, t0 + 61_000)).not.toThrow();
  });
  it('counts requests in flight at their reservation; a release frees it without spending', () => {
    const b = new TokenBudgets();
    const r = b.reserve(limit(100), 60);
    expect(failure(() => b.reserve(limit(100), 60)).message).toMatch(/60 held by requests in flight/);
    r.release();
    expect(() => b.reserve(limit(100), 60)).not.toThrow();
  });
  it('a request larger than the whole budget is admitted only into an empty window', () => {
    const b = new TokenBudgets();
    b.reserve(limit(100), 500).commit(1);
    expect(failure(() => b.reserve(limit(100), 500)).data.reason).toBe('budget');
  });
});

describe('Slots', () => {
  it('caps concurrency, queues up to maxQueued, refuses beyond it, and gives up at the deadline', async () => {
    const s = new Slots(1, 1);
    const release = await s.acquire(Date.now() + 1000);
    const queued = s.acquire(Date.now() + 1000);
    await expect(s.acquire(Date.now() + 1000)).rejects.toMatchObject({ data: { reason: 'busy' } });
    release();
    const second = await queued;
    expect(s.inFlight).toBe(1);
    await expect(s.acquire(Date.now() + 50)).rejects.toThrow(/No provider slot became free/);
    second();
    expect(s.inFlight).toBe(0);
  });
});

describe('provider errors', () => {
  const cfg = {
    kind: 'openai',
    apiKey: 'sk-live-abcdefghijklmnop',
    models: { m: model() },
    defaultModel: 'm',
    maxTokens: 100,
    timeoutMs: 1000,
    maxConcurrent: 1,
    maxQueued: 0,
    maxRetries: 2,
  } as const;
  const adapter = createProvider('p', cfg as never);
  const apiError = (status: number, body: unknown, headers: Record<string, string> = {}) =>
    OpenAI.APIError.generate(status, body as object, undefined, new Headers(headers));

  it('classifies 401/403, 429, 5xx, other 4xx and connection failures', () => {
    expect(classifyFailure(apiError(401, { error: { message: 'Incorrect API key provided: sk-live-abcdefghijklmnop' } }), adapter)).toEqual(
      {
        reason: 'provider-auth',
        retryable: false,
        status: 401,
        detail: "provider 'p' refused the gateway's credentials (HTTP 401); check sampling.providers.p.apiKey",
      },
    );
    expect(classifyFailure(apiError(429, { error: { message: 'slow down' } }, { 'retry-after': '2' }), adapter)).toMatchObject({
      reason: 'provider-rate-limited',
      retryable: true,
      retryAfterMs: 2000,
    });
    expect(classifyFailure(apiError(503, {}), adapter)).toMatchObject({ reason: 'provider-unavailable', retryable: true, status: 503 });
    const rejected = classifyFailure(apiError(400, { error: { message: 'bad key sk-live-abcdefghijklmnop in model field' } }), adapter);
    expect(rejected).toMatchObject({ reason: 'provider-rejected', retryable: false, status: 400 });
    expect(rejected.detail).not.toContain('abcdefghijklmnop');
    expect(classifyFailure(new OpenAI.APIConnectionError({ message: 'Connection error.' }), adapter)).toMatchObject({
      reason: 'provider-unavailable',
      retryable: true,
    });
  });
  it('Retry-After in seconds, milliseconds or as a date; key-shaped text scrubbed', () => {
    expect(retryAfterMs(new Headers({ 'retry-after': '1.5' }))).toBe(1500);
    expect(retryAfterMs(new Headers({ 'retry-after-ms': '250', 'retry-after': '9' }))).toBe(250);
    expect(retryAfterMs(new Headers({ 'retry-after': new Date(10_000).toUTCString() }), 4000)).toBe(6000);
    expect(retryAfterMs(new Headers())).toBeUndefined();
    expect(scrub('key sk-proj-AbC123xyz789 and Bearer abc.def and mysecretvalue', ['mysecretvalue'])).toBe(
      'key [redacted] and Bearer [redacted] and [redacted]',
    );
  });
  it('the API key is scrubbed as given and in base64 (also inside a longer base64 text), base64url, URL-encoded, hex and \\u-escaped forms', () => {
    const key = 'live+key/0123456789=abc~xyz?';
    const forms = [
      key,
      Buffer.from(key).toString('base64'),
      Buffer.from(key).toString('base64').replace(/=+$/, ''),
      Buffer.from(key).toString('base64url'),
      encodeURIComponent(key),
      new URLSearchParams({ k: key }).toString().slice(2),
    ];
    for (const form of forms) expect(scrub(`echo: ${form} (end)`, [key])).toBe('echo: [redacted] (end)');
    // Inside a longer base64 text (a Basic Authorization header echoed back), at each alignment.
    for (const around of ['user:', ':', 'a', 'ab', 'abc']) {
      const blob = Buffer.from(`${around}${key}!`).toString('base64');
      expect(scrub(`echo: ${blob}`, [key]), around).toContain('[redacted]');
      expect(scrub(`echo: ${blob}`, [key]), around).not.toMatch(/[A-Za-z0-9+/]{30}/);
    }
    // Hex, every byte percent-encoded, every character \u-escaped.
    const hex = Buffer.from(key).toString('hex');
    const everyChar = key
      .split('')
      .map((c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
      .join('');
    for (const form of [hex, hex.toUpperCase(), hex.replace(/../g, (h) => `%${h.toUpperCase()}`), everyChar]) {
      expect(scrub(`echo: ${form} (end)`, [key]), form).toBe('echo: [redacted] (end)');
    }
    const p = createProvider('p', { ...cfg, apiKey: key } as never);
    const rejected = classifyFailure(apiError(400, { error: { message: `invalid key ${Buffer.from(key).toString('base64')}` } }), p);
    expect(rejected.detail).toBe("provider 'p' rejected the request (HTTP 400): invalid key [redacted]");
  });
});

describe('modes and the capabilities declared upstream', () => {
  const cfg = (mode: string, tools: Record<string, { mode: string }> = {}) =>
    ({ mode, provider: 'p', budget: { windowMs: 1 }, tools }) as never;
  it('samplingModeFor: the tool overrides the upstream', () => {
    expect(samplingModeFor(cfg('client', { t: { mode: 'provider' } }), 't')).toBe('provider');
    expect(samplingModeFor(cfg('client', { t: { mode: 'provider' } }), 'other')).toBe('client');
    expect(samplingModeFor(cfg('fallback'), undefined)).toBe('fallback');
  });
  it('samplingRoute: fallback goes to the provider when the client cannot answer (no sampling, or tools without sampling.tools)', () => {
    expect(samplingRoute('fallback', {}, {})).toBe('client');
    expect(samplingRoute('fallback', undefined, {})).toBe('provider');
    expect(samplingRoute('fallback', {}, { tools: [] })).toBe('provider');
    expect(samplingRoute('fallback', { tools: {} }, { tools: [] })).toBe('client');
    expect(samplingRoute('provider', { tools: {} }, {})).toBe('provider');
    expect(samplingRoute('client', undefined, {})).toBe('client');
  });
  it('upstreamSamplingCapability and mirrorCapabilities: sampling with tools whenever the provider may answer', () => {
    expect(upstreamSamplingCapability(undefined, cfg('client'))).toBeUndefined();
    expect(upstreamSamplingCapability({ context: {} }, cfg('client'))).toEqual({ context: {} });
    expect(upstreamSamplingCapability(undefined, cfg('provider'))).toEqual({ tools: {} });
    expect(upstreamSamplingCapability({ context: {} }, cfg('provider'))).toEqual({ tools: {} });
    expect(upstreamSamplingCapability({ context: {} }, cfg('fallback'))).toEqual({ tools: {}, context: {} });
    expect(upstreamSamplingCapability(undefined, cfg('client', { t: { mode: 'fallback' } }))).toEqual({ tools: {} });
    const upstream = { input: { allow: ['elicitation', 'sampling', 'roots'] }, roots: [] } as never as Parameters<
      typeof mirrorCapabilities
    >[1];
    expect(mirrorCapabilities({}, { ...upstream, sampling: cfg('provider') })).toEqual({ sampling: { tools: {} } });
    expect(mirrorCapabilities({}, { ...upstream, sampling: cfg('client') })).toEqual({});
  });
});

describe('sampling config', () => {
  const env = { ...process.env, SOME_KEY: 'sk-from-env-0123456789' };
  const base = (provider: Record<string, unknown>, upstreamSampling: Record<string, unknown> = { mode: 'provider', provider: 'p' }) => ({
    sampling: { providers: { p: { kind: 'openai', models: { m: { model: 'gpt' } }, defaultModel: 'm', ...provider } } },
    upstreams: { u: { transport: 'stdio', command: 'node', sampling: upstreamSampling } },
  });

  it('takes an API key from ${ENV} and applies defaults', () => {
    const cfg = parseConfig(base({ apiKey: '${SOME_KEY}' }), env);
    expect(cfg.sampling.providers.p).toMatchObject({
      apiKey: 'sk-from-env-0123456789',
      maxTokens: 4096,
      timeoutMs: 60_000,
      maxConcurrent: 4,
      maxQueued: 64,
      maxRetries: 2,
    });
    expect(cfg.upstreams.u!.sampling).toEqual({ mode: 'provider', provider: 'p', budget: { windowMs: 3_600_000 }, tools: {} });
    expect(parseConfig({ upstreams: { u: { transport: 'stdio', command: 'node' } } }, env).upstreams.u!.sampling.mode).toBe('client');
  });
  it('refuses a key written into the configuration, naming the path and not the value', () => {
    for (const apiKey of ['sk-literal-0123456789', 'prefix-${SOME_KEY}', 42]) {
      let err: unknown;
      try {
        parseConfig(base({ apiKey }), env);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as Error).message).toMatch(/^sampling\.providers\.p\.apiKey: give the key as an environment variable reference/);
      expect((err as Error).message).not.toContain('sk-literal');
    }
  });
  it('checks provider references, defaultModel, and what the Anthropic API cannot do', () => {
    expect(() => parseConfig(base({}, { mode: 'provider', provider: 'nope' }), env)).toThrow(
      /upstreams\.u\.sampling\.provider: unknown provider 'nope'/,
    );
    expect(() => parseConfig(base({}, { mode: 'client', tools: { t: { mode: 'fallback' } } }), env)).toThrow(
      /upstreams\.u\.sampling\.provider: modes provider and fallback need a provider/,
    );
    expect(() => parseConfig(base({ defaultModel: 'x' }), env)).toThrow(/sampling\.providers\.p\.defaultModel: 'x' is not one of models/);
    expect(() => parseConfig(base({ kind: 'anthropic', apiKey: '${SOME_KEY}', models: { m: { model: 'c', audio: true } } }), env)).toThrow(
      /models\.m\.audio: the Anthropic Messages API takes no audio/,
    );
    expect(() => parseConfig(base({ kind: 'anthropic' }), env)).toThrow(
      /sampling\.providers\.p\.apiKey: an anthropic provider needs an apiKey/,
    );
  });
});
