// The file tools against a hostile model's renames, copies and links: protection follows the
// protected object (device + inode), whatever it is called now, and a name that is protected stays
// protected when something new appears under it. Writes are atomic, mode and owner kept.
import { execFileSync, spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  cpSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ToolService } from '@aleph/harness';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ServerPtys } from './agent-ptys.js';
import { builtinTools, projectProtection, serverProtection, type Goal } from './tools.js';
import type { DeniedEntry } from './workdir-files.js';

let root: string;
const ptys = new ServerPtys({ killStepMs: 100 }, { maxSessions: 2, killStepMs: 100 });
const ctx = { signal: new AbortController().signal, sessionId: 's1' };
beforeAll(() => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-files-')));
});
afterAll(async () => {
  await ptys.closeAll();
  rmSync(root, { recursive: true, force: true });
});

let projects = 0;
/** A project folder and its tools, the server's protected set recorded now (as at start). */
function project(setup: (dir: string) => { denied?: DeniedEntry[]; readOnly?: DeniedEntry[] } | void) {
  const dir = join(root, `p${(projects += 1)}`);
  mkdirSync(dir);
  const { denied = [], readOnly = [] } = setup(dir) ?? {};
  const protection = serverProtection(denied, readOnly).with(projectProtection(dir));
  const tools = new ToolService(
    builtinTools({
      cwd: dir,
      denied,
      readOnly,
      protection,
      ptyManager: ptys.agents,
      goals: new Map<string, Goal>(),
      defaultShellTimeoutMs: 10_000,
    }),
  );
  const call = async (name: string, args: unknown) => {
    const parsed = tools.parse(name, args);
    if (!parsed.ok) throw new Error(parsed.error);
    return parsed.tool.execute(parsed.args, ctx);
  };
  return { dir, call };
}

const refused = { isError: true, output: expect.stringMatching(/^refused: /) };

