/**
 * The one source of truth for `gateway.config.json`.
 *
 * `config/gateway.schema.json` is generated from {@link GatewayConfigSchema} by `npm run schema`;
 * configs name it in `$schema` so editors validate and complete them.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { ENV_PASSTHROUGH_PATTERN } from './child-env.js';
import { UpstreamApprovalsSchema } from './approvals-schema.js';
import { checkCredentials, CredentialsSectionSchema, UpstreamCredentialsSchema } from './credentials-schema.js';
import { federationMembers } from './federation-members.js';
import { isGlob, toolAllowed } from './globs.js';
import { LOG_LEVELS, toLogLevel, type LogLevel } from './log-levels.js';

export { LOG_LEVELS, toLogLevel, type LogLevel };

/** Refill rate of the per-caller rate limit when auth identifies callers and none is configured. */
export const DEFAULT_REQUESTS_PER_SECOND = 50;

/** Longest duration a Node timer can wait, in ms (2^31 - 1, about 24.8 days); a longer one would fire at once. */
const MAX_TIMER_MS = 2_147_483_647;
const tooLong = `at most ${MAX_TIMER_MS} ms (about 24.8 days), the longest a timer can wait`;
const ms = (what: string) => z.number().int().nonnegative().max(MAX_TIMER_MS, tooLong).describe(`${what}, in milliseconds`);
const positiveMs = (what: string) => z.number().int().positive().max(MAX_TIMER_MS, tooLong).describe(`${what}, in milliseconds`);

/** Legacy protocol revisions an upstream may speak, oldest first. */
export const LEGACY_REVISIONS = ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25'] as const;

/** Name of an upstream: it becomes the path segment of `POST /mcp/NAME`. */
export const UpstreamNameSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.-]*$/, 'upstream names use letters, digits, ".", "_" and "-" and start with a letter or digit');

const TimeoutsSchema = z
  .object({
    connectMs: positiveMs(
      'Time to start the upstream in total (spawn or connect, and `initialize`), from when its start begins (not while it waits its turn). With protocol auto it includes the era probe (over HTTP at most half of it, at most 5 s; over stdio the whole budget, and a legacy child goes on as the first session); with protocol 2026-07-28 it bounds a `server/discover` sent before the first call. Past it: -32603 timeout, and a stdio child is stopped (unless in its first start, see firstStartMs)',
    ).default(15_000),
    requestMs: positiveMs(
      'Longest silence from the upstream while it works on one call: progress notifications, server-initiated requests, delivered answers and legacy task status updates reset it; time waiting for the client (or for a sampling provider) does not count. For list methods and `completion/complete`, the plain timeout of the request. Past it: -32603 timeout',
    ).default(60_000),
    totalMs: positiveMs('Cap on the upstream working time of one request, not counting time parked waiting for the client').default(
      600_000,
    ),
    queueMs: positiveMs(
      'Longest wait for a free upstream session when all `maxSessions` are busy, or for a turn to start a new one when `maxStartingSessions` are starting; then -32603 busy',
    ).default(10_000),
    firstStartMs: positiveMs(
      'stdio only: the start budget, instead of connectMs, until one start of the upstream succeeded, for a command that installs what it runs. Default: 180000 for npx, pnpx, bunx, uvx, npm exec, pnpm dlx, yarn dlx, bun x, pipx run, uv tool run (also first in sh -c, cmd /c, powershell -Command); else connectMs. Meanwhile starts go one at a time, and a child that has said nothing is never killed: given up, it is kept for the next call (protocol auto or 2026-07-28), or its stdin is closed and it finishes the install (an install cut off midway leaves a broken cache)',
    ).optional(),
  })
  .strict()
  .describe('Timeouts for this upstream, in milliseconds');

const RootSchema = z
  .object({
    uri: z.string().min(1).describe('The root URI, for example file:///srv/data'),
    name: z.string().optional().describe('Its name'),
  })
  .strict();

const InputModeSchema = z
  .enum(['park', 'replay', 'auto'])
  .describe(
    'park: the upstream call waits, on its session, for the retry. replay: the call is cancelled when it asks, and the retry runs it again, answering from the sealed requestState (no session held, any replica; see docs/replicas.md). auto: replay tools annotated readOnlyHint or idempotentHint, prompts/get and resources/read; park the rest.',
  );

/** The kinds of server-initiated requests the gateway can relay to clients as input requests (`input.allow`). */
export const INPUT_KINDS = ['elicitation', 'sampling', 'roots'] as const;

const InputPolicySchema = z
  .object({
    allow: z
      .array(z.enum(INPUT_KINDS))
      .default([...INPUT_KINDS])
      .describe(
        'Server-initiated request kinds the gateway relays to clients as input requests. A kind left out is never declared to the upstream, whatever the client supports.',
      ),
    batchWindowMs: ms(
      'Longest wait for further concurrent server-initiated requests before answering input_required (or showing a task as input_required); the batch closes sooner, once the upstream session has been quiet (see batchQuietMs)',
    ).default(15),
    batchQuietMs: ms(
      "Upstream silence a batch of input requests waits for after the session's last message, beside two quiet event-loop turns. The gateway raises it per upstream as it learns (to 5 ms once the upstream sent several requests at once, to twice the gap plus 5 ms once it split a batch); set it (e.g. 5) so that even a first batch is never split on a loaded host; batchWindowMs caps the wait",
    ).default(0),
    mode: InputModeSchema.default('park'),
    tools: z
      .record(
        z.string(),
        z.object({ mode: InputModeSchema.describe('park, replay or auto for tools/call of this tool (as above)') }).strict(),
      )
      .default({})
      .describe('Per-tool input settings by tool name (mode overrides the upstream mode)'),
    maxReplayStateBytes: z
      .number()
      .int()
      .positive()
      .default(32_768)
      .describe(
        'Largest size of the answers a replay-mode requestState carries, in bytes (JSON); beyond it the call fails with -32603 replay-limit',
      ),
    allowSecrets: z
      .boolean()
      .default(false)
      .describe(
        'Forward forms that ask for secrets (a property with format "password" or named like password, passphrase, secret, token, api key, private key, credential). Off: the upstream gets "decline" and the event is logged.',
      ),
  })
  .strict()
  .describe('Which server-initiated requests become input requests for the client');

