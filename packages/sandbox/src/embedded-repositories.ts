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
import { execFile } from 'node:child_process';
import { lstatSync, readFileSync } from 'node:fs';
import { delimiter, dirname, isAbsolute, join, resolve } from 'node:path';
import { isWithin } from './policy.js';

/** The most of git's output read (an index of a few million entries); more is "could not tell". */
const MAX_OUTPUT_BYTES = 256 * 1024 * 1024;
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
}

/** Config keys whose value is a program to run (or another config to read). */
const PROGRAM_KEY =
  /^(core\.(fsmonitor|hookspath|sshcommand|pager|editor|askpass)|diff\.external|sequence\.editor|gpg\.(.+\.)?program|credential\.(.+\.)?helper|filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver|include\.path|includeif\..+\.path|uploadpack\.packobjectshook|core\.alternaterefscommand)$/;

type Ran = { ok: true; stdout: Buffer } | { ok: false; stderr: string };

function git(cwd: string, args: readonly string[]): Promise<Ran> {
  const env: Record<string, string> = { GIT_OPTIONAL_LOCKS: '0', LC_ALL: 'C' };
  for (const name of ['PATH', 'HOME'] as const) {
    const value = process.env[name];
    if (value !== undefined) env[name] = value;
  }
  // A relative entry (`node_modules/.bin`) would be looked up in the project: a `git` the model wrote.
  if (env['PATH'] !== undefined)
    env['PATH'] = env['PATH'].split(delimiter).filter(isAbsolute).join(delimiter);
  return new Promise((done) => {
    execFile(
      'git',
      ['-c', 'core.fsmonitor=false', ...args],
      {
        cwd,
        env,
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

/**
 * The gitlinks of `cwd`'s index whose folder holds its own git dir: a `.git` folder, or a `.git`
 * file naming a git dir outside `cwd/.git/modules` (a submodule git made is there, kept read-only),
 * each with the program keys of its config. Paths relative to `cwd`. `[]` outside a repository;
 * undefined when git could not read the index.
 */
export async function embeddedRepositories(cwd: string): Promise<EmbeddedRepository[] | undefined> {
  // A process costs its caller a fork (~10 ms of a large server's event loop): none outside a repository.
  if (!inRepository(cwd)) return [];
  const listed = await git(cwd, ['ls-files', '--stage', '-z']);
  if (!listed.ok) return /not a git repository/i.test(listed.stderr) ? [] : undefined;
  const paths: string[] = [];
  for (const entry of listed.stdout.toString('utf8').split('\0')) {
    // `<mode> <object> <stage>\t<path>`
    const tab = entry.indexOf('\t');
    if (tab > 0 && entry.startsWith('160000 ')) paths.push(entry.slice(tab + 1));
  }
  const found: EmbeddedRepository[] = [];
  for (const path of paths) {
    const gitDir = ownGitDir(cwd, path);
    if (gitDir !== undefined) found.push({ path, programs: await programKeys(gitDir) });
  }
  return found;
}

/** Whether git finds a repository from `cwd`: a `.git` there or in a folder above (none if `cwd` is gone). */
function inRepository(cwd: string): boolean {
  if (lstatSync(cwd, { throwIfNoEntry: false }) === undefined) return false;
  for (let dir = resolve(cwd); ; dir = dirname(dir)) {
    if (lstatSync(join(dir, '.git'), { throwIfNoEntry: false }) !== undefined) return true;
    if (dirname(dir) === dir) return false;
  }
}

/** The git dir git would enter for the gitlink's folder, unless it is one of `.git/modules` (or none). */
function ownGitDir(cwd: string, path: string): string | undefined {
  const dotGit = join(cwd, path, '.git');
  try {
    const stat = lstatSync(dotGit);
    if (!stat.isFile()) return dotGit; // a folder (or a link to one): a repository of its own
    const named = /^gitdir:\s*(.+?)\s*$/m.exec(readFileSync(dotGit, 'utf8'))?.[1];
    if (named === undefined) return dotGit;
    const gitDir = resolve(dirname(dotGit), named);
    return isWithin(gitDir, join(cwd, '.git', 'modules')) ? undefined : gitDir;
  } catch {
    return undefined; // not checked out: git does not enter it
  }
}

/** The program keys of a git dir's config (its common dir's, for a worktree's). */
async function programKeys(gitDir: string): Promise<string[]> {
  let configDir = gitDir;
  try {
    const common = readFileSync(join(gitDir, 'commondir'), 'utf8').trim();
    if (common !== '') configDir = resolve(gitDir, common);
  } catch {
    // no commondir: the git dir holds its own config
  }
  const config = join(configDir, 'config');
  const stat = lstatSync(config, { throwIfNoEntry: false });
  if (stat === undefined) return [];
  if (!stat.isFile()) return ['config (not a regular file)'];
  const listed = await git(configDir, ['config', '--file', config, '--list', '-z']);
  if (!listed.ok) return ['config (unreadable to git)'];
  const keys = new Set<string>();
  for (const entry of listed.stdout.toString('utf8').split('\0')) {
    const newline = entry.indexOf('\n');
    const key = (newline < 0 ? entry : entry.slice(0, newline)).toLowerCase();
    const value = newline < 0 ? '' : entry.slice(newline + 1);
    if (PROGRAM_KEY.test(key) || (key.startsWith('alias.') && value.trimStart().startsWith('!')))
      keys.add(key);
  }
  return [...keys];
}
