// A git operation a run left half done in its repository: an interactive rebase (its todo list), a
// cherry-pick or revert sequence. Its `exec` lines run as the user at their `git rebase --continue`,
// outside the sandbox, and `git status` shows only the next two steps. The sandbox cannot keep these
// files read-only (a rebase inside writes them); the server compares them before and after the run.
import { createHash } from 'node:crypto';
import { lstatSync } from 'node:fs';
import { join } from 'node:path';
import { gitDirOf, readModelWritableFile } from '@aleph/sandbox';

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
  return { fingerprint: hash.digest('hex'), inProgress, execLines };
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
