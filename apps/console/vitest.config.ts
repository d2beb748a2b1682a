import { defineProject } from 'vitest/config';

// Real Chromium against the real server: on a loaded 2-core machine a poll waits tens of seconds,
// not expect.poll's default second; a test's own timeout is set where its work is larger.
export default defineProject({
  test: {
    name: 'console',
    testTimeout: 120_000,
    hookTimeout: 240_000,
    expect: { poll: { timeout: 30_000, interval: 100 } },
  },
});
