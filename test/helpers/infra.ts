/**
 * Real infrastructure for the multi-replica tests, started on 127.0.0.1: a Redis server
 * (Debian's `redis-server`) and a round-robin load balancer (Debian's `haproxy`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer, connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ROOT } from './processes.js';
import { scaled } from './budget.js';

/** A free TCP port on 127.0.0.1 (taken from the OS, then released). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Resolves once something accepts TCP connections on `port`, or rejects after `timeoutMs`. */
export async function waitForPort(port: number, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + scaled(timeoutMs);
  while (Date.now() < end) {
    const ok = await new Promise<boolean>((r) => {
      const sock = connect(port, '127.0.0.1');
      sock.once('connect', () => (sock.destroy(), r(true)));
      sock.once('error', () => r(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`nothing listened on 127.0.0.1:${port} within ${timeoutMs} ms`);
}

function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((r) => {
    if (child.exitCode !== null || child.signalCode !== null) return r();
    child.once('exit', () => r());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 2000).unref();
  });
}

/** A Redis server the test controls; `stop` and `start` keep its port. */
export interface TestRedis {
  port: number;
  url: string;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Starts `redis-server` on a free port of 127.0.0.1, without persistence (each `start` begins
 * empty), or with `opts.appendOnly` with the append-only file on (`appendfsync always`, in a temp
 * directory), so that what was written survives `stop` and `start`.
 */
export async function startRedis(opts: { appendOnly?: boolean } = {}): Promise<TestRedis> {
  const port = await freePort();
  const persistence = opts.appendOnly
    ? ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', mkdtempSync(join(tmpdir(), 'mrtr-redis-'))]
    : ['--appendonly', 'no'];
  let child: ChildProcess | undefined;
  const redis: TestRedis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    start: async () => {
      child = spawn(
        'redis-server',
        ['--port', String(port), '--bind', '127.0.0.1', '--save', '', ...persistence, '--protected-mode', 'yes'],
        { stdio: 'ignore' },
      );
      await waitForPort(port);
    },
    stop: async () => {
      if (child) await stopChild(child);
      child = undefined;
    },
  };
  await redis.start();
  return redis;
}

/** A load balancer in front of backends; `url(path)` is the address clients use. */
export interface TestBalancer {
  port: number;
  base: string;
  stop(): Promise<void>;
}

/** The balancer of the deployment recipe, which {@link startHaproxy} runs. */
export const RECIPE_HAPROXY = join(ROOT, 'config/replicas/haproxy.cfg');

/**
 * Starts haproxy on a free port of 127.0.0.1 with the recipe's configuration
 * (config/replicas/haproxy.cfg: round robin, health checks of /healthz, retries sent to another
 * replica), in front of `backends` (ports) instead of the recipe's, checking each every
 * `checkIntervalMs` instead of the recipe's interval.
 * @throws Error when the recipe no longer has the lines this replaces.
 */
export async function startHaproxy(backends: number[], checkIntervalMs = 300): Promise<TestBalancer> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'mrtr-haproxy-'));
  const file = join(dir, 'haproxy.cfg');
  let cfg = readFileSync(RECIPE_HAPROXY, 'utf8');
  const replace = (pattern: RegExp, by: string) => {
    if (!pattern.test(cfg)) throw new Error(`${RECIPE_HAPROXY} has no line matching ${pattern}`);
    cfg = cfg.replace(pattern, by);
  };
  replace(/^(\s*)bind \S+$/m, `$1bind 127.0.0.1:${port}`);
  replace(/^(\s*default-server .*)\binter \S+/m, `$1inter ${checkIntervalMs}ms`);
  replace(/^\s*server .*\n/gm, '');
  // The backend is the file's last section: the test's replicas end it.
  cfg = `${cfg.trimEnd()}\n${backends.map((p, i) => `  server replica${i} 127.0.0.1:${p}`).join('\n')}\n`;
  writeFileSync(file, cfg);
  const child = spawn('haproxy', ['-db', '-f', file], { stdio: 'ignore' });
  await waitForPort(port);
  return { port, base: `http://127.0.0.1:${port}`, stop: () => stopChild(child) };
}
