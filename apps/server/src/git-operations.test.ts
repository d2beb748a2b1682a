// A git operation a run left half done, read from a real repository (git made the state): an
// interactive rebase stopped at a `break`, with an `exec` line next.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { embeddedRepositories, MAX_HIDDEN_NAMED } from '@aleph/sandbox';
import {
  gitOperations,
  gitOperationsWarning,
  hiddenChangesWarning,
  historyWarning,
} from './git-operations.js';
import { reviewStart, unseenChanges } from './unseen-changes.js';

const root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-git-operations-')));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const git = (cwd: string, args: string[], env: NodeJS.ProcessEnv = {}) => {
  const ran = spawnSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
    cwd,
    encoding: 'utf8',
    env: { ...process.env, ...env },
  });
  expect(ran.status, ran.stderr).toBe(0);
};

it("names a rebase the run left stopped, with its todo list's exec lines; nothing when it was there before unchanged", () => {
  git(root, ['init', '-q']);
  for (const name of ['a', 'b']) {
    writeFileSync(join(root, name), `${name}\n`);
    git(root, ['add', name]);
    git(root, ['commit', '-qm', name]);
  }
  const before = gitOperations(root);
  expect(before?.inProgress).toEqual([]);
  expect(gitOperationsWarning(root, before, gitOperations(root))).toBeUndefined();
  // The model's command: a rebase that stops at once, an exec line next.
  git(root, ['rebase', '-i', 'HEAD~1'], {
    GIT_SEQUENCE_EDITOR: `printf 'break\\nexec touch ${join(root, 'ran')}\\n' >`,
  });
  const after = gitOperations(root);
  expect(after?.inProgress).toEqual(['rebase-merge']);
  expect(after?.execLines).toEqual([`exec touch ${join(root, 'ran')}`]);
  expect(gitOperationsWarning(root, before, after)).toBe(
    `the run left a git operation in progress in ${root} (rebase-merge); its todo list runs "exec touch ${join(root, 'ran')}" as you at \`git rebase --continue\`: check \`git status\` and the todo list before continuing it, or abort it (\`git rebase --abort\`, \`git cherry-pick --abort\`)`,
  );
  // A later run that leaves it as it was says nothing.
  expect(gitOperationsWarning(root, after, gitOperations(root))).toBeUndefined();
  // Outside a repository: nothing to say.
  expect(gitOperations(tmpdir())).toBeUndefined();
});

it('a todo list that is a FIFO is not read: named as in progress, without blocking', () => {
  const dir = join(root, 'fifo');
  git(root, ['init', '-q', dir]);
  const state = join(dir, '.git', 'rebase-merge');
  mkdirSync(state);
  spawnSync('mkfifo', [join(state, 'git-rebase-todo')]);
  // In a child: a blocking open fails the test (a timeout) instead of hanging it.
  const script = `import { gitOperations } from ${JSON.stringify(join(import.meta.dirname, 'git-operations.ts'))};
    console.log(JSON.stringify(gitOperations(${JSON.stringify(dir)})?.inProgress));`;
  const ran = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    timeout: 60_000, // tsx starts slowly under load
    encoding: 'utf8',
    cwd: join(import.meta.dirname, '..'),
  });
  expect(ran.error?.message, ran.stderr).toBeUndefined();
  expect(ran.stdout.trim(), ran.stderr).toBe('["rebase-merge"]');
});

it("names what the run did to hide a change from the user's git status, diff and show, and how to undo it", async () => {
  const dir = join(root, 'hidden');
  git(root, ['init', '-q', dir]);
  for (const name of ['test.sh', 'b']) {
    writeFileSync(join(dir, name), `${name}\n`);
    git(dir, ['add', name]);
    git(dir, ['commit', '-qm', name]);
  }
  git(dir, ['update-index', '--assume-unchanged', 'b']); // the user's own, before the run
  const look = async () => ({ index: await embeddedRepositories(dir), operations: gitOperations(dir) });
  const before = await look();
  expect(hiddenChangesWarning(dir, before, await look())).toBeUndefined();
  // The model's commands: a changed test.sh hidden from git status, a new file excluded, a replace ref.
  writeFileSync(join(dir, 'test.sh'), 'touch pwned\n');
  git(dir, ['update-index', '--skip-worktree', 'test.sh']);
  writeFileSync(join(dir, 'sitecustomize.py'), 'import os\n');
  writeFileSync(
    join(dir, '.git', 'info', 'exclude'),
    '# git ls-files --others --exclude-from=.git/info/exclude\nsitecustomize.py\n',
  );
  const status = spawnSync('git', ['status', '--short'], { cwd: dir, encoding: 'utf8' });
  expect(status.stdout).toBe(''); // what the user's review would see
  const head = spawnSync('git', ['rev-parse', 'HEAD'], { cwd: dir, encoding: 'utf8' }).stdout.trim();
  const first = spawnSync('git', ['rev-parse', 'HEAD~1'], { cwd: dir, encoding: 'utf8' }).stdout.trim();
  git(dir, ['replace', head, first]);
  const after = await look();
  expect(hiddenChangesWarning(dir, before, after)).toBe(
    `the run hid changes from your review in ${dir}: it marked "test.sh" skip-worktree or assume-unchanged, so their changes do not show (\`git update-index --no-skip-worktree --no-assume-unchanged -- test.sh\`); it added "sitecustomize.py" to .git/info/exclude, so what they match does not show; it added the replace refs "${head}", so \`git show\` and \`git log -p\` show other content than \`git push\` sends (\`git replace -d <ref>\`). Check them before you run or commit what is there`,
  );
  // Packed, the replace ref is still found; a later run that changes nothing says nothing.
  git(dir, ['pack-refs', '--all']);
  const packed = await look();
  expect(packed.operations?.replaced).toEqual([head]);
  expect(hiddenChangesWarning(dir, after, packed)).toBeUndefined();
});

