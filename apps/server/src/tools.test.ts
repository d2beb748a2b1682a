import { execFileSync, spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ToolService } from '@aleph/harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerPtys } from './agent-ptys.js';
import { builtinTools, SHELL_OUTPUT_CAP, type Goal } from './tools.js';
import { LIST_MAX_CHARS, LIST_MAX_ENTRIES } from './workdir-files.js';

let dir: string;
const ptys = new ServerPtys({ killStepMs: 100 }, { maxSessions: 4, killStepMs: 100 });
const goals = new Map<string, Goal>();
let tools: ToolService;
const ctx = { signal: new AbortController().signal, sessionId: 's1' };
beforeAll(() => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-tools-')));
  tools = new ToolService(
    builtinTools({ cwd: dir, ptyManager: ptys.agents, goals, defaultShellTimeoutMs: 10_000 }),
  );
});
afterAll(async () => {
  await ptys.closeAll();
  rmSync(dir, { recursive: true, force: true });
});

const call = async (name: string, args: unknown) => {
  const parsed = tools.parse(name, args);
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.tool.execute(parsed.args, ctx);
};

describe('built-in tools', () => {
  it('write_file, read_file, edit_file (exact, unique), list_files', async () => {
    expect(await call('write_file', { path: 'src/a.txt', content: 'one two two' })).toEqual({
      output: 'wrote 11 bytes to src/a.txt',
    });
    expect(await call('read_file', { path: 'src/a.txt' })).toEqual({ output: 'one two two' });
    expect(await call('edit_file', { path: 'src/a.txt', old_string: 'two', new_string: '2' })).toMatchObject({
      isError: true,
      output: expect.stringContaining('occurs 2 times'),
    });
    expect(await call('edit_file', { path: 'src/a.txt', old_string: 'one', new_string: '$1' })).toEqual({
      output: 'edited src/a.txt',
    });
    expect(readFileSync(join(dir, 'src/a.txt'), 'utf8')).toBe('$1 two two');
    expect(await call('list_files', {})).toMatchObject({ output: expect.stringContaining('src/') });
  });

  it('edit_file counts an old_string that is not unique up to a bound, with no copy of the file', async () => {
    await call('write_file', { path: 'many-a.txt', content: 'a'.repeat(5000) });
    expect(await call('edit_file', { path: 'many-a.txt', old_string: 'a', new_string: 'b' })).toEqual({
      output: 'old_string occurs more than 1,000 times in many-a.txt; it must occur exactly once',
      isError: true,
    });
    expect(
      await call('edit_file', { path: 'many-a.txt', old_string: 'a'.repeat(2000), new_string: 'b' }),
    ).toEqual({
      output: 'old_string occurs 2 times in many-a.txt; it must occur exactly once',
      isError: true,
    });
    expect(await call('edit_file', { path: 'many-a.txt', old_string: 'x', new_string: 'b' })).toMatchObject({
      output: 'old_string occurs 0 times in many-a.txt; it must occur exactly once',
    });
  });

  it('list_files reads a folder of many entries only up to its bound, and says the rest was not listed', async () => {
    const many = join(dir, 'many');
    mkdirSync(many);
    for (let i = 0; i < LIST_MAX_ENTRIES + 5; i++)
      writeFileSync(join(many, `f${String(i).padStart(5, '0')}`), '');
    const listed = (await call('list_files', { path: 'many' })) as { output: string; isError?: boolean };
    const lines = listed.output.split('\n');
    expect(lines).toHaveLength(LIST_MAX_ENTRIES + 1);
    expect(lines.slice(0, -1)).toEqual([...lines.slice(0, -1)].sort());
    expect(lines.at(-1)).toMatch(
      /^\[10000 entries listed, more not: a listing stops at 10,000 entries or 256 KiB of names;/,
    );
    // Long names: the bound in characters comes first.
    const long = join(dir, 'long');
    mkdirSync(long);
    for (let i = 0; i < 1100; i++)
      writeFileSync(join(long, `${String(i).padStart(4, '0')}${'x'.repeat(240)}`), '');
    const cut = (await call('list_files', { path: 'long' })) as { output: string };
    expect(cut.output.length).toBeLessThan(LIST_MAX_CHARS + 400);
    expect(cut.output).toMatch(/\n\[\d+ entries listed, more not:/);
    // A folder within the bounds is listed whole, with no note.
    rmSync(join(many, 'f00000'));
    for (let i = 6; i < LIST_MAX_ENTRIES; i++) rmSync(join(many, `f${String(i).padStart(5, '0')}`));
    expect(await call('list_files', { path: 'many' })).toEqual({
      output: [
        'f00001',
        'f00002',
        'f00003',
        'f00004',
        'f00005',
        'f10000',
        'f10001',
        'f10002',
        'f10003',
        'f10004',
      ].join('\n'),
    });
  });

  it('a path with a NUL byte is an invalid call naming it, for each file tool', () => {
    for (const name of ['read_file', 'write_file', 'edit_file', 'list_files']) {
      const parsed = tools.parse(name, { path: 'a\0b', content: '', old_string: 'x', new_string: '' });
      expect(parsed).toEqual({
        ok: false,
        error: `invalid arguments for ${name}: path: must not contain a NUL byte`,
      });
    }
  });

  it('write_file and edit_file write no file over the configured file size, as a command could not', async () => {
    const limited = new ToolService(
      builtinTools({
        cwd: dir,
        ptyManager: ptys.agents,
        goals,
        defaultShellTimeoutMs: 10_000,
        maxFileBytes: 10,
      }),
    );
    const limitedCall = async (name: string, args: unknown) => {
      const parsed = limited.parse(name, args);
      if (!parsed.ok) throw new Error(parsed.error);
      return parsed.tool.execute(parsed.args, ctx);
    };
    expect(await limitedCall('write_file', { path: 'small.txt', content: '0123456789' })).toEqual({
      output: 'wrote 10 bytes to small.txt',
    });
    const refusal =
      'the file would be 11 bytes, over the largest a command may write ([sandbox.limits] file_size_mib: 10 bytes)';
    expect(await limitedCall('write_file', { path: 'big.txt', content: '0123456789A' })).toEqual({
      output: `refused: big.txt: ${refusal}`,
      isError: true,
    });
    expect(existsSync(join(dir, 'big.txt'))).toBe(false);
    expect(await limitedCall('edit_file', { path: 'small.txt', old_string: '9', new_string: '9A' })).toEqual({
      output: `refused: small.txt: ${refusal}`,
      isError: true,
    });
    expect(readFileSync(join(dir, 'small.txt'), 'utf8')).toBe('0123456789');
  });

  it('confines paths to the working directory, symlinks included', async () => {
    mkdirSync(join(dir, 'inside'), { recursive: true });
    symlinkSync('/etc', join(dir, 'inside', 'escape'));
    for (const path of ['../outside.txt', '/etc/passwd', 'inside/escape/passwd']) {
      expect(await call('read_file', { path })).toMatchObject({
        isError: true,
        output: expect.stringContaining('outside the working directory'),
      });
    }
    expect(await call('write_file', { path: 'inside/escape/x', content: 'x' })).toMatchObject({
      isError: true,
    });
  });

  it("shell runs in a pty of the agents' pool, returns the exit code (non-zero: an error), caps output", async () => {
    writeFileSync(join(dir, 'f.txt'), 'file body\n');
    let watched: string | undefined;
    const local = new ToolService(
      builtinTools({
        cwd: dir,
        ptyManager: ptys.agents,
        goals,
        defaultShellTimeoutMs: 10_000,
        onShell: (info) => (watched = info.ptySessionId),
      }),
    );
    const parsed = local.parse('shell', { command: 'cat f.txt; exit 3' });
    if (!parsed.ok) throw new Error(parsed.error);
    const result = await parsed.tool.execute(parsed.args, ctx);
    expect(result).toEqual({ output: 'file body\n\n[exit code 3]', isError: true });
    expect(watched).toBeDefined();
    expect(ptys.list().map((session) => session.id)).not.toContain(watched); // ended with its command
    const big = await call('shell', { command: 'head -c 300000 /dev/zero | tr "\\0" y' });
    expect(big.output.length).toBeLessThan(SHELL_OUTPUT_CAP + 200);
    expect(big.output).toContain('characters cut');
  });

  // Past 256 KiB the "end" was a chunk from the middle and the count that of a prefix.
  it('shell: a big output keeps its true head and end, and says exactly how much was cut', async () => {
    const big = await call('shell', { command: 'seq 1 200000; echo TAIL-MARK' });
    let total = 'TAIL-MARK\n'.length;
    for (let n = 1; n <= 200_000; n += 1) total += String(n).length + 1;
    expect(big.output.startsWith('1\n2\n3\n')).toBe(true);
    expect(big.output.endsWith('\n199999\n200000\nTAIL-MARK\n\n[exit code 0]')).toBe(true);
    expect(big.output).toContain(`…[${total - SHELL_OUTPUT_CAP} characters cut]…`);
  });

  // [agent] tool_timeout_secs is a hard cap the model cannot lift.
  it("shell: the model's timeout_secs cannot raise the configured timeout", async () => {
    const capped = new ToolService(
      builtinTools({ cwd: dir, ptyManager: ptys.agents, goals, defaultShellTimeoutMs: 300 }),
    );
    const parsed = capped.parse('shell', { command: 'sleep 100', timeout_secs: 3600 });
    if (!parsed.ok) throw new Error(parsed.error);
    expect(await parsed.tool.execute(parsed.args, ctx)).toMatchObject({
      isError: true,
      output: expect.stringContaining('timed out after 300 ms'),
    });
  });

  it('shell: a command past its timeout is killed and reported', async () => {
    const result = await call('shell', { command: 'sleep 100', timeout_secs: 0.3 });
    expect(result).toMatchObject({
      isError: true,
      output: expect.stringContaining('timed out after 300 ms'),
    });
  });

  it('todo returns the execution list for the to-do gate; goal refuses an unsafe gate command', async () => {
    const todo = await call('todo', {
      items: [
        { text: 'write', status: 'done' },
        { text: 'test', status: 'open' },
      ],
    });
    expect(todo.scratchpad).toEqual([
      { text: 'write', status: 'done' },
      { text: 'test', status: 'open' },
    ]);
    expect(await call('goal', { objective: 'x', gate_command: 'pnpm test; rm -rf /' })).toMatchObject({
      isError: true,
      output: expect.stringContaining('";"'),
    });
    expect(goals.has('s1')).toBe(false);
    expect(await call('goal', { objective: 'x', gate_command: 'test -f f.txt' })).toEqual({
      output: 'goal recorded; gate: test -f f.txt',
    });
    expect(goals.get('s1')).toEqual({ objective: 'x', gateCommand: 'test -f f.txt' });
  });
});

describe('file tools refuse what is not a regular file inside the working directory', () => {
  it('a FIFO is refused at once by read_file, write_file and edit_file (no open() that blocks)', async () => {
    for (const name of ['f1', 'f2', 'f3', 'f4', 'f5']) execFileSync('mkfifo', [join(dir, name)]);
    // More calls than libuv has workers: a blocking open() on any of them would wedge the rest.
    const results = await Promise.all([
      ...['f1', 'f2', 'f3', 'f4', 'f5'].map((path) => call('read_file', { path })),
      call('write_file', { path: 'f1', content: 'x' }),
      call('edit_file', { path: 'f2', old_string: 'a', new_string: 'b' }),
    ]);
    for (const result of results) {
      expect(result).toEqual({ output: expect.stringMatching(/^refused: f\d is a FIFO/), isError: true });
    }
    expect(await call('read_file', { path: 'src' })).toEqual({
      output: 'refused: src is a directory, not a regular file',
      isError: true,
    });
  });

  it('read_file applies its cap while reading: a 3 GiB sparse file gives its head and tail', async () => {
    const big = join(dir, 'sparse.bin');
    writeFileSync(big, 'HEAD');
    truncateSync(big, 3 * 1024 ** 3);
    const result = await call('read_file', { path: 'sparse.bin' });
    expect(result.isError).toBeUndefined();
    expect(result.output.startsWith('HEAD')).toBe(true);
    expect(result.output).toContain(`…[${3 * 1024 ** 3 - 256 * 1024} bytes cut]…`);
    rmSync(big);
  });
});

describe("the file tools refuse the sandbox's denied paths inside the working directory", () => {
  // `--cwd ~` puts ~/.ssh inside the run's cwd; a deny_read path or the state dir can lie there too.
  let project: string;
  let denyTools: ToolService;
  const denyCall = async (name: string, args: unknown) => {
    const parsed = denyTools.parse(name, args);
    if (!parsed.ok) throw new Error(parsed.error);
    return parsed.tool.execute(parsed.args, ctx);
  };
  beforeAll(() => {
    project = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-denied-')));
    mkdirSync(join(project, '.ssh'));
    writeFileSync(join(project, '.ssh', 'id_ed25519'), 'private-key');
    writeFileSync(join(project, 'notes.txt'), 'fine');
    symlinkSync('.ssh/id_ed25519', join(project, 'key-alias'));
    const denied = [{ path: join(project, '.ssh'), key: '[sandbox] deny_read' }];
    denyTools = new ToolService(
      builtinTools({ cwd: project, denied, ptyManager: ptys.agents, goals, defaultShellTimeoutMs: 10_000 }),
    );
  });
  afterAll(() => rmSync(project, { recursive: true, force: true }));

  it('read_file, write_file, edit_file and list_files refuse them, naming the key; the rest works', async () => {
    const refused = {
      isError: true,
      output: expect.stringMatching(/is under .*\.ssh, denied by \[sandbox\] deny_read$/),
    };
    expect(await denyCall('read_file', { path: '.ssh/id_ed25519' })).toMatchObject(refused);
    expect(await denyCall('read_file', { path: 'key-alias' })).toMatchObject(refused);
    expect(
      await denyCall('edit_file', { path: '.ssh/id_ed25519', old_string: 'private', new_string: 'x' }),
    ).toMatchObject(refused);
    expect(
      await denyCall('write_file', { path: '.ssh/authorized_keys', content: 'ssh-ed25519 AAAA' }),
    ).toMatchObject(refused);
    expect(await denyCall('list_files', { path: '.ssh' })).toMatchObject(refused);
    expect(existsSync(join(project, '.ssh', 'authorized_keys'))).toBe(false);
    expect(readFileSync(join(project, '.ssh', 'id_ed25519'), 'utf8')).toBe('private-key');
    expect(await denyCall('read_file', { path: 'notes.txt' })).toEqual({ output: 'fine' });
  });
});

describe('the file tools refuse what the sandbox keeps read-only', () => {
  it('.claude, HEAD, .git/hooks, .git/config, .git/commondir and the listed files; the rest of .git works', async () => {
    const project = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-readonly-')));
    try {
      mkdirSync(join(project, '.git', 'hooks'), { recursive: true });
      writeFileSync(join(project, '.git', 'config'), '[core]\n');
      writeFileSync(join(project, 'aleph.toml'), '[agent]\n');
      const readOnly = [{ path: join(project, 'aleph.toml'), key: "the server's config file" }];
      const own = new ToolService(
        builtinTools({
          cwd: project,
          readOnly,
          ptyManager: ptys.agents,
          goals,
          defaultShellTimeoutMs: 10_000,
        }),
      );
      const ownCall = async (name: string, args: unknown) => {
        const parsed = own.parse(name, args);
        if (!parsed.ok) throw new Error(parsed.error);
        return parsed.tool.execute(parsed.args, ctx);
      };
      for (const path of [
        '.claude/settings.json',
        'HEAD',
        '.git/hooks/pre-commit',
        '.git/config',
        '.git/commondir',
      ]) {
        expect(await ownCall('write_file', { path, content: 'x' })).toEqual({
          isError: true,
          output: expect.stringMatching(/^refused: .* is kept read-only/),
        });
      }
      expect(
        await ownCall('edit_file', {
          path: '.git/config',
          old_string: '[core]',
          new_string: '[core] fsmonitor = x',
        }),
      ).toMatchObject({ isError: true });
      expect(await ownCall('write_file', { path: 'aleph.toml', content: 'x' })).toEqual({
        isError: true,
        output: `refused: "aleph.toml": the server's config file`,
      });
      expect(existsSync(join(project, '.claude'))).toBe(false);
      expect(readFileSync(join(project, '.git', 'config'), 'utf8')).toBe('[core]\n');
      expect(await ownCall('write_file', { path: '.git/description', content: 'ok' })).toEqual({
        output: 'wrote 2 bytes to .git/description',
      });
    } finally {
      rmSync(project, { recursive: true, force: true });
    }
  });
});

describe('no write leaves the working directory through a symlink', () => {
  let outside: string;
  beforeAll(() => {
    outside = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-outside-')));
  });
  afterAll(() => rmSync(outside, { recursive: true, force: true }));

  it('a dangling symlink to a file outside is refused and nothing is created there', async () => {
    symlinkSync(join(outside, 'x'), join(dir, 'dangling'));
    expect(await call('write_file', { path: 'dangling', content: 'escaped' })).toMatchObject({
      isError: true,
      output: expect.stringContaining('outside the working directory'),
    });
    expect(existsSync(join(outside, 'x'))).toBe(false);
  });

  it('a nested chain of links (one dangling, into a folder outside) is refused', async () => {
    mkdirSync(join(dir, 'n'));
    symlinkSync('../n2', join(dir, 'n', 'hop')); // n/hop -> n2 (itself a link) -> outside/deep (missing)
    symlinkSync(join(outside, 'deep'), join(dir, 'n2'));
    symlinkSync('../n3', join(dir, 'n', 'file-hop')); // n/file-hop -> n3 -> outside/deep-file (missing)
    symlinkSync(join(outside, 'deep-file'), join(dir, 'n3'));
    for (const path of ['n/hop/file.txt', 'n2/a/b/file.txt', 'n/file-hop']) {
      expect(await call('write_file', { path, content: 'escaped' })).toMatchObject({
        isError: true,
        output: expect.stringContaining('outside the working directory'),
      });
    }
    expect(execFileSync('ls', ['-A', outside]).toString()).toBe('');
  });

  it('a link inside that points inside still works', async () => {
    writeFileSync(join(dir, 'real.txt'), 'real body');
    symlinkSync('real.txt', join(dir, 'alias.txt'));
    expect(await call('read_file', { path: 'alias.txt' })).toEqual({ output: 'real body' });
    expect(await call('write_file', { path: 'alias.txt', content: 'through the alias' })).toEqual({
      output: 'wrote 17 bytes to real.txt',
    });
    expect(readFileSync(join(dir, 'real.txt'), 'utf8')).toBe('through the alias');
  });

  it('a folder swapped for a link to the outside while writing never lets a write through', async () => {
    // Another process flips race/ between a real folder and a link to `outside` as fast as it can.
    const swapper = spawn(
      process.execPath,
      [
        '-e',
        `const fs = require('fs'); const d = process.argv[1], o = process.argv[2];
         fs.mkdirSync(d + '.dir'); fs.symlinkSync(o, d + '.link');
         for (;;) { fs.renameSync(d + '.dir', d); fs.renameSync(d, d + '.dir');
                    fs.renameSync(d + '.link', d); fs.renameSync(d, d + '.link'); }`,
        join(dir, 'race'),
        outside,
      ],
      { stdio: 'ignore' },
    );
    let landed = 0;
    try {
      // The racer is a fresh node process: on a loaded machine it can take seconds to start.
      await expect
        .poll(() => existsSync(join(dir, 'race.link')) || existsSync(join(dir, 'race')), { timeout: 20_000 })
        .toBe(true);
      for (let index = 0; index < 300; index += 1) {
        const wrote = await call('write_file', { path: `race/f${index}.txt`, content: 'x' });
        if (!wrote.isError) landed += 1;
        await call('edit_file', { path: `race/f${index}.txt`, old_string: 'x', new_string: 'y' });
      }
    } finally {
      swapper.kill('SIGKILL');
    }
    expect(landed).toBeGreaterThan(0); // the folder was there often enough
    expect(execFileSync('ls', ['-A', outside]).toString()).toBe('');
  });
});

describe('agent commands', () => {
  it('a command ended by a signal is an error that names the signal', async () => {
    expect(await call('shell', { command: 'kill -TERM $$' })).toEqual({
      output: expect.stringMatching(/\[killed by SIGTERM\]$/),
      isError: true,
    });
  });

  it('wait for a free slot of their own pool: never evicting a user terminal, never idle-expired', async () => {
    const pool = new ServerPtys(
      { maxSessions: 1, idleTtlMs: 200, sweepIntervalMs: 20, killStepMs: 100 },
      { maxSessions: 1, killStepMs: 100 },
    );
    try {
      const user = pool.spawn({
        command: '/bin/sh',
        args: ['-c', 'while :; do echo tick; sleep 0.05; done'],
        cols: 80,
        rows: 24,
      });
      const local = new ToolService(
        builtinTools({ cwd: dir, ptyManager: pool.agents, goals, defaultShellTimeoutMs: 20_000 }),
      );
      const shell = local.get('shell')!;
      // Quiet for longer than the idle TTL, two at once in a pool of one.
      const results = await Promise.all(
        [1, 2].map((n) => shell.execute({ command: `sleep 0.6; echo finished-${n}` }, ctx)),
      );
      expect(results).toEqual([
        { output: 'finished-1\n\n[exit code 0]' },
        { output: 'finished-2\n\n[exit code 0]' },
      ]);
      // The user's terminal was not evicted (on a loaded machine its own idle TTL may end it: allowed).
      expect(user.exitInfo?.reason ?? 'live').not.toBe('evicted');
      expect(pool.agents.list()).toEqual([]);
    } finally {
      await pool.closeAll();
    }
  });

  it('shell: a command whose terminal is closed under it is never a success, even when it exits 0', async () => {
    let pty: string | undefined;
    const local = new ToolService(
      builtinTools({
        cwd: dir,
        ptyManager: ptys.agents,
        goals,
        defaultShellTimeoutMs: 20_000,
        onShell: (info) => (pty = info.ptySessionId),
      }),
    );
    const pending = local
      .get('shell')!
      .execute({ command: "trap 'exit 0' HUP TERM; touch trap-set; sleep 30 & wait" }, ctx);
    await expect
      .poll(() => pty !== undefined && existsSync(join(dir, 'trap-set')), { timeout: 10_000 })
      .toBe(true);
    await ptys.agents.close(pty!); // what a client's pty.close does
    expect(await pending).toEqual({
      output: expect.stringMatching(/\[exit code 0 \(terminal closed\)\]$/),
      isError: true,
    });
  });
});
