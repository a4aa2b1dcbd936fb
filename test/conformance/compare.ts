/**
 * Compares the checks of one conformance scenario run twice: directly against a server, and
 * through the gateway in front of that same server.
 */
import type { Check } from './run.js';

/** A check counts as passed when it is SUCCESS or INFO. */
export function passed(c: Check): boolean {
  return c.status === 'SUCCESS' || c.status === 'INFO';
}

/** Counts of one run: checks in all, passed (SUCCESS or INFO), and the rest by status. */
export interface Tally {
  total: number;
  passed: number;
  failed: number;
  warnings: number;
  skipped: number;
}

/** The counts of one run's checks. */
export function tally(checks: Check[]): Tally {
  return {
    total: checks.length,
    passed: checks.filter(passed).length,
    failed: checks.filter((c) => c.status === 'FAILURE').length,
    warnings: checks.filter((c) => c.status === 'WARNING').length,
    skipped: checks.filter((c) => c.status === 'SKIPPED').length,
  };
}

/**
 * The checks that pass directly but not through the gateway. A scenario may emit one check id
 * several times (one per probe), so checks are grouped by id and name, and a group regresses when
 * fewer of its checks pass through the gateway than directly. Each entry names the check and says
 * what the gateway run reported for it.
 */
export function regressions(direct: Check[], gateway: Check[]): string[] {
  const key = (c: Check) => `${c.id} (${c.name})`;
  const group = (checks: Check[]) => {
    const m = new Map<string, Check[]>();
    for (const c of checks) m.set(key(c), [...(m.get(key(c)) ?? []), c]);
    return m;
  };
  const through = group(gateway);
  const out: string[] = [];
  for (const [k, checks] of group(direct)) {
    const want = checks.filter(passed).length;
    const seen = through.get(k) ?? [];
    if (seen.filter(passed).length >= want) continue;
    const why = seen.filter((c) => !passed(c)).map((c) => `${c.status}: ${c.errorMessage ?? c.description}`);
    out.push(`${k}: ${want} passed directly, ${seen.filter(passed).length} through the gateway${why.length ? ` (${why.join('; ')})` : ' (not reported)'}`);
  }
  return out;
}
