/**
 * `mrtr-gateway check --config FILE [--connect [--timeout MS]] [--port N] [--host H] [--federate]`: checks a configuration
 * without serving it. It is loaded and validated as the start does (src/config/load.ts, both
 * formats, `${NAME}` resolved), each upstream checked statically (src/config/check.ts: the stdio
 * command and `cwd`), and with `--connect` started or reached with the gateway's own upstream code
 * (src/router/upstream.ts: the era probe, `server/discover` of a 2026-07-28 upstream, or a legacy
 * session's `initialize`), every upstream side by side within `--timeout` ms (default
 * {@link DEFAULT_TIMEOUT_MS}; the configured start budgets, minutes for a first start, are too long
 * for a check), then stopped, children included (but for one that installs on its first run, `npx -y
 * …`, still silent at the timeout: it is left to finish its install, as the gateway leaves it);
 * each child runs in a process group of its own, ended whole (SIGTERM, SIGKILL 2 s later) before
 * the check exits, so that nothing it started outlives it. An upstream that takes each caller's
 * own credential is not connected.
 *
 * Output, on stdout, one line per upstream: `ok   NAME  TRANSPORT  TARGET[  connected: …]` (or
 * `[  (not connected: …)]`) or `FAIL NAME  TRANSPORT  PROBLEM` (and below it, indented, the last
 * {@link SAID_LINES} telling lines a failed stdio child wrote on stderr), then `skip NAME  disabled`
 * per disabled server; a configuration the start would refuse (the file, or with `--port`/`--host`,
 * `PORT`/`HOST`/`LOG_LEVEL`: src/start-settings.ts) is one `FAIL …` line (with the problems below
 * it). Keys of an `mcpServers` file the gateway ignores are noted on stderr. Exit code 0 when every
 * upstream is ok, 2 otherwise (a bad flag too, on stderr); no HTTP server is started. Part of the `main` layer.
 */
import { parseArgs } from 'node:util';
import { checkUpstream, type StaticCheck } from './config/check.js';
import { ConfigError, readConfigFile, type LoadedConfig } from './config/load.js';
import type { UpstreamConfig } from './config/schema.js';
import { silentLogger } from './observability/log.js';
import { Upstream } from './router/upstream.js';
import { START_FLAGS } from './cli-flags.js';
import { applyStartSettings } from './start-settings.js';
import { FirstStart, endChildGroups, groupEveryChild } from './upstream/stdio-child.js';

/** The default of `--timeout`: how long one upstream may take to start and answer, in ms. */
export const DEFAULT_TIMEOUT_MS = 10_000;
/** How long stopping the upstreams after `--connect` may take before the check exits anyway, in ms. */
const CLOSE_MS = 5000;

const USAGE = 'usage: mrtr-gateway check --config PATH [--connect [--timeout MS]] [--port N] [--host H] [--federate] [--help]';

const HELP = `${USAGE}

Checks a configuration without serving it: loads and validates it as the start does (a gateway
config or an mcpServers file, \${NAME} resolved), and checks that each stdio upstream's command
can be spawned (a path: an executable file; a bare name: found on the PATH the child gets) and
that its cwd is a directory.

Flags:
  -c, --config PATH  configuration file (default: gateway.config.json)
      --connect      also start or reach each upstream: a 2026-07-28 upstream answers
                     server/discover, a legacy one initialize; then stop it
      --timeout MS   with --connect, how long each upstream may take (default ${DEFAULT_TIMEOUT_MS})
      --port N, --host H, --federate
                     check as the start with these flags would serve; PORT, HOST and LOG_LEVEL
                     are checked as the start checks them
  -h, --help         print this help and exit

Prints one line per upstream, "ok   NAME  TRANSPORT  TARGET" or "FAIL NAME  TRANSPORT  PROBLEM"
("skip NAME  disabled" for a disabled server; below a FAIL line, the last lines a child wrote on
stderr), or one "FAIL …" line when the start would refuse the configuration itself; keys the
gateway ignores are noted on stderr.

Exit codes:
  0  every upstream is ok; --help
  2  a problem found, or a bad flag
`;

