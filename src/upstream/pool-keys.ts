/**
 * Pool keys of a session pool (src/upstream/pool.ts): a session is keyed by its principal, the
 * capabilities it declares upstream (fitted to the upstream's legacy revision) and, with
 * `forwardAuthorization`, the caller's token, so that a session is only reused by a caller it fits.
 */
import { createHash } from 'node:crypto';
import type { ClientCapabilities as LegacyClientCapabilities } from '@modelcontextprotocol/sdk/types.js';
import { LEGACY_REVISIONS, type UpstreamConfig } from '../config/schema.js';
import { canonicalJson } from '../protocol/canonical.js';

/** A caller's pool key, the capabilities its session declares, and the headers added upstream. */
export interface KeyAndHeaders {
  key: string;
  caps: LegacyClientCapabilities;
  headers: Record<string, string>;
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
 * The pool key of a principal and its mirrored capabilities (and, with `forwardAuthorization`, the
 * SHA-256 of the caller's token): `PRINCIPAL\u0000CANONICAL-CAPS[\u0000TOKEN-HASH]`.
 */
export function poolKey(principal: string, caps: LegacyClientCapabilities, token?: string): string {
  let json = capsJson.get(caps);
  if (json === undefined) {
    json = canonicalJson(caps);
    if (Object.isFrozen(caps)) capsJson.set(caps, json);
  }
  const base = `${principal}\u0000${json}`;
  return token ? `${base}\u0000${createHash('sha256').update(token).digest('base64url')}` : base;
}

/**
 * Pool key, the capabilities to declare (fitted to the upstream's revision) and extra upstream
 * headers of a caller of upstream `cfg` (whose legacy revision is `revision`): with
 * `forwardAuthorization`, the client's token is part of the key and the headers.
 */
export function keyAndHeaders(
  cfg: UpstreamConfig,
  revision: string | undefined,
  principal: string,
  mirrored: LegacyClientCapabilities,
  token?: string,
): KeyAndHeaders {
  const forward = cfg.transport !== 'stdio' && cfg.forwardAuthorization && token ? token : undefined;
  const caps = fitCapabilities(mirrored, revision);
  return { key: poolKey(principal, caps, forward), caps, headers: forward ? { authorization: `Bearer ${forward}` } : {} };
}
