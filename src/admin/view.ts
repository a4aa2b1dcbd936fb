/**
 * What the admin page shows, as plain JSON: upstreams, parked calls, tasks, legacy sessions, the
 * deprecation census and the entries left out of list answers. Each function reads the live state
 * through the read-only accessors of {@link AdminSources}, which whoever builds the admin endpoints
 * hands in; nothing here changes anything.
 *
 * Nothing shown is a secret: principals and legacy session ids appear only as hashes (the first
 * 16 hex digits of their SHA-256, as in the logs), except in the per-user grants, which name the
 * principal holding each (never a token; src/credentials/types.ts `GrantInfo`), and free text that comes from upstreams (error
 * messages, stderr lines, task status messages) passes through a {@link Redactor} that removes the
 * configured secrets and anything shaped like a credential.
 */
import { createHash } from 'node:crypto';
import type { GatewayConfig } from '../config/schema.js';
import type { MrtrBridge } from '../cells/bridge/mrtr.js';
import type { TaskManager } from '../cells/bridge/tasks/manager.js';
import type { Upstream } from '../router/upstream.js';
import { DEPRECATED_FEATURES, type Census, type CensusEntry, type DeprecatedFeature } from '../observability/census.js';
import type { DroppedEntries, DroppedEntry } from '../observability/dropped.js';
import type { UpstreamFailure } from '../observability/upstream-health.js';
import type { InputRequest } from '../protocol/wire.js';
import { principalHash } from '../security/auth.js';
import { bySize, redactText } from '../security/redact.js';
import type { TaskStatus } from '../store/tasks.js';

/** One open legacy client session, as the legacy session registry of the front door reports it. */
export interface LegacySessionInfo {
  /** The `Mcp-Session-Id` (a credential of sorts: never shown). */
  id: string;
  upstream: string;
  /** The principal's hash. */
  principal: string;
  transport: 'streamable-http' | 'sse';
  relay: 'pass-through' | 'reverse';
  /** The revision negotiated with the client. */
  protocolVersion?: string;
  /** The stdio child's process id. */
  pid?: number;
  /** Requests of the client still in flight. */
  inFlight: number;
  /** Time since the client's last message, and since the session opened, in ms. */
  idleMs: number;
  ageMs: number;
}

/** What the views read of the open legacy client sessions. */
export interface LegacySessionList {
  /** The open sessions. */
  list(): LegacySessionInfo[];
  /** Open sessions by upstream. */
  countByUpstream(): { upstream: string; count: number }[];
}

/** Where the views read from: read-only accessors of the gateway's live state. */
export interface AdminSources {
  /** The configured upstreams, in configuration order. */
  upstreams: ReadonlyMap<string, Upstream>;
  /** The calls parked waiting for their client's answers. */
  parked: Pick<MrtrBridge, 'parkedByUpstream' | 'parkedCalls'>;
  tasks: Pick<TaskManager, 'statusCounts' | 'runningTasks'>;
  census: Pick<Census, 'snapshot'>;
  dropped: Pick<DroppedEntries, 'snapshot'>;
  legacy: LegacySessionList;
  redactor: Redactor;
}

/** Shortest configured value treated as a secret to remove from text, in characters. */
const MIN_SECRET_CHARS = 6;

/**
 * Removes secrets from text shown on the admin page: every secret the configuration holds
 * (upstream `headers` and `env` values, API keys, requestState and replica secrets, provider API
 * keys, a Redis URL's password), `Bearer …` credentials, `sk-…`-style keys and the password of a
 * URL's user info. Each is replaced with `[redacted]`.
 */
export class Redactor {
  private readonly secrets: string[];

  constructor(cfg: GatewayConfig) {
    const found = new Set<string>();
    const add = (v: string | undefined) => {
      if (v && v.length >= MIN_SECRET_CHARS) found.add(v);
    };
    for (const u of Object.values(cfg.upstreams)) {
      if (u.transport === 'stdio') for (const v of Object.values(u.env)) add(v);
      else for (const v of Object.values(u.headers)) add(v.replace(/^Bearer\s+/i, ''));
    }
    if (cfg.auth.mode === 'apiKeys') for (const k of cfg.auth.keys) add(k.key);
    for (const k of cfg.requestState.keys) add(k.secret);
    add(cfg.replicas.secret);
    for (const p of Object.values(cfg.sampling.providers)) add(p.apiKey);
    if (cfg.store.kind === 'redis') {
      try {
        add(decodeURIComponent(new URL(cfg.store.url).password));
      } catch {
        /* not a URL: the schema already checked the scheme */
      }
    }
    this.secrets = bySize(found);
  }

