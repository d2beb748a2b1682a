// `cgroup`: a program joins the cgroup asked for before it runs, through each way a terminal is
// spawned on Linux (the spawn helper, waited for or not; node-pty with the helper's binary as its
// wrapper), so what it starts is in it too. Read where the kernel says it: /proc/PID/cgroup. Needs
// a cgroup this process may make: root, with cgroup v1's `cpu` hierarchy mounted.
import { execFileSync, spawn } from 'node:child_process';
import {
  closeSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  rmdirSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { PtyManager, PtySession } from './index.js';
import { collect } from '../test/support.js';

const CPU = '/sys/fs/cgroup/cpu';
const usable =
  process.platform === 'linux' && process.getuid?.() === 0 && existsSync(join(CPU, 'cgroup.procs'));
const group = join(CPU, `aleph-pty-test-${process.pid}`);

const managers: PtyManager[] = [];
afterEach(async () => {
  await Promise.all(managers.splice(0).map((manager) => manager.closeAll()));
});
afterAll(() => {
  if (existsSync(group)) rmdirSync(group);
});

/** The cpu line of /proc/PID/cgroup: the group's path inside its hierarchy. */
const cpuLine = (text: string): string | undefined =>
  /^\d+:(?:[\w,]*,)?cpu(?:,[\w,]*)?:(.*)$/m.exec(text)?.[1]?.trim();

/** The program's and a background child's cpu cgroups, once both run. */
async function programAndChild(session: PtySession): Promise<[string | undefined, string | undefined]> {
  const output = collect(session);
  await output.waitFor(/child \d+\r\n/);
  const child = Number(/child (\d+)/.exec(output.text())?.[1]);
  return [
    cpuLine(readFileSync(`/proc/${session.pid}/cgroup`, 'utf8')),
    cpuLine(readFileSync(`/proc/${child}/cgroup`, 'utf8')),
  ];
}
const WITH_CHILD = ['-c', 'sleep 30 & echo "child $!"; wait'];

describe.runIf(usable)('cgroup', () => {
  beforeAll(() => mkdirSync(group, { recursive: true }));
  const inside = `/${group.slice(CPU.length + 1)}`;

  it("runs a manager's programs, and what they start, in the cgroup (start: not waited for)", async () => {
    const pool = new PtyManager({ cgroup: group });
    managers.push(pool);
    const session = await pool.start({ command: '/bin/sh', args: WITH_CHILD, cols: 80, rows: 24 });
    expect(await programAndChild(session)).toEqual([inside, inside]);
  });

  it('spawn (waited for) applies it too; without it, a program stays in this process’s cgroup', async () => {
    const pool = new PtyManager({});
    managers.push(pool);
    const joined = pool.spawn({ command: '/bin/sh', args: WITH_CHILD, cols: 80, rows: 24, cgroup: group });
    expect(await programAndChild(joined)).toEqual([inside, inside]);
    const own = cpuLine(readFileSync('/proc/self/cgroup', 'utf8'));
    const stayed = pool.spawn({ command: '/bin/sh', args: WITH_CHILD, cols: 80, rows: 24 });
    expect(await programAndChild(stayed)).toEqual([own, own]);
  });

  it('applies it where node-pty spawns (through the helper binary as its wrapper)', async () => {
    const dist = new URL('../dist/index.js', import.meta.url).href;
    const script = `
      const { PtyManager } = await import(${JSON.stringify(dist)});
      const pool = new PtyManager({ cgroup: ${JSON.stringify(group)}, nice: 3 });
      const session = pool.spawn({ command: '/bin/sh', args: ['-c', 'cat /proc/$$/cgroup'], cols: 200, rows: 24 });
      session.onData((chunk) => process.stdout.write(chunk));
      await session.exited;
      await pool.closeAll();`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      env: { ...process.env, ALEPH_PTY_FORK: '1' },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    await new Promise((resolve) => child.once('exit', resolve));
    expect(cpuLine(output.replace(/\r/g, ''))).toBe(inside);
  });

  it('runs the program all the same when it cannot join', async () => {
    const pool = new PtyManager({ cgroup: join(group, 'absent') });
    managers.push(pool);
    const session = await pool.start({ command: '/bin/sh', args: WITH_CHILD, cols: 80, rows: 24 });
    const own = cpuLine(readFileSync('/proc/self/cgroup', 'utf8'));
    expect(await programAndChild(session)).toEqual([own, own]);
  });
});

describe.runIf(process.platform === 'linux')('a program slow to reach its exec', () => {
  it('holds up no other spawn: the helper answers each program as it gets there', async () => {
    // A "cgroup" whose cgroup.procs is a FIFO: the first program's join waits until it is read.
    const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-slow-'));
    execFileSync('mkfifo', [join(dir, 'cgroup.procs')]);
    const pool = new PtyManager({});
    managers.push(pool);
    try {
      const slow = pool.start({
        command: '/bin/sh',
        args: ['-c', 'echo slow ran'],
        cols: 80,
        rows: 24,
        cgroup: dir,
      });
      const quick = await pool.start({
        command: '/bin/sh',
        args: ['-c', 'echo quick ran; sleep 30'],
        cols: 80,
        rows: 24,
      });
      await collect(quick).waitFor(/quick ran/);
      // Run by the helper meanwhile, not by node-pty after the helper was given up on.
      const stat = readFileSync(`/proc/${quick.pid}/stat`, 'utf8');
      const parent = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      expect(readFileSync(`/proc/${parent}/comm`, 'utf8')).toMatch(/^aleph-pty/);
      // Now let the first one through: it runs too.
      const reader = openSync(join(dir, 'cgroup.procs'), constants.O_RDONLY | constants.O_NONBLOCK);
      const session = await slow;
      await collect(session).waitFor(/slow ran/);
      closeSync(reader);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

it('refuses a cgroup that is not an absolute path, before anything runs', () => {
  expect(() => new PtyManager({ cgroup: 'cpu/x' })).toThrow(/cgroup must be an absolute path, got "cpu\/x"/);
  expect(() => PtySession.spawn({ command: '/bin/true', cols: 80, rows: 24, cgroup: '' })).toThrow(
    /cgroup must be an absolute path, got ""/,
  );
});
