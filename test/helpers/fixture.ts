import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { spawnListening, type SpawnedServer } from './processes.js';
import { scaled } from './budget.js';

export const FIXTURE = fileURLToPath(new URL('../fixtures/legacy-server.ts', import.meta.url));
/** The conformance fixture server (legacy, v1 SDK, stdio): the items the conformance scenarios name. */
export const CONFORMANCE_FIXTURE = fileURLToPath(new URL('../fixtures/conformance-server.ts', import.meta.url));

/** The 2026-07-28 fixture server (v2 SDK): stdio, or Streamable HTTP. */
export const MODERN_FIXTURE = fileURLToPath(new URL('../fixtures/modern-server.ts', import.meta.url));

/** A JSONL event log the fixture writes to (FIXTURE_LOG). */
export class FixtureLog {
  readonly file: string;
  constructor() {
    this.file = join(mkdtempSync(join(tmpdir(), 'mrtr-fixture-')), 'events.jsonl');
  }
  events(): Record<string, any>[] {
    if (!existsSync(this.file)) return [];
    return readFileSync(this.file, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l));
  }
  of(event: string, tool?: string): Record<string, any>[] {
    return this.events().filter((e) => e.event === event && (tool === undefined || e.tool === tool));
  }
}

/**
 * `input` settings for the fixtures, which send several server-initiated requests at once (for
 * example `concurrent_inputs`): each batch waits for 5 ms of upstream silence from the first call
 * on, as docs/configuration.md recommends for such servers, rather than the gateway learning it
 * from their first batch.
 */
export const CONCURRENT_INPUT = { batchQuietMs: 5 };

/** Upstream config for a fixture `script` over stdio (spawned by the gateway), logging to `log`. */
function stdioOf(script: string, log: FixtureLog | undefined, env: Record<string, string>): Record<string, unknown> {
  return {
    transport: 'stdio',
    command: process.execPath,
    args: ['--import', 'tsx', script, 'stdio'],
    env: { ...(log ? { FIXTURE_LOG: log.file } : {}), ...env },
  };
}

/** Upstream config for the fixture over stdio (spawned by the gateway). */
export function fixtureStdio(log?: FixtureLog, env: Record<string, string> = {}): Record<string, unknown> {
  return { ...stdioOf(FIXTURE, log, env), input: { ...CONCURRENT_INPUT } };
}

/** Upstream config for the 2026-07-28 fixture over stdio (spawned by the gateway). */
export function modernStdio(log?: FixtureLog, env: Record<string, string> = {}): Record<string, unknown> {
  return stdioOf(MODERN_FIXTURE, log, env);
}

/** Starts the 2026-07-28 fixture over Streamable HTTP on 127.0.0.1 (`env.PORT` picks the port); `config` is its upstream config. */
export async function startModernHttp(
  log?: FixtureLog,
  env: Record<string, string> = {},
): Promise<SpawnedServer & { config: Record<string, unknown> }> {
  const srv = await spawnListening(['--import', 'tsx', MODERN_FIXTURE, 'http'], { ...(log ? { FIXTURE_LOG: log.file } : {}), ...env });
  return { ...srv, config: { transport: 'streamable-http', url: `http://127.0.0.1:${srv.port}/mcp` } };
}

/**
 * Upstream config for the conformance fixture over stdio. Its processes share list changes and
 * resource updates through a fresh directory (CONFORMANCE_FIXTURE_STATE), so a change triggered
 * on one session reaches the session a subscriptions/listen stream holds.
 */
export function conformanceUpstream(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    transport: 'stdio',
    command: process.execPath,
    args: ['--import', 'tsx', CONFORMANCE_FIXTURE],
    env: { CONFORMANCE_FIXTURE_STATE: mkdtempSync(join(tmpdir(), 'conformance-state-')) },
    maxSessions: 32,
    input: { ...CONCURRENT_INPUT },
    ...extra,
  };
}

/** Starts the fixture over Streamable HTTP ('http') or HTTP+SSE ('sse') on 127.0.0.1 (`env.PORT` picks the port). */
export async function startFixtureHttp(
  mode: 'http' | 'sse',
  log?: FixtureLog,
  env: Record<string, string> = {},
): Promise<SpawnedServer & { config: Record<string, unknown> }> {
  const srv = await spawnListening(['--import', 'tsx', FIXTURE, mode], { ...(log ? { FIXTURE_LOG: log.file } : {}), ...env });
  const endpoint =
    mode === 'http'
      ? { transport: 'streamable-http', url: `http://127.0.0.1:${srv.port}/mcp` }
      : { transport: 'sse', url: `http://127.0.0.1:${srv.port}/sse` };
  const config = { ...endpoint, input: { ...CONCURRENT_INPUT } };
  return { ...srv, config };
}

/** Polls `check` (which may be async) until it returns true or `timeoutMs` passes. */
export async function eventually(check: () => boolean | Promise<boolean>, timeoutMs = 5000, stepMs = 50): Promise<boolean> {
  const end = Date.now() + scaled(timeoutMs);
  while (Date.now() < end) {
    if (await check()) return true;
    await new Promise((r) => setTimeout(r, stepMs));
  }
  return check();
}
