// A program in a terminal starts with stdin, stdout and stderr only: a descriptor the server
// inherited without FD_CLOEXEC (a launcher's pipe; a file outside a sandbox, which bwrap passes on
// to the sandboxed command) must not reach it. A real server-like process is started with such a
// descriptor and runs `ls -l /proc/self/fd` in a terminal through PtyManager (the spawn helper).
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const dist = new URL('../dist/index.js', import.meta.url).href;
const SERVER = `
const { PtyManager } = await import(${JSON.stringify(dist)});
const manager = new PtyManager();
const session = manager.spawn({ command: '/bin/ls', args: ['-l', '/proc/self/fd'], cols: 200, rows: 50 });
session.onData((chunk) => process.stdout.write(chunk));
await session.exited;
await manager.closeAll();
`;
const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-fds-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.runIf(process.platform === 'linux')('descriptors the server inherited', () => {
  it.each([
    ['the spawn helper', '0'],
    ['node-pty', '1'],
  ])(
    'do not reach a program in a terminal, through %s: only 0, 1, 2 (and what ls opens)',
    async (_, fork) => {
      const leaked = join(dir, 'leaked-outside.log');
      const fd = openSync(leaked, 'a');
      let output = '';
      try {
        // The file is the server's fd 9, inherited (node's stdio entries are not close-on-exec).
        const server = spawn(process.execPath, ['--input-type=module', '-e', SERVER], {
          env: { ...process.env, ALEPH_PTY_FORK: fork },
          stdio: [
            'ignore',
            'pipe',
            'inherit',
            'ignore',
            'ignore',
            'ignore',
            'ignore',
            'ignore',
            'ignore',
            fd,
          ],
        });
        server.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
        const code = await new Promise((resolve) => server.once('exit', resolve));
        expect(code).toBe(0);
      } finally {
        closeSync(fd);
      }
      const entries = [...output.matchAll(/ (\d+) -> (\S+)/g)].map(([, number, target]) => [
        Number(number),
        target,
      ]);
      expect(entries.length).toBeGreaterThanOrEqual(3);
      expect(entries.map(([, target]) => target)).not.toContain(leaked);
      // Past 0-2, only the directory ls is listing.
      expect(entries.filter(([number]) => (number as number) > 2).map(([, target]) => target)).toEqual([
        expect.stringMatching(/^\/proc\/\d+\/fd$/),
      ]);
    },
  );
});
