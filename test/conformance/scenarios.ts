/**
 * The server scenarios of the conformance CLI this suite runs, by test file. Together they are
 * every scenario `conformance list --server` tags 2026-07-28, plus the tasks extension's
 * (coverage.test.ts checks that against the CLI's own list).
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
