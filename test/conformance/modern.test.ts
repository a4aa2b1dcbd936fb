/**
 * The official conformance scenarios against a 2026-07-28 upstream: every scenario the CLI tags
 * 2026-07-28 (at `--spec-version 2026-07-28`) and the tasks extension's (without it: the CLI skips
 * extension scenarios given a version) run twice, DIRECTLY against the v2 SDK conformance fixture
 * (test/fixtures/modern-conformance-server.ts, Streamable HTTP) and THROUGH the gateway in front of
 * it (one upstream, default `protocol: "auto"`, so the gateway's 2026-07-28 pass-through serves
 * them). Every check that is SUCCESS directly must be SUCCESS through the gateway, and one that is
 * INFO directly at least INFO. Every 2026-07-28 scenario must pass in full directly too (every
 * check SUCCESS, apart from what test/conformance/expected.json tolerates: the fixture implements
 * what they name); the tasks-* scenarios mostly fail directly, as the v2 SDK has no
 * tasks-extension runtime, and only what passes directly is required of the gateway. The per-scenario counts are printed at the end.
 *
 * The fixture and the gateway start once. The 2026-07-28 scenarios run one CLI at a time (several
 * have sub-second windows, and the CLI's start is CPU-bound); then the tasks-* scenarios, which
 * mostly wait on the CLI's own timeouts, two at a time with both runs of each at once. A run that
 * misses what it must pass is run again, at most twice (a loaded machine can miss a sub-second
 * window; a real failure fails every attempt); the table counts the attempts.
 */
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { spawnListening, type SpawnedServer } from '../helpers/processes.js';
import { regressions, tally, type Tally } from './compare.js';
import { runScenario, untolerated, type Check } from './run.js';
import { MRTR_SCENARIOS, SERVER_SCENARIOS, SPEC_VERSION, TASKS_SCENARIOS } from './scenarios.js';
import { scaled } from '../helpers/budget.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/modern-conformance-server.ts', import.meta.url));

/** server-stateless first: its list-changed probes wait on streams for under a second. */
const VERSIONED = [...MRTR_SCENARIOS, ...SERVER_SCENARIOS] as string[];
const TASKS = [...TASKS_SCENARIOS] as string[];

type Pair = { direct: Check[]; gateway: Check[]; attempts: { direct: number; gateway: number } };

/** More runs of one side of a scenario when it misses what it must pass (see `until`). */
const RETRIES = 2;

/** Runs `run` over `items`, at most `n` at a time; each item's promise is in the returned map at once. */
function pool<T>(items: string[], n: number, run: (item: string) => Promise<T>): Map<string, Promise<T>> {
  const started = new Map<string, { resolve: (v: T) => void; reject: (e: unknown) => void; promise: Promise<T> }>();
  for (const item of items) {
    let resolve!: (v: T) => void;
    let reject!: (e: unknown) => void;
    const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
    promise.catch(() => {}); // reported by the test that awaits it
    started.set(item, { resolve, reject, promise });
  }
  const queue = [...items];
  const worker = async () => {
    for (let item = queue.shift(); item !== undefined; item = queue.shift()) {
      const slot = started.get(item)!;
      await run(item).then(slot.resolve, slot.reject);
    }
  };
  void Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
  return new Map([...started].map(([k, v]) => [k, v.promise]));
}

