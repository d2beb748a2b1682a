// The nested repositories the user's next `git status` enters, read from a real index (git made it):
// a repository the model made and staged as a gitlink is named with the program keys of its config,
// a submodule git cloned is not.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import {
  embeddedRepositories,
  MAX_EXAMINED_GITLINKS,
  MAX_HIDDEN_NAMED,
  type EmbeddedRepositories,
} from './embedded-repositories.js';

/** Each repository's path and program keys (its fingerprint is compared between looks, not shown). */
const named = (found: EmbeddedRepositories | undefined) =>
  found?.repositories.map(({ path, programs }) => ({ path, programs }));
const NONE = {
  repositories: [],
  unexamined: 0,
  hidden: [],
  hiddenCount: 0,
  hiddenDigest: createHash('sha256').digest('hex'), // of no paths
};

const root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-embedded-')));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const git = (cwd: string, ...args: string[]) => {
  const ran = spawnSync(
    'git',
    ['-c', 'user.name=t', '-c', 'user.email=t@t', '-c', 'protocol.file.allow=always', ...args],
    { cwd, encoding: 'utf8' },
  );
  expect(ran.status, ran.stderr).toBe(0);
};

function repository(dir: string): void {
  mkdirSync(dir, { recursive: true });
  git(dir, 'init', '-q');
  writeFileSync(join(dir, 'f'), 'f\n');
  git(dir, 'add', 'f');
  git(dir, 'commit', '-qm', 'first');
}

it('names a repository staged as a gitlink (not a cloned submodule), in every index version, with the program keys of its config', async () => {
  const project = join(root, 'project');
  repository(project);
  expect(await embeddedRepositories(project)).toEqual(NONE);
  repository(join(root, 'source'));
  git(project, 'submodule', '-q', 'add', join(root, 'source'), 'libs/cloned');
  // The model's one command: a repository with an fsmonitor, staged in the project's index.
  repository(join(project, 'vendor', 'deep'));
  git(join(project, 'vendor', 'deep'), 'config', 'core.fsmonitor', 'touch /nonexistent/pwned');
  git(join(project, 'vendor', 'deep'), 'config', 'alias.st', '!touch /nonexistent/pwned');
  git(project, 'add', 'vendor/deep');
  // And a plain one, nothing in its config that runs.
  repository(join(project, 'plain'));
  git(project, 'add', 'plain');
  for (const version of ['2', '3', '4']) {
    git(project, 'update-index', '--index-version', version);
    expect(named(await embeddedRepositories(project)), `index version ${version}`).toEqual([
      { path: 'plain', programs: [] },
      { path: 'vendor/deep', programs: ['core.fsmonitor', 'alias.st'] },
    ]);
  }
  expect(await embeddedRepositories(join(root, 'not-a-repository'))).toEqual(NONE);
  writeFileSync(join(project, '.git', 'index'), 'not an index');
  expect(await embeddedRepositories(project)).toBeUndefined();
});

it("git reads the index with no fsmonitor and none of this process's GIT_ variables", async () => {
  const project = join(root, 'guarded');
  repository(project);
  // The project's own config (kept read-only in the sandbox, but say it were the model's): not run.
  const ran = join(root, 'fsmonitor-ran');
  git(project, 'config', 'core.fsmonitor', `touch ${ran}; false`);
  const garbage = join(root, 'garbage-index');
  writeFileSync(garbage, 'not an index');
  process.env['GIT_INDEX_FILE'] = garbage; // what git would read instead, were it passed on
  try {
    expect(await embeddedRepositories(project)).toEqual(NONE);
  } finally {
    delete process.env['GIT_INDEX_FILE'];
  }
  expect(existsSync(ran)).toBe(false);
});

it("a relative PATH entry is not searched: the project's own bin/git is never run", async () => {
  const project = join(root, 'planted-git');
  repository(project);
  const ran = join(root, 'planted-git-ran');
  mkdirSync(join(project, 'bin'));
  writeFileSync(join(project, 'bin', 'git'), `#!/bin/sh\ntouch ${ran}\n`, { mode: 0o755 });
  const path = process.env['PATH'];
  process.env['PATH'] = `bin:${path ?? ''}`;
  try {
    expect(await embeddedRepositories(project)).toEqual(NONE);
  } finally {
    process.env['PATH'] = path;
  }
  expect(existsSync(ran)).toBe(false);
});

it('outside a repository it answers none without starting git (a fork of the caller each run)', async () => {
  const plain = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-no-repo-')));
  const path = process.env['PATH'];
  process.env['PATH'] = '/nonexistent'; // a git started now would fail: "could not tell"
  try {
    expect(await embeddedRepositories(plain)).toEqual(NONE);
    mkdirSync(join(plain, 'sub'));
    expect(await embeddedRepositories(join(plain, 'sub'))).toEqual(NONE);
    mkdirSync(join(plain, '.git')); // empty, as the sandbox's stand-in for an absent .git: git skips it
    expect(await embeddedRepositories(join(plain, 'sub'))).toEqual(NONE);
    writeFileSync(join(plain, '.git', 'HEAD'), 'ref: refs/heads/main\n');
    expect(await embeddedRepositories(join(plain, 'sub'))).toBeUndefined(); // a repository above: git asked
  } finally {
    process.env['PATH'] = path;
    rmSync(plain, { recursive: true, force: true });
  }
});

