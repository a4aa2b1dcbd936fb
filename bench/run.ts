/**
 * `npm run bench` (full, under 10 minutes on 2 cores) and `npm run bench -- --quick` (under a
 * minute): measures the gateway on this machine, prints a Markdown report and writes it to
 * bench/results/latest.md (quick runs: bench/results/quick.md). See bench/README.md.
 *
 * Exits non-zero, without writing a report, when any measured call fails.
 */
import { execSync, spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, freemem, loadavg, release, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { openLegacySession } from './lib/mcp.js';
import { DEFAULT_BASELINE, prepareBaseline, type Baseline } from './lib/baseline.js';
import { startOtlpSink, tracingEnv } from './lib/otlp-sink.js';
import { freePort } from '../test/helpers/infra.js';
import {
  ECHO_STDIO,
  GatewayProcess,
  ROOT,
  startEchoHttp,
  startMcpProxy,
  startRelay,
  startSupergateway,
  stopAll,
  stopChild,
  type Stoppable,
} from './lib/procs.js';
import { waitForPort } from '../test/helpers/infra.js';
import { bytes, fmt, fmtBytes, num, ratio, table, type Figure } from './lib/stats.js';
import { benchLimits, sessions } from './sections/config.js';
import { directPath, gatewayPath, measureRounds } from './sections/mrtr.js';
import { measureParked, type ParkedFigures } from './sections/parked.js';
import { cpuTable, measureCpu, type CpuFigures, type CpuSide } from './sections/cpu.js';
import { legacyEcho, legacyEchoCheck, measure, modernEcho, modernEchoCheck, type Cell, type Target } from './sections/passthrough.js';
import { measureStartup, startupTable, type StartupFigures } from './sections/startup.js';
import { measureTasks, type TaskFigures } from './sections/tasks.js';

const { values: flags } = parseArgs({
  options: { quick: { type: 'boolean', default: false }, baseline: { type: 'string' } },
  strict: true,
});
const quick = flags.quick!;
/**
 * The gateway at an earlier commit, measured beside this one (`--baseline REF`; `--baseline none`:
 * not run). A full run compares with {@link DEFAULT_BASELINE} unless told otherwise; a quick run
 * only when given `--baseline`.
 */
const baselineRef = flags.baseline ?? (quick ? 'none' : DEFAULT_BASELINE);
const baseline: Baseline =
  baselineRef === 'none'
    ? { ref: 'none', reason: `not run (${quick && !flags.baseline ? 'quick run' : '--baseline none'})` }
    : prepareBaseline(ROOT, baselineRef);
const baseRoot = 'root' in baseline ? baseline.root : undefined;
const baseLabel = 'root' in baseline ? `mrtr-gateway at ${baseline.commit} (baseline)` : 'baseline';

/** What a run measures, full or quick. */
const settings = quick
  ? {
      plan: { concurrencies: [1, 16], primeSeconds: 0.4, warmSeconds: 0, runSeconds: 0.3, runs: 2 },
      slowAmount: 1,
      mrtrCalls: 15,
      mrtrRuns: 2,
      completedCalls: 200,
      parkedLevels: [100],
      parkedRuns: 1,
      baselineRuns: 1,
      tasks: 100,
      taskSleepMs: 400,
      taskRuns: 1,
      startupRuns: 3,
      startupDist: false,
      cpu: { rounds: 8, warmRounds: 2, calls: 1000 },
    }
  : {
      plan: { concurrencies: [1, 16, 64], primeSeconds: 2, warmSeconds: 1.5, runSeconds: 2.5, runs: 3 },
      slowAmount: 8,
      mrtrCalls: 150,
      mrtrRuns: 5,
      completedCalls: 3000,
      parkedLevels: [100, 1000],
      parkedRuns: 3,
      // The baseline's memory and task figures are the "before" of the summary: one run each.
      baselineRuns: 1,
      tasks: 1000,
      taskSleepMs: 3000,
      taskRuns: 3,
      startupRuns: 5,
      startupDist: true,
      cpu: { rounds: 30, warmRounds: 3, calls: 2000 },
    };

const started = performance.now();
const elapsed = () => `${((performance.now() - started) / 1000).toFixed(0)} s`;
const log = (s: string) => process.stderr.write(`[bench ${elapsed()}] ${s}\n`);

process.chdir(ROOT);

function version(pkg: string): string {
  return JSON.parse(readFileSync(join(ROOT, 'node_modules', pkg, 'package.json'), 'utf8')).version;
}

function git(): string {
  try {
    const head = execSync('git rev-parse --short HEAD', { cwd: ROOT, encoding: 'utf8' }).trim();
    const dirty = execSync('git status --porcelain -- src', { cwd: ROOT, encoding: 'utf8' }).trim()
      ? ' (src/ has uncommitted changes)'
      : '';
    return head + dirty;
  } catch {
    return 'unknown';
  }
}

/** Upstream configs of the fixture for the pass-through and round-trip gateways. */
function httpUpstream(url: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  // One upstream session per call in flight: room for the highest concurrency.
  return { transport: 'streamable-http', url, ...sessions(64), ...extra };
}
/** stdio: each session is a child process; 8 of them (the gateway's original default) on 2 cores. */
const STDIO_SESSIONS = 8;
const stdioUpstream = { transport: 'stdio', command: ECHO_STDIO[0], args: ECHO_STDIO.slice(1), ...sessions(STDIO_SESSIONS) };

/** A fresh gateway process per section, so one section's heap does not weigh on the next. */
function gateway(
  label: string,
  upstreams: Record<string, unknown>,
  opts: { root?: string; env?: Record<string, string>; top?: Record<string, unknown> } = {},
): Promise<GatewayProcess> {
  return GatewayProcess.start(label, { limits: benchLimits, ...opts.top, upstreams }, opts);
}

/** A gateway of the baseline checkout, or undefined when there is none. */
function baselineGateway(label: string, upstreams: Record<string, unknown>): Promise<GatewayProcess | undefined> {
  return baseRoot ? gateway(`${label}, baseline`, upstreams, { root: baseRoot }) : Promise.resolve(undefined);
}

/** Two replicas sharing a Redis server started for the run, or why they are not run. */
async function startReplicas(
  upstreams: Record<string, unknown>,
): Promise<{ a: GatewayProcess; b: GatewayProcess; stop: () => Promise<void> } | { reason: string }> {
  if (!existsSync('/usr/bin/redis-server')) return { reason: 'redis-server is not installed (.ci/run installs it)' };
  const port = await freePort();
  const redis = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: 'ignore',
  });
  const redisStop: Stoppable = { label: 'redis-server', stop: () => stopChild(redis) };
  await waitForPort(port);
  const top = {
    store: { kind: 'redis', url: `redis://127.0.0.1:${port}` },
    replicas: { secret: 'bench-replica-secret-0123456789abcdef' },
    requestState: { keys: [{ kid: 'bench', secret: 'bench-requestState-secret-0123456789abcdef' }] },
  };
  const [a, b] = await Promise.all([gateway('replica A', upstreams, { top }), gateway('replica B', upstreams, { top })]);
  return { a, b, stop: async () => (await Promise.all([a.stop(), b.stop()]), await redisStop.stop()) };
}

