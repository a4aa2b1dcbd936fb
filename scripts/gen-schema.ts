// Writes config/gateway.schema.json from the zod schema in src/config/schema.ts, and the field
// tables of docs/configuration.md from the same schema's descriptions (scripts/config-docs.ts).
import { writeFileSync } from 'node:fs';
import { configJsonSchema } from '../src/config/load.js';
import { writeConfigDocs } from './config-docs.js';

const out = new URL('../config/gateway.schema.json', import.meta.url);
writeFileSync(out, JSON.stringify({ title: 'mrtr-gateway configuration', ...configJsonSchema() }, null, 2) + '\n');
console.log(`wrote ${out.pathname}`);
console.log(`wrote ${writeConfigDocs()}`);
