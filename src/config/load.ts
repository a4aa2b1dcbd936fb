/**
 * Reading `--config`: {@link readConfigFile} tells the two formats apart by the top-level key,
 * `upstreams` (a gateway config) or `mcpServers` (an editor's server list; `servers` in VS Code's
 * `.vscode/mcp.json`, read alike); both, or neither, is a `ConfigError`.
 *
 * - A gateway config gets `${NAME}` substitution over the whole object (substitute.ts), then the
 *   zod schema (schema.ts), strict, every problem listed by JSON path.
 * - An `mcpServers` file (mcp-servers.ts) becomes raw upstreams first (`command` → stdio; `url` →
 *   `sse` when `type` is `"sse"` or the path ends in `/sse`, else `streamable-http`); disabled
 *   servers are dropped before substitution, keys the gateway does not use are dropped and
 *   returned as warnings, and the same schema applies, error paths written back as
 *   `mcpServers.NAME…`. A name the upstream name pattern rejects is an error, never rewritten.
 * - Each stdio upstream's `envPassthrough` is resolved here, against the gateway's environment
 *   (child-env.ts), into its `env` under the configured values, so the spawn sites stay at
 *   `{...defaultChildEnv(), ...cfg.env}`.
 *
 * The result carries what to tell at start (the format, disabled servers, ignored keys, per stdio
 * upstream the variable names it gets beyond the safe set and the `envPassthrough` entries that
 * matched nothing); the caller logs them once the logger exists. {@link configJsonSchema} is the
 * JSON Schema `npm run schema` writes to config/gateway.schema.json.
 */
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { z } from 'zod';
import { cwdProblem, passthroughEnv } from './child-env.js';
import { convertMcpServers, GATEWAY_KEY, upstreamNameProblem, type ConfigWarning, type ServerListKey } from './mcp-servers.js';
import { GatewayConfigSchema, type GatewayConfig } from './schema.js';
import { ConfigError, formatPath, substituteEnv } from './substitute.js';

export { ConfigError, substituteEnv } from './substitute.js';
export type { ConfigWarning } from './mcp-servers.js';

/** What a stdio upstream's child gets beyond the safe set (names only, never values). */
export interface ChildEnvReport {
  upstream: string;
  /** Every variable name the child gets beyond the safe set: passed through or configured in `env`. */
  names: string[];
  /** The names among them that `envPassthrough` took from the gateway's environment (`env` did not set them). */
  passedThrough: string[];
  /** `envPassthrough` entries that matched no variable of the gateway's environment. */
  unmatched: string[];
}

/** A validated configuration and what the gateway should tell about it at start. */
export interface LoadedConfig {
  config: GatewayConfig;
  /** `gateway`: a gateway config (`upstreams`); `mcpServers`: a server list as editors write it. */
  format: 'gateway' | 'mcpServers';
  /** Keys of an `mcpServers` file the gateway ignored. */
  warnings: ConfigWarning[];
  /** Servers of an `mcpServers` file skipped because of `disabled: true`. */
  disabled: string[];
  /** One entry per stdio upstream. */
  childEnv: ChildEnvReport[];
}

/** How {@link interpretConfig} and {@link readConfigFile} read a configuration beyond the file itself. */
export interface LoadOptions {
  /** Every stdio upstream's `cwd` must be an existing directory (reported with the other problems). */
  checkCwd?: boolean;
  /**
   * `--federate`: validate and serve with `federation.enabled: true` whatever the file says (an
   * `mcpServers` file: every server on `POST /mcp`, prefixed `NAME_`; a gateway config keeps its
   * other `federation` settings).
   */
  federate?: boolean;
}

/** Top-level keys of a gateway config (besides `upstreams` and `$schema`). */
const GATEWAY_SETTINGS = Object.keys(GatewayConfigSchema.shape).filter((k) => k !== 'upstreams' && k !== '$schema');

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Validates against {@link GatewayConfigSchema}; `earlier` are problems already found (servers of
 * an `mcpServers` file that could not be converted), reported with the schema's. `settingsKeys`
 * (an `mcpServers` file): the upstream keys each server took from its `"mrtr-gateway"` key. With
 * `cwdBase`, every stdio upstream's `cwd` (resolved against it) must also be an existing directory.
 * @throws ConfigError listing every problem, one line each.
 */
