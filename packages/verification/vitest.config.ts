import { defineProject } from 'vitest/config';

export default defineProject({
  test: {
    name: 'verification',
    expect: { poll: { timeout: 10_000 } },
    testTimeout: 30_000,
    hookTimeout: 30_000,
    passWithNoTests: true,
  },
});
