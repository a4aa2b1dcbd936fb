/**
 * The layer rule of src/ (docs/architecture.md, "Layers"): a module may import its own layer and
 * the layers below it, never one above; the four cells of the era table never import one another.
 * Checked by test/unit/layers.test.ts.
 */
const LAYERS = [
  ['main', '^src/(main|check|start-settings|cli-flags)\\.ts$'],
  ['wiring', '^src/wiring\\.ts$'],
  ['http', '^src/http/'],
  ['admin', '^src/admin/'],
  ['federation', '^src/federation/'],
  ['router', '^src/router/'],
  ['credentials', '^src/credentials/'],
  ['cells', '^src/cells/'],
  ['sampling', '^src/sampling/'],
  ['upstream', '^src/upstream/'],
  ['store', '^src/store/'],
  ['observability', '^src/observability/'],
  ['security', '^src/security/'],
  ['config', '^src/config/'],
  ['protocol', '^src/protocol/'],
];

const upward = LAYERS.slice(1).map(([name, path], i) => ({
  name: `layer-${name}`,
  comment: `${name} is below ${LAYERS.slice(0, i + 1).map(([n]) => n).join(', ')} and must not import them`,
  severity: 'error',
  from: { path },
  to: { path: LAYERS.slice(0, i + 1).map(([, p]) => `(${p})`).join('|') },
}));

module.exports = {
  forbidden: [
    ...upward,
    {
      name: 'cells-apart',
      comment: 'a cell of the era table does not import another cell; what two cells share lives in a lower layer',
      severity: 'error',
      from: { path: '^src/cells/([^/]+)/' },
      to: { path: '^src/cells/', pathNot: '^src/cells/$1/' },
    },
    {
      name: 'no-unlayered',
      comment: 'every module of src/ belongs to a layer',
      severity: 'error',
      from: { path: '^src/', pathNot: LAYERS.map(([, p]) => `(${p})`).join('|') },
      to: {},
    },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsConfig: { fileName: 'tsconfig.json' },
    tsPreCompilationDeps: true,
    exclude: { path: '^(node_modules|dist)/' },
  },
};