it('reads a `.git` file as git does: a path after `gitdir: ` that starts with a blank is not the one in .git/modules', async () => {
  const project = join(root, 'blank-gitdir');
  repository(project);
  // git's path is ` ../.git/modules/x` (blank and all), a folder the model made beside `.git`'s.
  const made = join(project, 'sub', ' ..', '.git', 'modules', 'x');
  mkdirSync(join(project, 'sub', ' ..', '.git', 'modules'), { recursive: true });
  git(project, 'init', '-q', '--separate-git-dir', made, 'sub');
  git(join(project, 'sub'), 'commit', '-q', '--allow-empty', '-m', 's');
  git(join(project, 'sub'), 'config', 'core.fsmonitor', 'touch /nonexistent/pwned');
  writeFileSync(join(project, 'sub', '.git'), 'gitdir:  ../.git/modules/x\n');
  git(project, '-c', 'core.fsmonitor=false', 'add', 'sub');
  expect(named(await embeddedRepositories(project))).toEqual([{ path: 'sub', programs: ['core.fsmonitor'] }]);
});

it("a staged repository's fingerprint changes with its program keys' values, its config.worktree's, and its git dir", async () => {
  const project = join(root, 'staged-before');
  repository(project);
  repository(join(project, 'vendor'));
  git(join(project, 'vendor'), 'config', 'core.pager', 'less');
  git(project, 'add', 'vendor');
  git(project, 'commit', '-qm', 'vendor');
  const look = async () => (await embeddedRepositories(project))?.repositories[0];
  const first = await look();
  expect(first?.programs).toEqual(['core.pager']);
  expect((await look())?.fingerprint).toBe(first?.fingerprint); // nothing changed
  git(join(project, 'vendor'), 'config', 'user.name', 'someone'); // no program: the same
  expect((await look())?.fingerprint).toBe(first?.fingerprint);
  git(join(project, 'vendor'), 'config', 'core.pager', 'touch /nonexistent/pwned; less');
  const second = await look();
  expect(second?.fingerprint).not.toBe(first?.fingerprint);
  writeFileSync(
    join(project, 'vendor', '.git', 'config.worktree'),
    '[core]\n\tfsmonitor = touch /nonexistent/pwned\n',
  );
  const third = await look();
  expect(third?.programs).toEqual(['core.pager', 'core.fsmonitor']);
  expect(third?.fingerprint).not.toBe(second?.fingerprint);
});

it('reads an index of many gitlinks as git writes it, examines the first ones and counts the rest', async () => {
  const project = join(root, 'many-gitlinks');
  repository(project);
  const tree = spawnSync('git', ['mktree'], { cwd: project, input: '', encoding: 'utf8' }).stdout.trim();
  const commit = spawnSync(
    'git',
    ['-c', 'user.name=t', '-c', 'user.email=t@t', 'commit-tree', tree, '-m', 'x'],
    {
      cwd: project,
      encoding: 'utf8',
    },
  ).stdout.trim();
  const count = MAX_EXAMINED_GITLINKS + 5000;
  const lines = Array.from(
    { length: count },
    (_, i) => `160000 ${commit}\tg/${String(i).padStart(6, '0')}\n`,
  );
  const ran = spawnSync('git', ['update-index', '--index-info'], { cwd: project, input: lines.join('') });
  expect(ran.status, String(ran.stderr)).toBe(0);
  // None checked out: none is a repository of its own; those past the first are only counted.
  expect(await embeddedRepositories(project)).toEqual({ ...NONE, unexamined: 5000 });
});

it('names the entries marked skip-worktree or assume-unchanged, whose changes git status does not show', async () => {
  const project = join(root, 'hidden');
  repository(project);
  for (const name of ['a', 'b', 'c', 'with space\tand tab']) writeFileSync(join(project, name), `${name}\n`);
  git(project, 'add', '.');
  git(project, 'commit', '-qm', 'files');
  git(project, 'update-index', '--skip-worktree', 'a');
  git(project, 'update-index', '--assume-unchanged', 'b', 'with space\tand tab');
  const found = await embeddedRepositories(project);
  expect(found?.hidden).toEqual(['a', 'b', 'with space\tand tab']);
  expect(found?.hiddenCount).toBe(3);
  // Past the first ones, only counted.
  const many = Array.from({ length: MAX_HIDDEN_NAMED + 10 }, (_, i) => `m${String(i).padStart(3, '0')}`);
  for (const name of many) writeFileSync(join(project, name), '');
  git(project, 'add', '.');
  git(project, 'update-index', '--skip-worktree', ...many);
  const counted = await embeddedRepositories(project);
  expect(counted?.hidden).toHaveLength(MAX_HIDDEN_NAMED);
  expect(counted?.hiddenCount).toBe(MAX_HIDDEN_NAMED + 13);
  // One past the named ones unmarked and another marked: the names and the count stay, the digest not.
  writeFileSync(join(project, 'z'), 'z\n');
  git(project, 'add', 'z');
  git(project, 'update-index', '--no-skip-worktree', many.at(-1)!);
  git(project, 'update-index', '--assume-unchanged', 'z');
  const swapped = await embeddedRepositories(project);
  expect(swapped?.hidden).toEqual(counted?.hidden);
  expect(swapped?.hiddenCount).toBe(counted?.hiddenCount);
  expect(swapped?.hiddenDigest).not.toBe(counted?.hiddenDigest);
});
