/**
 * The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) as the wire sees it: its id, the
 * -32021 for a client that did not declare it, and the one message for a taskId the caller cannot
 * see.
 */
import { missingCapability, type GatewayError } from './errors.js';
import type { ClientCapabilities } from './wire.js';

/** The extension id, in capabilities and clientCapabilities `extensions`. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';

/** 400 / -32021 naming the tasks extension; `why` says what needed it. */
export function tasksExtensionRequired(why = ''): GatewayError {
  return missingCapability(
    { extensions: { [TASKS_EXTENSION]: {} } },
    `extensions["${TASKS_EXTENSION}"]${why ? ` (${why})` : ''}`,
    "this request's clientCapabilities",
    'The gateway serves tasks only to a client that declares',
  );
}

/** The message for an unknown, expired or foreign taskId (the same for all, so nothing leaks). */
export const TASK_NOT_FOUND = 'Failed to retrieve task: Task not found or expired';

/** True when the request declared the tasks extension ({@link TASKS_EXTENSION}) in its clientCapabilities. */
export function declaresTasks(req: { clientCapabilities: ClientCapabilities }): boolean {
  return Boolean((req.clientCapabilities.extensions as Record<string, unknown> | undefined)?.[TASKS_EXTENSION]);
}
