// What a sandboxed command may see: the policy as configured, checked once into absolute real
// paths, and the environment it gets. Paths that do not exist, relative paths and the root are
// errors naming the key; the built-in secrets under $HOME are denied where they exist when each
// command starts (`denyNow`), so one made while the server runs is hidden too.
import { lstatSync, realpathSync, statfsSync, statSync, type Stats } from 'node:fs';
import { homedir } from 'node:os';
import { basename, dirname, isAbsolute, join, sep } from 'node:path';
import { SandboxError } from './errors.js';
import { badLimit, resolveLimits, type ResolvedLimits, type SandboxLimits } from './internal/limits.js';

export interface SandboxPolicy {
  /** `off`: a network namespace of its own (loopback only, nothing of the host's listening). */
  readonly network: 'off' | 'on';
  /** Made unreadable (absolute, or `~/…`). Each must exist; e.g. the server's state dir. */
  readonly denyRead?: readonly string[] | undefined;
  /** Environment names passed through beyond the built-in allow-list (`*_TOKEN` only when listed). */
  readonly env?: readonly string[] | undefined;
  /**
   * Files kept read-only wherever they lie (the cwd included): the server's hooks files. One that
   * is absent cannot be created inside the cwd either.
   */
  readonly readOnly?: readonly string[] | undefined;
  /**
   * Folders kept read-only as they are wherever they lie inside the cwd, neither scanned nor stood
   * in for when absent: the server's own code (its `dist` and `node_modules` folders), which a run
   * in a folder that holds the installation must not change under the running server.
   */
  readonly readOnlyFolders?: readonly string[] | undefined;
  /** Resource limits of each command (defaults a developer does not reach: `DEFAULT_LIMITS`). */
  readonly limits?: SandboxLimits | undefined;
  /** Names never passed, even when listed: the provider's key variable. `ALEPH_*` never is. */
  readonly secretEnv?: readonly string[] | undefined;
}

/** The environment a sandboxed command keeps, besides `LC_*` and the policy's `env`. */
export const ENV_ALLOW_LIST = ['PATH', 'HOME', 'USER', 'LANG', 'TERM', 'SHELL', 'TZ'] as const;

