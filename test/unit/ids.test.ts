import { describe, expect, it } from 'vitest';
import { uniqueId } from '../../src/observability/ids.js';

describe('uniqueId', () => {
  it('gives UUID-shaped ids (version 4, RFC variant) that do not repeat', () => {
    const ids = Array.from({ length: 10_000 }, () => uniqueId());
    for (const id of ids.slice(0, 100)) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });
});
