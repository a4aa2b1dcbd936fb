/**
 * A legacy upstream's messages in 2026-07-28 shapes, as the Exchange hands them on: a
 * server-initiated request as an `inputRequests` entry, a result without the 2025-11-25
 * related-task `_meta`, a 2025-11-25 -32042 (URL elicitation required) as URL-mode input requests.
 */
import type { McpError } from '@modelcontextprotocol/sdk/types.js';
import { missingCapability, upstreamFailed, type GatewayError } from '../../protocol/errors.js';
import { missingFor } from '../../protocol/capabilities.js';
import type { ClientCapabilities, InputRequest } from '../../protocol/wire.js';
import type { ServerInitiatedRequest } from '../../upstream/session-calls.js';

/** Maps a legacy server-initiated request to a 2026 `inputRequests` entry (no `_meta`, no `elicitationId`, no `task`). */
export function toInputRequest(req: ServerInitiatedRequest): InputRequest {
  const method = req.method as InputRequest['method'];
  if (method === 'roots/list') return { method, params: {} };
  const { _meta, task, elicitationId, ...params } = (req.params ?? {}) as Record<string, unknown>;
  void _meta;
  void task;
  void elicitationId;
  return { method, params };
}

/** A result without the 2025-11-25 `_meta["io.modelcontextprotocol/related-task"]` (not used in 2026-07-28). */
export function withoutRelatedTask(result: Record<string, unknown>): Record<string, unknown> {
  const meta = result._meta as Record<string, unknown> | undefined;
  if (!meta || !('io.modelcontextprotocol/related-task' in meta)) return result;
  const { 'io.modelcontextprotocol/related-task': _rt, ...rest } = meta;
  const { _meta: _m, ...body } = result;
  return Object.keys(rest).length ? { ...body, _meta: rest } : body;
}

/**
 * The input requests of a 2025-11-25 -32042 (URL elicitation required): one URL-mode
 * `elicitation/create` per entry of its `data.elicitations`. Or the error that ends the call:
 * -32603 `protocol` when it names none, -32021 when `caps` lack URL elicitation.
 */
export function urlElicitations(upstream: string, err: McpError, caps: ClientCapabilities): InputRequest[] | GatewayError {
  const list = (err.data as { elicitations?: unknown } | undefined)?.elicitations;
  if (!Array.isArray(list) || list.length === 0) {
    return upstreamFailed(upstream, 'protocol', `Upstream '${upstream}' required URL elicitation without saying which (${err.message})`);
  }
  const requests = list.map((e) => toInputRequest({ method: 'elicitation/create', params: { ...(e as object), mode: 'url' } }));
  for (const r of requests) {
    const missing = missingFor(caps, r);
    if (missing) return missingCapability(missing, JSON.stringify(missing));
  }
  return requests;
}