const CacheHintsSchema = z
  .object({
    ttlMs: ms('ttlMs hint put on server/discover, list results and resources/read results').default(0),
    scope: z
      .enum(['public', 'private'])
      .default('private')
      .describe(
        'cacheScope put on the same results. A resources/read that carried a requestState always gets ttlMs 0 and cacheScope private',
      ),
    maxEntries: z
      .number()
      .int()
      .min(0)
      .default(1000)
      .describe('Most list and server/discover results of a 2026-07-28 upstream kept for their ttlMs (see docs/protocol.md); 0 keeps none'),
  })
  .strict();

const ToolTaskSchema = z
  .object({
    taskAfterMs: ms('Overrides the upstream taskAfterMs for this tool').optional(),
    required: z
      .boolean()
      .default(false)
      .describe('The tool is only served as a task: a client that did not declare the tasks extension gets 400 / -32021'),
  })
  .strict();

const TasksSchema = z
  .object({
    taskAfterMs: ms(
      'For a client that declared the tasks extension, a tools/call still working (not waiting for input) after this long is answered with a CreateTaskResult (0: always a task; see docs/tasks.md)',
    ).default(10_000),
    ttlMs: positiveMs(
      'How long a task record is kept after creation (its ttlMs); a task still running then is cancelled upstream. Also the ttl asked of legacy upstream tasks',
    ).default(3_600_000),
    pollIntervalMs: positiveMs('pollIntervalMs suggested to clients').default(1000),
    tools: z.record(z.string(), ToolTaskSchema).default({}).describe('Per-tool task settings by tool name'),
  })
  .strict()
  .describe('Tasks extension (io.modelcontextprotocol/tasks) for this upstream');

/** Who answers a legacy upstream's `sampling/createMessage` (see docs/sampling.md). */
const SAMPLING_MODES = ['client', 'provider', 'fallback'] as const;
/** One of {@link SAMPLING_MODES}. */
export type SamplingMode = (typeof SAMPLING_MODES)[number];

const SamplingModeSchema = z
  .enum(SAMPLING_MODES)
  .describe(
    'client: the client answers (an input_required round, or a relayed request for legacy clients). provider: the gateway answers through its configured LLM provider. fallback: the provider answers when the client cannot (it did not declare sampling, or sampling.tools for a request with tools). With provider or fallback, upstream sessions declare sampling (with tools) whatever the client declared (see docs/sampling.md)',
  );

/** Names of providers and model aliases. */
const SamplingNameSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9_.:-]*$/, 'names use letters, digits, ".", "_", ":" and "-" and start with a letter or digit');

const ProviderModelSchema = z
  .object({
    model: z.string().min(1).describe('The model id sent to the provider'),
    hints: z
      .array(z.string().min(1))
      .default([])
      .describe(
        'Names a modelPreferences hint may match besides the alias and the model id (a hint matches when it is a case-insensitive substring of one of them)',
      ),
    cost: z.number().min(0).max(1).optional().describe('Relative cost, 0 (cheapest) to 1 (most expensive); weighs against costPriority'),
    speed: z.number().min(0).max(1).optional().describe('Relative speed, 0 (slowest) to 1 (fastest); weighs with speedPriority'),
    intelligence: z
      .number()
      .min(0)
      .max(1)
      .optional()
      .describe('Relative capability, 0 (least) to 1 (most); weighs with intelligencePriority'),
    image: z.boolean().default(true).describe('The model accepts image content in user messages'),
    audio: z
      .boolean()
      .default(false)
      .describe('The model accepts audio content in user messages (kind openai only: Chat Completions input_audio, wav or mp3)'),
  })
  .strict();

/** An http:// or https:// URL (the only schemes the gateway can reach an upstream, a JWKS or a replica over). */
const httpUrl = () => z.url({ protocol: /^https?$/, error: 'expected an http:// or https:// URL' });

const SamplingProviderSchema = z
  .object({
    kind: z
      .enum(['openai', 'anthropic'])
      .describe(
        'openai: an OpenAI-compatible Chat Completions API (OpenAI, vLLM, Ollama, llama.cpp, …); anthropic: the Anthropic Messages API',
      ),
    baseUrl: z
      .url()
      .optional()
      .describe(
        'API base URL. Default: https://api.openai.com/v1 (openai) or https://api.anthropic.com (anthropic); OPENAI_BASE_URL and ANTHROPIC_BASE_URL are not read',
      ),
    apiKey: z
      .string()
      .min(1)
      .optional()
      .describe(
        'The API key, given only as ${ENV_VAR} (a key written into the file is refused); never logged. Required for anthropic; optional for openai (a local server may need none)',
      ),
    models: z
      .record(SamplingNameSchema, ProviderModelSchema)
      .refine((m) => Object.keys(m).length > 0, 'at least one model is required')
      .describe('Models the gateway may use, by alias'),
    defaultModel: z.string().min(1).describe('Alias (a key of models) used when no modelPreferences hint or priority picks another'),
    maxTokens: z.number().int().positive().default(4096).describe("Cap on a request's maxTokens: a larger request is sent with this value"),
    timeoutMs: positiveMs(
      'Longest time for one sampling request, from its arrival to its answer: waiting for a slot, every attempt and every backoff',
    ).default(60_000),
    maxConcurrent: z.number().int().positive().default(4).describe('Most requests to this provider in flight at once'),
    maxQueued: z
      .number()
      .int()
      .nonnegative()
      .default(64)
      .describe('Most requests waiting for a slot when maxConcurrent are in flight; beyond it a request is refused at once'),
    maxRetries: z
      .number()
      .int()
      .min(0)
      .max(10)
      .default(2)
      .describe(
        'Retries after a 408, 409, 429, 5xx or connection failure, with backoff (Retry-After when the provider sends one), as long as they fit in timeoutMs',
      ),
    maxResponseBytes: z
      .number()
      .int()
      .positive()
      .default(4 * 1024 * 1024)
      .describe(
        "Largest provider response body, in bytes, counted while it streams (an error answer's too): a larger one is aborted and the request fails with provider-protocol. The result relayed to the upstream is held to it as well",
      ),
    maxTokensField: z
      .enum(['max_completion_tokens', 'max_tokens'])
      .optional()
      .describe(
        'kind openai only (an error with anthropic): the request field that carries maxTokens (default max_completion_tokens; some OpenAI-compatible servers only read max_tokens)',
      ),
  })
  .strict()
  .superRefine((p, ctx) => {
    if (!(p.defaultModel in p.models))
      ctx.addIssue({
        code: 'custom',
        path: ['defaultModel'],
        message: `'${p.defaultModel}' is not one of models (${Object.keys(p.models).join(', ')})`,
      });
    if (p.kind === 'anthropic') {
      if (p.apiKey === undefined)
        ctx.addIssue({ code: 'custom', path: ['apiKey'], message: 'an anthropic provider needs an apiKey (as ${ENV_VAR})' });
      if (p.maxTokensField !== undefined)
        ctx.addIssue({ code: 'custom', path: ['maxTokensField'], message: 'maxTokensField applies to kind openai only' });
      for (const [alias, m] of Object.entries(p.models)) {
        if (m.audio)
          ctx.addIssue({ code: 'custom', path: ['models', alias, 'audio'], message: 'the Anthropic Messages API takes no audio' });
      }
    }
  });

