/**
 * The deprecation census: which upstreams and tools still use what MCP 2026-07-28 deprecated or
 * removed, counted where the gateway sees it happen.
 *
 * Features (the `feature` label):
 *
 * | feature | what the upstream did |
 * | --- | --- |
 * | `elicitation_form` | sent `elicitation/create` in form mode (no `mode`, or `"form"`) |
 * | `elicitation_url` | sent `elicitation/create` with `mode: "url"` |
 * | `sampling` | sent `sampling/createMessage` without `tools`/`toolChoice` |
 * | `sampling_tools` | sent `sampling/createMessage` with `tools` or `toolChoice` |
 * | `roots_list` | sent `roots/list` |
 * | `logging` | sent `notifications/message` |
 * | `legacy_tasks` | ran a tool as a 2025-11-25 task (`tools/call` with `params.task`) |
 * | `url_elicitation_required` | answered a call with the 2025-11-25 error -32042 |
 *
 * A call counts once per feature, however often it used it ({@link Census.call}). What cannot be
 * tied to one call counts once per occurrence ({@link Census.count}), under the tool
 * {@link UNKNOWN_TOOL} (a legacy session with no single tool call in flight) or {@link NO_CALL}
 * (a pooled upstream session outside any call, for example a `roots/list` right after
 * `initialized`).
 *
 * The census is per process (per replica) and lives as long as it; it holds at most
 * `maxEntries` (upstream, tool, feature) rows, `(other)` rows included. One `(other)` row per
 * configured upstream and feature is held back from that bound, so when tool rows fill the rest,
 * further tools count under {@link OTHER_TOOL} of their upstream and feature (see {@link Census.count}).
 */

/** One feature 2026-07-28 deprecated or removed; see the module comment. */
export type DeprecatedFeature =
  | 'elicitation_form'
  | 'elicitation_url'
  | 'sampling'
  | 'sampling_tools'
  | 'roots_list'
  | 'logging'
  | 'legacy_tasks'
  | 'url_elicitation_required';

/** Every {@link DeprecatedFeature}, in the order reports list them. */
export const DEPRECATED_FEATURES: readonly DeprecatedFeature[] = [
  'elicitation_form',
  'elicitation_url',
  'sampling',
  'sampling_tools',
  'roots_list',
  'logging',
  'legacy_tasks',
  'url_elicitation_required',
];

/** Tool of a use in a legacy session while zero or several tool calls were in flight. */
export const UNKNOWN_TOOL = '(unknown)';
/** Tool of a use on a pooled upstream session outside any call. */
export const NO_CALL = '(none)';
/** Tool of uses beyond the census's bound on rows. */
export const OTHER_TOOL = '(other)';

/** Default bound on (upstream, tool, feature) rows. */
const MAX_ENTRIES = 10_000;

/** One row of the census. */
export interface CensusEntry {
  upstream: string;
  /** Tool name; `(prompts/get)` or `(resources/read)` for those calls; or one of the markers above. */
  tool: string;
  feature: DeprecatedFeature;
  /** Calls that used the feature (occurrences, for uses tied to no call). */
  calls: number;
  /** ISO 8601 time of the first and of the last use. */
  firstSeen: string;
  lastSeen: string;
}

/** A message from the upstream: a server-initiated request or notification. */
export interface UpstreamMessage {
  method?: string;
  params?: Record<string, unknown>;
}

/**
 * The deprecated feature a server-initiated request or notification uses, or undefined for
 * anything else (`ping`, progress, list changes, …).
 */
export function featureOf(m: UpstreamMessage): DeprecatedFeature | undefined {
  const p = m.params ?? {};
  switch (m.method) {
    case 'elicitation/create':
      return p.mode === 'url' ? 'elicitation_url' : 'elicitation_form';
    case 'sampling/createMessage':
      return p.tools !== undefined || p.toolChoice !== undefined ? 'sampling_tools' : 'sampling';
    case 'roots/list':
      return 'roots_list';
    case 'notifications/message':
      return 'logging';
    default:
      return undefined;
  }
}

/** The tool label of an upstream call: the tool's name for `tools/call`, else the method in parentheses. */
export function toolLabel(method: string, name: string | undefined): string {
  return method === 'tools/call' && name ? name : `(${method})`;
}

/** The uses of one upstream call: each feature counts once for the call. */
export interface CallTally {
  /** Notes that the call used `feature` (counted the first time only). */
  note(feature: DeprecatedFeature): void;
  /** Notes the feature `message` uses, if any ({@link featureOf}). */
  noteMessage(message: UpstreamMessage): void;
}

