import { describe, expect, it } from 'vitest';
import { Census, DEPRECATED_FEATURES, featureOf, OTHER_TOOL, toolLabel } from '../../src/observability/census.js';

describe('deprecation census', () => {
  it('classifies server-initiated messages by feature', () => {
    expect(featureOf({ method: 'elicitation/create', params: { message: 'x', requestedSchema: {} } })).toBe('elicitation_form');
    expect(featureOf({ method: 'elicitation/create', params: { mode: 'form' } })).toBe('elicitation_form');
    expect(featureOf({ method: 'elicitation/create', params: { mode: 'url', url: 'https://example.com' } })).toBe('elicitation_url');
    expect(featureOf({ method: 'sampling/createMessage', params: { messages: [] } })).toBe('sampling');
    expect(featureOf({ method: 'sampling/createMessage', params: { messages: [], tools: [] } })).toBe('sampling_tools');
    expect(featureOf({ method: 'sampling/createMessage', params: { messages: [], toolChoice: { mode: 'auto' } } })).toBe('sampling_tools');
    expect(featureOf({ method: 'roots/list' })).toBe('roots_list');
    expect(featureOf({ method: 'notifications/message', params: { level: 'info', data: 'x' } })).toBe('logging');
    expect(featureOf({ method: 'ping' })).toBeUndefined();
    expect(featureOf({ method: 'notifications/progress', params: {} })).toBeUndefined();
  });

  it('labels tools/call by tool name and other calls by method', () => {
    expect(toolLabel('tools/call', 'ask_name')).toBe('ask_name');
    expect(toolLabel('prompts/get', 'greeting')).toBe('(prompts/get)');
    expect(toolLabel('resources/read', 'file:///x')).toBe('(resources/read)');
  });

  it('counts a call once per feature, keeps first and last seen, and reports every count', () => {
    let t = Date.parse('2026-08-01T10:00:00.000Z');
    const counted: string[] = [];
    const census = new Census({ now: () => t, onCount: (u, tool, f) => counted.push(`${u}/${tool}/${f}`) });
    const a = census.call('up', 'ask_name');
    a.noteMessage({ method: 'elicitation/create', params: {} });
    t += 1000;
    a.noteMessage({ method: 'elicitation/create', params: {} });
    a.noteMessage({ method: 'ping' });
    t += 1000;
    census.call('up', 'ask_name').note('elicitation_form');
    census.count('up', '(unknown)', 'logging');
    census.count('up', '(unknown)', 'logging');
    expect(census.snapshot()).toEqual([
      {
        upstream: 'up',
        tool: '(unknown)',
        feature: 'logging',
        calls: 2,
        firstSeen: '2026-08-01T10:00:02.000Z',
        lastSeen: '2026-08-01T10:00:02.000Z',
      },
      {
        upstream: 'up',
        tool: 'ask_name',
        feature: 'elicitation_form',
        calls: 2,
        firstSeen: '2026-08-01T10:00:00.000Z',
        lastSeen: '2026-08-01T10:00:02.000Z',
      },
    ]);
    expect(counted).toEqual([
      'up/ask_name/elicitation_form',
      'up/ask_name/elicitation_form',
      'up/(unknown)/logging',
      'up/(unknown)/logging',
    ]);
  });

  it('sorts features in report order', () => {
    const census = new Census();
    census.count('up', 't1', 'roots_list');
    census.count('up', 't1', 'elicitation_url');
    census.count('up', 't0', 'sampling');
    census.count('up', 't1', 'roots_list');
    expect(census.snapshot().map((e) => [e.tool, e.feature, e.calls])).toEqual([
      ['t0', 'sampling', 1],
      ['t1', 'elicitation_url', 1],
      ['t1', 'roots_list', 2],
    ]);
  });

  it('holds at most maxEntries rows, (other) rows included: one (other) row per configured upstream and feature is held back', () => {
    const counted: string[] = [];
    // 2 upstreams × 8 features held back: 4 rows left for tools.
    const census = new Census({ maxEntries: 20, upstreams: ['a', 'b'], onCount: (u, t, f) => counted.push(`${u}/${t}/${f}`) });
    for (const tool of ['t1', 't2', 't3', 't4', 't5', 't6']) census.count('a', tool, 'sampling');
    census.count('a', 't1', 'sampling');
    census.count('b', 'x1', 'roots_list');
    census.count('b', 'x2', 'logging');
    census.count('a', 't1', 'logging');
    // An upstream the census was not given has no row held back: nowhere to count it.
    census.count('zz', 'y', 'logging');
    expect(census.snapshot().map((e) => [e.upstream, e.tool, e.feature, e.calls])).toEqual([
      ['a', OTHER_TOOL, 'sampling', 2],
      ['a', OTHER_TOOL, 'logging', 1],
      ['a', 't1', 'sampling', 2],
      ['a', 't2', 'sampling', 1],
      ['a', 't3', 'sampling', 1],
      ['a', 't4', 'sampling', 1],
      ['b', OTHER_TOOL, 'roots_list', 1],
      ['b', OTHER_TOOL, 'logging', 1],
    ]);
    expect(counted.slice(-5)).toEqual([
      'a/t1/sampling',
      `b/${OTHER_TOOL}/roots_list`,
      `b/${OTHER_TOOL}/logging`,
      `a/${OTHER_TOOL}/logging`,
      `zz/${OTHER_TOOL}/logging`,
    ]);
    // Every configured upstream can still get every (other) row: 20 at most.
    for (const u of ['a', 'b']) for (const f of DEPRECATED_FEATURES) census.count(u, 'late', f);
    expect(census.snapshot()).toHaveLength(20);
    expect(census.snapshot().filter((e) => e.tool === OTHER_TOOL)).toHaveLength(16);
  });

  it('never exceeds maxEntries, and counts every use of a configured upstream in its (upstream, feature) rows', () => {
    const features = ['elicitation_form', 'sampling', 'roots_list', 'logging'] as const;
    const census = new Census({ maxEntries: 40, upstreams: ['u0', 'u1', 'u2', 'u3'] });
    const totals = new Map<string, number>();
    let seed = 7;
    const rand = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    for (let i = 0; i < 5000; i++) {
      const upstream = `u${rand(4)}`;
      const feature = features[rand(features.length)]!;
      census.count(upstream, `tool-${rand(300)}`, feature);
      totals.set(`${upstream}/${feature}`, (totals.get(`${upstream}/${feature}`) ?? 0) + 1);
      expect(census.snapshot().length).toBeLessThanOrEqual(40);
    }
    const got = new Map<string, number>();
    for (const e of census.snapshot()) got.set(`${e.upstream}/${e.feature}`, (got.get(`${e.upstream}/${e.feature}`) ?? 0) + e.calls);
    expect(got).toEqual(totals);
  });
});
