/**
 * The audit trail (docs/approvals.md "Audit trail"): one JSON line per call that reached an
 * upstream or was refused before one, on a logger of its own (`audit` in the config: stdout,
 * stderr or a file appended to). A line names the caller (hashed unless `audit.principal` is
 * `plain`), the upstream, the method and name, a digest of the arguments, what the approval policy
 * did, the outcome and the duration. Never in it: arguments, form answers (`inputResponses`,
 * elicitation content), results, tokens.
 *
 * Written by the router for 2026-07-28 requests (one line per upstream a request went to, so a
 * federated list is one line per member; a member refused by its upstream or tool limits included),
 * and for the end of a task a request created (a second line with the same `taskId`, on the replica
 * running the task); by the legacy session registry for each request a legacy session relayed; by
 * the front door for a 429 of `limits` whose method the `Mcp-Method` header names, and for each
 * request of a body refused by `upstreams.NAME.limits` on `/mcp/NAME`.
 */
import { openSync } from 'node:fs';
import { destination as pinoDestination, pino, type DestinationStream, type Logger as PinoLogger } from 'pino';
import type { Logger } from './log.js';
import type { GatewayConfig } from '../config/schema.js';
import type { ApprovalAudit } from '../protocol/connection.js';
import { ErrorCode } from '../protocol/errors.js';
import { principalHash } from '../security/auth.js';
import { digestOf, INVALID_STATE } from '../security/seal.js';
import { REDACTED, redactText } from '../security/redact.js';
import { secretName } from '../security/secrets.js';

/**
 * `name` (a tool or prompt name, or a resource URI) as audit and request log lines show it: credential-shaped
 * text (a URL's password, `Bearer …`, `sk-…`; src/security/redact.ts) and the value of a query
 * parameter whose name says secret (`?api_key=…`, `&token=…`) are `[redacted]`.
 */
