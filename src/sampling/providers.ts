/**
 * Provider adapters over the official SDKs: `openai` (any OpenAI-compatible Chat Completions
 * endpoint) and `@anthropic-ai/sdk` (Messages API). One adapter per configured provider; each call
 * is one HTTP attempt (the SDKs' own retries are off: the sampler retries within its time limit).
 * Every option the SDKs would otherwise take from the environment (base URL, API key, organisation,
 * project, log level) is passed explicitly, so none of those variables is read. The one the
 * Anthropic SDK still honours is `ANTHROPIC_CUSTOM_HEADERS` (extra headers set on the gateway's
 * own process).
 */
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import type { SamplingProviderConfig } from '../config/schema.js';
import {
  fromAnthropicResponse,
  fromOpenAIResponse,
  toAnthropicRequest,
  toOpenAIRequest,
  type MappedCompletion,
  type ModelChoice,
  type SamplingParams,
} from './mapping.js';
import type { SamplingFailure } from './errors.js';
import { bySize, encodedForms, redactText } from '../security/redact.js';

/** Default base URLs (the SDKs' own, given explicitly so no environment variable overrides them). */
export const DEFAULT_BASE_URL = { openai: 'https://api.openai.com/v1', anthropic: 'https://api.anthropic.com' } as const;

/** A provider's response body was larger than its `maxResponseBytes`. */
export class ResponseTooLargeError extends Error {
  override name = 'ResponseTooLargeError';
  /**
   * @param limit the provider's `maxResponseBytes`, in bytes.
   * @param declared the body's `content-length` when it announced more than that.
   */
  constructor(
    readonly limit: number,
    readonly declared?: number,
  ) {
    super(`${ResponseTooLargeError.MARK}${limit} bytes${declared !== undefined ? ` (content-length ${declared})` : ''}`);
  }

  /** How its message begins. */
  static readonly MARK = 'the response body is larger than maxResponseBytes=';

  /**
   * The error `err` carries, where an SDK kept only its message: it reads the body of an error
   * answer (HTTP 4xx/5xx) into the text of the error it throws, so a cut-off error body shows there.
   */
  static in(err: unknown): ResponseTooLargeError | undefined {
    if (err instanceof ResponseTooLargeError) return err;
    const message = (err as { message?: unknown })?.message;
    if (typeof message !== 'string') return undefined;
    const at = message.indexOf(ResponseTooLargeError.MARK);
    if (at < 0) return undefined;
    const m = /^(\d+) bytes(?: \(content-length (\d+)\))?/.exec(message.slice(at + ResponseTooLargeError.MARK.length));
    return m ? new ResponseTooLargeError(Number(m[1]), m[2] === undefined ? undefined : Number(m[2])) : undefined;
  }
}

/** Statuses whose responses have no body (the Response constructor refuses one). */
const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);

/**
 * A `fetch` for the provider SDKs whose responses' bodies end in an error once more than
 * `maxBytes` bytes have arrived: a `content-length` above it errors the body before anything is
 * read, and a body that streams past it errors at the chunk that crosses it. Either way the
 * underlying body is cancelled, so the connection is dropped and the provider stops sending. The
 * SDKs read the body in `response.json()` / `response.text()`, which then reject with
 * {@link ResponseTooLargeError}; so at most `maxBytes` (plus one network chunk) is held.
 */
