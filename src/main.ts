/**
 * CLI: `mrtr-gateway [--config PATH] [--port N] [--host H] [--federate]` (env `PORT`, `HOST`,
 * `LOG_LEVEL`, `OTEL_*`). Loads the config, a gateway config or an `mcpServers` server list (exit
 * code 2 on a bad config, flag or environment value, with a one-line message on stderr), has
 * src/wiring.ts build the gateway (it starts tracing when the `OTEL_*` variables ask for it),
 * serves every upstream at `POST /mcp/NAME` (with `--federate`, all of them together at `POST /mcp`
 * too: `federation.enabled: true`, set before validation), and stops cleanly on SIGTERM/SIGINT
 * within `shutdownGraceMs` (exit code 0), exporting the spans still buffered. `--help` lists the
 * flags, environment variables and exit codes.
 *
 * `mrtr-gateway check …` is the config check of src/check.ts (exit code 0 or 2), which never listens.
 *
 * This module answers `--help` and a bad flag or `LOG_LEVEL` from node:util alone; the config
 * schema, the HTTP server and the gateway (src/wiring.ts, with the front door and the MCP SDKs) are
 * imported only after.
 */
import { parseArgs } from 'node:util';
import { START_FLAGS } from './cli-flags.js';
import { SAFE_CHILD_ENV } from './config/child-env.js';
import { LOG_LEVELS, logLevelProblem } from './config/log-levels.js';
import type { ServerType } from '@hono/node-server';
import type { LoadedConfig } from './config/load.js';
import type { GatewayConfig } from './config/schema.js';
import type { Logger } from './observability/log.js';
import type { Wiring } from './wiring.js';

function usage(): string {
  return 'usage: mrtr-gateway [--config PATH] [--port N] [--host H] [--federate] [--help]\n       mrtr-gateway check --config PATH [--connect [--timeout MS]] [--port N] [--host H] [--federate]';
}

function help(): string {
  return `${usage()}

Serves MCP servers (stdio, Streamable HTTP, HTTP+SSE) to MCP clients of every revision, each
upstream at POST /mcp/NAME.

Flags:
  -c, --config PATH  configuration file (default: gateway.config.json in the working directory):
                     a gateway config ({"upstreams": …}) or a server list as Claude and other
                     editors write it ({"mcpServers": …}; VS Code: {"servers": …})
  -p, --port N       port to listen on, 0 for any free port (default: listen.port of the config,
                     8787); wins over PORT
      --host H       address to bind (default: listen.host of the config, 127.0.0.1); wins over HOST
      --federate     serve every upstream together on POST /mcp too, tool and prompt names prefixed
                     NAME_ (sets federation.enabled: true; a gateway config keeps its other
                     federation settings)
  -h, --help         print this help and exit

Commands:
  check              check the config without serving: loads and validates it, resolves \${NAME},
                     refuses what the start refuses (PORT, HOST, LOG_LEVEL, --port, --host),
                     looks up each stdio command (PATH or path) and cwd; --connect also starts or
                     reaches each upstream (initialize or server/discover, --timeout MS, default
                     10000), then stops it. One line per upstream; exit 0 when all are ok, else 2.
                     mrtr-gateway check --help for more

Environment:
  PORT       port to listen on when --port is not given
  HOST       address to bind when --host is not given
  LOG_LEVEL  ${LOG_LEVELS.join(', ')}, in any case (default: logLevel of the config, else info)
  OTEL_*     OpenTelemetry traces: on when OTEL_TRACES_EXPORTER (not none),
             OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; the other
             standard variables (OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_*
             protocol, headers, timeout, OTEL_PROPAGATORS …) configure them. Off otherwise.
  \${NAME}    in any string of the config file: replaced with the variable NAME (unset: exit 2);
             \${NAME:-default}: default when NAME is unset or empty
  A stdio upstream's child gets from the gateway's environment only the safe set
  (${SAFE_CHILD_ENV.join(', ')})
  and the variables its envPassthrough lists; its env comes on top.

Exit codes:
  0  stopped cleanly after SIGTERM or SIGINT; --help; check: every upstream ok
  1  the address cannot be bound, or an unexpected error
  2  bad configuration, flag or environment value (PORT, LOG_LEVEL, an unset \${NAME}), or a
     non-loopback address without authentication; check: a problem found

Logs are JSON lines on stdout; a message that stops the start goes to stderr.
`;
}

/** Writes `mrtr-gateway: MESSAGE` on stderr and exits with `code` (2: bad configuration, flag or environment value; 1: anything else). */
function fail(message: string, code = 2): never {
  process.stderr.write(`mrtr-gateway: ${message}\n`);
  process.exit(code);
}

if (process.argv[2] === 'check') {
  const { runCheck } = await import('./check.js');
  process.exit(await runCheck(process.argv.slice(3)));
}

let args;
try {
  args = parseArgs({
    options: START_FLAGS,
    strict: true,
  }).values;
} catch (e) {
  // `npm start --port 1` hands npm the flag and the gateway only its value.
  const underNpm = process.env.npm_lifecycle_event !== undefined;
  const hint =
    underNpm && (e as { code?: string }).code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL'
      ? `\nflags for the gateway go after \`--\` with npm start, for example: npm start -- --port 9000`
      : '';
  fail(`${(e as Error).message}${hint}\n${usage()}`);
}
if (args.help) {
  process.stdout.write(help());
  process.exit(0);
}

