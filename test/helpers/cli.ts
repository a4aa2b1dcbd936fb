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

/** Writes `config` to a temp file and starts `node <entry> --config FILE --port 0`; waits for the listening line. */
export function startCli(config: Record<string, unknown>, entry: string[] = ['--import', 'tsx', 'src/main.ts'], env: Record<string, string> = {}): Promise<CliGateway> {
  const file = join(mkdtempSync(join(tmpdir(), 'mrtr-cli-')), 'gateway.config.json');
  writeFileSync(file, JSON.stringify(config));
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...entry, '--config', file, '--port', '0'], { cwd: ROOT, env: { ...process.env, LOG_LEVEL: 'info', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    const logs: Record<string, any>[] = [];
    let buf = '';
    let stderr = '';
    const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((r) => child.once('exit', (code, signal) => r({ code, signal })));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`gateway did not start: ${stderr}`));
    }, 20_000);
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
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
            resolve({ child, port: entry.port, base: `http://127.0.0.1:${entry.port}`, logs, exited });
          }
        } catch {
          /* not JSON */
        }
      }
    });
    void exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`gateway exited with ${code}: ${stderr}`));
    });
  });
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
