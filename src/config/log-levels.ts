/** Log level names (pino's), apart from the config schema so the CLI can name them without loading it. */

/** Log levels accepted by `logLevel` and the `LOG_LEVEL` environment variable (pino's names). */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
/** One of {@link LOG_LEVELS}. */
export type LogLevel = (typeof LOG_LEVELS)[number];

/** The level `value` names, in any case (`DEBUG` is `debug`); undefined when it names none. */
export function toLogLevel(value: string): LogLevel | undefined {
  const level = value.toLowerCase();
  return (LOG_LEVELS as readonly string[]).includes(level) ? (level as LogLevel) : undefined;
}

/**
 * Why the `LOG_LEVEL` of `env` stops the start (exit 2), or undefined when it is unset, empty
 * (counts as unset) or names a level.
 */
export function logLevelProblem(env: NodeJS.ProcessEnv): string | undefined {
  const value = env.LOG_LEVEL || undefined;
  return value === undefined || toLogLevel(value)
    ? undefined
    : `LOG_LEVEL must be one of ${LOG_LEVELS.join(', ')} (in any case), got '${value}'`;
}
