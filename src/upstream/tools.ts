/**
 * A small cache of one upstream's `tools/list`, reduced to what the gateway needs per tool: its
 * `x-mcp-header` annotations (MCP 2026-07-28 Streamable HTTP §"Custom Headers from Tool
 * Parameters"), so that a `tools/call` can be checked against its `Mcp-Param-*` headers without
 * listing the tools again.
 *
 * Entries are keyed by the view of the upstream a caller has (principal and mirrored client
 * capabilities). An entry is filled on a miss, or whenever a client lists the tools in one page,
 * and listed again when a call names a tool it does not have; every entry of the upstream is
 * dropped when any of its sessions sends `notifications/tools/list_changed`, and entries expire
 * after a while regardless.
 */
import { LRUCache } from 'lru-cache';
import { headerParams, type ParamHeader } from '../protocol/param-headers.js';
import type { UpstreamSession } from './session.js';

/**
 * What the gateway knows about one listed tool: its `x-mcp-header` arguments (or why they are
 * invalid), and whether its annotations say running it again is harmless (`readOnlyHint` or
 * `idempotentHint`), which `input.mode: "auto"` reads.
 */
export type ToolHeaders = ({ params: ParamHeader[] } | { invalid: string }) & { replayable: boolean };

/** A listed tool as the upstream sends it (only `name`, `inputSchema` and `annotations` are read). */
export interface ListedTool {
  name: string;
  inputSchema?: unknown;
  annotations?: { readOnlyHint?: unknown; idempotentHint?: unknown };
  [k: string]: unknown;
}

/** The annotations of every tool in one listing, by tool name. */
export type ToolIndex = ReadonlyMap<string, ToolHeaders>;

/** Builds the index of a complete listing. */
export function indexTools(tools: readonly ListedTool[]): ToolIndex {
  return new Map(
    tools.map((t) => [
      t.name,
      { ...headerParams(t.inputSchema), replayable: t.annotations?.readOnlyHint === true || t.annotations?.idempotentHint === true },
    ]),
  );
}

/** Per-upstream cache of tool annotations. */
export class ToolCatalog {
  private readonly entries: LRUCache<string, ToolIndex>;
  private readonly loading = new Map<string, Promise<ToolIndex>>();
  private readonly watched = new WeakSet<UpstreamSession>();
  /** Bumped on every invalidation, so that a listing started before it is not stored after it. */
  private generation = 0;
  private readonly invalidated: (() => void)[] = [];

  /**
   * @param max most views kept.
   * @param ttlMs how long an entry is trusted without a list change, in ms.
   */
  constructor(max = 256, ttlMs = 10 * 60_000) {
    this.entries = new LRUCache({ max, ttl: ttlMs });
  }

  /**
   * The annotations of tool `name` in view `key`: from the cache, or from `list` (a complete
   * `tools/list` of the upstream, all pages) on a miss. Concurrent misses of one view share one
   * listing. A cached listing without the tool may be stale (a tool added without
   * `notifications/tools/list_changed`): the view is then listed once more before the tool is
   * taken as absent.
   * @returns undefined when a fresh listing has no tool of that name.
   * @throws whatever `list` throws.
   */
  async lookup(key: string, name: string, list: () => Promise<ListedTool[]>): Promise<ToolHeaders | undefined> {
    const cached = this.entries.get(key);
    const found = cached?.get(name);
    if (found) return found;
    if (cached) this.entries.delete(key);
    return (await this.load(key, list)).get(name);
  }

  /** The annotations of tool `name` in view `key` when the cache has them (no listing), else undefined. */
  cached(key: string, name: string): ToolHeaders | undefined {
    return this.entries.get(key)?.get(name);
  }

  /** The listing of view `key` from `list`, shared by concurrent callers, stored unless invalidated meanwhile. */
  private load(key: string, list: () => Promise<ListedTool[]>): Promise<ToolIndex> {
    let pending = this.loading.get(key);
    if (!pending) {
      const generation = this.generation;
      const loaded: Promise<ToolIndex> = list()
        .then((tools) => {
          const built = indexTools(tools);
          if (generation === this.generation) this.entries.set(key, built);
          return built;
        })
        .finally(() => {
          if (this.loading.get(key) === loaded) this.loading.delete(key);
        });
      this.loading.set(key, (pending = loaded));
    }
    return pending;
  }

  /** Stores a complete listing for view `key` (a `tools/list` a client made, in one page). */
  store(key: string, index: ToolIndex): void {
    this.entries.set(key, index);
  }

  /** Forgets every view: the upstream's tools changed. */
  invalidate(): void {
    this.generation++;
    this.entries.clear();
    this.loading.clear();
    for (const l of this.invalidated) l();
  }

  /** Calls `listener` on every {@link invalidate} (the upstream's tools changed). */
  onInvalidate(listener: () => void): void {
    this.invalidated.push(listener);
  }

  /** Invalidates the cache whenever `session` reports `notifications/tools/list_changed` (once per session). */
  watch(session: UpstreamSession): void {
    if (this.watched.has(session)) return;
    this.watched.add(session);
    session.onNotification((n) => {
      if (n.method === 'notifications/tools/list_changed') this.invalidate();
    });
  }
}
