import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './processes.js';

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

/** Writes `config` to a temp file and starts `node <entry> --config FILE --port 0`; waits for the listening line. */
export async function startCli(config: Record<string, unknown>, entry: string[] = ['--import', 'tsx', 'src/main.ts'], env: Record<string, string> = {}): Promise<CliGateway> {
  const file = join(mkdtempSync(join(tmpdir(), 'mrtr-cli-')), 'gateway.config.json');
  writeFileSync(file, JSON.stringify(config));
  const child = spawn(process.execPath, [...entry, '--config', file, '--port', '0'], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.once('exit', (code, signal) => r({ code, signal })));
  const logs: Record<string, any>[] = [];
  try {
    const port = await listeningPort(child, logs, 20_000);
    return { child, port, base: `http://127.0.0.1:${port}`, logs, exited };
  } catch (e) {
    child.kill('SIGKILL');
    throw e;
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
