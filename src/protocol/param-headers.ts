/**
 * `Mcp-Param-{Name}` headers (MCP 2026-07-28, Streamable HTTP §"Custom Headers from Tool
 * Parameters", SEP-2243): tool arguments whose schema carries `"x-mcp-header": "{Name}"` are
 * mirrored by the client into a request header, and a server that reads the body validates the
 * header against the argument.
 *
 * Two pure pieces: {@link headerParams} reads (and judges) the annotations of one tool's
 * `inputSchema`, and {@link checkParamHeaders} checks a `tools/call` request's headers against
 * its arguments.
 */
import { headerMismatch, quoted } from './errors.js';
import { decodeHeaderValue } from './envelope.js';

/** The schema keyword that names a parameter's header. */
const X_MCP_HEADER = 'x-mcp-header';

/** One annotated argument of a tool. */
export interface ParamHeader {
  /** The annotation value as written in the schema: the header is `Mcp-Param-{name}`. */
  name: string;
  /** The chain of `properties` keys from the schema root to the argument. */
  path: string[];
  /** The argument's primitive type. */
  type: 'string' | 'integer' | 'boolean';
}

/** What {@link headerParams} found: the annotated arguments, or why the annotations are invalid. */
export type HeaderParams = { params: ParamHeader[] } | { invalid: string };

/** RFC 9110 §5.1 field-name token (`1*tchar`). */
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const PRIMITIVES = ['string', 'integer', 'boolean'] as const;

/** Keywords whose value is one subschema. */
const SCHEMA_KEYWORDS = [
  'additionalItems',
  'additionalProperties',
  'contains',
  'else',
  'if',
  'items',
  'not',
  'propertyNames',
  'then',
  'unevaluatedItems',
  'unevaluatedProperties',
];
/** Keywords whose value is an array of subschemas. */
const SCHEMA_ARRAY_KEYWORDS = ['allOf', 'anyOf', 'items', 'oneOf', 'prefixItems'];
/** Keywords whose value maps names to subschemas (`properties` is walked apart). */
const SCHEMA_MAP_KEYWORDS = ['$defs', 'definitions', 'dependencies', 'dependentSchemas', 'patternProperties'];

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * The primitive type of an annotated property: `type` is string, integer or boolean, alone or with
 * "null" (`["string","null"]`), or, without `type`, an `anyOf`/`oneOf` of one such type and "null"
 * (the nullable form some schema generators write).
 */
function primitiveType(schema: Record<string, unknown>): ParamHeader['type'] | undefined {
  let types: unknown[];
  if (schema.type !== undefined) {
    types = Array.isArray(schema.type) ? schema.type : [schema.type];
  } else {
    const branches = Array.isArray(schema.anyOf) ? schema.anyOf : Array.isArray(schema.oneOf) ? schema.oneOf : undefined;
    if (!branches || !branches.every((b) => isObject(b) && typeof b.type === 'string')) return undefined;
    types = branches.map((b) => (b as { type: string }).type);
  }
  const nonNull = [...new Set(types.filter((x) => x !== 'null'))];
  if (nonNull.length !== 1) return undefined;
  return (PRIMITIVES as readonly unknown[]).includes(nonNull[0]) ? (nonNull[0] as ParamHeader['type']) : undefined;
}

/**
 * Reads the `x-mcp-header` annotations of a tool's `inputSchema`, applying the constraints of
 * MCP 2026-07-28 Streamable HTTP §"Schema Extension": each value is a non-empty RFC 9110 token,
 * unique case-insensitively within the schema; it annotates a property of type string, integer or
 * boolean (not number); and that property is statically reachable from the root through
 * `properties` keys only (not through `items`, composition or conditional keywords, `$defs` or
 * `$ref`).
 * @param inputSchema the tool's `inputSchema` as listed by the upstream.
 * @returns the annotated arguments in schema order, or `{invalid}` with the first violation: such
 *   a tool must be left out of `tools/list`.
 */
