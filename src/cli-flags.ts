/**
 * The command-line flags the start (src/main.ts) and `mrtr-gateway check` (src/check.ts) share, as
 * `node:util` `parseArgs` options. Imports nothing, so that `--help` and a bad flag are answered
 * before the gateway's modules load. Part of the `main` layer.
 */

/** The `node:util` `parseArgs` options the start and `check` share: `--config`, `--port`, `--host`, `--federate`, `--help`. */
export const START_FLAGS = {
  config: { type: 'string', short: 'c', default: 'gateway.config.json' },
  port: { type: 'string', short: 'p' },
  host: { type: 'string' },
  federate: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;
