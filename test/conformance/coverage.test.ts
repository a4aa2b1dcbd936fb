/**
 * The suite runs every server scenario of the pinned conformance CLI that applies to the gateway:
 * each one tagged 2026-07-28, and the tasks extension's. Out of scope: the skills extension
 * (sep-2640-*) and the scenarios of older revisions only.
 */
import { describe, expect, it } from 'vitest';
import { listServerScenarios } from './run.js';
import { MRTR_SCENARIOS, SERVER_SCENARIOS, SPEC_VERSION, TASKS_SCENARIOS } from './scenarios.js';

describe('conformance scenario coverage', () => {
  it('the test files run exactly the applicable server scenarios the CLI lists', async () => {
    const listed = await listServerScenarios();
    expect(listed.length).toBeGreaterThan(0);
    const applicable = listed.filter((s) => s.tags.includes(SPEC_VERSION) || s.name.startsWith('tasks-')).map((s) => s.name);
    const run = [...MRTR_SCENARIOS, ...SERVER_SCENARIOS, ...TASKS_SCENARIOS];
    expect(new Set(run).size).toBe(run.length);
    expect([...run].sort()).toEqual([...applicable].sort());
  }, 60_000);
});
