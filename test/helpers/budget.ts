/**
 * Time budgets of the test suite, scaled for slow hosts.
 *
 * `TEST_TIME_SCALE` (a positive number, default 1) multiplies every wait a test allows: vitest's
 * test and hook timeouts (vitest.config.ts), each test's own timeout written as `scaled(ms)`, and
 * the default waits of the helpers (`eventually`, `listeningPort`, `spawnListening`, …). On a
 * loaded laptop or a shared CI runner, `TEST_TIME_SCALE=3 npm test` gives every test three times
 * the time without changing what it asserts. Timeouts configured on the gateway under test are
 * not scaled: they are behaviour the tests check.
 */
const raw = Number(process.env.TEST_TIME_SCALE ?? '1');

/** The factor every test budget is multiplied by (≥ 1; a malformed value counts as 1). */
export const TIME_SCALE = Number.isFinite(raw) && raw >= 1 ? raw : 1;

/** `ms` milliseconds scaled by `TEST_TIME_SCALE`, for a test's timeout or a helper's wait. */
export function scaled(ms: number): number {
  return Math.round(ms * TIME_SCALE);
}
