/**
 * Which of an upstream's tools the gateway serves: the upstream's `tools.allow` and `tools.deny`
 * lists (tool names or globs). A tool is served when `allow` is absent or one of its patterns
 * matches the name, and no `deny` pattern matches it; `deny` wins. A tool that is not served is
 * left out of `tools/list` and its `tools/call` gets -32602 "Unknown tool", as for a tool the
 * upstream does not have, on `POST /mcp/NAME`, on the federated `POST /mcp`, and in legacy
 * client sessions.
 *
 * Patterns are globs over the whole tool name, case-sensitive: `*` matches any run of characters
 * (none included), `?` exactly one character, and every other character itself.
 */
import { invalidParams, quoted, type GatewayError } from '../protocol/errors.js';

/** The `tools` settings of one upstream. */
export interface ToolPolicyConfig {
  /** When set, only tools matching one of these patterns are served. */
  allow?: readonly string[];
  /** Tools matching one of these patterns are not served (wins over `allow`). */
  deny: readonly string[];
}

/** True when `pattern` has glob characters (`*` or `?`); otherwise it names one tool. */
export function isGlob(pattern: string): boolean {
  return pattern.includes('*') || pattern.includes('?');
}

/**
 * The regular expression of a glob: anchored at both ends, `*` → any run of characters, `?` → one
 * character, every other character literal.
 */
export function globToRegExp(glob: string): RegExp {
  let src = '';
  for (const ch of glob) {
    if (ch === '*') src += '[^]*';
    else if (ch === '?') src += '[^]';
    else src += ch.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&');
  }
  return new RegExp(`^${src}$`, 'u');
}

interface Compiled {
  allow: RegExp[] | undefined;
  deny: RegExp[];
}

const compiled = new WeakMap<ToolPolicyConfig, Compiled>();

function compile(cfg: ToolPolicyConfig): Compiled {
  let c = compiled.get(cfg);
  if (!c) {
    c = { allow: cfg.allow?.map(globToRegExp), deny: cfg.deny.map(globToRegExp) };
    compiled.set(cfg, c);
  }
  return c;
}

/**
 * Whether the upstream's tool `name` is served under `cfg` (undefined: every tool is).
 * Patterns are compiled once per config object.
 */
export function toolAllowed(cfg: ToolPolicyConfig | undefined, name: string): boolean {
  if (!cfg) return true;
  const { allow, deny } = compile(cfg);
  if (allow && !allow.some((r) => r.test(name))) return false;
  return !deny.some((r) => r.test(name));
}

/** True when `cfg` leaves out no tool at all (no `allow` list and no `deny` patterns). */
export function servesEveryTool(cfg: ToolPolicyConfig | undefined): boolean {
  return !cfg || (cfg.allow === undefined && cfg.deny.length === 0);
}

/** `tools` of a `tools/list` result without the tools `cfg` does not serve; anything else as it is. */
export function servedToolList<T>(cfg: ToolPolicyConfig | undefined, tools: T): T {
  if (servesEveryTool(cfg) || !Array.isArray(tools)) return tools;
  return tools.filter((t) => !(t && typeof t === 'object' && typeof (t as { name?: unknown }).name === 'string') || toolAllowed(cfg, (t as { name: string }).name)) as T;
}

/** 200 / -32602 "Unknown tool: NAME" (a name over 200 characters cut), the answer to a tool the gateway does not serve. */
export function unknownTool(name: string): GatewayError {
  return invalidParams(`Unknown tool: ${quoted(name)}`);
}
