// A git operation a run left half done in its repository: an interactive rebase (its todo list), a
// cherry-pick or revert sequence. Its `exec` lines run as the user at their `git rebase --continue`,
// outside the sandbox, and `git status` shows only the next two steps. The sandbox cannot keep these
// files read-only (a rebase inside writes them); the server compares them before and after the run.
// So it does for what hides a change from the user's review: an entry of the index marked
// skip-worktree or assume-unchanged, a pattern added to `info/exclude`, a replace ref (`git show`
// then shows another commit than the one `git push` sends).
import { createHash } from 'node:crypto';
import { lstatSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { gitDirOf, readModelWritableFile, type EmbeddedRepositories } from '@aleph/sandbox';
import { quote } from './confined-writes.js';

/** Where git keeps an operation's state, and the todo list in it. */
const STATES = [
  ['rebase-merge', 'git-rebase-todo'],
  ['rebase-apply', 'next'],
  ['sequencer', 'todo'],
] as const;

/** The most of a todo list read. */
const MAX_TODO_BYTES = 1024 * 1024;

export interface GitOperations {
  /** Equal while no operation's state appeared, went or had its todo list changed. */
  readonly fingerprint: string;
  /** The operations in progress (`rebase-merge`…) and the `exec` lines of their todo lists. */
  readonly inProgress: readonly string[];
  readonly execLines: readonly string[];
  /** The patterns of `info/exclude` (its first MAX_LISTED lines that are patterns). */
  readonly excluded: readonly string[];
  /** The replace refs, loose and packed (the first MAX_LISTED). */
  readonly replaced: readonly string[];
}

/** The most lines of `info/exclude` or `packed-refs` read, and of patterns or refs kept. */
const MAX_REFS_BYTES = 1024 * 1024;
const MAX_LISTED = 1000;

/** A model-writable file's text, or '' when it is none a regular file holds. */
const textOf = (path: string): string => {
  const file = readModelWritableFile(path, { maxBytes: MAX_REFS_BYTES, larger: 'head' });
  return file.kind === 'read' ? file.text : '';
};

/** The patterns of `info/exclude` and the replace refs, in the repository's common dir. */
function reviewed(gitDir: string): Pick<GitOperations, 'excluded' | 'replaced'> {
  const named = textOf(join(gitDir, 'commondir')).trim();
  const common = named === '' ? gitDir : resolve(gitDir, named);
  const excluded = textOf(join(common, 'info', 'exclude'))
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .slice(0, MAX_LISTED);
  let loose: string[] = [];
  try {
    loose = readdirSync(join(common, 'refs', 'replace')).slice(0, MAX_LISTED);
  } catch {
    // none
  }
  const packed = textOf(join(common, 'packed-refs'))
    .split('\n')
    .flatMap((line) => /^[0-9a-f]+ refs\/replace\/(\S+)$/.exec(line)?.[1] ?? []);
  return { excluded, replaced: [...new Set([...loose, ...packed])].slice(0, MAX_LISTED) };
}

export function gitOperations(cwd: string): GitOperations | undefined {
  const gitDir = gitDirOf(cwd);
  if (gitDir === undefined) return undefined;
  const hash = createHash('sha256');
  const inProgress: string[] = [];
  const execLines: string[] = [];
  for (const [state, todo] of STATES) {
    if (lstatSync(join(gitDir, state), { throwIfNoEntry: false }) === undefined) continue;
    inProgress.push(state);
    // No todo list (yet), or none that is a regular file: a FIFO in its place would block the
    // server at the open, a link to /dev/zero in the read.
    const file = readModelWritableFile(join(gitDir, state, todo), {
      maxBytes: MAX_TODO_BYTES,
      larger: 'head',
    });
    const text = file.kind === 'read' ? file.text : file.kind === 'refused' ? `(${file.reason})` : '';
    hash.update(`${state}\0${text}\0`);
    for (const line of text.split('\n'))
      if (/^\s*(x|exec)\s/.test(line) && execLines.length < 5) execLines.push(line.trim().slice(0, 200));
  }
  return { fingerprint: hash.digest('hex'), inProgress, execLines, ...reviewed(gitDir) };
}

/** What a run left, in a warning; undefined when nothing changed or nothing is in progress. */
export function gitOperationsWarning(
  cwd: string,
  before: GitOperations | undefined,
  after: GitOperations | undefined,
): string | undefined {
  if (after === undefined || after.inProgress.length === 0) return undefined;
  if (before !== undefined && before.fingerprint === after.fingerprint) return undefined;
  const execs =
    after.execLines.length > 0
      ? `; its todo list runs ${after.execLines.map((line) => JSON.stringify(line)).join(', ')} as you at \`git rebase --continue\``
      : '';
  return `the run left a git operation in progress in ${cwd} (${after.inProgress.join(', ')})${execs}: check \`git status\` and the todo list before continuing it, or abort it (\`git rebase --abort\`, \`git cherry-pick --abort\`)`;
}

/** Up to ten names, JSON-quoted, and how many more. */
const listed = (names: readonly string[]): string =>
  `${names
    .slice(0, 10)
    .map((name) => JSON.stringify(name))
    .join(', ')}${names.length > 10 ? ` and ${names.length - 10} more` : ''}`;

/**
 * What the run did that hides a change from the user's `git status`, `git diff` or `git show`, in a
 * warning with what undoes it; undefined when it did nothing of the kind.
 */
export function hiddenChangesWarning(
  cwd: string,
  before: { index?: EmbeddedRepositories | undefined; operations?: GitOperations | undefined },
  after: { index?: EmbeddedRepositories | undefined; operations?: GitOperations | undefined },
): string | undefined {
  const parts: string[] = [];
  if (after.index !== undefined) {
    const earlier = new Set(before.index?.hidden ?? []);
    const hidden = after.index.hidden.filter((path) => !earlier.has(path));
    const more = Math.max(0, after.index.hiddenCount - (before.index?.hiddenCount ?? 0) - hidden.length);
    if (hidden.length > 0 || more > 0) {
      const which =
        hidden.length > 0
          ? `${listed(hidden)}${more > 0 ? ` and ${more} more entries` : ''}`
          : `${more} entries`;
      const undo =
        hidden.length > 0
          ? quote([
              'git',
              'update-index',
              '--no-skip-worktree',
              '--no-assume-unchanged',
              '--',
              ...hidden.slice(0, 10),
            ])
          : "git ls-files -v | grep -v '^H'";
      parts.push(
        `marked ${which} skip-worktree or assume-unchanged, so their changes do not show (\`${undo}\`)`,
      );
    }
  }
  if (after.operations !== undefined) {
    const excludedBefore = new Set(before.operations?.excluded ?? []);
    const excluded = after.operations.excluded.filter((line) => !excludedBefore.has(line));
    if (excluded.length > 0)
      parts.push(`added ${listed(excluded)} to .git/info/exclude, so what they match does not show`);
    const replacedBefore = new Set(before.operations?.replaced ?? []);
    const replaced = after.operations.replaced.filter((ref) => !replacedBefore.has(ref));
    if (replaced.length > 0)
      parts.push(
        `added the replace refs ${listed(replaced)}, so \`git show\` and \`git log -p\` show other content than \`git push\` sends (\`git replace -d <ref>\`)`,
      );
  }
  return parts.length === 0
    ? undefined
    : `the run hid changes from your review in ${cwd}: it ${parts.join('; it ')}. Check them before you run or commit what is there`;
}
