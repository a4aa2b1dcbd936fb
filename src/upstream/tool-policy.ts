/**
 * Which of an upstream's tools the gateway serves: the upstream's `tools.allow` and `tools.deny`
 * lists (tool names or globs). A tool is served when `allow` is absent or one of its patterns
 * matches the name, and no `deny` pattern matches it; `deny` wins. A tool that is not served is
 * left out of `tools/list` and its `tools/call` gets -32602 "Unknown tool", as for a tool the
 * upstream does not have, on `POST /mcp/NAME`, on the federated `POST /mcp`, and in legacy
 * client sessions.
 *
 * Patterns are globs over the whole tool name (src/config/globs.ts holds the glob language and
 * the allow/deny matching).
 *
 * Whatever the lists say, a tool whose name breaks the MCP tool-name rules ({@link toolNameProblem})
 * is not served either: it is left out of `tools/list` (reported to the caller's `onDropped`, which
 * logs and counts it) and its `tools/call` gets -32602 saying which rule the name breaks.
 */
import { invalidParams, quoted, type GatewayError } from '../protocol/errors.js';
import { servesEveryTool, toolAllowed, type ToolPolicyConfig } from '../config/globs.js';

/** Longest tool name the MCP tool-name rules allow, in characters. */
export const MAX_TOOL_NAME_CHARS = 128;

/** The characters the MCP tool-name rules allow, 1 to {@link MAX_TOOL_NAME_CHARS} of them. */
const TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/;

/** The rules, for messages. */
export const TOOL_NAME_RULES = `1 to ${MAX_TOOL_NAME_CHARS} characters, each an ASCII letter or digit, '_', '-' or '.'`;

/**
 * Which MCP tool-name rule `name` breaks (MCP 2025-11-25 and 2026-07-28 server/tools §"Tool
 * Names": 1 to 128 characters of A-Z, a-z, 0-9, `_`, `-` and `.`; no spaces, commas, `/` or other
 * characters), or undefined when it follows them.
 * @returns "is not a string", "is empty", "is longer than 128 characters (N)", or "has characters
 *   outside A-Z, a-z, 0-9, _, - and . (…)" listing up to 5 of them as JSON escapes.
 */
export function toolNameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string') return 'is not a string';
  if (TOOL_NAME.test(name)) return undefined;
  if (name.length === 0) return 'is empty';
  if (name.length > MAX_TOOL_NAME_CHARS) return `is longer than ${MAX_TOOL_NAME_CHARS} characters (${name.length})`;
  const bad = [...new Set([...name].filter((c) => !/[A-Za-z0-9_.-]/.test(c)))].slice(0, 5);
  return `has characters outside A-Z, a-z, 0-9, _, - and . (${bad.map((c) => JSON.stringify(c)).join(' ')})`;
}

/**
 * 200 / -32602 for a `tools/call` of a name that breaks the MCP tool-name rules: the gateway
 * neither lists nor calls such a tool. `data`: `{ reason: "invalid-tool-name", name }` (the name
 * cut at 200 characters).
 */
export function invalidToolName(name: string, problem: string): GatewayError {
  return invalidParams(
    `Tool name not served: the name ${problem}; the gateway serves only tool names of ${TOOL_NAME_RULES} (MCP server/tools, Tool Names)`,
    {
      reason: 'invalid-tool-name',
      name: quoted(name),
    },
  );
}

/**
 * Why the gateway refuses a `tools/call` of the upstream's tool `name` under `cfg`, or undefined
 * when it serves it: a name that breaks the tool-name rules ({@link invalidToolName}), or a tool
 * the `tools` lists do not serve ({@link unknownTool}). Both are -32602.
 */
export function toolCallRefusal(cfg: ToolPolicyConfig | undefined, name: string): GatewayError | undefined {
  const problem = toolNameProblem(name);
  if (problem) return invalidToolName(name, problem);
  return toolAllowed(cfg, name) ? undefined : unknownTool(name);
}

/**
 * `tools` of a `tools/list` result without the tools the gateway does not serve: those `cfg`
 * leaves out, and those whose name breaks the tool-name rules (each reported to `onDropped` with
 * the rule it breaks; an entry that is not an object counts as a tool without a name). Anything
 * that is not an array is returned as it is.
 */
export function servedToolList<T>(cfg: ToolPolicyConfig | undefined, tools: T, onDropped?: (name: string, problem: string) => void): T {
  if (!Array.isArray(tools)) return tools;
  const every = servesEveryTool(cfg);
  return tools.filter((t) => {
    const name = t && typeof t === 'object' ? (t as { name?: unknown }).name : undefined;
    const problem = toolNameProblem(name);
    if (problem) {
      onDropped?.(typeof name === 'string' ? name : String(name), problem);
      return false;
    }
    return every || toolAllowed(cfg, name as string);
  }) as T;
}

/** 200 / -32602 "Unknown tool: NAME" (a name over 200 characters cut), the answer to a tool the gateway does not serve. */
export function unknownTool(name: string): GatewayError {
  return invalidParams(`Unknown tool: ${quoted(name)}`);
}