  /** `text` without secrets ({@link redactText}). */
  redact(text: string): string {
    return redactText(text, this.secrets);
  }
}

/** The first 16 hex digits of the SHA-256 of `value` (principals, session ids). */
export function shortHash(value: string): string {
  return createHash('sha256').update(value, 'utf8').digest('hex').slice(0, 16);
}

/** One input request as the admin page describes it: its key and kind, without its content. */
export interface InputView {
  key: string;
  kind: 'elicitation' | 'sampling' | 'roots';
  /** `form` or `url` for elicitation; `tools` for sampling with tools. */
  mode?: 'form' | 'url' | 'tools';
}

/** Key and kind of each input request (their messages and schemas are left out). */
export function inputsView(inputs: Record<string, InputRequest>): InputView[] {
  return Object.entries(inputs).map(([key, r]) => {
    const p = (r.params ?? {}) as Record<string, unknown>;
    if (r.method === 'elicitation/create') return { key, kind: 'elicitation', mode: p.mode === 'url' ? 'url' : 'form' };
    if (r.method === 'sampling/createMessage')
      return p.tools !== undefined || p.toolChoice !== undefined ? { key, kind: 'sampling', mode: 'tools' } : { key, kind: 'sampling' };
    return { key, kind: 'roots' };
  });
}

/** One upstream on the admin page. */
export interface UpstreamView {
  name: string;
  transport: 'stdio' | 'streamable-http' | 'sse';
  /** The configured `protocol`. */
  protocol: 'auto' | 'legacy' | '2026-07-28';
  /** The era the upstream speaks; `unknown` while `protocol: "auto"` has not asked yet. */
  era: 'legacy' | 'modern' | 'unknown';
  /** The negotiated (or pinned) legacy revision, `2026-07-28` for a modern upstream; absent until known. */
  revision?: string;
  /** The pool's legacy sessions: open, idle, in use (leased to a call, a parked call or a task), and callers queued for one. */
  sessions: { total: number; idle: number; inUse: number; waiting: number };
  /** Legacy client sessions on this upstream (each owns an upstream connection of its own). */
  legacySessions: number;
  parked: number;
  /**
   * Since start: sessions opened, sessions that died, restarts (sessions opened to replace one
   * that died or failed to open) and failed opens; and failures in a row now (restart backoff).
   */
  opened: number;
  died: number;
  restarts: number;
  openFailures: number;
  consecutiveFailures: number;
  /** The last failure (open, died or probe), with the stdio child's last stderr lines, redacted. */
  lastFailure?: UpstreamFailure;
  /** The list cache of a 2026-07-28 upstream since start: lookups answered from it, lookups sent upstream, results kept now. */
  listCache: { hits: number; misses: number; entries: number };
}

/** Every upstream, in configuration order. */
export function upstreamsView({ upstreams, parked, legacy, redactor }: AdminSources): UpstreamView[] {
  const legacyBy = new Map(legacy.countByUpstream().map((x) => [x.upstream, x.count]));
  const parkedBy = new Map(parked.parkedByUpstream().map((x) => [x.upstream, x.count]));
  return [...upstreams.values()].map((up) => {
    const stats = up.pool.stats();
    const health = up.health.snapshot();
    const upstreamEra = up.knownEra ?? 'unknown';
    const revision = upstreamEra === 'modern' ? '2026-07-28' : up.pool.revision;
    const last = health.lastFailure;
    return {
      name: up.name,
      transport: up.cfg.transport,
      protocol: up.cfg.protocol,
      era: upstreamEra,
      ...(revision ? { revision } : {}),
      sessions: { total: stats.total, idle: stats.idle, inUse: stats.leased, waiting: stats.waiting },
      legacySessions: legacyBy.get(up.name) ?? 0,
      parked: parkedBy.get(up.name) ?? 0,
      opened: health.opened,
      died: health.died,
      restarts: health.restarts,
      openFailures: health.openFailures,
      consecutiveFailures: stats.failures,
      listCache: up.lists.stats(),
      ...(last
        ? { lastFailure: { ...last, message: redactor.redact(last.message), stderr: last.stderr.map((l) => redactor.redact(l)) } }
        : {}),
    };
  });
}

