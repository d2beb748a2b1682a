import { defineProject } from 'vitest/config';

export default defineProject({
  test: { name: 'verification', testTimeout: 30_000, hookTimeout: 30_000, passWithNoTests: true },
});
