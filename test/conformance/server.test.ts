/**
 * The official 2026-07-28 conformance scenarios for tools, prompts, resources, completions, JSON
 * Schema 2020-12 keywords, Mcp-Param-* header validation, not-found resources, concurrent SSE
 * streams and DNS-rebinding protection, run by the conformance CLI at 2026-07-28 against the
 * gateway in front of the legacy (v1 SDK) stdio fixture. A check that is not SUCCESS fails, unless
 * test/conformance/expected.json lists it with its status and the reason.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { conformanceUpstream } from '../helpers/fixture.js';
import { expectScenarioPasses, warmSessions } from './run.js';
import { SERVER_SCENARIOS, SPEC_VERSION } from './scenarios.js';

describe('official conformance scenarios (tools, prompts, resources, headers)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({ upstreams: { conformance: conformanceUpstream() } });
  });
  afterAll(() => gw?.close());
  beforeAll(() => warmSessions(gw.url('conformance')));

  it.each(SERVER_SCENARIOS)(
    '%s passes',
    (scenario) => expectScenarioPasses(gw.url('conformance'), scenario, { specVersion: SPEC_VERSION }),
    120_000,
  );
});
