/**
 * The processes a benchmark starts: the bench fixture (stdio or Streamable HTTP), gateways in
 * their own processes, and the peers mcp-proxy and supergateway. Everything listens on 127.0.0.1
 * (third-party servers get test/fixtures/loopback-only.mjs, which binds any listen() without a
 * host to 127.0.0.1 and reports the port). Every process started here is remembered, so
 * {@link stopAll} can end them when a benchmark fails.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ROOT, spawnListening, type SpawnedServer } from '../../test/helpers/processes.js';
import { compiledTree } from './build.js';

export { ROOT };

export const ECHO_FIXTURE = fileURLToPath(new URL('../fixtures/echo-server.ts', import.meta.url));
const RELAY = fileURLToPath(new URL('../fixtures/relay.ts', import.meta.url));
const GATEWAY_PROCESS = fileURLToPath(new URL('../gateway-process.ts', import.meta.url));
const MCP_PROXY_BIN = fileURLToPath(new URL('../../node_modules/mcp-proxy/dist/bin/mcp-proxy.mjs', import.meta.url));
const SUPERGATEWAY_BIN = fileURLToPath(new URL('../../node_modules/supergateway/dist/index.js', import.meta.url));

/** The command that runs the bench fixture over stdio. */
export const ECHO_STDIO = [process.execPath, '--import', 'tsx', ECHO_FIXTURE, 'stdio'];

/** Something started here that can be stopped. */
export interface Stoppable {
  label: string;
  stop(): Promise<void>;
}

const running = new Set<Stoppable>();

function track<T extends Stoppable>(s: T): T {
  running.add(s);
  const stop = s.stop.bind(s);
  s.stop = async () => {
    running.delete(s);
    await stop();
  };
  return s;
}

/** Stops everything still running (best effort, in reverse start order). */
export async function stopAll(): Promise<void> {
  for (const s of [...running].reverse()) await s.stop().catch(() => {});
}

/** An HTTP server process with its MCP endpoint. */
export interface HttpServer extends Stoppable {
  port: number;
  url: string;
  pid: number;
}

function server(label: string, srv: SpawnedServer, path: string): HttpServer {
  return track({ label, port: srv.port, url: `http://127.0.0.1:${srv.port}${path}`, pid: srv.child.pid!, stop: () => srv.stop() });
}

/** The bench fixture over Streamable HTTP (stateful), endpoint http://127.0.0.1:PORT/mcp. */
export async function startEchoHttp(): Promise<HttpServer> {
  return server('echo fixture (Streamable HTTP)', await spawnListening(['--import', 'tsx', ECHO_FIXTURE, 'http'], {}, 30_000), '/mcp');
}

/** The minimal relay (bench/fixtures/relay.ts) in front of `target`, endpoint http://127.0.0.1:PORT/mcp. */
export async function startRelay(target: string): Promise<HttpServer> {
  return server('minimal relay', await spawnListening(['--import', 'tsx', RELAY], { RELAY_TARGET: target }, 30_000), '/mcp');
}

/**
 * mcp-proxy in front of the stdio fixture, as its README says (`mcp-proxy [options] -- command
 * args`), Streamable HTTP only (`--server stream`), at http://127.0.0.1:PORT/mcp. That endpoint
 * serves 2025-era sessions and 2026-07-28 per-request calls alike.
 */
export async function startMcpProxy(): Promise<HttpServer> {
  const srv = await spawnListening(
    [MCP_PROXY_BIN, '--host', '127.0.0.1', '--port', '0', '--server', 'stream', '--', ...ECHO_STDIO],
    {},
    30_000,
  );
  return server('mcp-proxy (stdio fixture)', srv, '/mcp');
}

