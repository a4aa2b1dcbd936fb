import { describe, expect, it } from 'vitest';
import { Census, featureOf, OTHER_TOOL, toolLabel } from '../../src/observability/census.js';

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
      { upstream: 'up', tool: '(unknown)', feature: 'logging', calls: 2, firstSeen: '2026-08-01T10:00:02.000Z', lastSeen: '2026-08-01T10:00:02.000Z' },
      { upstream: 'up', tool: 'ask_name', feature: 'elicitation_form', calls: 2, firstSeen: '2026-08-01T10:00:00.000Z', lastSeen: '2026-08-01T10:00:02.000Z' },
    ]);
    expect(counted).toEqual(['up/ask_name/elicitation_form', 'up/ask_name/elicitation_form', 'up/(unknown)/logging', 'up/(unknown)/logging']);
  });

  it('sorts features in report order and bounds its rows, counting further tools as (other)', () => {
    const census = new Census({ maxEntries: 2 });
    census.count('up', 't1', 'roots_list');
    census.count('up', 't1', 'elicitation_url');
    census.count('up', 't2', 'sampling');
    census.count('up', 't3', 'sampling');
    census.count('up', 't1', 'roots_list');
    expect(census.snapshot().map((e) => [e.tool, e.feature, e.calls])).toEqual([
      [OTHER_TOOL, 'sampling', 2],
      ['t1', 'elicitation_url', 1],
      ['t1', 'roots_list', 2],
    ]);
  });
});
