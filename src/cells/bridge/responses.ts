/**
 * Validation of `inputResponses` values against the response shape of their input request
 * (ElicitResult, CreateMessageResult, ListRootsResult; MCP 2026-07-28 basic/patterns/mrtr), with
 * the official zod schemas from `@modelcontextprotocol/core`, and of an accepted form
 * elicitation's `content` against the MCP part of the request's `requestedSchema` (primitive
 * fields, `required`; with Ajv). Memory is bounded: at most 256 compiled schemas are kept, and the
 * Ajv instance is replaced every 512 compilations.
 */
import {
  CreateMessageResultSchema,
  CreateMessageResultWithToolsSchema,
  ElicitResultSchema,
  ListRootsResultSchema,
} from '@modelcontextprotocol/core';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { LRUCache } from 'lru-cache';
import type { InputRequest } from '../../protocol/wire.js';

const addFormats = addFormatsModule as unknown as (ajv: Ajv, opts: { mode: 'fast'; formats: string[] }) => Ajv;

/** Compiled `requestedSchema` validators kept, keyed by the checked part of the schema (its JSON). */
const SCHEMAS_KEPT = 256;
/** Compilations one Ajv instance serves before a new one replaces it (Ajv never frees what it compiled). */
const COMPILES_PER_AJV = 512;
/** A `requestedSchema` with more properties than this, or larger JSON (characters), is not checked. */
const MAX_PROPERTIES = 100;
const MAX_SCHEMA_CHARS = 65_536;
/** A field with more options than this is checked without its options; content of larger JSON (characters) is not checked. */
const MAX_OPTIONS = 1000;
const MAX_CONTENT_CHARS = 65_536;

/** The formats of MCP's form fields (`StringSchema.format`), checked with ajv-formats' fast (linear) expressions. */
const FORMATS = ['email', 'uri', 'date', 'date-time'];
/** The keywords of MCP's primitive field schemas (`PrimitiveSchemaDefinition`) that constrain a value. */
const FIELD_KEYWORDS = ['type', 'const', 'minLength', 'maxLength', 'minimum', 'maximum', 'minItems', 'maxItems'];

let ajv: Ajv | undefined;
let compiles = 0;
const compiled = new LRUCache<string, { validate: ValidateFunction | undefined }>({ max: SCHEMAS_KEPT });

function newAjv(): Ajv {
  return addFormats(new Ajv({ strict: false, validateSchema: false, allErrors: false, logger: false }), { mode: 'fast', formats: FORMATS });
}

/** The part of one field's schema that is checked: MCP's primitive keywords, formats it names, and enum options. */
function fieldSchema(field: unknown, depth = 0): Record<string, unknown> {
  if (!field || typeof field !== 'object' || Array.isArray(field)) return {};
  const f = field as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const k of FIELD_KEYWORDS) if (f[k] !== undefined) out[k] = f[k];
  if (typeof f.format === 'string' && FORMATS.includes(f.format)) out.format = f.format;
  // Titled enums (oneOf/anyOf of { const, title }) are checked as the enum of their consts: the
  // same answers, and a check linear in the options (Ajv compiles oneOf into one branch each).
  const options = [f.enum, f.oneOf, f.anyOf].map((o) => (Array.isArray(o) ? o : undefined));
  const consts = (o: unknown[]) =>
    o.every((x) => x && typeof x === 'object' && 'const' in x) ? o.map((x) => (x as { const: unknown }).const) : undefined;
  const allowed = options[0] ?? (options[1] && consts(options[1])) ?? (options[2] && consts(options[2]));
  if (allowed && allowed.length <= MAX_OPTIONS) out.enum = allowed;
  // Multi-select: an array whose items are one such field (MCP nests no deeper).
  if (f.items !== undefined && depth === 0) out.items = fieldSchema(f.items, 1);
  return out;
}

/**
 * The checked part of a form's `requestedSchema`: an object of MCP primitive fields with their
 * value constraints and `required`. Everything else (`pattern`, `$id`, `$ref`, nested objects …) is
 * outside MCP's form schema and left to the upstream, so no upstream schema can make this check
 * slow (a backtracking `pattern`) or shared (an `$id`). Undefined when the schema is too large.
 */
function checkedPart(requested: Record<string, unknown>): Record<string, unknown> | undefined {
  const props = requested.properties;
  if (!props || typeof props !== 'object' || Array.isArray(props)) return undefined;
  const names = Object.keys(props);
  if (names.length > MAX_PROPERTIES) return undefined;
  const properties: Record<string, unknown> = {};
  for (const n of names) properties[n] = fieldSchema((props as Record<string, unknown>)[n]);
  const required = Array.isArray(requested.required) ? requested.required.filter((r): r is string => typeof r === 'string') : undefined;
  return { type: 'object', properties, ...(required?.length ? { required } : {}) };
}

/** The validator of a checked schema part, or undefined when Ajv cannot compile it (the content is then not checked). */
function validatorOf(part: Record<string, unknown>): ValidateFunction | undefined {
  const key = JSON.stringify(part);
  if (key.length > MAX_SCHEMA_CHARS) return undefined;
  let entry = compiled.get(key);
  if (!entry) {
    if (!ajv || compiles >= COMPILES_PER_AJV) {
      ajv = newAjv();
      compiles = 0;
      compiled.clear();
    }
    compiles++;
    let validate: ValidateFunction | undefined;
    try {
      validate = ajv.compile(part);
    } catch {
      validate = undefined;
    }
    entry = { validate };
    compiled.set(key, entry);
  }
  return entry.validate;
}

/**
 * Checks one `inputResponses` value against the response shape of its input request; for a form
 * `elicitation/create` answered with `action: "accept"` and `content`, also that content against
 * the MCP part of the request's `requestedSchema`: each field's type, `enum`/`const` options,
 * lengths, bounds, item counts and the formats `email`, `uri`, `date`, `date-time`, and `required`.
 * The rest (`pattern`, `$ref` …), the options of a field with more than 1000, a schema of more than
 * 100 fields, content over 64 KiB of JSON and a schema Ajv cannot compile are left to the upstream.
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
  const shape =
    request.method === 'elicitation/create' ? 'ElicitResult' : request.method === 'roots/list' ? 'ListRootsResult' : 'CreateMessageResult';
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
  if (request.params.mode === 'url' || value.action !== 'accept' || !requested || typeof requested !== 'object' || Array.isArray(requested))
    return undefined;
  // No content: nothing to check (as the SDK's servers do); the upstream decides what it lacks.
  if (value.content === undefined || JSON.stringify(value.content).length > MAX_CONTENT_CHARS) return undefined;
  const part = checkedPart(requested as Record<string, unknown>);
  const validate = part && validatorOf(part);
  if (!validate || validate(value.content)) return undefined;
  const e = validate.errors?.[0];
  const where = e?.instancePath ? e.instancePath.slice(1).replace(/\//g, '.') : 'content';
  return `content does not match the requestedSchema: ${where} ${e?.message ?? 'is invalid'}`;
}
