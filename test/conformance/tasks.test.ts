/**
 * The official tasks-extension conformance scenarios (tasks-*) against the gateway in front of the
 * legacy conformance fixture, whose fixture tools are plain legacy tools: the gateway makes the
 * tasks (per-tool taskAfterMs / required in the config below).
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startGateway, type TestGateway } from '../helpers/gateway.js';
import { runScenario } from './run.js';

const expected = JSON.parse(readFileSync(new URL('./expected.json', import.meta.url), 'utf8')) as Record<string, Record<string, string>>;
const FIXTURE = new URL('../fixtures/conformance-server.ts', import.meta.url).pathname;

const SCENARIOS = [
  'tasks-lifecycle',
  'tasks-capability-negotiation',
  'tasks-wire-fields',
  'tasks-request-state-removal',
  'tasks-mrtr-input',
  'tasks-request-headers',
  'tasks-dispatch-and-envelope',
  'tasks-status-notifications',
  'tasks-required-task-error',
  'tasks-mrtr-composition',
];

describe('official conformance scenarios (tasks extension)', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startGateway({
      upstreams: {
        conformance: {
          transport: 'stdio',
          command: process.execPath,
          args: ['--import', 'tsx', FIXTURE],
          maxSessions: 32,
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
        },
      },
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