/** Denied under $HOME whenever they exist: keys, and where tools keep credentials and tokens. */
export const PROTECTED_HOME_PATHS = [
  '.ssh',
  '.aws',
  '.config/gcloud',
  '.netrc',
  '.git-credentials',
  '.config/git/credentials',
  '.config/gh',
  '.config/hub',
  '.claude/.credentials.json',
  '.docker/config.json',
  '.npmrc',
  '.pypirc',
  '.kube',
  '.azure',
  '.gnupg',
  '.password-store',
  '.local/share/keyrings',
  '.cargo/credentials',
  '.cargo/credentials.toml',
  '.terraform.d/credentials.tfrc.json',
  '.terraformrc',
  // Coding agents' keys, settings with servers' tokens, and transcripts of every session.
  '.claude.json',
  '.claude/projects',
  '.claude/history.jsonl',
  // Claude Code's settings (an `env` often holds API keys) and its IDE connections' auth tokens.
  '.claude/settings.json',
  '.claude/settings.local.json',
  '.claude/ide',
  // Claude Code's checkpoints (copies of files it edited in other projects, `.env`s included), its
  // shells' environments and its other session records.
  '.claude/file-history',
  '.claude/shell-snapshots',
  '.claude/session-env',
  '.claude/todos',
  '.claude/debug',
  '.claude/statsig',
  '.codex',
  '.local/share/opencode',
  '.continue',
  '.aider.conf.yml',
  '.cursor/mcp.json',
  '.gemini',
  '.config/github-copilot',
  '.config/openai',
  '.cache/huggingface/token',
  '.ollama/id_ed25519',
  // Databases', clouds' and deploy tools' credentials.
  '.vault-token',
  '.pgpass',
  '.my.cnf',
  '.s3cfg',
  '.boto',
  '.config/rclone',
  '.m2/settings.xml',
  '.gradle/gradle.properties',
  '.config/op',
  '.vercel',
  '.config/netlify',
  '.fly',
  '.config/doctl',
  '.config/heroku',
  '.config/ngrok',
  '.ngrok2',
  '.wrangler',
  '.config/.wrangler',
  '.config/configstore/firebase-tools.json',
  '.config/sops',
  '.pulumi/credentials.json',
  '.oci',
  '.config/hcloud',
  '.databrickscfg',
  '.snowsql',
  '.dbt/profiles.yml',
  '.cloudflared',
  '.circleci/cli.yml',
  '.sentryclirc',
  '.config/stripe',
  '.config/glab-cli',
  '.config/containers/auth.json',
  '.kaggle/kaggle.json',
  '.minikube',
  // Editors' stores of their accounts' tokens (VS Code's and its forks': Cursor, Windsurf).
  '.config/Code/User/globalStorage',
  '.config/Cursor/User/globalStorage',
  '.config/Windsurf/User/globalStorage',
  '.config/VSCodium/User/globalStorage',
  // Chat and mail clients' sessions.
  '.config/Slack',
  '.config/discord',
  '.thunderbird',
  // Package registries' tokens.
  '.gem/credentials',
  '.yarnrc.yml',
  '.yarnrc',
  '.bunfig.toml',
  '.config/pnpm/rc',
  '.config/composer/auth.json',
  '.composer/auth.json',
  '.config/helm/repositories.yaml',
  '.config/pip/pip.conf',
  '.pip/pip.conf',
  '.config/pypoetry/auth.toml',
  '.local/share/uv/credentials',
  '.config/uv/uv.toml',
  '.condarc',
  // A home-wide dotenv file holds what a project's would.
  '.env',
  // Browsers' profiles (saved passwords, cookies) and shells' and REPLs' histories.
  '.mozilla',
  '.config/google-chrome',
  '.config/chromium',
  '.config/BraveSoftware',
  '.bash_history',
  '.zsh_history',
  '.local/share/fish/fish_history',
  '.local/share/atuin',
  '.psql_history',
  '.mysql_history',
  '.python_history',
  '.node_repl_history',
  '.rediscli_history',
  '.dbshell',
  '.sqlite_history',
  // What lets a program into the user's X session (with the network on, its socket is reachable).
  '.Xauthority',
  '.ICEauthority',
] as const;

/**
 * The same stores where the environment moves them out of the home (the server's environment, as
 * it started): a base folder's variable re-roots the protected home paths under the folder it
 * stands for (`XDG_CONFIG_HOME=/cfg`: `/cfg/gh`; `CLAUDE_CONFIG_DIR`: its `.credentials.json`,
 * `projects`, and the `.claude.json` Claude Code keeps there), a store's own variable names it.
 */
const RELOCATED_HOME_FOLDERS: Readonly<Record<string, string>> = {
  CLAUDE_CONFIG_DIR: '.claude',
  XDG_CONFIG_HOME: '.config',
  XDG_DATA_HOME: '.local/share',
  XDG_CACHE_HOME: '.cache',
  CARGO_HOME: '.cargo',
  DOCKER_CONFIG: '.docker',
  GRADLE_USER_HOME: '.gradle',
};

/** Variables naming a credential store (a file or a folder) itself; `KUBECONFIG` is a `:`-separated list. */
const CREDENTIAL_PATH_VARIABLES =
  `KUBECONFIG AWS_SHARED_CREDENTIALS_FILE AWS_CONFIG_FILE GOOGLE_APPLICATION_CREDENTIALS
  CLOUDSDK_CONFIG AZURE_CONFIG_DIR GH_CONFIG_DIR CODEX_HOME GNUPGHOME PASSWORD_STORE_DIR NPM_CONFIG_USERCONFIG
  npm_config_userconfig NETRC PGPASSFILE TF_CLI_CONFIG_FILE VAULT_CONFIG_PATH DOCKER_AUTH_CONFIG HISTFILE`.split(
    /\s+/,
  );