const UpstreamSamplingSchema = z
  .object({
    mode: SamplingModeSchema.default('client'),
    provider: z
      .string()
      .optional()
      .describe(
        'Name of the provider (a key of sampling.providers) that answers in provider and fallback modes; required when any mode is provider or fallback',
      ),
    maxTokens: z
      .number()
      .int()
      .positive()
      .optional()
      .describe("Cap on a request's maxTokens for this upstream (the provider's cap applies too)"),
    budget: z
      .object({
        windowMs: positiveMs(
          'Length of the window the budgets count over: sliding, per replica, with the in-memory store; fixed (opened by the first tokens counted) and fleet-wide on Redis',
        ).default(3_600_000),
        tokens: z
          .number()
          .int()
          .positive()
          .optional()
          .describe(
            'Most tokens (input + output) the provider may spend for this upstream per window, all principals together; over it the request gets -32603 with data.reason budget. Unset: no limit',
          ),
        tokensPerPrincipal: z
          .number()
          .int()
          .positive()
          .optional()
          .describe('Most tokens (input + output) the provider may spend for one principal on this upstream per window'),
      })
      .strict()
      .prefault({})
      .describe('Token budgets of the provider answers; a request over one gets a JSON-RPC error'),
    tools: z
      .record(
        z.string(),
        z.object({ mode: SamplingModeSchema.describe('Who answers sampling for tools/call of this tool (modes as above)') }).strict(),
      )
      .default({})
      .describe('Per-tool mode by tool name (tools/call only); overrides mode'),
  })
  .strict()
  .describe("Who answers this upstream's sampling/createMessage (legacy upstreams)");

const ToolPatternsSchema = z.array(z.string().min(1, 'a tool pattern is a name or a glob, not empty'));

const ToolPolicySchema = z
  .object({
    allow: ToolPatternsSchema.optional().describe(
      'Only tools whose name matches one of these patterns are served (names or globs: * any run of characters, ? one character). Unset: every tool',
    ),
    deny: ToolPatternsSchema.default([]).describe('Tools whose name matches one of these patterns are not served; wins over allow'),
  })
  .strict()
  .describe(
    'Which of the upstream tools the gateway serves. A tool not served is left out of tools/list and its tools/call gets -32602 "Unknown tool", on /mcp/NAME, on the federated /mcp and in legacy client sessions',
  );

const UpstreamRateSchema = z
  .object({
    requestsPerSecond: z
      .number()
      .positive()
      .describe(
        'Requests per second per caller (keyed like the top-level limits), on /mcp/NAME and the federated /mcp together; see docs/protocol.md#limits',
      ),
    burst: z
      .number()
      .int()
      .positive()
      .optional()
      .describe('Requests at once, as the top-level limits.rateLimit.burst; default requestsPerSecond rounded up'),
  })
  .strict();

const UpstreamLimitsSchema = z
  .object({
    rateLimit: UpstreamRateSchema.optional().describe(
      "Rate of each caller's requests to this upstream (every method), in fixed windows like limits.rateLimit",
    ),
    tools: z
      .record(z.string(), UpstreamRateSchema)
      .default({})
      .describe("Rate of each caller's tools/call of a tool, by tool name (exact)"),
  })
  .strict()
  .describe(
    'Per-caller rate limits of this upstream and its tools, on top of limits.rateLimit, on /mcp/NAME and the federated /mcp (the requests routed to this upstream), legacy sessions included; fleet-wide with store redis; beyond one a request gets 429 with Retry-After',
  );

