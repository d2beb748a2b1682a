import { configDefaults, defineProject } from 'vitest/config';

export default defineProject({
  test: {
    name: 'server',
    // The reliability suite is a project of its own (apps/server/reliability).
    exclude: [...configDefaults.exclude, 'reliability/**'],
    expect: { poll: { timeout: 10_000 } },
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
