/**
 * Server lists in the `mcpServers` format that Claude Desktop, Claude Code (`.mcp.json`), Cursor
 * and other editors write (VS Code's `.vscode/mcp.json` has them under `servers`, `type` `stdio`,
 * `http` or `sse`; its `${input:ID}` prompts are refused: see substitute.ts), turned into gateway
 * upstreams:
 *
 * ```json
 * {"mcpServers": {
 *   "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}},
 *   "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
 * }}
 * ```
 *
 * A server with `command` becomes a stdio upstream; one with `url` becomes an HTTP+SSE upstream
 * when `type` is `"sse"` or the URL path ends in `/sse`, and a Streamable HTTP upstream otherwise.
 * A server with `disabled: true` is skipped; other keys editors add (`autoApprove`, `timeout`, …)
 * are ignored with a warning.
 *
 * The gateway's own per-upstream settings go under the key `"mrtr-gateway"` of a server, which
 * editors ignore; every other upstream setting takes its default:
 *
 * ```json
 * "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
 *            "mrtr-gateway": {"timeouts": {"firstStartMs": 300000}, "tools": {"deny": ["delete_*"]}}}
 * ```
 *
 * They are validated by the gateway schema like an upstream of a gateway config (problems name
 * `mcpServers.NAME["mrtr-gateway"].…`), with `${NAME}` substituted; the keys that say what the
 * server is (`command`, `args`, `env`, `cwd`, `url`, `headers`, `type`, `transport`, `disabled`)
 * belong to the server itself and are refused there.
 */
import { formatPath, substituteEnv, ConfigError } from './substitute.js';
import { UpstreamNameSchema } from './schema.js';

/** The top-level key of a server list: `mcpServers` (Claude, Cursor, …) or `servers` (VS Code's `.vscode/mcp.json`). */
export type ServerListKey = 'mcpServers' | 'servers';

/** Server keys the gateway uses: copied into the upstream (`type` decides the transport). */
const USED_KEYS = ['command', 'args', 'env', 'cwd', 'envPassthrough', 'url', 'headers'] as const;
/** The key of a server that holds the gateway's own upstream settings (editors ignore it). */
export const GATEWAY_KEY = 'mrtr-gateway';
/** Keys that say what a server is: they belong to the server itself, never under {@link GATEWAY_KEY}. */
const SERVER_KEYS = ['transport', 'type', 'disabled', 'command', 'args', 'env', 'cwd', 'url', 'headers'];
/** `type` values of a server with `url`, and the transport each means. */
const URL_TYPES: Record<string, 'streamable-http' | 'sse'> = {
  http: 'streamable-http',
  'streamable-http': 'streamable-http',
  streamableHttp: 'streamable-http',
  sse: 'sse',
};

/** Something the gateway left out of an `mcpServers` file, for a warning at start. */
export interface ConfigWarning {
  /** JSON path of the server (or `(root)`). */
  path: string;
  /** The keys left out. */
  ignored: string[];
}

