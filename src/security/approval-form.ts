/**
 * The gateway's own approval form (docs/approvals.md): what the user sees before a call of a tool
 * that needs approval reaches its upstream, and how the answer is read.
 *
 * The form is a form-mode `elicitation/create` whose message names the tool and the upstream and
 * lists the arguments, each as JSON: the value of an argument (or nested member) whose name says it
 * is a secret (src/security/secrets.ts) or names a credential header (Authorization, Cookie) is
 * shown as `[redacted]`, text shaped like a credential is redacted wherever it stands
 * (src/security/redact.ts), characters one cannot see (bidirectional overrides, zero-width
 * characters) are escaped, and a long value is cut. Its schema asks
 * nothing, or, when approvals may be remembered, one boolean `remember`.
 */
import { ElicitResultSchema } from '@modelcontextprotocol/core';
import { invalidParams } from '../protocol/errors.js';
import type { InputRequest } from '../protocol/wire.js';
import { REDACTED, redactText } from './redact.js';
import { secretName } from './secrets.js';

/** The `inputRequests` / `inputResponses` key of the approval form. */
export const APPROVAL_KEY = 'approval';

/** Longest shown value of one argument, in characters (JSON); a longer one is cut and says how much was left out. */
export const MAX_SHOWN_CHARS = 200;

/** Most arguments listed one by one; the rest are counted. */
export const MAX_SHOWN_ARGUMENTS = 20;

/** Header-like names whose value is a credential though the name does not say secret (case and separators aside). */
const CREDENTIAL_HEADER = /^(proxy)?(authorization|cookie)$|^setcookie$/;

/** Whether the value of a member named `name` is hidden in the form: a secret name, or a credential header's. */
function hidden(name: string): boolean {
  return secretName(name) || CREDENTIAL_HEADER.test(name.toLowerCase().replace(/[^a-z0-9]/g, ''));
}

/** `value` with secret-named members hidden and credential-shaped text redacted, at any depth. */
function masked(value: unknown, depth = 0): unknown {
  if (typeof value === 'string') return redactText(value, []);
  if (value === null || typeof value !== 'object') return value;
  if (depth > 32) return '…';
  if (Array.isArray(value)) return value.map((v) => masked(v, depth + 1));
  return Object.fromEntries(
    Object.entries(value as Record<string, unknown>).map(([k, v]) => [k, hidden(k) ? REDACTED : masked(v, depth + 1)]),
  );
}

/**
 * `json` (JSON text) with the characters a person cannot see written as `\\uXXXX` escapes: format
 * characters (bidirectional overrides and isolates, zero-width characters), the controls JSON
 * leaves as they are (U+007F … U+009F) and the line and paragraph separators; so a value cannot
 * show other text than it holds (a path that reads backwards, a hidden part).
 */
function visible(json: string): string {
  return json.replace(/[\p{Cf}\p{Cc}\u2028\u2029]/gu, (c) => `\\u${c.codePointAt(0)!.toString(16).padStart(4, '0')}`);
}

/** `value` as JSON, invisible characters escaped, cut after {@link MAX_SHOWN_CHARS} characters. */
function shown(value: unknown): string {
  const json = visible(JSON.stringify(value) ?? 'null');
  if (json.length <= MAX_SHOWN_CHARS) return json;
  return `${json.slice(0, MAX_SHOWN_CHARS)}… (${json.length - MAX_SHOWN_CHARS} more characters)`;
}

/** The argument lines of the form's message. */
function argumentLines(args: unknown): string[] {
  if (args === undefined || (typeof args === 'object' && args !== null && !Array.isArray(args) && Object.keys(args).length === 0))
    return ['(no arguments)'];
  if (typeof args !== 'object' || args === null || Array.isArray(args)) return [`  ${shown(masked(args))}`];
  const entries = Object.entries(masked(args) as Record<string, unknown>);
  const lines = entries.slice(0, MAX_SHOWN_ARGUMENTS).map(([k, v]) => `  ${visible(JSON.stringify(k))}: ${shown(v)}`);
  if (entries.length > MAX_SHOWN_ARGUMENTS) lines.push(`  … and ${entries.length - MAX_SHOWN_ARGUMENTS} more arguments`);
  return lines;
}

/** `ms` in words, in its largest whole unit ("10 minutes", "1 day", "1500 ms"). */
export function duration(ms: number): string {
  const units: [number, string][] = [
    [86_400_000, 'day'],
    [3_600_000, 'hour'],
    [60_000, 'minute'],
    [1000, 'second'],
  ];
  for (const [size, unit] of units) {
    if (ms >= size && ms % size === 0) {
      const n = ms / size;
      return `${n} ${unit}${n === 1 ? '' : 's'}`;
    }
  }
  return `${ms} ms`;
}

/**
 * The approval form of a call of `tool` at `upstream` with `args` (see the file header).
 * @param rememberMs how long an accepted approval may be remembered, in ms; above 0 the form has a
 *   boolean `remember` (default false).
 * @returns `{method: 'elicitation/create', params: {mode: 'form', message, requestedSchema}}`.
 */
export function approvalRequest(upstream: string, tool: string, args: unknown, rememberMs: number): InputRequest {
  const message = [
    `Allow the tool ${visible(JSON.stringify(tool))} of upstream ${JSON.stringify(upstream)} to run with these arguments?`,
    ...argumentLines(args),
    'Accept runs it; decline or cancel does not.',
  ].join('\n');
  const properties: Record<string, unknown> =
    rememberMs > 0
      ? {
          remember: {
            type: 'boolean',
            title: `Remember this approval for ${duration(rememberMs)}`,
            description: 'The same call (this tool, these arguments) will not be asked again meanwhile',
            default: false,
          },
        }
      : {};
  return { method: 'elicitation/create', params: { mode: 'form', message, requestedSchema: { type: 'object', properties } } };
}

/**
 * The user's answer to the approval form: the `ElicitResult` under `inputResponses["approval"]`
 * (or the result of a legacy client's `elicitation/create`). `remember` is true only for an
 * accept whose content has `remember: true`.
 * @throws GatewayError -32602 naming `inputResponses["approval"]` when `value` is not an ElicitResult.
 */
export function approvalAnswer(value: unknown): { action: 'accept' | 'decline' | 'cancel'; remember: boolean } {
  const r = ElicitResultSchema.safeParse(value);
  if (!r.success) {
    const i = r.error.issues[0]!;
    throw invalidParams(
      `inputResponses["${APPROVAL_KEY}"] is not a valid ElicitResult: ${i.path.length ? i.path.join('.') + ': ' : ''}${i.message}`,
      { key: APPROVAL_KEY },
    );
  }
  const { action, content } = r.data;
  return { action, remember: action === 'accept' && (content as Record<string, unknown> | undefined)?.remember === true };
}

/**
 * The tool result of a call the user declined or cancelled: `{content: [{type: 'text', text}],
 * isError: true}` (the caller adds `resultType: 'complete'` where its wire needs it). Nothing ran.
 */
export function approvalRefusal(action: 'decline' | 'cancel', upstream: string, tool: string): Record<string, unknown> {
  const what = action === 'decline' ? 'declined' : 'cancelled';
  const text = `The user ${what} the call of tool ${JSON.stringify(tool)} of upstream ${JSON.stringify(upstream)}: it did not run. Call it again to be asked again.`;
  return { content: [{ type: 'text', text }], isError: true };
}
