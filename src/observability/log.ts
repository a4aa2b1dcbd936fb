/**
 * Structured JSON logs (pino). Level from `LOG_LEVEL` (default `info`).
 */
import { pino, type Logger } from 'pino';

export type { Logger };

/** Creates the process logger; writes JSON lines to stdout. */
export function createLogger(level = process.env.LOG_LEVEL ?? 'info'): Logger {
  return pino({
    level,
    base: { service: 'mrtr-gateway' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: { paths: ['secret', '*.secret', 'headers.authorization', '*.headers.authorization'], censor: '[redacted]' },
  });
}

/** A logger that drops everything (for library use and unit tests). */
export const silentLogger: Logger = pino({ level: 'silent' });
