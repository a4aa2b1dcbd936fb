/**
 * Downstream request validation for MCP 2026-07-28 over Streamable HTTP:
 * JSON-RPC shape, method routing, the per-request `_meta` envelope (SEP-2575) and the
 * standard headers `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` (SEP-2243). The
 * `Mcp-Param-{Name}` headers are collected here and checked by the router, which knows the tool's
 * schema (src/protocol/param-headers.ts).
 */
import { z } from 'zod';
import { LoggingLevelSchema } from '@modelcontextprotocol/core';
import { LRUCache } from 'lru-cache';
import { ErrorCode, GatewayError, badEnvelope, headerMismatch, invalidParams, methodNotFound, quoted } from './errors.js';
import {
  ClientCapabilitiesSchema,
  META_CLIENT_CAPABILITIES,
  META_LOG_LEVEL,
  META_PROTOCOL_VERSION,
  PARAM_HEADER_PREFIX,
  PROTOCOL_VERSION,
  REMOVED_METHODS,
  SERVED_METHODS,
  SUPPORTED_VERSIONS,
  TASK_METHODS,
  type ClientCapabilities,
  type RequestId,
  type ServedMethod,
} from './wire.js';

/** A downstream request that passed every envelope and header check. */
export interface ValidatedRequest {
  id: RequestId;
  method: ServedMethod;
  /** `params` without `_meta`. */
  params: Record<string, unknown>;
  /** The request's `_meta` object (envelope included). */
  meta: Record<string, unknown>;
  protocolVersion: string;
  clientCapabilities: ClientCapabilities;
  /** `_meta.progressToken`, when the client asked for progress. */
  progressToken?: string | number;
  /**
   * For `tools/call`: the request's `Mcp-Param-{Name}` headers (SEP-2243), keyed by the lower-cased
   * `{Name}`, with their raw values. The router checks them against the tool's `x-mcp-header`
   * annotations; empty for other methods.
   */
  paramHeaders: Record<string, string>;
}

/** Minimal header access (Fetch `Headers` fits): lookup by case-insensitive name, and iteration with lower-cased names. */
export interface HeaderSource {
  get(name: string): string | null;
  forEach(callback: (value: string, name: string) => void): void;
}

/** True for a JSON object (not null, not an array). */
export const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

const ID_TYPE = 'must be a string or an integer (an MCP request id is never null)';
/** Why a numeric JSON-RPC id past `Number.MAX_SAFE_INTEGER` is refused (the start of a sentence: "id …"). */
export const ID_BEYOND_SAFE = `is beyond ±${Number.MAX_SAFE_INTEGER} (2^53 - 1): a JSON number past it loses digits, so no response could carry the same id; send a smaller integer or a string`;

const JsonRpcRequestSchema = z.object({
  jsonrpc: z.literal('2.0'),
  id: z
    .union([z.string(), z.number()], { error: ID_TYPE })
    .superRefine((id, ctx) => {
      if (typeof id === 'string' || Number.isSafeInteger(id)) return;
      ctx.addIssue({ code: 'custom', message: Number.isInteger(id) ? ID_BEYOND_SAFE : ID_TYPE });
    })
    .optional(),
  method: z.string().min(1),
  // An object, its members checked where they are used (a record schema would visit every key of every request).
  params: z
    .custom<Record<string, unknown>>(isObject, { message: 'Invalid input: expected an object (JSON-RPC params by name)' })
    .optional(),
});

/**
 * True when a JSON-RPC message (or any message of a batch) carries a numeric `id` that is an
 * integer past ±(2^53 - 1): `JSON.parse` rounded it, so a response could not echo it (JSON-RPC 2.0
 * §5 requires the same id).
 */
export function hasIdBeyondSafe(body: unknown): boolean {
  return (Array.isArray(body) ? body : [body]).some(
    (m) => isObject(m) && typeof m.id === 'number' && Number.isInteger(m.id) && !Number.isSafeInteger(m.id),
  );
}

/**
 * The JSON-RPC id of a body if it has a usable one, else null (for error responses). An integer
 * beyond 2^53 - 1 is not usable: `JSON.parse` already rounded it, and echoing the rounded number
 * would name another request.
 */
export function idOf(body: unknown): RequestId | null {
  if (body && typeof body === 'object' && !Array.isArray(body)) {
    const id = (body as { id?: unknown }).id;
    if (typeof id === 'string' || (typeof id === 'number' && Number.isSafeInteger(id))) return id;
  }
  return null;
}

