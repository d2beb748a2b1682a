// Changes a run can keep out of the user's `git status` and `git diff` with neither an index bit nor
// an `info/` file, found at the run's end:
// - stale index entries: a tracked file whose content differs from its index entry while the entry's
//   file times and size (written into the index by the model) say it does not — git trusts them and
//   reads nothing. The index as the run found it is copied at its start: its file times are the
//   user's git's, and a file written since has a newer ctime, which no one can set back. The index's
//   entries are put on that copy (`read-tree --reset` keeps a copied entry's times where its object
//   is the same), so git compares again exactly the files that changed during the run (git compares
//   ctimes in whole seconds: a change in the second the user last changed that file is not seen).
// - newly ignored paths: untracked paths changed during the run (their ctime) that a rule file
//   changed during the run ignores (a `.gitignore` that ignores itself, a line added to a tracked one).
// git itself answers, its children under one time bound for the whole look (killed past it),
// output read as it comes and bounded, with no fsmonitor, no optional locks, and only PATH (its
// absolute entries) and HOME of this process's environment; nothing is written to the repository
// (the copy and the trees git builds lie in a private temporary folder, removed by `release`).
import { spawn } from 'node:child_process';
import { constants, lstatSync } from 'node:fs';
import { mkdir, mkdtemp, open, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join, relative } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Transform, type Readable, type Writable } from 'node:stream';
import { commonDirOf, gitDirOf, gitEnvironment, hiddenTag, isWithin, nulRecords } from '@aleph/sandbox';

/** The whole look at a run's end gives up (its git children killed) past this. */
const LOOK_TIMEOUT_MS = 30_000;
/** An index larger than this is not copied: every tracked file is then read again (within the time bound). */
const MAX_INDEX_BYTES = 512 * 1024 * 1024;
/** The most paths of one list held (those kept, of git's); past it the look is not conclusive. */
const MAX_PATHS = 100_000;
/** At most this many paths are named in a result; the rest are counted. */
export const MAX_UNSEEN_NAMED = 10;
/** File times come from a coarser clock than `Date.now()`: a second earlier counts as during the run. */
const CLOCK_SLACK_MS = 1000;

/** What was kept at a run's start, to compare at its end. */
export interface ReviewStart {
  /** When the run started (less `CLOCK_SLACK_MS`), in ms since the epoch. */
  readonly since: number;
  /** A private folder holding `index`, the copy of the index as the run found it (if it had one). */
  readonly folder: string;
  /** Removes the folder; idempotent, never rejects. */
  readonly release: () => Promise<void>;
}

/** A look's result: the paths (the first MAX_UNSEEN_NAMED), how many in all, or why it could not say. */
export type UnseenPaths =
  | { readonly kind: 'paths'; readonly paths: readonly string[]; readonly count: number }
  | { readonly kind: 'unknown'; readonly reason: string };

export interface UnseenChanges {
  /** Tracked files that differ from their index entry, which says they do not (`git status` trusts it). */
  readonly stale: UnseenPaths;
  /** Untracked paths changed during the run and ignored by a rule file changed during the run. */
  readonly ignored: UnseenPaths & { readonly rules?: readonly string[] };
}

type Ended = { ok: true } | { ok: false; reason: string };

interface GitChild {
  readonly stdin: Writable;
  readonly stdout: Readable;
  /** Settles once, when the process has closed: ok on status 0, else git's first line or the end. */
  readonly ended: Promise<Ended>;
  readonly kill: () => void;
}

/** How a git child runs: extra environment, and when (ms since the epoch) it is killed. */
interface GitOptions {
  readonly env?: Record<string, string>;
  readonly until: number;
}

