#!/usr/bin/env node
// `mrtr-gateway` / `npx mrtr-gateway`: runs the gateway from its TypeScript sources through tsx,
// as `npm start` does, with every path taken relative to this package so that it works from any
// working directory. Flags, exit codes and signals are those of src/main.ts (`--help`).
import { fileURLToPath } from 'node:url';
import { register } from 'tsx/esm/api';

register({ tsconfig: fileURLToPath(new URL('../tsconfig.json', import.meta.url)) });
await import(new URL('../src/main.ts', import.meta.url).href);
