// `nice`: a program run at a lower CPU priority than this process, and whatever it starts, through
// each way a terminal is spawned on Linux (the spawn helper, waited for or not; node-pty with the
// helper's binary as its wrapper). The priority is read where the kernel keeps it: /proc/PID/stat.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { PtyManager, PtySession } from './index.js';
import { collect } from '../test/support.js';

/** Field 19 of /proc/PID/stat: the process's nice value. */
function niceOf(pid: number | 'self'): number {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[16]);
}
const own = niceOf('self');
const lowered = (by: number): number => Math.min(19, own + by);

const managers: PtyManager[] = [];
afterEach(async () => {
  await Promise.all(managers.splice(0).map((manager) => manager.closeAll()));
});
const manager = (options: ConstructorParameters<typeof PtyManager>[0]): PtyManager => {
  const made = new PtyManager(options);
  managers.push(made);
  return made;
};

/** The program and a child it started in the background, once both run: their pids. */
async function programAndChild(session: PtySession): Promise<[number, number]> {
  const output = collect(session);
  await output.waitFor(/child \d+\r\n/);
  return [session.pid, Number(/child (\d+)/.exec(output.text())?.[1])];
}
const WITH_CHILD = ['-c', 'sleep 30 & echo "child $!"; wait'];

describe.runIf(process.platform === 'linux')('nice', () => {
  it("runs a manager's programs and what they start at that much lower a priority (start: not waited for)", async () => {
    const session = await manager({ nice: 10 }).start({
      command: '/bin/sh',
      args: WITH_CHILD,
      cols: 80,
      rows: 24,
    });
    const [program, child] = await programAndChild(session);
    expect(niceOf(program)).toBe(lowered(10));
    expect(niceOf(child)).toBe(lowered(10));
  });

  it('is taken from the spawn over the manager, and spawn (waited for) applies it too', async () => {
    const pool = manager({ nice: 10 });
    const session = pool.spawn({ command: '/bin/sh', args: WITH_CHILD, cols: 80, rows: 24, nice: 3 });
    const [program, child] = await programAndChild(session);
    expect(niceOf(program)).toBe(lowered(3));
    expect(niceOf(child)).toBe(lowered(3));
  });

  it("leaves a program at this process's priority without it", async () => {
    const session = await manager({}).start({ command: '/bin/sh', args: WITH_CHILD, cols: 80, rows: 24 });
    const [program] = await programAndChild(session);
    expect(niceOf(program)).toBe(own);
  });

  it('applies it where node-pty spawns (through the helper binary as its wrapper)', async () => {
    const dist = new URL('../dist/index.js', import.meta.url).href;
    const script = `
      const { PtyManager } = await import(${JSON.stringify(dist)});
      const pool = new PtyManager({ nice: 7 });
      const session = pool.spawn({ command: '/bin/sh', args: ['-c', 'cat /proc/$$/stat'], cols: 200, rows: 24 });
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
    const stat = output.trim();
    expect(stat).toMatch(/^\d+ \(sh\) /);
    expect(Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16])).toBe(lowered(7));
  });

  it('refuses a value nice(1) would not take, before anything runs', () => {
    expect(() => new PtyManager({ nice: 20 })).toThrow(/nice must be an integer from 0 to 19/);
    expect(() => PtySession.spawn({ command: '/bin/true', cols: 80, rows: 24, nice: -1 })).toThrow(
      /nice must be an integer from 0 to 19, got -1/,
    );
  });
});
