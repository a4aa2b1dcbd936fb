/**
 * Figure 6: start-up. Time from spawning the CLI on the default gateway.config.json (port 0) to
 * its "listening" log line, and to the first successful `tools/call` (server-everything's `echo`
 * over stdio, started by that first call), for `node --import tsx src/main.ts` and the built
 * `node dist/main.js`.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { modern, send, textOf } from '../lib/mcp.js';
import { ROOT, stopChild } from '../lib/procs.js';
import { figure, type Figure } from '../lib/stats.js';
import { listeningPort } from '../../test/helpers/cli.js';

export interface StartupFigures {
  entries: { label: string; listenMs: Figure; firstCallMs: Figure }[];
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
export function ensureBuilt(log: (s: string) => void): void {
  const main = join(ROOT, 'dist', 'main.js');
  if (existsSync(main) && statSync(main).mtimeMs >= newestMtime(join(ROOT, 'src'))) return;
  log('  dist/ is missing or older than src/: npm run build');
  const r = spawnSync('npm', ['run', 'build'], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`npm run build failed (${r.status}):\n${r.stdout}\n${r.stderr}`);
}

/** One start: spawn, wait for the listening line, make the first call, stop. */
async function startOnce(entry: string[]): Promise<{ listenMs: number; firstCallMs: number }> {
  const t0 = performance.now();
  const child = spawn(process.execPath, [...entry, '--config', 'gateway.config.json', '--port', '0'], {
    cwd: ROOT,
    env: { ...process.env, LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  try {
    const port = await listeningPort(child);
    child.stdout!.resume();
    const listenMs = performance.now() - t0;
    const r = await send(modern(`http://127.0.0.1:${port}/mcp/everything`, 'tools/call', { name: 'echo', arguments: { message: 'bench' } }), 1);
    const firstCallMs = performance.now() - t0;
    if (r.message.result?.resultType !== 'complete' || textOf(r.message.result) !== 'Echo: bench') {
      throw new Error(`first tools/call: unexpected result ${JSON.stringify(r.message)}`);
    }
    return { listenMs, firstCallMs };
  } finally {
    await stopChild(child, 10_000);
  }
}

export async function measureStartup(runs: number, withDist: boolean, log: (s: string) => void): Promise<StartupFigures> {
  const entries = [{ label: '`node --import tsx src/main.ts`', argv: ['--import', 'tsx', 'src/main.ts'] }];
  if (withDist) {
    ensureBuilt(log);
    entries.push({ label: '`node dist/main.js` (after `npm run build`)', argv: ['dist/main.js'] });
  }
  const out: StartupFigures = { entries: [] };
  const samples = entries.map(() => ({ listen: [] as number[], first: [] as number[] }));
  // Alternate the entries run by run.
  for (let run = 1; run <= runs; run++) {
    for (const [i, e] of entries.entries()) {
      const r = await startOnce(e.argv);
      samples[i]!.listen.push(r.listenMs);
      samples[i]!.first.push(r.firstCallMs);
      log(`  run ${run}/${runs}  ${e.label}: listening after ${r.listenMs.toFixed(0)} ms, first tools/call done after ${r.firstCallMs.toFixed(0)} ms`);
    }
  }
  for (const [i, e] of entries.entries()) out.entries.push({ label: e.label, listenMs: figure(samples[i]!.listen), firstCallMs: figure(samples[i]!.first) });
  return out;
}
