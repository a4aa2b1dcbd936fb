/**
 * Tool calls run as 2025-11-25 tasks on a legacy upstream (MCP 2025-11-25 basic/utilities/tasks):
 * the `execution.taskSupport` of the upstream's tools, and a `tools/call` sent as a task and
 * followed with `tasks/get` and `tasks/result` until it ends. Used by {@link UpstreamSession}
 * (src/upstream/session.ts), whose requests they send.
 */
import { setTimeout as delay } from 'node:timers/promises';
import type { ResponseMessage } from '@modelcontextprotocol/sdk/shared/responseMessage.js';
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  ErrorCode,
  GetTaskResultSchema,
  ListToolsResultSchema,
  McpError,
  type CallToolResult,
} from '@modelcontextprotocol/sdk/types.js';
import type { z } from 'zod';
import type { SessionRequestOptions } from './session-connection.js';

/** Sends one request on a session ({@link UpstreamSession.request}). */
export type SessionRequester = <S extends z.ZodType>(
  request: { method: string; params?: Record<string, unknown> },
  schema: S,
  options?: SessionRequestOptions,
) => Promise<z.infer<S>>;

/** Poll interval of an upstream task whose `tasks/get` names none, in ms (the v1 SDK's default). */
const DEFAULT_TASK_POLL_MS = 1000;

/**
 * The 2025-11-25 `execution.taskSupport` of every tool the upstream lists (all pages of
 * `tools/list`, each within `timeoutMs`), by tool name; `forbidden` where a tool declares none.
 */
export async function listTaskSupport(request: SessionRequester, timeoutMs: number): Promise<Map<string, string>> {
  const map = new Map<string, string>();
  let cursor: string | undefined;
  do {
    const page = (await request({ method: 'tools/list', params: cursor ? { cursor } : {} }, ListToolsResultSchema, {
      timeout: timeoutMs,
    })) as z.infer<typeof ListToolsResultSchema>;
    for (const t of page.tools) map.set(t.name, (t as { execution?: { taskSupport?: string } }).execution?.taskSupport ?? 'forbidden');
    cursor = page.nextCursor;
  } while (cursor);
  return map;
}

/**
 * Runs `tools/call` as a 2025-11-25 task upstream (`params.task` with `ttlMs`), then polls
 * `tasks/get` (every `pollInterval` the upstream names, else 1 s) and fetches `tasks/result`
 * once the task completed or needs input, as the v1 SDK's `callToolStream` does; each of these
 * requests goes through `request` (the session's {@link UpstreamSession.request}, so a session the
 * upstream forgot is re-initialized and the request sent once more).
 * @yields `taskCreated`, then `taskStatus` per poll, then one `result` or `error` (the task
 *   failed or was cancelled upstream, -32603).
 * @throws what `request` throws; the abort reason once `options.signal` aborts.
 */
export async function* callToolAsTask(
  request: SessionRequester,
  params: Record<string, unknown>,
  ttlMs: number,
  options: SessionRequestOptions,
): AsyncGenerator<ResponseMessage<CallToolResult>> {
  const created = await request({ method: 'tools/call', params }, CreateTaskResultSchema, { ...options, task: { ttl: ttlMs } });
  const taskId = created.task.taskId;
  yield { type: 'taskCreated', task: created.task };
  for (;;) {
    const task = await request({ method: 'tasks/get', params: { taskId } }, GetTaskResultSchema, options);
    yield { type: 'taskStatus', task };
    if (task.status === 'completed' || task.status === 'input_required') {
      // tasks/result blocks until the task is terminal, delivering its queued requests meanwhile.
      const result = await request({ method: 'tasks/result', params: { taskId } }, CallToolResultSchema, options);
      yield { type: 'result', result };
      return;
    }
    if (task.status === 'failed' || task.status === 'cancelled') {
      yield {
        type: 'error',
        error: new McpError(ErrorCode.InternalError, `Task ${taskId} ${task.status === 'failed' ? 'failed' : 'was cancelled'}`),
      };
      return;
    }
    await delay(task.pollInterval ?? DEFAULT_TASK_POLL_MS, undefined, { signal: options.signal });
  }
}