const upstreamCommon = {
  tools: ToolPolicySchema.prefault({}),
  limits: UpstreamLimitsSchema.prefault({}),
  credentials: UpstreamCredentialsSchema,
  approvals: UpstreamApprovalsSchema.prefault({}),
  required: z
    .boolean()
    .default(false)
    .describe(
      'GET /readyz answers 503 while this upstream cannot be started or reached, and while it is starting and no session of it has opened yet (a first start, an install maybe, included); the gateway starts it at once',
    ),
  tasks: TasksSchema.prefault({}),
  timeouts: TimeoutsSchema.prefault({}),
  maxParked: z
    .number()
    .int()
    .positive()
    .default(1000)
    .describe(
      'Most calls of this upstream parked waiting for client input at once; a call that would park beyond it (or beyond limits.maxParked) is cancelled upstream and gets -32603 parked-limit',
    ),
  maxSessions: z
    .number()
    .int()
    .positive()
    .default(16)
    .describe(
      'Most upstream sessions open at once for this upstream, idle, leased or opening (each holds one call in flight or parked, or up to maxCallsPerSession on a Streamable HTTP upstream that allows it; a parked call or a running task keeps its place until it ends). Legacy client sessions are not counted here (see legacySessions)',
    ),
  maxStartingSessions: z
    .number()
    .int()
    .positive()
    .optional()
    .describe(
      'Most new sessions of this upstream starting at once; further ones wait their turn in order (up to timeouts.queueMs), each start getting its connectMs from when it begins, so a burst of calls on a busy host does not time out all together. Default: 4 on stdio, no bound on HTTP',
    ),
  maxSessionsPerPrincipal: z
    .number()
    .int()
    .positive()
    .default(8)
    .describe(
      'Most sessions of this upstream one principal may hold at once (with auth apiKeys or jwt; with auth none every caller is anonymous and only maxSessions applies); beyond it a new call waits up to queueMs for one of them, then gets -32603 busy',
    ),
  maxParkedSessions: z
    .number()
    .int()
    .nonnegative()
    .optional()
    .describe(
      'Most parked calls of this upstream holding a session of their own (stdio, HTTP+SSE, or Streamable HTTP calls not on a shared session), so other sessions stay free; beyond it a call that asks for input is cancelled upstream with -32603 parked-limit. At most maxSessions. Default: half of maxSessions (at least 1)',
    ),
  maxParkedSessionsPerPrincipal: z
    .number()
    .int()
    .nonnegative()
    .optional()
    .describe(
      "With auth apiKeys or jwt: most such parked calls of one principal, so one caller's abandoned forms leave it sessions for plain calls. At most maxSessionsPerPrincipal. Default: half of the lower of maxSessionsPerPrincipal and maxParkedSessions (at least 1)",
    ),
  maxCallsPerSession: z
    .number()
    .int()
    .positive()
    .default(16)
    .describe(
      'Streamable HTTP: most calls one session carries at once (parked ones included), once the upstream has shown it sends server-initiated requests on the stream of their call; until then, after one on its GET stream, on stdio and HTTP+SSE, and for legacy upstream tasks, a session carries one call. 1: always one',
    ),
  idleSessionMs: positiveMs('An idle upstream session is closed after this long').default(300_000),
  roots: z
    .array(RootSchema)
    .default([])
    .describe(
      'Roots the gateway answers itself: a `roots/list` the upstream sends outside any call (for example right after `initialized`), or during a call of a client that did not declare roots. When non-empty, every upstream session declares the roots capability. A client that declares roots is asked for its own.',
    ),
  protocol: z
    .enum(['auto', 'legacy', '2026-07-28'])
    .default('auto')
    .describe(
      "The era the upstream speaks. auto: ask server/discover at first use and fall back to initialize on a JSON-RPC error (over HTTP also on an HTTP 4xx or 5 s of silence; a stdio server that never answers unknown requests needs legacy), remember the answer (logged as upstream era detected; not an HTTP 401/403), and ask again after a call failed unreachable (initialize refused included), crashed, or, taken for 2026-07-28, protocol (a session-based legacy server's HTTP 4xx). HTTP+SSE upstreams are always legacy.",
    ),
  protocolVersion: z
    .enum(LEGACY_REVISIONS)
    .optional()
    .describe(
      'Legacy revision to ask for in `initialize`, and the only one whose client capability fields the gateway declares. Unset: ask for the newest; once the upstream answered, later sessions declare only the fields of the revision it negotiated.',
    ),
  input: InputPolicySchema.prefault({}),
  sampling: UpstreamSamplingSchema.prefault({}),
  cache: CacheHintsSchema.prefault({}).describe('Caching hints (SEP-2549) for cacheable results'),
};

const StdioUpstreamSchema = z
  .object({
    transport: z.literal('stdio'),
    command: z.string().min(1).describe('Executable to spawn'),
    args: z
      .array(z.string())
      .default([])
      .describe("Its arguments; relative paths resolve against cwd, else the gateway's working directory"),
    env: z
      .record(z.string(), z.string())
      .default({})
      .describe(
        "Environment for the child, on top of the safe set taken from the gateway's environment (on Unix HOME, LOGNAME, PATH, SHELL, TERM, USER, LANG, TMPDIR) and envPassthrough; wins over both. A value may be ${NAME} to copy or rename a variable",
      ),
    envPassthrough: z
      .array(z.string().regex(ENV_PASSTHROUGH_PATTERN, 'give a variable name (GITHUB_TOKEN) or a name prefix followed by * (AWS_*)'))
      .default([])
      .describe(
        "Variables of the gateway's own environment passed on to the child, by name (GITHUB_TOKEN) or prefix (AWS_*; a bare * is refused; names compare case-insensitively on Windows); the rest of it is not passed",
      ),
    cwd: z
      .string()
      .optional()
      .describe(
        "Working directory of the child; relative paths are resolved against the config file; must be an existing directory at start (exit code 2 otherwise). Unset: the gateway's working directory",
      ),
    ...upstreamCommon,
  })
  .strict();

/** The fields of both HTTP transports (Streamable HTTP and the legacy HTTP+SSE). */
const httpUpstreamFields = {
  url: httpUrl().describe(
    'The upstream endpoint, http:// or https://: Streamable HTTP (for example http://127.0.0.1:3001/mcp), or with transport sse the HTTP+SSE endpoint (2024-11-05, for example http://127.0.0.1:3001/sse)',
  ),
  headers: z
    .record(z.string(), z.string())
    .default({})
    .describe('Static headers sent on every upstream HTTP request, for example {"Authorization": "Bearer ${UPSTREAM_TOKEN}"}'),
  forwardAuthorization: z
    .boolean()
    .default(false)
    .describe("Send the client's own Authorization bearer token to this upstream (never logged)"),
  ...upstreamCommon,
};

const HttpUpstreamSchema = z.object({ transport: z.literal('streamable-http'), ...httpUpstreamFields }).strict();

const SseUpstreamSchema = z.object({ transport: z.literal('sse'), ...httpUpstreamFields }).strict();

