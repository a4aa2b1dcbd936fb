/**
 * CPU per `echo` call, this gateway against a baseline commit, interleaved: the two gateway
 * processes (the same config: one Streamable HTTP upstream, the bench fixture) take turns, round
 * after round, the order swapped every round, so that a busy moment of the machine weighs on both.
 * A round sends a fixed number of `tools/call` of `echo` at a fixed concurrency and reads the
 * gateway process's CPU time before and after it: the sum over its threads of
 * `/proc/PID/task/TID/schedstat` (ns on CPU; Linux). The figures are the median over rounds of CPU
 * µs per call, the ratio of the two medians, and the median of the per-round ratios (the steadier
 * one: a round's two runs see the same machine).
 *
 * Also runs alone (Linux): `node --import tsx bench/sections/cpu.ts --baseline REF [--rounds N]
 * [--calls N] [--concurrency N]` prints the table.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { load } from '../lib/load.js';
import type { RawRequest } from '../lib/mcp.js';
import { GatewayProcess, startEchoHttp, stopAll } from '../lib/procs.js';
import { prepareBaseline } from '../lib/baseline.js';
import { figure, fmt, ratio, table, type Figure } from '../lib/stats.js';
import { benchLimits, sessions } from './config.js';
import { modernEcho, modernEchoCheck } from './passthrough.js';

/** One side of the A/B: a gateway process and the request it is sent. */
export interface CpuSide {
  key: string;
  label: string;
  proc: GatewayProcess;
  request: RawRequest;
}

/**
 * CPU µs per call of each side (key → figure over rounds), and with two sides the ratio of the first
 * to the second taken round by round (each round's two runs are neighbours in time), over rounds.
 */
export interface CpuFigures {
  perCall: Map<string, Figure>;
  pairedRatio?: Figure;
}

/** CPU time of process `pid` so far, in ns (all its threads; Linux /proc). */
export function cpuNs(pid: number): number {
  let total = 0;
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      total += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return total;
}

/**
 * Runs `warmRounds` uncounted rounds, then `rounds` interleaved rounds of `calls` calls at `concurrency` on each side.
 * @returns CPU µs per call for each side's key.
 */
export async function measureCpu(
  sides: CpuSide[],
  opts: { rounds: number; warmRounds: number; calls: number; concurrency: number },
  log: (s: string) => void,
): Promise<CpuFigures> {
  const perCall = new Map<string, number[]>(sides.map((s) => [s.key, []]));
  const run = async (side: CpuSide): Promise<number> => {
    const before = cpuNs(side.proc.pid);
    const r = await load({
      label: side.label,
      request: side.request,
      connections: opts.concurrency,
      amount: opts.calls,
      check: modernEchoCheck(),
    });
    return (cpuNs(side.proc.pid) - before) / 1000 / r.count;
  };
  // Warm-up, not counted (JIT, connection pools, upstream sessions): the per-call CPU of a fresh
  // process falls for the first few thousand calls.
  for (let i = 0; i < opts.warmRounds; i++) for (const side of sides) await run(side);
  for (let round = 0; round < opts.rounds; round++) {
    const order = round % 2 === 0 ? sides : [...sides].reverse();
    for (const side of order) perCall.get(side.key)!.push(await run(side));
    log(`  round ${round + 1}/${opts.rounds}: ${order.map((s) => `${s.key} ${perCall.get(s.key)!.at(-1)!.toFixed(1)} µs`).join(', ')}`);
  }
  const [a, b] = sides.map((side) => perCall.get(side.key)!);
  return {
    perCall: new Map([...perCall].map(([k, v]) => [k, figure(v)])),
    ...(sides.length === 2 ? { pairedRatio: figure(a!.map((v, i) => v / b![i]!)) } : {}),
  };
}

/** The table of {@link measureCpu}'s figures; with two sides, the last rows compare the first with the second. */
export function cpuTable(sides: Pick<CpuSide, 'key' | 'label'>[], figures: CpuFigures): string {
  const rows = sides.map((s) => [s.label, fmt(figures.perCall.get(s.key)!, 1)]);
  if (figures.pairedRatio) {
    const [a, b] = [sides[0]!.key, sides[1]!.key];
    rows.push([`${a} / ${b}, ratio of the medians`, ratio(figures.perCall.get(a)!.median, figures.perCall.get(b)!.median)]);
    rows.push([`${a} / ${b}, median of the per-round ratios`, `${fmt(figures.pairedRatio, 3)}×`]);
  }
  return table(['gateway', 'CPU µs per call, median (min–max)'], rows);
}

if (process.argv[1] && import.meta.url === pathToFileURL(resolve(process.argv[1])).href) {
  const { values } = parseArgs({
    options: {
      baseline: { type: 'string', default: 'HEAD' },
      rounds: { type: 'string', default: '40' },
      calls: { type: 'string', default: '2000' },
      concurrency: { type: 'string', default: '16' },
    },
  });
  const log = (s: string) => process.stderr.write(`${s}\n`);
  const root = resolve(join(import.meta.dirname, '..', '..'));
  const base = prepareBaseline(root, values.baseline!);
  if (!('root' in base)) throw new Error(`baseline ${values.baseline}: ${base.reason}`);
  const fixture = await startEchoHttp();
  const upstreams = { http: { transport: 'streamable-http', url: fixture.url, ...sessions(64) } };
  const limits = benchLimits;
  const [now, before] = await Promise.all([
    GatewayProcess.start('now', { limits, upstreams }),
    GatewayProcess.start('baseline', { limits, upstreams }, { root: base.root }),
  ]);
  const sides: CpuSide[] = [
    { key: 'now', label: 'this tree', proc: now, request: modernEcho(now.url('http')) },
    { key: 'baseline', label: `baseline ${base.commit}`, proc: before, request: modernEcho(before.url('http')) },
  ];
  const figures = await measureCpu(
    sides,
    { rounds: Number(values.rounds), warmRounds: 3, calls: Number(values.calls), concurrency: Number(values.concurrency) },
    log,
  );
  console.log(cpuTable(sides, figures));
  await stopAll();
  process.exit(0);
}
