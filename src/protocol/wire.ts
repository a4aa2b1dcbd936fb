/**
 * MCP 2026-07-28 wire names and small shapes the gateway uses (schema/2026-07-28/schema.ts).
 */
import { z } from 'zod';
import { ClientCapabilitiesSchema } from '@modelcontextprotocol/core';

/** The protocol revision served downstream. */
export const PROTOCOL_VERSION = '2026-07-28';
/** Versions accepted in `_meta["io.modelcontextprotocol/protocolVersion"]`. */
export const SUPPORTED_VERSIONS = [PROTOCOL_VERSION] as const;

export const META_PROTOCOL_VERSION = 'io.modelcontextprotocol/protocolVersion';
export const META_CLIENT_CAPABILITIES = 'io.modelcontextprotocol/clientCapabilities';
export const META_CLIENT_INFO = 'io.modelcontextprotocol/clientInfo';
export const META_SERVER_INFO = 'io.modelcontextprotocol/serverInfo';
/** Request `_meta` key: the lowest log level the client wants as `notifications/message` (deprecated, SEP-2577). */
export const META_LOG_LEVEL = 'io.modelcontextprotocol/logLevel';
/** `_meta` key of every notification on a `subscriptions/listen` stream: the listen request's id. */
export const META_SUBSCRIPTION_ID = 'io.modelcontextprotocol/subscriptionId';
/** Lower-cased prefix of the `Mcp-Param-{Name}` request headers (SEP-2243). */
export const PARAM_HEADER_PREFIX = 'mcp-param-';
/** Legacy `params._meta` key a legacy server may set on a server-initiated request to choose its `inputRequests` key. */
export const META_INPUT_KEY_HINT = 'mrtr-gateway/inputKey';

/** Client capabilities as declared per request (ClientCapabilities). */
export type ClientCapabilities = z.infer<typeof ClientCapabilitiesSchema>;
export { ClientCapabilitiesSchema };

/** A JSON-RPC request id. */
export type RequestId = string | number;

/**
 * The key a response is matched to its request by: the id's string form, since a peer may send a
 * number id back as a string (`"7"` for `7`).
 */
export function idKey(id: RequestId): string {
  return String(id);
}

/** True when `id`, as a response carries it, answers the request sent with id `of` ({@link idKey}). */
export function sameId(id: unknown, of: RequestId): boolean {
  return id === of || (id !== undefined && id !== null && String(id) === idKey(of));
}

/** The methods served downstream, by how they are served. */
export const EXCHANGE_METHODS = ['tools/call', 'prompts/get', 'resources/read'] as const;
export const LIST_METHODS = ['tools/list', 'prompts/list', 'resources/list', 'resources/templates/list'] as const;
/** Tasks extension methods (SEP-2663); `Mcp-Name` carries `params.taskId`. */
export const TASK_METHODS = ['tasks/get', 'tasks/update', 'tasks/cancel'] as const;
export const SERVED_METHODS = [
  'server/discover',
  ...LIST_METHODS,
  ...EXCHANGE_METHODS,
  'completion/complete',
  ...TASK_METHODS,
  'subscriptions/listen',
] as const;
export type ExchangeMethod = (typeof EXCHANGE_METHODS)[number];
export type ServedMethod = (typeof SERVED_METHODS)[number];

/** Methods that 2026-07-28 removed; they get 404 / -32601 with a hint. */
export const REMOVED_METHODS: Record<string, string> = {
  initialize: 'MCP 2026-07-28 has no initialize handshake; send the _meta envelope on every request and call server/discover',
  ping: 'ping was removed in MCP 2026-07-28',
  'logging/setLevel': 'logging/setLevel was removed in MCP 2026-07-28; use _meta["io.modelcontextprotocol/logLevel"]',
  'resources/subscribe': 'resources/subscribe was removed in MCP 2026-07-28',
  'resources/unsubscribe': 'resources/unsubscribe was removed in MCP 2026-07-28',
  'tasks/result': 'tasks/result was removed in MCP 2026-07-28',
  'tasks/list': 'tasks/list was removed in MCP 2026-07-28',
};

/** Which capability a list or exchange method needs from the upstream. */
export const UPSTREAM_CAPABILITY_FOR: Record<string, 'tools' | 'prompts' | 'resources' | 'completions'> = {
  'tools/list': 'tools',
  'tools/call': 'tools',
  'prompts/list': 'prompts',
  'prompts/get': 'prompts',
  'resources/list': 'resources',
  'resources/templates/list': 'resources',
  'resources/read': 'resources',
  'completion/complete': 'completions',
};

/** One entry of `inputRequests`: a request object without `jsonrpc`/`id` (InputRequest). */
export interface InputRequest {
  method: 'elicitation/create' | 'sampling/createMessage' | 'roots/list';
  params: Record<string, unknown>;
}

/** `{"resultType":"input_required", inputRequests, requestState}` (InputRequiredResult). */
export interface InputRequiredResult {
  resultType: 'input_required';
  inputRequests?: Record<string, InputRequest>;
  requestState?: string;
  [k: string]: unknown;
}