/** Header field-value characters (RFC 9110 §5.5): visible ASCII, space and tab. */
const FIELD_VALUE = /^[\t\x20-\x7e]*$/;
/** Canonical Base64 (RFC 4648 §4): whole quanta, `=` padding only at the end. */
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;
const SENTINEL_PREFIX = '=?base64?';
const SENTINEL_SUFFIX = '?=';
const utf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * The value of an `Mcp-Name` or `Mcp-Param-{Name}` header as the body would carry it (MCP
 * 2026-07-28 Streamable HTTP §"Value Encoding"): surrounding whitespace trimmed, and a value
 * written `=?base64?{Base64}?=` (the lower-case sentinel, both ends) decoded as UTF-8. Any other
 * value is literal.
 * @param header the header's name, for error messages.
 * @throws GatewayError -32020 HeaderMismatch (HTTP 400) when the value has characters a header
 *   value may not carry, or the sentinel wraps something that is not canonical Base64 of UTF-8.
 */
export function decodeHeaderValue(raw: string, header = 'Mcp-Name'): string {
  if (!FIELD_VALUE.test(raw))
    throw headerMismatch(`The ${header} header contains characters that are not allowed in a header value; encode it as =?base64?…?=`);
  const v = raw.trim();
  if (v.length < SENTINEL_PREFIX.length + SENTINEL_SUFFIX.length || !v.startsWith(SENTINEL_PREFIX) || !v.endsWith(SENTINEL_SUFFIX))
    return v;
  const b64 = v.slice(SENTINEL_PREFIX.length, -SENTINEL_SUFFIX.length);
  if (!BASE64.test(b64)) throw headerMismatch(`The ${header} header is not valid =?base64?…?= (bad Base64 characters or padding)`);
  try {
    return utf8.decode(Buffer.from(b64, 'base64'));
  } catch {
    throw headerMismatch(`The ${header} header is not valid =?base64?…?= (the decoded bytes are not UTF-8)`);
  }
}

/**
 * Parses the JSON-RPC framing. @throws GatewayError -32600 (HTTP 400): for an empty batch, any
 * batch, a JSON-RPC response (accepted only within a legacy session), or a body that is not a
 * request or notification (the message names the first bad field).
 */
export function parseJsonRpc(body: unknown): z.infer<typeof JsonRpcRequestSchema> {
  if (Array.isArray(body) && body.length === 0) {
    throw new GatewayError(
      ErrorCode.InvalidRequest,
      'Invalid Request: the body is an empty JSON-RPC batch; send one request per POST',
      undefined,
      400,
    );
  }
  if (isObject(body) && body.method === undefined && ('result' in body || 'error' in body)) {
    throw new GatewayError(
      ErrorCode.InvalidRequest,
      'Invalid Request: a JSON-RPC response is accepted only within a legacy session (Mcp-Session-Id); MCP 2026-07-28 clients POST requests and notifications only',
      undefined,
      400,
    );
  }
  if (Array.isArray(body)) {
    throw new GatewayError(ErrorCode.InvalidRequest, 'JSON-RPC batches are not supported; send one request per POST', undefined, 400);
  }
  const parsed = JsonRpcRequestSchema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.length ? issue.path.join('.') : 'body';
    throw new GatewayError(ErrorCode.InvalidRequest, `Invalid JSON-RPC request: ${where}: ${issue.message}`, undefined, 400);
  }
  return parsed.data;
}

/**
 * Type checks of the params the gateway forwards, so a malformed request gets -32602 here rather
 * than a confusing error from the upstream.
 * @throws GatewayError -32602 (HTTP 200) naming the field.
 */
