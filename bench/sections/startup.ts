/**
 * Figure 6: start-up, for the commands a user types: `npm start` and the `mrtr-gateway` bin
 * (`npx mrtr-gateway`), and in full runs the built `node dist/main.js`. For each, the time from
 * spawning `… --help` to its exit, and from spawning it on the default gateway.config.json (port 0)
 * to its "listening" log line and to the first successful `tools/call` (server-everything's `echo`
 * over stdio, started by that first call). Medians of a few runs, the commands taking turns.
 *
 * Also runs alone: `node --import tsx bench/sections/startup.ts [--runs N] [--dist] [--root DIR]`
 * prints the figure's table (`--root`: another checkout of the gateway, with its node_modules).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { modern, send, textOf } from '../lib/mcp.js';
import { ROOT } from '../lib/procs.js';
import { figure, fmt, table, type Figure } from '../lib/stats.js';
import { listeningPort } from '../../test/helpers/cli.js';

/** One command's figures, in ms from spawning it. */
export interface StartupEntry {
  label: string;
  /** To the exit (code 0) of `--help`. */
  helpMs: Figure;
  /** To the "listening" log line, on the default config. */
  listenMs: Figure;
  /** To the answer of the first `tools/call`. */
  firstCallMs: Figure;
}

export interface StartupFigures {
  entries: StartupEntry[];
}

/** How a command is spawned: the program and its arguments before the gateway's flags. */
interface Command {
  label: string;
  file: string;
  args: string[];
}

function newestMtime(dir: string): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestMtime(p) : statSync(p).mtimeMs);
  }
  return newest;
}

/** Runs `npm run build` when dist/main.js is missing or older than a file under src/. */
export function ensureBuilt(log: (s: string) => void, root = ROOT): void {
  const main = join(root, 'dist', 'main.js');
  if (existsSync(main) && statSync(main).mtimeMs >= newestMtime(join(root, 'src'))) return;
  log('  dist/ is missing or older than src/: npm run build');
  const r = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`npm run build failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
}

/** The commands measured: `npm start`, the bin, and (`withDist`) the built dist/main.js. */
function commands(root: string, withDist: boolean): Command[] {
  const out: Command[] = [
    // As typed: npm's own start-up is part of what the user waits for. `--` passes the flags on.
    { label: '`npm start`', file: 'npm', args: ['start', '--'] },
    {
      label: '`mrtr-gateway` (the bin, as `npx mrtr-gateway` runs it)',
      file: process.execPath,
      args: [join(root, 'bin', 'mrtr-gateway.js')],
    },
  ];
  if (withDist) out.push({ label: '`node dist/main.js` (after `npm run build`)', file: process.execPath, args: ['dist/main.js'] });
  return out;
}

function env(): NodeJS.ProcessEnv {
  const e: NodeJS.ProcessEnv = { ...process.env, LOG_LEVEL: 'info' };
  delete e.PORT;
  delete e.HOST;
  return e;
}

/** One `--help`: spawn, wait for exit code 0 with the help text on stdout. */
async function helpOnce(c: Command, root: string): Promise<number> {
  const t0 = performance.now();
  const child = spawn(c.file, [...c.args, '--help'], { cwd: root, env: env(), stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((r) => child.once('close', (c) => r(c)));
  const ms = performance.now() - t0;
  if (code !== 0 || !out.includes('Exit codes:'))
    throw new Error(`${c.label} --help: exit code ${code}; stdout: ${out.slice(0, 300)}; stderr: ${err.slice(0, 500)}`);
  return ms;
}

/**
 * Stops a command started in a process group of its own: SIGTERM to the group (as Ctrl-C in a
 * terminal signals it: npm, the gateway and its stdio children alike; a SIGTERM to npm alone need
 * not reach the gateway), SIGKILL to it after 10 s; resolves once every process holding its
 * stdout has exited.
 */
async function stopGroup(child: ChildProcess): Promise<void> {
  const closed = new Promise<void>((r) => (child.stdout!.closed ? r() : child.stdout!.once('close', () => r())));
  const signal = (s: NodeJS.Signals) => {
    try {
      process.kill(-child.pid!, s);
    } catch {
      // The group is gone.
    }
  };
  signal('SIGTERM');
  const timer = setTimeout(() => signal('SIGKILL'), 10_000);
  await closed;
  clearTimeout(timer);
}

/** One start: spawn, wait for the listening line, make the first call, stop. */
async function startOnce(c: Command, root: string): Promise<{ listenMs: number; firstCallMs: number }> {
  const t0 = performance.now();
  const child = spawn(c.file, [...c.args, '--config', 'gateway.config.json', '--port', '0'], {
    cwd: root,
    env: env(),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  try {
    const port = await listeningPort(child);
    child.stdout!.resume();
    const listenMs = performance.now() - t0;
    const r = await send(
      modern(`http://127.0.0.1:${port}/mcp/everything`, 'tools/call', { name: 'echo', arguments: { message: 'bench' } }),
      1,
    );
    const firstCallMs = performance.now() - t0;
    if (r.message.result?.resultType !== 'complete' || textOf(r.message.result) !== 'Echo: bench') {
      throw new Error(`first tools/call: unexpected result ${JSON.stringify(r.message)}`);
    }
    return { listenMs, firstCallMs };
  } finally {
    await stopGroup(child);
  }
}

/**
 * Measures each command `runs` times (the commands taking turns: `--help`, then a start).
 * @param withDist also `node dist/main.js`, built first when dist/ is missing or older than src/.
 * @param root the checkout to start (default: this one).
 */
export async function measureStartup(runs: number, withDist: boolean, log: (s: string) => void, root = ROOT): Promise<StartupFigures> {
  if (withDist) ensureBuilt(log, root);
  const entries = commands(root, withDist);
  const samples = entries.map(() => ({ help: [] as number[], listen: [] as number[], first: [] as number[] }));
  for (let run = 1; run <= runs; run++) {
    for (const [i, c] of entries.entries()) {
      const help = await helpOnce(c, root);
      const r = await startOnce(c, root);
      samples[i]!.help.push(help);
      samples[i]!.listen.push(r.listenMs);
      samples[i]!.first.push(r.firstCallMs);
      log(
        `  run ${run}/${runs}  ${c.label}: --help ${help.toFixed(0)} ms, listening after ${r.listenMs.toFixed(0)} ms, first tools/call done after ${r.firstCallMs.toFixed(0)} ms`,
      );
    }
  }
  return {
    entries: entries.map((c, i) => ({
      label: c.label,
      helpMs: figure(samples[i]!.help),
      listenMs: figure(samples[i]!.listen),
      firstCallMs: figure(samples[i]!.first),
    })),
  };
}

/** The figure's table (Markdown). */
export function startupTable(f: StartupFigures): string {
  return table(
    ['command', 'time to --help, ms', 'time to listen (default config), ms', 'to first tools/call, ms'],
    f.entries.map((e) => [e.label, fmt(e.helpMs, 0), fmt(e.listenMs, 0), fmt(e.firstCallMs, 0)]),
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const { values } = parseArgs({
    options: { runs: { type: 'string', default: '3' }, dist: { type: 'boolean', default: false }, root: { type: 'string' } },
    strict: true,
  });
  const log = (s: string) => process.stderr.write(`${s}\n`);
  const f = await measureStartup(Number(values.runs), values.dist!, log, values.root ? resolve(values.root) : ROOT);
  process.stdout.write(`${startupTable(f)}\n`);
}