it('names lines added to info/attributes, and a file grown past what is read, rather than passing it', async () => {
  const dir = join(root, 'attributes');
  git(root, ['init', '-q', dir]);
  writeFileSync(join(dir, 'test.sh'), 'echo ok\n');
  git(dir, ['add', 'test.sh']);
  git(dir, ['commit', '-qm', 'test.sh']);
  const before = { operations: gitOperations(dir) };
  writeFileSync(join(dir, '.git', 'info', 'attributes'), 'test.sh -diff\n');
  // A comment of over a MiB, then a pattern past what is read.
  writeFileSync(join(dir, '.git', 'info', 'exclude'), `#${'x'.repeat(1024 * 1024 + 10)}\nconftest.py\n`);
  expect(hiddenChangesWarning(dir, before, { operations: gitOperations(dir) })).toBe(
    `the run hid changes from your review in ${dir}: it added "test.sh -diff" to .git/info/attributes, so \`git diff\` may not show their changes; it made ".git/info/exclude" larger than is read here, so what it added there is not known. Check them before you run or commit what is there`,
  );
  // Nothing looked at when the run started (an index git could not read then): what is hidden now counts.
  git(dir, ['update-index', '--skip-worktree', 'test.sh']);
  expect(hiddenChangesWarning(dir, {}, { index: await embeddedRepositories(dir) })).toMatch(
    /it marked "test\.sh" skip-worktree or assume-unchanged/,
  );
});

it('names HEAD moved to a commit that does not contain the one before (an amend), not new commits on top', async () => {
  const dir = join(root, 'history');
  git(root, ['init', '-q', dir]);
  writeFileSync(join(dir, 'test.sh'), 'echo ok\n');
  git(dir, ['add', 'test.sh']);
  git(dir, ['commit', '-qm', 'tests']);
  const before = gitOperations(dir);
  expect(before?.head).toMatch(/^[0-9a-f]{40}$/);
  // A commit on top: history kept, nothing said.
  writeFileSync(join(dir, 'b'), 'b\n');
  git(dir, ['add', 'b']);
  git(dir, ['commit', '-qm', 'b']);
  const onTop = gitOperations(dir);
  expect(await historyWarning(dir, before, onTop)).toBeUndefined();
  // The last commit amended with the same message: git log reads as before.
  writeFileSync(join(dir, 'test.sh'), 'echo ok; touch pwned\n');
  git(dir, ['commit', '-qa', '--amend', '--no-edit']);
  git(dir, ['pack-refs', '--all']); // the branch now only in packed-refs
  const amended = gitOperations(dir);
  expect(amended?.head).not.toBe(onTop?.head);
  expect(await historyWarning(dir, onTop, amended)).toBe(
    `the run moved HEAD in ${dir} from ${onTop!.head!.slice(0, 12)} to ${amended!.head!.slice(0, 12)}, which does not contain it (an amend, a rebase, a reset or another branch): what \`git log\` shows there is not what you left; compare with \`git diff ${onTop!.head!.slice(0, 12)} HEAD\` before you build or push`,
  );
});

/** What the model's own program can do: the index's entry for `path` made to name `object`, its file times kept. */
function forgeEntry(dir: string, path: string, object: string): void {
  const file = join(dir, '.git', 'index');
  const index = readFileSync(file);
  expect(index.readUInt32BE(4)).toBe(2); // version 2: fixed-size entries
  let at = 12;
  for (let entry = 0; entry < index.readUInt32BE(8); entry++) {
    const length = index.readUInt16BE(at + 60) & 0xfff;
    if (index.subarray(at + 62, at + 62 + length).toString() === path)
      Buffer.from(object, 'hex').copy(index, at + 40);
    at += Math.floor((62 + length + 8) / 8) * 8;
  }
  createHash('sha1')
    .update(index.subarray(0, index.length - 20))
    .digest()
    .copy(index, index.length - 20);
  writeFileSync(file, index);
}

