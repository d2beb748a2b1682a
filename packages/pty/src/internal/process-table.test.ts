// The processes of one terminal session below a spawn helper (sessionBelow), on Linux, with real
// processes: a shell standing for the helper, its jobs in its session, and one in a session of its
// own (as a sandbox's init, orphaned to the helper, is). What was read of the helper's other
// children is kept, and used only to skip those of another session.
import { spawn, type ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { sessionBelow } from './process-table.js';

const started: ChildProcess[] = [];
afterEach(() => {
  for (const child of started.splice(0)) if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
});

/** Polls until `check` holds (processes take a moment to start and to be reaped). */
async function until(check: () => boolean): Promise<void> {
  for (let tries = 0; tries < 100 && !check(); tries += 1)
    await new Promise((resolve) => setTimeout(resolve, 50));
  expect(check()).toBe(true);
}

describe.runIf(process.platform === 'linux')('sessionBelow', () => {
  it("finds the session's jobs again once it knows them; skips, and forgets once gone, a child of another session", async () => {
    // The root leads its own session; two jobs in it; one in a session of its own (setsid).
    const root = spawn('/bin/sh', ['-c', 'sleep 30 & sleep 30 & setsid sleep 30 & wait'], {
      detached: true,
      stdio: 'ignore',
    });
    started.push(root);
    const leader = root.pid!;
    const known = new Map<number, number>();
    const none = { has: () => false };
    let first: number[] = [];
    await until(() => {
      first = (sessionBelow(leader, leader, none, known) ?? []).map(({ pid }) => pid);
      return first.length === 3 && known.size === 3;
    });
    const [own] = [...known].find(([, session]) => session !== leader) ?? [];
    expect(own).toBeDefined();
    expect(first).not.toContain(own); // its session is not the root's
    // Read again: the jobs known to be in the session are found again; the other is skipped.
    const again = (sessionBelow(leader, leader, none, known) ?? []).map(({ pid }) => pid).sort();
    expect(again).toEqual([...first].sort());
    expect(known.get(own!)).toBe(own);
    // Once it is gone (reaped by the root's wait), what was read of it is forgotten.
    process.kill(own!, 'SIGKILL');
    await until(() => {
      sessionBelow(leader, leader, none, known);
      return !known.has(own!);
    });
  });
});