export function shownName(name: string): string {
  return redactText(name, []).replace(/([?&;])([^=&;#]*)=([^&;#]*)/g, (all, sep: string, key: string) =>
    secretName(percentDecoded(key)) ? `${sep}${key}=${REDACTED}` : all,
  );
}

/** `s` percent-decoded, or as it is when it is not valid percent-encoding. */
function percentDecoded(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/**
 * How a call ended: answered (`complete`), a round of input asked (`input_required`), a task
 * created (`task`), a JSON-RPC error (`error`), refused by the gateway before any upstream
 * (`refused`: a limit, a missing client capability, an invalid requestState, a tool the policy does
 * not serve, an approval declined or cancelled), or, for a task's end, `cancelled`.
 */
export type AuditOutcome = 'complete' | 'input_required' | 'task' | 'error' | 'refused' | 'cancelled';

/** One audit line, as its writer hands it over (`principal` raw: {@link AuditLog.record} hashes it). */
export interface AuditEntry {
  principal: string;
  /** The upstream's name, or `*` for a call on the federated `/mcp` (then {@link member} names the upstream). */
  upstream: string;
  /** On the federated `/mcp`: the upstream the call went to. */
  member?: string;
  method: string;
  /** `params.name` (tool, prompt) or `params.uri` (resource), when the request has one. */
  name?: string;
  /** {@link argumentsDigest} of `params.arguments` (`tools/call`, `prompts/get`). */
  argsDigest?: string;
  approval?: ApprovalAudit;
  outcome: AuditOutcome;
  /** The JSON-RPC error code (outcomes `error` and `refused` with an error). */
  code?: number;
  /** `data.reason` of the error, when it has one. */
  reason?: string;
  /** From the request's arrival to its answer (a task's end: from the task's creation to its end), in ms. */
  durationMs: number;
  /** The task the call became (outcome `task`), or that ended (the task's own line). */
  taskId?: string;
  /** The gateway's request id (`X-Request-Id`) of a request that came in its own HTTP request. */
  requestId?: string;
  /** The JSON-RPC id of the client's request. */
  rpcId?: string | number;
  /** The client's revision: `2026-07-28`, or the legacy revision its session negotiated. */
  era: string;
  /** The client's transport: `streamable-http` or `sse` (the HTTP+SSE transport of 2024-11-05). */
  transport: string;
}

/** Methods that carry no call of their own: lifecycle, keep-alive, task polling and session upkeep. */
const UNAUDITED = new Set(['initialize', 'ping', 'server/discover', 'tasks/get', 'tasks/list', 'logging/setLevel']);

/** Whether requests of `method` get an audit line: every request except {@link UNAUDITED} and notifications. */
export function audited(method: string): boolean {
  return !UNAUDITED.has(method) && !method.startsWith('notifications/');
}

/**
 * The `argsDigest` of a request's params: `digestOf(params.arguments)` (src/security/seal.ts, the
 * digest approvals and sealed states bind to) for `tools/call` and `prompts/get`; undefined for others.
 */
export function argumentsDigest(method: string, params: Record<string, unknown> | undefined): string | undefined {
  return method === 'tools/call' || method === 'prompts/get' ? digestOf(params?.arguments) : undefined;
}

/** What a call ended with, as {@link auditOutcome} reads it. */
export interface CallEnd {
  /** The result's `resultType` (absent: `complete`). */
  resultType?: string;
  error?: { code: number; message?: string };
  /** The HTTP status the error went with. */
  httpStatus?: number;
  approval?: ApprovalAudit;
  /** The gateway refused the call itself (a tool its `tools` policy does not serve). */
  refused?: boolean;
}

/**
 * The {@link AuditOutcome} of a task's end: `cancelled` for a task cancelled (by the client, its
 * ttlMs, the shutdown); else as {@link auditOutcome} reads a call's end (`complete`, `error`, or
 * `refused` when its approval was declined or cancelled).
 */
export function taskOutcome(
  status: 'completed' | 'failed' | 'cancelled',
  error: CallEnd['error'],
  approval: ApprovalAudit | undefined,
): AuditOutcome {
  return status === 'cancelled'
    ? 'cancelled'
    : auditOutcome({ error: status === 'failed' ? (error ?? { code: ErrorCode.InternalError }) : undefined, approval });
}

/** The {@link AuditOutcome} of a call's end (see there for what counts as `refused`). */
export function auditOutcome(end: CallEnd): AuditOutcome {
  if (end.refused || end.approval === 'declined' || end.approval === 'cancelled') return 'refused';
  const e = end.error;
  if (e) {
    const badState = e.code === ErrorCode.InvalidParams && e.message === INVALID_STATE;
    return e.code === ErrorCode.MissingRequiredClientCapability || end.httpStatus === 429 || badState ? 'refused' : 'error';
  }
  if (end.resultType === 'input_required' || end.resultType === 'task') return end.resultType;
  return 'complete';
}

/** `audit.destination` names a file that cannot be opened for appending (the start stops, exit code 2). */
export class AuditDestinationError extends Error {
  override name = 'AuditDestinationError';
}

/** The audit trail's logger (see the file header). */
export class AuditLog {
  /** An audit log that writes nothing (`audit.enabled` false, library use, unit tests). */
  static readonly off = new AuditLog(undefined, 'hashed');

  private constructor(
    private readonly out:
      { logger: PinoLogger; stream: DestinationStream & { flush?: (cb?: (err?: Error) => unknown) => void } } | undefined,
    private readonly principals: 'hashed' | 'plain',
  ) {}

  /**
   * The audit log `cfg` configures. A file is opened for appending now (never created with its
   * directory), so a destination that cannot be written stops the start.
   * @throws AuditDestinationError when the file cannot be opened.
   */
  static open(cfg: GatewayConfig['audit'], log: Logger): AuditLog {
    if (!cfg.enabled) return AuditLog.off;
    const stream = AuditLog.stream(cfg.destination);
    // A failed write (a full disk) is logged, never the end of the process.
    stream.on('error', (e: Error) => log.error({ err: e.message, destination: cfg.destination }, 'audit line not written'));
    return AuditLog.to(stream, cfg.principal);
  }

  /** An audit log writing to `stream` (tests). */
  static to(stream: DestinationStream, principals: 'hashed' | 'plain' = 'hashed'): AuditLog {
    const logger = pino(
      {
        level: 'info',
        base: undefined,
        messageKey: 'msg',
        // No level on an audit line, so `time` opens it (pino's isoTime would start with a comma).
        timestamp: () => `"time":"${new Date().toISOString()}"`,
        formatters: { level: () => ({}) },
      },
      stream,
    );
    return new AuditLog({ logger, stream }, principals);
  }

  private static stream(destination: string): ReturnType<typeof pinoDestination> {
    // Written whole at once, like the process log's lines, so the two never interleave within a line.
    if (destination === 'stdout') return pinoDestination({ dest: 1, sync: true });
    if (destination === 'stderr') return pinoDestination({ dest: 2, sync: true });
    let fd: number;
    try {
      fd = openSync(destination, 'a');
    } catch (e) {
      throw new AuditDestinationError(
        `audit.destination: cannot open '${destination}' for appending (${(e as Error).message}); its directory must exist`,
      );
    }
    return pinoDestination({ dest: fd, sync: false, mkdir: false });
  }

  /** Whether lines are written (callers skip building entries otherwise). */
  get enabled(): boolean {
    return this.out !== undefined;
  }

  /** Writes one line: `time` (ISO 8601), the entry's fields (principal hashed unless configured plain), `msg: "audit"`. */
  record(e: AuditEntry): void {
    if (!this.out) return;
    const principal = this.principals === 'plain' ? e.principal : `sha256:${principalHash(e.principal)}`;
    this.out.logger.info(
      {
        principal,
        upstream: e.upstream,
        member: e.member,
        method: e.method,
        name: e.name === undefined ? undefined : shownName(e.name),
        argsDigest: e.argsDigest,
        approval: e.approval,
        outcome: e.outcome,
        code: e.code,
        reason: e.reason,
        durationMs: Math.round(e.durationMs * 10) / 10,
        taskId: e.taskId,
        requestId: e.requestId,
        rpcId: e.rpcId,
        era: e.era,
        transport: e.transport,
      },
      'audit',
    );
  }

  /** Writes out what is buffered (at shutdown). Never rejects. */
  flush(): Promise<void> {
    const stream = this.out?.stream;
    if (!stream?.flush) return Promise.resolve();
    return new Promise((resolve) => {
      try {
        stream.flush!(() => resolve());
      } catch {
        resolve();
      }
    });
  }
}
