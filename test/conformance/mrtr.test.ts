/**
 * The official conformance scenarios for MRTR (input-required-result-*), stateless operation,
 * caching hints and header validation, run by the conformance CLI against the gateway in front of
 * a legacy (v1 SDK) stdio fixture implementing the scenarios' tools with legacy server-initiated
 * requests. A check that is not SUCCESS fails, unless test/conformance/expected.json lists it with
 * the reason.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { CONFORMANCE_FIXTURE as FIXTURE, expectScenarioPasses, warmSessions } from './run.js';

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
  // Open the sessions the scenarios use first, so that spawning a fixture process does not count
  // against the CLI's short per-check timeouts.
  beforeAll(() => warmSessions(gw.url('conformance')));

  it.each(SCENARIOS)('%s passes', (scenario) => expectScenarioPasses(gw.url('conformance'), scenario), 120_000);
});
