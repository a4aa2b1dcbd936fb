import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './processes.js';
import { scaled } from './budget.js';

/** A gateway started as its own process (the CLI), with its parsed log lines. */
export interface CliGateway {
  child: ChildProcess;
  port: number;
  base: string;
  logs: Record<string, any>[];
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/**
 * Reads a gateway process's JSON log lines from stdout into `logs` and resolves with the port of
 * its "listening" line. Rejects if the process exits first or `timeoutMs` passes.
 */
export function listeningPort(child: ChildProcess, logs: Record<string, any>[] = [], timeoutMs = 30_000): Promise<number> {
  timeoutMs = scaled(timeoutMs);
  return new Promise((resolve, reject) => {
    let buf = '';
    let stderr = '';
    const timer = setTimeout(() => reject(new Error(`gateway did not report listening within ${timeoutMs} ms: ${stderr}`)), timeoutMs);
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString();
      let nl: number;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          const entry = JSON.parse(line);
          logs.push(entry);
          if (typeof entry.port === 'number' && /listening/.test(entry.msg)) {
            clearTimeout(timer);
            resolve(entry.port);
          }
        } catch {
          /* not a JSON line */
        }
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited with ${code} before listening: ${stderr}`));
    });
  });
}

/** How to start the CLI: the node arguments before the flags, the working directory and extra environment. */
export interface CliOptions {
  /** Default: `--import tsx src/main.ts` (relative to the working directory). */
  entry?: string[];
  /** Default: the project root. */
  cwd?: string;
  /** Added to the environment; a variable set to undefined is left out. */
  env?: Record<string, string | undefined>;
}

/** Writes `config` to a temp file and starts `node <entry> --config FILE --port 0`; waits for the listening line. */
export async function startCli(
  config: Record<string, unknown>,
  entry: string[] = ['--import', 'tsx', 'src/main.ts'],
  env: Record<string, string> = {},
  cwd = ROOT,
): Promise<CliGateway> {
  const file = join(mkdtempSync(join(tmpdir(), 'mrtr-cli-')), 'gateway.config.json');
  writeFileSync(file, JSON.stringify(config));
  return startCliArgs(['--config', file, '--port', '0'], { entry, env, cwd });
}

/** Starts `node <entry> <args…>`; waits for the listening line. */
export async function startCliArgs(args: string[], opts: CliOptions = {}): Promise<CliGateway> {
  const entry = opts.entry ?? ['--import', 'tsx', 'src/main.ts'];
  const child = spawn(process.execPath, [...entry, ...args], {
    cwd: opts.cwd ?? ROOT,
    env: { ...process.env, LOG_LEVEL: 'info', ...opts.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  // 'exit' can come before the last lines on stdout were read; wait for the pipe to close too (a
  // process the gateway started that still holds it gets a second at most).
  const drained = new Promise<void>((r) => child.stdout!.once('close', () => r()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) =>
    child.once(
      'exit',
      (code, signal) => void Promise.race([drained, new Promise((t) => setTimeout(t, 1000))]).then(() => r({ code, signal })),
    ),
  );
  const logs: Record<string, any>[] = [];
  try {
    const port = await listeningPort(child, logs, 20_000);
    return { child, port, base: `http://127.0.0.1:${port}`, logs, exited };
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
  }
}

/** Runs `node <entry> <args…>` to its exit and resolves with its exit code and output. */
export function runCli(
  args: string[],
  opts: CliOptions & { timeoutMs?: number } = {},
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }> {
  const entry = opts.entry ?? ['--import', 'tsx', 'src/main.ts'];
  const timeoutMs = scaled(opts.timeoutMs ?? 20_000);
  return new Promise((resolve, reject) => {
    const env: NodeJS.ProcessEnv = { ...process.env, ...opts.env };
    // The PORT of the test's own environment is not the test's.
    if (!opts.env || !('PORT' in opts.env)) delete env.PORT;
    const child = spawn(process.execPath, [...entry, ...args], { cwd: opts.cwd ?? ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`CLI did not exit within ${timeoutMs} ms; stdout: ${stdout}; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/**
 * True when process `pid` runs: it exists and, where Linux's /proc tells, is not a zombie (one that
 * has exited and that its new parent, after its own parent's exit, has not reaped yet).
 */
export function running(pid: number): boolean {
  if (!alive(pid)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return process.platform !== 'linux';
  }
}

/** True when a process with this pid exists. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