/** One upstream's line: the static check, and what `--connect` found. */
interface Row extends StaticCheck {
  connected?: string;
  /** Why it was not connected, though it may work (`takes each caller's credential …`). */
  notConnected?: string;
  /** The last telling lines a stdio child wrote on stderr before its start failed (printed below the line). */
  said?: string[];
}

/** How many of a failed child's stderr lines are printed below its line, at most. */
const SAID_LINES = 4;

/**
 * The last {@link SAID_LINES} lines of `stderr` that say something and are not in `message`
 * already: without stack frames, npm's bare `npm error 404` lines and its pointer to a debug log
 * (the line naming a package npm could not find comes after `npm error code E404`).
 */
function telling(stderr: unknown, message: string): string[] {
  if (!Array.isArray(stderr)) return [];
  const lines = stderr.filter(
    (l): l is string =>
      typeof l === 'string' &&
      !message.includes(l) &&
      !/^\s+at /.test(l) &&
      !/complete log of this run/.test(l) &&
      /\S/.test(l.replace(/^npm (error|ERR!)( \d{3}| code \S+)?/, '')),
  );
  return lines.slice(-SAID_LINES);
}

/**
 * Starts or reaches upstream `name` within `timeoutMs`, then stops it.
 * @returns what answered (`legacy 2025-06-18 (NAME VERSION)`, `2026-07-28 (server/discover)`).
 * @throws Error with the gateway's message for a start that failed (GatewayError -32603).
 */
async function connect(up: Upstream): Promise<string> {
  if ((await up.era()) === 'modern') return '2026-07-28 (server/discover)';
  const lease = await up.pool.acquireShared('gateway:check', {});
  const { protocolVersion, serverInfo } = lease.session.info;
  lease.release(true);
  return `legacy ${protocolVersion} (${serverInfo.name} ${serverInfo.version})`;
}

/** Whether an upstream takes each caller's own credential: without a caller it cannot be connected. */
function perCaller(u: UpstreamConfig): boolean {
  return u.credentials.mode !== 'static' || ('forwardAuthorization' in u && u.forwardAuthorization === true);
}