// Before loading anything (src/start-settings.ts checks it again, with the rest).
const levelProblem = logLevelProblem(process.env);
if (levelProblem) fail(levelProblem);
// An empty LOG_LEVEL counts as unset.
const envLogLevel = process.env.LOG_LEVEL || undefined;

/** What the command line gave (flags win over `PORT` and `HOST`, read here). */
interface Options {
  /** The config file: a gateway config or an `mcpServers` server list. */
  config: string;
  /** `--port`, unchecked (a decimal integer from 0 to 65535, or exit 2). */
  port?: string;
  /** `--host`. */
  host?: string;
  /** `--federate`: `federation.enabled: true` whatever the file says. */
  federate?: boolean;
  /** `LOG_LEVEL` as set (a level name in any case, already checked); wins over the config's `logLevel`. */
  logLevel?: string;
}

/**
 * Loads the config file and applies `--port`/`PORT` and `--host`/`HOST` (src/start-settings.ts),
 * then makes the logger and logs what the file left out. Exits 2 (through {@link fail}) on a bad
 * config, port, or a non-loopback address without authentication.
 */
async function loadConfig(opts: Options): Promise<{ cfg: GatewayConfig; log: Logger }> {
  const [{ ConfigError, readConfigFile }, { applyStartSettings }, { createLogger }] = await Promise.all([
    import('./config/load.js'),
    import('./start-settings.js'),
    import('./observability/log.js'),
  ]);
  let loaded: LoadedConfig;
  try {
    loaded = readConfigFile(opts.config, process.env, { federate: opts.federate });
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message);
    throw e;
  }
  const cfg = loaded.config;
  const refused = applyStartSettings(cfg, opts, process.env);
  if (refused) fail(refused);
  const log = createLogger(opts.logLevel ?? cfg.logLevel ?? 'info');
  logLoaded(loaded, opts.config, log);
  return { cfg, log };
}

/** Logs what reading config file `file` found: the servers of an `mcpServers` file, keys ignored, stdio children's environment (names only). */
function logLoaded(loaded: LoadedConfig, file: string, log: Logger): void {
  const cfg = loaded.config;
  if (loaded.format === 'mcpServers') {
    log.info({ config: file, upstreams: Object.keys(cfg.upstreams) }, `serving the servers of the mcpServers file ${file}`);
    if (loaded.disabled.length) log.info({ disabled: loaded.disabled }, `skipping disabled servers: ${loaded.disabled.join(', ')}`);
  }
  for (const w of loaded.warnings)
    log.warn(
      { config: file, path: w.path, ignored: w.ignored },
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
}

const LISTEN_HINTS: Record<string, string> = {
  EADDRINUSE: 'another process is listening there (a gateway started before?); stop it, or choose another port with --port or PORT',
  EACCES: 'this user may not listen on that port; choose one above 1023 with --port or PORT',
  EADDRNOTAVAIL: 'no interface of this machine has that address; check listen.host',
};

/**
 * Serves the front door of `gw` on `listen.host`:`listen.port`. Once listening it logs the
 * endpoints, starts this replica's heartbeat and probes the required upstreams (so `/readyz`
 * reflects them early). Exits 1 (through {@link fail}) when the address cannot be bound.
 */
async function listen(gw: Wiring, log: Logger): Promise<ServerType> {
  const [{ serve }, { httpServerOptions }] = await Promise.all([import('@hono/node-server'), import('./http/server.js')]);
  const cfg = gw.cfg;
  const server = serve(
    { fetch: gw.front.app.fetch, port: cfg.listen.port, hostname: cfg.listen.host, serverOptions: httpServerOptions(cfg.limits) },
    (info) => {
      const h = info.family === 'IPv6' ? `[${info.address}]` : info.address;
      const base = `http://${h}:${info.port}`;
      const endpoints = [
        ...(cfg.federation.enabled ? [`POST ${base}/mcp`] : []),
        ...[...gw.upstreams.keys()].map((n) => `POST ${base}/mcp/${n}`),
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
      gw.startReplica(base);
      // Probe required upstreams at start so /readyz reflects them early.
      void gw.readiness().then((r) => {
        for (const u of r.upstreams) if (!u.ready) log.warn({ upstream: u.name, reason: u.reason }, 'required upstream not ready');
      });
    },
  );
  server.on('error', (e: NodeJS.ErrnoException) => {
    const hint = e.code ? LISTEN_HINTS[e.code] : undefined;
    fail(`cannot listen on ${cfg.listen.host}:${cfg.listen.port}: ${e.code ?? e.message}${hint ? ` (${hint})` : ''}`, 1);
  });
  return server;
}

/**
 * On the first SIGTERM or SIGINT, stops gracefully ({@link Wiring.stop}) and exits 0; exits 0
 * anyway once `shutdownGraceMs` is over.
 */
function stopOnSignals(gw: Wiring, server: ServerType, log: Logger): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    const graceMs = gw.cfg.shutdownGraceMs;
    setTimeout(() => {
      log.warn({ graceMs }, 'shutdownGraceMs over: exiting without waiting for the rest');
      process.exit(0);
    }, graceMs);
    await gw.stop(server, signal);
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

const { cfg, log } = await loadConfig({
  config: args.config!,
  port: args.port,
  host: args.host,
  federate: args.federate,
  logLevel: envLogLevel,
});
const { wire } = await import('./wiring.js');
const gw = await wire(cfg, log).catch((e: unknown) =>
  // A destination of the audit trail that cannot be written is the configuration's problem.
  e instanceof Error && e.name === 'AuditDestinationError' ? fail(e.message) : Promise.reject(e),
);
stopOnSignals(gw, await listen(gw, log), log);
