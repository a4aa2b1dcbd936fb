/**
 * Local stand-ins for LLM provider APIs, on 127.0.0.1 with an ephemeral port: OpenAI Chat
 * Completions (`POST /v1/chat/completions`) and Anthropic Messages (`POST /v1/messages`), streaming
 * off, with the documented request and response shapes. Each records every request it receives
 * (path, headers, JSON body) and answers with what the test's `reply` function returns (a JSON
 * body, or a body streamed from a lazy generator, such as {@link hugeAnswer}).
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request the fake provider received. */
export interface ReceivedRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  body: any;
  at: number;
}

/**
 * A body written chunk by chunk as the client reads it (chunked unless `headers` give a
 * content-length). Chunks are taken from `stream` only while the connection is open and the socket
 * is drained, so a lazily generated body of any size costs no memory; writing stops when the
 * client goes away. `onEnd` gets the bytes written and whether the whole body was.
 */
export interface StreamedReply {
  status?: number;
  headers?: Record<string, string>;
  stream: Iterable<Uint8Array>;
  onEnd?: (bytesWritten: number, complete: boolean) => void;
}

/** What the fake provider answers: a JSON body with a status and headers, a streamed body, or no answer at all. */
export type Reply = { status?: number; headers?: Record<string, string>; body: unknown } | StreamedReply | 'hang';

/** A running fake provider. */
export interface FakeLlm {
  kind: 'openai' | 'anthropic';
  /** The `baseUrl` to configure: `http://127.0.0.1:PORT/v1` (openai) or `http://127.0.0.1:PORT` (anthropic). */
  baseUrl: string;
  requests: ReceivedRequest[];
  /** Decides the answer to the n-th request (from 1); a promise holds the answer until it settles. */
  reply: (req: ReceivedRequest, n: number) => Reply | Promise<Reply>;
  close(): Promise<void>;
}

const PATHS = { openai: '/v1/chat/completions', anthropic: '/v1/messages' } as const;

/** Starts a fake provider of `kind`; requests to any other path get 404 in the provider's error shape. */
export async function startFakeLlm(kind: 'openai' | 'anthropic', reply: FakeLlm['reply']): Promise<FakeLlm> {
  const hanging = new Set<ServerResponse>();
  const fake: FakeLlm = {
    kind,
    baseUrl: '',
    requests: [],
    reply,
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of hanging) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = text ? JSON.parse(text) : undefined;
      } catch {
        body = text;
      }
      const received: ReceivedRequest = { method: req.method ?? '', path: req.url ?? '', headers: req.headers, body, at: Date.now() };
      if (req.method !== 'POST' || req.url !== PATHS[kind]) {
        return send(res, 404, {}, errorBody(kind, 404, 'not_found_error', `No route ${req.method} ${req.url}`));
      }
      fake.requests.push(received);
      hanging.add(res);
      res.on('close', () => hanging.delete(res));
      void Promise.resolve(fake.reply(received, fake.requests.length)).then((answer) => {
        if (answer === 'hang' || res.destroyed) return;
        if ('stream' in answer) void stream(res, answer);
        else send(res, answer.status ?? 200, answer.headers ?? {}, answer.body);
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  const port = (server.address() as AddressInfo).port;
  fake.baseUrl = kind === 'openai' ? `http://127.0.0.1:${port}/v1` : `http://127.0.0.1:${port}`;
  return fake;
}

function send(res: ServerResponse, status: number, headers: Record<string, string>, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text), ...headers });
  res.end(text);
}

async function stream(res: ServerResponse, reply: StreamedReply): Promise<void> {
  res.writeHead(reply.status ?? 200, { 'content-type': 'application/json', ...reply.headers });
  let written = 0;
  const open = () => !res.destroyed && !res.writableEnded;
  for (const chunk of reply.stream) {
    if (!open()) break;
    written += chunk.byteLength;
    if (!res.write(chunk)) {
      await new Promise<void>((resolve) => {
        const done = () => {
          res.off('drain', done);
          res.off('close', done);
          resolve();
        };
        res.on('drain', done);
        res.on('close', done);
      });
    }
  }
  const complete = open();
  if (complete) res.end();
  reply.onEnd?.(written, complete);
}