/** `--connect`: every row without a problem, side by side; the upstreams are stopped before it returns. */
async function connectAll(rows: Row[], cfg: LoadedConfig['config'], timeoutMs: number): Promise<void> {
  // Each child in a process group of its own, ended with all it started before the check exits
  // (out of the terminal's reach, so a Ctrl-C ends them here too).
  groupEveryChild();
  let exiting: Promise<never> | undefined;
  const interrupted = (signal: NodeJS.Signals) => {
    exiting ??= endChildGroups().then(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', interrupted).once('SIGTERM', interrupted);
  const ups: Upstream[] = [];
  await Promise.all(
    rows.map(async (row) => {
      const u = cfg.upstreams[row.name]!;
      if (row.problem) return;
      if (perCaller(u)) {
        const how = u.credentials.mode === 'static' ? 'forwardAuthorization' : `credentials.mode ${u.credentials.mode}`;
        row.notConnected = `takes each caller's credential, ${how}`;
        return;
      }
      // A first start (a command that installs, or firstStartMs configured) gets --timeout too; only
      // such a child, still silent then, is left to finish its install, as the gateway leaves it.
      const first = new FirstStart(u).active;
      const timeouts = { ...u.timeouts, connectMs: timeoutMs, ...(first ? { firstStartMs: timeoutMs } : {}) };
      const up = new Upstream(row.name, { ...u, timeouts }, silentLogger, false);
      ups.push(up);
      try {
        row.connected = await connect(up);
      } catch (e) {
        // The start budgets are --timeout here, whatever the file says.
        row.problem = (e as Error).message
          .replace(/timeouts\.(connectMs|firstStartMs)=/g, '--timeout ')
          .replace(/raise timeouts\.(connectMs|firstStartMs)/g, 'raise --timeout');
        row.said = telling((e as { data?: { stderr?: unknown } }).data?.stderr, row.problem);
      }
    }),
  );
  const closed = Promise.all(ups.flatMap((u) => [u.pool.close(), u.modern?.close()]));
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([closed, new Promise((r) => (timer = setTimeout(r, CLOSE_MS)))]);
  clearTimeout(timer);
  await endChildGroups();
  // Interrupted meanwhile: the handler exits once the children are gone, with no report.
  if (exiting) await exiting;
  process.off('SIGINT', interrupted).off('SIGTERM', interrupted);
}

/** The report: one line per row, columns aligned, then a `skip` line per disabled server. */
function report(rows: Row[], disabled: string[]): string {
  const nameWidth = Math.max(...rows.map((r) => r.name.length), ...disabled.map((n) => n.length));
  const transportWidth = Math.max(...rows.map((r) => r.transport.length));
  const lines = rows.map((r) => {
    const text =
      r.problem ??
      `${r.target}${r.connected ? `  connected: ${r.connected}` : ''}${r.notConnected ? `  (not connected: ${r.notConnected})` : ''}`;
    const said = (r.said ?? []).map((l) => `     ${l}\n`).join('');
    return `${r.problem ? 'FAIL' : 'ok  '} ${r.name.padEnd(nameWidth)}  ${r.transport.padEnd(transportWidth)}  ${text}\n${said}`;
  });
  return [...lines, ...disabled.map((n) => `skip ${n.padEnd(nameWidth)}  disabled\n`)].join('');
}

/** Writes `text` on `out`, resolved once written (a pipe may take it later on some systems: the caller exits next). */
function write(out: NodeJS.WritableStream, text: string): Promise<unknown> {
  return new Promise((r) => out.write(text, r));
}

/**
 * Runs `mrtr-gateway check` with the arguments after `check`; writes the report on `out` and a
 * bad flag on `err`.
 * @returns the exit code: 0 when every upstream is ok (or `--help`), 2 otherwise.
 */
export async function runCheck(
  argv: string[],
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
): Promise<number> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: { ...START_FLAGS, connect: { type: 'boolean' }, timeout: { type: 'string' } },
      strict: true,
    }).values;
  } catch (e) {
    err.write(`mrtr-gateway check: ${(e as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (args.help) {
    out.write(HELP);
    return 0;
  }
  if (args.timeout !== undefined && !args.connect) {
    err.write(`mrtr-gateway check: --timeout needs --connect (nothing is started without it)\n${USAGE}\n`);
    return 2;
  }
  const timeoutMs = args.timeout === undefined ? DEFAULT_TIMEOUT_MS : /^\d{1,10}$/.test(args.timeout) ? Number(args.timeout) : NaN;
  if (!(timeoutMs >= 1 && timeoutMs <= 2_147_483_647)) {
    err.write(`mrtr-gateway check: --timeout must be a whole number of ms from 1 to 2147483647, got '${args.timeout}'\n`);
    return 2;
  }
  let loaded: LoadedConfig;
  try {
    // The working directories are checked per upstream below, not as a problem of the file.
    loaded = readConfigFile(args.config!, process.env, { checkCwd: false, federate: args.federate });
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    await write(out, `FAIL ${e.message}\n`);
    return 2;
  }
  const cfg = loaded.config;
  // What the start refuses beyond the file: LOG_LEVEL, the port, where it listens without auth.
  const refused = applyStartSettings(cfg, { port: args.port, host: args.host }, process.env);
  if (refused) {
    await write(out, `FAIL ${refused}\n`);
    return 2;
  }
  for (const w of loaded.warnings)
    await write(err, `mrtr-gateway check: note: ${w.path}: ignoring keys the gateway does not use: ${w.ignored.join(', ')}\n`);
  const rows: Row[] = Object.entries(cfg.upstreams).map(([name, u]) => checkUpstream(name, u));
  if (args.connect) await connectAll(rows, cfg, timeoutMs);
  await write(out, report(rows, loaded.disabled));
  return rows.some((r) => r.problem) ? 2 : 0;
}
