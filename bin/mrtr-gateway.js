#!/usr/bin/env node
// `mrtr-gateway` / `npx mrtr-gateway`: starts the gateway in this process, with every path taken
// relative to this package so that it works from any working directory. Flags, exit codes and
// signals are those of src/main.ts (`--help`).
//
// Which code runs:
// - a development checkout (src/main.ts present and tsx, a development dependency, resolvable):
//   the TypeScript sources through tsx, as `npm start` does, so a stale dist/ is never run;
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

if (existsSync(at('../src/main.ts')) && resolvable('tsx/esm/api')) {
  const { register } = await import('tsx/esm/api');
  register({ tsconfig: fileURLToPath(at('../tsconfig.json')) });
  await import(at('../src/main.ts').href);
} else if (existsSync(at('../dist/main.js'))) {
  await import(at('../dist/main.js').href);
} else {
  process.stderr.write(
    `mrtr-gateway: cannot start: ${fileURLToPath(at('../dist/main.js'))} is missing (build it with npm run build) and tsx is not installed to run the sources (install the development dependencies with npm ci)\n`,
  );
  process.exit(1);
}
