/**
 * Figure 4: memory of parked calls. A fresh gateway process per run (memory read over IPC after a
 * full GC) in front of the Streamable HTTP fixture; calls of the `ask` tool are left in
 * input_required (never retried), each holding its upstream session, until `levels` calls are
 * parked. Only the gateway process is measured.
 *
 * Then, with the calls still parked, each run makes `completedCalls` complete echo calls and reads
 * what the heap kept per completed call: it should be about zero.
 */
import { load } from '../lib/load.js';
import { ELICIT_CAPS, modern } from '../lib/mcp.js';
import { modernEcho, modernEchoCheck } from './passthrough.js';
import { GatewayProcess, startEchoHttp } from '../lib/procs.js';
import { figure, type Figure } from '../lib/stats.js';
import { benchLimits, sessions } from './config.js';
import { gatewayPath } from './mrtr.js';

export interface ParkedFigures {
  levels: number[];
  /** RSS and heapUsed at 0 and at each level. */
  rss: Map<number, Figure>;
  heap: Map<number, Figure>;
  /** Growth over the 0 level, per parked call. */
  rssPerCall: Map<number, Figure>;
  heapPerCall: Map<number, Figure>;
  /** Heap kept per completed (not parked) call, after a GC. */
  completedCalls: number;
  heapPerCompleted: Figure;
}

const parkedCheck = (b: string) =>
  b.includes('"resultType":"input_required"') && b.includes('"elicitation-1"') && b.includes('"requestState"') && !b.includes('"error"');

/**
 * @param opts.root another checkout to run the gateway from (the baseline); its runs skip the
 *   completed-calls figure.
 */
export async function measureParked(
  levels: number[],
  runs: number,
  completedCalls: number,
  log: (s: string) => void,
  opts: { root?: string; label?: string } = {},
): Promise<ParkedFigures> {
  const max = Math.max(...levels);
  const perCompleted: number[] = [];
  const fixture = await startEchoHttp();
  const samples = {
    rss: new Map<number, number[]>(),
    heap: new Map<number, number[]>(),
    rssPer: new Map<number, number[]>(),
    heapPer: new Map<number, number[]>(),
  };
  for (const l of [0, ...levels]) {
    samples.rss.set(l, []);
    samples.heap.set(l, []);
    samples.rssPer.set(l, []);
    samples.heapPer.set(l, []);
  }
  // One gateway process per run, all started at once (an idle one costs nothing to the others).
  const gateways = await Promise.all(
    Array.from({ length: runs }, (_, i) =>
      GatewayProcess.start(
        `${opts.label ?? 'gateway'} (parked calls, run ${i + 1})`,
        {
          limits: benchLimits,
          upstreams: { http: { transport: 'streamable-http', url: fixture.url, ...sessions(max + 16), maxParked: max + 16 } },
        },
        { root: opts.root },
      ),
    ),
  );
  for (let run = 1; run <= runs; run++) {
    const gw = gateways[run - 1]!;
    const url = gw.url('http');
    // Warm-up: complete rounds, one at a time, then 32 at once (the concurrency the calls are
    // parked with), so the code paths of both are loaded and compiled and the process's internal
    // queues have grown: the figure is what each parked call holds, not these one-time costs.
    const round = gatewayPath('gw', 'gateway', url);
    for (let i = 0; i < 5; i++) await round.once();
    for (let i = 0; i < 3; i++) await Promise.all(Array.from({ length: 32 }, () => round.once()));
    const base = await gw.memory();
    samples.rss.get(0)!.push(base.rss);
    samples.heap.get(0)!.push(base.heapUsed);
    let parked = 0;
    for (const level of levels) {
      const amount = level - parked;
      await load({
        label: `park ${amount} calls`,
        request: modern(url, 'tools/call', { name: 'ask', arguments: {} }, ELICIT_CAPS),
        connections: Math.min(32, amount),
        amount,
        check: parkedCheck,
      });
      parked = level;
      const stats = await gw.stats();
      if (stats.parked !== level) throw new Error(`expected ${level} parked calls in the gateway, it reports ${stats.parked}`);
      const m = await gw.memory();
      samples.rss.get(level)!.push(m.rss);
      samples.heap.get(level)!.push(m.heapUsed);
      samples.rssPer.get(level)!.push((m.rss - base.rss) / level);
      samples.heapPer.get(level)!.push((m.heapUsed - base.heapUsed) / level);
      log(
        `  ${opts.label ?? 'gateway'} run ${run}/${runs}  ${level} parked (${stats.pools.http?.total} upstream sessions): RSS ${(m.rss / 2 ** 20).toFixed(1)} MiB, heap ${(m.heapUsed / 2 ** 20).toFixed(1)} MiB; ` +
          `per call RSS ${((m.rss - base.rss) / level / 1024).toFixed(1)} KiB, heap ${((m.heapUsed - base.heapUsed) / level / 1024).toFixed(1)} KiB`,
      );
    }
    if (opts.root) continue;
    // Complete calls beside the parked ones: what does the heap keep of each?
    const echo = { request: modernEcho(url), check: modernEchoCheck(), connections: 8 };
    // As many calls again first: the first thousands of calls still grow the heap (compiled code, caches).
    await load({ label: 'echo warm-up', ...echo, amount: completedCalls });
    const beforeEcho = await gw.memory();
    await load({ label: `${completedCalls} complete echo calls`, ...echo, amount: completedCalls });
    const afterEcho = await gw.memory();
    const kept = (afterEcho.heapUsed - beforeEcho.heapUsed) / completedCalls;
    perCompleted.push(kept);
    log(`  run ${run}/${runs}  heap kept per completed call: ${(kept / 1024).toFixed(2)} KiB`);
  }
  // The gateways stay up (idle) until here, so one's shutdown does not overlap the next run.
  await Promise.all(gateways.map((g) => g.stop()));
  await fixture.stop();
  const fig = (m: Map<number, number[]>) => new Map([...m].filter(([, v]) => v.length).map(([k, v]) => [k, figure(v)]));
  return {
    levels,
    rss: fig(samples.rss),
    heap: fig(samples.heap),
    rssPerCall: fig(samples.rssPer),
    heapPerCall: fig(samples.heapPer),
    completedCalls,
    heapPerCompleted: figure(perCompleted.length ? perCompleted : [0]),
  };
}
