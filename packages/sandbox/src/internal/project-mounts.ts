// What keeps the protected paths inside a writable cwd protected: each is a mount point (bound
// read-only, or hidden), and so is each of its ancestors between it and the cwd (bound onto itself,
// still writable). A mount point cannot be renamed, removed or replaced from inside (EBUSY), and a
// hard link across mounts fails (EXDEV): no rename, copy-then-swap or link of an ancestor moves the
// protected files out from under their mount.
//
// Invariant: every protected path inside the cwd exists as a mount point for the whole command, and
// what `prepare` creates for that (an absent path's empty stand-in) is removed by `release` once the
// last command using it ended, only if it is still the empty stand-in. A stand-in left behind (the
// server killed) runs nothing: an empty dir, an empty file, or a `commondir` of ".".
import {
  closeSync,
  type Dirent,
  lstatSync,
  mkdirSync,
  opendirSync,
  openSync,
  readFileSync,
  realpathSync,
  rmdirSync,
  unlinkSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join, resolve, sep } from 'node:path';
import type * as ShellQuote from 'shell-quote';
import { SandboxError } from '../errors.js';
import { readModelWritableFile } from '../model-file.js';
import { isWithin, racyMs, type ResolvedPolicy } from '../policy.js';

/** A protected path, how it is kept, and what stands in for it when absent. */
export interface ProtectedMount {
  readonly path: string;
  /** `read-only`: bound onto itself read-only; `pin`: bound onto itself writable (`.git`). */
  readonly how: 'read-only' | 'pin';
  readonly absent: StandIn;
  /** Kept only while it exists: no stand-in, no scan for links inside, no hard-link check (a home dot entry). */
  readonly existing?: true;
}

/** An absent protected path becomes, for the command: an empty dir, an empty file, or a `commondir` of ".". */
type StandIn = 'dir' | 'file' | 'commondir';

const GIT_PATHS: readonly (readonly [string, StandIn])[] = [
  ['hooks', 'dir'],
  ['config', 'file'],
  ['commondir', 'commondir'],
  ['config.worktree', 'file'],
  ['worktrees', 'dir'],
  ['modules', 'dir'],
];

/**
 * Kept read-only when present in the cwd: git hook managers' hook bodies and configs (what the
 * user's next commit runs), and pnpm's virtual store (hard links into the user's package store).
 */
const LINKED_OR_RUN_LATER = [
  '.husky',
  '.pre-commit-config.yaml',
  'lefthook.yml',
  'lefthook.yaml',
  '.lefthook.yml',
  '.lefthook.yaml',
  'lefthook-local.yml',
  'lefthook-local.yaml',
  '.lefthook',
  '.lefthook-local',
  'node_modules/.pnpm',
];

/**
 * Other tools' project config, kept read-only when present: what they run later by themselves.
 * mise's config (`[hooks] enter`, `[env] _.source` run as the user's shell enters the folder; mise
 * asks to trust a path once, not each change), Yarn's `.yarnrc.yml` and the releases and plugins it
 * points at (`yarnPath`: every `yarn` runs that file), editors' workspace tasks and settings, a dev
 * container's config, and the project MCP servers other tools start (`.mcp.json`).
 * `.tool-versions` is data only. None has a
 * stand-in when absent: an empty file would show in the project (`git add -A` would stage it), and a
 * new one is the model's like a package.json script, which the user's `yarn` runs too.
 */
const RUN_BY_TOOLS = [
  'mise.toml',
  '.mise.toml',
  'mise.local.toml',
  '.mise.local.toml',
  '.rtx.toml',
  '.rtx.local.toml',
  '.config/mise.toml',
  '.config/mise.local.toml',
  '.config/mise',
  '.mise/config.toml',
  '.mise/config.local.toml',
  'mise/config.toml',
  '.yarnrc.yml',
  '.yarn/releases',
  '.yarn/plugins',
  // Editors' workspace config, trusted once per folder: a task run at the folder's opening
  // (`runOn: folderOpen`), a setting naming a program an extension runs, an IDE's startup tasks.
  '.vscode/tasks.json',
  '.vscode/settings.json',
  '.vscode/launch.json',
  '.idea/workspace.xml',
  '.idea/runConfigurations',
  '.idea/startup.xml',
  // A dev container's `initializeCommand` runs on the host at every start of the container.
  '.devcontainer',
  '.devcontainer.json',
  // Project MCP servers other tools start as the user: Claude Code approves a `.mcp.json` server
  // once, by its name, then runs whatever command it names; editors' own project MCP config.
  '.mcp.json',
  '.vscode/mcp.json',
  '.cursor/mcp.json',
];

/** mise's per-environment config in the cwd (`MISE_ENV=ci` reads `mise.ci.toml`, `.mise.ci.local.toml`). */
const MISE_ENV_FILE = /^\.?mise\.[^/]+\.toml$/;

/** Other version control systems' repository folders and the config each reads from there. */
const OTHER_VCS = [
  ['.hg', 'hgrc'],
  ['.sl', 'config'],
  ['.jj', 'repo'],
] as const;

