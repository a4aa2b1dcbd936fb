/**
 * The layer rule of src/ (docs/architecture.md, "Layers"; the rule file is .dependency-cruiser.cjs):
 * an import never points from a lower layer to a higher one, and the cells of the era table never
 * import one another. dependency-cruiser reads every import of src/ (type-only ones included).
 */
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { cruise, type ICruiseResult, type IViolation } from 'dependency-cruiser';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/processes.js';

const require = createRequire(import.meta.url);
const RULES = require(join(ROOT, '.dependency-cruiser.cjs'));

/** The rule violations of the tree `src/` under `base`, as "rule: from → to" lines. */
async function violations(base: string): Promise<string[]> {
  const { output } = await cruise(
    ['src'],
    { baseDir: base, validate: true, ruleSet: RULES, tsPreCompilationDeps: true, doNotFollow: { path: 'node_modules' } },
    undefined,
    {
      tsConfig: join(ROOT, 'tsconfig.json'),
    },
  );
  const result = output as ICruiseResult;
  return result.summary.violations.map((v: IViolation) => `${v.rule.name}: ${v.from} → ${v.to}`);
}

describe('the layer rule', () => {
  it('holds for every import of src/', async () => {
    expect(await violations(ROOT)).toEqual([]);
  }, 60_000);

  it('fails on a back-pointing import and on one cell importing another (a fixture tree)', async () => {
    const found = await violations(join(ROOT, 'test/fixtures/layering'));
    expect(found).toContain('layer-protocol: src/protocol/wire.ts → src/http/routes.ts');
    expect(found).toContain('cells-apart: src/cells/bridge/bridge.ts → src/cells/modern/modern.ts');
    expect(found).toHaveLength(2);
  }, 60_000);
});
