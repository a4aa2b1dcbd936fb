/**
 * Validation of `inputResponses` values against the response shape of their input request
 * (ElicitResult, CreateMessageResult, ListRootsResult; MCP 2026-07-28 basic/patterns/mrtr), with
 * the official zod schemas from `@modelcontextprotocol/core`.
 */
import { CreateMessageResultSchema, CreateMessageResultWithToolsSchema, ElicitResultSchema, ListRootsResultSchema } from '@modelcontextprotocol/core';
import type { InputRequest } from '../protocol/wire.js';

/**
 * Checks one `inputResponses` value against the response shape of its input request.
 * @returns an error message, or undefined when valid.
 */
export function invalidResponse(request: InputRequest, value: unknown): string | undefined {
  const schema =
    request.method === 'elicitation/create'
      ? ElicitResultSchema
      : request.method === 'roots/list'
        ? ListRootsResultSchema
        : request.params.tools || request.params.toolChoice
          ? CreateMessageResultWithToolsSchema
          : CreateMessageResultSchema;
  const shape = request.method === 'elicitation/create' ? 'ElicitResult' : request.method === 'roots/list' ? 'ListRootsResult' : 'CreateMessageResult';
  if (!value || typeof value !== 'object' || Array.isArray(value)) return `must be an ${shape} object`;
  const r = schema.safeParse(value);
  if (!r.success) {
    const i = r.error.issues[0]!;
    return `is not a valid ${shape}: ${i.path.length ? i.path.join('.') + ': ' : ''}${i.message}`;
  }
  return undefined;
}

