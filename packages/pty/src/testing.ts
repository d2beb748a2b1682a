// Helpers for tests that run real processes (for this package's consumers too, as
// `@aleph/pty/testing`): is a pid still running, and wait for a condition with a deadline.
import { readFileSync } from 'node:fs';

/** Running — not merely a zombie waiting to be reaped (Linux `/proc`; elsewhere signal 0). */
export function processAlive(pid: number): boolean {
  if (process.platform !== 'linux') {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** Polls `predicate` every 10 ms; rejects naming `what` after `ms`. A correctness bound, not a timing. */
export async function waitUntil(predicate: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
