/**
 * The size rules of src/ that keep the code enterable: no file over 600 lines (the config schema,
 * one long declaration, excepted) and no function, method or arrow function over 100 lines,
 * counted from its first line to its last. Both are read with the TypeScript parser.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/processes.js';

const MAX_FILE_LINES = 600;
const MAX_FUNCTION_LINES = 100;
const LONG_FILES_ALLOWED = new Set(['src/config/schema.ts']);

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );
}

/** Functions of `text` longer than `max` lines, as "name (N lines) at line L". */
export function longFunctions(file: string, text: string, max: number): string[] {
  const src = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = src.getLineAndCharacterOfPosition(node.getStart(src)).line;
      const last = src.getLineAndCharacterOfPosition(node.end).line;
      const lines = last - first + 1;
      const name = (node as { name?: ts.Node }).name?.getText(src) ?? ts.SyntaxKind[node.kind];
      if (lines > max) found.push(`${name} (${lines} lines) at line ${first + 1}`);
    }
    ts.forEachChild(node, visit);
  };
  visit(src);
  return found;
}

const FILES = sources(join(ROOT, 'src')).map((f) => ({ path: relative(ROOT, f), text: readFileSync(f, 'utf8') }));

describe('the size of src/', () => {
  it(`has no file over ${MAX_FILE_LINES} lines`, () => {
    const long = FILES.filter((f) => !LONG_FILES_ALLOWED.has(f.path))
      .map((f) => ({ path: f.path, lines: f.text.split('\n').length - (f.text.endsWith('\n') ? 1 : 0) }))
      .filter((f) => f.lines > MAX_FILE_LINES)
      .map((f) => `${f.path}: ${f.lines} lines`);
    expect(long).toEqual([]);
  });

  it(`has no function over ${MAX_FUNCTION_LINES} lines`, () => {
    const long = FILES.flatMap((f) => longFunctions(f.path, f.text, MAX_FUNCTION_LINES).map((l) => `${f.path}: ${l}`));
    expect(long).toEqual([]);
  });

  it('the function count sees a long arrow function and a long method', () => {
    const body = Array.from({ length: 101 }, (_, i) => `  const v${i} = ${i};`).join('\n');
    const text = `const f = () => {\n${body}\n};\nclass C {\n  m() {\n${body}\n  }\n  short() {\n    return 1;\n  }\n}\n`;
    expect(longFunctions('x.ts', text, MAX_FUNCTION_LINES)).toEqual(['ArrowFunction (103 lines) at line 1', 'm (103 lines) at line 105']);
  });
});