const UpstreamConfigSchema = z
  .discriminatedUnion('transport', [StdioUpstreamSchema, HttpUpstreamSchema, SseUpstreamSchema])
  .describe('How the upstream is reached: stdio (a child process), streamable-http, or sse (the legacy HTTP+SSE transport)');

const StateKeySchema = z
  .object({
    kid: z.string().min(1).max(64).describe('Key id, written in the JWE header of each sealed requestState'),
    secret: z
      .string()
      .min(32, 'a requestState secret needs at least 32 characters')
      .describe('Secret the AES-256-GCM key is derived from (HKDF-SHA256); write it as ${MRTR_STATE_SECRET} to keep it out of the file'),
  })
  .strict();

const ApiKeySchema = z
  .object({
    principal: z.string().min(1).describe('Name of the caller this key identifies'),
    sha256: z
      .string()
      .regex(/^[0-9a-fA-F]{64}$/, 'sha256 must be 64 hex digits')
      .optional()
      .describe('SHA-256 (hex) of the key; the key itself is not stored'),
    key: z
      .string()
      .min(16, 'an API key needs at least 16 characters')
      .optional()
      .describe('The key itself, normally given as ${ENV_VAR}; exactly one of sha256 and key'),
  })
  .strict()
  .refine((k) => (k.sha256 === undefined) !== (k.key === undefined), 'give exactly one of sha256 or key');

const AuthSchema = z
  .discriminatedUnion('mode', [
    z
      .object({
        mode: z.literal('none'),
        allowAnonymous: z.boolean().default(false).describe('Allow serving without auth on a non-loopback address'),
      })
      .strict(),
    z
      .object({
        mode: z.literal('apiKeys'),
        keys: z
          .array(ApiKeySchema)
          .min(1)
          .describe('The accepted keys; each key may appear once (under two principals it would always be the first)'),
      })
      .strict()
      .superRefine((a, ctx) => {
        // A key given twice would always be its first principal: the second could never call as itself.
        const seen = new Map<string, number>();
        a.keys.forEach((k, i) => {
          const digest =
            k.sha256 !== undefined
              ? k.sha256.toLowerCase()
              : k.key !== undefined
                ? createHash('sha256').update(k.key, 'utf8').digest('hex')
                : undefined;
          if (digest === undefined) return;
          const first = seen.get(digest);
          if (first === undefined) seen.set(digest, i);
          else
            ctx.addIssue({
              code: 'custom',
              path: ['keys', i],
              message: `the same key as auth.keys[${first}] (principal '${a.keys[first]!.principal}'): each key must identify one principal; give '${k.principal}' a key of its own`,
            });
        });
      }),
    z
      .object({
        mode: z.literal('jwt'),
        issuer: z.string().min(1).describe('Expected iss; also listed as the authorization server in the protected resource metadata'),
        audience: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).describe('Expected aud'),
        jwksUrl: httpUrl().optional().describe("The issuer's JWKS URL (fetched and cached); exactly one of jwksUrl and jwksFile"),
        jwksFile: z.string().optional().describe('Local JWKS file; relative paths are resolved against the config file'),
        requiredScopes: z
          .array(z.string())
          .default([])
          .describe('Scopes every token must carry (scope or scp claim); listed as scopes_supported in the resource metadata'),
        clockToleranceSec: z.number().int().nonnegative().default(30).describe('Allowed clock skew, in seconds'),
      })
      .strict()
      .refine((j) => (j.jwksUrl === undefined) !== (j.jwksFile === undefined), 'give exactly one of jwksUrl or jwksFile'),
  ])
  .describe('Who may call: none (loopback only unless allowAnonymous), apiKeys, or jwt (see docs/security.md)');

/** A tool and prompt name prefix on the federated endpoint: the characters of tool names, possibly none. */
const FederationPrefixSchema = z
  .string()
  .max(64)
  .regex(/^[A-Za-z0-9_.-]*$/, 'a prefix uses letters, digits, "_", "-" and "." (or is empty, for none)');

const FederationSchema = z
  .object({
    enabled: z
      .boolean()
      .default(false)
      .describe('Serve the federated endpoint POST /mcp: the federated upstreams together, beside POST /mcp/NAME'),
    upstreams: z
      .array(UpstreamNameSchema)
      .min(1)
      .optional()
      .describe('The upstreams served on /mcp, in this order (lists are merged in it). Unset: every upstream, in config order'),
    prefix: z
      .enum(['name', 'none'])
      .default('name')
      .describe(
        'Default prefix of tool and prompt names on /mcp. name: the upstream name and "_" (github_search). none: the names as the upstream gives them, for upstreams whose names are unique',
      ),
    prefixes: z
      .record(UpstreamNameSchema, FederationPrefixSchema)
      .default({})
      .describe('Prefix per federated upstream, over prefix ("" for none). Two upstreams may not share a non-empty prefix'),
  })
  .strict()
  .describe(
    'One endpoint for a fleet: POST /mcp serves several upstreams together, tool and prompt names prefixed per upstream, resources routed by URI',
  );

