/**
 * Pool keys of a session pool (src/upstream/pool.ts): a session is keyed by its principal, the
 * capabilities it declares upstream (fitted to the upstream's legacy revision) and the key of the
 * caller's credential (src/upstream/credential.ts: a digest, never a token), so that a session is
 * only reused by a caller it fits and never carries another caller's token.
 */
import type { ClientCapabilities as LegacyClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import { LEGACY_REVISIONS } from '../config/schema.js';
import { canonicalJson } from '../protocol/canonical.js';
import type { UpstreamCredential } from './credential.js';

/** A caller's pool key, the capabilities its session declares, the headers added upstream and the variables of its stdio child. */
export interface KeyAndHeaders {
  key: string;
  caps: LegacyClientCapabilities;
  headers: Record<string, string>;
  env: Record<string, string>;
}

/** The principal part of a pool key. */
export function principalOf(key: string): string {
  const i = key.indexOf('\u0000');
  return i < 0 ? key : key.slice(0, i);
}

/**
 * The client capabilities of `caps` that legacy revision `revision` defines (unknown revision: all
 * of them). 2024-11-05 and 2025-03-26 know `roots` and `sampling`; 2025-06-18 adds `elicitation`
 * (no modes); 2025-11-25 adds elicitation `form`/`url` and sampling `context`/`tools`. Some servers
 * reject fields their revision lacks, so a session declares only what its upstream knows.
 */
export function fitCapabilities(caps: LegacyClientCapabilities, revision: string | undefined): LegacyClientCapabilities {
  const rank = revision === undefined ? -1 : (LEGACY_REVISIONS as readonly string[]).indexOf(revision);
  if (rank < 0 || rank >= LEGACY_REVISIONS.indexOf('2025-11-25')) return caps;
  const out: LegacyClientCapabilities = { ...caps };
  const e = caps.elicitation as { form?: unknown; url?: unknown } | undefined;
  delete out.elicitation;
  // Before 2025-11-25 elicitation is form only: a client that answers URL mode only cannot use it.
  if (e && rank >= LEGACY_REVISIONS.indexOf('2025-06-18') && (e.form || !e.url)) out.elicitation = {};
  if (caps.sampling) out.sampling = {};
  return out;
}

/** The canonical JSON of frozen capability objects (the router shares one per client capabilities and upstream). */
const capsJson = new WeakMap<LegacyClientCapabilities, string>();

/**
 * The pool key of a principal and its mirrored capabilities (and the key of its credential, when
 * it has one): `PRINCIPAL\u0000CANONICAL-CAPS[\u0000CREDENTIAL-KEY]`.
 */
export function poolKey(principal: string, caps: LegacyClientCapabilities, credential?: UpstreamCredential): string {
  let json = capsJson.get(caps);
  if (json === undefined) {
    json = canonicalJson(caps);
    if (Object.isFrozen(caps)) capsJson.set(caps, json);
  }
  const base = `${principal}\u0000${json}`;
  return credential ? `${base}\u0000${credential.key}` : base;
}

/**
 * Pool key, the capabilities to declare (fitted to the upstream's legacy revision `revision`), the
 * extra upstream headers and the stdio child's extra variables of a caller with `credential`.
 */
export function keyAndHeaders(
  revision: string | undefined,
  principal: string,
  mirrored: LegacyClientCapabilities,
  credential?: UpstreamCredential,
): KeyAndHeaders {
  const caps = fitCapabilities(mirrored, revision);
  return { key: poolKey(principal, caps, credential), caps, headers: { ...credential?.headers }, env: { ...credential?.env } };
}
