/**
 * Raw MCP requests for the benchmark: 2026-07-28 requests (headers and the `_meta` envelope, as
 * in the README), and legacy 2025-11-25 Streamable HTTP sessions opened by hand so a load
 * generator can reuse them.
 */

export const PROTOCOL = '2026-07-28';
export const LEGACY_PROTOCOL = '2025-11-25';
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
export const TASKS_CAPS = { extensions: { [TASKS_EXTENSION]: {} } };
export const ELICIT_CAPS = { elicitation: {} };

/** The echo payload every pass-through call sends and expects back. */
export const PAYLOAD = 'bench-payload-0123456789';

/** An HTTP request the load generator can send (`[<id>]` in the body becomes a unique id). */
export interface RawRequest {
  url: string;
  headers: Record<string, string>;
  body: string;
}

/** Placeholder autocannon replaces with a unique id per request (`idReplacement`). */
export const ID = '[<id>]';

export function envelope(caps: Record<string, unknown>): Record<string, unknown> {
  return { 'io.modelcontextprotocol/protocolVersion': PROTOCOL, 'io.modelcontextprotocol/clientCapabilities': caps };
}

/** A 2026-07-28 request: MCP-Protocol-Version, Mcp-Method, Mcp-Name headers and the envelope. */
export function modern(
  url: string,
  method: string,
  params: Record<string, unknown>,
  caps: Record<string, unknown> = {},
  id: string | number = ID,
): RawRequest {
  const name = (params.name ?? params.uri ?? params.taskId) as string | undefined;
  return {
    url,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': PROTOCOL,
      'mcp-method': method,
      ...(name !== undefined ? { 'mcp-name': name } : {}),
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, _meta: envelope(caps) } }),
  };
}

/** A legacy request on an open session (`mcp-session-id`, `mcp-protocol-version: 2025-11-25`). */
export function legacy(
  url: string,
  sessionId: string,
  method: string,
  params: Record<string, unknown>,
  id: string | number = ID,
): RawRequest {
  return {
    url,
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': LEGACY_PROTOCOL,
      'mcp-session-id': sessionId,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id, method, params }),
  };
}

/** The JSON-RPC message of a response body, JSON or SSE (the last `data:` line that parses). */
export function messageOf(text: string): any {
  const trimmed = text.trim();
  if (trimmed.startsWith('{')) return JSON.parse(trimmed);
  let last: any;
  for (const line of text.split('\n')) {
    if (!line.startsWith('data:')) continue;
    const data = line.slice(5).trim();
    if (!data) continue;
    try {
      last = JSON.parse(data);
    } catch {
      /* not JSON */
    }
  }
  if (last === undefined) throw new Error(`no JSON-RPC message in response: ${text.slice(0, 300)}`);
  return last;
}

/** Sends `req` (with `id` in place of the placeholder); returns the JSON-RPC message. Throws on non-2xx or a JSON-RPC error. */
export async function send(req: RawRequest, id: string | number = 1): Promise<{ message: any; headers: Headers }> {
  const body = req.body.replace(JSON.stringify(ID), JSON.stringify(id));
  const res = await fetch(req.url, { method: 'POST', headers: req.headers, body });
  const text = await res.text();
  if (res.status < 200 || res.status > 299) throw new Error(`POST ${req.url}: HTTP ${res.status}: ${text.slice(0, 500)}`);
  if (res.status === 202) return { message: undefined, headers: res.headers };
  const message = messageOf(text);
  if (message.error) throw new Error(`POST ${req.url}: JSON-RPC error ${JSON.stringify(message.error)}`);
  return { message, headers: res.headers };
}

/**
 * Opens a legacy Streamable HTTP session by hand: `initialize`, then `notifications/initialized`.
 * Returns the `mcp-session-id` to put on later requests.
 */
export async function openLegacySession(url: string, capabilities: Record<string, unknown> = {}): Promise<string> {
  const init = await send({
    url,
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: ID,
      method: 'initialize',
      params: { protocolVersion: LEGACY_PROTOCOL, capabilities, clientInfo: { name: 'mrtr-gateway-bench', version: '1.0.0' } },
    }),
  });
  const sessionId = init.headers.get('mcp-session-id');
  if (!sessionId) throw new Error(`${url}: initialize returned no mcp-session-id`);
  if (init.message?.result?.protocolVersion !== LEGACY_PROTOCOL) {
    throw new Error(`${url}: initialize negotiated ${JSON.stringify(init.message?.result?.protocolVersion)}, not ${LEGACY_PROTOCOL}`);
  }
  await send({
    ...legacy(url, sessionId, 'notifications/initialized', {}),
    body: JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
  });
  return sessionId;
}

/** Text of a tool result's text blocks. */
export function textOf(result: any): string {
  return ((result?.content ?? []) as { type: string; text?: string }[])
    .filter((c) => c.type === 'text')
    .map((c) => c.text)
    .join('\n');
}
