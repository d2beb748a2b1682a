// Helpers shared by this package's tests (not production source: excluded by name from dist).
import { readFileSync } from 'node:fs';
import type { PtySession } from '../src/pty-session.js';

/** Running, not merely a zombie waiting to be reaped. */
export function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

export async function until(predicate: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Collects a session's output as bytes and waits for a pattern in its latin1 view. */
export function collect(session: PtySession) {
  const chunks: Buffer[] = [];
  session.onData((chunk) => chunks.push(chunk));
  const bytes = () => Buffer.concat(chunks);
  return {
    bytes,
    text: () => bytes().toString('utf8'),
    waitFor: (pattern: RegExp, ms?: number) =>
      until(() => pattern.test(bytes().toString('utf8')), String(pattern), ms),
  };
}
