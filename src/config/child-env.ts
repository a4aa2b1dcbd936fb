/**
 * The environment of a stdio upstream's child process. It gets:
 *
 * 1. the safe set ({@link SAFE_CHILD_ENV}) from the gateway's own environment;
 * 2. the variables of the gateway's environment its `envPassthrough` names (`GITHUB_TOKEN`) or
 *    matches by prefix (`AWS_*`);
 * 3. its configured `env`, which wins over both.
 *
 * Nothing else of the gateway's environment (its own secrets included) reaches a child.
 *
 * Its working directory is its `cwd` ({@link cwdProblem} says when that cannot be one).
 */
import { statSync } from 'node:fs';

/**
 * Variables every stdio child gets from the gateway's environment when they are set. The SDK's
 * stdio transports add their own defaults (on Unix `HOME`, `LOGNAME`, `PATH`, `SHELL`, `TERM`,
 * `USER`), which this list contains. `NODE_OPTIONS` is left out: it carries the gateway's own Node
 * flags (`--inspect`, `--require`/`--import` of an agent, heap limits) into every Node child; an
 * upstream that needs it lists it in `envPassthrough` or sets it in `env`.
 */
export const SAFE_CHILD_ENV: readonly string[] =
  process.platform === 'win32'
    ? [
        'APPDATA',
        'COMSPEC',
        'HOMEDRIVE',
        'HOMEPATH',
        'LOCALAPPDATA',
        'PATH',
        'PATHEXT',
        'PROCESSOR_ARCHITECTURE',
        'PROGRAMDATA',
        'PROGRAMFILES',
        'PROGRAMFILES(X86)',
        'PROGRAMW6432',
        'SYSTEMDRIVE',
        'SYSTEMROOT',
        'TEMP',
        'USERNAME',
        'USERPROFILE',
        'WINDIR',
      ]
    : ['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'LANG', 'TMPDIR'];

/** One `envPassthrough` entry: a variable name, or a name prefix followed by `*`. A bare `*` is not allowed. */
export const ENV_PASSTHROUGH_PATTERN = /^[A-Za-z_][A-Za-z0-9_]*\*?$/;

const caseInsensitive = process.platform === 'win32';

/** True when variable `name` is matched by `pattern` (`NAME`, or `PREFIX*`). */
export function matchesPassthrough(name: string, pattern: string): boolean {
  const n = caseInsensitive ? name.toUpperCase() : name;
  const p = caseInsensitive ? pattern.toUpperCase() : pattern;
  return p.endsWith('*') ? n.startsWith(p.slice(0, -1)) : n === p;
}

/** The variables of `env` that `patterns` pass on, and the patterns that matched none. */
export function passthroughEnv(
  patterns: readonly string[],
  env: NodeJS.ProcessEnv,
): { values: Record<string, string>; unmatched: string[] } {
  const values: Record<string, string> = {};
  const unmatched: string[] = [];
  for (const pattern of patterns) {
    let hit = false;
    for (const [name, value] of Object.entries(env)) {
      if (value === undefined || !matchesPassthrough(name, pattern)) continue;
      values[name] = value;
      hit = true;
    }
    if (!hit) unmatched.push(pattern);
  }
  return { values, unmatched };
}

/** The safe set of `env`: the {@link SAFE_CHILD_ENV} variables that are set. */
export function safeChildEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of SAFE_CHILD_ENV) if (env[k] !== undefined) out[k] = env[k]!;
  return out;
}

/**
 * Why `dir` cannot be a child's working directory (`does not exist: DIR`, `is not a directory:
 * DIR`), or undefined when it can. Checked at config load, and again when a child fails to spawn
 * (Node then reports `spawn COMMAND ENOENT`, as for a missing command).
 */
export function cwdProblem(dir: string): string | undefined {
  try {
    return statSync(dir).isDirectory() ? undefined : `the working directory ${dir} is not a directory`;
  } catch {
    return `the working directory ${dir} does not exist`;
  }
}
