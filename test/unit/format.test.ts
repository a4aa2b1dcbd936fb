/**
 * The code is formatted by Prettier (.prettierrc.json, print width 140): every TypeScript and
 * JavaScript file of src/, test/, bench/, scripts/ and bin/ is as `npm run format` leaves it.
 * `npm run format` fixes what this test finds.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import * as prettier from 'prettier';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/processes.js';

const DIRS = ['src', 'test', 'bench', 'scripts', 'bin'];

function files(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'node_modules' || e.name === 'results' ? [] : files(path);
    return /\.(ts|js|mjs)$/.test(e.name) ? [path] : [];
  });
}

describe('formatting', () => {
  it('every source file is as Prettier formats it', async () => {
    const unformatted: string[] = [];
    for (const file of DIRS.flatMap((d) => files(join(ROOT, d)))) {
      const info = await prettier.getFileInfo(file, { ignorePath: join(ROOT, '.prettierignore') });
      if (info.ignored) continue;
      const options = await prettier.resolveConfig(file);
      if (!(await prettier.check(readFileSync(file, 'utf8'), { ...options, filepath: file }))) unformatted.push(relative(ROOT, file));
    }
    expect(unformatted, 'run `npm run format`').toEqual([]);
  }, 120_000);
});
