/**
 * Which federated upstream serves a resource URI. Resource URIs keep their form on the federated
 * endpoint (`ui://` ones get a prefix, apps.ts: held here as the client sees them), so the
 * federation remembers, per principal, which upstream listed which URI (`resources/list`) and
 * which URI template (`resources/templates/list`), and routes
 * `resources/read`, `completion/complete` with a `ref/resource`, and `resourceSubscriptions` of
 * `subscriptions/listen` by that memory. A URI an upstream listed wins over any template; among
 * templates, the most specific (most literal characters) wins; the federation breaks the remaining
 * ties by config order.
 */
import { LRUCache } from 'lru-cache';

/** Most principals whose listings are remembered. */
const MAX_VIEWS = 10_000;
/** Most URIs remembered per principal (the least recently used are forgotten). */
const MAX_URIS = 10_000;
/** Most URI templates remembered per principal. */
const MAX_TEMPLATES = 1_000;
/** How long a principal's listings are remembered without use, in ms. */
const VIEW_TTL_MS = 10 * 60_000;

/** How specific a URI template is: its literal characters (outside `{…}` expressions), counted. */
export function templateSpecificity(template: string): number {
  return template.replace(/\{[^}]*\}/g, '').length;
}

/**
 * The regular expression of an RFC 6570 URI template, matching every URI the template can expand
 * to (a superset: the values of a variable are not checked). Literal parts match themselves;
 * `{var}` matches a run without `/`, `?` or `#`; `{+var}` anything; `{#var}` an optional fragment;
 * `{/var}`, `{.var}`, `{;var}` any number of such segments; `{?var}` and `{&var}` an optional query.
 * @returns undefined for a template with an unclosed expression.
 */
export function templateToRegExp(template: string): RegExp | undefined {
  const literal = (s: string) => s.replace(/[\\^$.*+?()[\]{}|/]/g, '\\$&');
  let src = '^';
  let i = 0;
  while (i < template.length) {
    const open = template.indexOf('{', i);
    if (open < 0) {
      src += literal(template.slice(i));
      break;
    }
    src += literal(template.slice(i, open));
    const close = template.indexOf('}', open);
    if (close < 0) return undefined;
    switch (template[open + 1]) {
      case '+':
        src += '.*';
        break;
      case '#':
        src += '(?:#.*)?';
        break;
      case '/':
        src += '(?:/[^/?#]*)*';
        break;
      case '.':
        src += '(?:\\.[^/?#.]*)*';
        break;
      case ';':
        src += '(?:;[^/?#]*)*';
        break;
      case '?':
      case '&':
        src += '(?:[?&][^#]*)?';
        break;
      default:
        src += '[^/?#]*';
    }
    i = close + 1;
  }
  return new RegExp(`${src}$`, 's');
}

interface View {
  /** Listed URIs → the upstreams that listed them. */
  uris: LRUCache<string, Set<string>>;
  /** Listed URI templates → the upstreams that listed them, the template's matcher and its specificity. */
  templates: Map<string, { owners: Set<string>; re: RegExp | undefined; specificity: number }>;
  /** Upstreams whose resources/list answered for this principal (they offer resources). */
  offering: Set<string>;
  /** When every federated upstream's resources and templates were last listed completely for this principal (ms since the epoch). */
  completeAt?: number;
}

/** What a principal's listings say about one URI. */
export interface UriOwners {
  /**
   * The upstreams that can serve it: those that listed it, else those that listed it as a
   * template, else those whose most specific matching template matches it.
   */
  owners: string[];
  /** How the owners were found: `uri` (listed), `template` (listed as a template), `match` (a template matches), `none`. */
  by: 'uri' | 'template' | 'match' | 'none';
  /** Every upstream known to offer resources to this principal. */
  offering: string[];
}

/** Per-principal memory of which upstream listed which resource URI and URI template. */
export class UriIndex {
  private readonly views = new LRUCache<string, View>({ max: MAX_VIEWS, ttl: VIEW_TTL_MS, updateAgeOnGet: true });

  private view(principal: string): View {
    let v = this.views.get(principal);
    if (!v) {
      v = { uris: new LRUCache({ max: MAX_URIS }), templates: new Map(), offering: new Set() };
      this.views.set(principal, v);
    }
    return v;
  }

  /** Upstream `upstream` listed resource `uri` for `principal`. */
  recordUri(principal: string, upstream: string, uri: string): void {
    const v = this.view(principal);
    v.offering.add(upstream);
    const owners = v.uris.get(uri) ?? new Set<string>();
    owners.add(upstream);
    v.uris.set(uri, owners);
  }

  /** Upstream `upstream` listed URI template `template` for `principal`. */
  recordTemplate(principal: string, upstream: string, template: string): void {
    const v = this.view(principal);
    v.offering.add(upstream);
    let t = v.templates.get(template);
    if (!t) {
      if (v.templates.size >= MAX_TEMPLATES) return;
      t = { owners: new Set(), re: templateToRegExp(template), specificity: templateSpecificity(template) };
      v.templates.set(template, t);
    }
    t.owners.add(upstream);
  }

  /** Upstream `upstream` answered a resources listing for `principal` (it offers resources, maybe none listed). */
  recordOffering(principal: string, upstream: string): void {
    this.view(principal).offering.add(upstream);
  }

  /** Every federated upstream's resources and templates were just listed completely for `principal`. */
  markComplete(principal: string, at = Date.now()): void {
    this.view(principal).completeAt = at;
  }

  /** When `principal`'s listings were last complete (ms since the epoch), or undefined. */
  completeAt(principal: string): number | undefined {
    return this.views.get(principal)?.completeAt;
  }

  /** True when every federated upstream's resources were listed completely for `principal` within the last `ms` ms. */
  completeWithin(principal: string, ms: number): boolean {
    const at = this.completeAt(principal);
    return at !== undefined && Date.now() - at < ms;
  }

  /** The upstreams that listed resource `uri` itself for `principal` (none: empty). */
  listedBy(principal: string, uri: string): string[] {
    return [...(this.views.get(principal)?.uris.get(uri) ?? [])];
  }

  /** The upstreams that listed URI template `template` for `principal` (none: empty). */
  templateBy(principal: string, template: string): string[] {
    return [...(this.views.get(principal)?.templates.get(template)?.owners ?? [])];
  }

  /**
   * The upstreams that can serve `uri` for `principal`, by what they listed: the upstreams that
   * listed the URI itself; else those that listed it as a template (a `completion/complete`
   * `ref/resource` names the template); else those whose matching template is the most specific
   * ({@link templateSpecificity}), so a catch-all such as `{+uri}` never takes a URI from a
   * narrower template.
   */
  owners(principal: string, uri: string): UriOwners {
    const v = this.views.get(principal);
    if (!v) return { owners: [], by: 'none', offering: [] };
    const offering = [...v.offering];
    const listed = v.uris.get(uri);
    if (listed?.size) return { owners: [...listed], by: 'uri', offering };
    const asTemplate = v.templates.get(uri);
    if (asTemplate?.owners.size) return { owners: [...asTemplate.owners], by: 'template', offering };
    let best = -1;
    let matched = new Set<string>();
    for (const t of v.templates.values()) {
      if (!t.re?.test(uri) || t.specificity < best) continue;
      if (t.specificity > best) matched = new Set();
      best = t.specificity;
      for (const o of t.owners) matched.add(o);
    }
    return { owners: [...matched], by: matched.size ? 'match' : 'none', offering };
  }
}
