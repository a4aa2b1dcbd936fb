import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { GatewayConfigSchema, type GatewayConfig } from './schema.js';

/** A configuration problem; `message` names the file, the JSON path and what is wrong. */
export class ConfigError extends Error {
  override name = 'ConfigError';
}

function formatPath(path: ReadonlyArray<PropertyKey>): string {
  if (path.length === 0) return '(root)';
  return path
    .map((p, i) => (typeof p === 'number' ? `[${p}]` : /^[A-Za-z_$][\w$]*$/.test(String(p)) ? (i ? '.' : '') + String(p) : `[${JSON.stringify(String(p))}]`))
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

/** The only accepted form of a provider API key in the file: one whole `${ENV_VAR}` reference. */
const ENV_REFERENCE = /^\$\{[A-Za-z_][A-Za-z0-9_]*\}$/;

/**
 * Refuses an LLM provider API key written into the configuration itself (`sampling.providers.NAME.apiKey`
 * must be exactly `${ENV_VAR}`). Runs before substitution, so only what the file says is checked.
 * The message never repeats the value.
 * @throws ConfigError naming the JSON path.
 */
function checkProviderKeys(raw: unknown): void {
  const providers = (raw as { sampling?: { providers?: unknown } } | null)?.sampling?.providers;
  if (!providers || typeof providers !== 'object' || Array.isArray(providers)) return;
  for (const [name, p] of Object.entries(providers as Record<string, unknown>)) {
    const key = (p as { apiKey?: unknown } | null)?.apiKey;
    if (key === undefined) continue;
    if (typeof key !== 'string' || !ENV_REFERENCE.test(key)) {
      throw new ConfigError(
        `${formatPath(['sampling', 'providers', name, 'apiKey'])}: give the key as an environment variable reference such as "\${OPENAI_API_KEY}"; a key written into the configuration is refused`,
      );
    }
  }
}

/**
 * Validates a configuration object (after `${ENV}` substitution) against {@link GatewayConfigSchema}.
 * Relative stdio `cwd` values are resolved against `baseDir`. An LLM provider `apiKey` must be a
 * `${ENV_VAR}` reference in `raw` itself.
 * @throws ConfigError listing every problem as `path: message`; for a provider key written into
 *   the configuration, naming its path (never the value).
 */
export function parseConfig(raw: unknown, env: NodeJS.ProcessEnv = process.env, baseDir = process.cwd()): GatewayConfig {
  checkProviderKeys(raw);
  const substituted = substituteEnv(raw, env);
  const parsed = GatewayConfigSchema.safeParse(substituted);
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  ${formatPath(i.path)}: ${i.message}`);
    throw new ConfigError(`invalid configuration:\n${lines.join('\n')}`);
  }
  const cfg = parsed.data;
  for (const u of Object.values(cfg.upstreams)) {
    if (u.transport === 'stdio' && u.cwd) u.cwd = resolve(baseDir, u.cwd);
  }
  if (cfg.auth.mode === 'jwt' && cfg.auth.jwksFile) cfg.auth.jwksFile = resolve(baseDir, cfg.auth.jwksFile);
  return cfg;
}

/**
 * Reads and validates a `gateway.config.json` file.
 * @throws ConfigError when the file is missing, is not JSON, or does not match the schema.
 */
export function loadConfigFile(file: string, env: NodeJS.ProcessEnv = process.env): GatewayConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`${file}: cannot read (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new ConfigError(`${file}: not valid JSON (${(e as Error).message})`);
  }
  try {
    return parseConfig(raw, env, dirname(resolve(file)));
  } catch (e) {
    if (e instanceof ConfigError) throw new ConfigError(`${file}: ${e.message}`);
    throw e;
  }
}

/** The JSON Schema for the config file, generated from the zod schema. */
export function configJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(GatewayConfigSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
}
