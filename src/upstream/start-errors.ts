/**
 * What the gateway says when an upstream could not be started or reached (a stdio child, a
 * Streamable HTTP or HTTP+SSE upstream, the 2026-07-28 hop alike): {@link UpstreamStartError}, the
 * message of a failed or timed-out start, and the stderr line that most likely says why.
 */
import { SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { cwdProblem } from '../config/child-env.js';
import type { UpstreamConfig } from '../config/schema.js';
import { errorText, withoutMcpPrefix, type UpstreamProtocolError } from '../protocol/errors.js';

/**
 * A start budget in words: `startMs` (ms) from when the start began, what the era probe left of
 * `connectMs` (an HTTP upstream of `protocol: "auto"`), or, for a child the era probe spawned and
 * handed over, the budget it was spawned with (`spawnBudgetMs`), counted from the spawn.
 */
export function budgetText(startMs: number, cfg: UpstreamConfig, spawnBudgetMs?: number): string {
  if (spawnBudgetMs !== undefined) return `${Math.round(spawnBudgetMs)} ms since the process was spawned (the era probe asked it first)`;
  const ms = Math.round(startMs);
  const probed = cfg.transport !== 'stdio' && cfg.protocol === 'auto' && ms < cfg.timeouts.connectMs;
  return probed ? `the ${ms} ms the era probe left of it` : `${ms} ms`;
}

/** What a start was doing, for the message of a start that took too long. */
export function firstStage(cfg: UpstreamConfig): string {
  if (cfg.transport === 'stdio') return `spawning '${cfg.command}'`;
  if (cfg.transport === 'sse') return 'waiting for the endpoint event on the HTTP+SSE stream';
  return 'connecting';
}

/**
 * The upstream could not be started or reached. `stderr` holds the last lines a stdio child wrote
 * before it failed (empty for HTTP upstreams); `fault` is set when it was reached but answered
 * `initialize` with something that breaks the protocol.
 */
export class UpstreamStartError extends Error {
  override name = 'UpstreamStartError';
  /**
   * @param reason `timeout` when the start did not finish within its budget (`timeouts.connectMs`),
   *   else `unreachable` (the `data.reason` of the -32603 the caller gets).
   */
  constructor(
    message: string,
    readonly stderr: string[],
    readonly reason: 'unreachable' | 'timeout' = 'unreachable',
    readonly fault?: UpstreamProtocolError,
    /** The HTTP status the upstream refused the start with (401, 403 …), when it did. */
    readonly status?: number,
  ) {
    const said = stderrSummary(stderr);
    super(said ? `${message}; the process said: ${said}` : message);
  }
}

/**
 * The HTTP status of an upstream's refusal carried by `e` (the v1 SDK's StreamableHTTPError, or its
 * SseError for the HTTP+SSE stream; an UpstreamStartError), else undefined.
 */
export function refusalStatus(e: unknown): number | undefined {
  if ((e instanceof StreamableHTTPError || e instanceof SseError) && typeof e.code === 'number' && e.code >= 400) return e.code;
  if (e instanceof UpstreamStartError) return e.status;
  return undefined;
}

/**
 * The message of a failure to start or reach the upstream, without the SDK's `MCP error <code>: `
 * prefixes. For a stdio child that could not be spawned because its `cwd` is gone, it says so:
 * Node reports that as `spawn COMMAND ENOENT`, as if the command were missing.
 */
export function startFailureText(e: unknown, cfg: UpstreamConfig): string {
  const text = withoutMcpPrefix(errorText(e));
  if (cfg.transport !== 'stdio' && e instanceof StreamableHTTPError && (e.code === 401 || e.code === 403)) {
    const whose = cfg.forwardAuthorization
      ? "the caller's token (forwardAuthorization) or the configured headers"
      : 'the configured headers';
    return `the upstream refused the credentials (HTTP ${e.code}): check ${whose} (${text})`;
  }
  if (cfg.transport !== 'stdio' || !cfg.cwd || (e as NodeJS.ErrnoException | undefined)?.code !== 'ENOENT') return text;
  const problem = cwdProblem(cfg.cwd);
  return problem ? `${problem} (${text})` : text;
}

/** The stderr line that most likely says what went wrong: the first that reads like an error, else the last. */
export function stderrSummary(lines: string[]): string | undefined {
  const telling = lines.find(
    (l) =>
      !/^\s+at /.test(l) && /\b(error|cannot|can't|fatal|exception|not found|denied|refused|invalid|missing|unknown|failed)\b/i.test(l),
  );
  return telling ?? lines[lines.length - 1];
}

/**
 * The message of a -32603 `unreachable`: `Upstream 'NAME' could not be started or reached: WHY`,
 * followed by the stderr line that most likely says why (see {@link stderrSummary}).
 */
export function unreachableText(upstream: string, why: string, stderr: string[]): string {
  const said = stderrSummary(stderr);
  return `Upstream '${upstream}' could not be started or reached: ${why}${said ? `; the process said: ${said}` : ''}`;
}

/**
 * The message of a start that ran out of its budget (`budgetMs`, in ms, from `setting`:
 * `timeouts.connectMs`, or `timeouts.firstStartMs` for a first start): it names the upstream, the
 * setting, what the start was doing (`detail`) and the request it must answer (`answers`:
 * `initialize` for a legacy upstream, `server/discover` for a 2026-07-28 one).
 */
export function startTimeoutMessage(
  upstream: string,
  budgetMs: number,
  detail: string,
  answers = 'initialize',
  setting = 'timeouts.connectMs',
): string {
  return `Upstream '${upstream}' did not start within ${setting}=${budgetMs} ms (${detail}); check that it starts and answers ${answers}, or raise ${setting}`;
}

/**
 * `p`, or a rejection with `${what} took longer than connectMs=${ms} ms` once `ms` (milliseconds)
 * pass first.
 */
export function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} took longer than connectMs=${ms} ms`)), ms);
    }),
  ]);
}
