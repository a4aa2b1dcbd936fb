/**
 * Runs one scenario of the official conformance CLI (@modelcontextprotocol/conformance, Node 20
 * through the globSync load hook) against a URL and returns its checks.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CLI = join(ROOT, 'node_modules/@modelcontextprotocol/conformance/dist/index.js');
const HOOK = join(ROOT, 'scripts/node20-globsync-hook.mjs');

/** One check as the CLI writes it to checks.json. */
export interface Check {
  id: string;
  name: string;
  description: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'SKIPPED' | 'INFO';
  errorMessage?: string;
}

/** Options for {@link runScenario}. */
export interface ScenarioOptions {
  /**
   * `--spec-version`: the protocol revision the scenario speaks. A scenario tagged for several
   * revisions runs on the 2025-11-25 wire without it; pass '2026-07-28' for those.
   */
  specVersion?: string;
  /** Kills the CLI after this many ms (default 120000). */
  timeoutMs?: number;
}

/**
 * Runs `conformance server --url URL --scenario NAME [--spec-version V]` and returns the checks it
 * recorded in checks.json, with the CLI's console output.
 */
export function runScenario(url: string, scenario: string, opts: ScenarioOptions = {}): Promise<{ checks: Check[]; output: string }> {
  const out = mkdtempSync(join(tmpdir(), `conformance-${scenario}-`));
  const version = opts.specVersion ? ['--spec-version', opts.specVersion] : [];
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', HOOK, CLI, 'server', '--url', url, '--scenario', scenario, ...version, '-o', out],
      { cwd: ROOT, timeout: opts.timeoutMs ?? 120_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        try {
          const dirs = readdirSync(out);
          if (dirs.length === 0)
            return reject(new Error(`conformance wrote no results for ${scenario}: ${err?.message ?? ''}\n${stdout}\n${stderr}`));
          const checks = JSON.parse(readFileSync(join(out, dirs[0]!, 'checks.json'), 'utf8')) as Check[];
          resolve({ checks, output: stdout + stderr });
        } catch (e) {
          reject(e);
        } finally {
          rmSync(out, { recursive: true, force: true });
        }
      },
    );
  });
}

/**
 * A check test/conformance/expected.json tolerates: the status the CLI itself gives it (SKIPPED:
 * the CLI does not run it; INFO: the CLI reports it as information, not as a verdict), and why.
 */
export interface Tolerated {
  status: 'SKIPPED' | 'INFO';
  reason: string;
}

const expected = JSON.parse(readFileSync(new URL('./expected.json', import.meta.url), 'utf8')) as Record<
  string,
  Record<string, Tolerated> | string
>;

/**
 * What expected.json tolerates in `scenario` run at `specVersion`, by check id: the entries under
 * `SCENARIO` (at every revision) and under `SCENARIO@REVISION` (at that one).
 */
export function toleratedIn(scenario: string, specVersion?: string): Record<string, Tolerated> {
  const entry = (key: string) => {
    const e = expected[key];
    return typeof e === 'object' ? e : {};
  };
  return { ...entry(scenario), ...(specVersion ? entry(`${scenario}@${specVersion}`) : {}) };
}

/** The checks of one run that are neither SUCCESS nor tolerated with exactly their status, one line each. */
export function untolerated(scenario: string, specVersion: string | undefined, checks: Check[]): string[] {
  const tolerated = toleratedIn(scenario, specVersion);
  return checks
    .filter((c) => c.status !== 'SUCCESS' && tolerated[c.id]?.status !== c.status)
    .map((c) => `${c.status} ${c.id}: ${c.errorMessage ?? c.description}`);
}

/**
 * What is wrong with one run of `scenario` against the gateway, one line per problem: every check
 * must be SUCCESS, apart from those expected.json tolerates, which must appear with exactly the
 * status listed there (a tolerated check that now has another status, or no longer appears, is a
 * stale entry).
 */
export function fullPassProblems(scenario: string, specVersion: string | undefined, checks: Check[]): string[] {
  const bad = untolerated(scenario, specVersion, checks);
  for (const [id, t] of Object.entries(toleratedIn(scenario, specVersion))) {
    const seen = checks.filter((c) => c.id === id);
    if (seen.length === 0) bad.push(`expected.json tolerates ${id} as ${t.status}, but the run has no such check`);
    for (const c of seen.filter((x) => x.status !== t.status))
      bad.push(`expected.json tolerates ${id} as ${t.status}, but it is ${c.status}: update the entry`);
  }
  return bad;
}

/** Options for {@link expectScenarioPasses}. */
export interface PassOptions extends ScenarioOptions {
  /** Check ids that must be there and SUCCESS (expected.json cannot tolerate them). */
  mustSucceed?: string[];
}

/**
 * Runs a scenario and asserts that it passes in full ({@link fullPassProblems}) and that each
 * `mustSucceed` check is SUCCESS.
 */
export async function expectScenarioPasses(url: string, scenario: string, opts: PassOptions = {}): Promise<void> {
  const { checks } = await runScenario(url, scenario, opts);
  expect(checks.length).toBeGreaterThan(0);
  const bad = fullPassProblems(scenario, opts.specVersion, checks);
  for (const id of opts.mustSucceed ?? []) {
    const c = checks.find((x) => x.id === id);
    if (c?.status !== 'SUCCESS')
      bad.push(
        `${c?.status ?? 'MISSING'} ${id}: must be SUCCESS${c ? ` (${JSON.stringify((c as { details?: unknown }).details ?? c.description)})` : ''}`,
      );
  }
  expect(bad, `${scenario}:\n${bad.join('\n')}`).toEqual([]);
}

/**
 * Opens the upstream sessions the scenarios use: one for each capability set they declare, and
 * five without capabilities. server-stateless's subscriptions/listen probes stop reading once
 * they have the frames they wait for but leave their streams open, so two streams still hold
 * their sessions while a third holds one and a call triggers the change it waits for (and the
 * stream before that may still be giving its session back). A session opened during a scenario
 * would be a fixture process started inside the CLI's 600–1500 ms probe timeouts.
 */
export async function warmSessions(url: string): Promise<void> {
  const { rpc } = await import('../helpers/gateway.js');
  const sets = [
    {},
    {},
    {},
    {},
    {},
    { elicitation: {} },
    { sampling: {} },
    { roots: {} },
    { elicitation: {}, sampling: {}, roots: {} },
    { elicitation: {}, sampling: {} },
  ];
  await Promise.all(sets.map((caps) => rpc(url, 'tools/list', {}, { caps })));
}

/** The server scenarios `conformance list --server` prints, with their tags (revisions, or `extension`). */
export function listServerScenarios(): Promise<{ name: string; tags: string[] }[]> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', HOOK, CLI, 'list', '--server'], { cwd: ROOT, timeout: 60_000 }, (err, stdout) => {
      if (err) return reject(err);
      const out: { name: string; tags: string[] }[] = [];
      for (const line of stdout.split('\n')) {
        const m = /^\s*-\s+(\S+)\s+\[([^\]]*)\]/.exec(line);
        if (m) out.push({ name: m[1]!, tags: m[2]!.split(',').map((t) => t.trim()) });
      }
      resolve(out);
    });
  });
}
