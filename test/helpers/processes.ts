import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { scaled } from './budget.js';

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const EVERYTHING = fileURLToPath(
  new URL('../../node_modules/@modelcontextprotocol/server-everything/dist/index.js', import.meta.url),
);
export const LOOPBACK_ONLY = fileURLToPath(new URL('../fixtures/loopback-only.mjs', import.meta.url));

/** A spawned server and the port it reported. */
export interface SpawnedServer {
  child: ChildProcess;
  port: number;
  stop(): Promise<void>;
}

/** Spawns `node args…` with the loopback-only preload and waits for "LISTENING <port>" on stderr. */
export function spawnListening(args: string[], env: Record<string, string> = {}, timeoutMs = 15_000): Promise<SpawnedServer> {
  timeoutMs = scaled(timeoutMs);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', LOOPBACK_ONLY, ...args], {
      env: { ...process.env, PORT: '0', ...env },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not report a port within ${timeoutMs} ms: ${err}`));
    }, timeoutMs);
    child.stderr!.on('data', (d: Buffer) => {
      err += d.toString();
      const m = /LISTENING (\d+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        child.stderr!.removeAllListeners('data');
        child.stderr!.resume();
        resolve({
          child,
          port: Number(m[1]),
          stop: () =>
            new Promise<void>((r) => {
              if (child.exitCode !== null || child.signalCode !== null) return r();
              child.once('exit', () => r());
              child.kill('SIGTERM');
              setTimeout(() => child.kill('SIGKILL'), 2000).unref();
            }),
        });
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening: ${err}`));
    });
  });
}

/** server-everything over Streamable HTTP on 127.0.0.1; its endpoint is http://127.0.0.1:PORT/mcp. */
export function startEverythingHttp(): Promise<SpawnedServer> {
  return spawnListening([EVERYTHING, 'streamableHttp']);
}