function validate(
  raw: unknown,
  settingsKeys: Record<string, string[]> | undefined,
  earlier: readonly string[] = [],
  cwdBase?: string,
  federate = false,
  listKey: ServerListKey = 'mcpServers',
): GatewayConfig {
  const parsed = GatewayConfigSchema.safeParse(federate ? withFederation(raw) : raw);
  // Problems of converted servers are reported at their place in the file: mcpServers.NAME…, or
  // mcpServers.NAME["mrtr-gateway"]… for a setting given there (`keys`: an unknown key's names).
  const where = (path: ReadonlyArray<PropertyKey>, keys?: readonly string[]): ReadonlyArray<PropertyKey> => {
    if (!settingsKeys || path[0] !== 'upstreams') return path;
    const [, name, ...rest] = path;
    const given = settingsKeys[String(name)] ?? [];
    const inSettings = rest.length ? given.includes(String(rest[0])) : Boolean(keys?.length && keys.every((k) => given.includes(k)));
    return [listKey, name!, ...(inSettings ? [GATEWAY_KEY] : []), ...rest];
  };
  // Servers left out for their problems leave the list short: that is not a problem of its own.
  const issues = parsed.success
    ? []
    : parsed.error.issues.filter((i) => !(earlier.length && i.path.length === 1 && i.path[0] === 'upstreams'));
  const lines = [
    ...earlier,
    ...issues.map((i) => `${formatPath(where(i.path, i.code === 'unrecognized_keys' ? i.keys : undefined))}: ${issueMessage(i)}`),
  ];
  if (cwdBase !== undefined)
    lines.push(
      ...workingDirectoryProblems(raw, cwdBase).map(([name, problem]) => `${formatPath(where(['upstreams', name, 'cwd']))}: ${problem}`),
    );
  if (federate && issues.some(isFederationIssue)) lines.push(settingsKeys ? FEDERATE_SERVERS_HINT : FEDERATE_HINT);
  if (lines.length || !parsed.success) throw new ConfigError(`invalid configuration:\n${lines.map((l) => `  ${l}`).join('\n')}`);
  return parsed.data;
}

/** `raw` with `federation.enabled: true` (`--federate`); a `federation` that is not an object is left for the schema to refuse. */
function withFederation(raw: unknown): unknown {
  if (!isObject(raw)) return raw;
  const fed = raw.federation ?? {};
  return isObject(fed) ? { ...raw, federation: { ...fed, enabled: true } } : raw;
}

/** Whether a schema issue is one of the federation's (its settings, or a tool name two federated upstreams would share). */
function isFederationIssue(issue: z.core.$ZodIssue): boolean {
  return issue.path[0] === 'federation' || (issue.code === 'custom' && issue.path[2] === 'tools' && /on \/mcp/.test(issue.message));
}

const FEDERATE_HINT = '(--federate serves every upstream on POST /mcp: federation.enabled is true whatever the file says)';
const FEDERATE_SERVERS_HINT =
  '(--federate serves every server on POST /mcp, its tools and prompts prefixed with its name and "_"; a server list cannot set other prefixes: rename a server, or write a gateway config with federation.prefixes)';

/**
 * `[upstream, problem]` for every stdio upstream of `raw` (before schema validation, so that these
 * are reported with the schema's problems) whose string `cwd`, resolved against `baseDir`, is not
 * an existing directory: the start fails rather than every call with `spawn COMMAND ENOENT`.
 */
function workingDirectoryProblems(raw: unknown, baseDir: string): Array<[string, string]> {
  const upstreams = isObject(raw) && isObject(raw.upstreams) ? raw.upstreams : {};
  const out: Array<[string, string]> = [];
  for (const [name, u] of Object.entries(upstreams)) {
    if (!isObject(u) || u.transport !== 'stdio' || typeof u.cwd !== 'string' || !u.cwd) continue;
    const problem = cwdProblem(resolve(baseDir, u.cwd));
    if (problem) out.push([name, problem]);
  }
  return out;
}

/** The message of one schema issue; an invalid upstream name (a record key) says which characters are allowed. */
function issueMessage(issue: z.core.$ZodIssue): string {
  const upstreamKey = issue.path[0] === 'upstreams' || (issue.path[0] === 'federation' && issue.path[1] === 'prefixes');
  if (issue.code !== 'invalid_key' || !upstreamKey) return issue.message;
  return upstreamNameProblem(String(issue.path[issue.path.length - 1]), 'the upstream');
}

/**
 * Validates a configuration object: a gateway config (top-level `upstreams`, validated against
 * {@link GatewayConfigSchema} after `${ENV}` substitution) or a server list (top-level
 * `mcpServers`, see `mcp-servers.ts`). Relative stdio `cwd` values, `auth.jwksFile` and an `audit.destination` file are
 * resolved against `baseDir`. Each stdio upstream's `env` gets the variables of `env` its
 * `envPassthrough` names, below the configured values. `opts`: see {@link LoadOptions}.
 * @throws ConfigError listing every problem as `path: message`.
 */
