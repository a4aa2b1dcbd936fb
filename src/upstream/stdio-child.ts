/**
 * The stdio child of an upstream, shared by the legacy session (v1 SDK `Client`) and the
 * 2026-07-28 hop (which also asks the `protocol: "auto"` era probe on it), and the first start of
 * a command that installs what it runs.
 *
 * First start: `npx -y PACKAGE` (and `uvx`, `pnpm dlx`, `bunx`, `yarn dlx`, `pipx run`, …, see
 * {@link installsOnFirstRun}) downloads and installs the server the first time it runs, which
 * takes longer than `timeouts.connectMs`. Until one start of such an upstream succeeded, a start
 * gets `timeouts.firstStartMs` (default {@link DEFAULT_FIRST_START_MS}) and one starts at a time.
 * Its child runs in a process group of its own (a Ctrl-C in the gateway's terminal does not reach
 * it), and a child that has not said anything yet is never killed: when the gateway gives it up
 * (its start ran out of time, its caller went away, the gateway stops) its stdin is closed and it
 * is left to finish the install (a stdio server exits once its stdin ends). Killing an installer
 * midway leaves its cache locked or incomplete, and the server broken until the cache is cleared.
 *
 * Lifecycle: {@link createStdioChild} spawns it with a minimal environment (the safe set plus its
 * configured `env`) and keeps its last stderr lines ({@link StderrTail}, secrets hidden);
 * {@link endStdioChild} ends it (SIGTERM, then SIGKILL after {@link KILL_AFTER_MS} or by the
 * gateway's stop deadline, {@link endChildrenBy}); {@link untilIdle} waits until its threads sleep.
 *
 * Era probe hand-over: the child the probe spawned is handed to the first legacy session when the
 * upstream turns out to be legacy ({@link StdioChild.adopt}), so a slow server is started once.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import { basename } from 'node:path';
import type { Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { StdioClientTransport, getDefaultEnvironment, type StdioServerParameters } from '@modelcontextprotocol/sdk/client/stdio.js';
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js';
import { safeChildEnv } from '../config/child-env.js';
import type { UpstreamConfig } from '../config/schema.js';
import type { Logger } from '../observability/log.js';
import type { StdoutStrays } from './stdout-guard.js';

/** The first-start budget of a command that installs what it runs, when `timeouts.firstStartMs` is not set, in ms (3 minutes). */
export const DEFAULT_FIRST_START_MS = 180_000;

/** Runners that fetch and install a package on first use, by executable name, and the first argument that makes them do so (undefined: always). */
const INSTALLERS: Record<string, string[] | undefined> = {
  npx: undefined,
  pnpx: undefined,
  bunx: undefined,
  uvx: undefined,
  npm: ['exec', 'x'],
  pnpm: ['dlx'],
  yarn: ['dlx'],
  bun: ['x'],
  pipx: ['run'],
  uv: ['tool'],
};

/** Shells that run a script given as an argument: POSIX shells with `-c` (also in `-lc`, `-ec`, …), `cmd /c` (or `/k`), PowerShell `-Command` (or `-c`). */
const SHELLS: Record<string, (arg: string) => boolean> = {
  sh: posixC,
  bash: posixC,
  zsh: posixC,
  dash: posixC,
  ksh: posixC,
  ash: posixC,
  fish: (a) => a === '-c' || a === '--command',
  cmd: (a) => /^\/[ck]$/i.test(a),
  powershell: (a) => /^-(c|command)$/i.test(a),
  pwsh: (a) => /^-(c|command)$/i.test(a),
};

function posixC(arg: string): boolean {
  return /^-[a-z]*c[a-z]*$/i.test(arg);
}

/** The executable file name of `command`, without a path or a Windows `.cmd`/`.exe`/`.bat`/`.ps1` suffix, lower case. */
function exeName(command: string): string {
  return basename(command.replace(/\\/g, '/'))
    .replace(/\.(cmd|exe|bat|ps1)$/i, '')
    .toLowerCase();
}

/**
 * The first command of a shell script (`exec`, `&` and `VAR=value` before it skipped), as words
 * without quotes; empty when there is none.
 */
