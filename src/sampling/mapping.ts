/**
 * MCP `sampling/createMessage` (2025-11-25 schema: CreateMessageRequestParams, SamplingMessage,
 * ToolUseContent, ToolResultContent, CreateMessageResult[WithTools]) to and from the two provider
 * APIs: OpenAI Chat Completions (`POST /v1/chat/completions`) and Anthropic Messages
 * (`POST /v1/messages`), streaming off. Pure functions; the table in docs/sampling.md describes
 * every field.
 */
import { CreateMessageRequestParamsSchema } from '@modelcontextprotocol/sdk/types.js';
import type {
  ChatCompletion,
  ChatCompletionContentPart,
  ChatCompletionContentPartText,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionMessageParam,
  ChatCompletionTool,
} from 'openai/resources/chat/completions';
import type {
  ContentBlockParam,
  ImageBlockParam,
  Message as AnthropicMessage,
  MessageCreateParamsNonStreaming,
  MessageParam,
  TextBlockParam,
  Tool as AnthropicTool,
  ToolResultBlockParam,
} from '@anthropic-ai/sdk/resources/messages/messages';
import type { ProviderModelConfig, SamplingProviderConfig } from '../config/schema.js';
import { SamplingError } from './errors.js';

/** Validated `sampling/createMessage` params (the v1 SDK's CreateMessageRequestParams). */
export type SamplingParams = ReturnType<typeof CreateMessageRequestParamsSchema.parse>;
type SamplingMessage = SamplingParams['messages'][number];
type Block = Exclude<SamplingMessage['content'], unknown[]>;
type ToolResultBlock = Extract<Block, { type: 'tool_result' }>;
type ResultContentBlock = ToolResultBlock['content'][number];

/** A completion in MCP terms, and the tokens the provider reported. */
export interface MappedCompletion {
  /** CreateMessageResult (or CreateMessageResultWithTools when the request had tools). */
  result: { role: 'assistant'; content: Record<string, unknown> | Record<string, unknown>[]; model: string; stopReason?: string };
  /** Tokens the provider reported; a count it left out (or sent as something other than a non-negative number) is undefined. */
  usage: { input?: number; output?: number };
}

/** The model chosen for one request: its alias in config, its settings, and why it was chosen. */
export interface ModelChoice {
  alias: string;
  model: ProviderModelConfig;
  by: 'hint' | 'priorities' | 'default';
}

/**
 * Validates the upstream's params against the 2025-11-25 schema and refuses what the gateway does
 * not do when it answers: `includeContext` other than `none` (the gateway never declares
 * `sampling.context`, MCP 2025-11-25 client/sampling), and `maxTokens` below 1.
 * @throws SamplingError `invalid-request` (-32602), naming the offending field, never its content.
 */
export function parseSamplingParams(params: unknown): SamplingParams {
  const parsed = CreateMessageRequestParamsSchema.safeParse(params);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new SamplingError(
      'invalid-request',
      `Malformed sampling/createMessage params at ${issue.path.join('.') || '(params)'}: ${issue.message}`,
    );
  }
  const p = parsed.data;
  if (p.includeContext !== undefined && p.includeContext !== 'none') {
    throw new SamplingError(
      'invalid-request',
      `includeContext "${p.includeContext}" is not served when the gateway answers sampling: it does not declare sampling.context (MCP 2025-11-25); omit includeContext or send "none"`,
    );
  }
  if (!Number.isInteger(p.maxTokens) || p.maxTokens < 1)
    throw new SamplingError('invalid-request', `maxTokens must be a positive integer (got ${p.maxTokens})`);
  return p;
}

/**
 * Picks the model for a request (MCP 2025-11-25 client/sampling §Model Preferences):
 * 1. the hints in order: the first hint whose `name` equals (case-insensitively) a model's alias,
 *    model id or one of its configured `hints`, or else is a substring of one of them, picks that
 *    model (an exact match first, then models in config order);
 * 2. else, when cost/speed/intelligence priorities are given, the best score
 *    `costPriority·(1−cost) + speedPriority·speed + intelligencePriority·intelligence` among the
 *    models that declare every figure a non-zero priority needs (a tie keeps the default model if
 *    it is among the best, else the first in config order);
 * 3. else the provider's `defaultModel`.
 */
