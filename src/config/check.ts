/**
 * The static part of `mrtr-gateway check` (src/check.ts), per upstream of a loaded configuration:
 * a stdio upstream's `command` can be spawned (a path: an executable file, relative ones against
 * the child's working directory; a bare name: found on the `PATH` the child gets) and its `cwd` is
 * a directory (an HTTP upstream's `url` the schema checked). Nothing is started or reached here.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, resolve } from 'node:path';
import { cwdProblem, safeChildEnv } from './child-env.js';
import type { UpstreamConfig } from './schema.js';

/** What the check found of one upstream before starting or reaching it. */
export interface StaticCheck {
  name: string;
  transport: UpstreamConfig['transport'];
  /** What is started or reached: the command line of a stdio upstream, the URL of an HTTP one. */
  target: string;
  /** Why the upstream cannot work (one line), or undefined when nothing was found. */
  problem?: string;
}

/** Why `file` cannot be executed (`does not exist`, `is a directory`, `is not executable`), or undefined when it can. */
function executableProblem(file: string): string | undefined {
  let isFile: boolean;
  try {
    isFile = statSync(file).isFile();
  } catch {
    return 'does not exist';
  }
  if (!isFile) return 'is not a file';
  try {
    accessSync(file, constants.X_OK);
    return undefined;
  } catch {
    return 'is not executable';
  }
}

/**
 * Why `command` cannot be spawned by a child with environment `childEnv` in directory `cwd`, or
 * undefined when it can: a name with a path separator must be an executable file (relative to
 * `cwd`); a bare name must be one in a directory of `childEnv.PATH` (on Windows with an extension
 * of `PATHEXT`), as the spawn looks it up.
 */
export function commandProblem(command: string, childEnv: Record<string, string | undefined>, cwd: string): string | undefined {
  if (/[/\\]/.test(command)) {
    const file = resolve(cwd, command);
    const problem = executableProblem(file);
    return problem && `command '${command}' ${problem}${file === command ? '' : ` (${file})`}`;
  }
  const path = childEnv.PATH ?? childEnv.Path;
  const exts = process.platform === 'win32' ? ['', ...(childEnv.PATHEXT ?? '.EXE;.CMD;.BAT;.COM').split(';')] : [''];
  for (const dir of (path ?? '').split(delimiter))
    for (const ext of exts) if (!executableProblem(resolve(cwd, dir || '.', command + ext))) return undefined;
  return path === undefined ? `command '${command}' cannot be looked up: the child gets no PATH` : `command '${command}' not found on PATH`;
}

/**
 * The static check of upstream `name` (config as loaded: `env` with its `envPassthrough` values,
 * `cwd` absolute). `env` is the gateway's environment (the child's safe set comes from it);
 * `baseDir` is the gateway's working directory, where a child without `cwd` runs.
 */
export function checkUpstream(name: string, u: UpstreamConfig, env: NodeJS.ProcessEnv = process.env, baseDir = process.cwd()): StaticCheck {
  // The schema has already refused a url that is not http(s).
  if (u.transport !== 'stdio') return { name, transport: u.transport, target: u.url };
  const target = [u.command, ...u.args].join(' ');
  const problem =
    (u.cwd ? cwdProblem(u.cwd) : undefined) ?? commandProblem(u.command, { ...safeChildEnv(env), ...u.env }, u.cwd ?? baseDir);
  return { name, transport: 'stdio', target, ...(problem ? { problem } : {}) };
}
