// How the console words a run's end (no browser needed): as `aleph run` does, with the cause.
import { expect, it } from 'vitest';
import { describeEnd } from '../src/agent-panel.js';

it('a run stopped by the failure watchdog says how many turns failed and the last cause', () => {
  expect(
    describeEnd({
      kind: 'consecutive_failures',
      count: 3,
      lastError: 'provider returned 429: rate limited\nretry-after: 20',
    }),
  ).toBe('stopped: 3 turns in a row failed; last: provider returned 429: rate limited');
  expect(describeEnd({ kind: 'consecutive_failures', count: 1 })).toBe('stopped: 1 turn in a row failed');
});