function gitRepo(dir: string): void {
  execFileSync('git', ['init', '-q', dir]);
  writeFileSync(join(dir, '.git/hooks/pre-commit'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
}

describe('protection by identity: renames, copies and links change nothing', () => {
  it('.git moved away and copied back: neither the copy (by name) nor the original (by identity) is written', async () => {
    const { dir, call } = project(gitRepo);
    renameSync(join(dir, '.git'), join(dir, '.git.orig'));
    cpSync(join(dir, '.git.orig'), join(dir, '.git'), { recursive: true });
    const before = readFileSync(join(dir, '.git.orig/config'), 'utf8');
    expect(
      await call('write_file', { path: '.git/config', content: '[core]\n\tfsmonitor = touch /tmp/x\n' }),
    ).toMatchObject(refused);
    for (const path of ['.git.orig/config', '.git.orig/hooks/pre-commit', '.git.orig/hooks/post-checkout']) {
      expect(await call('write_file', { path, content: 'planted' })).toMatchObject({
        isError: true,
        output: expect.stringContaining('whatever it is called now'),
      });
    }
    expect(
      await call('edit_file', {
        path: '.git.orig/config',
        old_string: '[core]',
        new_string: '[core]\n\tfsmonitor = x',
      }),
    ).toMatchObject(refused);
    expect(readFileSync(join(dir, '.git.orig/config'), 'utf8')).toBe(before);
    expect(readdirSync(join(dir, '.git.orig/hooks'))).not.toContain('post-checkout');
    // Read-only is still readable, and the rest of the project is still writable.
    expect(await call('read_file', { path: '.git.orig/config' })).toEqual({ output: before });
    expect(await call('write_file', { path: 'src/ok.ts', content: 'ok' })).toEqual({
      output: 'wrote 2 bytes to src/ok.ts',
    });
  });

  it('the config file (denied) moved with its folder, or hard-linked, is never read', async () => {
    const { dir, call } = project((dir) => {
      mkdirSync(join(dir, 'conf'));
      writeFileSync(join(dir, 'conf/aleph.toml'), '[gateway]\ntoken = "secret-token"\n');
      return { denied: [{ path: join(dir, 'conf/aleph.toml'), key: "the server's config file" }] };
    });
    expect(await call('read_file', { path: 'conf/aleph.toml' })).toMatchObject(refused);
    renameSync(join(dir, 'conf'), join(dir, 'conf.x'));
    linkSync(join(dir, 'conf.x/aleph.toml'), join(dir, 'linked.toml'));
    for (const path of ['conf.x/aleph.toml', 'linked.toml']) {
      const result = await call('read_file', { path });
      expect(result).toMatchObject({
        isError: true,
        output: expect.stringContaining("the server's config file"),
      });
      expect(result.output).not.toContain('secret-token');
      expect(await call('edit_file', { path, old_string: 'token', new_string: 'x' })).toMatchObject(refused);
      expect(await call('write_file', { path, content: 'x' })).toMatchObject(refused);
    }
    expect(readFileSync(join(dir, 'conf.x/aleph.toml'), 'utf8')).toContain('secret-token');
  });

  it('a state dir under a cwd at $HOME: `mv .local .local.x` leaves it unreadable, unlistable, unwritable', async () => {
    const { dir, call } = project((dir) => {
      mkdirSync(join(dir, '.local/share/aleph'), { recursive: true });
      writeFileSync(join(dir, '.local/share/aleph/token'), 'gateway-token');
      return { denied: [{ path: join(dir, '.local/share/aleph'), key: "the server's state dir" }] };
    });
    renameSync(join(dir, '.local'), join(dir, '.local.x'));
    const results = [
      await call('read_file', { path: '.local.x/share/aleph/token' }),
      await call('list_files', { path: '.local.x/share/aleph' }),
      await call('write_file', { path: '.local.x/share/aleph/server.json', content: '{}' }),
    ];
    for (const result of results) {
      expect(result).toMatchObject({
        isError: true,
        output: expect.stringContaining("the server's state dir"),
      });
      expect(result.output).not.toContain('gateway-token');
    }
    expect(await call('list_files', { path: '.local.x/share' })).toEqual({ output: 'aleph/' }); // the name only
  });

  it('a hooks file (read-only): the folder swapped for a new one is refused by name, the moved original by identity', async () => {
    const { dir, call } = project((dir) => {
      mkdirSync(join(dir, 'hooks'));
      writeFileSync(join(dir, 'hooks/extra.json'), '{"hooks":{}}');
      return {
        readOnly: [{ path: join(dir, 'hooks/extra.json'), key: 'kept read-only: a [hooks] files entry' }],
      };
    });
    renameSync(join(dir, 'hooks'), join(dir, 'hooks.orig'));
    mkdirSync(join(dir, 'hooks'));
    const planted = '{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch /tmp/pwned"}]}]}}';
    expect(await call('write_file', { path: 'hooks/extra.json', content: planted })).toMatchObject(refused);
    expect(await call('write_file', { path: 'hooks.orig/extra.json', content: planted })).toMatchObject(
      refused,
    );
    expect(await call('read_file', { path: 'hooks.orig/extra.json' })).toEqual({ output: '{"hooks":{}}' });
  });

  it('a protected path that appears later (a new .claude) is protected by name; bad paths get a clear error', async () => {
    const { dir, call } = project(() => {});
    expect(await call('write_file', { path: '.claude/settings.json', content: '{}' })).toMatchObject(refused);
    mkdirSync(join(dir, 'd'));
    for (const [path, message] of [
      ['', undefined],
      ['../x', 'outside the working directory'],
      ['/etc/passwd', 'outside the working directory'],
      ['.', 'the working directory itself'],
      ['d', 'is a directory'],
    ] as const) {
      const parsed = await call('write_file', { path, content: 'x' }).catch((error: Error) => ({
        isError: true,
        output: error.message,
      }));
      expect(parsed).toMatchObject({
        isError: true,
        ...(message ? { output: expect.stringContaining(message) } : {}),
      });
    }
  });

  // Resolving a path takes time in the square of its length, on the server's only thread.
  it('a path longer than the system takes (4096 characters) is refused by every file tool, before anything is made', async () => {
    const { dir, call } = project(() => {});
    const path = `${'a/'.repeat(2100)}f`;
    const longer = {
      isError: true,
      output: `refused: a path of ${path.length} characters; the longest taken is 4096`,
    };
    expect(await call('write_file', { path, content: 'x' })).toEqual(longer);
    expect(await call('edit_file', { path, old_string: 'x', new_string: 'y' })).toEqual(longer);
    expect(await call('read_file', { path })).toEqual(longer);
    expect(await call('list_files', { path })).toEqual(longer);
    expect(readdirSync(dir)).toEqual([]);
  });
});

describe('atomic writes', () => {
  it('write_file and edit_file replace the file (new inode), keep its mode and owner, leave no temp file', async () => {
    const { dir, call } = project((dir) => {
      writeFileSync(join(dir, 'a.sh'), 'echo one\n');
      chmodSync(join(dir, 'a.sh'), 0o750);
      if (process.getuid?.() === 0) chownSync(join(dir, 'a.sh'), 1234, 5678);
    });
    const before = statSync(join(dir, 'a.sh'));
    expect(await call('edit_file', { path: 'a.sh', old_string: 'one', new_string: 'two' })).toEqual({
      output: 'edited a.sh',
    });
    expect(statSync(join(dir, 'a.sh')).ino).not.toBe(before.ino); // replaced, not rewritten in place
    expect(await call('write_file', { path: 'a.sh', content: 'echo three\n' })).toEqual({
      output: 'wrote 11 bytes to a.sh',
    });
    const after = statSync(join(dir, 'a.sh'));
    expect(readFileSync(join(dir, 'a.sh'), 'utf8')).toBe('echo three\n');
    expect([after.mode & 0o7777, after.uid, after.gid]).toEqual([0o750, before.uid, before.gid]);
    expect(readdirSync(dir)).toEqual(['a.sh']);
  });

  it('a writer that dies mid-write (file size limit hit half way) leaves the old file whole', async () => {
    // In place (truncate, then write), this left the user's file cut at the limit: the old text lost.
    const dir = join(root, 'killed');
    mkdirSync(dir);
    const old = 'A'.repeat(100_000);
    writeFileSync(join(dir, 'big.txt'), old);
    const module = resolve(import.meta.dirname, '../dist/workdir-files.js');
    const script = `import { replaceInside } from ${JSON.stringify(module)};
      await replaceInside(${JSON.stringify(dir)}, 'big.txt', 'B'.repeat(1 << 20));`;
    const child = spawn(
      '/bin/sh',
      ['-c', 'ulimit -f 512; exec "$0" --input-type=module -e "$1"', process.execPath, script],
      {
        stdio: 'ignore',
      },
    );
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((ended) =>
      child.once('exit', (...end) => ended(end)),
    );
    expect({ code, signal }).not.toEqual({ code: 0, signal: null }); // it did not get to write it all
    expect(readFileSync(join(dir, 'big.txt'), 'utf8')).toBe(old);
  });
});
