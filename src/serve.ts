/**
 * The gateway process behind the CLI (src/main.ts, which parses the flags and answers `--help`
 * before loading this): loads the config, starts tracing when `OTEL_*` asks for it, serves every
 * upstream, and stops cleanly on SIGTERM/SIGINT within `shutdownGraceMs`. Exit codes are those of
 * `--help`.
 */
import { serve as serveHttp } from '@hono/node-server';
import { ConfigError, readConfigFile, type LoadedConfig } from './config/load.js';
import { Gateway } from './router/router.js';
import { createApp } from './http/app.js';
import { httpServerOptions } from './http/server.js';
import { createLogger } from './observability/log.js';
import { describeTracing, startTracing } from './observability/tracing.js';
import { isLoopback } from './http/frontdoor.js';
import { endChildrenBy } from './upstream/stdio-child.js';

/** What the command line gave (flags win over `PORT` and `HOST`, read here). */
export interface ServeOptions {
  /** The config file: a gateway config or an `mcpServers` server list. */
  config: string;
  /** `--port`, unchecked (a decimal integer from 0 to 65535, or exit 2). */
  port?: string;
  /** `--host`. */
  host?: string;
  /** `LOG_LEVEL` as set (a level name in any case, already checked); wins over the config's `logLevel`. */
  logLevel?: string;
}

/**
 * The part of `shutdownGraceMs` kept after the drain for ending upstream sessions and children (a
 * stdio child that ignores SIGTERM gets SIGKILL `KILL_AFTER_MS`, 2 s, after it) and writing the
 * last answers, in ms; at most half of `shutdownGraceMs`.
 */
const CLOSE_RESERVE_MS = 2500;
/** How long before the end of `shutdownGraceMs` stdio children still running get SIGKILL, in ms (at most a quarter of it). */
const REAP_MS = 250;

/**
 * Starts the gateway and returns once it is set to listen; the process then runs until a signal
 * stops it. Errors that stop the start go to `fail` (a one-line message and the exit code: 2 for a
 * bad config, port or host without authentication; 1 when the address cannot be bound).
 */