interface Results {
  http: Map<string, Map<number, Cell>>;
  httpTargets: Target[];
  /** CPU µs per `echo` call of the gateway and the baseline, interleaved (Linux, with a baseline). */
  cpu?: CpuFigures;
  cpuSides: Pick<CpuSide, 'key' | 'label'>[];
  stdio: Map<string, Map<number, Cell>>;
  stdioTargets: Target[];
  /** Gateway process memory (after a GC) at the end of sections 1 and 2. */
  gatewayMemory: { http: NodeJS.MemoryUsage; stdio: NodeJS.MemoryUsage };
  rounds: Map<string, Figure>;
  roundLabels: Map<string, string>;
  /** Why the two-replica paths were not run, when they were not. */
  replicasSkipped?: string;
  parked: ParkedFigures;
  parkedBaseline?: ParkedFigures;
  tasks: TaskFigures;
  tasksBaseline?: TaskFigures;
  startup: StartupFigures;
}

async function main(): Promise<Results> {
  log(`mode: ${quick ? 'quick' : 'full'}`);
  const fixture = await startEchoHttp();
  // Every process of sections 1-3 starts at once; each section's gateway stays idle until its turn.
  const sink = await startOtlpSink();
  const relay = await startRelay(fixture.url);
  const [gw, gwStdio, gw3, mcpProxy, supergateway, gwBase, gwStdioBase, gw3Base, gwTraced] = await Promise.all([
    gateway('gateway (HTTP upstream)', { http: httpUpstream(fixture.url) }),
    gateway('gateway (stdio upstream)', { stdio: stdioUpstream }),
    gateway('gateway (input_required rounds)', {
      http: httpUpstream(fixture.url),
      // Same endpoint, input requests answered without the 15 ms batch window.
      'http-nobatch': httpUpstream(fixture.url, { input: { batchWindowMs: 0 } }),
    }),
    startMcpProxy(),
    startSupergateway(),
    baselineGateway('gateway (HTTP upstream)', { http: httpUpstream(fixture.url) }),
    baselineGateway('gateway (stdio upstream)', { stdio: stdioUpstream }),
    baselineGateway('gateway (input_required rounds)', { http: httpUpstream(fixture.url) }),
    gateway('gateway (HTTP upstream, tracing on)', { http: httpUpstream(fixture.url) }, { env: tracingEnv(sink.url) }),
  ]);

  // 1. Streamable HTTP upstream.
  log('1. pass-through, Streamable HTTP upstream');
  const directSession = await openLegacySession(fixture.url);
  const gatewaySession = await openLegacySession(gw.url('http'));
  const [c1, c16] = [settings.plan.concurrencies[0]!, settings.plan.concurrencies[1]!];
  const httpTargets: Target[] = [
    {
      key: 'direct',
      label: 'direct (legacy client, one session)',
      request: legacyEcho(fixture.url, directSession),
      check: legacyEchoCheck,
    },
    {
      key: 'relay',
      label: 'minimal relay (node:http and an undici Pool, no MCP work) in front of the direct session',
      request: legacyEcho(relay.url, directSession),
      check: legacyEchoCheck,
      concurrencies: [c1, c16],
    },
    { key: 'gateway', label: 'mrtr-gateway (2026-07-28)', request: modernEcho(gw.url('http')), check: modernEchoCheck() },
    ...(gwBase
      ? [
          {
            key: 'baseline',
            label: `${baseLabel} (2026-07-28)`,
            request: modernEcho(gwBase.url('http')),
            check: modernEchoCheck(),
            concurrencies: [c1, c16],
          },
        ]
      : []),
    {
      key: 'legacy',
      label: 'legacy client through mrtr-gateway (2025-11-25 session)',
      request: legacyEcho(gw.url('http'), gatewaySession),
      check: legacyEchoCheck,
      concurrencies: [c1, c16],
    },
    {
      key: 'traced',
      label: 'mrtr-gateway with tracing on (OTLP export)',
      request: modernEcho(gwTraced.url('http')),
      check: modernEchoCheck(),
      concurrencies: [c1, c16],
    },
  ];
  const http = await measure(httpTargets, settings.plan, log);
  const httpMemory = await gw.memory();
  const cpuSides: CpuSide[] = gwBase
    ? [
        { key: 'gateway', label: 'mrtr-gateway', proc: gw, request: modernEcho(gw.url('http')) },
        { key: 'baseline', label: baseLabel, proc: gwBase, request: modernEcho(gwBase.url('http')) },
      ]
    : [];
  let cpu: CpuFigures | undefined;
  if (cpuSides.length && process.platform === 'linux') {
    log(`1b. CPU per echo call, interleaved with the baseline (concurrency ${c16})`);
    cpu = await measureCpu(cpuSides, { ...settings.cpu, concurrency: c16 }, log);
  }
  const spans = sink.spans;
  await Promise.all([gw.stop(), gwBase?.stop(), gwTraced.stop(), sink.stop(), relay.stop()]);
  if (spans === 0) throw new Error('the gateway with tracing on exported no span to the OTLP sink');

  // 2. stdio upstream.
  log('2. pass-through, stdio upstream');
  const [proxySession, sgSession] = await Promise.all([openLegacySession(mcpProxy.url), openLegacySession(supergateway.url)]);
  // The peers' 2025-11-25 sessions: at the lowest and highest concurrency (the lowest only in a quick run).
  const peerSessionConcurrencies = quick ? [c1] : [c1, settings.plan.concurrencies.at(-1)!];
  const stdioTargets: Target[] = [
    { key: 'gateway', label: 'mrtr-gateway (2026-07-28)', request: modernEcho(gwStdio.url('stdio')), check: modernEchoCheck() },
    ...(gwStdioBase
      ? [
          {
            key: 'baseline',
            label: `${baseLabel} (2026-07-28)`,
            request: modernEcho(gwStdioBase.url('stdio')),
            check: modernEchoCheck(),
            concurrencies: [settings.plan.concurrencies.at(-1)!],
          },
        ]
      : []),
    { key: 'mcp-proxy', label: 'mcp-proxy (2026-07-28)', request: modernEcho(mcpProxy.url), check: modernEchoCheck() },
    {
      key: 'mcp-proxy-legacy',
      label: 'mcp-proxy (2025-11-25 session)',
      request: legacyEcho(mcpProxy.url, proxySession),
      check: legacyEchoCheck,
      concurrencies: peerSessionConcurrencies,
    },
    {
      key: 'supergateway-legacy',
      label: 'supergateway (2025-11-25 session)',
      request: legacyEcho(supergateway.url, sgSession),
      check: legacyEchoCheck,
      concurrencies: peerSessionConcurrencies,
    },
    // Close to a second per call: left out of a quick run.
    ...(quick
      ? []
      : [
          {
            key: 'supergateway',
            label: 'supergateway (2026-07-28, one child per request)',
            request: modernEcho(supergateway.url),
            // Its result has no resultType.
            check: modernEchoCheck(false),
            concurrencies: [1],
            amount: settings.slowAmount,
          },
        ]),
  ];
  const stdio = await measure(stdioTargets, settings.plan, log);
  const stdioMemory = await gwStdio.memory();
  await Promise.all([gwStdio.stop(), gwStdioBase?.stop(), mcpProxy.stop(), supergateway.stop()]);

  // 3. One input_required round.
  log('3. one input_required round');
  const direct = await directPath(fixture.url);
  const replicas = await startReplicas({ http: httpUpstream(fixture.url) });
  const paths = [
    direct,
    gatewayPath('gateway', 'mrtr-gateway, default batchWindowMs (15 ms)', gw3.url('http')),
    gatewayPath('gateway-nobatch', 'mrtr-gateway, batchWindowMs 0', gw3.url('http-nobatch')),
    ...(gw3Base ? [gatewayPath('baseline', `${baseLabel}, default batchWindowMs (15 ms)`, gw3Base.url('http'))] : []),
    ...('a' in replicas
      ? [
          gatewayPath('one-replica', 'two replicas on Redis, call and retry on the same replica', replicas.a.url('http')),
          gatewayPath(
            'forwarded',
            'two replicas on Redis, retry sent to the other replica (forwarded)',
            replicas.a.url('http'),
            replicas.b.url('http'),
          ),
        ]
      : []),
  ];
  const rounds = await measureRounds(paths, settings.mrtrCalls, settings.mrtrRuns, log);
  await direct.close();
  await Promise.all([gw3.stop(), gw3Base?.stop(), 'stop' in replicas ? replicas.stop() : undefined]);
  await fixture.stop();

  // 4. Parked calls.
  log('4. memory of parked calls');
  const parked = await measureParked(settings.parkedLevels, settings.parkedRuns, settings.completedCalls, log);
  const parkedBaseline = baseRoot
    ? await measureParked([Math.max(...settings.parkedLevels)], settings.baselineRuns, 0, log, { root: baseRoot, label: baseLabel })
    : undefined;

  // 5. Tasks.
  log('5. tasks');
  const tasks = await measureTasks(settings.tasks, settings.taskSleepMs, settings.taskRuns, log);
  const tasksBaseline = baseRoot
    ? await measureTasks(settings.tasks, settings.taskSleepMs, settings.baselineRuns, log, { root: baseRoot, label: baseLabel })
    : undefined;

  // 6. Start-up.
  log('6. start-up');
  const startup = await measureStartup(settings.startupRuns, settings.startupDist, log);

  return {
    http,
    httpTargets,
    cpu,
    cpuSides,
    stdio,
    stdioTargets,
    gatewayMemory: { http: httpMemory, stdio: stdioMemory },
    rounds,
    roundLabels: new Map(paths.map((p) => [p.key, p.label])),
    replicasSkipped: 'reason' in replicas ? replicas.reason : undefined,
    parked,
    parkedBaseline,
    tasks,
    tasksBaseline,
    startup,
  };
}