/** The protected paths `env` moves out of `home` (absolute, not the root, not /proc or /dev). */
function relocatedCredentialPaths(env: Readonly<Record<string, string | undefined>>, home: string): string[] {
  const usable = (path: string | undefined): path is string =>
    path !== undefined && isAbsolute(path) && path !== sep && !inSandboxOwnFilesystem(path);
  const paths = new Set<string>();
  for (const [variable, standsFor] of Object.entries(RELOCATED_HOME_FOLDERS)) {
    const folder = env[variable];
    if (!usable(folder) || folder === join(home, standsFor)) continue;
    for (const relative of PROTECTED_HOME_PATHS)
      if (relative.startsWith(`${standsFor}/`)) paths.add(join(folder, relative.slice(standsFor.length + 1)));
    if (variable === 'CLAUDE_CONFIG_DIR') paths.add(join(folder, '.claude.json'));
  }
  for (const variable of CREDENTIAL_PATH_VARIABLES) {
    const value = env[variable] ?? '';
    for (const path of variable === 'KUBECONFIG' ? value.split(':') : [value])
      if (usable(path)) paths.add(path);
  }
  return [...paths];
}

/**
 * Denied as well when the command runs as root (uid 0 inside keeps the owner's read bit of
 * root-owned files): the system's password hashes, its SSH host keys and TLS private keys.
 */
export const PROTECTED_ROOT_PATHS = [
  '/etc/shadow',
  '/etc/shadow-',
  '/etc/gshadow',
  '/etc/gshadow-',
  '/etc/ssh/ssh_host_rsa_key',
  '/etc/ssh/ssh_host_ecdsa_key',
  '/etc/ssh/ssh_host_ed25519_key',
  '/etc/ssh/ssh_host_dsa_key',
  '/etc/ssl/private',
] as const;

/**
 * Kept read-only in a command's cwd (relative to it), and refused by the file tools: what runs
 * unconfined later reads them — Claude Code's hooks, git's hooks and config, and what points git at
 * another config (`commondir`, `config.worktree`, a worktree's or a submodule's git dir), the
 * repository config of Mercurial, Sapling and Jujutsu. `.git` itself too when it is a file (`gitdir: …`).
 */
export const PROTECTED_PROJECT_PATHS = [
  '.claude',
  // With `.git` broken, git takes the cwd for its git dir when it holds a valid HEAD (and objects/,
  // refs/, a config of the model's): kept read-only, an empty folder when absent.
  'HEAD',
  '.git/hooks',
  '.git/config',
  '.git/commondir',
  '.git/config.worktree',
  '.git/worktrees',
  '.git/modules',
  // Mercurial's, Sapling's and Jujutsu's repository config (hooks, extensions, pagers, tools).
  '.hg/hgrc',
  '.sl/config',
  '.jj/repo',
] as const;

/** The protected path of `cwd` that `real` (a real path) is or lies under, if any; `.git` when a file would be written there. */
export function protectedPathOf(cwd: string, real: string): string | undefined {
  if (real === join(cwd, '.git')) return '.git';
  return PROTECTED_PROJECT_PATHS.find((relative) => isWithin(real, join(cwd, relative)));
}

export interface DeniedPath {
  readonly path: string;
  /**
   * `absent`: a protected home path that did not exist when the sandbox was made: each command's
   * sandbox denies it once it exists, and what checks by path refuses it already.
   */
  readonly kind: 'dir' | 'file' | 'absent';
  /** Where it comes from: the policy's `denyRead`, or the built-in protected home paths. */
  readonly source: 'deny_read' | 'protected';
}

