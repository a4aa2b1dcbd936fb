/**
 * The official conformance scenarios for MRTR (input-required-result-*), stateless operation
 * (server-stateless, subscriptions/listen included), caching hints and header validation, run by
 * the conformance CLI at 2026-07-28 against the gateway in front of a legacy (v1 SDK) stdio
 * fixture implementing the scenarios' tools with legacy server-initiated requests. A check that is
 * not SUCCESS fails, unless test/conformance/expected.json lists it with its status and the reason.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { conformanceUpstream } from '../helpers/fixture.js';
import { expectScenarioPasses, warmSessions } from './run.js';
import { MRTR_SCENARIOS, SPEC_VERSION } from './scenarios.js';

describe('official conformance scenarios (MRTR, stateless, caching, headers)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      // The scenarios abandon many first rounds; each parked call holds a session until its state expires.
      requestState: { ttlMs: 60_000 },
      upstreams: { conformance: conformanceUpstream() },
    });
  });
  afterAll(() => gw?.close());
  // Open the sessions the scenarios use first, so that spawning a fixture process does not count
  // against the CLI's short per-check timeouts.
  beforeAll(() => warmSessions(gw.url('conformance')));

  it.each(MRTR_SCENARIOS)(
    '%s passes',
    (scenario) => expectScenarioPasses(gw.url('conformance'), scenario, { specVersion: SPEC_VERSION }),
    120_000,
  );
});