/**
 * The text of a config or pointer file read here (at most `maxBytes`), or undefined when there is
 * none: never blocking, never reading a device. A folder the model could write before (a run in a
 * folder above) can hold a FIFO in its place, whose open would block this process, or a link to
 * `/dev/zero`, whose read never ends.
 */
function textOf(path: string, maxBytes?: number): string | undefined {
  const file = readModelWritableFile(path, { maxBytes, larger: 'head' });
  return file.kind === 'read' ? file.text : undefined;
}

/**
 * Config files read for one config and what it includes, and include paths kept, at most: each file
 * is read once, so a config including itself many times (written by a run in a folder above) costs
 * that many reads, not that many to the power of the depth.
 */
const MAX_CONFIG_FILES = 64;
const MAX_INCLUDES = 256;
/** Words of program values looked up at most (each costs an lstat at every command's start). */
const MAX_PROGRAMS = 4096;

/** The files an hgrc names with `%include` (relative to its folder), a few levels deep. */
function hgIncludes(config: string, depth = 0, read = new Set([config])): string[] {
  const text = textOf(config);
  if (text === undefined) return [];
  const found: string[] = [];
  for (const line of text.split('\n')) {
    const named = /^%include\s+(.+?)\s*$/.exec(line)?.[1];
    if (named === undefined || named.startsWith('~') || named.includes('$')) continue;
    const path = resolve(dirname(config), named);
    if (found.length >= MAX_INCLUDES) break;
    found.push(path);
    if (depth >= 4 || read.has(path) || read.size >= MAX_CONFIG_FILES) continue;
    read.add(path);
    found.push(...hgIncludes(path, depth + 1, read).slice(0, MAX_INCLUDES - found.length));
  }
  return found;
}

type Kind = 'dir' | 'file' | 'symlink' | 'other';

/** What is at `path` (a link not followed), and its hard link count; one lstat. */
function entryOf(path: string): { kind: Kind; nlink: number } | undefined {
  try {
    const stat = lstatSync(path, { throwIfNoEntry: false }); // most are absent: no error made for each
    if (stat === undefined) return undefined;
    const kind = stat.isDirectory()
      ? 'dir'
      : stat.isFile()
        ? 'file'
        : stat.isSymbolicLink()
          ? 'symlink'
          : 'other';
    return { kind, nlink: stat.nlink };
  } catch {
    return undefined;
  }
}

const kindOf = (path: string): Kind | undefined => entryOf(path)?.kind;

/** What a `.git/config` makes git read or run from the cwd. */
interface GitConfigPaths {
  /** `core.hooksPath`, when set: git runs the hooks found there. */
  readonly hooks?: string;
  /** `include.path` and `includeIf.*.path`: read as config (an absent one is skipped by git). */
  readonly includes: readonly string[];
  /** A value naming a file in the cwd (`core.fsmonitor = tools/watch.sh`, a filter, an alias). */
  readonly programs: readonly string[];
}

/**
 * A config line's value as git reads it: quotes removed, `\\`, `\\"`, `\\t`, `\\n` unescaped, an
 * unquoted `#` or `;` starting a comment, surrounding blanks trimmed.
 */
export function gitConfigValue(raw: string): string {
  let value = '';
  let quoted = false;
  let pending = ''; // blanks kept only when more of the value follows them
  for (let i = 0; i < raw.length; i += 1) {
    const char = raw[i]!;
    if (char === '\\' && i + 1 < raw.length) {
      const next = raw[(i += 1)]!;
      value += pending + ({ t: '\t', n: '\n', b: '\b' }[next] ?? next);
      pending = '';
    } else if (char === '"') quoted = !quoted;
    else if (!quoted && (char === '#' || char === ';')) break;
    else if (!quoted && (char === ' ' || char === '\t')) pending += value === '' ? '' : char;
    else {
      value += pending + char;
      pending = '';
    }
  }
  return value;
}

/**
 * Config keys whose value is a program git (or the user's editor, ssh, gpg, pager) runs, or a
 * config it reads (`filter.lfs.clean`, `core.fsmonitor`), lower case but for a subsection.
 */
export const PROGRAM_KEY =
  /^(core\.(fsmonitor|hookspath|sshcommand|pager|editor|askpass|gitproxy|alternaterefscommand)|pager\..+|diff\.external|sequence\.editor|interactive\.difffilter|gpg\.(.+\.)?program|credential\.(.+\.)?helper|filter\..+\.(clean|smudge|process)|diff\..+\.(textconv|command)|merge\..+\.driver|(merge|diff)tool\..+\.(cmd|path)|remote\..+\.(uploadpack|receivepack|proxy)|submodule\..+\.update|trailer\..+\.(command|cmd)|sendemail\.(.+\.)?(smtpserver|sendmailcmd)|(man|browser)\..+\.(cmd|path)|web\.browser|include\.path|includeif\..+\.path|uploadpack\.packobjectshook)$/;

/** A config's lines, a value continued with a `\\` at its line's end joined to the next as git does. */
function configLines(text: string): string[] {
  const lines: string[] = [];
  let pending = '';
  for (const raw of text.split('\n')) {
    const line = raw.replace(/\r$/, '');
    const trailing = /\\+$/.exec(line)?.[0].length ?? 0;
    if (trailing % 2 === 1) pending += line.slice(0, -1);
    else {
      lines.push(pending + line);
      pending = '';
    }
  }
  if (pending !== '') lines.push(pending);
  return lines;
}