export function selectModel(
  provider: Pick<SamplingProviderConfig, 'models' | 'defaultModel'>,
  prefs: SamplingParams['modelPreferences'],
): ModelChoice {
  const entries = Object.entries(provider.models);
  const names = ([alias, m]: [string, ProviderModelConfig]) => [alias, m.model, ...m.hints].map((n) => n.toLowerCase());
  for (const hint of prefs?.hints ?? []) {
    const h = hint.name?.trim().toLowerCase();
    if (!h) continue;
    const hit = entries.find((e) => names(e).includes(h)) ?? entries.find((e) => names(e).some((n) => n.includes(h)));
    if (hit) return { alias: hit[0], model: hit[1], by: 'hint' };
  }
  const weights = { cost: prefs?.costPriority ?? 0, speed: prefs?.speedPriority ?? 0, intelligence: prefs?.intelligencePriority ?? 0 };
  const axes = (Object.keys(weights) as (keyof typeof weights)[]).filter((k) => weights[k] > 0);
  if (axes.length) {
    const eligible = entries.filter(([, m]) => axes.every((a) => m[a] !== undefined));
    if (eligible.length) {
      const score = (m: ProviderModelConfig) =>
        weights.cost * (1 - (m.cost ?? 0)) + weights.speed * (m.speed ?? 0) + weights.intelligence * (m.intelligence ?? 0);
      const best = Math.max(...eligible.map(([, m]) => score(m)));
      const top = eligible.filter(([, m]) => Math.abs(score(m) - best) < 1e-9);
      const pick = top.find(([a]) => a === provider.defaultModel) ?? top[0]!;
      return { alias: pick[0], model: pick[1], by: 'priorities' };
    }
  }
  return { alias: provider.defaultModel, model: provider.models[provider.defaultModel]!, by: 'default' };
}

/** `n` when it is a token count (a finite number ≥ 0), else undefined. */
const tokenCount = (n: unknown): number | undefined => (typeof n === 'number' && Number.isFinite(n) && n >= 0 ? n : undefined);

/** Characters counted as one token by {@link estimateInputTokens}. */
const CHARS_PER_TOKEN = 4;

/**
 * An estimate of a request's input tokens, for a provider answer that reports none: one token per
 * 4 characters of the JSON of its `systemPrompt`, `messages` and `tools`, base64 media (`data`,
 * `blob`) left out. JSON punctuation is counted too, so text is rather over- than under-estimated.
 */
export function estimateInputTokens(params: SamplingParams): number {
  const json = JSON.stringify([params.systemPrompt ?? '', params.messages, params.tools ?? []], (k, v: unknown) =>
    (k === 'data' || k === 'blob') && typeof v === 'string' ? '' : v,
  );
  return Math.ceil(json.length / CHARS_PER_TOKEN);
}

const blocksOf = (m: SamplingMessage): Block[] => (Array.isArray(m.content) ? m.content : [m.content]) as Block[];

/** True when the request carries tools (its result may then hold tool_use and several blocks). */
export const hasTools = (p: SamplingParams): boolean => Array.isArray(p.tools) && p.tools.length > 0;

function unsupported(what: string, provider: string): SamplingError {
  return new SamplingError('unsupported-content', `${what} cannot be sent to the ${provider}`);
}

function checkMedia(block: { type: 'image' | 'audio' }, role: string, model: ModelChoice, api: string): void {
  if (role !== 'user') throw unsupported(`${block.type} content in an ${role} message`, api);
  if (block.type === 'image' && !model.model.image)
    throw unsupported(`image content`, `model '${model.alias}' (its config says image: false)`);
  if (block.type === 'audio' && !model.model.audio)
    throw unsupported(`audio content`, `model '${model.alias}' (its config says audio: false)`);
}

/** The text of a tool result's content block, for APIs whose tool results take text only. */
function toolResultText(c: ResultContentBlock, api: string): string {
  switch (c.type) {
    case 'text':
      return c.text;
    case 'resource_link':
      return `resource_link: ${c.uri}`;
    case 'resource':
      if ('text' in c.resource && typeof c.resource.text === 'string') return c.resource.text;
      throw unsupported('a tool_result with a binary embedded resource', api);
    default:
      throw unsupported(`a tool_result with ${c.type} content`, api);
  }
}

/** Text of a tool result: its content as text, or its structuredContent as JSON when it has no content. */
function toolResultTexts(b: ToolResultBlock, api: string): string[] {
  const texts = b.content.map((c) => toolResultText(c, api));
  if (!texts.length && b.structuredContent !== undefined) texts.push(JSON.stringify(b.structuredContent));
  return texts;
}

// ---------------------------------------------------------------- OpenAI Chat Completions

const OPENAI = 'OpenAI-compatible Chat Completions API';

