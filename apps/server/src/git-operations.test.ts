// A git operation a run left half done, read from a real repository (git made the state): an
// interactive rebase stopped at a `break`, with an `exec` line next.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { embeddedRepositories } from '@aleph/sandbox';
import {
  gitOperations,
  gitOperationsWarning,
  hiddenChangesWarning,
  historyWarning,
} from './git-operations.js';

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
