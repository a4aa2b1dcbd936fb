/**
 * Programs from Debian packages that some tests run (`.ci/run` installs them). Without one, its
 * tests are skipped on a developer's machine, but fail in CI (`CI` set), so a CI that lost a
 * package cannot pass by skipping what it was meant to show.
 */
import { existsSync } from 'node:fs';
import { describe, it } from 'vitest';

/** The programs, by Debian package name, and where the package installs them. */
export const PROGRAMS = {
  chromium: '/usr/bin/chromium',
  'redis-server': '/usr/bin/redis-server',
  haproxy: '/usr/sbin/haproxy',
  'kubernetes-client': '/usr/bin/kubectl',
} as const;

export type Program = keyof typeof PROGRAMS;

/** Whether `env` says the tests run in CI (`CI` set to anything but "", "0" or "false"). */
export function inCi(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.CI !== undefined && !['', '0', 'false'].includes(env.CI.toLowerCase());
}

/**
 * What to do with tests that need `programs`: run them (all installed), skip them (some missing,
 * not in CI) or fail (some missing, in CI). `present` tells whether a path exists.
 */
export function verdict(
  programs: readonly Program[],
  env: NodeJS.ProcessEnv = process.env,
  present: (path: string) => boolean = existsSync,
): { run: true } | { run: false; fail: boolean; missing: Program[] } {
  const missing = programs.filter((p) => !present(PROGRAMS[p]));
  return missing.length ? { run: false, fail: inCi(env), missing } : { run: true };
}

/**
 * `describe(title, body)` for tests that need `programs`. With one missing, the block is skipped
 * (its title says why), or, in CI, replaced by one test that fails naming what to install.
 */
export function describeWith(programs: readonly Program[], title: string, body: () => void): void {
  const v = verdict(programs);
  if (v.run) return void describe(title, body);
  const why = `${v.missing.map((p) => PROGRAMS[p]).join(' and ')} not installed (apt-get install ${v.missing.join(' ')})`;
  if (!v.fail) return void describe.skip(`${title}: SKIPPED because ${why}`, body);
  describe(title, () => {
    it('has the programs it needs', () => {
      throw new Error(`${why}; in CI (CI=${process.env.CI}) a missing program fails these tests instead of skipping them`);
    });
  });
}