function loadTable(targets: Target[], cells: Map<string, Map<number, Cell>>, concurrencies: number[], extraRows: string[][] = []): string {
  const rows: string[][] = [];
  for (const c of concurrencies) {
    for (const t of targets) {
      const cell = cells.get(t.key)?.get(c);
      if (!cell) continue;
      rows.push([t.label, String(c), fmt(cell.p50), fmt(cell.p99), fmt(cell.rps, 0)]);
    }
  }
  return table(['path', 'concurrency', 'p50 ms', 'p99 ms', 'requests/s'], [...rows, ...extraRows]);
}

function ratioTable(
  base: string,
  baseLabel: string,
  targets: Target[],
  cells: Map<string, Map<number, Cell>>,
  concurrencies: number[],
): string {
  const rows: string[][] = [];
  for (const t of targets) {
    if (t.key === base) continue;
    for (const c of concurrencies) {
      const g = cells.get(base)?.get(c);
      const p = cells.get(t.key)?.get(c);
      if (!g || !p) continue;
      rows.push([
        `${baseLabel} / ${t.label}`,
        String(c),
        ratio(g.p50.median, p.p50.median),
        ratio(g.p99.median, p.p99.median),
        ratio(g.rps.median, p.rps.median),
      ]);
    }
  }
  return table(['ratio', 'concurrency', 'p50', 'p99', 'requests/s'], rows);
}

