// A burst of agent spawns: at most eight are starting at once (each is a request through the pty
// spawn helper's one pipe, whose write blocks the event loop once full); the rest wait their turn,
// a waiting one can be given up, and pty.list shows what the caller named. Real terminals.
import { PtyManager, type PtySession, type PtySpawnOptions } from '@aleph/pty';
import { afterAll, expect, it } from 'vitest';
import { shownCommand, spawnWhenFree } from './agent-ptys.js';

/** A real manager whose starts take a while, counting how many are under way at once. */
class SlowStarts extends PtyManager {
  starting = 0;
  most = 0;
  override async start(options: PtySpawnOptions): Promise<PtySession> {
    this.starting += 1;
    this.most = Math.max(this.most, this.starting);
    try {
      await new Promise((resolve) => setTimeout(resolve, 40));
      return await super.start(options);
    } finally {
      this.starting -= 1;
    }
  }
}

const manager = new SlowStarts({ maxSessions: 64, eviction: 'reject', killStepMs: 200 });
afterAll(() => manager.closeAll());

const program = { command: '/bin/sh', args: ['-c', 'exit 0'], cols: 80, rows: 24 };

it('starts at most eight agent terminals at once; the others wait, and each runs', async () => {
  const signal = new AbortController().signal;
  const sessions = await Promise.all(
    Array.from({ length: 20 }, (_, index) => spawnWhenFree(manager, program, signal, `shown ${index}`)),
  );
  expect(manager.most).toBe(8);
  expect(sessions.map((session) => shownCommand(session))).toEqual(
    Array.from({ length: 20 }, (_, index) => `shown ${index}`),
  );
  const exits = await Promise.all(sessions.map((session) => session.exited));
  expect(exits.every((exit) => exit.exitCode === 0)).toBe(true);
});

it('a start given up while waiting rejects with its reason and takes no turn from the others', async () => {
  manager.most = 0;
  const signal = new AbortController().signal;
  const running = Array.from({ length: 8 }, () => spawnWhenFree(manager, program, signal));
  const giveUp = new AbortController();
  const waiting = spawnWhenFree(manager, program, giveUp.signal);
  giveUp.abort(new Error('gave up'));
  await expect(waiting).rejects.toThrow('gave up');
  const later = await spawnWhenFree(manager, program, signal);
  const started = await Promise.all(running);
  expect(manager.most).toBe(8);
  expect(shownCommand(later)).toBeUndefined();
  await Promise.all([...started, later].map((session) => session.exited));
});
