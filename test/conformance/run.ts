/**
 * Runs one scenario of the official conformance CLI (@modelcontextprotocol/conformance, Node 20
 * through the globSync load hook) against a URL and returns its checks.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

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
