/**
 * The benchmark runs the gateway compiled to JavaScript, the form it is deployed in (`npm run
 * build`, the container image, the `bin` launcher), not through tsx, whose on-the-fly output
 * keeps function names with a call per function made (about a tenth of the gateway's CPU per call).
 *
 * {@link compiledTree} transpiles a tree's `src`, `test/helpers` and `bench/gateway-process.ts`
 * with TypeScript's own transpiler (no type check: `npm test` does that) into a directory of the
 * run's own under the system temp dir (removed when the run ends), beside a copy of its `package.json` and a link to its `node_modules`, and
 * returns where `bench/gateway-process.js` is. The current tree and the baseline are compiled the
 * same way.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import ts from 'typescript';

/** What is compiled, relative to the tree's root. */
const SOURCES = ['src', 'test/helpers', 'bench/gateway-process.ts'];

const built = new Map<string, string>();

function tsFiles(path: string): string[] {
  if (!existsSync(path)) return [];
  if (path.endsWith('.ts')) return [path];
  return readdirSync(path, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? tsFiles(join(path, e.name)) : e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [join(path, e.name)] : [],
  );
}

/**
 * Compiles the tree at `root` (once per process) and returns the path of its compiled
 * `bench/gateway-process.js`.
 * @throws Error naming the file when TypeScript reports a syntax error in it.
 */
export function compiledTree(root: string): string {
  const done = built.get(root);
  if (done) return done;
  const files = SOURCES.flatMap((s) => tsFiles(join(root, s)));
  // One directory per run (two runs of one checkout may overlap), removed when the run ends.
  const out = join(tmpdir(), `mrtr-gateway-bench-${createHash('sha256').update(root).digest('hex').slice(0, 12)}-${process.pid}`);
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  process.once('exit', () => rmSync(out, { recursive: true, force: true }));
  for (const file of files) {
    const { outputText, diagnostics } = ts.transpileModule(readFileSync(file, 'utf8'), {
      fileName: file,
      reportDiagnostics: true,
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, sourceMap: false },
    });
    if (diagnostics?.length) throw new Error(`${file}: ${ts.flattenDiagnosticMessageText(diagnostics[0]!.messageText, '\n')}`);
    const target = join(out, relative(root, file)).replace(/\.ts$/, '.js');
    mkdirSync(dirname(target), { recursive: true });
    writeFileSync(target, outputText);
  }
  // "type": "module" for the compiled files, and the tree's dependencies.
  writeFileSync(join(out, 'package.json'), readFileSync(join(root, 'package.json')));
  symlinkSync(join(root, 'node_modules'), join(out, 'node_modules'));
  const entry = join(out, 'bench', 'gateway-process.js');
  built.set(root, entry);
  return entry;
}