export function boundedFetch(maxBytes: number, inner: typeof fetch = fetch): typeof fetch {
  return async (input, init) => {
    const res = await inner(input, init);
    if (!res.body || NULL_BODY_STATUS.has(res.status)) return res;
    const reader = res.body.getReader();
    const length = res.headers.get('content-length');
    const declared = length !== null && /^\d+$/.test(length.trim()) ? Number(length) : undefined;
    let seen = 0;
    const refuse = (controller: ReadableStreamDefaultController<Uint8Array>, err: ResponseTooLargeError) => {
      controller.error(err);
      reader.cancel(err).catch(() => {});
    };
    const body = new ReadableStream<Uint8Array>(
      {
        start(controller) {
          if (declared !== undefined && declared > maxBytes) refuse(controller, new ResponseTooLargeError(maxBytes, declared));
        },
        async pull(controller) {
          const { done, value } = await reader.read();
          if (done) return controller.close();
          seen += value.byteLength;
          if (seen > maxBytes) return refuse(controller, new ResponseTooLargeError(maxBytes));
          controller.enqueue(value);
        },
        cancel: (reason) => reader.cancel(reason),
      },
      { highWaterMark: 0 },
    );
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/** One attempt's limits. */
export interface AttemptOptions {
  /** Aborts the HTTP request (timeout of the whole sampling request, or the upstream withdrew it). */
  signal: AbortSignal;
  /** Time left for this attempt, in ms. */
  timeoutMs: number;
}

/** A configured provider: maps a request, sends one attempt, maps the answer. */
export interface ProviderAdapter {
  readonly name: string;
  readonly cfg: SamplingProviderConfig;
  /**
   * The provider request body for `params`.
   * @throws SamplingError from the mapping (unsupported content, misplaced tool blocks).
   */
  build(params: SamplingParams, model: ModelChoice, maxTokens: number): unknown;
  /** Sends `body` once; rejects with the SDK's error. */
  send(body: unknown, opts: AttemptOptions): Promise<unknown>;
  /**
   * The MCP result of the provider's answer.
   * @throws SamplingError `provider-protocol`.
   */
  parse(response: unknown, params: SamplingParams): MappedCompletion;
}

/**
 * Creates the adapter of provider `name` from its parsed config (`apiKey` already substituted from
 * the environment; undefined: none, openai only). The key lives in the SDK client and in `cfg` only.
 */
export function createProvider(name: string, cfg: SamplingProviderConfig): ProviderAdapter {
  const baseURL = cfg.baseUrl ?? DEFAULT_BASE_URL[cfg.kind];
  if (cfg.kind === 'openai') {
    const client = new OpenAI({
      apiKey: cfg.apiKey ?? 'none',
      baseURL,
      organization: null,
      project: null,
      webhookSecret: null,
      maxRetries: 0,
      timeout: cfg.timeoutMs,
      logLevel: 'off',
      fetch: boundedFetch(cfg.maxResponseBytes),
      // A local server configured without a key gets no Authorization header at all.
      ...(cfg.apiKey === undefined ? { defaultHeaders: { authorization: null } } : {}),
    });
    return {
      name,
      cfg,
      build: (params, model, maxTokens) => toOpenAIRequest(params, model, maxTokens, cfg.maxTokensField),
      send: (body, opts) =>
        client.chat.completions.create(body as ReturnType<typeof toOpenAIRequest>, {
          signal: opts.signal,
          timeout: Math.max(1, opts.timeoutMs),
          maxRetries: 0,
        }),
      parse: (res, params) => fromOpenAIResponse(res as Parameters<typeof fromOpenAIResponse>[0], params),
    };
  }
  const client = new Anthropic({
    apiKey: cfg.apiKey!,
    webhookKey: null,
    baseURL,
    maxRetries: 0,
    timeout: cfg.timeoutMs,
    logLevel: 'off',
    openTelemetry: false,
    fetch: boundedFetch(cfg.maxResponseBytes),
  });
  return {
    name,
    cfg,
    build: (params, model, maxTokens) => toAnthropicRequest(params, model, maxTokens),
    send: (body, opts) =>
      client.messages.create(body as ReturnType<typeof toAnthropicRequest>, {
        signal: opts.signal,
        timeout: Math.max(1, opts.timeoutMs),
        maxRetries: 0,
      }),
    parse: (res, params) => fromAnthropicResponse(res as Parameters<typeof fromAnthropicResponse>[0], params),
  };
}

/** What went wrong in one attempt, and whether another attempt may help. */
export interface AttemptFailure {
  reason: SamplingFailure;
  retryable: boolean;
  /** The provider's HTTP status, when it answered. */
  status?: number;
  /** What the provider asked for in `retry-after-ms` or `retry-after`, in ms. */
  retryAfterMs?: number;
  /** A short description, the provider's own message included where safe (keys scrubbed). */
  detail: string;
}

/** Parses `retry-after-ms` (milliseconds) or `retry-after` (seconds, or an HTTP date) from response headers. */
export function retryAfterMs(headers: Headers | undefined, now = Date.now()): number | undefined {
  const ms = headers?.get('retry-after-ms');
  if (ms && Number.isFinite(Number(ms))) return Math.max(0, Number(ms));
  const ra = headers?.get('retry-after');
  if (!ra) return undefined;
  if (/^\s*\d+(\.\d+)?\s*$/.test(ra)) return Math.max(0, Number(ra) * 1000);
  const at = Date.parse(ra);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/**
 * Replaces `secrets`, each also in its base64, base64url, percent-encoded and JSON-escaped forms
 * ({@link encodedForms}), and anything shaped like an API key in `text` with `[redacted]`, and caps
 * the result at 300 characters.
 */
export function scrub(text: string, secrets: (string | undefined)[]): string {
  const out = redactText(text, bySize(secrets.filter((s): s is string => s !== undefined && s.length >= 4).flatMap(encodedForms)));
  return out.length > 300 ? `${out.slice(0, 300)}…` : out;
}

/** The provider's own error message from an SDK error body (OpenAI `{error:{message}}`, Anthropic `{type:"error",error:{message}}`). */
function providerMessage(err: { error?: unknown; message?: string }): string | undefined {
  const body = err.error as { message?: unknown; error?: { message?: unknown } } | undefined;
  const m = body?.error?.message ?? body?.message;
  return typeof m === 'string' && m ? m : undefined;
}

/**
 * Classifies an SDK error of one attempt. A body over `maxResponseBytes`, of a success or an error
 * answer: `provider-protocol`, not retried. 401/403: `provider-auth`, not retried, and the provider's
 * message is left out (it may quote part of the key). 408, 409, 429 and 5xx: retried. Other 4xx:
 * `provider-rejected`. Connection failures: retried. Anything else: `provider-protocol`.
 * Aborts and timeouts are decided by the caller, which owns the signal.
 */
export function classifyFailure(err: unknown, provider: ProviderAdapter): AttemptFailure {
  const e = err as { status?: unknown; headers?: Headers; error?: unknown; message?: string };
  const where = `provider '${provider.name}'`;
  const tooLarge = ResponseTooLargeError.in(err);
  if (tooLarge) {
    const status = typeof e?.status === 'number' ? ` (HTTP ${e.status})` : '';
    return {
      reason: 'provider-protocol',
      retryable: false,
      detail: `${where} answered${status} more than maxResponseBytes=${tooLarge.limit} bytes${tooLarge.declared !== undefined ? ` (content-length ${tooLarge.declared})` : ''}; it was cut off and dropped`,
    };
  }
  if (typeof e?.status === 'number') {
    const status = e.status;
    const said = providerMessage(e);
    const tail = said ? `: ${scrub(said, [provider.cfg.apiKey])}` : '';
    if (status === 401 || status === 403) {
      return {
        reason: 'provider-auth',
        retryable: false,
        status,
        detail: `${where} refused the gateway's credentials (HTTP ${status}); check sampling.providers.${provider.name}.apiKey`,
      };
    }
    if (status === 429)
      return {
        reason: 'provider-rate-limited',
        retryable: true,
        status,
        retryAfterMs: retryAfterMs(e.headers),
        detail: `${where} is rate limiting (HTTP 429)${tail}`,
      };
    if (status >= 500 || status === 408 || status === 409)
      return {
        reason: 'provider-unavailable',
        retryable: true,
        status,
        retryAfterMs: retryAfterMs(e.headers),
        detail: `${where} failed (HTTP ${status})${tail}`,
      };
    return { reason: 'provider-rejected', retryable: false, status, detail: `${where} rejected the request (HTTP ${status})${tail}` };
  }
  if (err instanceof OpenAI.APIConnectionError || err instanceof Anthropic.APIConnectionError) {
    const timedOut = err instanceof OpenAI.APIConnectionTimeoutError || err instanceof Anthropic.APIConnectionTimeoutError;
    return {
      reason: 'provider-unavailable',
      retryable: true,
      detail: `${where} could not be reached (${timedOut ? 'timed out' : 'connection failed'})`,
    };
  }
  return {
    reason: 'provider-protocol',
    retryable: false,
    detail: `${where} answered something unusable: ${scrub(String(e?.message ?? err), [provider.cfg.apiKey])}`,
  };
}
