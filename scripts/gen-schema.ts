// Writes config/gateway.schema.json from the zod schema in src/config/schema.ts.
import { writeFileSync } from 'node:fs';
import { configJsonSchema } from '../src/config/load.js';

const out = new URL('../config/gateway.schema.json', import.meta.url);
writeFileSync(out, JSON.stringify({ title: 'mrtr-gateway configuration', ...configJsonSchema() }, null, 2) + '\n');
console.log(`wrote ${out.pathname}`);
