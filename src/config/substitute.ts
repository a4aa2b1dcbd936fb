/** Configuration errors and `${NAME}` substitution, shared by both config file formats. */

/** A configuration problem; `message` names the file, the JSON path and what is wrong. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** A JSON path as written in error messages: `upstreams.everything.maxSessions`, `mcpServers["my server"].env`. */
export function formatPath(path: ReadonlyArray<PropertyKey>): string {
  if (path.length === 0) return '(root)';
  return path
    .map((p, i) =>
      typeof p === 'number'
        ? `[${p}]`
        : /^[A-Za-z_$][\w$]*$/.test(String(p))
          ? (i ? '.' : '') + String(p)
          : `[${JSON.stringify(String(p))}]`,
    )
    .join('');
}

/**
 * Replaces `${NAME}` in every string value with the environment variable NAME, and
 * `${NAME:-default}` with NAME, or `default` when NAME is unset or empty (as Claude Code's `.mcp.json`
 * reads it).
 * @throws ConfigError naming the JSON path when a variable without a default is unset, or for a
 *   VS Code `${input:ID}` (the gateway has no one to ask).
 */
export function substituteEnv(value: unknown, env: NodeJS.ProcessEnv, path: PropertyKey[] = []): unknown {
  if (typeof value === 'string') {
    const input = /\$\{input:([^}]*)\}/.exec(value);
    if (input)
      throw new ConfigError(
        `${formatPath(path)}: ${input[0]} is a VS Code input the gateway cannot ask for: use \${NAME} of an environment variable`,
      );
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g, (_m, name: string, fallback: string | undefined) => {
      const v = env[name];
      if (fallback !== undefined && !v) return fallback;
      if (v === undefined) throw new ConfigError(`${formatPath(path)}: environment variable ${name} is not set`);
      return v;
    });
  }
  if (Array.isArray(value)) return value.map((v, i) => substituteEnv(v, env, [...path, i]));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, substituteEnv(v, env, [...path, k])]));
  }
  return value;
}
