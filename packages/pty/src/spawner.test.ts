// Spawning without forking the server (internal/spawner.ts), on Linux. Its own file: the last test
// kills the helper, and the module remembers that (it replaces a helper only a few times).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { PtyManager, PtySession } from './index.js';
import { sessionBelow } from './internal/process-table.js';
import { tableFor } from './internal/process-tree.js';
import { spawnWithoutFork, spawnWithoutForkLater, startTimeOf } from './internal/spawner.js';
import { alive, collect, until } from '../test/support.js';

const sessions: PtySession[] = [];
const spawn = (command: string, args: string[]) => {
  const session = PtySession.spawn({ command, args, cols: 80, rows: 24 });
  sessions.push(session);
  return session;
};
afterEach(async () => {
  await Promise.all(sessions.splice(0).map((session) => session.close()));
});

/** ppid, session id and controlling terminal of a process, from /proc. */
function stat(pid: number): { ppid: number; sid: number; ttyNr: number } {
  const text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = text.slice(text.lastIndexOf(')') + 2).split(' ');
  return { ppid: Number(fields[1]), sid: Number(fields[3]), ttyNr: Number(fields[4]) };
}

describe.runIf(process.platform === 'linux')('spawning without forking the server', () => {
  it("says at a program's exit whether anything of its session was left below the helper", async () => {
    const options = { cols: 80, rows: 24, cwd: '/', env: { PATH: process.env['PATH'] } };
    const alone = await spawnWithoutForkLater('/bin/sh', ['-c', 'exit 3'], options);
    expect(await new Promise((resolve) => alone!.onExit(resolve))).toMatchObject({
      exitCode: 3,
      sessionGone: true,
    });
    const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-left-'));
    try {
      const script = `trap "" HUP; sleep 30 & echo $! > ${dir}/job; exit 0`; // the job outlives the hang-up
      const leaving = await spawnWithoutForkLater('/bin/sh', ['-c', script], options);
      const exit = await new Promise((resolve) => leaving!.onExit(resolve));
      process.kill(Number(readFileSync(join(dir, 'job'), 'utf8')), 'SIGKILL');
      expect(exit).toMatchObject({ exitCode: 0, sessionGone: false });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('runs the program from the helper, as a session leader with its terminal as controlling tty', async () => {
    const session = spawn('/bin/sh', ['-c', 'tty; stty size; read line; echo "got $line"; exit 7']);
    const output = collect(session);
    const program = stat(session.pid);
    expect(program.ppid).not.toBe(process.pid); // not our child: nothing forked us
    expect(alive(program.ppid)).toBe(true);
    expect(program.sid).toBe(session.pid);
    expect(program.ttyNr).not.toBe(0);
    await output.waitFor(/\/dev\/pts\/\d+\r\n24 80\r\n/);
    session.write('hello\r');
    await output.waitFor(/got hello\r\n/);
    expect(await session.exited).toEqual({ exitCode: 7, signal: null, reason: 'exited' });
  });

  it("answers with the program's start time, as /proc gives it (no /proc read of ours at a spawn)", async () => {
    const pty = await spawnWithoutForkLater('/bin/sleep', ['5'], { cols: 80, rows: 24, cwd: '/', env: {} });
    expect(pty).toBeDefined();
    const text = readFileSync(`/proc/${pty!.pid}/stat`, 'utf8');
    const startTime = Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[19]);
    expect(startTimeOf(pty!)).toBe(startTime);
    process.kill(pty!.pid, 'SIGKILL');
    await new Promise((resolve) => pty!.onExit(resolve));
  });

  it('delivers Ctrl-C to the foreground job, which only a controlling terminal does', async () => {
    const session = spawn('/bin/bash', ['--norc', '--noprofile', '-i']);
    const output = collect(session);
    session.write('sleep 100\r');
    await until(() => /sleep 100/.test(output.text()), 'the command to be typed');
    await new Promise((resolve) => setTimeout(resolve, 200));
    session.write('\x03');
    session.write('echo "status $?"\r');
    await output.waitFor(/status 130/); // 128 + SIGINT: the terminal interrupted the foreground job
  });

  it('reports a signal, and the exit only after the last output', async () => {
    const session = spawn('/bin/sh', ['-c', 'head -c 300000 /dev/zero | tr "\\0" z; kill -TERM $$']);
    const output = collect(session);
    expect(await session.exited).toEqual({ exitCode: null, signal: 'SIGTERM', reason: 'exited' });
    expect(output.bytes().length).toBe(300000);
  });

  it('the helper outlives a Ctrl-C or hangup sent to the whole process group', async () => {
    const first = spawn('/bin/cat', []);
    const helper = stat(first.pid).ppid;
    expect(helper).not.toBe(process.pid);
    for (const signal of ['SIGINT', 'SIGHUP', 'SIGTERM'] as const) process.kill(helper, signal);
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(alive(helper)).toBe(true);
    expect(stat(spawn('/bin/cat', []).pid).ppid).toBe(helper);
  });

  it('a process that exits, even before its helper has booted, leaves no helper behind', async () => {
    const mark = `aleph-helper-test-${process.pid}-${Date.now()}`;
    const markedProcesses = () =>
      readdirSync('/proc').filter((entry) => {
        try {
          return /^\d+$/.test(entry) && readFileSync(`/proc/${entry}/environ`, 'latin1').includes(mark);
        } catch {
          return false; // gone meanwhile, or not ours to read
        }
      });
    const dist = new URL('../dist/index.js', import.meta.url).href;
    for (const script of [
      `const { PtyManager } = await import('${dist}'); new PtyManager(); process.exit(0);`,
      `const { PtyManager } = await import('${dist}'); new PtyManager().spawn({ command: '/bin/cat', cols: 80, rows: 24 }); process.exit(0);`,
    ]) {
      execFileSync(process.execPath, ['--input-type=module', '-e', script], {
        env: { ...process.env, MARK: mark },
        stdio: 'ignore', // or this would wait for a leftover helper, which inherits stderr
      });
      await until(() => markedProcesses().length === 0, 'the helper (and cat) to exit', 5000);
    }
  });

  it('passes arguments and environment intact; a program that cannot start is refused, and the helper goes on', async () => {
    const session = PtySession.spawn({
      command: '/bin/sh',
      args: ['-c', 'printf "%s|" "$@" "$ODD"', 'sh', 'two words', 'new\nline', 'é', ''],
      env: { ODD: 'a\nb=c ü' },
      cols: 80,
      rows: 24,
    });
    sessions.push(session);
    const output = collect(session);
    const helper = stat(spawn('/bin/cat', []).pid).ppid;
    expect(helper).not.toBe(process.pid);
    await session.exited;
    expect(output.text().replaceAll('\r\n', '\n')).toBe('two words|new\nline|é||a\nb=c ü|');
    const options = { cols: 80, rows: 24, cwd: '/', env: process.env };
    expect(() => spawnWithoutFork('/nonexistent/program', [], options)).toThrow(
      '/nonexistent/program: No such file or directory',
    );
    expect(() => spawnWithoutFork('/bin/true', [], { ...options, cwd: '/nonexistent' })).toThrow(
      '/nonexistent: No such file or directory',
    );
    expect(stat(spawn('/bin/cat', []).pid).ppid).toBe(helper);
  });

  it('start() does not block: the session comes from the helper; a failed program rejects with its reason', async () => {
    const session = await PtySession.start({
      command: '/bin/sh',
      args: ['-c', 'read l; echo "got $l"'],
      cols: 80,
      rows: 24,
    });
    sessions.push(session);
    const output = collect(session);
    expect(stat(session.pid).ppid).not.toBe(process.pid);
    session.write('it\r');
    await output.waitFor(/got it/);
    const options = { cols: 80, rows: 24, cwd: '/', env: process.env };
    await expect(spawnWithoutForkLater('/nonexistent/program', [], options)).rejects.toThrow(
      '/nonexistent/program: No such file or directory',
    );
  });

  it('a session is ended from the processes below its helper: the machine is not scanned', async () => {
    const session = spawn('/bin/sh', ['-c', 'sleep 1000 & sleep 1000']);
    const helper = stat(session.pid).ppid;
    await until(
      () => tableFor(helper).filter(({ session: sid }) => sid === session.pid).length === 3,
      'two sleeps',
    );
    const seen = tableFor(helper).map(({ pid }) => pid);
    expect(seen).toContain(helper);
    expect(seen).not.toContain(process.pid); // the server is not below its helper, nor is init
    expect(seen).not.toContain(1);
    await session.close();
    expect(tableFor(helper).filter(({ session: sid }) => sid === session.pid)).toEqual([]);
  });

  it("a session's end reads its own processes and what the helper adopted from it, not other terminals", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-'));
    const other = spawn('/bin/sh', ['-c', 'sleep 1000 & sleep 1000']);
    // HUP ignored: the background job outlives its shell, and the helper (the subreaper) adopts it.
    const ending = spawn('/bin/sh', ['-c', `trap '' HUP; sleep 1000 & echo $! > ${dir}/bg; exit 0`]);
    const helper = stat(other.pid).ppid; // the same helper: `ending` may be gone already
    await until(
      () => existsSync(join(dir, 'bg')) && readFileSync(join(dir, 'bg'), 'utf8').endsWith('\n'),
      'the job',
    );
    const orphan = Number(readFileSync(join(dir, 'bg'), 'utf8'));
    await until(
      () => !alive(ending.pid) && stat(orphan).ppid === helper,
      'the job to be adopted by the helper',
    );
    const seen = sessionBelow(helper, ending.pid, new Set([other.pid]))!.map(({ pid }) => pid);
    expect(seen).toContain(orphan);
    expect(seen).not.toContain(other.pid); // another running terminal is not entered
    expect(tableFor(helper).map(({ pid }) => pid)).toContain(other.pid); // (the whole walk would)
    await ending.exited;
    await until(() => !alive(orphan), 'the adopted job to be ended with its session');
    expect(alive(other.pid)).toBe(true);
    rmSync(dir, { recursive: true, force: true });
  });

  it("a session that left nothing, while other terminals run, is found empty from the helper's children alone", async () => {
    const other = spawn('/bin/sh', ['-c', 'sleep 1000']);
    const ending = spawn('/bin/sh', ['-c', 'exit 0']);
    const helper = stat(other.pid).ppid;
    await ending.exited;
    // Only the running terminal is below the helper: nothing of the ended session, nothing read.
    expect(sessionBelow(helper, ending.pid, new Set([other.pid]))).toEqual([]);
    // No running terminal to tell apart: the walk reads the helper itself (it may have died).
    expect(sessionBelow(helper, ending.pid, new Set())!.map(({ pid }) => pid)).toContain(helper);
    await other.close();
  });

  it('a burst of start() never leaves more than the cap', async () => {
    const manager = new PtyManager({ maxSessions: 4, killStepMs: 100 });
    const started = await Promise.allSettled(
      Array.from({ length: 12 }, () =>
        manager.start({ command: '/bin/sh', args: ['-c', 'sleep 1000'], cols: 80, rows: 24 }),
      ),
    );
    expect(manager.size).toBe(4);
    expect(started.filter(({ status }) => status === 'fulfilled').length).toBeGreaterThanOrEqual(4);
    await manager.closeAll();
  });

  it('a helper stopped while a start() waits does not stall the event loop: the start goes to node-pty', async () => {
    const first = spawn('/bin/cat', []);
    const helper = stat(first.pid).ppid;
    process.kill(helper, 'SIGSTOP');
    let ticks = 0;
    const ticker = setInterval(() => (ticks += 1), 5);
    const session = await PtySession.start({ command: '/bin/cat', cols: 80, rows: 24 });
    clearInterval(ticker);
    sessions.push(session);
    expect(ticks).toBeGreaterThan(0); // timers ran while the start waited
    expect(stat(session.pid).ppid).toBe(process.pid); // node-pty's fork
    await until(() => !alive(helper), 'the stopped helper to be killed');
  });

  it('if the helper hangs, the next spawn gives up on it, and running sessions still exit', async () => {
    const running = spawn('/bin/cat', []);
    const helper = stat(running.pid).ppid;
    expect(helper).not.toBe(process.pid);
    process.kill(helper, 'SIGSTOP'); // hung: it will not answer
    // Gives up on it at once (at most 250 ms: it was 5 s, all that time with the event loop
    // blocked), kills it, and spawns with node-pty instead.
    const started = performance.now();
    const next = spawn('/bin/sh', ['-c', 'read word; echo "fallback $word"; exit 3']);
    expect(performance.now() - started).toBeLessThan(2000); // a loose bound: 5000 fails, any load passes
    const output = collect(next);
    expect(stat(next.pid).ppid).toBe(process.pid);
    await until(() => !alive(helper), 'the hung helper to be killed');
    process.kill(running.pid, 'SIGTERM'); // nobody reports this exit now: the session polls for it
    // Unknown, and said so: not a false "exit code 0".
    expect(await running.exited).toEqual({
      exitCode: null,
      signal: null,
      reason: 'exited',
      statusLost: 'the spawn helper died before the program ended: its exit status is unknown',
    });
    next.write('works\r');
    expect(await next.exited).toEqual({ exitCode: 3, signal: null, reason: 'exited' });
    expect(output.text()).toContain('fallback works');
    // The spawn after that starts a new helper: the server does not fork from now on.
    const later = stat(spawn('/bin/cat', []).pid).ppid;
    expect([process.pid, helper]).not.toContain(later);
  });
});
