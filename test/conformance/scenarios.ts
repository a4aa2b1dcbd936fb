/**
 * The server scenarios of the conformance CLI this suite runs, by test file. Together they are
 * every scenario `conformance list --server` tags 2026-07-28, plus the tasks extension's, plus,
 * at each legacy revision, every scenario tagged with it (coverage.test.ts checks that against
 * the CLI's own list).
 */

/** MRTR (input-required-result-*), stateless operation, caching hints, standard headers: mrtr.test.ts. */
export const MRTR_SCENARIOS = [
  // First, while every warm session is free: its subscription and streaming probes have short timeouts.
  'server-stateless',
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
  'caching',
  'http-header-validation',
] as const;

/** Tools, prompts, resources, completions, schemas, custom headers, transport: server.test.ts. */
export const SERVER_SCENARIOS = [
  'tools-list',
  'tools-call-simple-text',
  'tools-call-image',
  'tools-call-audio',
  'tools-call-embedded-resource',
  'tools-call-mixed-content',
  'tools-call-error',
  'tools-call-with-progress',
  'json-schema-2020-12',
  'http-custom-header-server-validation',
  'prompts-list',
  'prompts-get-simple',
  'prompts-get-with-args',
  'prompts-get-embedded-resource',
  'prompts-get-with-image',
  'completion-complete',
  'resources-list',
  'resources-read-text',
  'resources-read-binary',
  'resources-templates-read',
  'sep-2164-resource-not-found',
  'server-sse-multiple-streams',
  'dns-rebinding-protection',
] as const;

/** The tasks extension (SEP-2663): tasks.test.ts. Extension scenarios take no --spec-version. */
export const TASKS_SCENARIOS = [
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
] as const;

/** The revision the 2026-07-28 scenarios are run at (`--spec-version`). */
export const SPEC_VERSION = '2026-07-28';

/** The legacy revisions whose scenarios legacy.test.ts runs (`--spec-version`), newest first. */
export const LEGACY_REVISIONS = ['2025-11-25', '2025-06-18', '2025-03-26'] as const;

/** One of {@link LEGACY_REVISIONS}. */
export type LegacyRevision = (typeof LEGACY_REVISIONS)[number];

/**
 * Scenarios of the legacy revisions, run through legacy sessions (initialize, Mcp-Session-Id):
 * legacy.test.ts, each at every revision it is tagged with.
 */
const LEGACY_TAGGED: Record<string, readonly LegacyRevision[]> = {
  'server-initialize': ['2025-11-25', '2025-06-18'],
  'server-session-lifecycle': ['2025-11-25', '2025-06-18', '2025-03-26'],
  'logging-set-level': ['2025-11-25', '2025-06-18'],
  ping: ['2025-11-25', '2025-06-18'],
  'completion-complete': ['2025-11-25', '2025-06-18'],
  'tools-list': ['2025-11-25', '2025-06-18'],
  'tools-call-simple-text': ['2025-11-25', '2025-06-18'],
  'tools-call-image': ['2025-11-25', '2025-06-18'],
  'tools-call-audio': ['2025-11-25', '2025-06-18'],
  'tools-call-embedded-resource': ['2025-11-25', '2025-06-18'],
  'tools-call-mixed-content': ['2025-11-25', '2025-06-18'],
  'tools-call-with-logging': ['2025-11-25', '2025-06-18'],
  'tools-call-error': ['2025-11-25', '2025-06-18'],
  'tools-call-with-progress': ['2025-11-25', '2025-06-18'],
  'tools-call-sampling': ['2025-11-25', '2025-06-18'],
  'tools-call-elicitation': ['2025-11-25', '2025-06-18'],
  'json-schema-2020-12': ['2025-11-25'],
  'elicitation-sep1034-defaults': ['2025-11-25'],
  'elicitation-sep1330-enums': ['2025-11-25'],
  'server-sse-polling': ['2025-11-25'],
  'server-sse-multiple-streams': ['2025-11-25'],
  'resources-list': ['2025-11-25', '2025-06-18'],
  'resources-read-text': ['2025-11-25', '2025-06-18'],
  'resources-read-binary': ['2025-11-25', '2025-06-18'],
  'resources-templates-read': ['2025-11-25', '2025-06-18'],
  'resources-subscribe': ['2025-11-25', '2025-06-18'],
  'resources-unsubscribe': ['2025-11-25', '2025-06-18'],
  'prompts-list': ['2025-11-25', '2025-06-18'],
  'prompts-get-simple': ['2025-11-25', '2025-06-18'],
  'prompts-get-with-args': ['2025-11-25', '2025-06-18'],
  'prompts-get-embedded-resource': ['2025-11-25', '2025-06-18'],
  'prompts-get-with-image': ['2025-11-25', '2025-06-18'],
  'dns-rebinding-protection': ['2025-11-25'],
};

/** The scenarios legacy.test.ts runs at `revision`, in the order above. */
export function legacyScenarios(revision: LegacyRevision): string[] {
  return Object.entries(LEGACY_TAGGED)
    .filter(([, revisions]) => revisions.includes(revision))
    .map(([name]) => name);
}

/**
 * SSE polling (SEP-1699) needs a gateway that closes streams mid-call (legacySessions.closeStreamAfterMs), so
 * legacy.test.ts runs it on a gateway of its own.
 */
export const SSE_POLLING_SCENARIO = 'server-sse-polling';