/** One parked call on the admin page. */
export interface ParkedView {
  /** The call's id (as in the `parked call expired` log line). */
  id: string;
  upstream: string;
  method: string;
  /** Tool or prompt name, or resource URI. */
  name: string;
  /** The principal's hash. */
  principal: string;
  /** Rounds answered so far. */
  round: number;
  /** When this round parked and when the call expires unless retried (ISO 8601), and the same as ms from now. */
  parkedAt: string;
  expiresAt: string;
  ageMs: number;
  timeLeftMs: number;
  inputs: InputView[];
}

/** The calls parked waiting for their client's answers, oldest first. */
export function parkedView({ parked }: AdminSources, now = Date.now()): ParkedView[] {
  return parked.parkedCalls().map((p) => ({
    id: p.id,
    upstream: p.upstream,
    method: p.method,
    name: p.name,
    principal: principalHash(p.principal),
    round: p.round,
    parkedAt: new Date(p.parkedAt).toISOString(),
    expiresAt: new Date(p.expiresAt).toISOString(),
    ageMs: Math.max(0, now - p.parkedAt),
    timeLeftMs: Math.max(0, p.expiresAt - now),
    inputs: inputsView(p.inputs),
  }));
}

/** One running task on the admin page. */
export interface RunningTaskView {
  taskId: string;
  upstream: string;
  tool?: string;
  status: TaskStatus;
  /** The upstream's last progress message (redacted). */
  statusMessage?: string;
  /** The principal's hash. */
  principal: string;
  /** ISO 8601, and ms since. */
  createdAt: string;
  ageMs: number;
  inputs: InputView[];
}

/** Tasks on the admin page: counts by status, and the ones whose call runs on this replica. */
export interface TasksView {
  /** Tasks this replica created whose record has not expired, by status. */
  counts: Record<TaskStatus, number>;
  running: RunningTaskView[];
}

/** Tasks by status and the running ones. */
export function tasksView({ tasks, redactor }: AdminSources, now = Date.now()): TasksView {
  return {
    counts: tasks.statusCounts(),
    running: tasks.runningTasks().map((t) => ({
      taskId: t.taskId,
      upstream: t.upstream,
      ...(t.tool !== undefined ? { tool: t.tool } : {}),
      status: t.status,
      ...(t.statusMessage !== undefined ? { statusMessage: redactor.redact(t.statusMessage) } : {}),
      principal: principalHash(t.principal),
      createdAt: t.createdAt,
      ageMs: Math.max(0, now - Date.parse(t.createdAt)),
      inputs: inputsView(t.inputs),
    })),
  };
}

/**
 * One legacy client session on the admin page: `session` is the hash of the session id (the id
 * itself lets its holder use the session), `principal` the principal's hash.
 */
export type SessionView = Omit<LegacySessionInfo, 'id'> & { session: string };

/** The open legacy client sessions, oldest first. */
export function sessionsView({ legacy }: AdminSources): SessionView[] {
  return legacy
    .list()
    .map((s) => ({
      session: shortHash(s.id),
      upstream: s.upstream,
      principal: s.principal,
      transport: s.transport,
      relay: s.relay,
      ...(s.protocolVersion ? { protocolVersion: s.protocolVersion } : {}),
      ...(s.pid !== undefined ? { pid: s.pid } : {}),
      inFlight: s.inFlight,
      idleMs: s.idleMs,
      ageMs: s.ageMs,
    }))
    .sort((a, b) => b.ageMs - a.ageMs);
}

/** The census on the admin page. */
export interface CensusView {
  /** Every feature the census counts, in report order. */
  features: readonly DeprecatedFeature[];
  entries: CensusEntry[];
}

/** The deprecation census. */
export function censusView({ census }: AdminSources): CensusView {
  return { features: DEPRECATED_FEATURES, entries: census.snapshot() };
}

/**
 * The entries left out of list answers since start, the most recently left out first (see
 * src/observability/dropped.ts): invalid tool names and annotations, and federation conflicts.
 * Names and details come from upstreams: the page escapes them like any other text.
 */
export function droppedView({ dropped }: AdminSources): DroppedEntry[] {
  return dropped.snapshot();
}