function shellQuote(args: string[]): string {
  return args.map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`)).join(' ');
}

/**
 * supergateway in front of the stdio fixture, stdio → Streamable HTTP in stateful mode, as its
 * README says (`--stdio "cmd" --outputTransport streamableHttp --stateful`), at
 * http://127.0.0.1:PORT/mcp. A legacy session gets its own child; a 2026-07-28 request gets a
 * child of its own for that request.
 */
export async function startSupergateway(): Promise<HttpServer> {
  const srv = await spawnListening(
    [
      SUPERGATEWAY_BIN,
      '--stdio',
      shellQuote(ECHO_STDIO),
      '--outputTransport',
      'streamableHttp',
      '--stateful',
      '--port',
      '0',
      '--logLevel',
      'none',
    ],
    {},
    30_000,
  );
  // supergateway drains stdin and allows itself a graceful stop of several seconds.
  return server('supergateway (stdio fixture)', { ...srv, stop: () => stopChild(srv.child, 8000) }, '/mcp');
}

/** SIGTERM, then SIGKILL after `graceMs`; resolves when the process has exited. */
export function stopChild(child: ChildProcess, graceMs = 5000): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), graceMs).unref();
  });
}

/** Counts of the gateway's parked calls, running tasks and upstream session pools. */
export interface GatewayStats {
  parked: number;
  tasksRunning: number;
  pools: Record<string, { total: number; idle: number; leased: number; waiting: number; failures: number }>;
}

/** A gateway running in bench/gateway-process.ts, steered over IPC. */
export class GatewayProcess implements Stoppable {
  private seq = 0;
  private readonly pending = new Map<number, { resolve: (v: any) => void; reject: (e: Error) => void }>();
  private exited = false;
  base = '';

  private constructor(
    readonly label: string,
    private readonly child: ChildProcess,
  ) {
    child.on('message', (m: { id: number; ok: boolean; error?: string }) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if (m.ok) p.resolve(m);
      else p.reject(new Error(`${label}: ${m.error}`));
    });
    child.once('exit', (code, signal) => {
      this.exited = true;
      for (const p of this.pending.values()) p.reject(new Error(`${label}: gateway process exited (${code ?? signal})`));
      this.pending.clear();
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  /**
   * Forks the process (with --expose-gc, and the Node flags in `BENCH_GATEWAY_NODE_ARGS`, space-separated, such as `--cpu-prof --cpu-prof-dir=DIR`) and starts a gateway with `config` in it.
   * The gateway runs compiled to JavaScript ({@link compiledTree}); with `BENCH_GATEWAY_SOURCE` set, from its TypeScript through tsx.
   * @param opts.root another checkout of the gateway to run (the baseline), else this one.
   * @param opts.env environment variables added to the process's (e.g. `OTEL_*`).
   */
  static async start(
    label: string,
    config: Record<string, unknown>,
    opts: { root?: string; env?: Record<string, string> } = {},
  ): Promise<GatewayProcess> {
    const root = opts.root ?? ROOT;
    const fromSource = Boolean(process.env.BENCH_GATEWAY_SOURCE);
    const entry = fromSource ? (opts.root ? join(root, 'bench', 'gateway-process.ts') : GATEWAY_PROCESS) : compiledTree(root);
    const child = fork(entry, [], {
      cwd: root,
      execArgv: [
        ...(fromSource ? ['--import', 'tsx'] : []),
        '--expose-gc',
        ...(process.env.BENCH_GATEWAY_NODE_ARGS?.split(' ').filter(Boolean) ?? []),
      ],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      env: { ...process.env, ...opts.env },
    });
    const gp = track(new GatewayProcess(label, child));
    const r = await gp.call<{ base: string }>('start', { config });
    gp.base = r.base;
    return gp;
  }

  url(upstream: string): string {
    return `${this.base}/mcp/${upstream}`;
  }

  private call<T>(op: string, extra: Record<string, unknown> = {}): Promise<T> {
    if (this.exited) return Promise.reject(new Error(`${this.label}: gateway process is not running`));
    const id = ++this.seq;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.child.send({ id, op, ...extra });
    });
  }

  /** process.memoryUsage() of the gateway process after a full GC. */
  async memory(): Promise<NodeJS.MemoryUsage> {
    return (await this.call<{ memory: NodeJS.MemoryUsage }>('memory')).memory;
  }

  async stats(): Promise<GatewayStats> {
    return this.call<GatewayStats>('stats');
  }

  /** Closes the gateway (parked calls cancelled, upstream sessions and stdio children ended), then the process. */
  async stop(): Promise<void> {
    if (this.exited) return;
    const exited = new Promise<void>((r) => (this.exited ? r() : this.child.once('exit', () => r())));
    await Promise.race([this.call('stop').catch(() => {}), new Promise((r) => setTimeout(r, 10_000))]);
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 5000);
    await exited;
    clearTimeout(timer);
  }
}