function audioFormat(mimeType: string): 'wav' | 'mp3' {
  const t = mimeType.toLowerCase().split(';')[0]!.trim();
  if (['audio/wav', 'audio/x-wav', 'audio/wave', 'audio/vnd.wave'].includes(t)) return 'wav';
  if (['audio/mpeg', 'audio/mp3', 'audio/mpeg3', 'audio/x-mpeg-3'].includes(t)) return 'mp3';
  throw unsupported(`audio of type ${mimeType} (input_audio takes wav or mp3)`, OPENAI);
}

/**
 * The Chat Completions request for `params` (non-streaming, one choice).
 * @param maxTokens the capped maxTokens, sent as `maxTokensField` (`max_completion_tokens` unless configured otherwise).
 * @throws SamplingError `unsupported-content` for content Chat Completions cannot take (images or audio
 *   outside user messages, images or audio inside tool results, audio other than wav/mp3, a content
 *   type the model's config rules out); `invalid-request` for a tool_use in a user message or a
 *   tool_result in an assistant message.
 */
export function toOpenAIRequest(
  params: SamplingParams,
  model: ModelChoice,
  maxTokens: number,
  maxTokensField: 'max_completion_tokens' | 'max_tokens' = 'max_completion_tokens',
): ChatCompletionCreateParamsNonStreaming {
  const messages: ChatCompletionMessageParam[] = [];
  if (params.systemPrompt !== undefined) messages.push({ role: 'system', content: params.systemPrompt });
  for (const m of params.messages) messages.push(...openAIMessages(m, model));
  const body: ChatCompletionCreateParamsNonStreaming = { model: model.model.model, messages, stream: false };
  if (maxTokensField === 'max_tokens') body.max_tokens = maxTokens;
  else body.max_completion_tokens = maxTokens;
  if (params.temperature !== undefined) body.temperature = params.temperature;
  if (params.stopSequences?.length) body.stop = params.stopSequences;
  if (hasTools(params)) {
    body.tools = params.tools!.map((t): ChatCompletionTool => ({
      type: 'function',
      function: {
        name: t.name,
        ...(t.description !== undefined ? { description: t.description } : {}),
        parameters: t.inputSchema as Record<string, unknown>,
      },
    }));
  }
  if (params.toolChoice?.mode) body.tool_choice = params.toolChoice.mode;
  return body;
}

function openAIMessages(m: SamplingMessage, model: ModelChoice): ChatCompletionMessageParam[] {
  const blocks = blocksOf(m);
  if (m.role === 'assistant') {
    const texts: ChatCompletionContentPartText[] = [];
    const calls: { id: string; type: 'function'; function: { name: string; arguments: string } }[] = [];
    for (const b of blocks) {
      if (b.type === 'text') texts.push({ type: 'text', text: b.text });
      else if (b.type === 'tool_use')
        calls.push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input) } });
      else if (b.type === 'tool_result')
        throw new SamplingError('invalid-request', 'A tool_result belongs in a user message (MCP 2025-11-25 client/sampling)');
      else throw unsupported(`${b.type} content in an assistant message`, OPENAI);
    }
    const content = texts.length === 0 ? null : texts.length === 1 ? texts[0]!.text : texts;
    return [{ role: 'assistant', content, ...(calls.length ? { tool_calls: calls } : {}) }];
  }
  const out: ChatCompletionMessageParam[] = [];
  const parts: ChatCompletionContentPart[] = [];
  for (const b of blocks) {
    switch (b.type) {
      case 'text':
        parts.push({ type: 'text', text: b.text });
        break;
      case 'image':
        checkMedia(b, m.role, model, OPENAI);
        parts.push({ type: 'image_url', image_url: { url: `data:${b.mimeType};base64,${b.data}` } });
        break;
      case 'audio':
        checkMedia(b, m.role, model, OPENAI);
        parts.push({ type: 'input_audio', input_audio: { data: b.data, format: audioFormat(b.mimeType) } });
        break;
      case 'tool_result': {
        const texts = toolResultTexts(b, OPENAI);
        out.push({
          role: 'tool',
          tool_call_id: b.toolUseId,
          content: texts.length <= 1 ? (texts[0] ?? '') : texts.map((text) => ({ type: 'text' as const, text })),
        });
        break;
      }
      case 'tool_use':
        throw new SamplingError('invalid-request', 'A tool_use belongs in an assistant message (MCP 2025-11-25 client/sampling)');
    }
  }
  if (parts.length) {
    const only = parts.length === 1 && parts[0]!.type === 'text' ? parts[0]!.text : undefined;
    out.push({ role: 'user', content: only ?? parts });
  }
  return out;
}