export function headerParams(inputSchema: unknown): HeaderParams {
  const params: ParamHeader[] = [];
  const seen = new Map<string, string>();
  let invalid: string | undefined;

  const walk = (schema: unknown, path: string[] | undefined, where: string): void => {
    if (invalid || !isObject(schema)) return;
    if (Object.hasOwn(schema, X_MCP_HEADER)) {
      const name = schema[X_MCP_HEADER];
      if (!path || path.length === 0) {
        invalid = `${X_MCP_HEADER} at ${where || 'the schema root'} is not on a property reachable through "properties" alone`;
        return;
      }
      if (typeof name !== 'string' || !TOKEN.test(name)) {
        invalid = `${X_MCP_HEADER} ${JSON.stringify(name)} at ${where} is not an HTTP field-name token`;
        return;
      }
      const type = primitiveType(schema);
      if (!type) {
        invalid = `${X_MCP_HEADER} "${name}" at ${where} annotates a property whose type is ${JSON.stringify(schema.type ?? null)}, not string, integer or boolean`;
        return;
      }
      const clash = seen.get(name.toLowerCase());
      if (clash !== undefined) {
        invalid = `${X_MCP_HEADER} "${name}" at ${where} repeats "${clash}" (header names are case-insensitive)`;
        return;
      }
      seen.set(name.toLowerCase(), name);
      params.push({ name, path, type });
    }
    if (isObject(schema.properties)) {
      for (const [key, sub] of Object.entries(schema.properties))
        walk(sub, path ? [...path, key] : undefined, `${where}/properties/${key}`);
    }
    for (const k of SCHEMA_KEYWORDS) if (isObject(schema[k])) walk(schema[k], undefined, `${where}/${k}`);
    for (const k of SCHEMA_ARRAY_KEYWORDS) {
      const list = schema[k];
      if (Array.isArray(list)) list.forEach((sub, i) => walk(sub, undefined, `${where}/${k}/${i}`));
    }
    for (const k of SCHEMA_MAP_KEYWORDS) {
      const map = schema[k];
      if (isObject(map)) for (const [key, sub] of Object.entries(map)) walk(sub, undefined, `${where}/${k}/${key}`);
    }
  };
  walk(inputSchema, [], '');
  return invalid ? { invalid } : { params };
}

const NUMBER = /^-?\d+(\.\d+)?([eE][+-]?\d+)?$/;

/** The value at `path` in `args`, or undefined. */
function valueAt(args: Record<string, unknown> | undefined, path: string[]): unknown {
  let v: unknown = args;
  for (const key of path) {
    if (!isObject(v) || !Object.hasOwn(v, key)) return undefined;
    v = v[key];
  }
  return v;
}

/** True when the decoded header value equals the body value (integers compared numerically). */
function sameValue(header: string, body: unknown): boolean {
  switch (typeof body) {
    case 'string':
      return header === body;
    case 'boolean':
      return header === String(body);
    case 'number':
      return NUMBER.test(header) && Number(header) === body;
    default:
      return false;
  }
}

/**
 * Validates the `Mcp-Param-{Name}` headers of a `tools/call` against its arguments, per MCP
 * 2026-07-28 Streamable HTTP §"Server Behavior for Custom Headers" and §"Server Validation": for
 * each annotated argument whose value is present and not null, the header must be present, made of
 * header-safe characters, correctly encoded when it uses `=?base64?…?=` ({@link decodeHeaderValue}),
 * and equal to the value
 * (integers compared numerically, booleans as `true`/`false`). A header sent for an argument that
 * is absent or null does not match the body either. Headers no annotation names are ignored.
 * @param params the tool's annotated arguments ({@link headerParams}).
 * @param args the call's `params.arguments`.
 * @param headers the request's `Mcp-Param-*` headers: the lower-cased name after `Mcp-Param-` →
 *   the raw value.
 * @throws GatewayError -32020 HeaderMismatch (HTTP 400) naming the header.
 */
export function checkParamHeaders(
  params: readonly ParamHeader[],
  args: Record<string, unknown> | undefined,
  headers: Readonly<Record<string, string>>,
): void {
  for (const p of params) {
    const header = `Mcp-Param-${p.name}`;
    const raw = headers[p.name.toLowerCase()];
    const value = valueAt(args, p.path);
    const where = `arguments.${p.path.join('.')}`;
    if (value === undefined || value === null) {
      if (raw !== undefined)
        throw headerMismatch(`Header mismatch: ${header} is sent but ${where} is ${value === null ? 'null' : 'absent'}`);
      continue;
    }
    if (raw === undefined) throw headerMismatch(`The ${header} header is required: ${where} is present in the body`);
    const decoded = decodeHeaderValue(raw, header);
    if (!sameValue(decoded, value)) {
      throw headerMismatch(
        `Header mismatch: ${header} header value '${quoted(decoded)}' does not match body value ${quoted(JSON.stringify(value))} at ${where}`,
      );
    }
  }
}