function checkParamTypes(method: string, params: Record<string, unknown>): void {
  const bad = (field: string, what: string) => invalidParams(`${method}: params.${field} must be ${what}`);
  if ((method === 'tools/call' || method === 'prompts/get') && params.arguments !== undefined && !isObject(params.arguments))
    throw bad('arguments', 'an object');
  if (
    method === 'prompts/get' &&
    isObject(params.arguments) &&
    Object.values(params.arguments as object).some((v) => typeof v !== 'string')
  ) {
    throw bad('arguments', 'an object of strings');
  }
  if (params.cursor !== undefined && typeof params.cursor !== 'string') throw bad('cursor', 'a string');
  if (method === 'completion/complete' && (!isObject(params.ref) || !isObject(params.argument)))
    throw invalidParams('completion/complete: params.ref and params.argument must be objects');
  if (params.inputResponses !== undefined && !isObject(params.inputResponses))
    throw bad('inputResponses', 'an object mapping input keys to responses');
  if (method === 'subscriptions/listen' && params.notifications !== undefined) {
    const n = params.notifications as Record<string, unknown>;
    const strings = (v: unknown) => v === undefined || (Array.isArray(v) && v.every((t) => typeof t === 'string'));
    const flag = (v: unknown) => v === undefined || typeof v === 'boolean';
    if (
      !isObject(n) ||
      !flag(n.toolsListChanged) ||
      !flag(n.promptsListChanged) ||
      !flag(n.resourcesListChanged) ||
      !strings(n.resourceSubscriptions) ||
      !strings(n.taskIds)
    ) {
      throw bad(
        'notifications',
        'a subscription filter: toolsListChanged, promptsListChanged and resourcesListChanged booleans, resourceSubscriptions and taskIds arrays of strings',
      );
    }
  }
}

/** The `Mcp-Param-*` headers of a request, keyed by the lower-cased name after the prefix. */
function paramHeadersOf(headers: HeaderSource): Record<string, string> {
  const out: Record<string, string> = {};
  headers.forEach((value, name) => {
    // Both sources name headers in lower case (Node's IncomingMessage.headers, the Fetch Headers).
    if (name.startsWith(PARAM_HEADER_PREFIX) && name.length > PARAM_HEADER_PREFIX.length)
      out[name.slice(PARAM_HEADER_PREFIX.length)] = value;
  });
  return out;
}

/**
 * Parsed `clientCapabilities` by their JSON text: a client sends the same capabilities with every
 * request, and parsing them is the largest part of checking an envelope. The parsed values are
 * frozen, since requests share them.
 */
const parsedCapabilities = new LRUCache<string, ClientCapabilities>({ max: 256 });

/** `value` frozen, with every object and array in it (for values that requests share). */
export function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === 'object' && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const v of Object.values(value)) deepFreeze(v);
  }
  return value;
}

/**
 * `value` parsed as ClientCapabilities (MCP 2026-07-28 schema).
 * @throws GatewayError 400 / -32602 naming the first bad field (its path and zod's message).
 */
function parseClientCapabilities(value: unknown): ClientCapabilities {
  const key = JSON.stringify(value);
  const known = parsedCapabilities.get(key);
  if (known) return known;
  const parsed = ClientCapabilitiesSchema.safeParse(value);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const where = issue.path.length ? `: ${issue.path.map(String).join('.')}` : '';
    throw badEnvelope(
      `params._meta["${META_CLIENT_CAPABILITIES}"] must be a ClientCapabilities object ({} declares none)${where}: ${issue.message}`,
    );
  }
  const caps = deepFreeze(parsed.data as ClientCapabilities);
  parsedCapabilities.set(key, caps);
  return caps;
}

/** The `_meta` logging levels (MCP LoggingLevel, RFC 5424 severities). */
const LOG_LEVELS: readonly string[] = LoggingLevelSchema.options;

/**
 * The 400 / -32602 for a request without the 2026-07-28 envelope and without a legacy session:
 * it may come from either era, so the message says what each must do.
 */
const noEnvelope = (method: string) =>
  badEnvelope(
    `${method}: no _meta envelope and no session: a 2026-07-28 client must send params._meta with "${META_PROTOCOL_VERSION}" and "${META_CLIENT_CAPABILITIES}"; a 2025-era client must call initialize first`,
  );

/**
 * Validates one JSON-RPC request against the 2026-07-28 rules, in this order:
 * method (404/-32601), `_meta` envelope and its `progressToken` (string or number) and `logLevel`
 * (a LoggingLevel) (400/-32602), `MCP-Protocol-Version` header equal to the
 * envelope's version (400/-32020), version supported (400/-32022), `Mcp-Method` and `Mcp-Name`
 * headers (400/-32020), `params.name`/`params.uri` presence (400/-32602), types of forwarded
 * params (200/-32602).
 * @throws GatewayError with the HTTP status of the error contract.
 */
