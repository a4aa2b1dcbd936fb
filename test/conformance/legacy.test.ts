/**
 * The official conformance scenarios of the legacy revisions (2025-11-25, 2025-06-18, 2025-03-26),
 * run by the conformance CLI at each revision a scenario is tagged with, against the gateway in
 * front of the legacy (v1 SDK) stdio conformance fixture. The CLI's client opens legacy sessions
 * (initialize, Mcp-Session-Id), each relayed onto an upstream session of its own. A check that is
 * not SUCCESS fails, unless test/conformance/expected.json lists it with its status and the reason.
 *
 * server-sse-polling (SEP-1699) runs on a second gateway with legacySessions.closeStreamAfterMs: a
 * stdio upstream cannot close its client's stream, so the gateway closes it mid-call by itself, and
 * the scenario must see the result arrive after it resumed the stream with Last-Event-ID.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { conformanceUpstream } from '../helpers/fixture.js';
import { expectScenarioPasses } from './run.js';
import { LEGACY_REVISIONS, legacyScenarios, SSE_POLLING_SCENARIO } from './scenarios.js';

describe('official conformance scenarios of the legacy revisions, through legacy sessions', () => {
  let gw: TestGateway;
  let polling: TestGateway;
  beforeAll(async () => {
    [gw, polling] = await Promise.all([
      startGateway({ upstreams: { conformance: conformanceUpstream() } }),
      // test_reconnection answers after 1500 ms; its stream is closed at 500 ms.
      startGateway({ legacySessions: { closeStreamAfterMs: 500, retryMs: 200 }, upstreams: { conformance: conformanceUpstream() } }),
    ]);
  });
  afterAll(() => Promise.all([gw?.close(), polling?.close()]));

  describe.each(LEGACY_REVISIONS)('--spec-version %s', (revision) => {
    it.each(legacyScenarios(revision))(
      '%s passes',
      (scenario) =>
        scenario === SSE_POLLING_SCENARIO
          ? expectScenarioPasses(polling.url('conformance'), scenario, {
              specVersion: revision,
              // INFO for the resume check means the stream was never closed mid-call.
              mustSucceed: ['server-sse-priming-event', 'server-sse-retry-field', 'server-sse-disconnect-resume'],
            })
          : expectScenarioPasses(gw.url('conformance'), scenario, { specVersion: revision }),
      120_000,
    );
  });
});