function firstCommand(script: string): string[] {
  const first = script.trim().split(/[;\n|]|&&/)[0] ?? '';
  const words = first
    .split(/\s+/)
    .map((w) => w.replace(/^["']|["']$/g, ''))
    .filter(Boolean);
  while (words.length && (/^(exec|&|call)$/i.test(words[0]!) || /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[0]!))) words.shift();
  return words;
}

/**
 * True when `command args…` installs what it runs on first use: `npx`, `pnpx`, `bunx`, `uvx`,
 * `npm exec`/`npm x`, `pnpm dlx`, `yarn dlx`, `bun x`, `pipx run`, `uv tool run` (by the command's
 * file name, with or without a path or a Windows `.cmd`/`.exe` suffix), also behind a shell whose
 * script starts with one (`sh -c "exec npx -y pkg"`, `bash -lc …`, `cmd /c npx …`,
 * `powershell -Command npx …`) or after `env VAR=value …`.
 */
export function installsOnFirstRun(command: string, args: readonly string[]): boolean {
  const name = exeName(command);
  const shell = SHELLS[name];
  if (shell) {
    const at = args.findIndex(shell);
    if (at < 0) return false;
    // cmd and PowerShell take the rest of the line as the script; a POSIX shell the next argument.
    const script = name === 'cmd' || name === 'powershell' || name === 'pwsh' ? args.slice(at + 1).join(' ') : (args[at + 1] ?? '');
    const [inner, ...rest] = firstCommand(script);
    return inner !== undefined && !(exeName(inner) in SHELLS) && installsOnFirstRun(inner, rest);
  }
  if (name === 'env') {
    // `env [-i] [VAR=value …] COMMAND ARGS…`: the command after the options and assignments.
    const at = args.findIndex((a) => !a.startsWith('-') && !/^[A-Za-z_][A-Za-z0-9_]*=/.test(a));
    return at >= 0 && installsOnFirstRun(args[at]!, args.slice(at + 1));
  }
  if (!(name in INSTALLERS)) return false;
  const first = INSTALLERS[name];
  if (!first) return true;
  const sub = args.find((a) => !a.startsWith('-'));
  return sub !== undefined && first.includes(sub);
}

/**
 * The start budget of an upstream until one start succeeded, shared by its legacy pool and its
 * 2026-07-28 hop: `timeouts.firstStartMs` (default {@link DEFAULT_FIRST_START_MS} for a command
 * that {@link installsOnFirstRun}, else `timeouts.connectMs`); afterwards `connectMs`.
 */
export class FirstStart {
  private pending: boolean;
  /** The first-start budget, in ms; undefined when the upstream has none beyond `connectMs`. */
  private readonly firstMs: number | undefined;

  constructor(private readonly cfg: UpstreamConfig) {
    const installs = cfg.transport === 'stdio' && installsOnFirstRun(cfg.command, cfg.args);
    this.firstMs = cfg.transport === 'stdio' ? (cfg.timeouts.firstStartMs ?? (installs ? DEFAULT_FIRST_START_MS : undefined)) : undefined;
    this.pending = this.firstMs !== undefined;
  }

  /** True while no start succeeded yet and the upstream has a first-start budget (a child now may be installing). */
  get active(): boolean {
    return this.pending;
  }

  /** The budget of a start beginning now, in ms: `firstStartMs` (in place of `connectMs`, shorter or longer) during the first start, else `connectMs`. */
  budgetMs(): number {
    return this.pending ? this.firstMs! : this.cfg.timeouts.connectMs;
  }

  /** The setting that gives a start beginning now its budget, for messages. */
  setting(): string {
    return this.pending ? 'timeouts.firstStartMs' : 'timeouts.connectMs';
  }

  /** A start succeeded: later starts get `connectMs`. */
  done(): void {
    this.pending = false;
  }
}

/** The v1 SDK transport's private parts used here. */
interface Internals {
  _process?: ChildProcess;
  _readBuffer: { append(chunk: Buffer): void; readMessage(): JSONRPCMessage | null; clear(): void };
  _stderrStream: NodeJS.ReadWriteStream | null;
}

/**
 * A stdio client transport (the v1 SDK's, whose `close`, `send`, `stderr` and `pid` it keeps)
 * with what the gateway adds: a child spawned for a first start runs in its own process group
 * (`installing`), {@link release} leaves such a child to finish, the child's first message is
 * noticed ({@link heard}), and a started child can be handed to a new owner ({@link adopt}).
 * Works for both SDKs' callers (the message shapes are the same).
 */
export class StdioChild extends StdioClientTransport {
  /** When the child was spawned, or when a kept first start got a fresh budget (`performance.now()`, ms): its start budget counts from then. */
  spawnedAt = 0;
  /** True once the child sent a message on stdout (its runtime is up: no install is running any more). */
  heard = false;
  /** Set by the owner of the stdout guard: called when the child floods stdout (see stdout-guard.ts). */
  onFlood: ((reason: string) => void) | undefined;
  /** What the stdout guard counted (set where the guard was installed). */
  strays: StdoutStrays | undefined;
  /** The child's last stderr lines (set by its creator; they go with the child to a new owner). */
  stderrTail: StderrTail | undefined;
  /** The start budget the child was spawned with, in ms (set by its creator): a new owner gets what is left of it. */
  budgetMs = 0;
  /** Responses to these request ids are dropped (the era probe's, after a hand-over). */
  private readonly dropped = new Set<string | number>();
  private released = false;
  private startOnce = false;

  /**
   * @param installing spawned for a first start ({@link FirstStart.active}) of a command that may
   *   install: its own process group, and left to finish rather than killed while silent.
   */
  constructor(
    params: StdioServerParameters,
    readonly installing: boolean,
    private readonly log: Logger,
  ) {
    super(params);
    // The SDK's stdout reader calls this (a private method of its own): messages go through readMessages.
    (this as unknown as { processReadBuffer: () => void }).processReadBuffer = () => this.readMessages();
  }

  private get internals(): Internals {
    return this as unknown as Internals;
  }

  /** The running child, if any. */
  get child(): ChildProcess | undefined {
    return this.internals._process;
  }

  /**
   * Makes the next {@link start} a no-op (the child runs already) for a new owner, who then sets
   * `onmessage`/`onclose`/`onerror`; responses to `dropIds` (requests of the previous owner that
   * are still unanswered) are dropped rather than delivered.
   */
  adopt(dropIds: Iterable<string | number>): void {
    this.startOnce = true;
    this.onmessage = undefined;
    this.onclose = undefined;
    this.onerror = undefined;
    for (const id of dropIds) this.dropped.add(id);
  }

  override async start(): Promise<void> {
    if (this.startOnce) {
      this.startOnce = false;
      if (!this.child) throw new Error('the process exited before it was handed over');
      return;
    }
    if (this.child) throw new Error('StdioChild already started');
    // Only a first start (or a check, see groupEveryChild) needs a process group of its own; every
    // other child is spawned as the SDK does.
    if ((!this.installing && !groupEvery) || process.platform === 'win32') {
      this.spawnedAt = performance.now();
      return super.start();
    }
    const params = (this as unknown as { _serverParams: StdioServerParameters })._serverParams;
    const internals = this.internals;
    await new Promise<void>((resolve, reject) => {
      const child = spawn(params.command, params.args ?? [], {
        env: { ...getDefaultEnvironment(), ...params.env },
        stdio: ['pipe', 'pipe', params.stderr ?? 'inherit'],
        shell: false,
        cwd: params.cwd,
        detached: true,
      });
      internals._process = child;
      if (groupEvery && child.pid) grouped.set(this, child.pid);
      this.spawnedAt = performance.now();
      child.on('error', (error) => {
        reject(error);
        if (!this.released) this.onerror?.(error);
      });
      child.on('spawn', () => resolve());
      // As the SDK's own start does, with nothing delivered once the child was released.
      child.on('close', () => {
        if (this.released) return;
        internals._process = undefined;
        this.onclose?.();
      });
      child.stdin?.on('error', (error) => {
        if (!this.released) this.onerror?.(error);
      });
      child.stdout?.on('data', (chunk: Buffer) => {
        if (this.released) return;
        try {
          internals._readBuffer.append(chunk);
          this.readMessages();
        } catch (error) {
          this.onerror?.(error as Error);
          void this.close().catch(() => {});
        }
      });
      child.stdout?.on('error', (error) => {
        if (!this.released) this.onerror?.(error);
      });
      if (internals._stderrStream && child.stderr) child.stderr.pipe(internals._stderrStream);
    });
  }

  private readMessages(): void {
    while (!this.released) {
      let message: JSONRPCMessage | null;
      try {
        message = this.internals._readBuffer.readMessage();
      } catch (error) {
        this.onerror?.(error as Error);
        continue;
      }
      if (message === null) return;
      this.heard = true;
      const m = message as { id?: string | number; method?: string };
      if (m.method === undefined && m.id !== undefined && this.dropped.delete(m.id)) continue;
      this.onmessage?.(message);
    }
  }

  /** Ends the child as the SDK does (stdin closed, then SIGTERM, then SIGKILL), unless it is left to finish ({@link release}). */
  override async close(): Promise<void> {
    if (this.release()) return;
    return super.close();
  }

  /**
   * Leaves the child to finish instead of ending it, when it was spawned for a first start
   * (`installing`) and has said nothing yet (it may be installing: killing it would leave the
   * install broken): its stdin is closed, its output is still read (an installer that writes to a
   * closed pipe may fail) until it exits, and the gateway no longer waits for it. The owner sees
   * `onclose` at once. Returns false (and does nothing) for any other child.
   */
  release(): boolean {
    const child = this.child;
    if (!this.installing || this.heard || this.released || !child || child.exitCode !== null || child.signalCode !== null) return false;
    this.released = true;
    grouped.delete(this);
    this.log.info({ pid: child.pid }, 'upstream process still in its first start (it may be installing): left to finish, its stdin closed');
    this.internals._process = undefined;
    this.internals._readBuffer.clear();
    try {
      child.stdin?.end();
    } catch {
      /* gone */
    }
    child.stdout?.resume();
    child.unref();
    for (const s of [child.stdin, child.stdout, child.stderr] as (Readable & { unref?: () => void })[]) s?.unref?.();
    const onclose = this.onclose;
    this.onmessage = this.onclose = this.onerror = undefined;
    onclose?.();
    return true;
  }
}

/** Lines of a stdio child's stderr kept for error reports, and the longest line kept, in characters. */
const STDERR_LINES = 20;
const STDERR_LINE_CHARS = 500;

/**
 * The last lines a stdio child wrote to stderr, with the values of its configured `env` hidden
 * (`redact`, from {@link secretRedactor}): these lines reach callers (`data.stderr`, the message of
 * a failed start) and the logs.
 */
export class StderrTail {
  private readonly lines: string[] = [];
  private partial = '';
  /** Resolves when the child's stderr ended. */
  ended: Promise<void> = Promise.resolve();

  constructor(private readonly redact: (text: string) => string) {}

  /** Adds a chunk of output; complete lines are kept, the oldest dropped beyond the bound. */
  push(chunk: string, onLine?: (line: string) => void): void {
    this.partial += chunk;
    let nl: number;
    while ((nl = this.partial.indexOf('\n')) >= 0) {
      this.keep(this.partial.slice(0, nl), onLine);
      this.partial = this.partial.slice(nl + 1);
    }
    // Hidden before the cut, so that a value the cut splits cannot show its last part.
    if (this.partial.length > 64_000) this.partial = this.redact(this.partial).slice(-STDERR_LINE_CHARS);
  }

  private keep(raw: string, onLine?: (line: string) => void): void {
    // Hidden before the cut, so that a value the cut splits cannot show its first part.
    const line = this.redact(raw.trimEnd()).slice(0, STDERR_LINE_CHARS);
    if (!line) return;
    onLine?.(line);
    this.lines.push(line);
    if (this.lines.length > STDERR_LINES) this.lines.shift();
  }

  /** The kept lines, oldest first, with an unterminated last line included. */
  get(): string[] {
    const last = this.redact(this.partial.trimEnd()).slice(0, STDERR_LINE_CHARS);
    return last ? [...this.lines, last] : [...this.lines];
  }
}

/**
 * The stdio child of upstream `cfg` (not started): a minimal environment plus the configured
 * `env` and `extraEnv` (a caller's credential, src/upstream/credential.ts), its stderr kept in
 * `stderrTail` and logged at debug. `installing`: spawned for a first start (see
 * src/upstream/stdio-child.ts).
 */
export function createStdioChild(
  cfg: Extract<UpstreamConfig, { transport: 'stdio' }>,
  log: Logger,
  stderrTail: StderrTail | undefined,
  installing = false,
  extraEnv: Record<string, string> = {},
): StdioChild {
  const t = new StdioChild(
    { command: cfg.command, args: cfg.args, env: { ...defaultChildEnv(), ...cfg.env, ...extraEnv }, cwd: cfg.cwd, stderr: 'pipe' },
    installing,
    log,
  );
  const stderr = t.stderr;
  if (stderr && stderrTail) {
    stderrTail.ended = new Promise((resolve) => {
      stderr.once('end', resolve);
      stderr.once('close', resolve);
    });
    stderr.on('data', (chunk: Buffer) => stderrTail.push(chunk.toString('utf8'), (line) => log.debug({ stderr: line }, 'upstream stderr')));
  }
  t.stderrTail = stderrTail;
  return t;
}

/** The configured `env` of a child with `extra` on top (the same object when there is nothing extra, so its redactor is reused). */
export function withExtraEnv(env: Record<string, string>, extra: Record<string, string>): Record<string, string> {
  return Object.keys(extra).length ? { ...env, ...extra } : env;
}

/**
 * The safe set of the gateway's environment every stdio child gets (`SAFE_CHILD_ENV` in
 * `src/config/child-env.ts`). A child's configured `env` goes on top of it; config loading has
 * already added the variables its `envPassthrough` names to that `env`.
 */
export function defaultChildEnv(): Record<string, string> {
  return safeChildEnv(process.env);
}

/** The child process of a stdio transport (v1 or v2 SDK), while it runs. */
export function childOf(transport: object): ChildProcess | undefined {
  return (transport as { _process?: ChildProcess })._process;
}

/** How long a stdio child may run on after the gateway sent it SIGTERM at close before it gets SIGKILL, in ms. */
export const KILL_AFTER_MS = 2000;

/** The stdio children {@link endStdioChild} is ending that have not exited yet. */
const ending = new Set<ChildProcess>();
/** When every child being ended gets SIGKILL at the latest (`performance.now()`, ms); see {@link endChildrenBy}. */
let killBy = Infinity;

/**
 * Bounds the end of stdio children from now on (the gateway stops within `shutdownGraceMs`): a
 * child {@link endStdioChild} ends gets SIGKILL at `at` (`performance.now()`, ms) if that comes
 * before its `killAfterMs`; children being ended already get it at `at` too.
 */
export function endChildrenBy(at: number): void {
  killBy = at;
  const timer = setTimeout(
    () => {
      for (const child of ending) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    },
    Math.max(0, at - performance.now()),
  );
  timer.unref();
}

/**
 * Closes a stdio transport (v1 or v2 SDK) and makes sure its child ends (except a child left to
 * finish its first start, see {@link StdioChild.release}): `close` runs the SDK's
 * close (stdin ends, then SIGTERM), the child gets SIGTERM at once as well, and SIGKILL when it
 * still runs `killAfterMs` (ms) later, or at the time {@link endChildrenBy} set if sooner. Resolves
 * when the child has exited (or at once without one) and `close` has settled. Never throws.
 */
export async function endStdioChild(transport: object, close: () => Promise<unknown>, killAfterMs = KILL_AFTER_MS): Promise<void> {
  // A child still in its first start may be installing: it is left to finish (stdio-child.ts).
  if (transport instanceof StdioChild && transport.release()) {
    await close().catch(() => {});
    return;
  }
  const child = childOf(transport);
  const running = () => child !== undefined && child.exitCode === null && child.signalCode === null;
  if (!running()) {
    await close().catch(() => {});
    return;
  }
  ending.add(child!);
  const exited = new Promise<void>((r) =>
    child!.once('exit', () => {
      ending.delete(child!);
      r();
    }),
  );
  child!.kill('SIGTERM');
  const timer = setTimeout(
    () => {
      if (running()) child!.kill('SIGKILL');
    },
    Math.max(0, Math.min(killAfterMs, killBy - performance.now())),
  );
  await Promise.all([exited, close().catch(() => {})]);
  clearTimeout(timer);
}

/** Set by {@link groupEveryChild}: every stdio child spawned from then on gets a process group of its own. */
let groupEvery = false;
/** The children spawned in a group of their own since {@link groupEveryChild}, with their pids (the group ids); not those left to finish. */
const grouped = new Map<StdioChild, number>();

/**
 * From now on, every stdio child is spawned in a process group of its own (`mrtr-gateway check`,
 * which must not exit before its children and what they started are gone: see
 * {@link endChildGroups}). Not on Windows.
 */
export function groupEveryChild(): void {
  groupEvery = true;
}

/** Whether process group `pgid` still has a process in it. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Ends the process groups of the children spawned since {@link groupEveryChild} (but a first start
 * left to finish its install), with every process in them (a shell's background job too): SIGTERM
 * now, SIGKILL to what still runs `killAfterMs` (ms) later. Resolves when the groups are empty, or
 * 1 s after the SIGKILL at the latest. Never throws.
 */
export async function endChildGroups(killAfterMs = KILL_AFTER_MS): Promise<void> {
  const pgids = [...grouped.values()];
  grouped.clear();
  const signal = (sig: NodeJS.Signals) => {
    for (const pgid of pgids.filter(groupAlive))
      try {
        process.kill(-pgid, sig);
      } catch {
        /* gone meanwhile */
      }
  };
  signal('SIGTERM');
  const killAt = performance.now() + killAfterMs;
  let killed = false;
  while (pgids.some(groupAlive) && performance.now() < killAt + 1000) {
    if (!killed && performance.now() >= killAt) {
      signal('SIGKILL');
      killed = true;
    }
    await delay(20);
  }
}

/** Interval between two looks at a stdio child's threads while waiting for it to be idle, in ms. */
const IDLE_SAMPLE_MS = 5;

/**
 * The scheduler's view of process `pid` (Linux `/proc/PID/task/*`): whether every thread sleeps
 * (state `S`: waiting for input, a timer or work; not running, runnable or in disk I/O) and the
 * total time its threads have run, in ns. Undefined where `/proc` cannot tell (not Linux, the
 * process is gone).
 */
async function threadsOf(pid: number): Promise<{ asleep: boolean; ranNs: number } | undefined> {
  try {
    const dir = `/proc/${pid}/task`;
    let asleep = true;
    let ranNs = 0;
    for (const tid of await readdir(dir)) {
      const [stat, sched] = await Promise.all([readFile(`${dir}/${tid}/stat`, 'utf8'), readFile(`${dir}/${tid}/schedstat`, 'utf8')]);
      // "tid (comm) S …": the name may hold spaces and parentheses, the state follows the last ')'.
      if (stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'S') asleep = false;
      ranNs += Number(sched.split(' ')[0]);
    }
    return Number.isFinite(ranNs) ? { asleep, ranNs } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Waits until stdio child `pid` is idle: every thread asleep at two looks {@link IDLE_SAMPLE_MS}
 * apart with no run time between them (a server applying an answer asynchronously, as
 * server-filesystem resolves each root directory, is busy or waits on disk until it is done; one
 * that waits for the CPU on a loaded host is runnable). Gives up at `until`
 * (`performance.now()`, ms), and at once where `/proc` cannot tell.
 */
export async function untilIdle(pid: number, until: number): Promise<void> {
  let before = await threadsOf(pid);
  while (before && performance.now() < until) {
    await delay(IDLE_SAMPLE_MS);
    const now = await threadsOf(pid);
    if (!now || (before.asleep && now.asleep && now.ranNs === before.ranNs)) return;
    before = now;
  }
}
