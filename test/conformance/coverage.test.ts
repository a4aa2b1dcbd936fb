/**
 * The suite runs every server scenario of the pinned conformance CLI that applies to the gateway:
 * each one tagged 2026-07-28, the tasks extension's, and, at each legacy revision (2025-11-25,
 * 2025-06-18, 2025-03-26), each one tagged with it. Out of scope: the skills extension
 * (sep-2640-*).
 */
import { describe, expect, it } from 'vitest';
import { listServerScenarios } from './run.js';
import { LEGACY_REVISIONS, legacyScenarios, MRTR_SCENARIOS, SERVER_SCENARIOS, SPEC_VERSION, TASKS_SCENARIOS } from './scenarios.js';
import { scaled } from '../helpers/budget.js';

describe('conformance scenario coverage', () => {
  it(
    'the test files run exactly the applicable server scenarios the CLI lists',
    async () => {
      const listed = await listServerScenarios();
      expect(listed.length).toBeGreaterThan(0);
      const applicable = listed.filter((s) => s.tags.includes(SPEC_VERSION) || s.name.startsWith('tasks-')).map((s) => s.name);
      const run = [...MRTR_SCENARIOS, ...SERVER_SCENARIOS, ...TASKS_SCENARIOS];
      expect(new Set(run).size).toBe(run.length);
      expect([...run].sort()).toEqual([...applicable].sort());

      // legacy.test.ts: every scenario tagged with a legacy revision, at that revision.
      for (const revision of LEGACY_REVISIONS) {
        const tagged = listed.filter((s) => s.tags.includes(revision)).map((s) => s.name);
        expect(tagged.length, revision).toBeGreaterThan(0);
        expect([...legacyScenarios(revision)].sort(), revision).toEqual([...tagged].sort());
      }
      // Nothing is left out but the skills extension.
      const covered = new Set([...run, ...LEGACY_REVISIONS.flatMap((r) => legacyScenarios(r))]);
      expect(listed.filter((s) => !covered.has(s.name)).map((s) => s.name)).toEqual(
        listed.filter((s) => s.name.startsWith('sep-2640-')).map((s) => s.name),
      );
    },
    scaled(60_000),
  );
});
