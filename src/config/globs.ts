/**
 * The glob language of the configuration's name lists (`tools.allow`, `tools.deny`): a pattern
 * matches a whole name, case-sensitive; `*` matches any run of characters (none included), `?`
 * exactly one character, and every other character itself. {@link toolAllowed} applies an
 * allow/deny pair of such lists to one name; `deny` wins.
 */

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
 * Whether the upstream's tool `name` is served under `cfg` (undefined: every tool is): `allow`
 * absent or one of its patterns matches, and no `deny` pattern matches. Patterns are compiled once
 * per config object.
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
