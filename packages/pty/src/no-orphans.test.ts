// No orphans, even on SIGKILL: a real server-like process spawns, through PtyManager, programs that
// ignore SIGHUP (and their background children, one in a job of its own), then is SIGKILLed. Every
// one of them, and the package's own helper processes, must be gone within 2 s. Both spawn paths:
// the spawn helper (Linux) and node-pty (ALEPH_PTY_FORK=1, as everywhere else); and a watchdog killed
// first, whose successor must take the terminals over.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { until } from '../test/support.js';

const marks: string[] = [];

/** Live processes carrying `mark` in their environment (so: started by that test's server). */
function marked(mark: string): { pid: number; command: string }[] {
  const found: { pid: number; command: string }[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (/^\d+ \(.*\) [ZX]/.test(stat)) continue;
      if (!readFileSync(`/proc/${entry}/environ`, 'latin1').includes(mark)) continue;
      const command = readFileSync(`/proc/${entry}/cmdline`, 'latin1').replaceAll('\0', ' ').trim();
      found.push({ pid: Number(entry), command });
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return found;
}

afterAll(() => {
  for (const mark of marks) for (const { pid } of marked(mark)) process.kill(pid, 'SIGKILL'); // if one failed
});

const dist = new URL('../dist/index.js', import.meta.url).href;
// The server stand-in: two terminals, then it idles until killed. The first runs `bash -c` that
// ignores HUP, with two background children (one ignoring TERM too); the second an interactive
// shell whose background job, in a process group of its own, ignores HUP and TERM.
const SERVER = `
const { PtyManager } = await import(${JSON.stringify(dist)});
const manager = new PtyManager();
manager.spawn({ command: '/bin/bash', cols: 80, rows: 24,
  args: ['-c', "trap '' HUP; (trap '' TERM; sleep 7233; :) & sleep 7233 & sleep 7233"] });
const shell = manager.spawn({ command: '/bin/bash', args: ['--norc', '--noprofile', '-i'], cols: 80, rows: 24 });
shell.write("(trap '' HUP TERM; sleep 7233; :) &\\r");
shell.onData((chunk) => process.stdout.write(chunk));
setInterval(() => {}, 1000);
`;

describe.runIf(process.platform === 'linux')('a SIGKILLed server leaves nothing running', () => {
  for (const [path, fork, killWatchdogFirst] of [
    ['the spawn helper', '0', false],
    ['node-pty', '1', false],
    ['the spawn helper, after its first watchdog was killed', '0', true],
  ] as const) {
    it(`through ${path}`, async () => {
      const mark = `aleph-orphan-test-${process.pid}-${Date.now()}-${fork}`;
      marks.push(mark);
      const server = spawn(process.execPath, ['--input-type=module', '-e', SERVER], {
        env: { ...process.env, MARK: mark, ALEPH_PTY_FORK: fork },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let output = '';
      server.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('latin1')));
      try {
        const sleeps = () => marked(mark).filter(({ command }) => command === 'sleep 7233').length;
        // The shell's echo of the typed job, and the four sleeps (its job's among them).
        const typed = () => output.includes("(trap '' HUP TERM; sleep 7233; :) &");
        await until(() => typed() && sleeps() === 4, 'four sleeps to run', 20_000);
        if (killWatchdogFirst) {
          const watchdogs = () =>
            marked(mark).filter(({ command }) => command.endsWith('aleph-pty-watchdog'));
          const [first] = watchdogs();
          process.kill(first!.pid, 'SIGKILL');
          await until(() => watchdogs().some(({ pid }) => pid !== first!.pid), 'a new watchdog');
        }
      } catch (error) {
        server.kill('SIGKILL');
        throw error;
      }
      server.kill('SIGKILL');
      // The guarantee: none left 2 s after the kill (the watchdog sends SIGKILL 0.5 s after TERM).
      await until(() => marked(mark).length === 0, 'every process of the server to end', 2000).catch(
        () => {},
      );
      expect(marked(mark)).toEqual([]);
    });
  }
});