/** shell-quote, loaded at its first use (a config naming a program): the idle server never pays for it. */
let shellQuoteModule: typeof ShellQuote | undefined;
const shellQuote = (): typeof ShellQuote =>
  (shellQuoteModule ??= createRequire(import.meta.url)('shell-quote') as typeof ShellQuote);

/** The words a shell would make of `command` (quotes removed, variables left empty, operators dropped). */
function shellWords(command: string): string[] {
  try {
    return shellQuote()
      .parse(command, () => '')
      .filter((token): token is string => typeof token === 'string' && token !== '');
  } catch {
    return command.split(/\s+/).filter((word) => word !== '');
  }
}

/**
 * The paths `config` and the files it includes (a few levels, as git follows them) name. `read`:
 * the files of this chain read so far (each is read once, at most `MAX_CONFIG_FILES`).
 */
export function gitConfigPaths(
  config: string,
  cwd: string,
  depth = 0,
  home?: string,
  read = new Set<string>(),
): GitConfigPaths {
  if (read.has(config) || read.size >= MAX_CONFIG_FILES) return { includes: [], programs: [] };
  read.add(config);
  const text = textOf(config);
  if (text === undefined) return { includes: [], programs: [] };
  let section = '';
  let subsection = ''; // `[filter "lfs"]`: its keys are `filter.lfs.*`
  let hooks: string | undefined;
  const includes: string[] = [];
  const programs: string[] = [];
  const include = (path: string): void => {
    if (includes.length >= MAX_INCLUDES) return;
    includes.push(path);
    if (depth >= 4) return;
    const inner = gitConfigPaths(path, cwd, depth + 1, home, read);
    hooks = inner.hooks ?? hooks;
    includes.push(...inner.includes.slice(0, MAX_INCLUDES - includes.length));
    for (const program of inner.programs.slice(0, MAX_PROGRAMS - programs.length)) programs.push(program);
  };
  for (const raw of configLines(text)) {
    const line = raw.trim();
    const header = /^\[\s*([^\]\s"]+)(?:\s+"([^"]*)")?/.exec(line);
    if (header !== null) {
      section = (header[1] ?? '').toLowerCase();
      subsection = header[2] === undefined ? '' : `.${header[2]}`;
    }
    const entry = /^([A-Za-z][\w-]*)\s*=\s*(.*)$/.exec(line.replace(/^\[[^\]]*\]\s*/, ''));
    if (entry === null) continue;
    const key = (entry[1] ?? '').toLowerCase();
    let value = gitConfigValue(entry[2] ?? '');
    if (value === '') continue;
    if (value.startsWith('~/') && home !== undefined) value = join(home, value.slice(2));
    // git resolves a relative hooksPath from the top of the work tree, an include from the config's folder.
    if (section === 'core' && key === 'hookspath') hooks = isAbsolute(value) ? value : resolve(cwd, value);
    else if ((section === 'include' || section === 'includeif') && key === 'path') {
      if (!value.startsWith('~')) include(resolve(dirname(config), value));
    } else {
      // Every word a shell would pass (`sh tools/watch.sh`, `python3 clean.py %f`): the script an
      // interpreter runs is the program as much as the interpreter. Only existing files are kept.
      const program = PROGRAM_KEY.test(`${section}${subsection}.${key}`) || value.trimStart().startsWith('!');
      for (const word of shellWords(value.trimStart().replace(/^!/, '')))
        if ((program || word.includes('/')) && programs.length < MAX_PROGRAMS)
          programs.push(resolve(cwd, word));
    }
  }
  return { ...(hooks === undefined ? {} : { hooks }), includes, programs };
}

/** The git dir a `.git` file names (`readGitFile`), when it is a folder inside `cwd` other than `cwd`. */
function gitFileTarget(file: string, cwd: string): string | undefined {
  const named = readGitFile(file);
  if (named === undefined) return undefined;
  let target: string;
  try {
    target = realpathSync(named);
  } catch {
    return undefined;
  }
  return target !== cwd && isWithin(target, cwd) && kindOf(target) === 'dir' ? target : undefined;
}

/**
 * The git dir a `.git` file names, as git reads it: `gitdir: ` then the path, only the line end
 * removed, relative to the file's folder (absolute, not resolved further). Undefined when it is no
 * such file.
 */
export function readGitFile(file: string): string | undefined {
  const text = textOf(file, 4096);
  if (text === undefined || !text.startsWith('gitdir: ')) return undefined;
  return resolve(dirname(file), text.slice('gitdir: '.length).replace(/[\r\n]+$/, ''));
}

/**
 * A git dir's common dir, as git finds it: what its `commondir` file names (relative to the git
 * dir), else the git dir itself (a main checkout's, or a `commondir` that is no regular file).
 */
export function commonDirOf(gitDir: string): string {
  const named = textOf(join(gitDir, 'commondir'), 4096)?.replace(/[\r\n]+$/, '');
  return named === undefined || named === '' ? gitDir : resolve(gitDir, named);
}

/**
 * The configs git reads before the repository's own, in its order: the system's, then the user's
 * (`$GIT_CONFIG_GLOBAL`, else `$XDG_CONFIG_HOME/git/config` and `~/.gitconfig`). Their relative
 * `core.hooksPath` and programs resolve in each work tree, the cwd's too.
 */
function outerGitConfigs(home: string | undefined): string[] {
  const env = process.env;
  if (env['GIT_CONFIG_GLOBAL'] !== undefined) return ['/etc/gitconfig', env['GIT_CONFIG_GLOBAL']];
  const xdg = env['XDG_CONFIG_HOME'] ?? (home === undefined ? undefined : join(home, '.config'));
  return [
    '/etc/gitconfig',
    ...(xdg === undefined ? [] : [join(xdg, 'git', 'config')]),
    ...(home === undefined ? [] : [join(home, '.gitconfig')]),
  ];
}

/**
 * The project's protected paths under `cwd`: Claude Code's `.claude`, `.git` (read-only when a
 * file or absent; pinned when a dir, with its hooks, config and redirects read-only), `HEAD`, git's
 * `core.hooksPath`, the files its config includes or names as programs, the policy's read-only
 * files that lie in the cwd, and (the cwd at or above the home folder) the home's dot entries.
 */
export function projectProtections(
  cwd: string,
  policy: ResolvedPolicy,
  seen: StandInsSeen = new Map(),
): ProtectedMount[] {
  const git = join(cwd, '.git');
  // The cwd's names, from its kept listing while it is unchanged: a path whose first part is not
  // among them is absent, with no lstat (most of the paths looked for are absent).
  const names = cwdNames(cwd);
  const inCwd = (relative: string): Kind | undefined =>
    names !== undefined && !names.has(relative.split(sep, 1)[0] ?? relative)
      ? undefined
      : kindOf(join(cwd, relative));
  const mounts: ProtectedMount[] = [{ path: join(cwd, '.claude'), how: 'read-only', absent: 'dir' }];
  // An empty `.git` stand-in another command (or a kept series) holds is no git dir: kept read-only.
  // A `.git` file (kept read-only) naming a git dir inside the cwd (`--separate-git-dir=.gitdir`):
  // that git dir is kept as `.git` would be.
  const kind = inCwd('.git');
  const gitDir =
    kind === 'dir' && !ownStandIn(git, seen) ? git : kind === 'file' ? gitFileTarget(git, cwd) : undefined;
  if (gitDir !== undefined) {
    if (gitDir !== git) mounts.push({ path: git, how: 'read-only', absent: 'dir' });
    mounts.push({ path: gitDir, how: 'pin', absent: 'dir' });
    for (const [name, absent] of GIT_PATHS)
      mounts.push({ path: join(gitDir, name), how: 'read-only', absent });
    mounts.push(...configNamed(cwd, [join(gitDir, 'config')], policy.home));
  } else {
    mounts.push({ path: git, how: 'read-only', absent: 'dir' });
    // Its git dir elsewhere (a linked worktree's or a submodule's `.git` file), or the cwd a folder
    // of a work tree above it: the repository's config names hooks and programs from that work
    // tree's top, which can lie in the cwd (`core.hooksPath = .githooks` in a linked worktree).
    const outer = enclosingRepository(cwd, seen, kind === undefined);
    if (outer !== undefined) mounts.push(...configNamed(outer.top, outer.configs, policy.home));
  }
  // Where `.git` is no git dir (absent, or broken: a HEAD rewritten, refs removed), git takes the
  // folder itself for one when it holds a valid HEAD, objects/ and refs/, with a `config` beside
  // them: the model's, and its `core.fsmonitor` runs at the user's next `git status`. A HEAD that is
  // a read-only folder is never valid, and git shows no empty folder.
  mounts.push({ path: join(cwd, 'HEAD'), how: 'read-only', absent: 'dir' });
  // Mercurial's, Sapling's and Jujutsu's repository config, when the repository is there: its
  // folder pinned (a rename cannot put another in its place), the config read-only, what an hgrc
  // `%include`s too. An absent one has no stand-in: an empty `.hg` or `.jj` would be a broken
  // repository to the user's tools while the command runs.
  for (const [dir, config] of OTHER_VCS) {
    const path = join(cwd, dir);
    if (inCwd(dir) !== 'dir' || ownStandIn(path, seen)) continue;
    mounts.push({ path, how: 'pin', absent: 'dir' });
    // `.jj/repo` is the store jj writes at each command, or a workspace's file naming another.
    const kept =
      dir === '.jj' && kindOf(join(path, 'repo')) === 'dir'
        ? join(path, 'repo', 'config.toml')
        : join(path, config);
    mounts.push({ path: kept, how: 'read-only', absent: 'file' });
    if (dir === '.hg')
      for (const included of hgIncludes(join(path, config)))
        mounts.push({ path: included, how: 'read-only', absent: 'file' });
  }
  // What git hook managers run: husky's hook bodies, pre-commit's and lefthook's commands. And
  // pnpm's virtual store, whose files are hard links into the user's store: written in place, they
  // would change every project installed from it.
  const miseEnvFiles = [...(names ?? [])].filter((name) => MISE_ENV_FILE.test(name));
  for (const name of [...LINKED_OR_RUN_LATER, ...RUN_BY_TOOLS, ...miseEnvFiles]) {
    const path = join(cwd, name);
    const kind = inCwd(name);
    // A link is kept by what it leads to in the cwd.
    if (kind === 'dir' || kind === 'file' || kind === 'symlink')
      mounts.push({ path, how: 'read-only', absent: kind === 'dir' ? 'dir' : 'file', existing: true });
  }
  for (const path of policy.readOnly) mounts.push({ path, how: 'read-only', absent: 'file' });
  for (const path of policy.readOnlyFolders)
    if (isWithin(path, cwd)) mounts.push({ path, how: 'read-only', absent: 'dir', existing: true });
  // The cwd at or above the home folder: its dot entries (shell startup files, .gitconfig, .config,
  // .local/bin, a toolchain's bin) configure or are what runs unconfined later.
  if (policy.home !== undefined && isWithin(policy.home, cwd)) {
    const denied = new Set(policy.deny.map(({ path }) => path));
    for (const name of dotEntries(policy.home)) {
      const path = join(policy.home, name);
      if (!denied.has(path) && !mounts.some((mount) => isWithin(path, mount.path)))
        mounts.push({ path, how: 'read-only', absent: 'file', existing: true });
    }
  }
  // A home dot entry that leads into the cwd from outside it (a dotfiles repository the home links
  // into, as GNU stow makes: `~/.gitconfig`, `~/.config/nvim`): what it leads to runs unconfined later.
  if (policy.home !== undefined && !isWithin(policy.home, cwd))
    for (const path of homeLinksInto(policy.home, cwd))
      mounts.push({ path, how: 'read-only', absent: 'file', existing: true });
  return mounts.filter(({ path }) => isWithin(path, cwd) && path !== cwd);
}

/**
 * What git's configs make it run or read, from the work tree `top`: `core.hooksPath`, the files
 * they include, the existing files their values name as programs. The repository's own configs
 * (`repository`, in git's order) win; the system's and the user's name hooks and programs too.
 */
function configNamed(top: string, repository: readonly string[], home: string | undefined): ProtectedMount[] {
  const named = [...outerGitConfigs(home), ...repository].map((config) =>
    gitConfigPaths(config, top, 0, home),
  );
  const mounts: ProtectedMount[] = [];
  const hooks = named.reduce<string | undefined>((found, paths) => paths.hooks ?? found, undefined);
  if (hooks !== undefined) mounts.push({ path: hooks, how: 'read-only', absent: 'dir' });
  for (const path of named.flatMap((paths) => paths.includes))
    mounts.push({ path, how: 'read-only', absent: 'file' });
  for (const path of named.flatMap((paths) => paths.programs))
    if (kindOf(path) === 'file') mounts.push({ path, how: 'read-only', absent: 'file', existing: true });
  return mounts;
}

/**
 * The repository git finds from `cwd` when the cwd holds no git dir of its own, as git looks: the
 * cwd's `.git` file, else the first folder above holding a `.git` file or a git dir. Its work
 * tree's top, and its configs: the common dir's `config` (a `commondir` file followed) and the
 * git dir's `config.worktree`.
 */
function enclosingRepository(
  cwd: string,
  seen: StandInsSeen,
  noDotGit = false,
): { top: string; configs: string[] } | undefined {
  for (let dir = cwd; ; dir = dirname(dir)) {
    const dotGit = join(dir, '.git');
    const gitDir =
      dir === cwd && noDotGit // the cwd's listing has no `.git`
        ? undefined
        : (readGitFile(dotGit) ??
          (kindOf(join(dotGit, 'HEAD')) !== undefined && !ownStandIn(dotGit, seen) ? dotGit : undefined));
    if (gitDir !== undefined) {
      const configs = [join(commonDirOf(gitDir), 'config'), join(gitDir, 'config.worktree')];
      return { top: dir, configs };
    }
    if (dirname(dir) === dir) return undefined;
  }
}

/**
 * Where the home's dot entries, and the entries of its dot folders, link to inside `cwd` (a bounded
 * look). On every command's wrap(): the folders' listings are the kept ones while they are unchanged.
 */
function homeLinksInto(home: string, cwd: string): string[] {
  const found: string[] = [];
  let left = 512;
  const look = (dir: string, top: boolean): void => {
    let entries: readonly Dirent[];
    try {
      entries = listingOf(dir).entries; // the types without a stat each, kept while the folder is unchanged
    } catch {
      return;
    }
    for (const entry of entries) {
      if (top && !entry.name.startsWith('.')) continue;
      if ((left -= 1) < 0) return;
      const path = join(dir, entry.name);
      const target = entry.isSymbolicLink() ? linkTarget(path, cwd) : undefined;
      if (target !== undefined) found.push(target);
      else if (top && entry.isDirectory()) look(path, false);
    }
  };
  look(home, true);
  return found;
}

/**
 * All of `dir`'s names (its cached listing), or none when it cannot be read. Past `MAX_LISTED`
 * entries some that run later could be left unprotected: refused (SandboxError `cwd_crowded`).
 */
function allNames(dir: string): string[] {
  return [...(cwdNames(dir) ?? [])];
}

/** The same as a set, or undefined when it cannot be read (then each path is looked at). */
function cwdNames(dir: string): ReadonlySet<string> | undefined {
  let listing: Listing;
  try {
    listing = listingOf(dir);
  } catch {
    return undefined;
  }
  if (!listing.complete)
    throw new SandboxError(
      'cwd_crowded',
      `${dir} holds more than ${MAX_LISTED.toLocaleString('en-US')} entries: a command there cannot be confined, since what in it runs later (mise's files, the home's dot files) cannot all be checked; move most of them into a subfolder`,
    );
  return listing.nameSet;
}

function dotEntries(dir: string): string[] {
  return allNames(dir).filter((name) => name.startsWith('.'));
}

/** Where a symlink points, if it lands inside the cwd (then that is protected too). */
function linkTarget(path: string, cwd: string): string | undefined {
  try {
    const real = realpathSync(path);
    return isWithin(real, cwd) && real !== cwd ? real : undefined;
  } catch {
    return undefined; // dangling: the dir holding it is what keeps it
  }
}

/** Stand-ins this process made, how many live commands (and keeps) use each, and the keep holding it. */
const standIns = new Map<string, { count: number; kind: StandIn; kept?: Keep }>();

/** A keep of a cwd's stand-ins (see keepStandIns): how many hold it, and what it holds. */
interface Keep {
  holders: number;
  readonly paths: Set<string>;
}

/** Keeps by real cwd. */
const keeps = new Map<string, Keep>();

/** Stand-ins found (true) or not (false) to be this process's, still empty, in one pass: each is read once. */
type StandInsSeen = Map<string, boolean>;

/** Whether `path` is a stand-in this process made and still holds, still empty. */
function ownStandIn(path: string, seen: StandInsSeen): boolean {
  let own = seen.get(path);
  if (own === undefined) {
    const known = standIns.get(path);
    seen.set(path, (own = known !== undefined && isStandIn(path, known.kind)));
  }
  return own;
}

/**
 * Keeps the stand-ins that commands in `cwd` (a real path) make, from their commands' release until
 * the returned function is called (idempotent): for a series of commands, instead of making and
 * removing each for every command. Nested calls for one cwd share the keep; it ends with the last.
 */
export function keepStandIns(cwd: string): () => void {
  let keep = keeps.get(cwd);
  if (keep === undefined) keeps.set(cwd, (keep = { holders: 0, paths: new Set() }));
  keep.holders += 1;
  const held = keep;
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    held.holders -= 1;
    if (held.holders > 0) return;
    keeps.delete(cwd);
    const mine = [...held.paths].filter((path) => {
      const entry = standIns.get(path);
      if (entry?.kept !== held) return false; // made anew since (removed from outside meanwhile)
      delete entry.kept;
      return true;
    });
    releaseStandIns(mine);
  };
}

/** `.` makes git's common dir the git dir itself: what git does with no `commondir` at all. */
const COMMONDIR = '.\n';

function isStandIn(path: string, kind: StandIn): boolean {
  try {
    const stat = lstatSync(path);
    if (kind === 'dir') return stat.isDirectory() && isEmptyDir(path, stat);
    if (!stat.isFile()) return false;
    return kind === 'file' ? stat.size === 0 : readFileSync(path, 'utf8') === COMMONDIR;
  } catch {
    return false;
  }
}

/**
 * Folders' names as last read, by the folder's identity and change time, which every entry made,
 * removed or renamed in it moves: while both are as they were, so are the names. A readdir waits
 * on the folder's lock, which each bwrap mounting over it (a stand-in, `.git/hooks`) holds: with
 * 50 commands starting at once it was most of wrap()'s time. A folder changed within `racyMs` of
 * its reading is not kept (a change within the same tick of the clock leaves the time).
 */
interface Listing {
  readonly dev: number;
  readonly ino: number;
  readonly ctimeMs: number;
  /** An entry's type changes only by its removal and a new one: the folder's time moves too. */
  readonly entries: readonly Dirent[];
  readonly nameSet: ReadonlySet<string>;
  /** All of the folder's entries; false past `MAX_LISTED` (the rest were not read). */
  readonly complete: boolean;
}
const listings = new Map<string, Listing>();
/**
 * The most entries of one folder read at a command's start: a folder the model filled with a
 * million files would otherwise hold the caller (the server's event loop) for seconds each time.
 */
export const MAX_LISTED = 100_000;

/** The entries of `dir` with their types (a link not followed); throws as readdirSync does. */
function listingOf(dir: string, stat: Stats = lstatSync(dir)): Listing {
  const known = listings.get(dir);
  if (known?.ino === stat.ino && known.dev === stat.dev && known.ctimeMs === stat.ctimeMs) return known;
  const entries: Dirent[] = [];
  let complete = true;
  const opened = opendirSync(dir, { bufferSize: 256 });
  try {
    for (let entry = opened.readSync(); entry !== null; entry = opened.readSync()) {
      if (entries.length === MAX_LISTED) {
        complete = false;
        break;
      }
      entries.push(entry);
    }
  } finally {
    opened.closeSync();
  }
  return keepListing(dir, stat, { entries, nameSet: new Set(entries.map(({ name }) => name)), complete });
}

/** Keeps a complete listing read just now, unless the folder changed within `racyMs` of it. */
function keepListing(dir: string, stat: Stats, read: Omit<Listing, 'dev' | 'ino' | 'ctimeMs'>): Listing {
  const listing = { dev: stat.dev, ino: stat.ino, ctimeMs: stat.ctimeMs, ...read };
  if (listing.complete && stat.isDirectory() && stat.ctimeMs < Date.now() - racyMs(dir, stat)) {
    if (listings.size >= 1024) listings.clear();
    listings.set(dir, listing);
  } else listings.delete(dir);
  return listing;
}

/**
 * Whether `dir` holds nothing: the kept listing while the folder's identity and change time are
 * unchanged (an entry made in it moves the time), else one entry read at most. A read waits on
 * the folder's lock, which each bwrap mounting over the stand-in holds (at every command's start).
 */
function isEmptyDir(dir: string, stat: Stats): boolean {
  const known = listings.get(dir);
  if (known?.ino === stat.ino && known.dev === stat.dev && known.ctimeMs === stat.ctimeMs)
    return known.nameSet.size === 0;
  const opened = opendirSync(dir, { bufferSize: 1 });
  let empty: boolean;
  try {
    empty = opened.readSync() === null;
  } finally {
    opened.closeSync();
  }
  if (empty) keepListing(dir, stat, { entries: [], nameSet: new Set(), complete: true });
  return empty;
}

/** The names in `dir` (a link not followed), at most `MAX_LISTED`; throws as readdirSync does. */
function namesIn(dir: string, stat?: Stats): string[] {
  return [...listingOf(dir, stat).nameSet];
}

/**
 * The path to mount for a protected path: itself when it exists; else the topmost absent part of
 * it, created now as an empty stand-in (an absent hooks file under an absent dir: the dir).
 */
function ensure(
  path: string,
  absent: StandIn,
  cwd: string,
  seen: StandInsSeen,
): { mount: string; standIn?: string } {
  let top = path;
  while (dirname(top) !== cwd && isWithin(dirname(top), cwd) && kindOf(dirname(top)) === undefined)
    top = dirname(top);
  if (ownStandIn(top, seen)) return { mount: top, standIn: top };
  if (kindOf(top) !== undefined) return { mount: path };
  const kind = top === path ? absent : 'dir';
  if (kind === 'dir') mkdirSync(top);
  else {
    const fd = openSync(top, 'wx', 0o644); // O_EXCL: never through a link planted meanwhile
    try {
      if (kind === 'commondir') writeSync(fd, COMMONDIR);
    } finally {
      closeSync(fd);
    }
  }
  standIns.set(top, { count: 0, kind });
  seen.set(top, true);
  return { mount: top, standIn: top };
}

export interface PreparedMounts {
  /** bwrap arguments, to follow the cwd's bind: pins (shallow to deep), then the read-only binds. */
  readonly args: string[];
  /** Stand-ins in use by this command (release them once it ended). */
  readonly standIns: readonly string[];
}

interface Collected {
  readonly readOnly: Set<string>;
  readonly pins: Set<string>;
  readonly used: Set<string>;
  /** Protected regular files with more than one hard link (another name may be writable). */
  readonly linked: Set<string>;
}

/** Git dirs of worktrees and submodules: their objects may be hard links of a local clone's. */
const NOT_SCANNED = new Set(['worktrees', 'modules']);

/**
 * The protected paths that exist in the cwd (symlinks followed to their targets there), and with
 * `create`, the stand-ins made for the absent ones.
 */
function collect(cwd: string, policy: ResolvedPolicy, create: boolean): Collected {
  const collected: Collected = { readOnly: new Set(), pins: new Set(), used: new Set(), linked: new Set() };
  const seen: StandInsSeen = new Map();
  const queue = projectProtections(cwd, policy, seen);
  // Every protected path is kept, however many the cwd makes (a file per `mise.<env>.toml`); of the
  // link targets found inside them and queued after, a bounded number.
  const bound = queue.length + 256;
  for (let index = 0; index < queue.length && index < bound; index += 1) {
    const { path, how, absent, existing } = queue[index] as ProtectedMount;
    let mount = path;
    // A stand-in found empty (or made) just now: its kind is known, and there is nothing in it to scan.
    let standIn: StandIn | undefined;
    if (create && existing !== true) {
      const ensured = ensure(path, absent, cwd, seen);
      mount = ensured.mount;
      if (ensured.standIn !== undefined) {
        collected.used.add(ensured.standIn);
        standIn = standIns.get(ensured.standIn)?.kind;
      }
    }
    const entry = standIn === 'dir' ? { kind: 'dir' as const, nlink: 2 } : entryOf(mount);
    const kind = entry?.kind;
    if (kind === 'symlink') {
      // The link's own name cannot be pinned (no mount on a link); where it points is protected.
      const target = linkTarget(mount, cwd);
      if (target !== undefined) queue.push({ path: target, how: 'read-only', absent: 'file' });
      continue;
    }
    if (kind !== 'dir' && kind !== 'file') continue;
    (how === 'pin' && mount === path ? collected.pins : collected.readOnly).add(mount);
    if (existing === true) continue;
    if (kind === 'file' && (entry?.nlink ?? 0) > 1) collected.linked.add(mount);
    if (
      kind === 'dir' &&
      standIn === undefined &&
      how === 'read-only' &&
      !NOT_SCANNED.has(mount.slice(mount.lastIndexOf(sep) + 1))
    ) {
      // A link inside a protected dir into the writable cwd (a hook that is a link to a script).
      const scanned = scan(mount, cwd);
      for (const target of scanned.targets) queue.push({ path: target, how: 'read-only', absent: 'file' });
      for (const file of scanned.linked) collected.linked.add(file);
    }
  }
  return collected;
}

/** The project's protected paths that exist now: read-only ones, and the pinned (writable) `.git`. */
export function protectedInProject(
  cwd: string,
  policy: ResolvedPolicy,
): { readOnly: string[]; pinned: string[] } {
  const { readOnly, pins } = collect(cwd, policy, false);
  return { readOnly: [...readOnly], pinned: [...pins] };
}

/**
 * The mounts that protect the project paths and pin the ancestors of every protected path inside
 * the cwd (`others`: the denied paths and the server's temp entries, mounted elsewhere). Creates
 * the stand-ins of absent project paths. A protected file with another hard link is refused: that
 * other name could be in the writable cwd.
 */
export function prepareMounts(
  cwd: string,
  policy: ResolvedPolicy,
  others: readonly string[],
): PreparedMounts {
  const { readOnly, pins, used, linked } = collect(cwd, policy, true);
  const [first] = [...linked].sort();
  if (first !== undefined) {
    for (const path of used) if ((standIns.get(path)?.count ?? 0) === 0) releaseUnused(path);
    throw new SandboxError(
      'path_linked',
      `${first} is kept read-only but has ${lstatSync(first).nlink} hard links: another name for it could be written; remove the extra links`,
    );
  }
  for (const path of [...readOnly, ...pins, ...others.filter((path) => isWithin(path, cwd))]) {
    for (let at = dirname(path); isWithin(at, cwd) && at !== cwd; at = dirname(at)) {
      if (!pins.has(at) && kindOf(at) === 'dir') pins.add(at); // each ancestor looked at once
    }
  }
  const keep = keeps.get(cwd);
  for (const path of used) {
    const entry = standIns.get(path);
    if (entry === undefined) continue;
    entry.count += 1;
    if (keep !== undefined && entry.kept === undefined) {
      entry.kept = keep; // one count more, the keep's, until it ends
      entry.count += 1;
      keep.paths.add(path);
    }
  }
  const byDepth = (a: string, b: string): number => a.split(sep).length - b.split(sep).length;
  const args = [
    ...[...pins]
      .filter((path) => !readOnly.has(path))
      .sort(byDepth)
      .flatMap((path) => ['--bind', path, path]),
    ...[...readOnly].sort(byDepth).flatMap((path) => ['--ro-bind', path, path]),
  ];
  return { args, standIns: [...used] };
}

function releaseUnused(path: string): void {
  const entry = standIns.get(path);
  if (entry === undefined) return;
  entry.count = 1;
  releaseStandIns([path]);
}

/**
 * Inside a protected dir (a few levels down, a bounded count): links pointing into the cwd outside
 * it (their targets get protected too), and regular files with more than one hard link.
 */
function scan(
  dir: string,
  cwd: string,
  depth = 3,
  budget = { left: 512 },
): { targets: string[]; linked: string[] } {
  const found = { targets: [] as string[], linked: [] as string[] };
  let entries: string[];
  try {
    entries = namesIn(dir);
  } catch {
    return found;
  }
  for (const name of entries) {
    if ((budget.left -= 1) < 0) break;
    const path = join(dir, name);
    const entry = entryOf(path);
    const kind = entry?.kind;
    if (kind === 'symlink') {
      const target = linkTarget(path, cwd);
      if (target !== undefined && !isWithin(target, dir)) found.targets.push(target);
    } else if (kind === 'file' && (entry?.nlink ?? 0) > 1) found.linked.push(path);
    else if (kind === 'dir' && depth > 0) {
      const inner = scan(path, cwd, depth - 1, budget);
      found.targets.push(...inner.targets);
      found.linked.push(...inner.linked);
    }
  }
  return found;
}

/**
 * Once a command ended (however: exit, kill, timeout, never started): each stand-in it used that no
 * other live command uses is removed if it is still the empty stand-in, deepest first.
 */
export function releaseStandIns(paths: readonly string[]): void {
  const free: string[] = [];
  for (const path of paths) {
    const entry = standIns.get(path);
    if (entry === undefined) continue;
    entry.count -= 1;
    if (entry.count <= 0) free.push(path);
  }
  free.sort((a, b) => b.split(sep).length - a.split(sep).length);
  for (const path of free) {
    const entry = standIns.get(path);
    standIns.delete(path);
    if (entry === undefined || !isStandIn(path, entry.kind)) continue;
    try {
      if (entry.kind === 'dir') rmdirSync(path);
      else unlinkSync(path);
    } catch {
      // changed or busy meanwhile: left as it is (a stand-in runs nothing)
    }
  }
}
