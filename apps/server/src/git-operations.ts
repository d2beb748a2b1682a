// A git operation a run left half done in its repository: an interactive rebase (its todo list), a
// cherry-pick or revert sequence. Its `exec` lines run as the user at their `git rebase --continue`,
// outside the sandbox, and `git status` shows only the next two steps. The sandbox cannot keep these
// files read-only (a rebase inside writes them); the server compares them before and after the run.
// So it does for what hides a change from the user's review: an entry of the index marked
// skip-worktree or assume-unchanged, a pattern added to `info/exclude`, a replace ref (`git show`
// then shows another commit than the one `git push` sends); and it words what unseen-changes.ts
// finds (index entries whose file times say a changed file is not, paths new rules ignore).
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { lstatSync, opendirSync, type Dir } from 'node:fs';
import { join } from 'node:path';
import {
  commonDirOf,
  gitDirOf,
  MAX_HIDDEN_NAMED,
  readModelWritableFile,
  type EmbeddedRepositories,
} from '@aleph/sandbox';
import { quote } from './confined-writes.js';
import type { UnseenChanges } from './unseen-changes.js';

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
  /** The lines of `info/attributes` (`test.sh -diff` hides a change from `git diff`). */
  readonly attributes: readonly string[];
  /** The replace refs, loose and packed (the first MAX_LISTED). */
  readonly replaced: readonly string[];
  /** Of these files and folders, those past what is read (their rest is not known). */
  readonly unread: readonly string[];
  /** The commit HEAD names, when it names one (read from HEAD and the refs, no git run). */
  readonly head: string | undefined;
}

/** The most of `info/exclude`, `info/attributes` or `packed-refs` read, and of lines or refs kept. */
const MAX_REFS_BYTES = 1024 * 1024;
const MAX_LISTED = 1000;

/** A model-writable file's text ('' when it is none a regular file holds), and whether all of it. */
const textOf = (path: string): { text: string; whole: boolean } => {
  const file = readModelWritableFile(path, { maxBytes: MAX_REFS_BYTES, larger: 'head' });
  return file.kind === 'read' ? { text: file.text, whole: file.whole } : { text: '', whole: true };
};

/** A folder's first MAX_LISTED names, read an entry at a time, and whether that was all. */
function namesIn(folder: string): { names: string[]; whole: boolean } {
  const names: string[] = [];
  let opened: Dir;
  try {
    opened = opendirSync(folder);
  } catch {
    return { names, whole: true }; // none
  }
  try {
    for (let entry = opened.readSync(); entry !== null; entry = opened.readSync()) {
      if (names.length === MAX_LISTED) return { names, whole: false };
      names.push(entry.name);
    }
    return { names, whole: true };
  } finally {
    opened.closeSync();
  }
}

/** What hides a change from review, in the repository's common dir. */
function reviewed(
  gitDir: string,
): Pick<GitOperations, 'excluded' | 'attributes' | 'replaced' | 'unread' | 'head'> {
  const common = commonDirOf(gitDir);
  const unread: string[] = [];
  const linesOf = (name: string): string[] => {
    const { text, whole } = textOf(join(common, name));
    const lines = text
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    if (!whole || lines.length > MAX_LISTED) unread.push(`.git/${name}`);
    return lines.slice(0, MAX_LISTED);
  };
  const excluded = linesOf('info/exclude');
  const attributes = linesOf('info/attributes');
  const loose = namesIn(join(common, 'refs', 'replace'));
  if (!loose.whole) unread.push('.git/refs/replace');
  const packedRefs = textOf(join(common, 'packed-refs'));
  if (!packedRefs.whole) unread.push('.git/packed-refs');
  const packed = packedRefs.text
    .split('\n')
    .flatMap((line) => /^[0-9a-f]+ refs\/replace\/(\S+)$/.exec(line)?.[1] ?? []);
  const replaced = [...new Set([...loose.names, ...packed])].slice(0, MAX_LISTED);
  // HEAD is the work tree's own; the branch it names lies in the common dir, loose or packed.
  const headText = textOf(join(gitDir, 'HEAD')).text.trim();
  const ref = /^ref: (refs\/\S+)$/.exec(headText)?.[1];
  const commit = (text: string): string | undefined => (/^[0-9a-f]{40,64}$/.test(text) ? text : undefined);
  const head =
    ref === undefined
      ? commit(headText)
      : (commit(textOf(join(common, ref)).text.trim()) ??
        packedRefs.text
          .split('\n')
          .flatMap((line) => (line.endsWith(` ${ref}`) ? [line.slice(0, line.indexOf(' '))] : []))
          .map(commit)[0]);
  return { excluded, attributes, replaced, unread, head };
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

/** Up to ten names, JSON-quoted, and how many more (of `count`, when more are known than named). */
const listed = (names: readonly string[], count = names.length): string => {
  const shown = names.slice(0, 10);
  const rest = count - shown.length;
  return `${shown.map((name) => JSON.stringify(name)).join(', ')}${rest > 0 ? ` and ${rest} more` : ''}`;
};

/** Whether git's index sorts `path` before `last` (its names' bytes). */
const sortsBefore = (path: string, last: string): boolean =>
  Buffer.compare(Buffer.from(path), Buffer.from(last)) < 0;

/** The index's entries the run newly marked skip-worktree or assume-unchanged. */
function markedParts(before: EmbeddedRepositories | undefined, after: EmbeddedRepositories): string[] {
  const parts: string[] = [];
  const earlier = new Set(before?.hidden ?? []);
  // Past the last name the start kept (when it counted more), a name may be an old one.
  const last =
    before !== undefined && before.hiddenCount > before.hidden.length ? before.hidden.at(-1) : undefined;
  const hidden = after.hidden.filter(
    (path) => !earlier.has(path) && (last === undefined || sortsBefore(path, last)),
  );
  const more = Math.max(0, after.hiddenCount - (before?.hiddenCount ?? 0) - hidden.length);
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
  } else if (before !== undefined && before.hiddenDigest !== after.hiddenDigest && after.hiddenCount > 0) {
    // As many marked as before, the named ones the same: one unmarked and another marked past them.
    parts.push(
      `changed which of its ${after.hiddenCount} index entries are marked skip-worktree or assume-unchanged (past the ${MAX_HIDDEN_NAMED} named here), so a change to one may not show (\`git ls-files -v | grep -v '^H'\` lists them)`,
    );
  }
  return parts;
}