/**
 * The headline figures: each with the baseline (the same figure for the gateway at the baseline
 * commit, in this run), now, the reference it is compared with, and the target.
 */
function summary(r: Results): string {
  const c = settings.plan.concurrencies;
  const [c1, c16, cMax] = [c[0]!, c[1]!, c.at(-1)!];
  const cell = (m: Map<string, Map<number, Cell>>, key: string, conc: number) => m.get(key)?.get(conc);
  const p50 = (m: Map<string, Map<number, Cell>>, key: string, conc: number) => cell(m, key, conc)?.p50.median;
  const rps = (m: Map<string, Map<number, Cell>>, key: string, conc: number) => cell(m, key, conc)?.rps.median;
  const ms = (v: number | undefined, d = 2) => (v === undefined ? 'n/a' : `${num(v, d)} ms`);
  const perSec = (v: number | undefined) => (v === undefined ? 'n/a' : `${num(v, 0)}/s`);
  const x = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? 'n/a' : ratio(a, b));
  const plus = (a: number | undefined, b: number | undefined) => (a === undefined || b === undefined ? 'n/a' : `+${num(a - b, 2)} ms`);
  const kib = (f: Figure | undefined) => (f === undefined ? 'n/a' : bytes(f.median));
  const top = Math.max(...r.parked.levels);
  const round = (k: string) => r.rounds.get(k)?.median;
  const cpuUs = (k: string) => {
    const v = r.cpu?.perCall.get(k)?.median;
    return v === undefined ? 'n/a' : `${num(v, 0)} µs`;
  };
  const rows: string[][] = [
    [
      `CPU per \`echo\` call (gateway process), concurrency ${c16}, interleaved`,
      cpuUs('baseline'),
      cpuUs('gateway'),
      `baseline ${cpuUs('baseline')}`,
      r.cpu?.pairedRatio ? `${num(r.cpu.pairedRatio.median, 3)}× (median of per-round ratios)` : 'n/a',
      '≤ 1.03× baseline',
    ],
    [
      `Streamable HTTP upstream, \`echo\`, concurrency ${c1}, p50`,
      ms(p50(r.http, 'baseline', c1)),
      ms(p50(r.http, 'gateway', c1)),
      `direct ${ms(p50(r.http, 'direct', c1))}`,
      plus(p50(r.http, 'gateway', c1), p50(r.http, 'direct', c1)),
      '≤ direct + 0.4 ms',
    ],
    [
      `minimal relay (no MCP work), concurrency ${c1}, p50: the floor of any gateway here`,
      '—',
      ms(p50(r.http, 'relay', c1)),
      `direct ${ms(p50(r.http, 'direct', c1))}`,
      plus(p50(r.http, 'relay', c1), p50(r.http, 'direct', c1)),
      '—',
    ],
    [
      `Streamable HTTP upstream, concurrency ${c16}, requests/s`,
      perSec(rps(r.http, 'baseline', c16)),
      perSec(rps(r.http, 'gateway', c16)),
      `direct ${perSec(rps(r.http, 'direct', c16))}`,
      x(rps(r.http, 'gateway', c16), rps(r.http, 'direct', c16)),
      '≥ 0.5× direct',
    ],
    [
      `minimal relay (no MCP work), concurrency ${c16}, requests/s`,
      '—',
      perSec(rps(r.http, 'relay', c16)),
      `direct ${perSec(rps(r.http, 'direct', c16))}`,
      x(rps(r.http, 'relay', c16), rps(r.http, 'direct', c16)),
      '—',
    ],
    [
      'one `input_required` round, default config',
      ms(round('baseline')),
      ms(round('gateway')),
      `direct ${ms(round('direct'))}`,
      x(round('gateway'), round('direct')),
      '≤ 1.5× direct',
    ],
    [
      `heap per parked call (Streamable HTTP upstream, ${top} parked)`,
      kib(r.parkedBaseline?.heapPerCall.get(top)),
      kib(r.parked.heapPerCall.get(top)),
      '—',
      '—',
      '≤ 24 KiB',
    ],
    [
      `${r.tasks.count} tasks created`,
      ms(r.tasksBaseline?.createMs.median, 0),
      ms(r.tasks.createMs.median, 0),
      `${r.tasks.count} \`echo\` calls ${ms(r.tasks.echoMs.median, 0)}`,
      x(r.tasks.createMs.median, r.tasks.echoMs.median),
      r.tasks.count === 1000 ? '≤ 500 ms' : '(full run: 1,000 tasks, ≤ 500 ms)',
    ],
    [
      `stdio upstream, concurrency ${cMax}, requests/s`,
      perSec(rps(r.stdio, 'baseline', cMax)),
      perSec(rps(r.stdio, 'gateway', cMax)),
      `mcp-proxy ${perSec(rps(r.stdio, 'mcp-proxy', cMax))}`,
      x(rps(r.stdio, 'gateway', cMax), rps(r.stdio, 'mcp-proxy', cMax)),
      '≥ 1.3× mcp-proxy',
    ],
    [
      `legacy client through the gateway (2025-11-25 session), concurrency ${c1}, p50`,
      '—',
      ms(p50(r.http, 'legacy', c1)),
      `direct ${ms(p50(r.http, 'direct', c1))}`,
      plus(p50(r.http, 'legacy', c1), p50(r.http, 'direct', c1)),
      '—',
    ],
    [
      `legacy client through the gateway, concurrency ${c16}, requests/s`,
      '—',
      perSec(rps(r.http, 'legacy', c16)),
      `direct ${perSec(rps(r.http, 'direct', c16))}`,
      x(rps(r.http, 'legacy', c16), rps(r.http, 'direct', c16)),
      '—',
    ],
    [
      '`input_required` round, retry forwarded to the other replica',
      '—',
      ms(round('forwarded')),
      `same replica ${ms(round('one-replica'))}`,
      x(round('forwarded'), round('one-replica')),
      '—',
    ],
    [
      `tracing on (OTLP export), concurrency ${c1}, p50`,
      '—',
      ms(p50(r.http, 'traced', c1)),
      `tracing off ${ms(p50(r.http, 'gateway', c1))}`,
      plus(p50(r.http, 'traced', c1), p50(r.http, 'gateway', c1)),
      '—',
    ],
    [
      `tracing on (OTLP export), concurrency ${c16}, requests/s`,
      '—',
      perSec(rps(r.http, 'traced', c16)),
      `tracing off ${perSec(rps(r.http, 'gateway', c16))}`,
      x(rps(r.http, 'traced', c16), rps(r.http, 'gateway', c16)),
      '—',
    ],
  ];
  return table(
    ['figure', `baseline (${'commit' in baseline ? baseline.commit : baseline.reason})`, 'now', 'reference', 'now vs reference', 'target'],
    rows,
  );
}

