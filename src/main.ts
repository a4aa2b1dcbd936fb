/**
 * CLI: `mrtr-gateway [--config PATH] [--port N] [--host H]` (env `PORT`, `HOST`, `LOG_LEVEL`,
 * `OTEL_*`). Loads the config, a gateway config or an `mcpServers` server list (exit code 2 on a
 * bad config, flag or environment value, with a one-line message on stderr), starts tracing when
 * the `OTEL_*` variables ask for it, serves every upstream at `POST /mcp/NAME`, and stops cleanly
 * on SIGTERM/SIGINT within `shutdownGraceMs` (exit code 0), exporting the spans still buffered. `--help` lists the flags,
 * environment variables and exit codes.
 *
 * This module answers `--help` and a bad flag or `LOG_LEVEL` from node:util alone; the gateway
 * (src/serve.ts, with the config schema, the HTTP front door and the MCP SDKs) is loaded only after.
 */
import { parseArgs } from 'node:util';
import { SAFE_CHILD_ENV } from './config/child-env.js';
import { LOG_LEVELS, toLogLevel } from './config/log-levels.js';

function usage(): string {
  return 'usage: mrtr-gateway [--config PATH] [--port N] [--host H] [--help]';
}

function help(): string {
  return `${usage()}

Serves MCP servers (stdio, Streamable HTTP, HTTP+SSE) to MCP clients of every revision, each
upstream at POST /mcp/NAME.

Flags:
  -c, --config PATH  configuration file (default: gateway.config.json in the working directory):
                     a gateway config ({"upstreams": …}) or a server list as Claude and other
                     editors write it ({"mcpServers": …})
  -p, --port N       port to listen on, 0 for any free port (default: listen.port of the config,
                     8787); wins over PORT
      --host H       address to bind (default: listen.host of the config, 127.0.0.1); wins over HOST
  -h, --help         print this help and exit

Environment:
  PORT       port to listen on when --port is not given
  HOST       address to bind when --host is not given
  LOG_LEVEL  ${LOG_LEVELS.join(', ')}, in any case (default: logLevel of the config, else info)
  OTEL_*     OpenTelemetry traces: on when OTEL_TRACES_EXPORTER (not none),
             OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; the other
             standard variables (OTEL_SERVICE_NAME, OTEL_TRACES_SAMPLER, OTEL_EXPORTER_OTLP_*
             protocol, headers, timeout, OTEL_PROPAGATORS …) configure them. Off otherwise.
  \${NAME}    in any string of the config file: replaced with the variable NAME (unset: exit 2)
  A stdio upstream's child gets from the gateway's environment only the safe set
  (${SAFE_CHILD_ENV.join(', ')})
  and the variables its envPassthrough lists; its env comes on top.

Exit codes:
  0  stopped cleanly after SIGTERM or SIGINT; --help
  1  the address cannot be bound, or an unexpected error
  2  bad configuration, flag or environment value (PORT, LOG_LEVEL, an unset \${NAME}), or a
     non-loopback address without authentication

Logs are JSON lines on stdout; a message that stops the start goes to stderr.
`;
}

/** Writes `mrtr-gateway: MESSAGE` on stderr and exits with `code` (2: bad configuration, flag or environment value; 1: anything else). */
function fail(message: string, code = 2): never {
  process.stderr.write(`mrtr-gateway: ${message}\n`);
  process.exit(code);
}

let args;
try {
  args = parseArgs({
    options: {
      config: { type: 'string', short: 'c', default: 'gateway.config.json' },
      port: { type: 'string', short: 'p' },
      host: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
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

// An empty LOG_LEVEL counts as unset.
const envLogLevel = process.env.LOG_LEVEL || undefined;
if (envLogLevel !== undefined && !toLogLevel(envLogLevel))
  fail(`LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')} (in any case), got '${envLogLevel}'`);

const { serve } = await import('./serve.js');
await serve({ config: args.config!, port: args.port, host: args.host, logLevel: envLogLevel }, fail);