/** Files behind index entries whose file times say they are unchanged, new paths ignored by rules the run wrote. */
function unseenParts(unseen: UnseenChanges | undefined): string[] {
  const parts: string[] = [];
  const stale = unseen?.stale;
  if (stale?.kind === 'paths' && stale.count > 0)
    parts.push(
      `changed ${listed(stale.paths, stale.count)} in a way the index does not see (their entries match their size and file times), so \`git status\` and \`git diff\` do not show it (\`${quote(['touch', '--', ...stale.paths])}\` makes git read them again)`,
    );
  else if (stale?.kind === 'unknown')
    parts.push(
      `left files that could not be compared with the index (${stale.reason}), so whether it hid a change there is not known`,
    );
  const ignored = unseen?.ignored;
  if (ignored?.kind === 'paths' && ignored.count > 0)
    parts.push(
      `created ${listed(ignored.paths, ignored.count)}, ignored by rules it wrote in ${listed(ignored.rules ?? [])}, so \`git status\` does not show them (\`git status --ignored\` does; remove those rules, or the paths, to undo it)`,
    );
  else if (ignored?.kind === 'unknown')
    parts.push(
      `left ignored paths not all examined (${ignored.reason}), so whether a rule it wrote hides one is not known`,
    );
  return parts;
}

/**
 * What the run did that hides a change from the user's `git status`, `git diff` or `git show`, in a
 * warning with what undoes it; undefined when it did nothing of the kind.
 */
export function hiddenChangesWarning(
  cwd: string,
  before: { index?: EmbeddedRepositories | undefined; operations?: GitOperations | undefined },
  after: {
    index?: EmbeddedRepositories | undefined;
    operations?: GitOperations | undefined;
    unseen?: UnseenChanges | undefined;
  },
): string | undefined {
  const parts = [
    ...(after.index === undefined ? [] : markedParts(before.index, after.index)),
    ...unseenParts(after.unseen),
  ];
  if (after.operations !== undefined) {
    const excludedBefore = new Set(before.operations?.excluded ?? []);
    const excluded = after.operations.excluded.filter((line) => !excludedBefore.has(line));
    const attributesBefore = new Set(before.operations?.attributes ?? []);
    const attributes = after.operations.attributes.filter((line) => !attributesBefore.has(line));
    if (attributes.length > 0)
      parts.push(
        `added ${listed(attributes)} to .git/info/attributes, so \`git diff\` may not show their changes`,
      );
    const unreadBefore = new Set(before.operations?.unread ?? []);
    const unread = after.operations.unread.filter((name) => !unreadBefore.has(name));
    if (unread.length > 0)
      parts.push(`made ${listed(unread)} larger than is read here, so what it added there is not known`);
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

/**
 * When HEAD moved during the run to a commit that does not contain the one it named before (an
 * amend, a rebase, a reset, another branch), a warning: the user's `git log` then shows the run's
 * commits where theirs were. git itself answers (`merge-base --is-ancestor`), off the event loop.
 */
export async function historyWarning(
  cwd: string,
  before: GitOperations | undefined,
  after: GitOperations | undefined,
): Promise<string | undefined> {
  const [old, now] = [before?.head, after?.head];
  if (old === undefined || now === undefined || old === now) return undefined;
  const contained = await new Promise<boolean | undefined>((done) => {
    execFile(
      'git',
      ['-c', 'core.fsmonitor=false', 'merge-base', '--is-ancestor', old, now],
      { cwd, env: { ...process.env, GIT_OPTIONAL_LOCKS: '0' }, timeout: 20_000, killSignal: 'SIGKILL' },
      (error) => done(error === null ? true : error.code === 1 ? false : undefined),
    );
  });
  if (contained !== false) return undefined; // a descendant (new commits on top), or git could not say
  const short = (commit: string): string => commit.slice(0, 12);
  return `the run moved HEAD in ${cwd} from ${short(old)} to ${short(now)}, which does not contain it (an amend, a rebase, a reset or another branch): what \`git log\` shows there is not what you left; compare with \`git diff ${short(old)} HEAD\` before you build or push`;
}
