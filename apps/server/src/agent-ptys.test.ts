// A burst of agent spawns on a full pool: every one starts as soon as a slot is free (no slot is ever
// overdrawn), a waiting one can be given up, and pty.list shows what the caller named; the agents'
// commands run at a lower CPU priority than the server (and in the CPU group given), users' terminals
// at its own. Real terminals.
import { PtyManager } from '@aleph/pty';
import { existsSync, mkdirSync, readFileSync, rmdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { AGENT_NICE, ServerPtys, shownCommand, spawnWhenFree, TerminalShare } from './agent-ptys.js';

const manager = new PtyManager({ maxSessions: 4, eviction: 'reject', killStepMs: 200 });
manager.setMaxListeners(0); // each spawn waiting for a slot listens for an exit (as ServerPtys allows)
afterAll(() => manager.closeAll());

let most = 0;
manager.on('spawn', () => (most = Math.max(most, manager.size)));

const program = { command: '/bin/sh', args: ['-c', 'sleep 0.05'], cols: 80, rows: 24 };

it('forty spawns at once on a pool of four: each runs once a slot is free, never more than four', async () => {
  const sessions = await Promise.all(
    Array.from({ length: 40 }, (_, index) =>
      spawnWhenFree(manager, program, new AbortController().signal, `shown ${index}`),
    ),
  );
  expect(most).toBe(4);
  expect(sessions.map((session) => shownCommand(session))).toEqual(
    Array.from({ length: 40 }, (_, index) => `shown ${index}`),
  );
  const exits = await Promise.all(sessions.map((session) => session.exited));
  expect(exits.every((exit) => exit.exitCode === 0)).toBe(true);
});

it('a spawn given up while it waits for a slot rejects with its reason and takes no slot', async () => {
  const signal = new AbortController().signal;
  const hold = { ...program, args: ['-c', 'read line'] };
  const running = await Promise.all(Array.from({ length: 4 }, () => spawnWhenFree(manager, hold, signal)));
  const giveUp = new AbortController();
  const waiting = spawnWhenFree(manager, program, giveUp.signal);
  giveUp.abort(new Error('gave up'));
  await expect(waiting).rejects.toMatchObject({ name: 'AbortError', cause: new Error('gave up') });
  expect(manager.size).toBe(4);
  const later = spawnWhenFree(manager, program, signal);
  running[0]!.write('\r'); // a slot comes free: the later spawn takes it
  const session = await later;
  expect(shownCommand(session)).toBeUndefined();
  for (const each of running.slice(1)) each.write('\r');
  await Promise.all([...running, session].map((each) => each.exited));
});

it('a spawn that waits for a slot past its timeout rejects with a TimeoutError and takes no slot', async () => {
  const signal = new AbortController().signal;
  const hold = { ...program, args: ['-c', 'read line'] };
  const running = await Promise.all(Array.from({ length: 4 }, () => spawnWhenFree(manager, hold, signal)));
  const waiting = spawnWhenFree(manager, program, signal, undefined, 200);
  await expect(waiting).rejects.toMatchObject({ name: 'AbortError', cause: { name: 'TimeoutError' } });
  expect(manager.size).toBe(4);
  // A free slot: the same bound does not get in the way.
  running[0]!.write('\r');
  await running[0]!.exited;
  const session = await spawnWhenFree(manager, program, signal, undefined, 200);
  for (const each of running.slice(1)) each.write('\r');
  await Promise.all([...running, session].map((each) => each.exited));
});

it("a run's share of the pool: past its most, its next spawn waits for one of its own to end, while another run's starts", async () => {
  const signal = new AbortController().signal;
  const hold = { ...program, args: ['-c', 'read line'] };
  const mine = new TerminalShare(2);
  const held = await Promise.all(
    [0, 1].map(() => spawnWhenFree(manager, hold, signal, undefined, 5_000, mine)),
  );
  expect(mine.held).toBe(2);
  const third = spawnWhenFree(manager, program, signal, undefined, 300, mine);
  await expect(third).rejects.toMatchObject({ name: 'AbortError', cause: { name: 'TimeoutError' } });
  // Another run's share: a free slot of the pool is its.
  const other = await spawnWhenFree(manager, program, signal, undefined, 5_000, new TerminalShare(2));
  await other.exited;
  // One of this run's ends: its waiting spawn starts.
  const waiting = spawnWhenFree(manager, program, signal, undefined, 5_000, mine);
  held[0]!.write('\r');
  const started = await waiting;
  await started.exited;
  held[1]!.write('\r');
  await Promise.all(held.map((each) => each.exited));
  expect(mine.held).toBe(0);
});

/** Field 19 of /proc/PID/stat: the process's nice value. */
function niceOf(pid: number | 'self'): number {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[16]);
}

it.runIf(process.platform === 'linux')(
  "an agent's command runs at a lower CPU priority than the server, a user's terminal at the server's",
  async () => {
    const ptys = new ServerPtys({}, { maxSessions: 2 });
    const configured = new ServerPtys({}, { maxSessions: 2, nice: 3 });
    try {
      const hold = { ...program, args: ['-c', 'read line'] };
      const signal = new AbortController().signal;
      const agent = await spawnWhenFree(ptys.agents, hold, signal);
      const user = await ptys.start(hold);
      const other = await spawnWhenFree(configured.agents, hold, signal);
      const own = niceOf('self');
      expect(niceOf(agent.pid)).toBe(Math.min(19, own + AGENT_NICE));
      expect(niceOf(other.pid)).toBe(Math.min(19, own + 3));
      expect(niceOf(user.pid)).toBe(own);
    } finally {
      await Promise.all([ptys.closeAll(), configured.closeAll()]);
    }
  },
);

const CPU = '/sys/fs/cgroup/cpu';
const cpuGroupOf = (pid: number): string | undefined =>
  /^\d+:(?:[\w,]*,)?cpu(?:,[\w,]*)?:(.*)$/m.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1];

it.runIf(process.platform === 'linux' && process.getuid?.() === 0 && existsSync(join(CPU, 'cgroup.procs')))(
  "an agent's command joins the agents' CPU group as it starts, a user's terminal stays in the server's",
  async () => {
    const group = join(CPU, `aleph-agent-ptys-test-${process.pid}`);
    mkdirSync(group, { recursive: true });
    const ptys = new ServerPtys({}, { maxSessions: 2, cgroup: group });
    try {
      const hold = { ...program, args: ['-c', 'read line'] };
      const agent = await spawnWhenFree(ptys.agents, hold, new AbortController().signal);
      const user = await ptys.start(hold);
      expect(cpuGroupOf(agent.pid)).toBe(`/${group.slice(CPU.length + 1)}`);
      expect(cpuGroupOf(user.pid)).toBe(cpuGroupOf(process.pid));
    } finally {
      await ptys.closeAll();
      rmdirSync(group);
    }
  },
);