/** A {@link CallTally}: a plain object, since a parked call holds one for minutes. */
class Tally implements CallTally {
  /** Bit i set: feature i of {@link DEPRECATED_FEATURES} counted already. */
  private seen = 0;
  constructor(
    private readonly census: Census,
    private readonly upstream: string,
    private readonly tool: string,
  ) {}
  note(feature: DeprecatedFeature): void {
    const bit = 1 << DEPRECATED_FEATURES.indexOf(feature);
    if (this.seen & bit) return;
    this.seen |= bit;
    this.census.count(this.upstream, this.tool, feature);
  }
  noteMessage(m: UpstreamMessage): void {
    const f = featureOf(m);
    if (f) this.note(f);
  }
}

interface Row {
  calls: number;
  first: number;
  last: number;
}

/** Options of a {@link Census}. */
export interface CensusOptions {
  /** Called with each count added (the Prometheus counter). */
  onCount?: (upstream: string, tool: string, feature: DeprecatedFeature) => void;
  /** Most (upstream, tool, feature) rows kept, `(other)` rows included; further tools count under `(other)`. Default 10,000. */
  maxEntries?: number;
  /** The configured upstreams: for each, one `(other)` row per feature is held back within `maxEntries`. */
  upstreams?: readonly string[];
  /** Clock, epoch ms (tests). */
  now?: () => number;
}

/** Counts of deprecated features by upstream, tool and feature, with first and last use. */
export class Census {
  private readonly rows = new Map<string, Row>();
  private readonly maxEntries: number;
  private readonly now: () => number;
  private readonly configured: ReadonlySet<string>;
  /** `(other)` rows of configured upstreams not made yet: rows held back within `maxEntries`. */
  private heldBack: number;

  constructor(private readonly opts: CensusOptions = {}) {
    this.maxEntries = opts.maxEntries ?? MAX_ENTRIES;
    this.now = opts.now ?? Date.now;
    this.configured = new Set(opts.upstreams ?? []);
    this.heldBack = this.configured.size * DEPRECATED_FEATURES.length;
  }

  /**
   * Adds one use of `feature` by `tool` of `upstream` (no de-duplication). A tool without a row
   * gets one while rows plus the held-back `(other)` rows leave room; otherwise the use counts
   * under `(other)` of its upstream and feature, whose row a configured upstream always gets
   * (within `maxEntries`). Rows never exceed `maxEntries`: a use with no row to go to (an
   * unconfigured upstream, or a `maxEntries` below 8 per upstream) reaches `onCount` only.
   */
  count(upstream: string, tool: string, feature: DeprecatedFeature): void {
    let key = JSON.stringify([upstream, tool, feature]);
    const t = this.now();
    let row = this.rows.get(key);
    if (!row && tool !== OTHER_TOOL && this.rows.size + this.heldBack >= this.maxEntries) {
      tool = OTHER_TOOL;
      key = JSON.stringify([upstream, tool, feature]);
      row = this.rows.get(key);
    }
    if (row) {
      row.calls++;
      row.last = t;
    } else {
      const reserved = tool === OTHER_TOOL && this.configured.has(upstream);
      if (this.rows.size + (reserved ? 0 : this.heldBack) < this.maxEntries) {
        this.rows.set(key, { calls: 1, first: t, last: t });
        if (reserved) this.heldBack--;
      }
    }
    this.opts.onCount?.(upstream, tool, feature);
  }

  /** Counts what the message uses, if anything, as one occurrence ({@link count}). */
  countMessage(upstream: string, tool: string, message: UpstreamMessage): void {
    const f = featureOf(message);
    if (f) this.count(upstream, tool, f);
  }

  /** A tally for one upstream call of `tool` (see {@link toolLabel}): each feature counts once. */
  call(upstream: string, tool: string): CallTally {
    return new Tally(this, upstream, tool);
  }

  /** Every row, by upstream, tool and then feature in {@link DEPRECATED_FEATURES} order. */
  snapshot(): CensusEntry[] {
    const out: CensusEntry[] = [];
    for (const [key, row] of this.rows) {
      const [upstream, tool, feature] = JSON.parse(key) as [string, string, DeprecatedFeature];
      out.push({
        upstream,
        tool,
        feature,
        calls: row.calls,
        firstSeen: new Date(row.first).toISOString(),
        lastSeen: new Date(row.last).toISOString(),
      });
    }
    const rank = (f: DeprecatedFeature) => DEPRECATED_FEATURES.indexOf(f);
    return out.sort((a, b) => a.upstream.localeCompare(b.upstream) || a.tool.localeCompare(b.tool) || rank(a.feature) - rank(b.feature));
  }
}
