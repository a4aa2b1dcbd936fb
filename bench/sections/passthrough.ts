/**
 * Figures 1 and 2: pass-through cost of `tools/call` on a trivial echo tool, at several
 * concurrencies, straight to the upstream and through the gateway and its peers.
 *
 * For each concurrency, every target gets a warm-up, then the runs go round-robin over the
 * targets (run 1 of each target, then run 2 of each, …), so a drift of the machine hits all
 * targets alike and the ratios compare figures of the same rounds.
 */
import { load } from '../lib/load.js';
import { ID, legacy, modern, PAYLOAD, type RawRequest } from '../lib/mcp.js';
import { figure, type Figure } from '../lib/stats.js';

/** One thing to put load on. */
export interface Target {
  key: string;
  label: string;
  request: RawRequest;
  check: (body: string) => boolean;
  /** Concurrencies this target runs at (default: all). */
  concurrencies?: number[];
  /** A fixed number of calls per run instead of the plan's duration (for very slow paths). */
  amount?: number;
}

/** Figures of one target at one concurrency. */
export interface Cell {
  p50: Figure;
  p99: Figure;
  rps: Figure;
}

export interface LoadPlan {
  concurrencies: number[];
  /** Priming of every target at its highest concurrency, before anything is measured. */
  primeSeconds: number;
  /** Warm-up per target and concurrency (0: none). */
  warmSeconds: number;
  runSeconds: number;
  runs: number;
}

/** A 2026-07-28 echo result (with `resultType` when `resultType` is true). */
export function modernEchoCheck(resultType = true): (body: string) => boolean {
  return (b) => b.includes(`"text":"${PAYLOAD}"`) && !b.includes('"error"') && (!resultType || b.includes('"resultType":"complete"'));
}

/** A legacy echo result. */
export const legacyEchoCheck = (b: string): boolean =>
  b.includes('"result"') && b.includes(`"text":"${PAYLOAD}"`) && !b.includes('"error"');

export const echoParams = { name: 'echo', arguments: { text: PAYLOAD } };

export function modernEcho(url: string): RawRequest {
  return modern(url, 'tools/call', echoParams);
}

export function legacyEcho(url: string, sessionId: string): RawRequest {
  return legacy(url, sessionId, 'tools/call', echoParams);
}

/** Calls each target once and checks the answer, so a broken setup fails before any measurement. */
export async function smokeTest(targets: Target[]): Promise<void> {
  for (const t of targets) {
    const body = t.request.body.replace(JSON.stringify(ID), '"smoke"');
    const res = await fetch(t.request.url, { method: 'POST', headers: t.request.headers, body });
    const text = await res.text();
    if (res.status !== 200 || !t.check(text)) throw new Error(`${t.label}: smoke test failed: HTTP ${res.status}: ${text.slice(0, 500)}`);
  }
}

/** Duration or amount of one run of `t`. */
function span(t: Target, seconds: number, warm = false): { seconds: number } | { amount: number } {
  return t.amount !== undefined ? { amount: warm ? 1 : t.amount } : { seconds };
}

/** Runs the plan; returns cells by target key and concurrency. */
export async function measure(targets: Target[], plan: LoadPlan, log: (s: string) => void): Promise<Map<string, Map<number, Cell>>> {
  await smokeTest(targets);
  const out = new Map<string, Map<number, Cell>>(targets.map((t) => [t.key, new Map()]));
  // Prime each target at its highest concurrency first, so the upstream sessions (and stdio
  // children) that concurrency needs are open before anything is measured: a fixed number of
  // calls (however long opening them takes), then a short timed run.
  for (const t of targets) {
    const c = Math.max(...(t.concurrencies ?? plan.concurrencies).filter((x) => plan.concurrencies.includes(x)));
    log(`  prime    c=${c}  ${t.label}`);
    await load({
      label: `${t.label} c=${c} prime`,
      request: t.request,
      connections: c,
      amount: t.amount !== undefined ? 1 : c * 4,
      check: t.check,
    });
    if (t.amount === undefined)
      await load({ label: `${t.label} c=${c} prime`, request: t.request, connections: c, seconds: plan.primeSeconds, check: t.check });
  }
  for (const c of plan.concurrencies) {
    const active = targets.filter((t) => !t.concurrencies || t.concurrencies.includes(c));
    for (const t of plan.warmSeconds > 0 ? active : []) {
      log(`  warm-up  c=${c}  ${t.label}`);
      await load({
        label: `${t.label} c=${c} warm-up`,
        request: t.request,
        connections: c,
        ...span(t, plan.warmSeconds, true),
        check: t.check,
      });
    }
    const samples = new Map<string, { p50: number[]; p99: number[]; rps: number[] }>(
      active.map((t) => [t.key, { p50: [], p99: [], rps: [] }]),
    );
    for (let run = 1; run <= plan.runs; run++) {
      for (const t of active) {
        const r = await load({
          label: `${t.label} c=${c} run ${run}`,
          request: t.request,
          connections: c,
          ...span(t, plan.runSeconds),
          check: t.check,
        });
        const s = samples.get(t.key)!;
        s.p50.push(r.p50);
        s.p99.push(r.p99);
        s.rps.push(r.rps);
        log(
          `  run ${run}/${plan.runs}  c=${c}  ${t.label}: p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms, ${r.rps.toFixed(0)} req/s (${r.count} calls)`,
        );
      }
    }
    for (const t of active) {
      const s = samples.get(t.key)!;
      out.get(t.key)!.set(c, { p50: figure(s.p50), p99: figure(s.p99), rps: figure(s.rps) });
    }
  }
  return out;
}
