/**
 * Which upstreams the federated endpoint (`POST /mcp`) serves and the prefix each puts on its tool
 * and prompt names, as the configuration says. The schema checks the federation settings with it
 * (src/config/schema.ts) and the federation builds its naming from it (src/federation/naming.ts).
 */

/** One federated upstream: its name and the prefix of its tool and prompt names ("" for none). */
export interface Member {
  name: string;
  prefix: string;
}

/** What {@link federationMembers} reads of the configuration. */
export interface FederationSettings {
  upstreams: Record<string, unknown>;
  federation: { upstreams?: readonly string[]; prefix: 'name' | 'none'; prefixes: Record<string, string> };
}

/**
 * The federated upstreams in order (`federation.upstreams`, else every upstream in config order)
 * with their prefixes: `federation.prefixes.NAME` when set, else `NAME_` (`prefix: "name"`) or ""
 * (`prefix: "none"`). Names that are not configured upstreams are left out (the schema refuses them).
 */
export function federationMembers(cfg: FederationSettings): Member[] {
  const fed = cfg.federation;
  const names = [...new Set(fed.upstreams ?? Object.keys(cfg.upstreams))].filter((n) => Object.hasOwn(cfg.upstreams, n));
  return names.map((name) => ({ name, prefix: fed.prefixes[name] ?? (fed.prefix === 'name' ? `${name}_` : '') }));
}