export interface ResolvedPolicy {
  readonly network: 'off' | 'on';
  /** What exists to deny (`denyNow` at each command; what existed at the start in `resolvePolicy`'s). */
  readonly deny: readonly DeniedPath[];
  /** Every path to deny as configured (absolute, links not followed): `denyNow` re-reads them. */
  readonly denyPaths: readonly { readonly path: string; readonly source: DeniedPath['source'] }[];
  readonly env: ReadonlySet<string>;
  readonly secretEnv: ReadonlySet<string>;
  readonly readOnly: readonly string[];
  /** `readOnlyFolders` that exist (real paths). */
  readonly readOnlyFolders: readonly string[];
  readonly limits: ResolvedLimits;
  /** The home folder: with the cwd at or above it, its dot entries are kept read-only. */
  readonly home?: string;
}

/** The sandbox makes its own /proc and /dev: denying inside them means nothing. */
const PSEUDO_FILESYSTEMS = ['/proc', '/dev'];

export const isWithin = (path: string, root: string): boolean =>
  path === root || path.startsWith(root === sep ? root : root + sep);

/** Whether `path` (absolute) is under the /proc or /dev a sandboxed command gets of its own: out of its reach. */
export const inSandboxOwnFilesystem = (path: string): boolean =>
  PSEUDO_FILESYSTEMS.some((root) => isWithin(path, root));

function denied(path: string, stat: Stats, source: DeniedPath['source']): DeniedPath {
  if (!stat.isDirectory() && stat.nlink > 1) {
    // Hiding one name of a file hides nothing when another name stays readable.
    throw new SandboxError(
      'path_linked',
      `deny_read: ${path} has ${stat.nlink} hard links: another name for it would stay readable; remove the extra links`,
    );
  }
  return { path: realpathSync(path), kind: stat.isDirectory() ? 'dir' : 'file', source };
}

/** Whether `path` is a link whose target is not there (or cannot be looked at). */
function dangling(path: string): boolean {
  try {
    return lstatSync(path, { throwIfNoEntry: false })?.isSymbolicLink() === true;
  } catch {
    return true;
  }
}

/** A path's stat (links followed), or undefined when there is none to take (absent, not searchable). */
function statOf(path: string): Stats | undefined {
  try {
    return statSync(path, { throwIfNoEntry: false });
  } catch {
    return undefined;
  }
}

/**
 * What denyNow's last answer rests on: each path it statted and what it found. An entry that
 * exists, by identity (and link count: a new hard link must be refused); the folder an absent entry
 * would appear in (its nearest existing ancestor), by identity and change time, which the kernel
 * moves on every entry made, removed or renamed in it and every chmod of it.
 */
interface Check {
  readonly path: string;
  readonly dev: number;
  readonly ino: number;
  readonly nlink?: number;
  readonly ctimeMs?: number;
}

const unchanged = (check: Check): boolean => {
  const stat = statOf(check.path);
  return (
    stat !== undefined &&
    stat.ino === check.ino &&
    stat.dev === check.dev &&
    (check.nlink === undefined || stat.nlink === check.nlink) &&
    (check.ctimeMs === undefined || stat.ctimeMs === check.ctimeMs)
  );
};

/**
 * How recently changed a folder may be for an answer resting on its change time to be kept: one
 * changed more recently may change again within the same tick of the file system's clock, leaving
 * its change time as it was (git's "racy" entries). Where the change time has a fraction of a second
 * on a file system that keeps it in nanoseconds from the kernel's clock (ext4, XFS, Btrfs, tmpfs,
 * overlayfs, F2FS), a tick is at most 10 ms: 100 ms. Elsewhere 2 s: times in whole seconds (ext4's
 * small inodes, ext3), a network file system's from its server's clock, FAT's 2 s apart.
 */
const FINE_TIMES = new Set([0xef53, 0x58465342, 0x9123683e, 0x01021994, 0x794c7630, 0xf2f52010]);
const fineByDevice = new Map<number, boolean>();
export function racyMs(path: string, { dev, ctimeMs }: Pick<Stats, 'dev' | 'ctimeMs'>): number {
  let fine = fineByDevice.get(dev);
  if (fine === undefined) {
    try {
      fine = FINE_TIMES.has(statfsSync(path).type);
    } catch {
      return 2000;
    }
    fineByDevice.set(dev, fine);
  }
  return fine && ctimeMs % 1000 !== 0 ? 100 : 2000;
}

