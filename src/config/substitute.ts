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
 * Replaces `${NAME}` in every string value with the environment variable NAME.
 * @throws ConfigError naming the JSON path when a variable is unset.
 */
export function substituteEnv(value: unknown, env: NodeJS.ProcessEnv, path: PropertyKey[] = []): unknown {
  if (typeof value === 'string') {
    return value.replace(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g, (_m, name: string) => {
      const v = env[name];
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