/**
 * A Chat Completions (`openai`) or Messages (`anthropic`) answer whose one text block holds
 * `textBytes` bytes of `fill` (a one-byte string, or a byte value), generated lazily in chunks of `chunkBytes` (one buffer, reused).
 */
export function* hugeAnswer(
  kind: 'openai' | 'anthropic',
  textBytes: number,
  fill: string | number = 'a',
  chunkBytes = 64 * 1024,
): Generator<Uint8Array> {
  const [head, tail] =
    kind === 'openai'
      ? [
          '{"id":"chatcmpl-huge","object":"chat.completion","created":0,"model":"gpt-test-2026-01-01","choices":[{"index":0,"message":{"role":"assistant","refusal":null,"content":"',
          '"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}',
        ]
      : [
          '{"id":"msg_huge","type":"message","role":"assistant","model":"claude-test-5-20261101","content":[{"type":"text","text":"',
          '"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}',
        ];
  yield Buffer.from(head);
  const chunk = Buffer.alloc(chunkBytes, fill);
  for (let left = textBytes; left > 0; left -= chunkBytes) yield left >= chunkBytes ? chunk : chunk.subarray(0, left);
  yield Buffer.from(tail);
}

/** The provider's error body: OpenAI `{error:{message,type,param,code}}`, Anthropic `{type:"error",error:{type,message}}`. */
export function errorBody(kind: 'openai' | 'anthropic', status: number, type: string, message: string): unknown {
  return kind === 'openai'
    ? { error: { message, type, param: null, code: status === 429 ? 'rate_limit_exceeded' : null } }
    : { type: 'error', error: { type, message }, request_id: 'req_test' };
}

/** A Chat Completions answer (one choice) with `content` and optional tool calls. */
export function openaiCompletion(opts: {
  content?: string | null;
  toolCalls?: { id: string; name: string; arguments: string }[];
  finish?: string;
  model?: string;
  /** Default: 12 prompt and 7 completion tokens; null: no `usage` field (as some OpenAI-compatible servers answer). */
  usage?: { prompt: number; completion: number } | null;
  extraChoice?: Record<string, unknown>;
}): unknown {
  const usage = opts.usage === undefined ? { prompt: 12, completion: 7 } : opts.usage;
  return {
    id: 'chatcmpl-test',
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: opts.model ?? 'gpt-test-2026-01-01',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: opts.content === undefined ? null : opts.content,
          refusal: null,
          ...(opts.toolCalls
            ? {
                tool_calls: opts.toolCalls.map((t) => ({ id: t.id, type: 'function', function: { name: t.name, arguments: t.arguments } })),
              }
            : {}),
        },
        logprobs: null,
        finish_reason: opts.finish ?? (opts.toolCalls ? 'tool_calls' : 'stop'),
        ...opts.extraChoice,
      },
    ],
    ...(usage
      ? { usage: { prompt_tokens: usage.prompt, completion_tokens: usage.completion, total_tokens: usage.prompt + usage.completion } }
      : {}),
  };
}

/** A Messages answer with `content` blocks. */
export function anthropicMessage(opts: {
  content: unknown[];
  stop?: string;
  stopSequence?: string | null;
  model?: string;
  usage?: { input: number; output: number; cacheRead?: number };
}): unknown {
  const usage = opts.usage ?? { input: 15, output: 9 };
  return {
    id: 'msg_test',
    type: 'message',
    role: 'assistant',
    model: opts.model ?? 'claude-test-5-20261101',
    content: opts.content,
    stop_reason: opts.stop ?? 'end_turn',
    stop_sequence: opts.stopSequence ?? null,
    usage: {
      input_tokens: usage.input,
      output_tokens: usage.output,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: usage.cacheRead ?? 0,
    },
  };
}