const statusOf = (dir: string): string =>
  spawnSync('git', ['status', '--short'], { cwd: dir, encoding: 'utf8' }).stdout +
  spawnSync('git', ['diff', 'HEAD'], { cwd: dir, encoding: 'utf8' }).stdout;

it('names a tracked file changed behind an index that says it is not (its file times written into it), and what makes git read it again', async () => {
  const dir = join(root, 'stale');
  git(root, ['init', '-q', dir]);
  mkdirSync(join(dir, 'lib'));
  for (const name of ['test.sh', 'b', 'c', 'lib/d']) {
    writeFileSync(join(dir, name), `${name}\n`);
    git(dir, ['add', name]);
  }
  git(dir, ['commit', '-qm', 'files']);
  const start = await reviewStart(dir);
  const before = { index: await embeddedRepositories(dir), operations: gitOperations(dir) };
  // Changes the user's review shows: not named.
  writeFileSync(join(dir, 'b'), 'b changed\n');
  writeFileSync(join(dir, 'c'), 'c staged\n');
  git(dir, ['add', 'c']);
  // The model's program: test.sh changed, added, and its entry made to name HEAD's object again.
  const old = spawnSync('git', ['rev-parse', 'HEAD:test.sh'], { cwd: dir, encoding: 'utf8' }).stdout.trim();
  writeFileSync(join(dir, 'test.sh'), 'touch pwned\n');
  const hourAgo = new Date(Date.now() - 3600_000);
  utimesSync(join(dir, 'test.sh'), hourAgo, hourAgo); // older than the index: git does not look again
  git(dir, ['add', 'test.sh']);
  forgeEntry(dir, 'test.sh', old);
  expect(statusOf(dir)).not.toMatch(/test\.sh/); // what the user's review would see
  const after = {
    index: await embeddedRepositories(dir),
    operations: gitOperations(dir),
    unseen: await unseenChanges(dir, start!),
  };
  // From a folder within, the path is said from there.
  expect((await unseenChanges(join(dir, 'lib'), start!))?.stale).toEqual({
    kind: 'paths',
    paths: ['../test.sh'],
    count: 1,
  });
  await start!.release();
  expect(hiddenChangesWarning(dir, before, after)).toBe(
    `the run hid changes from your review in ${dir}: it changed "test.sh" in a way the index does not see (their entries match their size and file times), so \`git status\` and \`git diff\` do not show it (\`touch -- test.sh\` makes git read them again). Check them before you run or commit what is there`,
  );
  expect(existsSync(start!.folder)).toBe(false);
  // What it says undoes it.
  git(dir, ['-c', 'core.fsmonitor=false', 'status']); // nothing changes by itself
  spawnSync('touch', ['--', 'test.sh'], { cwd: dir });
  expect(statusOf(dir)).toMatch(/^ M test\.sh$/m);
});

it('names a file changed with its size and mtime kept where the user trusts no ctime (core.trustctime=false)', async () => {
  const dir = join(root, 'trustctime');
  git(root, ['init', '-q', dir]);
  git(dir, ['config', 'core.trustctime', 'false']); // the user's own setting
  writeFileSync(join(dir, 'test.sh'), 'echo ok\n');
  git(dir, ['add', 'test.sh']);
  git(dir, ['commit', '-qm', 'test.sh']);
  const hourAgo = new Date(Date.now() - 3600_000);
  utimesSync(join(dir, 'test.sh'), hourAgo, hourAgo);
  git(dir, ['update-index', '--refresh']);
  const start = await reviewStart(dir);
  await new Promise((resolveWait) => setTimeout(resolveWait, 1100)); // git compares ctimes in seconds
  // The model: the same size, the mtime put back; no index written.
  writeFileSync(join(dir, 'test.sh'), 'exit 99\n');
  utimesSync(join(dir, 'test.sh'), hourAgo, hourAgo);
  expect(statusOf(dir)).toBe('');
  const unseen = await unseenChanges(dir, start!);
  await start!.release();
  expect(unseen?.stale).toEqual({ kind: 'paths', paths: ['test.sh'], count: 1 });
});

