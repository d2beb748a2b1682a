// Exits reported by the spawn helper (internal/spawner.ts), on Linux. Its own file, so that the
// helper is a fresh one: its first answers race the exits they announce.
import { describe, expect, it } from 'vitest';
import { PtyManager, type ExitInfo } from './index.js';

const busy = (ms: number): void => void Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);

describe.runIf(process.platform === 'linux')('exits reported by the spawn helper', () => {
  it('every exit of a burst of short programs is reported, even one read before its answer', async () => {
    // The helper answers a spawn on one pipe and reports its exit on another. With the event loop
    // busy between the starts (as a sandbox's wrapping keeps it), both wait to be read, and the
    // exit may be read first: that session must still end.
    // A manager starts the helper; its first answers, while it boots, are the likeliest to be late.
    const manager = new PtyManager({
      maxSessions: 64,
      eviction: 'reject',
      idleTtlMs: Number.POSITIVE_INFINITY,
    });
    for (let round = 0; round < 4; round += 1) {
      const starting = Array.from({ length: 12 }, (_, index) => {
        busy(4);
        return manager.start({ command: '/bin/sh', args: ['-c', `exit ${index % 3}`], cols: 80, rows: 24 });
      });
      busy(200);
      const started = await Promise.all(starting);
      const exits = await Promise.all(
        started.map((session) =>
          Promise.race<ExitInfo | string>([
            session.exited,
            new Promise((resolve) =>
              setTimeout(() => resolve(`no exit reported for ${session.pid}`), 20_000),
            ),
          ]),
        ),
      );
      expect(exits).toEqual(
        started.map((_, index) => ({ exitCode: index % 3, signal: null, reason: 'exited' })),
      );
    }
    await manager.closeAll();
  });
});
