/**
 * The official tasks-extension conformance scenarios (tasks-*) against the gateway in front of the
 * legacy conformance fixture, whose fixture tools are plain legacy tools: the gateway makes the
 * tasks (per-tool taskAfterMs / required in the config below).
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { conformanceUpstream } from '../helpers/fixture.js';
import { expectScenarioPasses, warmSessions } from './run.js';
import { TASKS_SCENARIOS } from './scenarios.js';

describe('official conformance scenarios (tasks extension)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        conformance: conformanceUpstream({
          tasks: {
            taskAfterMs: 10_000,
            tools: {
              slow_compute: { taskAfterMs: 0 },
              failing_job: { taskAfterMs: 0, required: true },
              protocol_error_job: { taskAfterMs: 0 },
              confirm_delete: { taskAfterMs: 0 },
              multi_input: { taskAfterMs: 0 },
              test_tool_with_task: { taskAfterMs: 300 },
            },
          },
        }),
      },
    });
  });
  afterAll(() => gw?.close());
  // Open the sessions the scenarios use first, so that spawning a fixture process does not count
  // against the CLI's short per-check timeouts.
  beforeAll(() => warmSessions(gw.url('conformance')));

  // Extension scenarios run without --spec-version: the CLI counts them outside the revision timeline.
  it.each(TASKS_SCENARIOS)('%s passes', (scenario) => expectScenarioPasses(gw.url('conformance'), scenario), 120_000);
});