it('reads again only the files whose times changed since the run started, not the whole work tree', async () => {
  const dir = join(root, 'cost');
  const log = join(root, 'cost-clean.log');
  git(root, ['init', '-q', dir]);
  // A clean filter that notes each file git reads to compare it.
  git(dir, ['config', 'filter.note.clean', `sh -c 'echo "$1" >> ${log}; cat' -- %f`]);
  writeFileSync(join(dir, '.gitattributes'), '* filter=note\n');
  const names = Array.from({ length: 50 }, (_, i) => `f${i}`);
  for (const name of names) writeFileSync(join(dir, name), `${name}\n`);
  git(dir, ['add', '.']);
  git(dir, ['commit', '-qm', 'files']);
  await new Promise((resolveWait) => setTimeout(resolveWait, 1100)); // the index a second older than the start
  const start = await reviewStart(dir);
  rmSync(log, { force: true });
  writeFileSync(join(dir, 'f1'), 'F1\n'); // the same size: git must read them to know
  writeFileSync(join(dir, 'f2'), 'F2\n');
  const unseen = await unseenChanges(dir, start!);
  await start!.release();
  expect(unseen?.stale).toEqual({ kind: 'paths', paths: [], count: 0 }); // both show in git status
  expect(readFileSync(log, 'utf8').split('\n').filter(Boolean).sort()).toEqual(['f1', 'f2']);
});

it('names new files a new .gitignore hides with itself, not those the rules the user had ignore', async () => {
  const dir = join(root, 'ignored');
  git(root, ['init', '-q', dir]);
  mkdirSync(join(dir, 'lib'));
  writeFileSync(join(dir, '.gitignore'), '*.pyc\nnode_modules/\n');
  writeFileSync(join(dir, 'lib', 'a.py'), 'a = 1\n');
  git(dir, ['add', '.']);
  git(dir, ['commit', '-qm', 'files']);
  mkdirSync(join(dir, 'node_modules', 'x'), { recursive: true });
  writeFileSync(join(dir, 'node_modules', 'x', 'index.js'), '\n');
  await new Promise((resolveWait) => setTimeout(resolveWait, 1100)); // the start: a second after these
  const start = await reviewStart(dir);
  const before = { index: await embeddedRepositories(dir), operations: gitOperations(dir) };
  // The run's build: ignored by the user's rules, not named.
  writeFileSync(join(dir, 'lib', 'a.pyc'), '\n');
  writeFileSync(join(dir, 'node_modules', 'x', 'new.js'), '\n');
  // The model's: a folder that ignores itself whole, and a .gitignore hiding itself and a file beside it.
  mkdirSync(join(dir, 'evil'));
  writeFileSync(join(dir, 'evil', '.gitignore'), '*\n');
  writeFileSync(join(dir, 'evil', 'conftest.py'), 'import os\n');
  writeFileSync(join(dir, 'lib', '.gitignore'), '.gitignore\nsitecustomize.py\n');
  writeFileSync(join(dir, 'lib', 'sitecustomize.py'), 'import os\n');
  expect(statusOf(dir)).toBe('');
  const unseen = await unseenChanges(dir, start!);
  await start!.release();
  expect(hiddenChangesWarning(dir, before, { ...before, unseen })).toBe(
    `the run hid changes from your review in ${dir}: it created "evil/", "lib/.gitignore", "lib/sitecustomize.py", ignored by rules it wrote in "evil/.gitignore", "lib/.gitignore", so \`git status\` does not show them (\`git status --ignored\` does; remove those rules, or the paths, to undo it). Check them before you run or commit what is there`,
  );
});

it('names a change of which index entries are marked past those named, the count the same', async () => {
  const dir = join(root, 'swapped');
  git(root, ['init', '-q', dir]);
  const many = Array.from({ length: MAX_HIDDEN_NAMED + 6 }, (_, i) => `m${String(i).padStart(3, '0')}`);
  for (const name of ['a', ...many, 'z']) writeFileSync(join(dir, name), `${name}\n`);
  git(dir, ['add', '.']);
  git(dir, ['commit', '-qm', 'files']);
  git(dir, ['update-index', '--skip-worktree', 'a', ...many]); // the user's own (a sparse checkout)
  const before = { index: await embeddedRepositories(dir) };
  expect(hiddenChangesWarning(dir, before, { index: await embeddedRepositories(dir) })).toBeUndefined();
  // The model unmarks one of those named and marks one past them: as many marked, the names shift by one.
  writeFileSync(join(dir, 'z'), 'touch pwned\n');
  git(dir, ['update-index', '--no-skip-worktree', 'a']);
  git(dir, ['update-index', '--skip-worktree', 'z']);
  const after = { index: await embeddedRepositories(dir) };
  expect(after.index?.hiddenCount).toBe(before.index?.hiddenCount);
  expect(hiddenChangesWarning(dir, before, after)).toBe(
    `the run hid changes from your review in ${dir}: it changed which of its ${MAX_HIDDEN_NAMED + 7} index entries are marked skip-worktree or assume-unchanged (past the ${MAX_HIDDEN_NAMED} named here), so a change to one may not show (\`git ls-files -v | grep -v '^H'\` lists them). Check them before you run or commit what is there`,
  );
});
