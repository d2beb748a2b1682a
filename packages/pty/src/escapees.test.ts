// No orphans from programs that leave their terminal's session (Linux): `setsid sleep &`,
// `setsid -f`, a daemon that double-forks into a session of its own, a `setsid` child of a shell
// that is still running. A real server-like process starts them in its terminals, then either shuts
// its PtyManager down (SIGTERM handler, the process stays up) or is SIGKILLed. Afterwards none of
// them may be left, not even as a zombie. Each sleep carries a marker in its argument, found by a
// scan of /proc; whatever a failed case leaves is killed after the file.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { until } from '../test/support.js';

interface Entry {
  readonly pid: number;
  readonly ppid: number;
  readonly state: string;
  readonly command: string;
}

function processes(): Entry[] {
  const found: Entry[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const [state = '', ppid = '0'] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      const command = readFileSync(`/proc/${name}/cmdline`, 'latin1').replaceAll('\0', ' ').trim();
      found.push({ pid: Number(name), ppid: Number(ppid), state, command });
    } catch {
      // gone meanwhile
    }
  }
  return found;
}

/** Live (non-zombie) processes whose command line carries `marker`. */
const sleeping = (marker: string) =>
  processes().filter(({ state, command }) => state !== 'Z' && command.includes(`.${marker}`));
/** Which of the stand-in's sleeps run: each sleep's argument ends with the marker and its number. */
const kinds = (marker: string) =>
  new Set(
    sleeping(marker).flatMap(
      ({ command }) => new RegExp(`^sleep \\d+\\.${marker}(\\d)$`).exec(command)?.[1] ?? [],
    ),
  );

const markers: string[] = [];
const servers: ChildProcess[] = [];
afterAll(() => {
  for (const server of servers) server.kill('SIGKILL');
  for (const marker of markers) for (const { pid } of sleeping(marker)) process.kill(pid, 'SIGKILL');
});

const dist = new URL('../dist/index.js', import.meta.url).href;
// The server stand-in: an interactive shell and a `bash -c` program. SIGTERM shuts the manager
// down (and says so on stdout) but the process stays, so what ends the escapees is closeAll().
const SERVER = `
const { PtyManager } = await import(${JSON.stringify(dist)});
const manager = new PtyManager({ killStepMs: 200 });
const marker = process.env.MARKER;
const program = manager.spawn({ command: '/bin/bash', cols: 80, rows: 24,
  args: ['-c', \`setsid sleep 1000.\${marker}1 & sleep 1000.\${marker}2; :\`] });
const shell = manager.spawn({ command: '/bin/bash', args: ['--norc', '--noprofile', '-i'], cols: 80, rows: 24 });
shell.write(\`setsid sleep 1000.\${marker}3 &\\r\`);
shell.write(\`sh -c '(setsid sh -c "sleep 1000.\${marker}4 & exit") &'\\r\`);
shell.write(\`setsid -f sleep 1000.\${marker}5\\r\`);
shell.write(\`(setsid sh -c 'exit 3' &)\\r\`);
// It ignores HUP and TERM and forks all the time, so it forks while it is being killed.
shell.write(\`setsid sh -c 'trap "" HUP TERM; while :; do sleep 1.\${marker}6 & sleep 0.05; done' &\\r\`);
console.log('helper', program.pid, shell.pid);
process.on('SIGTERM', () => void manager.closeAll().then(() => console.log('closed')));
setInterval(() => {}, 1000);
`;

/**
 * Starts the stand-in (`detached`: leading a process group of its own); resolves once its six
 * kinds of sleep run, with its spawn helper's pid.
 */
async function startServer(
  marker: string,
  detached = false,
): Promise<{ server: ChildProcess; output: () => string; helper: number }> {
  markers.push(marker);
  const server = spawn(process.execPath, ['--input-type=module', '-e', SERVER], {
    env: { ...process.env, MARKER: marker, ALEPH_PTY_FORK: '0' },
    stdio: ['ignore', 'pipe', 'inherit'],
    detached,
  });
  servers.push(server);
  let output = '';
  server.stdout.on('data', (chunk: Buffer) => (output += chunk.toString('latin1')));
  await until(() => kinds(marker).size === 6, 'six kinds of sleep to run', 20_000);
  const leader = Number(/helper (\d+)/.exec(output)?.[1]);
  const helper = processes().find(({ pid }) => pid === leader)?.ppid ?? 0;
  expect(helper).not.toBe(server.pid);
  return { server, output: () => output, helper };
}

describe.runIf(process.platform === 'linux')('a program that escapes its session', () => {
  it('is ended, and reaped, when the manager shuts down (the server still runs)', async () => {
    const marker = `${process.pid % 10000}${Date.now() % 100000}`;
    const { server, output, helper } = await startServer(marker);
    server.kill('SIGTERM');
    await until(() => output().includes('closed'), 'closeAll() to resolve', 10_000);
    expect(sleeping(marker)).toEqual([]);
    // Reaped, not left as zombies under the helper (which is still there: the server runs).
    await until(() => !processes().some(({ ppid, state }) => ppid === helper && state === 'Z'), 'no zombie');
    expect(processes().some(({ pid }) => pid === helper)).toBe(true);
    server.kill('SIGKILL');
  });

  for (const group of [false, true])
    it(`is ended when the server${group ? "'s whole process group" : ''} is SIGKILLed`, async () => {
      const marker = `${process.pid % 10000}${(Date.now() + 1) % 100000}`;
      const { server, helper } = await startServer(marker, group);
      process.kill(group ? -server.pid! : server.pid!, 'SIGKILL');
      // The same bound as for a terminal's own processes: none left 2 s after the kill.
      await until(() => sleeping(marker).length === 0, 'every escapee to end', 2000).catch(() => {});
      expect(sleeping(marker)).toEqual([]);
      await until(() => !processes().some(({ pid }) => pid === helper), 'the helper to exit', 2000);
    });
});
