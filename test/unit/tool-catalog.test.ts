/**
 * Unit tests of the per-upstream tools/list cache (src/upstream/tools.ts): one listing per view,
 * shared by concurrent misses, dropped on notifications/tools/list_changed.
 */
import { describe, expect, it } from 'vitest';
import { ToolCatalog, indexTools, type ListedTool } from '../../src/upstream/tools.js';
import type { UpstreamNotification, UpstreamSession } from '../../src/upstream/session.js';

const tools: ListedTool[] = [
  { name: 'plain', inputSchema: { type: 'object' } },
  { name: 'annotated', inputSchema: { type: 'object', properties: { r: { type: 'string', 'x-mcp-header': 'Region' } } } },
  { name: 'broken', inputSchema: { type: 'object', properties: { r: { type: 'number', 'x-mcp-header': 'Ratio' } } } },
];

/** A session stand-in that only delivers notifications. */
function fakeSession(): { session: UpstreamSession; emit(n: UpstreamNotification): void } {
  const listeners = new Set<(n: UpstreamNotification) => void>();
  const session = {
    onNotification: (l: (n: UpstreamNotification) => void) => (listeners.add(l), () => listeners.delete(l)),
  } as unknown as UpstreamSession;
  return { session, emit: (n) => listeners.forEach((l) => l(n)) };
}

describe('ToolCatalog', () => {
  it('lists once per view and answers later lookups from the cache', async () => {
    const catalog = new ToolCatalog();
    let listings = 0;
    const list = async () => (listings++, tools);
    expect(await catalog.lookup('view-a', 'annotated', list)).toEqual({
      params: [{ name: 'Region', path: ['r'], type: 'string' }],
      replayable: false,
    });
    expect(await catalog.lookup('view-a', 'plain', list)).toEqual({ params: [], replayable: false });
    expect(await catalog.lookup('view-a', 'broken', list)).toMatchObject({ invalid: expect.stringContaining('Ratio') });
    expect(listings).toBe(1);
    await catalog.lookup('view-b', 'plain', list);
    expect(listings).toBe(2);
  });

  it('a name missing from a cached listing is listed once more before it is taken as absent; the fresh listing is kept', async () => {
    const catalog = new ToolCatalog();
    let listings = 0;
    let current: ListedTool[] = [{ name: 'plain' }];
    const list = async () => (listings++, current);
    await catalog.lookup('v', 'plain', list);
    expect(listings).toBe(1);
    // Not in the cached listing: listed again once, still absent.
    expect(await catalog.lookup('v', 'unknown', list)).toBeUndefined();
    expect(listings).toBe(2);
    // A tool added upstream without notifications/tools/list_changed is found by that listing.
    current = [{ name: 'plain' }, { name: 'added' }];
    expect(await catalog.lookup('v', 'added', list)).toEqual({ params: [], replayable: false });
    expect(listings).toBe(3);
    expect(await catalog.lookup('v', 'added', list)).toEqual({ params: [], replayable: false });
    expect(listings).toBe(3);
  });

  it('concurrent misses of one view share one listing; a failed listing is not cached', async () => {
    const catalog = new ToolCatalog();
    let listings = 0;
    const slow = () => new Promise<ListedTool[]>((r) => (listings++, setTimeout(() => r(tools), 20)));
    await Promise.all([catalog.lookup('v', 'plain', slow), catalog.lookup('v', 'annotated', slow)]);
    expect(listings).toBe(1);
    const failing = new ToolCatalog();
    await expect(failing.lookup('v', 'plain', async () => Promise.reject(new Error('down')))).rejects.toThrow('down');
    expect(await failing.lookup('v', 'plain', async () => tools)).toEqual({ params: [], replayable: false });
  });

  it('a stored complete listing is used without listing', async () => {
    const catalog = new ToolCatalog();
    catalog.store('v', indexTools(tools));
    expect(await catalog.lookup('v', 'annotated', () => Promise.reject(new Error('not expected')))).toBeDefined();
  });

  it('notifications/tools/list_changed from a watched session drops every view', async () => {
    const catalog = new ToolCatalog();
    const { session, emit } = fakeSession();
    catalog.watch(session);
    catalog.watch(session);
    let listings = 0;
    const list = async () => (listings++, tools);
    await catalog.lookup('v', 'plain', list);
    emit({ method: 'notifications/prompts/list_changed' });
    await catalog.lookup('v', 'plain', list);
    expect(listings).toBe(1);
    emit({ method: 'notifications/tools/list_changed' });
    await catalog.lookup('v', 'plain', list);
    expect(listings).toBe(2);
  });
});
