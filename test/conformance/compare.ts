/**
 * Compares the checks of one conformance scenario run twice: directly against a server, and
 * through the gateway in front of that same server.
 */
import type { Check } from './run.js';

/** A check passed: it is SUCCESS (INFO is information, not a pass). */
export function passed(c: Check): boolean {
  return c.status === 'SUCCESS';
}

/** Counts of one run: checks in all, passed (SUCCESS), informational (INFO), and the rest by status. */
export interface Tally {
  total: number;
  passed: number;
  info: number;
  failed: number;
  warnings: number;
  skipped: number;
}

/** The counts of one run's checks. */
export function tally(checks: Check[]): Tally {
  return {
    total: checks.length,
    passed: checks.filter(passed).length,
    info: checks.filter((c) => c.status === 'INFO').length,
    failed: checks.filter((c) => c.status === 'FAILURE').length,
    warnings: checks.filter((c) => c.status === 'WARNING').length,
    skipped: checks.filter((c) => c.status === 'SKIPPED').length,
  };
}

/**
 * The checks that do worse through the gateway than directly. A scenario may emit one check id
 * several times (one per probe), so checks are grouped by id and name, and a group regresses when
 * fewer of its checks are SUCCESS through the gateway than directly, or fewer are SUCCESS or INFO
 * (an INFO directly may be INFO through the gateway too; a SUCCESS directly must stay SUCCESS).
 * Each entry names the check and says what the gateway run reported for it.
 */
export function regressions(direct: Check[], gateway: Check[]): string[] {
  const key = (c: Check) => `${c.id} (${c.name})`;
  const group = (checks: Check[]) => {
    const m = new Map<string, Check[]>();
    for (const c of checks) m.set(key(c), [...(m.get(key(c)) ?? []), c]);
    return m;
  };
  const atLeastInfo = (c: Check) => c.status === 'SUCCESS' || c.status === 'INFO';
  const through = group(gateway);
  const out: string[] = [];
  for (const [k, checks] of group(direct)) {
    const seen = through.get(k) ?? [];
    const worse = [passed, atLeastInfo].find((ok) => seen.filter(ok).length < checks.filter(ok).length);
    if (!worse) continue;
    const why = seen.filter((c) => !worse(c)).map((c) => `${c.status}: ${c.errorMessage ?? c.description}`);
    const label = worse === passed ? 'SUCCESS' : 'SUCCESS or INFO';
    out.push(
      `${k}: ${checks.filter(worse).length} ${label} directly, ${seen.filter(worse).length} through the gateway${why.length ? ` (${why.join('; ')})` : ' (not reported)'}`,
    );
  }
  return out;
}