export async function serve(opts: ServeOptions, fail: (message: string, code?: number) => never): Promise<void> {
  function load(file: string): LoadedConfig {
    try {
      return readConfigFile(file);
    } catch (e) {
      if (e instanceof ConfigError) fail(e.message);
      throw e;
    }
  }
  const loaded = load(opts.config);
  const cfg = loaded.config;
  // An empty PORT is unset, as an empty LOG_LEVEL is.
  const portArg = opts.port ?? (process.env.PORT || undefined);
  if (portArg !== undefined) {
    const port = /^\d{1,5}$/.test(portArg) ? Number(portArg) : NaN;
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      fail(`--port/PORT must be a decimal integer from 0 to 65535, got '${portArg}'`);
    cfg.listen.port = port;
  }
  const host = opts.host ?? process.env.HOST;
  if (host) cfg.listen.host = host;
  if (cfg.auth.mode === 'none' && !cfg.auth.allowAnonymous && !isLoopback(cfg.listen.host)) {
    fail(
      `refusing to listen on ${cfg.listen.host} without authentication: configure auth (apiKeys or jwt), listen on a loopback address, or set auth.allowAnonymous: true`,
    );
  }

  const log = createLogger(opts.logLevel ?? cfg.logLevel ?? 'info');
  if (loaded.format === 'mcpServers') {
    log.info({ config: opts.config, upstreams: Object.keys(cfg.upstreams) }, `serving the servers of the mcpServers file ${opts.config}`);
    if (loaded.disabled.length) log.info({ disabled: loaded.disabled }, `skipping disabled servers: ${loaded.disabled.join(', ')}`);
  }
  for (const w of loaded.warnings)
    log.warn(
      { config: opts.config, path: w.path, ignored: w.ignored },
      `${w.path}: ignoring keys the gateway does not use: ${w.ignored.join(', ')}`,
    );
  // Names only, never values.
  for (const c of loaded.childEnv) {
    log.info(
      { upstream: c.upstream, env: c.names, passedThrough: c.passedThrough },
      `stdio upstream ${c.upstream}: child environment beyond the safe set: ${c.names.length ? c.names.join(', ') : '(none)'}`,
    );
    if (c.unmatched.length)
      log.warn(
        { upstream: c.upstream, unmatched: c.unmatched },
        `stdio upstream ${c.upstream}: envPassthrough matched no variable: ${c.unmatched.join(', ')}`,
      );
  }
  // Before anything that makes spans; off (nothing loaded) unless OTEL_* asks for traces.
  const tracing = await startTracing();
  if (tracing) log.info({ tracing: describeTracing() }, 'tracing on: spans exported as OTEL_* configures');
  const gateway = new Gateway(cfg, log);
  if (gateway.generatedStateKey) {
    log.warn('no requestState key configured: generated one for this process; parked calls and their requestState die with it');
  }
  const front = createApp(gateway, log);
  const server = serveHttp(
    { fetch: front.app.fetch, port: cfg.listen.port, hostname: cfg.listen.host, serverOptions: httpServerOptions(cfg.limits) },
    (info) => {
      const h = info.family === 'IPv6' ? `[${info.address}]` : info.address;
      const base = `http://${h}:${info.port}`;
      const endpoints = [
        ...(cfg.federation.enabled ? [`POST ${base}/mcp`] : []),
        ...[...gateway.upstreams.keys()].map((n) => `POST ${base}/mcp/${n}`),
      ];
      const ops = ['GET /healthz', 'GET /readyz', 'GET /metrics', ...(cfg.admin.enabled ? ['GET /admin'] : [])].map((e) =>
        e.replace(' /', ` ${base}/`),
      );
      log.info(
        { address: info.address, port: info.port, endpoints, operations: ops, auth: cfg.auth.mode },
        `mrtr-gateway listening on ${base}; endpoints: ${endpoints.join(', ')}; operations: ${ops.join(', ')}`,
      );
      if (cfg.store.kind !== 'memory' && !cfg.replicas.advertiseUrl && /^(0\.0\.0\.0|::)$/.test(info.address)) {
        log.warn(
          { address: info.address },
          'listening on every address: set replicas.advertiseUrl so other replicas can forward calls here',
        );
      }
      gateway.startReplica(base);
      // Probe required upstreams at start so /readyz reflects them early.
      void gateway.readiness().then((r) => {
        for (const u of r.upstreams) if (!u.ready) log.warn({ upstream: u.name, reason: u.reason }, 'required upstream not ready');
      });
    },
  );
  const LISTEN_HINTS: Record<string, string> = {
    EADDRINUSE: 'another process is listening there (a gateway started before?); stop it, or choose another port with --port or PORT',
    EACCES: 'this user may not listen on that port; choose one above 1023 with --port or PORT',
    EADDRNOTAVAIL: 'no interface of this machine has that address; check listen.host',
  };
  server.on('error', (e: NodeJS.ErrnoException) => {
    const hint = e.code ? LISTEN_HINTS[e.code] : undefined;
    fail(`cannot listen on ${cfg.listen.host}:${cfg.listen.port}: ${e.code ?? e.message}${hint ? ` (${hint})` : ''}`, 1);
  });

  let stopping = false;
  /**
   * Graceful stop, all of it within shutdownGraceMs (ms) of the signal, so that a container runtime's
   * stop timeout (Docker 10 s, Kubernetes 30 s) sees exit code 0 rather than its SIGKILL. While
   * requests, parked calls or tasks are in flight, until CLOSE_RESERVE_MS (at most half of it)
   * before the end, the gateway keeps listening: new MCP calls get 503 / -32603 "gateway shutting
   * down" (retries of parked calls and tasks/* are still served), `/readyz` 503 and `/healthz` 200.
   * Then it stops listening, answers calls still running with -32603 "gateway shutting down", ends
   * upstream sessions and children, and exits 0. Stdio children still running REAP_MS before the
   * end get SIGKILL, and at the end it exits 0 whatever is left.
   */
  async function stop(signal: string): Promise<void> {
    if (stopping) return;
    stopping = true;
    const graceMs = cfg.shutdownGraceMs;
    const deadline = performance.now() + graceMs;
    const left = () => Math.max(0, deadline - performance.now());
    // Stdio children still running just before the end get SIGKILL, so they have exited when it comes.
    endChildrenBy(deadline - Math.min(REAP_MS, graceMs / 4));
    setTimeout(() => {
      log.warn({ graceMs }, 'shutdownGraceMs over: exiting without waiting for the rest');
      process.exit(0);
    }, graceMs);
    const drainMs = graceMs - Math.min(CLOSE_RESERVE_MS, graceMs / 2);
    log.info({ signal, graceMs, drainMs }, 'stopping: draining requests in flight');
    const inFlight = await front.drain(drainMs);
    if (inFlight) log.warn({ inFlight }, 'grace period over: answering the rest with gateway shutting down');
    // Stop accepting connections; idle keep-alive connections are closed now, busy ones below.
    server.close();
    // Bounded by the timer above: shutdown never waits on an upstream past shutdownGraceMs.
    await gateway.close().catch(() => {});
    await front.settle(Math.min(2000, left()));
    (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
    // The spans of the last requests are still buffered: export them (bounded).
    await tracing?.shutdown(Math.min(5000, left()));
    log.info('stopped');
    process.exit(0);
  }
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}
