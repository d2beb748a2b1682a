import { chmodSync, copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PtyError, PtySession } from './index.js';
import { alive, collect, until } from '../test/support.js';

const sessions: PtySession[] = [];
const spawn = (options: Partial<Parameters<typeof PtySession.spawn>[0]> = {}) => {
  const session = PtySession.spawn({
    command: '/bin/bash',
    args: ['--norc', '--noprofile'],
    cols: 80,
    rows: 24,
    ...options,
  });
  sessions.push(session);
  return session;
};
afterEach(async () => {
  await Promise.all(sessions.splice(0).map((session) => session.close()));
});

describe('PtySession', () => {
  it('runs a shell: input in, raw output out', async () => {
    const session = spawn();
    const output = collect(session);
    session.write('echo hi\r');
    await output.waitFor(/[\r\n]hi\r\n/);
    expect(session.pid).toBeGreaterThan(0);
  });

  it('passes bytes through undecoded, including invalid UTF-8', async () => {
    const session = spawn({ command: '/bin/sh', args: ['-c', "printf '\\303\\251\\377\\376'; sleep 0.2"] });
    const output = collect(session);
    const info = await session.exited;
    expect(info).toEqual({ exitCode: 0, signal: null, reason: 'exited' });
    expect([...output.bytes()]).toEqual([0xc3, 0xa9, 0xff, 0xfe]);
  });

  it('reports exit only after the last output was delivered', async () => {
    const session = spawn({
      command: '/bin/sh',
      args: ['-c', 'head -c 300000 /dev/zero | tr "\\0" a; exit 7'],
    });
    const output = collect(session);
    let bytesAtExit = -1;
    session.onExit(() => (bytesAtExit = output.bytes().length));
    expect(await session.exited).toEqual({ exitCode: 7, signal: null, reason: 'exited' });
    expect(bytesAtExit).toBe(300_000);
    expect(session.scrollback.end).toBe(300_000);
  });

  it('onData chunks are for the listener to keep; onDataView sees the same bytes, in order', async () => {
    const session = spawn({ command: '/bin/sh', args: ['-c', 'stty raw -echo; seq 1 100000'] });
    const kept: Buffer[] = [];
    const viewed: Buffer[] = [];
    session.onData((chunk) => kept.push(chunk));
    session.onDataView((chunk) => viewed.push(Buffer.from(chunk)));
    await session.exited;
    const expected = `${Array.from({ length: 100000 }, (_, i) => i + 1).join('\n')}\n`;
    expect(kept.length).toBeGreaterThan(1);
    // Read after the program ended: a chunk that were a view of a reused buffer would have changed.
    // Where the bytes first differ from the program's output (-1: nowhere), not a diff of 580 KB.
    const differs = (chunks: Buffer[]) => {
      const text = Buffer.concat(chunks).toString('latin1');
      const at = [...expected].findIndex((char, index) => text[index] !== char);
      return at >= 0 || text.length !== expected.length ? { at, got: text.slice(at, at + 40) } : -1;
    };
    expect(differs(kept)).toBe(-1);
    expect(differs(viewed)).toBe(-1);
  });

  it('resizes: stty size sees the new size', async () => {
    const session = spawn();
    const output = collect(session);
    session.resize(132, 43);
    session.write('stty size\r');
    await output.waitFor(/[\r\n]43 132\r\n/);
    expect([session.cols, session.rows]).toEqual([132, 43]);
  });

  it('a missing program or working directory is a clear spawn_failed error, not an exit', () => {
    expect(() => spawn({ command: '/nonexistent/program' })).toThrow(
      new PtyError('spawn_failed', '/nonexistent/program: no such executable'),
    );
    expect(() => spawn({ command: 'no-such-program-aleph' })).toThrow(
      new PtyError('spawn_failed', 'no-such-program-aleph: no such executable on PATH'),
    );
    expect(() => spawn({ cwd: '/nonexistent-dir' })).toThrow(
      new PtyError('spawn_failed', 'working directory /nonexistent-dir does not exist or is not a directory'),
    );
    expect(spawn({ command: 'sh', args: ['-c', 'exit 0'] }).pid).toBeGreaterThan(0); // found on PATH
  });

  it('a program checked before is checked again once it changed: exec bit, content, replaced', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-checked-'));
    const program = join(dir, 'echo');
    const run = async () => {
      const session = spawn({ command: program, args: ['ran'] });
      const output = collect(session);
      await session.exited;
      return output.text();
    };
    try {
      copyFileSync('/bin/echo', program);
      chmodSync(program, 0o755);
      expect(await run()).toContain('ran');
      expect(await run()).toContain('ran'); // checked once, unchanged: taken as it is
      chmodSync(program, 0o644);
      expect(() => spawn({ command: program })).toThrow(/not executable/);
      chmodSync(program, 0o755);
      expect(await run()).toContain('ran');
      const bytes = readFileSync(program);
      bytes.writeUInt16LE(bytes.readUInt16LE(18) === 183 ? 62 : 183, 18); // arm64 <-> x86-64
      writeFileSync(program, bytes); // in place: same inode and mode
      expect(() => spawn({ command: program })).toThrow(/is built for (arm64|x64), this machine is/);
      rmSync(program);
      expect(() => spawn({ command: program })).toThrow(/no such executable/);
      copyFileSync('/bin/echo', program);
      chmodSync(program, 0o755);
      expect(await run()).toContain('ran');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('rejects a bad size with a clear error', () => {
    expect(() => spawn({ cols: 0 })).toThrow(
      new PtyError('invalid_size', 'cols must be an integer from 1 to 10000, got 0'),
    );
    const session = spawn();
    expect(() => session.resize(80, 1.5)).toThrow(/rows must be an integer/);
  });

  it('close ends the whole tree, a background job included, and says closed', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-'));
    const session = spawn();
    const output = collect(session);
    session.write(`sleep 1000 & echo $! > ${dir}/bg; trap '' HUP; echo ready\r`);
    await output.waitFor(/[\r\n]ready\r\n/);
    const background = Number(readFileSync(join(dir, 'bg'), 'utf8'));
    expect(alive(background)).toBe(true);
    const info = await session.close();
    expect(info.reason).toBe('closed');
    await until(() => !alive(background) && !alive(session.pid), 'the tree to end');
    rmSync(dir, { recursive: true, force: true });
  });

  it('a program that ignores HUP and TERM is killed after the deadline', async () => {
    const session = spawn({
      command: '/bin/sh',
      args: ['-c', "trap '' HUP TERM; echo armed; while :; do sleep 0.05; done"],
      killStepMs: 150,
    });
    const output = collect(session);
    await output.waitFor(/armed/);
    expect(await session.close()).toEqual({ exitCode: null, signal: 'SIGKILL', reason: 'closed' });
    expect(alive(session.pid)).toBe(false);
  });

  it('leaves nothing behind when the program exits on its own', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-'));
    const session = spawn({ command: '/bin/sh', args: ['-c', `sleep 1000 & echo $! > ${dir}/bg; exit 0`] });
    await session.exited;
    const background = Number(readFileSync(join(dir, 'bg'), 'utf8'));
    await until(() => !alive(background), 'the orphaned background job to be ended');
    rmSync(dir, { recursive: true, force: true });
  });

  it('pause stops reading (the program blocks), resume continues', async () => {
    const session = spawn({ command: '/bin/sh', args: ['-c', 'head -c 5000000 /dev/zero | tr "\\0" b'] });
    const output = collect(session);
    await until(() => output.bytes().length > 0, 'first output');
    session.pause();
    await new Promise((resolve) => setTimeout(resolve, 100));
    const atPause = output.bytes().length;
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(output.bytes().length).toBe(atPause);
    expect(atPause).toBeLessThan(5_000_000);
    session.resume();
    await session.exited;
    expect(output.bytes().length).toBe(5_000_000);
  });

  it('keeps the tail of a program that exits while output is paused', async () => {
    const session = spawn({
      command: '/bin/sh',
      args: ['-c', 'sleep 0.2; head -c 3000 /dev/zero | tr "\\0" c'],
    });
    const output = collect(session);
    session.pause();
    await session.exited;
    expect(output.bytes().length).toBe(3000);
  });

  it('never loses the last output of a fast producer (node-pty EOF race)', async () => {
    // Without the drain in PtySession, node-pty alone lost a tail in most such runs here.
    for (let round = 0; round < 12; round += 1) {
      const session = spawn({ command: '/bin/sh', args: ['-c', 'head -c 1000000 /dev/zero | tr "\\0" d'] });
      const output = collect(session);
      await session.exited;
      expect(output.bytes().length).toBe(1_000_000);
    }
  });

  it('many floods at once take turns: each gets all its output, in order, and exits', async () => {
    const floods = Array.from({ length: 12 }, (_, i) =>
      spawn({ command: '/bin/sh', args: ['-c', `head -c 600000 /dev/zero | tr "\\0" ${'abcdefghijkl'[i]}`] }),
    );
    const outputs = floods.map((session) => collect(session));
    // Typing meanwhile makes the floods yield for a few turns each time; nothing is lost either way.
    const typed = spawn({ command: '/bin/cat', args: [] });
    const echoed = collect(typed);
    const typing = setInterval(() => typed.write('k'), 2);
    try {
      await Promise.all(floods.map((session) => session.exited));
    } finally {
      clearInterval(typing);
    }
    await until(() => echoed.bytes().length > 0, 'the echo');
    outputs.forEach((output, i) => {
      expect(output.bytes().length).toBe(600_000);
      expect(output.bytes().every((byte) => byte === 'abcdefghijkl'.charCodeAt(i))).toBe(true);
    });
  });

  it('replays from an offset out of the scrollback', async () => {
    const session = spawn({ command: '/bin/sh', args: ['-c', 'printf 0123456789'], scrollbackBytes: 4 });
    await session.exited;
    expect(session.replay(0)).toEqual({ offset: 6, data: Buffer.from('6789') });
    expect(session.replay(8)).toEqual({ offset: 8, data: Buffer.from('89') });
  });

  it('counts input the program has not read yet', async () => {
    // Raw mode: in canonical mode the kernel discards an over-long line instead of pushing back.
    const session = spawn({ command: '/bin/sh', args: ['-c', 'stty raw -echo; echo ready; sleep 1000'] });
    await collect(session).waitFor(/ready/);
    session.write(Buffer.alloc(256 * 1024, 0x61));
    await until(() => session.pendingInputBytes > 0, 'input to back up');
    expect(session.pendingInputBytes).toBeLessThanOrEqual(256 * 1024);
  });

  it('refuses writes after close', async () => {
    const session = spawn();
    await session.close();
    expect(() => session.write('x')).toThrow(PtyError);
  });

  it('inheritEnv: false gives the program env alone, nothing of the server environment', async () => {
    // A sandbox's wrapper (bwrap) is the sandbox's pid 1: its environ is readable from inside.
    process.env['ALEPH_PTY_TEST_SECRET'] = 'server-secret';
    try {
      const environ = async (inheritEnv: boolean | undefined): Promise<string[]> => {
        const session = spawn({
          command: '/bin/cat',
          args: ['/proc/self/environ'],
          env: { ALLOWED: 'yes' },
          inheritEnv,
        });
        const output = collect(session);
        await session.exited;
        return output.text().split('\0');
      };
      const inherited = await environ(undefined); // the default, for a user's terminal: unchanged
      expect(inherited).toContain('ALEPH_PTY_TEST_SECRET=server-secret');
      expect(inherited).toContain('ALLOWED=yes');
      const exact = await environ(false);
      expect(exact.filter((entry) => entry !== '').sort()).toEqual(
        ['ALLOWED=yes', `PWD=${process.cwd()}`, 'TERM=xterm-256color'].sort(),
      );
    } finally {
      delete process.env['ALEPH_PTY_TEST_SECRET'];
    }
  });
});
