/**
 * Entries the gateway leaves out of the lists it relays to clients, and why: a tool whose name
 * breaks the MCP tool-name rules, a tool whose `x-mcp-header` annotations are invalid, or, on the
 * federated endpoint, an entry of a later upstream (in config order) that conflicts with an earlier
 * upstream's. Each drop is counted in `mrtr_list_entries_dropped_total`, the first drop of an entry
 * (per upstream, kind, name and reason) is logged at `warn`, and the latest entries are kept for
 * the admin page.
 */
import { LRUCache } from 'lru-cache';
import { quoted } from '../protocol/errors.js';
import type { Logger } from './log.js';

/** What was left out: a tool, a prompt, a resource (by URI) or a resource template. */
export type DroppedKind = 'tool' | 'prompt' | 'resource' | 'resourceTemplate';

/**
 * Why: `invalid-name` (a tool name outside the MCP tool-name rules), `invalid-x-mcp-header` (a
 * tool's `x-mcp-header` annotations break the Streamable HTTP rules), `conflict` (on the federated
 * endpoint, an earlier upstream serves the same name, URI or URI template).
 */
export type DropReason = 'invalid-name' | 'invalid-x-mcp-header' | 'conflict';

/** One entry left out, as reported. */
export interface DropReport {
  /** The upstream whose entry was left out. */
  upstream: string;
  kind: DroppedKind;
  /** The entry's name as the upstream gave it (tool or prompt name, URI, URI template). */
  name: string;
  reason: DropReason;
  /** A sentence for people: which rule it breaks, or which upstream serves it instead. */
  detail: string;
}

/** One left-out entry on the admin page: the report, how often it was left out, first and last time (ISO 8601). */
export interface DroppedEntry extends DropReport {
  count: number;
  firstSeen: string;
  lastSeen: string;
}

/** Most distinct entries kept for the admin page (the least recently dropped are forgotten). */
const MAX_ENTRIES = 1_000;

/** The record of entries left out of lists, since start. */
export class DroppedEntries {
  private readonly entries = new LRUCache<string, DroppedEntry>({ max: MAX_ENTRIES });

  /**
   * @param log where the first drop of each entry is logged (`warn`).
   * @param onCount counts every drop (the metric).
   */
  constructor(
    private readonly log: Logger,
    private readonly onCount: (upstream: string, kind: DroppedKind, reason: DropReason) => void = () => {},
  ) {}

  /** Records that `r` was left out of one list answer: counted every time, logged the first time. Names over 200 characters are cut. */
  note(r: DropReport): void {
    const name = quoted(r.name);
    const key = `${r.upstream}\u0000${r.kind}\u0000${r.reason}\u0000${name}`;
    const now = new Date().toISOString();
    const known = this.entries.get(key);
    this.onCount(r.upstream, r.kind, r.reason);
    if (known) {
      known.count++;
      known.lastSeen = now;
      known.detail = r.detail;
      return;
    }
    this.entries.set(key, { ...r, name, count: 1, firstSeen: now, lastSeen: now });
    this.log.warn({ upstream: r.upstream, kind: r.kind, name, reason: r.reason, detail: r.detail }, 'list entry left out');
  }

  /** The entries left out since start (at most 1,000, the most recent first). */
  snapshot(): DroppedEntry[] {
    return [...this.entries.values()]
      .map((e) => ({ ...e }))
      .sort((a, b) => (a.lastSeen < b.lastSeen ? 1 : a.lastSeen > b.lastSeen ? -1 : 0));
  }
}
