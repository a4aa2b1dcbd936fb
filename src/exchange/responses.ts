/**
 * Validation of `inputResponses` values against the response shape of their input request
 * (ElicitResult, CreateMessageResult, ListRootsResult; MCP 2026-07-28 basic/patterns/mrtr), with
 * the official zod schemas from `@modelcontextprotocol/core`, and of an accepted form
 * elicitation's `content` against the request's `requestedSchema` (JSON Schema, with Ajv).
 */
import { CreateMessageResultSchema, CreateMessageResultWithToolsSchema, ElicitResultSchema, ListRootsResultSchema } from '@modelcontextprotocol/core';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { LRUCache } from 'lru-cache';
import type { InputRequest } from '../protocol/wire.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

/** Compiled `requestedSchema` validators kept, keyed by the schema's JSON. */
const SCHEMAS_KEPT = 256;

/**
 * One Ajv instance for every form (formats such as `email` and `date` checked, as the SDK's
 * servers do). Each compiled schema is also held by Ajv's own cache: it is removed from there when
 * it leaves this LRU, so that per-call schemas (defaults, enums made for one call) do not pile up.
 */
let ajv: Ajv | undefined;
const compiled = new LRUCache<string, { schema: object; validate: ValidateFunction | undefined }>({
  max: SCHEMAS_KEPT,
  dispose: (v) => v.validate && ajv?.removeSchema(v.schema),
});

/** The validator of `schema`, or undefined when Ajv cannot compile it (the content is then not checked). */
function validatorOf(schema: object): ValidateFunction | undefined {
  const key = JSON.stringify(schema);
  let entry = compiled.get(key);
  if (!entry) {
    ajv ??= addFormats(new Ajv({ strict: false, validateSchema: false, allErrors: true }));
    let validate: ValidateFunction | undefined;
    try {
      validate = ajv.compile(schema);
    } catch {
      validate = undefined;
    }
    entry = { schema, validate };
    compiled.set(key, entry);
  }
  return entry.validate;
}

/**
 * Checks one `inputResponses` value against the response shape of its input request; for a form
 * `elicitation/create` answered with `action: "accept"` and `content`, also that content against
 * the request's `requestedSchema` (a schema Ajv cannot compile is not checked: the upstream decides).
 * @returns an error message (for a -32602 naming the key), or undefined when valid.
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
  if (request.method === 'elicitation/create') return invalidContent(request, value as { action?: unknown; content?: unknown });
  return undefined;
}

function invalidContent(request: InputRequest, value: { action?: unknown; content?: unknown }): string | undefined {
  const requested = request.params.requestedSchema;
  if (request.params.mode === 'url' || value.action !== 'accept' || !requested || typeof requested !== 'object' || Array.isArray(requested)) return undefined;
  // No content: nothing to check (as the SDK's servers do); the upstream decides what it lacks.
  if (value.content === undefined) return undefined;
  const validate = validatorOf(requested as object);
  if (!validate || validate(value.content)) return undefined;
  const errors = (validate.errors ?? []).slice(0, 3).map((e) => `${e.instancePath ? e.instancePath.slice(1).replace(/\//g, '.') : 'content'} ${e.message ?? 'is invalid'}`);
  return `content does not match the requestedSchema: ${errors.join('; ')}`;
}
