/**
 * The baseline: the gateway at an earlier commit, run in the same benchmark beside the current
 * one, so "before" and "after" come from one run on one machine.
 *
 * The commit's tree is exported with `git archive` into a directory under the system temp dir
 * (kept between runs, keyed by commit), and the current `node_modules` is linked into it. Its own
 * `bench/gateway-process.ts` runs its gateway, steered over the same IPC protocol.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * The default baseline: the commit whose benchmark results (bench/results/latest.md of that
 * commit) set the performance targets of the upstream hop, the input round, parked memory and
 * tasks.
 */
export const DEFAULT_BASELINE = 'd794f99';

/** A baseline tree ready to run, or why there is none. */
export type Baseline = { ref: string; commit: string; root: string } | { ref: string; reason: string };

/**
 * Exports commit `ref` of the repository at `repo` and links `repo/node_modules` into it.
 * Never throws: a missing git, a shallow clone without the commit, or a tree without
 * bench/gateway-process.ts give `{reason}`.
 */
export function prepareBaseline(repo: string, ref: string): Baseline {
  try {
    const commit = execFileSync('git', ['rev-parse', '--short', `${ref}^{commit}`], {
      cwd: repo,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }).trim();
    const root = join(tmpdir(), `mrtr-gateway-baseline-${commit}`);
    if (!existsSync(join(root, '.complete'))) {
      rmSync(root, { recursive: true, force: true });
      mkdirSync(root, { recursive: true });
      execFileSync('sh', ['-c', `git archive --format=tar ${commit} | tar -x -C "${root}"`], { cwd: repo, stdio: 'ignore' });
      symlinkSync(join(repo, 'node_modules'), join(root, 'node_modules'));
      execFileSync('touch', [join(root, '.complete')]);
    }
    if (!existsSync(join(root, 'bench', 'gateway-process.ts'))) return { ref, reason: `commit ${commit} has no bench/gateway-process.ts` };
    return { ref, commit, root };
  } catch (e) {
    return { ref, reason: `commit ${ref} is not available here (${(e as Error).message.split('\n')[0]})` };
  }
}