/** denyNow's last answer for each policy's paths, with its checks. */
const answers = new WeakMap<ResolvedPolicy['denyPaths'], { denied: DeniedPath[]; checks: Check[] }>();

// What of the denied paths exists now, resolved: a credential store made after the server started
// (`gh auth login`) is denied from the next command on; a `deny_read` path removed since is skipped.
// The last answer is reused while every path it rests on is as it was (a few stats instead of one,
// and a realpath, per denied path, for every command).
export function denyNow(policy: Pick<ResolvedPolicy, 'denyPaths'>): DeniedPath[] {
  const last = answers.get(policy.denyPaths);
  if (last !== undefined && last.checks.every(unchanged)) return [...last.denied];
  const started = Date.now();
  const checks = new Map<string, Check>();
  const stats = new Map<string, Stats | undefined>();
  const statted = (path: string): Stats | undefined => {
    if (!stats.has(path)) stats.set(path, statOf(path));
    return stats.get(path);
  };
  // One check per path, what each use of it needs (a path may be both an entry and a folder).
  const check = (path: string, stat: Stats, more: Pick<Check, 'nlink' | 'ctimeMs'>): void => {
    checks.set(path, { ...checks.get(path), path, dev: stat.dev, ino: stat.ino, ...more });
  };
  let racy = false;
  const found = policy.denyPaths.flatMap(({ path, source }) => {
    const stat = statted(path);
    if (stat !== undefined) {
      let entry: DeniedPath;
      try {
        entry = denied(path, stat, source);
      } catch (error) {
        if (error instanceof SandboxError) throw error; // a file with another name
        racy = true; // removed meanwhile: absent, and nothing kept
        return [];
      }
      check(path, stat, stat.isDirectory() ? {} : { nlink: stat.nlink });
      // Reached through a link: its real path must stay that same file or folder.
      if (entry.path !== path) check(entry.path, stat, {});
      return [entry];
    }
    // A link to what is not there (yet) appears with its target, which no folder here covers.
    if (dangling(path)) racy = true;
    let folder = dirname(path);
    while (statted(folder) === undefined && dirname(folder) !== folder) {
      if (dangling(folder)) racy = true;
      folder = dirname(folder);
    }
    const where = statted(folder);
    if (where === undefined)
      racy = true; // not even the root: keep nothing
    else {
      check(folder, where, { ctimeMs: where.ctimeMs });
      if (where.ctimeMs > started - racyMs(folder, where)) racy = true;
    }
    return []; // absent: nothing to hide
  });
  if (racy) answers.delete(policy.denyPaths);
  else answers.set(policy.denyPaths, { denied: found, checks: [...checks.values()] });
  return [...found];
}

/** Every denied path, those absent now too (`absent`, by the path they would have): for checks by path. */
export function deniedByPath(policy: ResolvedPolicy): DeniedPath[] {
  const now = denyNow(policy);
  const absent = policy.denyPaths
    .filter(({ path }) => !now.some((entry) => entry.path === realOrBelow(path)))
    .map(({ path, source }): DeniedPath => ({ path: realOrBelow(path), kind: 'absent', source }));
  return [...now, ...absent];
}