/** `git -c core.fsmonitor=false <args>` in `cwd`, killed (SIGKILL) at `until`. */
function git(cwd: string, args: readonly string[], options: GitOptions): GitChild {
  const child = spawn('git', ['-c', 'core.fsmonitor=false', ...args], {
    cwd,
    env: gitEnvironment(options.env ?? {}),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let timedOut = false;
  const timer = setTimeout(
    () => {
      timedOut = true;
      child.kill('SIGKILL');
    },
    Math.max(0, options.until - Date.now()),
  );
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => {
    if (stderr.length < 4096) stderr += chunk.toString('utf8');
  });
  child.stdin.on('error', () => {}); // git gone before it read all: its end says why
  const ended = new Promise<Ended>((done) => {
    child.on('error', (error) => {
      clearTimeout(timer);
      done({ ok: false, reason: error.message });
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return done({ ok: true });
      const said = stderr.trim().split('\n')[0]?.slice(0, 200);
      const reason = timedOut
        ? `timed out: the look's bound is ${LOOK_TIMEOUT_MS / 1000} s`
        : said || (signal !== null ? `killed by ${signal}` : `exited ${code}`);
      done({ ok: false, reason: `git ${args[0]}: ${reason}` });
    });
  });
  return { stdin: child.stdin, stdout: child.stdout, ended, kill: () => child.kill('SIGKILL') };
}

/**
 * The NUL-separated paths `git <args>` prints that `keep` keeps (each asked as it comes), the first
 * MAX_PATHS kept; `full` when that was all. Those not kept are only bounded by git's time.
 */
async function pathsOf(
  cwd: string,
  args: readonly string[],
  options: GitOptions & { keep?: (path: string) => boolean },
): Promise<{ ok: true; paths: string[]; full: boolean } | { ok: false; reason: string }> {
  const run = git(cwd, args, options);
  const paths: string[] = [];
  let full = true;
  nulRecords(run.stdout, (record) => {
    const path = record.toString('utf8');
    if (!(options.keep?.(path) ?? true)) return true;
    if (paths.length === MAX_PATHS) {
      full = false;
      run.kill();
      return false;
    }
    paths.push(path);
    return true;
  });
  const ended = await run.ended;
  if (!full) return { ok: true, paths, full };
  return ended.ok ? { ok: true, paths, full } : ended;
}

/** What `git <args>` prints (its first 64 KiB), trimmed. */
async function outputOf(
  cwd: string,
  args: readonly string[],
  options: GitOptions,
): Promise<{ ok: true; text: string } | { ok: false; reason: string }> {
  const run = git(cwd, args, options);
  let text = '';
  run.stdout.on('data', (chunk: Buffer) => {
    if (text.length < 64 * 1024) text += chunk.toString('utf8');
  });
  const ended = await run.ended;
  return ended.ok ? { ok: true, text: text.trim() } : ended;
}

/**
 * Copies the index of `cwd`'s repository as it is now, into a private folder, and notes the time.
 * Undefined outside a repository. Await it before the run's first command.
 */
export async function reviewStart(cwd: string): Promise<ReviewStart | undefined> {
  const since = Date.now() - CLOCK_SLACK_MS;
  const gitDir = gitDirOf(cwd);
  if (gitDir === undefined) return undefined;
  const folder = await mkdtemp(join(tmpdir(), 'aleph-review-'));
  await mkdir(join(folder, 'objects'));
  let released: Promise<void> | undefined;
  const release = (): Promise<void> =>
    (released ??= rm(folder, { recursive: true, force: true }).catch(() => undefined));
  try {
    // Opened without following a link or blocking (a FIFO in its place), read only as a regular file.
    const index = await open(
      join(gitDir, 'index'),
      constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK,
    );
    try {
      const stat = await index.stat();
      if (stat.isFile() && stat.size <= MAX_INDEX_BYTES) {
        const copy = await open(join(folder, 'index'), 'wx', 0o600);
        await pipeline(index.createReadStream({ autoClose: false }), copy.createWriteStream());
      }
    } finally {
      await index.close();
    }
  } catch {
    // No index yet (a repository with nothing added): every entry at the end is compared.
  }
  return { since, folder, release };
}

/** Whether `path`'s status changed during the run (its ctime, which cannot be set back). */
function changedSince(path: string, since: number): boolean {
  const stat = lstatSync(path, { bigint: true, throwIfNoEntry: false });
  return stat !== undefined && stat.ctimeNs >= BigInt(since) * 1_000_000n;
}

/** A path in GIT_ALTERNATE_OBJECT_DIRECTORIES: C-quoted when it holds the list's delimiter. */
const alternate = (path: string): string =>
  path.includes(delimiter) || path.startsWith('"') ? JSON.stringify(path) : path;

/**
 * Tracked files of the repository at `top` that differ from their index entry while `git status` and
 * `git diff` show nothing for them (paths from `top`). Entries marked skip-worktree or
 * assume-unchanged are left to the look that names those, and conflicted ones to `git status`,
 * which lists them.
 */
async function staleEntries(
  top: string,
  gitDir: string,
  start: ReviewStart,
  until: number,
): Promise<UnseenPaths> {
  // Trees git builds go to a private object folder; the repository's objects are read beside it.
  const env = {
    GIT_OBJECT_DIRECTORY: join(start.folder, 'objects'),
    GIT_ALTERNATE_OBJECT_DIRECTORIES: alternate(join(commonDirOf(gitDir), 'objects')),
  };
  // The copy's file times are checked whole, whatever the user's config trusts less (a file's
  // ctime, with core.trustctime=false, or all but its mtime and size with core.checkStat=minimal).
  const copied = {
    ...env,
    GIT_INDEX_FILE: join(start.folder, 'index'),
    GIT_CONFIG_COUNT: '2',
    GIT_CONFIG_KEY_0: 'core.checkStat',
    GIT_CONFIG_VALUE_0: 'default',
    GIT_CONFIG_KEY_1: 'core.trustctime',
    GIT_CONFIG_VALUE_1: 'true',
  };
  const listedIndex = { ...env, GIT_INDEX_FILE: join(start.folder, 'listed') };
  // The files the copy says differ from the index's entries, git reading again those whose times
  // changed since the run started.
  const differing = async (): Promise<Awaited<ReturnType<typeof pathsOf>>> => {
    // The index's entries, but the marked and conflicted ones, as an index of their own: its tree is
    // what git builds from entries alone (the index's own cache of trees is the model's to forge).
    const listing = git(top, ['ls-files', '-v', '--stage', '-z'], { until });
    const listed = git(top, ['update-index', '-z', '--index-info'], { env: listedIndex, until });
    let rest = Buffer.alloc(0);
    const unmarked = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        let data = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
        const out: Buffer[] = [];
        for (let end = data.indexOf(0); end >= 0; end = data.indexOf(0)) {
          // `<tag> <mode> <object> <stage>\t<path>`: --index-info reads it without the tag.
          const record = data.subarray(0, end + 1);
          const tab = record.indexOf(0x09);
          if (!hiddenTag(record[0]!) && tab > 2 && record[tab - 1] === 0x30) out.push(record.subarray(2));
          data = data.subarray(end + 1);
        }
        rest = Buffer.from(data);
        done(null, Buffer.concat(out));
      },
    });
    const piped = await pipeline(listing.stdout, unmarked, listed.stdin).then(
      (): Ended => ({ ok: true }),
      (error: Error): Ended => ({ ok: false, reason: `reading the index: ${error.message}` }),
    );
    for (const ended of [await listing.ended, await listed.ended, piped]) if (!ended.ok) return ended;
    const tree = await outputOf(top, ['write-tree', '--missing-ok'], { env: listedIndex, until });
    if (!tree.ok) return tree;
    if (!/^[0-9a-f]{40,64}$/.test(tree.text)) return { ok: false, reason: 'git write-tree: no tree' };
    // The copy takes those entries, keeping its own file times where the object is the same.
    const reset = await git(top, ['read-tree', '--reset', tree.text], { env: copied, until }).ended;
    if (!reset.ok) return reset;
    const refresh = ['update-index', '-q', '--ignore-submodules', '--refresh'];
    const refreshed = await git(top, refresh, { env: copied, until }).ended;
    if (!refreshed.ok) return refreshed;
    return pathsOf(top, ['diff-files', '--name-only', '-z', '--ignore-submodules=all'], {
      env: copied,
      until,
    });
  };
  const [differ, visible] = await Promise.all([
    differing(),
    // What the index itself shows changed (unrefreshed: more than `git status` shows, never less).
    pathsOf(top, ['diff-files', '--name-only', '-z', '--ignore-submodules=all'], { until }),
  ]);
  if (!differ.ok) return { kind: 'unknown', reason: differ.reason };
  if (!visible.ok) return { kind: 'unknown', reason: visible.reason };
  if (!differ.full || !visible.full)
    return { kind: 'unknown', reason: `more than ${MAX_PATHS} files differ from the index` };
  const seen = new Set(visible.paths);
  const stale = differ.paths.filter((path) => !seen.has(path));
  return { kind: 'paths', paths: stale.slice(0, MAX_UNSEEN_NAMED), count: stale.length };
}

