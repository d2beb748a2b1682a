// Helpers for tests that run real processes (for this package's consumers too, as
// `@aleph/pty/testing`): is a pid still running, and wait for a condition with a deadline.
export { processAlive } from './internal/process-tree.js';

/** Polls `predicate` every 10 ms; rejects naming `what` after `ms`. A correctness bound, not a timing. */
export async function waitUntil(predicate: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
