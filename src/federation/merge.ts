/**
 * Answers merged from several federated upstreams: asking every member at once and keeping what
 * came back ({@link gatherMembers}: who may be left out, who fails the whole), the union of their
 * capabilities, the caching hints of a merged answer, and the federated `server/discover` result.
 */
import { ErrorCode, GatewayError, methodNotFound } from '../protocol/errors.js';
import { isObject } from '../protocol/envelope.js';
import { META_SERVER_INFO, SUPPORTED_VERSIONS, UPSTREAM_CAPABILITY_FOR } from '../protocol/wire.js';
import type { Logger } from '../observability/log.js';

/** The serverInfo of the federated endpoint's `server/discover`. */
const SERVER_INFO = { name: 'mrtr-gateway', title: 'mrtr-gateway federation', version: '0.1.0' };

/** True for a -32601: the upstream lacks the method's capability. */
export const isMethodNotFound = (e: unknown) => e instanceof GatewayError && e.code === ErrorCode.MethodNotFound;

/**
 * Runs `fn` for every member in `members` at once. A member whose upstream lacks the method's
 * capability (-32601) is left out. A member that fails otherwise is left out too (logged, and
 * `partial` is set), unless it is `required`: then the whole fails with its error.
 * @throws the error of a required member; the first error when every member failed; -32601 when
 *   every member lacks the capability.
 */
export async function gatherMembers<M extends { name: string; cfg: { required?: boolean } }, T>(
  log: Logger,
  what: string,
  members: readonly M[],
  fn: (m: M) => Promise<T>,
): Promise<{ answers: { member: M; value: T }[]; partial: boolean }> {
  const settled = await Promise.allSettled(members.map(fn));
  const answers: { member: M; value: T }[] = [];
  const failures: { member: M; error: unknown }[] = [];
  settled.forEach((s, i) => {
    const member = members[i]!;
    if (s.status === 'fulfilled') answers.push({ member, value: s.value });
    else if (!isMethodNotFound(s.reason)) failures.push({ member, error: s.reason });
  });
  const fatal = failures.find((f) => f.member.cfg.required || !(f.error instanceof GatewayError));
  if (fatal) throw fatal.error;
  if (answers.length === 0 && failures.length > 0) throw failures[0]!.error;
  if (answers.length === 0 && settled.length > 0) {
    const capability = UPSTREAM_CAPABILITY_FOR[what];
    throw methodNotFound(`Method not found: ${what} (no federated upstream offers ${capability ?? 'it'})`);
  }
  for (const f of failures)
    log.warn(
      { upstream: f.member.name, method: what, err: (f.error as Error).message },
      'federation: upstream left out of a merged answer',
    );
  return { answers, partial: failures.length > 0 };
}

/**
 * The union of two capability objects: keys of both; objects merged key by key, flags true when
 * either is (`listChanged`, `subscribe`), `extensions` merged likewise.
 */
export function unionCapabilities(a: Record<string, unknown>, b: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...a };
  for (const [k, v] of Object.entries(b)) {
    const mine = out[k];
    if (isObject(mine) && isObject(v)) out[k] = unionCapabilities(mine, v);
    else if (typeof mine === 'boolean' || typeof v === 'boolean') out[k] = mine === true || v === true;
    else if (mine === undefined) out[k] = v;
  }
  return out;
}

/** The caching hints of a merged answer: the smallest `ttlMs`, `public` only when every part is; none for a partial answer. */
export function mergedHints(
  parts: readonly Record<string, unknown>[],
  partial: boolean,
): { ttlMs: number; cacheScope: 'public' | 'private' } {
  if (partial || parts.length === 0) return { ttlMs: 0, cacheScope: 'private' };
  const ttlMs = Math.min(...parts.map((p) => (typeof p.ttlMs === 'number' && p.ttlMs >= 0 ? p.ttlMs : 0)));
  return { ttlMs, cacheScope: parts.every((p) => p.cacheScope === 'public') ? 'public' : 'private' };
}

/**
 * `server/discover` (MCP 2026-07-28 server/discover) of the whole fleet from the members'
 * answers: the union of their capabilities, and their instructions, one section per upstream
 * (headed by its name, saying its prefix); caching hints as {@link mergedHints} gives them.
 */
export function mergedDiscover(
  answers: readonly { member: { name: string; prefix: string }; value: Record<string, unknown> }[],
  partial: boolean,
): Record<string, unknown> {
  let capabilities: Record<string, unknown> = {};
  const sections: string[] = [];
  for (const { member, value } of answers) {
    if (isObject(value.capabilities)) capabilities = unionCapabilities(capabilities, value.capabilities);
    if (typeof value.instructions === 'string' && value.instructions.trim()) {
      const naming = member.prefix
        ? `Its tools and prompts are named here with the prefix \`${member.prefix}\` (\`${member.prefix}NAME\`).\n\n`
        : '';
      sections.push(`## ${member.name}\n\n${naming}${value.instructions.trim()}`);
    }
  }
  return {
    resultType: 'complete',
    supportedVersions: [...SUPPORTED_VERSIONS],
    capabilities,
    ...(sections.length ? { instructions: sections.join('\n\n') } : {}),
    ...mergedHints(
      answers.map((a) => a.value),
      partial,
    ),
    _meta: { [META_SERVER_INFO]: SERVER_INFO },
  };
}