export function validateRequest(req: z.infer<typeof JsonRpcRequestSchema> & { id: RequestId }, headers: HeaderSource): ValidatedRequest {
  const { method } = req;
  if (Object.hasOwn(REMOVED_METHODS, method)) throw methodNotFound(`Method not found: ${method}. ${REMOVED_METHODS[method]}`);
  if (!(SERVED_METHODS as readonly string[]).includes(method)) throw methodNotFound(`Method not found: ${quoted(method)}`);

  const params = req.params;
  if (!params || params._meta === undefined) throw noEnvelope(method);
  const meta = params._meta;
  if (!isObject(meta)) {
    throw badEnvelope(`${method}: params._meta must be an object carrying "${META_PROTOCOL_VERSION}" and "${META_CLIENT_CAPABILITIES}"`);
  }
  const m = meta;
  if (m[META_PROTOCOL_VERSION] === undefined && m[META_CLIENT_CAPABILITIES] === undefined) throw noEnvelope(method);
  const version = m[META_PROTOCOL_VERSION];
  if (typeof version !== 'string' || version.length === 0) {
    const got = version === undefined ? 'is required' : `must be a non-empty string, got ${JSON.stringify(version)}`;
    throw badEnvelope(`params._meta["${META_PROTOCOL_VERSION}"] ${got} (a protocol version string such as "${PROTOCOL_VERSION}")`);
  }
  if (m[META_CLIENT_CAPABILITIES] === undefined) {
    throw badEnvelope(`params._meta["${META_CLIENT_CAPABILITIES}"] is required and must be a ClientCapabilities object ({} declares none)`);
  }
  const clientCapabilities = parseClientCapabilities(m[META_CLIENT_CAPABILITIES]);
  const progressToken = m.progressToken;
  if (progressToken !== undefined && typeof progressToken !== 'string' && typeof progressToken !== 'number') {
    throw badEnvelope(
      `params._meta.progressToken must be a string or a number (got ${progressToken === null ? 'null' : Array.isArray(progressToken) ? 'an array' : typeof progressToken})`,
    );
  }
  const logLevel = m[META_LOG_LEVEL];
  if (logLevel !== undefined && (typeof logLevel !== 'string' || !LOG_LEVELS.includes(logLevel))) {
    throw badEnvelope(`params._meta["${META_LOG_LEVEL}"] must be one of ${LOG_LEVELS.join(', ')} (got ${JSON.stringify(logLevel)})`);
  }
  const headerVersion = headers.get('mcp-protocol-version');
  if (headerVersion === null)
    throw headerMismatch(`The MCP-Protocol-Version header is required and must equal the body's protocol version ${version}`);
  if (headerVersion.trim() !== version) {
    throw headerMismatch(
      `Header mismatch: MCP-Protocol-Version header value '${quoted(headerVersion.trim())}' does not match body value '${quoted(version)}'`,
    );
  }
  if (!(SUPPORTED_VERSIONS as readonly string[]).includes(version)) {
    throw new GatewayError(
      ErrorCode.UnsupportedProtocolVersion,
      `Unsupported protocol version ${version}; this gateway speaks ${SUPPORTED_VERSIONS.join(', ')}`,
      { supported: [...SUPPORTED_VERSIONS], requested: version },
      400,
    );
  }

  const headerMethod = headers.get('mcp-method');
  if (headerMethod === null) throw headerMismatch(`The Mcp-Method header is required and must equal the body's method ${method}`);
  if (headerMethod.trim() !== method) {
    throw headerMismatch(
      `Header mismatch: Mcp-Method header value '${quoted(headerMethod.trim())}' does not match body value '${quoted(method)}'`,
    );
  }
  const nameField =
    method === 'resources/read'
      ? 'uri'
      : method === 'tools/call' || method === 'prompts/get'
        ? 'name'
        : (TASK_METHODS as readonly string[]).includes(method)
          ? 'taskId'
          : undefined;
  if (nameField) {
    const bodyName = params[nameField];
    const headerName = headers.get('mcp-name');
    if (headerName === null) {
      throw headerMismatch(`The Mcp-Name header is required for ${method} and must equal params.${nameField}`);
    }
    if (typeof bodyName !== 'string' || bodyName.length === 0)
      throw badEnvelope(`${method}: params.${nameField} must be a non-empty string`);
    const decoded = decodeHeaderValue(headerName);
    if (decoded !== bodyName) {
      throw headerMismatch(`Header mismatch: Mcp-Name header value '${quoted(decoded)}' does not match body value '${quoted(bodyName)}'`);
    }
  }

  checkParamTypes(method, params);
  const { _meta: _ignored, ...rest } = params;
  return {
    id: req.id,
    method: method as ServedMethod,
    params: rest,
    meta: m,
    protocolVersion: version,
    clientCapabilities,
    progressToken,
    paramHeaders: method === 'tools/call' ? paramHeadersOf(headers) : {},
  };
}