export const GatewayConfigSchema = z
  .object({
    $schema: z.string().optional(),
    listen: z
      .object({
        host: z
          .string()
          .min(1)
          .default('127.0.0.1')
          .describe('Address to bind (--host or HOST wins); a non-loopback address needs auth (or auth.allowAnonymous)'),
        port: z.number().int().min(0).max(65535).default(8787).describe('Port (--port or PORT wins); 0: any free port'),
      })
      .strict()
      .prefault({}),
    auth: AuthSchema.default({ mode: 'none', allowAnonymous: false }),
    http: z
      .object({
        allowedHosts: z
          .array(z.string().min(1))
          .optional()
          .describe(
            'Host header values accepted (host or host:port); a list replaces the default. Default: localhost, 127.0.0.1, [::1] and the listen host',
          ),
        allowedOrigins: z
          .array(z.string().min(1))
          .optional()
          .describe(
            'Origin header values accepted when present (exact origins). Browser pages from these origins also get CORS: preflights are answered and responses carry Access-Control-Allow-Origin. Default: http(s) origins on localhost, 127.0.0.0/8 and [::1]',
          ),
        publicUrl: httpUrl()
          .optional()
          .describe(
            'External base URL of the gateway, used in resource metadata, WWW-Authenticate, and the consent links and OAuth redirect URI (<publicUrl>/oauth/callback) of oauth upstreams (default there: the address the gateway listens on)',
          ),
      })
      .strict()
      .prefault({})
      .describe('Front door: DNS-rebinding protection, CORS and public URL'),
    shutdownGraceMs: z
      .number()
      .int()
      .nonnegative()
      .max(MAX_TIMER_MS, tooLong)
      .default(8000)
      .describe(
        'On SIGTERM/SIGINT, the whole stop in milliseconds, from the signal to exit code 0: requests, parked calls and tasks may finish until 2.5 s (at most half of it) before its end, the rest goes to ending upstream sessions and children. Keep it under the stop timeout of what runs the gateway (Docker 10 s, Kubernetes terminationGracePeriodSeconds 30 s by default)',
      ),
    logLevel: z
      .preprocess((v) => (typeof v === 'string' ? (toLogLevel(v) ?? v) : v), z.enum(LOG_LEVELS))
      .optional()
      .describe('Log level, in any case; default info (LOG_LEVEL overrides; an unknown LOG_LEVEL value stops the start with exit code 2)'),
    credentials: CredentialsSectionSchema,
    requestState: z
      .object({
        keys: z
          .array(StateKeySchema)
          .default([])
          .describe(
            'Keys sealing requestState (see docs/security.md). The first key seals; every key opens, so to rotate put the new key first and keep the old one until its states expired. Empty: a key is generated at start (a warning is logged) and states die with the process.',
          ),
        ttlMs: positiveMs(
          "Lifetime of a sealed requestState and of the parked call behind it; also how long a legacy session's approval form waits for its answer",
        ).default(600_000),
      })
      .strict()
      .prefault({}),
    limits: z
      .object({
        maxBodyBytes: z.number().int().positive().default(1_048_576).describe('Largest accepted request body, in bytes'),
        maxParked: z
          .number()
          .int()
          .positive()
          .default(10_000)
          .describe('Most calls parked waiting for client input at once, over all upstreams'),
        maxJsonDepth: z.number().int().positive().default(64).describe('Deepest nesting of arrays and objects accepted in a request body'),
        requestReadTimeoutMs: z
          .number()
          .int()
          .positive()
          .max(MAX_TIMER_MS, tooLong)
          .default(30_000)
          .describe(
            'Longest time to receive a whole request (headers and body) from a client, in milliseconds, enforced to within about 500 ms; a client past it gets 408 and its connection is closed',
          ),
        rateLimit: z
          .object({
            requestsPerSecond: z
              .number()
              .positive()
              .optional()
              .describe(
                'Long-run rate, in requests per second, per caller: per principal with auth apiKeys or jwt (default 50), per client address with auth none (default: no rate limit). Counted in fixed windows (see burst); fleet-wide with store redis, else per replica',
              ),
            burst: z
              .number()
              .int()
              .positive()
              .default(100)
              .describe(
                'Requests a caller may send at once: each window lasts burst / requestsPerSecond seconds (rounded, at least 1) and admits requestsPerSecond × that many requests',
              ),
          })
          .strict()
          .prefault({})
          .describe('Rate limit per caller; a request over it gets 429 with Retry-After'),
        maxConcurrentPerPrincipal: z
          .number()
          .int()
          .positive()
          .default(64)
          .describe(
            'Most requests of one caller in flight at once: per principal with auth apiKeys or jwt, per client address with auth none; beyond it a request gets 429. Fleet-wide with store redis, else per replica',
          ),
        maxListensPerPrincipal: z
          .number()
          .int()
          .positive()
          .default(64)
          .describe(
            'Most subscriptions/listen streams one caller holds open at once (keyed like maxConcurrentPerPrincipal), per replica; beyond it a listen gets 429',
          ),
      })
      .strict()
      .prefault({}),
    store: z
      .discriminatedUnion('kind', [
        z.object({ kind: z.literal('memory') }).strict(),
        z
          .object({
            kind: z.literal('redis'),
            url: z
              .string()
              .regex(/^rediss?:\/\//, 'a redis:// or rediss:// URL')
              .describe('Redis or Valkey URL, normally ${REDIS_URL}'),
            keyPrefix: z.string().default('mrtr:').describe('Prefix of every key and channel the gateway uses'),
            connectTimeoutMs: positiveMs('Longest wait for a connection to Redis').default(2000),
          })
          .strict(),
      ])
      .default({ kind: 'memory' })
      .describe(
        'Where task records, spent requestState ids and the replica registry live: memory (one replica) or redis (several replicas)',
      ),
    replicas: z
      .object({
        secret: z
          .string()
          .min(32, 'a replica secret needs at least 32 characters')
          .optional()
          .describe('Shared secret of the internal hop between replicas (normally ${REPLICA_SECRET}); required with store.kind redis'),
        advertiseUrl: httpUrl()
          .optional()
          .describe(
            'Base URL other replicas reach this one at (default: http://<listen address>:<port>; a replica listening on 0.0.0.0 or :: with a Redis store and none logs a warning)',
          ),
        heartbeatMs: positiveMs("Interval of this replica's heartbeat in the store").default(1000),
        deadAfterMs: positiveMs(
          'A replica whose heartbeat is older than this is gone: its calls fail at once and its tasks read failed',
        ).default(3000),
      })
      .strict()
      .prefault({})
      .describe(
        'Several replicas sharing a store: the internal hop that forwards retries and task commands to the replica holding the call',
      ),
    legacySessions: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe(
            'Serve legacy clients (2024-11-05 … 2025-11-25): an initialize without the 2026-07-28 envelope opens a session (Mcp-Session-Id) on POST /mcp/NAME that owns one upstream session and relays every message both ways; GET /mcp/NAME/sse serves the old HTTP+SSE transport. Off: such an initialize gets 404 / -32601',
          ),
        idleMs: positiveMs(
          'A legacy session with no message from its client and no request in flight for this long ends, and its upstream session with it',
        ).default(600_000),
        maxSessions: z
          .number()
          .int()
          .positive()
          .default(1000)
          .describe('Most legacy sessions open at once over all upstreams (503 beyond)'),
        maxSessionsPerPrincipal: z
          .number()
          .int()
          .positive()
          .default(32)
          .describe(
            'Most legacy sessions one caller may hold at once (per principal with auth apiKeys or jwt, per client address with auth none; 429 beyond)',
          ),
        eventsPerSession: z
          .number()
          .int()
          .nonnegative()
          .default(1000)
          .describe('SSE events kept per session so a client can resume a stream with Last-Event-ID (0: no resumption)'),
        retryMs: positiveMs(
          'The SSE `retry` field of the priming event that opens each resumable stream (clients that negotiated 2025-11-25): how long the client waits before it resumes a closed stream',
        ).default(1000),
        closeStreamAfterMs: z
          .number()
          .int()
          .nonnegative()
          .max(MAX_TIMER_MS, tooLong)
          .default(0)
          .describe(
            'SSE polling (SEP-1699), in milliseconds: a request of a 2025-11-25 client still in flight this long has its SSE stream closed, once; the client resumes it with Last-Event-ID after retryMs. Needs eventsPerSession > 0. 0 (default): off, since a client that claims 2025-11-25 but does not resume would lose its result',
          ),
      })
      .strict()
      .refine((l) => l.closeStreamAfterMs === 0 || l.eventsPerSession > 0, {
        message: 'closeStreamAfterMs needs eventsPerSession > 0: a closed stream can only be resumed from stored events',
        path: ['closeStreamAfterMs'],
      })
      .prefault({})
      .describe('Sessions of legacy clients, each owning one upstream session'),
    sampling: z
      .object({
        providers: z
          .record(SamplingNameSchema, SamplingProviderSchema)
          .default({})
          .describe(
            "LLM providers by name (letters, digits, '.', '_', ':', '-'); nothing is sent to any until an upstream's sampling.mode names one",
          ),
      })
      .strict()
      .prefault({})
      .describe('LLM providers through which the gateway answers sampling/createMessage itself (see docs/sampling.md)'),
    tasks: z
      .object({
        maxRecords: z
          .number()
          .int()
          .positive()
          .default(100_000)
          .describe('Most task records kept in memory over all upstreams; the least recently used are dropped beyond it'),
        maxRecordsPerPrincipal: z
          .number()
          .int()
          .positive()
          .default(10_000)
          .describe(
            'Most task records one caller holds at once, per replica with the in-memory store, fleet-wide on Redis (running or finished, until their ttlMs ends); beyond it the caller gets no new task (its calls are answered in the request; a tool that runs only as a task gets -32603 busy)',
          ),
        maxResultBytesPerPrincipal: z
          .number()
          .int()
          .positive()
          .default(64 * 1024 * 1024)
          .describe(
            "Most bytes of results (as JSON) one caller's task records keep (per replica in memory, fleet-wide on Redis); a task whose result would exceed it ends failed (-32603 busy, naming the setting)",
          ),
        maxResultBytes: z
          .number()
          .int()
          .positive()
          .default(512 * 1024 * 1024)
          .describe(
            'Most bytes of results (as JSON) all task records keep together (per replica in memory, fleet-wide on Redis); a task whose result would exceed it ends failed (-32603 busy)',
          ),
      })
      .strict()
      .prefault({})
      .describe('The task store'),
    federation: FederationSchema.prefault({}),
    admin: z
      .object({
        enabled: z
          .boolean()
          .default(false)
          .describe('Serve the admin page (GET /admin) and its JSON (GET /admin/api/…); off: they answer 404'),
        principals: z
          .array(z.string().min(1))
          .min(1)
          .optional()
          .describe(
            'Principals allowed on the admin page, as the gateway names them (apikey:NAME with apiKeys, ISSUER#SUB with jwt); any other authenticated caller gets 403. Required with auth apiKeys or jwt; with auth none the caller is anonymous and must come from a loopback address',
          ),
        refreshSeconds: z.number().int().positive().max(3600).default(5).describe('How often the admin page reloads itself, in seconds'),
      })
      .strict()
      .prefault({})
      .describe('The admin page: upstreams, parked calls, tasks, legacy sessions and the deprecation census'),
    audit: z
      .object({
        enabled: z
          .boolean()
          .default(true)
          .describe('Write the audit trail: one JSON line per call that reached an upstream or was refused before one (docs/approvals.md)'),
        destination: z
          .string()
          .min(1)
          .default('stdout')
          .describe(
            'Where audit lines go: stdout (with the process log, each line "msg":"audit"), stderr, or a file path (appended to; its directory must exist; relative paths are resolved against the config file)',
          ),
        principal: z
          .enum(['hashed', 'plain'])
          .default('hashed')
          .describe(
            'How callers are named in audit lines: hashed (sha256: and 16 hex digits, as in the request log) or plain (the principal itself)',
          ),
      })
      .strict()
      .prefault({})
      .describe('The audit trail of calls, on its own logger'),
    upstreams: z
      .record(UpstreamNameSchema, UpstreamConfigSchema)
      .refine((u) => Object.keys(u).length > 0, 'at least one upstream is required')
      .describe(
        'Upstream MCP servers by name (letters, digits, ".", "_", "-", starting with a letter or digit); each is served at POST /mcp/NAME',
      ),
  })
  .strict()
  .superRefine((cfg, ctx) => {
    if (cfg.admin.enabled && cfg.auth.mode !== 'none' && !cfg.admin.principals) {
      ctx.addIssue({
        code: 'custom',
        path: ['admin', 'principals'],
        message: `required with auth.mode "${cfg.auth.mode}": list the principals allowed on the admin page`,
      });
    }
    if (cfg.store.kind === 'redis' && !cfg.replicas.secret) {
      ctx.addIssue({
        code: 'custom',
        path: ['replicas', 'secret'],
        message: 'required with store.kind "redis": replicas forward calls to each other over an authenticated hop',
      });
    }
    checkFederation(cfg, ctx);
    for (const [name, u] of Object.entries(cfg.upstreams)) {
      checkParkedSessions(name, u, ctx);
      checkCredentials(name, u, cfg.auth.mode, ctx);
      const s = u.sampling;
      const modes = [s.mode, ...Object.values(s.tools).map((t) => t.mode)];
      if (s.provider !== undefined && !(s.provider in cfg.sampling.providers)) {
        ctx.addIssue({
          code: 'custom',
          path: ['upstreams', name, 'sampling', 'provider'],
          message: `unknown provider '${s.provider}' (sampling.providers has ${Object.keys(cfg.sampling.providers).join(', ') || 'none'})`,
        });
      } else if (s.provider === undefined && modes.some((m) => m !== 'client')) {
        ctx.addIssue({
          code: 'custom',
          path: ['upstreams', name, 'sampling', 'provider'],
          message: 'modes provider and fallback need a provider (a key of sampling.providers)',
        });
      }
    }
  });

