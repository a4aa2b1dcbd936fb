/**
 * docs/configuration.md's field tables are what `npm run schema` generates from the zod schema's
 * `.describe()` texts (scripts/config-docs.ts): a field missing from the docs, or described there
 * otherwise than in src/config/schema.ts, fails here. Run `npm run schema` after changing the schema.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BEGIN, END, configFieldTables, withTables } from '../../scripts/config-docs.js';
import { GatewayConfigSchema } from '../../src/config/schema.js';
import { ROOT } from '../helpers/processes.js';

const DOC = readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8');

describe('docs/configuration.md field reference', () => {
  it('holds the tables the schema generates (npm run schema)', () => {
    expect(DOC).toContain(BEGIN);
    expect(DOC).toContain(END);
    expect(DOC).toBe(withTables(DOC, configFieldTables()));
  });

  it('lists every top-level field of the schema', () => {
    const tables = configFieldTables();
    for (const key of Object.keys(GatewayConfigSchema.shape).filter((k) => k !== '$schema'))
      expect(tables, key).toMatch(new RegExp('\\| `' + key + '[.`\\[]'));
  });

  it('gives every leaf field a description', () => {
    const empty = configFieldTables()
      .split('\n')
      .filter((l) => l.startsWith('| `') && /\|\s*\|\s*$/.test(l));
    expect(empty).toEqual([]);
  });
});
