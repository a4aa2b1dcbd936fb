/**
 * The official conformance scenarios for MRTR (input-required-result-*), stateless operation,
 * caching hints and header validation, run by the conformance CLI against the gateway in front of
 * a legacy (v1 SDK) stdio fixture implementing the scenarios' tools with legacy server-initiated
 * requests. A check that is not SUCCESS fails, unless test/conformance/expected.json lists it with
 * the reason.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { runScenario } from './run.js';

const expected = JSON.parse(readFileSync(new URL('./expected.json', import.meta.url), 'utf8')) as Record<string, Record<string, string>>;
const FIXTURE = new URL('../fixtures/conformance-server.ts', import.meta.url).pathname;

const SCENARIOS = [
  'input-required-result-basic-elicitation',
  'input-required-result-basic-sampling',
  'input-required-result-basic-list-roots',
  'input-required-result-request-state',
  'input-required-result-multiple-input-requests',
  'input-required-result-multi-round',
  'input-required-result-missing-input-response',
  'input-required-result-non-tool-request',
  'input-required-result-result-type',
  'input-required-result-unsupported-methods',
  'input-required-result-tampered-state',
  'input-required-result-capability-check',
  'input-required-result-ignore-extra-params',
  'input-required-result-validate-input',
  'server-stateless',
  'caching',
  'http-header-validation',
];

describe('official conformance scenarios (MRTR, stateless, caching, headers)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      // The scenarios abandon many first rounds; each parked call holds a session until its state expires.
      requestState: { ttlMs: 60_000 },
      upstreams: { conformance: { transport: 'stdio', command: process.execPath, args: ['--import', 'tsx', FIXTURE], maxSessions: 32 } },
    });
  });
  afterAll(() => gw?.close());

  it.each(SCENARIOS)('%s passes', async (scenario) => {
    const { checks } = await runScenario(gw.url('conformance'), scenario);
    expect(checks.length).toBeGreaterThan(0);
    const allowed = expected[scenario] ?? {};
    const bad = checks.filter((c) => c.status !== 'SUCCESS' && c.status !== 'INFO' && !(c.id in allowed)).map((c) => `${c.status} ${c.id}: ${c.errorMessage ?? c.description}`);
    expect(bad).toEqual([]);
  }, 120_000);
});
