// The nested repositories the user's own `git status` in a project enters: gitlinks (mode 160000)
// in the project's index whose folder holds a git dir of its own. git runs a status inside each,
// with that repository's config (a `core.fsmonitor` runs as the user). The sandbox keeps the
// project's `.git/config` and `.git/modules` read-only, but the index stays the model's to write
// (`git add`), and a repository it makes and stages within one command is not there to protect
// beforehand: this says which there are, and which config keys of theirs name a program, for the
// caller to warn about. git itself reads the index and the configs (`ls-files --stage -z`,
// `config --list -z`), with no fsmonitor, no optional locks, only PATH (its absolute entries) and
// HOME from this process's environment, and a time bound (a config that is a FIFO must not hold
// the caller).
import { execFile, spawn } from 'node:child_process';
import type { Readable } from 'node:stream';
import { createHash } from 'node:crypto';
import { lstatSync, realpathSync, type Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import { delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import { commonDirOf, PROGRAM_KEY, readGitFile } from './internal/project-mounts.js';
import { isWithin } from './policy.js';

/** The most of git's output read for one repository's config; more is "unreadable to git". */
const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;
const GIT_TIMEOUT_MS = 20_000;

export interface EmbeddedRepository {
  /** The gitlink's path, relative to the cwd. */
  readonly path: string;
  /**
   * The keys of its config that name a program git (or your editor, ssh, gpg) runs from there:
   * `core.fsmonitor` (run by every `git status` that enters it), `core.hooksPath`, a filter's
   * `clean`, an `include.path` (another config)… Empty when none, or when it has no config.
   */
  readonly programs: readonly string[];
  /**
   * Equal from one look to the next while git enters the same git dir there and its config's
   * program keys have the same values: a change of either between two looks (a `core.fsmonitor`
   * added to a repository that was staged already) is a change to report like a new repository.
   */
  readonly fingerprint: string;
}

type Ran = { ok: true; stdout: Buffer } | { ok: false; stderr: string };

/**
 * The environment for git run on a project the model could write: only PATH (its absolute entries)
 * and HOME of this process's, no optional locks, the C locale, and `extra`.
 */
export function gitEnvironment(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = { GIT_OPTIONAL_LOCKS: '0', LC_ALL: 'C', ...extra };
  for (const name of ['PATH', 'HOME'] as const) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  // A relative entry (`node_modules/.bin`) would be looked up in the project: a `git` the model wrote.
  if (env['PATH'] !== undefined)
    env['PATH'] = env['PATH'].split(delimiter).filter(isAbsolute).join(delimiter);
  return env;
}

function git(cwd: string, args: readonly string[]): Promise<Ran> {
  return new Promise((done) => {
    execFile(
      'git',
      ['-c', 'core.fsmonitor=false', ...args],
      {
        cwd,
        env: gitEnvironment(),
        encoding: 'buffer',
        maxBuffer: MAX_OUTPUT_BYTES,
        timeout: GIT_TIMEOUT_MS,
        killSignal: 'SIGKILL',
      },
      (error, stdout, stderr) =>
        done(error === null ? { ok: true, stdout } : { ok: false, stderr: stderr.toString('utf8') }),
    );
  });
}

/** At most this many gitlinks are examined (each may cost a `git` or two); the rest are counted. */
export const MAX_EXAMINED_GITLINKS = 256;

export interface EmbeddedRepositories {
  readonly repositories: EmbeddedRepository[];
  /** Gitlinks past `MAX_EXAMINED_GITLINKS`, not examined: what they hold is not known. */
  readonly unexamined: number;
  /**
   * The index's entries marked skip-worktree or assume-unchanged (`git update-index`), whose changes
   * `git status` and `git diff` do not show: the first `MAX_HIDDEN_NAMED` paths, relative to the cwd.
   */
  readonly hidden: readonly string[];
  /** How many entries are so marked in all. */
  readonly hiddenCount: number;
  /** A digest of all their paths: it differs when the set does, past the first `MAX_HIDDEN_NAMED` too. */
  readonly hiddenDigest: string;
}

/** At most this many of the index's hidden entries are named. */
export const MAX_HIDDEN_NAMED = 64;

/**
 * The gitlinks of `cwd`'s index whose folder holds its own git dir: a `.git` folder, or a `.git`
 * file naming a git dir outside `cwd/.git/modules` (a submodule git made is there, kept read-only),
 * each with the program keys of its config. Paths relative to `cwd`. None outside a repository;
 * undefined when git could not read the index. The index is read as git writes it out (an index of
 * millions of entries holds neither memory nor the event loop), and only the first
 * `MAX_EXAMINED_GITLINKS` gitlinks are examined, a few at a time.
 */
export async function embeddedRepositories(cwd: string): Promise<EmbeddedRepositories | undefined> {
  // A process costs its caller a fork (~10 ms of a large server's event loop): none outside a repository.
  const none = { repositories: [], unexamined: 0, hidden: [], hiddenCount: 0, hiddenDigest: NO_HIDDEN };
  if (gitDirOf(cwd) === undefined) return none;
  const listed = await gitlinks(cwd);
  if (!listed.ok) return /not a git repository/i.test(listed.stderr) ? none : undefined;
  const found: (EmbeddedRepository | undefined)[] = [];
  let next = 0;
  const examine = async (): Promise<void> => {
    while (next < listed.paths.length) {
      const index = next++;
      const path = listed.paths[index]!;
      const gitDir = await ownGitDir(cwd, path);
      if (gitDir === undefined) continue;
      const { keys, settings } = await programSettings(gitDir);
      const fingerprint = createHash('sha256')
        .update(JSON.stringify([gitDir, settings]))
        .digest('hex');
      found[index] = { path, programs: keys, fingerprint };
    }
  };
  await Promise.all(Array.from({ length: 4 }, examine));
  return {
    repositories: found.filter((repository) => repository !== undefined),
    unexamined: listed.more,
    hidden: listed.hidden,
    hiddenCount: listed.hiddenCount,
    hiddenDigest: listed.hiddenDigest,
  };
}

const NO_HIDDEN = createHash('sha256').digest('hex');

/** The tag `git ls-files -v` gives an entry marked skip-worktree (`S`) or assume-unchanged (lower case). */
export const hiddenTag = (tag: number): boolean => tag === 0x53 || (tag >= 0x61 && tag <= 0x7a);

/**
 * Calls `each` with every NUL-terminated record of `stream` (a Buffer without the NUL), as it comes
 * (git's `-z` output). `each` returning false stops the reading (the caller ends the process).
 */
export function nulRecords(stream: Readable, each: (record: Buffer) => boolean): void {
  let rest = Buffer.alloc(0);
  let stopped = false;
  stream.on('data', (chunk: Buffer) => {
    if (stopped) return;
    let data = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
    for (let end = data.indexOf(0); end >= 0; end = data.indexOf(0)) {
      if (!each(data.subarray(0, end))) {
        stopped = true;
        return;
      }
      data = data.subarray(end + 1);
    }
    rest = Buffer.from(data);
  });
}

/**
 * The first `MAX_EXAMINED_GITLINKS` gitlinks' paths of `cwd`'s index and how many more there are,
 * and the entries marked hidden from `git status`, from `git ls-files -v --stage -z` read as it comes.
 */
function gitlinks(cwd: string): Promise<
  | {
      ok: true;
      paths: string[];
      more: number;
      hidden: string[];
      hiddenCount: number;
      hiddenDigest: string;
    }
  | { ok: false; stderr: string }
> {
  return new Promise((done) => {
    const child = spawn('git', ['-c', 'core.fsmonitor=false', 'ls-files', '-v', '--stage', '-z'], {
      cwd,
      env: gitEnvironment(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), GIT_TIMEOUT_MS);
    const paths: string[] = [];
    const hidden: string[] = [];
    let more = 0;
    let hiddenCount = 0;
    const digest = createHash('sha256');
    let stderr = '';
    const pathOf = (entry: Buffer): string => {
      const text = entry.toString('utf8');
      return text.slice(text.indexOf('\t') + 1);
    };
    nulRecords(child.stdout, (entry) => {
      // `<tag> <mode> <object> <stage>\t<path>`
      if (hiddenTag(entry[0]!)) {
        if (hidden.length < MAX_HIDDEN_NAMED) hidden.push(pathOf(entry));
        hiddenCount += 1;
        digest.update(entry.subarray(entry.indexOf(0x09) + 1)).update('\0'); // the path and its NUL
      }
      if (entry.subarray(2, 9).toString('latin1') === '160000 ') {
        if (paths.length < MAX_EXAMINED_GITLINKS) paths.push(pathOf(entry));
        else more += 1;
      }
      return true;
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (stderr.length < 64 * 1024) stderr += chunk.toString('utf8');
    });
    child.on('error', (error) => {
      clearTimeout(timer);
      done({ ok: false, stderr: error.message });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      done(
        code === 0
          ? { ok: true, paths, more, hidden, hiddenCount, hiddenDigest: digest.digest('hex') }
          : { ok: false, stderr: stderr || `git exited ${code}` },
      );
    });
  });
}

/**
 * The git dir git finds from `cwd`: a `.git` folder holding a `HEAD` there or in a folder above (an
 * empty one, such as the sandbox's stand-in for an absent `.git`, is skipped, as git skips it), or
 * what a `.git` file names (the file itself when it names nothing git can read). Undefined outside
 * a repository, or when `cwd` is gone.
 */
export function gitDirOf(cwd: string): string | undefined {
  if (lstatSync(cwd, { throwIfNoEntry: false }) === undefined) return undefined;
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    const dotGit = join(dir, '.git');
    const stat = lstatSync(dotGit, { throwIfNoEntry: false });
    if (stat?.isDirectory() && lstatSync(join(dotGit, 'HEAD'), { throwIfNoEntry: false }) !== undefined)
      return dotGit;
    if (stat !== undefined && !stat.isDirectory()) return readGitFile(dotGit) ?? dotGit;
    if (dirname(dir) === dir) return undefined;
  }
}

/**
 * The git dir git would enter for the gitlink's folder (its real path), unless it is one of
 * `.git/modules` (or none). A `.git` file is read by git itself (`rev-parse --resolve-git-dir`):
 * its syntax is git's (`gitdir: ` then the path, blanks and all), and a link on the way counts.
 */
async function ownGitDir(cwd: string, path: string): Promise<string | undefined> {
  const dotGit = join(cwd, path, '.git');
  const stat = await statOf(dotGit);
  if (stat === undefined) return undefined; // not checked out: git does not enter it
  if (!stat.isFile()) return realOr(dotGit); // a folder: a repository of its own
  const resolved = await git(cwd, ['rev-parse', '--resolve-git-dir', dotGit]);
  // Not a git dir git can enter now: named as the folder's own, what it names unknown.
  if (!resolved.ok) return realOr(dotGit);
  const gitDir = realOr(resolve(cwd, resolved.stdout.toString('utf8').replace(/\n$/, '')));
  return isWithin(gitDir, realOr(join(cwd, '.git', 'modules'))) ? undefined : gitDir;
}

/** What is at `path`, a link followed as git follows it (undefined: nothing there, or unreadable). */
const statOf = (path: string): Promise<Stats | undefined> => stat(path).catch(() => undefined);

const realOr = (path: string): string => {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
};

/**
 * The program keys of a git dir's config (its common dir's, for a worktree's, and its
 * `config.worktree`), and each with its values, in git's order.
 */
async function programSettings(gitDir: string): Promise<{ keys: string[]; settings: string[] }> {
  const configDir = commonDirOf(gitDir);
  const keys = new Set<string>();
  const settings: string[] = [];
  for (const config of [join(configDir, 'config'), join(gitDir, 'config.worktree')]) {
    const stat = lstatSync(config, { throwIfNoEntry: false });
    if (stat === undefined) continue;
    const name = config.endsWith('.worktree') ? 'config.worktree' : 'config';
    if (!stat.isFile()) {
      keys.add(`${name} (not a regular file)`);
      continue;
    }
    // Run from `/`: in the repository's git dir, git would first read its HEAD and commondir, where a
    // FIFO blocks it until its time bound. Relative includes resolve from the file all the same.
    const listed = await git('/', ['config', '--file', config, '--list', '-z']);
    if (!listed.ok) {
      keys.add(`${name} (unreadable to git)`);
      continue;
    }
    for (const entry of listed.stdout.toString('utf8').split('\0')) {
      const newline = entry.indexOf('\n');
      const key = (newline < 0 ? entry : entry.slice(0, newline)).toLowerCase();
      const value = newline < 0 ? '' : entry.slice(newline + 1);
      if (PROGRAM_KEY.test(key) || (key.startsWith('alias.') && value.trimStart().startsWith('!'))) {
        keys.add(key);
        settings.push(`${key}=${value}`);
      }
    }
  }
  return { keys: [...keys], settings };
}
