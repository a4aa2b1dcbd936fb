// The gateway's sources (src/**/*.ts) compiled to JavaScript for `npm start` and the bin in a
// development checkout, so a start runs plain JavaScript rather than every module through a
// TypeScript loader. They live in node_modules/.cache/mrtr-gateway/src, beside a package.json that
// makes them ES modules; packages resolve from there as from src/ (node_modules is a parent).
//
// Never stale: at every start each source file is read and hashed (a few milliseconds for the whole
// tree), and its compiled file is used only when its first line names that hash (with this file's
// format and the TypeScript version). Changed and new sources are compiled again, compiled files
// whose source is gone are removed. Each file is written to a temporary name and renamed, so
// starts running at the same time never read a half-written file. TypeScript's transpileModule
// compiles a file alone (no type check: `npm run typecheck` does that), with an inline source map
// pointing at the .ts file for stack traces.
import { createHash } from 'node:crypto';
import {
  accessSync,
  closeSync,
  constants,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

/** Changes when the way a file is compiled changes, so earlier output is compiled again. */
const FORMAT = 'mrtr-gateway-compile-1';
const MARK = '// compiled from ';

/** Every file under `dir` whose name ends with `ext`, as paths relative to `dir`. */
function filesUnder(dir, ext) {
  let entries;
  try {
    entries = readdirSync(dir, { recursive: true, withFileTypes: true });
  } catch (e) {
    if (e.code === 'ENOENT') return [];
    throw e;
  }
  return entries.filter((e) => e.isFile() && e.name.endsWith(ext)).map((e) => relative(dir, join(e.parentPath, e.name)));
}

/** The first line of `file`, or '' when it cannot be read. */
function firstLine(file) {
  let fd;
  try {
    fd = openSync(file, 'r');
    const buf = Buffer.alloc(MARK.length + 64 + 1);
    const n = readSync(fd, buf, 0, buf.length, 0);
    return buf.toString('utf8', 0, n).split('\n')[0];
  } catch {
    return '';
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** An error whose message says which source file failed and why (the bin prints it on one line). */
export class CompileError extends Error {}

/**
 * Brings the compiled copy of `root`/src up to date and returns the file URL of its main.js.
 * TypeScript is loaded only when a file needs compiling.
 * @param {string} root the checkout (the directory holding src/ and node_modules/).
 * @param {(count: number) => void} [compiling] called once, before compiling, with the number of
 *   source files to compile (not called when none needs it).
 * @returns {Promise<string>}
 * @throws CompileError naming the file and the position of a syntax error; a file system error
 *   (EACCES, EPERM, EROFS, ENOSPC) when the cache directory cannot be written.
 */
export async function compiledSources(root, compiling) {
  const src = join(root, 'src');
  const cache = join(root, 'node_modules', '.cache', 'mrtr-gateway');
  const out = join(cache, 'src');
  // The version of the TypeScript `import('typescript')` below loads, read without loading it.
  const tsVersion = JSON.parse(readFileSync(fileURLToPath(import.meta.resolve('typescript/package.json')), 'utf8')).version;
  const sources = filesUnder(src, '.ts').filter((f) => !f.endsWith('.d.ts'));
  const wanted = new Set(sources.map((f) => f.replace(/\.ts$/, '.js')));
  const stale = [];
  for (const file of sources) {
    const text = readFileSync(join(src, file), 'utf8');
    const hash = createHash('sha256').update(`${FORMAT}\0${tsVersion}\0${text}`).digest('hex');
    const target = join(out, file.replace(/\.ts$/, '.js'));
    if (firstLine(target) !== MARK + hash) stale.push({ file, text, hash, target });
  }
  if (stale.length) {
    // A cache this user may not write fails here, before anything is announced or compiled.
    mkdirSync(out, { recursive: true });
    accessSync(out, constants.W_OK);
    compiling?.(stale.length);
  }
  let ts;
  for (const { file, text, hash, target } of stale) {
    ts ??= (await import('typescript')).default;
    const fileName = join(src, file);
    const result = ts.transpileModule(text, {
      fileName,
      reportDiagnostics: true,
      compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ESNext, verbatimModuleSyntax: true, sourceMap: true },
    });
    const d = result.diagnostics?.[0];
    if (d) {
      const at = d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start) : undefined;
      throw new CompileError(
        `src/${file}${at ? `:${at.line + 1}:${at.character + 1}` : ''}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`,
      );
    }
    const map = JSON.parse(result.sourceMapText);
    map.sources = [pathToFileURL(fileName).href];
    delete map.sourceRoot;
    // The first line is the mark.
    map.mappings = `;${map.mappings}`;
    const code = result.outputText.replace(/\n\/\/# sourceMappingURL=.*\s*$/, '\n');
    mkdirSync(dirname(target), { recursive: true });
    const tmp = `${target}.${process.pid}.tmp`;
    writeFileSync(
      tmp,
      `${MARK}${hash}\n${code}//# sourceMappingURL=data:application/json;base64,${Buffer.from(JSON.stringify(map)).toString('base64')}\n`,
    );
    renameSync(tmp, target);
  }
  for (const file of filesUnder(out, '.js')) if (!wanted.has(file)) rmSync(join(out, file), { force: true });
  // node_modules/ ends the package scope: without this file the compiled sources would be CommonJS.
  const pkg = join(cache, 'package.json');
  if (firstLine(pkg) !== '{"type":"module"}') {
    writeFileSync(`${pkg}.${process.pid}.tmp`, '{"type":"module"}\n');
    renameSync(`${pkg}.${process.pid}.tmp`, pkg);
  }
  return pathToFileURL(join(out, 'main.js')).href;
}