/**
 * A parked-session limit of upstream `name` cannot exceed the session limit it is a part of:
 * `maxParkedSessions` ≤ `maxSessions` and `maxParkedSessionsPerPrincipal` ≤
 * `maxSessionsPerPrincipal`. Each issue names both settings.
 */
function checkParkedSessions(
  name: string,
  u: { maxSessions: number; maxSessionsPerPrincipal: number; maxParkedSessions?: number; maxParkedSessionsPerPrincipal?: number },
  ctx: z.RefinementCtx,
): void {
  const pairs = [
    ['maxParkedSessions', u.maxParkedSessions, 'maxSessions', u.maxSessions],
    ['maxParkedSessionsPerPrincipal', u.maxParkedSessionsPerPrincipal, 'maxSessionsPerPrincipal', u.maxSessionsPerPrincipal],
  ] as const;
  for (const [parked, value, whole, limit] of pairs) {
    if (value === undefined || value <= limit) continue;
    ctx.addIssue({
      code: 'custom',
      path: ['upstreams', name, parked],
      message: `${parked} (${value}) is greater than ${whole} (${limit}): parked calls that hold a session are a part of ${whole}; lower ${parked} or raise ${whole}`,
    });
  }
}

/**
 * The federation rules the schema cannot state per field: `federation.upstreams` and the keys of
 * `federation.prefixes` name configured (federated) upstreams, each once; and, with federation
 * enabled, the names two upstreams would serve on `/mcp` do not collide where the config alone
 * shows it: two upstreams with the same non-empty prefix, or a tool both name literally in
 * `tools.allow` that comes out the same with their prefixes. Each issue names both upstreams.
 */
