/**
 * CLI: `mrtr-gateway [--config PATH] [--port N] [--host H]` (env `PORT`, `HOST`, `LOG_LEVEL`).
 * Loads the config (exit code 2 on a bad config), serves every upstream at `POST /mcp/NAME`, and
 * stops cleanly on SIGTERM/SIGINT.
 */
import { parseArgs } from 'node:util';
import { serve } from '@hono/node-server';
import { ConfigError, loadConfigFile } from './config/load.js';
import { Gateway } from './gateway.js';
import { createApp } from './http/app.js';
import { createLogger } from './observability/log.js';

function usage(): string {
  return 'usage: mrtr-gateway [--config gateway.config.json] [--port N] [--host H]';
}

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
  fail(`${(e as Error).message}\n${usage()}`);
}
if (args.help) {
  process.stdout.write(usage() + '\n');
  process.exit(0);
}

let cfg;
try {
  cfg = loadConfigFile(args.config!);
} catch (e) {
  if (e instanceof ConfigError) fail(e.message);
  throw e;
}
const portArg = args.port ?? process.env.PORT;
if (portArg !== undefined) {
  const port = Number(portArg);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`--port/PORT must be an integer from 0 to 65535, got '${portArg}'`);
  cfg.listen.port = port;
}
const host = args.host ?? process.env.HOST;
if (host) cfg.listen.host = host;

const log = createLogger();
const gateway = new Gateway(cfg, log);
if (gateway.generatedStateKey) {
  log.warn('no requestState key configured: generated one for this process; parked calls and their requestState die with it');
}
const app = createApp(gateway, log);
const server = serve({ fetch: app.fetch, port: cfg.listen.port, hostname: cfg.listen.host }, (info) => {
  const h = info.family === 'IPv6' ? `[${info.address}]` : info.address;
  const base = `http://${h}:${info.port}`;
  const endpoints = [...gateway.upstreams.keys()].map((n) => `POST ${base}/mcp/${n}`);
  log.info({ address: info.address, port: info.port, endpoints }, `mrtr-gateway listening on ${base}; endpoints: ${endpoints.join(', ')}`);
});
server.on('error', (e: NodeJS.ErrnoException) => fail(`cannot listen on ${cfg.listen.host}:${cfg.listen.port}: ${e.code ?? e.message}`, 1));

let stopping = false;
async function stop(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  log.info({ signal }, 'stopping');
  server.close();
  await gateway.close();
  log.info('stopped');
  process.exit(0);
}
process.on('SIGTERM', () => void stop('SIGTERM'));
process.on('SIGINT', () => void stop('SIGINT'));
