/**
 * Names on the federated endpoint (`POST /mcp`): how a name the client sends leads back to the
 * upstream and the upstream's own name, and the federated list cursor. Which upstreams are
 * federated, with which prefixes, is the configuration's (`federationMembers` in
 * src/config/federation-members.ts).
 */
import { invalidParams } from '../protocol/errors.js';
import type { Member } from '../config/federation-members.js';

/** A name the client sent, read as one upstream's name: the member and the upstream's own name. */
export interface Candidate<M extends Member = Member> {
  member: M;
  /** The name without the member's prefix, as the upstream knows it. */
  name: string;
}

/** Prefixing and un-prefixing of tool and prompt names. */
export class Naming<M extends Member = Member> {
  /**
   * True when some prefix begins another (two empty prefixes included): then a name may read as
   * more than one upstream's, and only the upstreams' listings can tell which.
   */
  readonly overlapping: boolean;

  constructor(readonly members: readonly M[]) {
    this.overlapping = members.some((a, i) => members.some((b, j) => i !== j && b.prefix.startsWith(a.prefix)));
  }

  /** The name the client sees for tool or prompt `name` of `member`. */
  expose(member: M, name: string): string {
    return member.prefix + name;
  }

  /**
   * Every reading of `exposed` as a member's name: the members whose prefix begins it (leaving a
   * non-empty name), with the name the upstream knows. One candidate at most when no prefixes overlap.
   */
  candidates(exposed: string): Candidate<M>[] {
    return this.members
      .filter((m) => exposed.length > m.prefix.length && exposed.startsWith(m.prefix))
      .map((member) => ({ member, name: exposed.slice(member.prefix.length) }));
  }
}

const CURSOR_PREFIX = 'fed1.';

/**
 * The federated cursor of a list method: opaque to the client, it holds, for every member that has
 * more to list, that upstream's own cursor (base64url of `{"m": method, "p": {member: cursor}}`).
 */
export function encodeCursor(method: string, positions: Record<string, string>): string {
  return CURSOR_PREFIX + Buffer.from(JSON.stringify({ m: method, p: positions }), 'utf8').toString('base64url');
}

/**
 * The per-member positions a federated cursor holds.
 * @param members the federated upstreams' names; a cursor naming any other is refused.
 * @throws GatewayError -32602 "Invalid cursor" for anything {@link encodeCursor} did not make for
 *   this method (MCP 2026-07-28 server/utilities/pagination: an invalid cursor is -32602).
 */
export function decodeCursor(cursor: string, method: string, members: ReadonlySet<string>): Record<string, string> {
  const invalid = () => invalidParams(`Invalid cursor for ${method} on the federated endpoint; list again without a cursor`);
  if (!cursor.startsWith(CURSOR_PREFIX)) throw invalid();
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor.slice(CURSOR_PREFIX.length), 'base64url').toString('utf8'));
  } catch {
    throw invalid();
  }
  const c = parsed as { m?: unknown; p?: unknown };
  if (!c || typeof c !== 'object' || c.m !== method || !c.p || typeof c.p !== 'object' || Array.isArray(c.p)) throw invalid();
  const positions = c.p as Record<string, unknown>;
  const names = Object.keys(positions);
  if (names.length === 0 || names.some((n) => !members.has(n) || typeof positions[n] !== 'string' || positions[n] === '')) throw invalid();
  return positions as Record<string, string>;
}
