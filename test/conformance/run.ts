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

/** Runs `conformance server --url URL --scenario NAME` and returns the checks it recorded. */
export function runScenario(url: string, scenario: string, timeoutMs = 120_000): Promise<{ checks: Check[]; output: string }> {
  const out = mkdtempSync(join(tmpdir(), `conformance-${scenario}-`));
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', HOOK, CLI, 'server', '--url', url, '--scenario', scenario, '-o', out],
      { cwd: ROOT, timeout: timeoutMs, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) => {
        try {
          const dirs = readdirSync(out);
          if (dirs.length === 0) return reject(new Error(`conformance wrote no results for ${scenario}: ${err?.message ?? ''}\n${stdout}\n${stderr}`));
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

const expected = JSON.parse(readFileSync(new URL('./expected.json', import.meta.url), 'utf8')) as Record<string, Record<string, string>>;

/**
 * Runs a scenario and asserts that every check is SUCCESS (or INFO), apart from the checks
 * test/conformance/expected.json lists for it with the reason.
 */
export async function expectScenarioPasses(url: string, scenario: string): Promise<void> {
  const { checks } = await runScenario(url, scenario);
  expect(checks.length).toBeGreaterThan(0);
  const allowed = expected[scenario] ?? {};
  const bad = checks.filter((c) => c.status !== 'SUCCESS' && c.status !== 'INFO' && !(c.id in allowed)).map((c) => `${c.status} ${c.id}: ${c.errorMessage ?? c.description}`);
  expect(bad).toEqual([]);
}

/** The conformance fixture server (legacy, v1 SDK, stdio). */
export const CONFORMANCE_FIXTURE = fileURLToPath(new URL('../fixtures/conformance-server.ts', import.meta.url));

/** Opens one upstream session for each capability set the scenarios declare. */
export async function warmSessions(url: string): Promise<void> {
  const { rpc } = await import('../helpers/gateway.js');
  const sets = [{}, { elicitation: {} }, { sampling: {} }, { roots: {} }, { elicitation: {}, sampling: {}, roots: {} }, { elicitation: {}, sampling: {} }];
  await Promise.all(sets.map((caps) => rpc(url, 'tools/list', {}, { caps })));
}
