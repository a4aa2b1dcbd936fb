/**
 * What the command line and the environment add to a loaded configuration, and the start's
 * refusals of them, shared by the start (src/main.ts) and `mrtr-gateway check` (src/check.ts) so
 * that check refuses what the start refuses: a `LOG_LEVEL` that names no level, a `--port`/`PORT`
 * that is not a port, and a non-loopback address (`--host`, `HOST` or `listen.host`) without
 * authentication. Part of the `main` layer.
 */
import { logLevelProblem } from './config/log-levels.js';
import type { GatewayConfig } from './config/schema.js';
import { isLoopback } from './http/frontdoor.js';

/** The flags that change where the gateway listens, unchecked (they win over `PORT` and `HOST`). */
export interface ListenFlags {
  /** `--port`: a decimal integer from 0 to 65535. */
  port?: string;
  /** `--host`: the address to bind. */
  host?: string;
}

/**
 * Applies `--port`/`PORT` and `--host`/`HOST` of `env` to `cfg.listen` (a flag wins; an empty
 * variable counts as unset) and checks `LOG_LEVEL` and whether the gateway may listen there.
 * @returns the message that stops the start (exit code 2), or undefined when it may start.
 */
export function applyStartSettings(cfg: GatewayConfig, flags: ListenFlags, env: NodeJS.ProcessEnv): string | undefined {
  const level = logLevelProblem(env);
  if (level) return level;
  const portArg = flags.port ?? (env.PORT || undefined);
  if (portArg !== undefined) {
    const port = /^\d{1,5}$/.test(portArg) ? Number(portArg) : NaN;
    if (!Number.isInteger(port) || port < 0 || port > 65535)
      return `--port/PORT must be a decimal integer from 0 to 65535, got '${portArg}'`;
    cfg.listen.port = port;
  }
  const host = flags.host ?? env.HOST;
  if (host) cfg.listen.host = host;
  if (cfg.auth.mode === 'none' && !cfg.auth.allowAnonymous && !isLoopback(cfg.listen.host))
    return `refusing to listen on ${cfg.listen.host} without authentication: configure auth (apiKeys or jwt), listen on a loopback address, or set auth.allowAnonymous: true`;
  return undefined;
}