/** Chat Completions `finish_reason` → MCP `stopReason`; other values are passed on as reported. */
export function openAIStopReason(finish: string | null | undefined, matchedStop?: unknown, stopSequences?: string[]): string | undefined {
  switch (finish) {
    case 'stop':
      // vLLM reports the matched stop string in `stop_reason`; OpenAI says `stop` either way.
      return typeof matchedStop === 'string' && stopSequences?.includes(matchedStop) ? 'stopSequence' : 'endTurn';
    case 'length':
      return 'maxTokens';
    case 'tool_calls':
    case 'function_call':
      return 'toolUse';
    case null:
    case undefined:
      return undefined;
    default:
      return finish;
  }
}

/**
 * The MCP result for a Chat Completions answer: the first choice's text (or refusal) and tool calls
 * (`tool_use` blocks, arguments parsed as JSON), the model and the stop reason as the provider
 * reported them. One block is returned as an object, several as an array (only with tools).
 * @throws SamplingError `provider-protocol` when there is no choice, tool call arguments are not a
 *   JSON object, or the model called a tool although the request had no tools.
 */
export function fromOpenAIResponse(res: ChatCompletion, params: SamplingParams): MappedCompletion {
  const choice = res.choices?.[0];
  if (!choice?.message) throw new SamplingError('provider-protocol', 'The provider answered without a choice');
  const msg = choice.message;
  const content: Record<string, unknown>[] = [];
  const text = msg.content ?? msg.refusal ?? null;
  if (typeof text === 'string' && (text.length || !msg.tool_calls?.length)) content.push({ type: 'text', text });
  for (const call of msg.tool_calls ?? []) {
    if (call.type !== 'function') throw new SamplingError('provider-protocol', `The provider answered a tool call of type ${call.type}`);
    let input: unknown;
    try {
      input = call.function.arguments ? JSON.parse(call.function.arguments) : {};
    } catch {
      throw new SamplingError('provider-protocol', `The provider's arguments for tool '${call.function.name}' are not JSON`);
    }
    if (!input || typeof input !== 'object' || Array.isArray(input))
      throw new SamplingError('provider-protocol', `The provider's arguments for tool '${call.function.name}' are not a JSON object`);
    content.push({ type: 'tool_use', id: call.id, name: call.function.name, input });
  }
  if (!content.length) content.push({ type: 'text', text: '' });
  const matched = (choice as unknown as { stop_reason?: unknown }).stop_reason;
  return {
    result: withContent(content, params, res.model, openAIStopReason(choice.finish_reason, matched, params.stopSequences)),
    usage: { input: tokenCount(res.usage?.prompt_tokens), output: tokenCount(res.usage?.completion_tokens) },
  };
}

function withContent(
  content: Record<string, unknown>[],
  params: SamplingParams,
  model: string,
  stopReason: string | undefined,
): MappedCompletion['result'] {
  if (!hasTools(params)) {
    if (content.some((c) => c.type === 'tool_use'))
      throw new SamplingError('provider-protocol', 'The provider called a tool although the request offered none');
    // CreateMessageResult (no tools) holds exactly one block.
    if (content.length > 1) content = [{ type: 'text', text: content.map((c) => String(c.text ?? '')).join('') }];
  }
  return {
    role: 'assistant',
    content: content.length === 1 ? content[0]! : content,
    model,
    ...(stopReason !== undefined ? { stopReason } : {}),
  };
}

// ---------------------------------------------------------------- Anthropic Messages

const ANTHROPIC = 'Anthropic Messages API';
const ANTHROPIC_IMAGE_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'] as const;
type AnthropicImageType = (typeof ANTHROPIC_IMAGE_TYPES)[number];

function anthropicImage(b: { data: string; mimeType: string }): ImageBlockParam {
  const t = b.mimeType.toLowerCase() as AnthropicImageType;
  if (!ANTHROPIC_IMAGE_TYPES.includes(t))
    throw unsupported(`an image of type ${b.mimeType} (it takes ${ANTHROPIC_IMAGE_TYPES.join(', ')})`, ANTHROPIC);
  return { type: 'image', source: { type: 'base64', media_type: t, data: b.data } };
}

/**
 * The Messages request for `params` (non-streaming, API version 2026-10-21 as the official SDK
 * sends it). `temperature` is left out: that API version has no sampling parameters.
 * @throws SamplingError `unsupported-content` for audio (the Messages API takes none), images
 *   outside user messages or of a type it does not take, audio or binary resources in tool results,
 *   images the model's config rules out; `invalid-request` for tool_use/tool_result in the wrong role.
 */
