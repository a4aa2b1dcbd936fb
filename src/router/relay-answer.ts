/**
 * How a wrapper in front of a legacy session's relay (the consent gate, src/router/consent-gate.ts;
 * the approval relay, src/router/approval-relay.ts) answers a client request itself: the answer
 * goes to the client's transport, and the request is reported like any relayed one (the request
 * log line, metrics, the audit line).
 */
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import type { ApprovalAudit } from '../protocol/connection.js';
import { reasonOf, type JsonRpcErrorObject } from '../protocol/errors.js';
import type { DownstreamTransport, RelayedRequest, RelayMessage } from '../upstream/legacy-relay.js';

/** A result or a JSON-RPC error, as the gateway answers a client request itself. */
export type OwnAnswer = { result: Record<string, unknown> } | { error: JsonRpcErrorObject };

/**
 * Sends `answer` to client request `m` on `downstream` (a send that fails is dropped: the session
 * is gone) and reports it to `onRequest`: its method, its `name` (or resource `uri`), the time since
 * `startedAt` (`performance.now()` ms), the outcome, and the error's code and `data.reason`.
 */
export async function answerOwn(
  to: { downstream: DownstreamTransport; onRequest?: (r: RelayedRequest) => void },
  m: RelayMessage,
  answer: OwnAnswer,
  startedAt: number,
  approval?: ApprovalAudit,
): Promise<void> {
  const error = 'error' in answer ? answer.error : undefined;
  const reason = reasonOf(error?.data);
  const p = m.params;
  to.onRequest?.({
    id: m.id,
    method: m.method!,
    name: typeof p?.name === 'string' ? p.name : typeof p?.uri === 'string' ? p.uri : undefined,
    durationMs: performance.now() - startedAt,
    outcome: error ? 'error' : 'complete',
    ...(error ? { code: error.code } : {}),
    ...(reason ? { reason } : {}),
    ...(approval ? { approval } : {}),
  });
  await to.downstream.send({ jsonrpc: '2.0', id: m.id!, ...answer } as JSONRPCMessage).catch(() => {});
}