function checkFederation(
  cfg: { upstreams: Record<string, { tools: { allow?: string[]; deny: string[] } }>; federation: z.output<typeof FederationSchema> },
  ctx: z.RefinementCtx,
): void {
  const fed = cfg.federation;
  const configured = Object.keys(cfg.upstreams);
  const seen = new Set<string>();
  fed.upstreams?.forEach((name, i) => {
    if (!Object.hasOwn(cfg.upstreams, name)) {
      ctx.addIssue({
        code: 'custom',
        path: ['federation', 'upstreams', i],
        message: `unknown upstream '${name}' (upstreams has ${configured.join(', ')})`,
      });
    } else if (seen.has(name)) {
      ctx.addIssue({ code: 'custom', path: ['federation', 'upstreams', i], message: `upstream '${name}' is listed twice` });
    }
    seen.add(name);
  });
  const members = federationMembers(cfg);
  const federated = new Set(members.map((m) => m.name));
  for (const name of Object.keys(fed.prefixes)) {
    if (!federated.has(name))
      ctx.addIssue({
        code: 'custom',
        path: ['federation', 'prefixes', name],
        message: `'${name}' is not a federated upstream (federated: ${[...federated].join(', ')})`,
      });
  }
  if (!fed.enabled) return;
  const byPrefix = new Map<string, string>();
  for (const m of members) {
    const other = byPrefix.get(m.prefix);
    if (m.prefix !== '' && other !== undefined) {
      ctx.addIssue({
        code: 'custom',
        path: ['federation', 'prefixes', m.name],
        message: `upstreams '${other}' and '${m.name}' have the same tool and prompt prefix '${m.prefix}' on /mcp; give each its own (federation.prefixes)`,
      });
    }
    byPrefix.set(m.prefix, m.name);
  }
  const literal = new Map<string, string>();
  for (const m of members) {
    const tools = cfg.upstreams[m.name]!.tools;
    tools.allow?.forEach((pattern, i) => {
      if (isGlob(pattern) || !toolAllowed(tools, pattern)) return;
      const exposed = m.prefix + pattern;
      const other = literal.get(exposed);
      if (other !== undefined && other !== m.name) {
        ctx.addIssue({
          code: 'custom',
          path: ['upstreams', m.name, 'tools', 'allow', i],
          message: `tool '${exposed}' would be served on /mcp by both upstreams '${other}' and '${m.name}'; give them distinct prefixes (federation.prefixes)`,
        });
      }
      literal.set(exposed, m.name);
    });
  }
}

/** Parsed configuration (defaults applied). */
export type GatewayConfig = z.output<typeof GatewayConfigSchema>;
/** Parsed configuration of one upstream. */
export type UpstreamConfig = z.output<typeof UpstreamConfigSchema>;
/** Parsed `sampling` settings of one upstream. */
export type UpstreamSamplingConfig = z.output<typeof UpstreamSamplingSchema>;
/** Parsed configuration of one LLM provider (`sampling.providers.NAME`). */
export type SamplingProviderConfig = z.output<typeof SamplingProviderSchema>;
/** Parsed configuration of one model of a provider. */
export type ProviderModelConfig = z.output<typeof ProviderModelSchema>;
