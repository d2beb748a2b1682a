import { defineProject } from 'vitest/config';

// These tests run compilers, pnpm pack and npm: seconds each alone, minutes on a loaded CI machine.
export default defineProject({
  test: {
    name: 'release',
    expect: { poll: { timeout: 10_000 } },
    testTimeout: 300_000,
    hookTimeout: 300_000,
  },
});