function report(r: Results, loadStart: number[], loadEnd: number[]): string {
  const s = settings;
  const cpu = cpus();
  const date = new Date().toISOString();
  const c = s.plan.concurrencies;
  const lines: string[] = [];
  const p = (...x: string[]) => lines.push(...x);

  p(
    `# mrtr-gateway benchmark (${quick ? 'quick' : 'full'} run)`,
    '',
    `- Date: ${date}`,
    `- CPU: ${cpu[0]?.model ?? 'unknown'} × ${cpu.length} logical cores; memory ${bytes(totalmem())} (${bytes(freemem())} free at the end)`,
    `- Node ${process.version}, ${process.platform} ${release()}`,
    `- Load average (1/5/15 min) at start ${loadStart.map((v) => v.toFixed(2)).join(' / ')}, at end ${loadEnd.map((v) => v.toFixed(2)).join(' / ')}${loadStart[0]! > 1 ? ' (the machine was busy with other work when the run started: expect noisier figures)' : ''}`,
    `- Commit ${git()}; autocannon ${version('autocannon')}, mcp-proxy ${version('mcp-proxy')}, supergateway ${version('supergateway')}, @modelcontextprotocol/sdk ${version('@modelcontextprotocol/sdk')}`,
    `- Each figure: median of ${s.plan.runs} runs, (min–max) beside it. Load runs: every path primed for ${s.plan.primeSeconds} s at its highest concurrency, ${s.plan.warmSeconds ? `${s.plan.warmSeconds} s warm-up per path and concurrency, ` : ''}then ${s.plan.runs} runs of ${s.plan.runSeconds} s, taking turns across the paths (${num(s.plan.runs * s.plan.runSeconds, 1)} s measured per cell). Ratios are of medians from the same rounds.`,
    `- Total time: ${elapsed()}`,
    `- Baseline: ${'commit' in baseline ? `the gateway at commit ${baseline.commit}, run from its own tree in the same run (\`--baseline REF\` to choose another, \`--baseline none\` to skip it)` : baseline.reason}`,
    '',
    '## Summary',
    '',
    summary(r),
    '',
    '## 1. Pass-through, Streamable HTTP upstream',
    '',
    '`tools/call` of `echo` on the bench fixture (v1 SDK, stateful Streamable HTTP). The gateway may open 64 upstream sessions (one call in flight each).',
    '',
    loadTable(r.httpTargets, r.http, c, [
      [
        'mcp-proxy',
        '—',
        'n/a',
        'n/a',
        'cannot front an HTTP upstream: its CLI spawns a stdio server; its HTTP-upstream mode (`startStdioServer`) serves stdio',
      ],
      [
        'supergateway',
        '—',
        'n/a',
        'n/a',
        'cannot front an HTTP upstream over HTTP: `--streamableHttp URL` and `--sse URL` only output stdio',
      ],
    ]),
    '',
    ratioTable('gateway', 'gateway', r.httpTargets, r.http, c),
    '',
    ...(r.cpu
      ? [
          `CPU of the gateway process per \`echo\` call, with the baseline, interleaved (bench/sections/cpu.ts): ${settings.cpu.rounds} rounds of ${settings.cpu.calls} calls at concurrency ${c[1]} each, the two gateways taking turns.`,
          '',
          cpuTable(r.cpuSides, r.cpu),
          '',
        ]
      : []),
    `Gateway process at the end of this section, after a full GC: RSS ${bytes(r.gatewayMemory.http.rss)}, heap used ${bytes(r.gatewayMemory.http.heapUsed)}.`,
    '',
    '## 2. Pass-through, stdio upstream',
    '',
    `The same fixture over stdio. The gateway keeps one child per upstream session (\`maxSessions\` ${STDIO_SESSIONS}, one call per session at a time); mcp-proxy multiplexes every client onto one child; supergateway gives each 2025-11-25 session a child of its own, and each 2026-07-28 request a new child.`,
    '',
    loadTable(r.stdioTargets, r.stdio, c, [
      quick
        ? [
            'supergateway (2026-07-28, one child per request)',
            c.join(', '),
            'not run',
            'not run',
            'spawns a stdio child per request (close to a second each): measured in a full run only',
          ]
        : [
            'supergateway (2026-07-28, one child per request)',
            c.filter((x) => x !== 1).join(', '),
            'not run',
            'not run',
            `spawns a stdio child per request; at concurrency 1 each run is ${s.slowAmount} call${s.slowAmount === 1 ? '' : 's'} rather than ${s.plan.runSeconds} s`,
          ],
      ['direct', '—', 'n/a', 'n/a', 'a stdio server has no HTTP endpoint to load'],
    ]),
    '',
    ratioTable('gateway', 'gateway', r.stdioTargets, r.stdio, c),
    '',
    `Gateway process at the end of this section, after a full GC: RSS ${bytes(r.gatewayMemory.stdio.rss)}, heap used ${bytes(r.gatewayMemory.stdio.heapUsed)}.`,
    '',
    '## 3. One input_required round',
    '',
    `Tool \`ask\` elicits a name once; the client answers at once. Sequential calls, ${s.mrtrCalls} per run; the figure is the median of the runs' medians. Streamable HTTP upstream.`,
    '',
    table(
      ['path', 'call with its round, ms'],
      [...r.rounds].map(([k, f]) => [r.roundLabels.get(k) ?? k, fmt(f)]),
    ),
    '',
    table(
      ['ratio', 'value'],
      [
        ['gateway (15 ms window) / direct', ratio(r.rounds.get('gateway')!.median, r.rounds.get('direct')!.median)],
        ['gateway (window 0) / direct', ratio(r.rounds.get('gateway-nobatch')!.median, r.rounds.get('direct')!.median)],
        ...(r.rounds.has('baseline')
          ? [['baseline / direct', ratio(r.rounds.get('baseline')!.median, r.rounds.get('direct')!.median)]]
          : []),
        ...(r.rounds.has('forwarded')
          ? [
              [
                'retry forwarded to the other replica / same replica',
                ratio(r.rounds.get('forwarded')!.median, r.rounds.get('one-replica')!.median),
              ],
            ]
          : []),
      ],
    ),
    '',
    ...(r.replicasSkipped ? [`The two-replica paths were not run: ${r.replicasSkipped}.`, ''] : []),
    '## 4. Memory of parked calls',
    '',
    'Gateway process only (RSS and `heapUsed` after a full GC), calls of `ask` left in input_required (Streamable HTTP fixture); each holds a place on an upstream session shared by up to 16 calls, and its open POST stream (the baseline: a session of its own). A new gateway process per run.',
    '',
    table(
      ['figure', 'value'],
      [
        [
          `heap kept per completed call (${r.parked.completedCalls} echo calls beside the parked ones; should be ≈ 0)`,
          fmtBytes(r.parked.heapPerCompleted),
        ],
      ],
    ),
    '',
    // About ±1 KiB per call is noise (heapUsed after a GC moves by a few MiB); the leak this guards against kept 20 KiB.
    ...(r.parked.heapPerCompleted.median > 4096
      ? [
          `**Warning:** the gateway keeps ${bytes(r.parked.heapPerCompleted.median)} of heap per completed request: a leak (see bench/README.md, "Heap kept per request"). The parked-call and task figures below include it for the requests they make.`,
          '',
        ]
      : []),
    table(
      ['parked calls', 'RSS', 'heap used', 'RSS per parked call', 'heap per parked call'],
      [0, ...r.parked.levels].map((l) => [
        String(l),
        fmtBytes(r.parked.rss.get(l)!),
        fmtBytes(r.parked.heap.get(l)!),
        l === 0 ? '—' : fmtBytes(r.parked.rssPerCall.get(l)!),
        l === 0 ? '—' : fmtBytes(r.parked.heapPerCall.get(l)!),
      ]),
    ),
    '',
    ...(r.parkedBaseline
      ? [
          `The baseline gateway, same method (${r.parkedBaseline.levels[0]} parked calls, ${settings.baselineRuns === 1 ? 'one run' : `${settings.baselineRuns} runs`}):`,
          '',
          table(
            ['parked calls', 'RSS', 'heap used', 'RSS per parked call', 'heap per parked call'],
            r.parkedBaseline.levels.map((l) => [
              String(l),
              fmtBytes(r.parkedBaseline!.rss.get(l)!),
              fmtBytes(r.parkedBaseline!.heap.get(l)!),
              fmtBytes(r.parkedBaseline!.rssPerCall.get(l)!),
              fmtBytes(r.parkedBaseline!.heapPerCall.get(l)!),
            ]),
          ),
          '',
        ]
      : []),
    '## 5. Tasks',
    '',
    `${r.tasks.count} calls of \`sleep\` (${r.tasks.sleepMs} ms) with the tasks extension declared, \`tasks.taskAfterMs: 0\`, 32 connections; on warm upstream sessions. Statuses seen by the timed polls: ${Object.entries(
      r.tasks.statuses,
    )
      .map(([k, v]) => `${k} ${v}`)
      .join(', ')}.`,
    '',
    table(
      ['figure', 'value'],
      [
        [`create ${r.tasks.count} tasks, ms`, fmt(r.tasks.createMs, 0)],
        ['tasks created per second', fmt(r.tasks.createPerSec, 0)],
        [`${r.tasks.count} \`echo\` calls without a task (same gateway and concurrency), ms`, fmt(r.tasks.echoMs, 0)],
        [`poll all ${r.tasks.count} once (tasks/get), ms`, fmt(r.tasks.pollMs, 0)],
        ['tasks/get per second', fmt(r.tasks.pollPerSec, 0)],
        ['heap per running task', fmtBytes(r.tasks.heapPerRunning)],
        ['RSS per running task', fmtBytes(r.tasks.rssPerRunning)],
        ['heap per completed task record', fmtBytes(r.tasks.heapPerRecord)],
        ['RSS per completed task record', fmtBytes(r.tasks.rssPerRecord)],
        ...(r.tasksBaseline
          ? [
              [`baseline: create ${r.tasksBaseline.count} tasks, ms`, fmt(r.tasksBaseline.createMs, 0)],
              ['baseline: heap per running task', fmtBytes(r.tasksBaseline.heapPerRunning)],
            ]
          : []),
      ],
    ),
    '',
    '## 6. Start-up',
    '',
    'For each command: from spawning it with `--help` to its exit, and from spawning it with the default `gateway.config.json` (port 0) to its listening log line and to the first successful `tools/call` (server-everything `echo` over stdio, spawned by that call). The commands take turns, run by run.',
    '',
    startupTable(r.startup),
    '',
  );
  return lines.join('\n');
}

for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, () => {
    process.stderr.write(`\n${signal}: stopping the benchmark's processes\n`);
    void stopAll().finally(() => process.exit(130));
  });
}

const loadStart = loadavg();
let code = 0;
try {
  const results = await main();
  const md = report(results, loadStart, loadavg());
  const dir = join(ROOT, 'bench', 'results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, quick ? 'quick.md' : 'latest.md');
  writeFileSync(file, md);
  process.stdout.write(md + '\n');
  log(`written to ${file}`);
} catch (e) {
  code = 1;
  process.stderr.write(`\nBENCHMARK FAILED: ${(e as Error).stack ?? String(e)}\n`);
} finally {
  await stopAll();
}
process.exit(code);
