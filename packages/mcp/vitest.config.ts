import { defineProject } from 'vitest/config';

export default defineProject({
  test: { name: 'mcp', expect: { poll: { timeout: 10_000 } }, testTimeout: 60_000, hookTimeout: 60_000 },
});
