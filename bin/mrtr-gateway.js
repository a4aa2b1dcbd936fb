#!/usr/bin/env node
// `mrtr-gateway` / `npx mrtr-gateway` / `npm start`: starts the gateway in this process, with every
// path taken relative to this package so that it works from any working directory. Flags, exit
// codes and signals are those of src/main.ts (`--help`).
//
// Which code runs:
// - a development checkout (src/main.ts present and TypeScript, a development dependency,
//   resolvable): the sources compiled to JavaScript under node_modules/.cache/mrtr-gateway
//   (bin/compile.js: files whose source changed are compiled again first, so neither a stale
//   compiled file nor a stale dist/ is ever run; one line on stderr says so when more than a few
//   are). When that cache cannot be written (EACCES, EPERM, EROFS), the sources run through tsx,
//   after one warning line on stderr;
// - otherwise (a production install, `npm ci --omit=dev`, a packed package, the container image):
//   the compiled dist/main.js (`npm run build`, also run by `npm pack` through `prepack`);
// - neither: one line on stderr and exit code 1.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const at = (path) => new URL(path, import.meta.url);

/** Whether `specifier` resolves from this package (`import.meta.resolve` throws when it does not). */
function resolvable(specifier) {
  try {
    import.meta.resolve(specifier);
    return true;
  } catch {
    return false;
  }
}

/** Up to this many files to compile start without a line on stderr (an edit or two compiles quickly). */
const FEW = 5;
/** The codes of a cache directory this user may not write. */
const UNWRITABLE = new Set(['EACCES', 'EPERM', 'EROFS']);

if (existsSync(at('../src/main.ts')) && resolvable('typescript')) {
  const { compiledSources } = await import('./compile.js');
  let main;
  try {
    main = await compiledSources(fileURLToPath(at('..')), (count) => {
      if (count > FEW) process.stderr.write('mrtr-gateway: compiling the sources (first start after install or an edit)…\n');
    });
  } catch (e) {
    if (!UNWRITABLE.has(e.code) || !resolvable('tsx/esm/api')) {
      process.stderr.write(`mrtr-gateway: cannot compile the sources: ${e.message}\n`);
      process.exit(1);
    }
    process.stderr.write(
      `mrtr-gateway: warning: cannot write the compiled sources (${e.code} on ${e.path ?? 'node_modules/.cache/mrtr-gateway'}); running the sources through tsx, which starts slower\n`,
    );
    const { register } = await import('tsx/esm/api');
    register();
    main = at('../src/main.ts').href;
  }
  // Stack traces name the .ts files and lines, as they did when run through a TypeScript loader.
  process.setSourceMapsEnabled(true);
  await import(main);
} else if (existsSync(at('../dist/main.js'))) {
  await import(at('../dist/main.js').href);
} else {
  process.stderr.write(
    `mrtr-gateway: cannot start: ${fileURLToPath(at('../dist/main.js'))} is missing (build it with npm run build) and TypeScript is not installed to compile the sources (install the development dependencies with npm ci)\n`,
  );
  process.exit(1);
}