describe('official conformance scenarios, directly and through the gateway, against a v2 SDK upstream', () => {
  let fixture: SpawnedServer;
  let gw: TestGateway;
  let results: Map<string, Promise<Pair>>;
  const counts: { scenario: string; direct: Tally; gateway: Tally; attempts: Pair['attempts'] }[] = [];

  beforeAll(async () => {
    fixture = await spawnListening(['--import', 'tsx', FIXTURE, 'http']);
    const direct = `http://127.0.0.1:${fixture.port}/mcp`;
    gw = await startGateway({ upstreams: { modern: { transport: 'streamable-http', url: direct } } });
    const through = gw.url('modern');
    const run = async (url: string, scenario: string, specVersion?: string) => (await runScenario(url, scenario, { specVersion })).checks;
    // A run that misses what it must pass is tried again, up to RETRIES more times: some probes wait
    // under a second for an answer, which a loaded machine can miss; a real failure fails every
    // attempt. The printed table counts the attempts.
    const until = async (
      first: Check[],
      again: () => Promise<Check[]>,
      good: (checks: Check[]) => boolean,
    ): Promise<{ checks: Check[]; attempts: number }> => {
      let checks = first;
      let attempts = 1;
      for (; !good(checks) && attempts <= RETRIES; attempts++) checks = await again();
      return { checks, attempts };
    };
    const allPass = (scenario: string, specVersion: string) => (checks: Check[]) =>
      checks.length > 0 && untolerated(scenario, specVersion, checks).length === 0;
    const sequential = async (scenario: string, specVersion: string): Promise<Pair> => {
      const d = await until(
        await run(direct, scenario, specVersion),
        () => run(direct, scenario, specVersion),
        allPass(scenario, specVersion),
      );
      const g = await until(
        await run(through, scenario, specVersion),
        () => run(through, scenario, specVersion),
        (checks) => regressions(d.checks, checks).length === 0,
      );
      return { direct: d.checks, gateway: g.checks, attempts: { direct: d.attempts, gateway: g.attempts } };
    };
    const together = async (scenario: string): Promise<Pair> => {
      const [d, first] = await Promise.all([run(direct, scenario), run(through, scenario)]);
      const g = await until(
        first,
        () => run(through, scenario),
        (checks) => regressions(d, checks).length === 0,
      );
      return { direct: d, gateway: g.checks, attempts: { direct: 1, gateway: g.attempts } };
    };
    // Start the tasks-* runs once the 2026-07-28 ones are done, so the timed probes run on a quiet machine.
    const versioned = pool(VERSIONED, 1, (s) => sequential(s, SPEC_VERSION));
    const last = versioned.get(VERSIONED[VERSIONED.length - 1]!)!;
    let startTasks!: () => void;
    const tasksMayStart = new Promise<void>((r) => (startTasks = r));
    void last.finally(startTasks);
    const tasks = pool(TASKS, 2, async (s) => (await tasksMayStart, together(s)));
    results = new Map([...versioned, ...tasks]);
  }, scaled(30_000));

  afterAll(async () => {
    await gw?.close();
    await fixture?.stop();
    if (counts.length) {
      const fmt = (t: Tally) =>
        `${t.passed}/${t.total} passed${t.info ? `, ${t.info} info` : ''}${t.failed ? `, ${t.failed} failed` : ''}${t.warnings ? `, ${t.warnings} warnings` : ''}${t.skipped ? `, ${t.skipped} skipped` : ''}`;
      const width = Math.max(...counts.map((c) => c.scenario.length));
      const tries = (n: number) => (n > 1 ? ` (attempt ${n})` : '');
      const lines = counts.map(
        (c) =>
          `${c.scenario.padEnd(width)}  direct ${fmt(c.direct)}${tries(c.attempts.direct)}  |  gateway ${fmt(c.gateway)}${tries(c.attempts.gateway)}`,
      );
      const sum = (side: 'direct' | 'gateway', k: keyof Tally) => counts.reduce((n, c) => n + c[side][k], 0);
      lines.push(
        `${'all'.padEnd(width)}  direct ${sum('direct', 'passed')}/${sum('direct', 'total')} passed  |  gateway ${sum('gateway', 'passed')}/${sum('gateway', 'total')} passed`,
      );
      console.log(`2026-07-28 upstream, conformance checks directly and through the gateway:\n${lines.join('\n')}`);
    }
  });

  it('the gateway serves the fixture as a 2026-07-28 upstream', async () => {
    expect(await gw.gateway.upstreams.get('modern')!.era()).toBe('modern');
  });

  it.each(VERSIONED)(
    '%s: passes directly, and through the gateway',
    async (scenario) => {
      const { direct, gateway, attempts } = await results.get(scenario)!;
      counts.push({ scenario, direct: tally(direct), gateway: tally(gateway), attempts });
      expect(direct.length).toBeGreaterThan(0);
      const failedDirectly = untolerated(scenario, SPEC_VERSION, direct);
      expect(failedDirectly, `${scenario} directly:\n${failedDirectly.join('\n')}`).toEqual([]);
      const lost = regressions(direct, gateway);
      expect(lost, `${scenario} through the gateway:\n${lost.join('\n')}`).toEqual([]);
    },
    scaled(240_000),
  );

  it.each(TASKS)(
    '%s: what passes directly passes through the gateway',
    async (scenario) => {
      const { direct, gateway, attempts } = await results.get(scenario)!;
      counts.push({ scenario, direct: tally(direct), gateway: tally(gateway), attempts });
      expect(direct.length).toBeGreaterThan(0);
      const lost = regressions(direct, gateway);
      expect(lost, `${scenario} through the gateway:\n${lost.join('\n')}`).toEqual([]);
    },
    scaled(240_000),
  );
});

describe('comparing direct and gateway runs', () => {
  const check = (id: string, status: Check['status'], name = id): Check => ({ id, name, description: id, status });

  it('reports a check that passes directly but fails, or is missing, through the gateway', () => {
    const direct = [check('a', 'SUCCESS'), check('b', 'INFO'), check('c', 'SUCCESS'), check('d', 'FAILURE')];
    const gateway = [check('a', 'SUCCESS'), check('b', 'FAILURE'), check('d', 'FAILURE')];
    expect(regressions(direct, gateway)).toEqual([
      'b (b): 1 SUCCESS or INFO directly, 0 through the gateway (FAILURE: b)',
      'c (c): 1 SUCCESS directly, 0 through the gateway (not reported)',
    ]);
  });

  it('reports a SUCCESS directly that is only INFO through the gateway; an INFO may stay INFO', () => {
    expect(regressions([check('a', 'SUCCESS')], [check('a', 'INFO')])).toEqual([
      'a (a): 1 SUCCESS directly, 0 through the gateway (INFO: a)',
    ]);
    expect(regressions([check('b', 'INFO')], [check('b', 'INFO')])).toEqual([]);
    expect(regressions([check('b', 'INFO')], [check('b', 'SUCCESS')])).toEqual([]);
  });

  it('counts repeated probes of one check id', () => {
    const direct = [check('x', 'SUCCESS', 'X'), check('x', 'SUCCESS', 'X'), check('y', 'FAILURE')];
    expect(regressions(direct, [check('x', 'SUCCESS', 'X'), check('x', 'SUCCESS', 'X'), check('y', 'SUCCESS')])).toEqual([]);
    expect(regressions(direct, [check('x', 'SUCCESS', 'X'), check('x', 'WARNING', 'X')])).toHaveLength(1);
  });

  it('tallies a run by status', () => {
    expect(tally([check('a', 'SUCCESS'), check('b', 'INFO'), check('c', 'FAILURE'), check('d', 'WARNING'), check('e', 'SKIPPED')])).toEqual(
      { total: 5, passed: 1, info: 1, failed: 1, warnings: 1, skipped: 1 },
    );
  });
});