/**
 * Untracked paths of `cwd` changed during the run that a rule file changed during the run ignores
 * (not `info/exclude`, whose new lines are named on their own), with those rule files. A folder
 * ignored whole is one path (`--directory`): a `node_modules/` costs one line.
 */
async function newlyIgnored(
  cwd: string,
  top: string,
  gitDir: string,
  start: ReviewStart,
  until: number,
): Promise<UnseenChanges['ignored']> {
  const none = { kind: 'paths', paths: [], count: 0 } as const;
  // Each path's times looked at as git names it (a few thousand a chunk of its output).
  const ignored = await pathsOf(
    cwd,
    ['ls-files', '-z', '--others', '--ignored', '--exclude-standard', '--directory'],
    { until, keep: (path) => path !== './' && changedSince(join(cwd, path), start.since) },
  );
  if (!ignored.ok) return { kind: 'unknown', reason: ignored.reason };
  const fresh = ignored.paths;
  const unread = ignored.full ? undefined : `more than ${MAX_PATHS} ignored paths changed`;
  if (fresh.length === 0) return unread === undefined ? none : { kind: 'unknown', reason: unread };
  const common = commonDirOf(gitDir);
  const check = git(cwd, ['check-ignore', '-v', '-z', '--no-index', '--stdin'], { until });
  check.stdin.end(`${fresh.join('\0')}\0`);
  // `<source>\0<line>\0<pattern>\0<path>\0` for each path ignored.
  const fields: string[] = [];
  const rules = new Map<string, boolean>();
  const found: string[] = [];
  const sources = new Set<string>();
  nulRecords(check.stdout, (record) => {
    fields.push(record.toString('utf8'));
    if (fields.length < 4) return true;
    const [source = '', , , path = ''] = fields.splice(0, 4);
    const file = isAbsolute(source) ? source : join(top, source);
    let changed = rules.get(file);
    if (changed === undefined) {
      changed = !isWithin(file, common) && changedSince(file, start.since);
      rules.set(file, changed);
    }
    // A folder named whole stands for what lies in it.
    const under = found.at(-1);
    if (changed && !(under?.endsWith('/') === true && path.startsWith(under))) {
      found.push(path);
      sources.add(relative(cwd, file));
    }
    return true;
  });
  const ended = await check.ended;
  if (!ended.ok) return { kind: 'unknown', reason: ended.reason };
  if (found.length === 0 && unread !== undefined) return { kind: 'unknown', reason: unread };
  return {
    kind: 'paths',
    paths: found.slice(0, MAX_UNSEEN_NAMED),
    count: found.length,
    rules: [...sources].slice(0, MAX_UNSEEN_NAMED),
  };
}

/** Both looks, at a run's end, side by side, paths relative to `cwd`; undefined outside a repository. */
export async function unseenChanges(cwd: string, start: ReviewStart): Promise<UnseenChanges | undefined> {
  const gitDir = gitDirOf(cwd);
  if (gitDir === undefined) return undefined;
  const until = Date.now() + LOOK_TIMEOUT_MS;
  const top = await outputOf(cwd, ['rev-parse', '--show-toplevel'], { until });
  if (!top.ok) {
    const unknown = { kind: 'unknown', reason: top.reason } as const;
    return { stale: unknown, ignored: unknown };
  }
  const [stale, ignored] = await Promise.all([
    staleEntries(top.text, gitDir, start, until),
    newlyIgnored(cwd, top.text, gitDir, start, until),
  ]);
  const fromCwd = (path: string): string => relative(cwd, join(top.text, path));
  return {
    stale: stale.kind === 'paths' ? { ...stale, paths: stale.paths.map(fromCwd) } : stale,
    ignored,
  };
}
