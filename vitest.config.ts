import { defineConfig } from 'vitest/config';

// One vitest run over every workspace project, so `pnpm test` ends with a single summary and the
// suites share one process pool (2-core machines: heavy pty suites must not fight each other).
export default defineConfig({
  test: {
    projects: ['packages/*', 'apps/*', 'tools/*', 'apps/server/reliability'],
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 30_000,
  },
});