export function toAnthropicRequest(params: SamplingParams, model: ModelChoice, maxTokens: number): MessageCreateParamsNonStreaming {
  const messages: MessageParam[] = params.messages.map((m) => ({
    role: m.role,
    content: blocksOf(m).map((b) => anthropicBlock(b, m.role, model)),
  }));
  const body: MessageCreateParamsNonStreaming = { model: model.model.model, max_tokens: maxTokens, messages, stream: false };
  if (params.systemPrompt !== undefined) body.system = params.systemPrompt;
  // `temperature` is not sent: in API version 2026-10-21, which @anthropic-ai/sdk 1.x sends,
  // MessageCreateParams has no temperature, top_p or top_k, and Anthropic's migration guide to
  // that version says a request carrying one gets 400, even at its default value.
  if (params.stopSequences?.length) body.stop_sequences = params.stopSequences;
  if (hasTools(params)) {
    body.tools = params.tools!.map((t): AnthropicTool => ({
      name: t.name,
      ...(t.description !== undefined ? { description: t.description } : {}),
      input_schema: t.inputSchema as AnthropicTool['input_schema'],
    }));
  }
  const mode = params.toolChoice?.mode;
  if (mode) body.tool_choice = mode === 'required' ? { type: 'any' } : { type: mode };
  return body;
}

function anthropicBlock(b: Block, role: 'user' | 'assistant', model: ModelChoice): ContentBlockParam {
  switch (b.type) {
    case 'text':
      return { type: 'text', text: b.text };
    case 'image':
      checkMedia(b, role, model, ANTHROPIC);
      return anthropicImage(b);
    case 'audio':
      throw unsupported('audio content', ANTHROPIC);
    case 'tool_use':
      if (role !== 'assistant')
        throw new SamplingError('invalid-request', 'A tool_use belongs in an assistant message (MCP 2025-11-25 client/sampling)');
      return { type: 'tool_use', id: b.id, name: b.name, input: b.input };
    case 'tool_result': {
      if (role !== 'user')
        throw new SamplingError('invalid-request', 'A tool_result belongs in a user message (MCP 2025-11-25 client/sampling)');
      const content: (TextBlockParam | ImageBlockParam)[] = [];
      for (const c of b.content) {
        if (c.type === 'image') {
          if (!model.model.image) throw unsupported('image content', `model '${model.alias}' (its config says image: false)`);
          content.push(anthropicImage(c));
        } else content.push({ type: 'text', text: toolResultText(c, ANTHROPIC) });
      }
      if (!content.length && b.structuredContent !== undefined) content.push({ type: 'text', text: JSON.stringify(b.structuredContent) });
      const out: ToolResultBlockParam = { type: 'tool_result', tool_use_id: b.toolUseId };
      if (content.length) out.content = content;
      if (b.isError !== undefined) out.is_error = b.isError;
      return out;
    }
  }
}

/** Messages `stop_reason` → MCP `stopReason`; other values (`refusal`, `pause_turn`, …) are passed on as reported. */
export function anthropicStopReason(reason: string | null | undefined): string | undefined {
  switch (reason) {
    case 'end_turn':
      return 'endTurn';
    case 'stop_sequence':
      return 'stopSequence';
    case 'max_tokens':
      return 'maxTokens';
    case 'tool_use':
      return 'toolUse';
    case null:
    case undefined:
      return undefined;
    default:
      return reason;
  }
}

/**
 * The MCP result for a Messages answer: its text and tool_use blocks (other block kinds, such as
 * thinking, are left out), the model and the stop reason as reported. Input tokens include cache
 * reads and writes.
 * @throws SamplingError `provider-protocol` when the model called a tool although the request had none.
 */
export function fromAnthropicResponse(res: AnthropicMessage, params: SamplingParams): MappedCompletion {
  const content: Record<string, unknown>[] = [];
  for (const b of res.content ?? []) {
    if (b.type === 'text') content.push({ type: 'text', text: b.text });
    else if (b.type === 'tool_use')
      content.push({ type: 'tool_use', id: b.id, name: b.name, input: (b.input ?? {}) as Record<string, unknown> });
  }
  if (!content.length) content.push({ type: 'text', text: '' });
  const u = res.usage;
  const base = tokenCount(u?.input_tokens);
  const input =
    base === undefined
      ? undefined
      : base + (tokenCount(u?.cache_creation_input_tokens) ?? 0) + (tokenCount(u?.cache_read_input_tokens) ?? 0);
  return {
    result: withContent(content, params, res.model, anthropicStopReason(res.stop_reason)),
    usage: { input, output: tokenCount(u?.output_tokens) },
  };
}
