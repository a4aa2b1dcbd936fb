import { defineConfig } from 'vitest/config';
import { scaled } from './test/helpers/budget.js';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: scaled(30_000),
    hookTimeout: scaled(30_000),
    teardownTimeout: scaled(10_000),
    pool: 'forks',
    fileParallelism: true,
    maxWorkers: 2,
  },
});