/** The upstreams of an `mcpServers` file, before validation against the gateway schema. */
export interface McpServersConversion {
  upstreams: Record<string, Record<string, unknown>>;
  /** Servers skipped because of `disabled: true`. */
  disabled: string[];
  warnings: ConfigWarning[];
  /** Servers that cannot be used, one line each as `path: message` (left out of `upstreams`). */
  problems: string[];
  /** The upstream settings each server took from its `"mrtr-gateway"` key, by server name (where their problems are reported). */
  settingsKeys: Record<string, string[]>;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A valid upstream name close to `name`, for the error message; empty when none suggests itself. */
export function suggestUpstreamName(name: string): string {
  return name
    .replace(/[^A-Za-z0-9_.-]+/g, '-')
    .replace(/-{2,}/g, '-')
    .replace(/^[^A-Za-z0-9]+/, '')
    .replace(/-+$/, '');
}

/**
 * Why `name` cannot be an upstream name, with the allowed characters and a close valid name;
 * `what` is what the user renames (`the server`, `the upstream`).
 */
export function upstreamNameProblem(name: string, what: string): string {
  const suggestion = suggestUpstreamName(name);
  return (
    `${JSON.stringify(name)} cannot be an upstream name (it becomes the path /mcp/NAME): use letters, digits, ".", "_" and "-", starting with a letter or digit` +
    (suggestion ? `; rename ${what}, for example to ${JSON.stringify(suggestion)}` : '')
  );
}

function urlTransport(url: unknown): 'streamable-http' | 'sse' {
  if (typeof url !== 'string') return 'streamable-http';
  try {
    return /\/sse\/*$/.test(new URL(url).pathname) ? 'sse' : 'streamable-http';
  } catch {
    return 'streamable-http';
  }
}

/**
 * Converts the `mcpServers` object (`key`: the top-level key it was under) to gateway upstreams, with `${NAME}` substituted from `env` in
 * the keys the gateway uses (ignored keys and disabled servers are not substituted). A server that
 * cannot be used is left out and reported in `problems`, so that every one is reported together
 * with what the gateway schema finds in the others.
 * @throws ConfigError when `mcpServers` is not an object, or when no server is left and none has a
 *   problem (none at all, or every one disabled).
 */
export function convertMcpServers(servers: unknown, env: NodeJS.ProcessEnv, key: ServerListKey = 'mcpServers'): McpServersConversion {
  if (!isObject(servers)) throw new ConfigError(`invalid configuration:\n  ${key}: expected an object of servers by name`);
  const out: McpServersConversion = { upstreams: {}, disabled: [], warnings: [], problems: [], settingsKeys: {} };
  const problems = out.problems;
  for (const [name, entry] of Object.entries(servers)) {
    const base = [key, name];
    const at = (...rest: string[]) => formatPath([...base, ...rest]);
    if (!isObject(entry)) {
      problems.push(`${at()}: expected an object with "command" (a stdio server) or "url" (an HTTP server)`);
      continue;
    }
    if (entry.disabled !== undefined && typeof entry.disabled !== 'boolean') {
      problems.push(`${at('disabled')}: expected true or false`);
      continue;
    }
    if (entry.disabled === true) {
      out.disabled.push(name);
      continue;
    }
    if (!UpstreamNameSchema.safeParse(name).success) {
      problems.push(`${at()}: ${upstreamNameProblem(name, 'the server')}`);
      continue;
    }
    const ignored = Object.keys(entry).filter(
      (k) => k !== 'type' && k !== 'disabled' && k !== GATEWAY_KEY && !(USED_KEYS as readonly string[]).includes(k),
    );
    if (ignored.length) out.warnings.push({ path: at(), ignored });

    const hasCommand = entry.command !== undefined;
    const hasUrl = entry.url !== undefined;
    if (hasCommand && hasUrl) {
      problems.push(`${at()}: give "command" (a stdio server) or "url" (an HTTP server), not both`);
      continue;
    }
    if (!hasCommand && !hasUrl) {
      problems.push(`${at()}: needs "command" (a stdio server) or "url" (an HTTP server)`);
      continue;
    }
    const given = entry[GATEWAY_KEY];
    if (given !== undefined && !isObject(given)) {
      problems.push(
        `${at(GATEWAY_KEY)}: expected an object of the gateway's settings for this upstream (timeouts, protocol, roots, tools, …)`,
      );
      continue;
    }
    const misplaced = Object.keys(given ?? {}).filter(
      (k) => SERVER_KEYS.includes(k) || (k === 'envPassthrough' && entry.envPassthrough !== undefined),
    );
    if (misplaced.length) {
      for (const k of misplaced)
        problems.push(
          `${at(GATEWAY_KEY, k)}: ${JSON.stringify(k)} belongs to the server itself (once), not under ${JSON.stringify(GATEWAY_KEY)}`,
        );
      continue;
    }
    let used: Record<string, unknown>;
    let settings: Record<string, unknown>;
    try {
      used = substituteEnv(
        Object.fromEntries(USED_KEYS.filter((k) => entry[k] !== undefined).map((k) => [k, entry[k]])),
        env,
        base,
      ) as Record<string, unknown>;
      settings = substituteEnv(given ?? {}, env, [...base, GATEWAY_KEY]) as Record<string, unknown>;
    } catch (e) {
      if (!(e instanceof ConfigError)) throw e;
      problems.push(e.message);
      continue;
    }
    const type = entry.type;
    let transport: 'stdio' | 'streamable-http' | 'sse';
    if (hasCommand) {
      if (type !== undefined && type !== 'stdio') {
        problems.push(`${at('type')}: a server with "command" is a stdio server; leave "type" out or set it to "stdio"`);
        continue;
      }
      transport = 'stdio';
    } else if (type === undefined) {
      transport = urlTransport(used.url);
    } else if (typeof type === 'string' && URL_TYPES[type]) {
      transport = URL_TYPES[type];
    } else {
      problems.push(
        `${at('type')}: expected "http", "streamable-http", "streamableHttp" or "sse" for a server with "url", got ${JSON.stringify(type)}`,
      );
      continue;
    }
    out.upstreams[name] = { transport, ...used, ...settings };
    if (Object.keys(settings).length) out.settingsKeys[name] = Object.keys(settings);
  }
  if (!problems.length && Object.keys(out.upstreams).length === 0) {
    throw new ConfigError(
      out.disabled.length
        ? `invalid configuration:\n  ${key}: every server is disabled (${out.disabled.join(', ')})`
        : `invalid configuration:\n  ${key}: no servers`,
    );
  }
  return out;
}
