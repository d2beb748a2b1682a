import { defineProject } from 'vitest/config';

// The reliability suite: real server processes under faults and hostile input. Its files
// run one at a time: they count processes by marker and measure the server's memory.
export default defineProject({
  test: {
    name: 'reliability',
    include: ['*.test.ts'],
    expect: { poll: { timeout: 10_000 } },
    testTimeout: 120_000,
    hookTimeout: 60_000,
    fileParallelism: false,
  },
});