export function interpretConfig(
  raw: unknown,
  env: NodeJS.ProcessEnv = process.env,
  baseDir = process.cwd(),
  opts: LoadOptions = {},
): LoadedConfig {
  const cwdBase = opts.checkCwd ? baseDir : undefined;
  if (!isObject(raw))
    throw new ConfigError(
      'invalid configuration: expected a JSON object with "upstreams" (a gateway config) or "mcpServers" (a server list)',
    );
  const hasUpstreams = 'upstreams' in raw;
  // VS Code's .vscode/mcp.json names the server list "servers".
  const listKey: ServerListKey | undefined = 'mcpServers' in raw ? 'mcpServers' : 'servers' in raw ? 'servers' : undefined;
  if ('mcpServers' in raw && 'servers' in raw)
    throw new ConfigError('invalid configuration: both "mcpServers" and "servers" at the top level; a server list has one of them');
  if (hasUpstreams && listKey) {
    throw new ConfigError(
      `invalid configuration: both "upstreams" and "${listKey}" at the top level; a file is either a gateway config (upstreams) or a server list (${listKey})`,
    );
  }
  if (!hasUpstreams && !listKey) {
    throw new ConfigError(
      'invalid configuration: neither "upstreams" (a gateway config) nor "mcpServers" (a server list; "servers" in VS Code\'s .vscode/mcp.json) at the top level',
    );
  }

  let loaded: LoadedConfig;
  if (hasUpstreams) {
    checkProviderKeys(raw);
    loaded = {
      config: validate(substituteEnv(raw, env), undefined, [], cwdBase, opts.federate),
      format: 'gateway',
      warnings: [],
      disabled: [],
      childEnv: [],
    };
  } else {
    const settings = Object.keys(raw).filter((k) => GATEWAY_SETTINGS.includes(k));
    if (settings.length) {
      throw new ConfigError(
        `invalid configuration: ${settings.map((k) => JSON.stringify(k)).join(', ')} beside "${listKey}": a server list takes no gateway settings; write a gateway config with "upstreams" to set them`,
      );
    }
    const conversion = convertMcpServers(raw[listKey!], env, listKey);
    const extra = Object.keys(raw).filter((k) => k !== listKey && k !== '$schema');
    const warnings = extra.length ? [{ path: '(root)', ignored: extra }, ...conversion.warnings] : conversion.warnings;
    loaded = {
      config: validate({ upstreams: conversion.upstreams }, conversion.settingsKeys, conversion.problems, cwdBase, opts.federate, listKey),
      format: 'mcpServers',
      warnings,
      disabled: conversion.disabled,
      childEnv: [],
    };
  }

  const cfg = loaded.config;
  for (const [name, u] of Object.entries(cfg.upstreams)) {
    if (u.transport !== 'stdio') continue;
    if (u.cwd) u.cwd = resolve(baseDir, u.cwd);
    const { values, unmatched } = passthroughEnv(u.envPassthrough, env);
    const configured = new Set(Object.keys(u.env));
    u.env = { ...values, ...u.env };
    loaded.childEnv.push({
      upstream: name,
      names: Object.keys(u.env).sort(),
      passedThrough: Object.keys(values)
        .filter((k) => !configured.has(k))
        .sort(),
      unmatched,
    });
  }
  if (cfg.auth.mode === 'jwt' && cfg.auth.jwksFile) cfg.auth.jwksFile = resolve(baseDir, cfg.auth.jwksFile);
  if (cfg.audit.destination !== 'stdout' && cfg.audit.destination !== 'stderr')
    cfg.audit.destination = resolve(baseDir, cfg.audit.destination);
  return loaded;
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
 * {@link interpretConfig}, returning the configuration only. An LLM provider `apiKey` must be a
 * `${ENV_VAR}` reference in `raw` itself.
 * @throws ConfigError listing every problem as `path: message`; for a provider key written into
 *   the configuration, naming its path (never the value).
 */
export function parseConfig(raw: unknown, env: NodeJS.ProcessEnv = process.env, baseDir = process.cwd()): GatewayConfig {
  return interpretConfig(raw, env, baseDir).config;
}

/**
 * Reads and validates a configuration file: a `gateway.config.json` or an `mcpServers` file. A
 * stdio upstream's `cwd` must be an existing directory unless `opts.checkCwd` is false;
 * `opts.federate`: see {@link LoadOptions}.
 * @throws ConfigError naming the file (and, for a relative path that cannot be read, the absolute
 *   path looked at) when it is missing, is not JSON, or is not a valid configuration.
 */
export function readConfigFile(file: string, env: NodeJS.ProcessEnv = process.env, opts: LoadOptions = {}): LoadedConfig {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    // A relative path names where it was looked for: the working directory is not always the one meant.
    const abs = resolve(file);
    throw new ConfigError(
      `${file}: cannot read${abs === file ? '' : ` ${abs}`} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    const comments = /^\s*\/\/|\/\*/m.test(text) ? '; comments are not allowed' : '';
    throw new ConfigError(`${file}: not valid JSON (${(e as Error).message})${comments}`);
  }
  try {
    return interpretConfig(raw, env, dirname(resolve(file)), { checkCwd: true, ...opts });
  } catch (e) {
    if (e instanceof ConfigError) throw new ConfigError(`${file}: ${e.message}`);
    throw e;
  }
}

/** The JSON Schema for the config file, generated from the zod schema. */
export function configJsonSchema(): Record<string, unknown> {
  return z.toJSONSchema(GatewayConfigSchema, { io: 'input', unrepresentable: 'any' }) as Record<string, unknown>;
}
