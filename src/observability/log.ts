/**
 * Structured JSON logs (pino). Level from `LOG_LEVEL`, else the config's `logLevel`, else `info`.
 */
import { pino, type DestinationStream, type Logger } from 'pino';
import { LOG_LEVELS, type LogLevel } from '../config/schema.js';

export type { Logger, LogLevel };
export { LOG_LEVELS };

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

/** True when `value` is one of {@link LOG_LEVELS}. */
export function isLogLevel(value: string): value is LogLevel {
  return (LOG_LEVELS as readonly string[]).includes(value);
}

/**
 * Creates the process logger: JSON lines to stdout, or to `destination` (tests).
 * @throws Error when `level` is not one of {@link LOG_LEVELS} (check with {@link isLogLevel} first).
 */
export function createLogger(level: string = process.env.LOG_LEVEL || 'info', destination?: DestinationStream): Logger {
  if (!isLogLevel(level)) throw new Error(`unknown log level '${level}'; expected one of ${LOG_LEVELS.join(', ')}`);
  const options = {
    level,
    base: { service: 'mrtr-gateway' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
  };
  return destination ? pino(options, destination) : pino(options);
}

/** A logger that drops everything (for library use and unit tests). */
export const silentLogger: Logger = pino({ level: 'silent' });