export function resolvePolicy(
  policy: SandboxPolicy,
  home: string = homedir(),
  env: Readonly<Record<string, string | undefined>> = process.env,
): ResolvedPolicy {
  const denyPaths: ResolvedPolicy['denyPaths'][number][] = [
    ...PROTECTED_HOME_PATHS.map((relative) => join(home, relative)),
    ...relocatedCredentialPaths(env, home),
  ].map((path) => ({ path, source: 'protected' }));
  if (process.getuid?.() === 0) {
    for (const path of PROTECTED_ROOT_PATHS) denyPaths.push({ path, source: 'protected' });
  }
  for (const entry of policy.denyRead ?? []) {
    const path = entry === '~' || entry.startsWith('~/') ? join(home, entry.slice(1)) : entry;
    if (!isAbsolute(path) || inSandboxOwnFilesystem(path) || path === sep) {
      throw new SandboxError(
        'path_invalid',
        `deny_read: ${JSON.stringify(entry)} is not a path on the filesystem (absolute or ~/…, not / or under /proc, /dev)`,
      );
    }
    if (statSync(path, { throwIfNoEntry: false }) === undefined)
      throw new SandboxError('path_missing', `deny_read: ${path} does not exist`);
    denyPaths.push({ path, source: 'deny_read' });
  }
  const deny = denyNow({ denyPaths });
  const secretEnv = new Set(policy.secretEnv ?? []);
  const readOnly = (policy.readOnly ?? []).map((path) => {
    if (!isAbsolute(path)) {
      throw new SandboxError('path_invalid', `read_only: ${JSON.stringify(path)} is not an absolute path`);
    }
    return realOrBelow(path);
  });
  const readOnlyFolders: string[] = [];
  for (const path of policy.readOnlyFolders ?? []) {
    if (!isAbsolute(path))
      throw new SandboxError(
        'path_invalid',
        `read_only_folders: ${JSON.stringify(path)} is not an absolute path`,
      );
    try {
      readOnlyFolders.push(realpathSync(path));
    } catch {
      // Absent: nothing there to keep.
    }
  }
  const limits = resolveLimits(policy.limits);
  const bad = badLimit(limits);
  if (bad !== undefined) {
    throw new SandboxError(
      'limit_invalid',
      `limits.${bad}: must be a positive integer, not ${String(limits[bad])}`,
    );
  }
  let realHome: string | undefined;
  try {
    realHome = realpathSync(home);
  } catch {
    realHome = undefined; // no home folder: nothing of it to keep
  }
  return {
    network: policy.network,
    deny,
    denyPaths,
    env: new Set(policy.env ?? []),
    secretEnv,
    readOnly,
    readOnlyFolders,
    limits,
    ...(realHome === undefined ? {} : { home: realHome }),
  };
}

/** The real path of `path`, or of its nearest existing ancestor joined with the rest. */
export function realOrBelow(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    const parent = dirname(path);
    return parent === path ? path : join(realOrBelow(parent), basename(path));
  }
}

export const isAllowed = (name: string, policy: ResolvedPolicy): boolean =>
  !name.startsWith('ALEPH_') &&
  !policy.secretEnv.has(name) &&
  ((ENV_ALLOW_LIST as readonly string[]).includes(name) || name.startsWith('LC_') || policy.env.has(name));

/** The allow-listed environment of a confined command. */
export function sandboxEnv(
  env: Readonly<Record<string, string | undefined>>,
  policy: ResolvedPolicy,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && isAllowed(name, policy)) out[name] = value;
  }
  return out;
}

/**
 * Names a confined command must not inherit: a spawner may merge our env over its own (a pty, a
 * hook runner), so the backend unsets these names itself. Names only: values never reach argv.
 */
export function unsetNames(
  envs: readonly Readonly<Record<string, string | undefined>>[],
  policy: ResolvedPolicy,
): string[] {
  const names = new Set(envs.flatMap((env) => Object.keys(env)));
  return [...names].filter((name) => !isAllowed(name, policy)).sort();
}

/**
 * The environment of any child of the server, confined or not: everything but the server's own
 * secrets (`ALEPH_TOKEN` and the named variables).
 */
export function scrubEnv(
  env: Readonly<Record<string, string | undefined>>,
  secretNames: Iterable<string> = [],
): Record<string, string> {
  const secrets = new Set(['ALEPH_TOKEN', ...secretNames]);
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value !== undefined && !secrets.has(name)) out[name] = value;
  }
  return out;
}
