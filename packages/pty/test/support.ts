// Helpers shared by this package's tests (outside src, so not production source).
import type { PtySession } from '../src/pty-session.js';
import { waitUntil as until } from '../src/testing.js';

export { processAlive as alive, waitUntil as until } from '../src/testing.js';

/** Collects a session's output as bytes and waits for a pattern in its UTF-8 text. */
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
