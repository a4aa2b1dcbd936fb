/**
 * Structured JSON logs (pino). Level from `LOG_LEVEL`, else the config's `logLevel`, else `info`.
 */
import { pino, type DestinationStream, type Logger } from 'pino';
import { LOG_LEVELS, toLogLevel, type LogLevel } from '../config/schema.js';
import { REDACTED } from '../security/redact.js';

export type { Logger, LogLevel };
export { LOG_LEVELS, toLogLevel };

/**
 * Fields whose values never reach the log: requestState secrets, the callers' and the upstreams'
 * authorization headers, and LLM provider API keys (`apiKey` at any of the first three levels,
 * `x-api-key` headers).
 */
export const REDACTED_PATHS = [
  'secret',
  '*.secret',
  'headers.authorization',
  '*.headers.authorization',
  'apiKey',
  '*.apiKey',
  '*.*.apiKey',
  'headers["x-api-key"]',
  '*.headers["x-api-key"]',
];

/**
 * Creates the process logger: JSON lines to stdout, or to `destination` (tests). `name` is one of
 * {@link LOG_LEVELS} in any case.
 * @throws Error when `name` is not a level (check with {@link toLogLevel} first).
 */
export function createLogger(name: string = process.env.LOG_LEVEL || 'info', destination?: DestinationStream): Logger {
  const level = toLogLevel(name);
  if (!level) throw new Error(`unknown log level '${name}'; expected one of ${LOG_LEVELS.join(', ')}`);
  const options = {
    level,
    base: { service: 'mrtr-gateway' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: REDACTED_PATHS, censor: REDACTED },
  };
  return destination ? pino(options, destination) : pino(options);
}

/** A logger that drops everything (for library use and unit tests). */
export const silentLogger: Logger = pino({ level: 'silent' });
