// The bwrap command line for one confined command. Order matters: bwrap applies mounts in
// sequence, so the read-only root comes first, then the private /tmp and /run, then the writable cwd
// (which may lie under /tmp), then the pins and read-only binds of the protected paths in it
// (ancestors before what they hold), then the denied paths over all of them, then the readable
// files over those. Every tmpfs is mounted and every readable file bound before any tmpfs is made read-only,
// and a denied path inside a denied dir gets no mount of its own (it is hidden already, and its
// mount point could not be made on the read-only tmpfs). The only writable tmpfs are /tmp and
// /dev/shm, sized when bwrap can (`--size`, bubblewrap 0.8): /dev, /run and the shields over the
// server's temp dir end read-only, since what is written to a tmpfs is memory.
import { accessSync, constants, existsSync, lstatSync, readdirSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join, sep } from 'node:path';
import { isWithin, type DeniedPath, type ResolvedPolicy } from '../policy.js';

/** `--size` for the next tmpfs, when this bwrap sizes them. */
const sized = (bytes: number | undefined): string[] => (bytes === undefined ? [] : ['--size', String(bytes)]);

/**
 * Everything but the cwd and the denied paths: the same for every command. `tmpBytes`: the size of
 * the private /tmp and /dev/shm (unset: a bwrap older than 0.8, which cannot size a tmpfs).
 */
export function baseArgs(network: 'off' | 'on', disableUserns = true, tmpBytes?: number): string[] {
  return [
    // Ending bwrap ends the sandbox; its pid 1 ending kills every process left in it.
    '--die-with-parent',
    // No controlling terminal inside: a confined process cannot push input to ours (TIOCSTI).
    '--new-session',
    '--unshare-all',
    // No user namespace inside (the surface a nested one offers: mounts, capabilities in it).
    ...(disableUserns ? ['--unshare-user', '--disable-userns'] : []),
    ...(network === 'on' ? ['--share-net'] : []),
    // bwrap started by root keeps every capability unless told not to (remount would then work).
    '--cap-drop',
    'ALL',
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev',
    // Its own, sized: bwrap's /dev/shm is a directory of the /dev tmpfs (made read-only below).
    ...sized(tmpBytes),
    '--tmpfs',
    '/dev/shm',
    '--proc',
    '/proc',
    // A uid-0 command (the server run as root) passes sysctl's owner check: /proc/sys writable meant
    // kernel.core_pattern, i.e. code run as root outside every namespace. The host's entries, read-only.
    ...PROC_KNOBS.flatMap((name) => ['--ro-bind-try', `/proc/${name}`, `/proc/${name}`]),
    ...sized(tmpBytes),
    '--tmpfs',
    '/tmp',
    // Unix sockets ignore read-only mounts: /run holds docker's, dbus', databases'. DNS may live there.
    '--tmpfs',
    '/run',
    ...(network === 'on' && existsSync(RESOLVED) ? ['--ro-bind', RESOLVED, RESOLVED] : []),
  ];
}

const RESOLVED = '/run/systemd/resolve';

/** Writable kernel settings in a fresh procfs (bwrap 0.8 covers only irq and bus). */
const PROC_KNOBS = ['sys', 'sysrq-trigger', 'irq', 'bus', 'fs', 'mtrr', 'acpi', 'scsi', 'pressure'];

/** The denied paths that need a mount: not under the private /tmp or /run (outside the cwd), not inside another denied dir. */
export function mountedDenials(deny: readonly DeniedPath[], cwd: string): DeniedPath[] {
  const visible = deny.filter(
    ({ path }) => !((isWithin(path, '/tmp') || isWithin(path, '/run')) && !isWithin(path, cwd)),
  );
  return visible.filter(
    (entry, index) =>
      !visible.some(
        (other, otherIndex) =>
          other.kind === 'dir' &&
          isWithin(entry.path, other.path) &&
          // of two equal entries, keep the first
          (entry.path !== other.path || otherIndex < index),
      ),
  );
}

const kindOf = (path: string): 'dir' | 'file' | 'other' | undefined => {
  try {
    const stat = lstatSync(path);
    return stat.isDirectory() ? 'dir' : stat.isFile() ? 'file' : 'other';
  } catch {
    return undefined;
  }
};

/** Under the private /tmp or /run: hidden already unless the cwd brings it back. */
const privateDir = (path: string): boolean => isWithin(path, '/tmp') || isWithin(path, '/run');

/** The temp dir's real path, resolved once per name. */
const realTemp = new Map<string, string>();

/**
 * os.tmpdir(), worked out again only when TMPDIR, TMP or TEMP changed: each of its reads of the
 * environment checks this process's credentials (five system calls), for every command.
 */
let tempDirFor: { key: string; dir: string } | undefined;
export function tempDir(): string {
  const { TMPDIR, TMP, TEMP } = process.env;
  const key = `${TMPDIR}\0${TMP}\0${TEMP}`;
  if (tempDirFor?.key !== key) tempDirFor = { key, dir: tmpdir() };
  return tempDirFor.dir;
}

/**
 * The server's temp dir holds the pty spawn helper's request FIFO (`aleph-pty-*`): whoever writes
 * it runs a command unconfined, and a FIFO on a read-only mount is still writable. Outside /tmp the
 * whole dir gets a tmpfs (`before`, under the cwd's bind); when the cwd contains it (`--cwd /tmp`),
 * each `aleph-*` entry of it does (`after`), but the one holding the cwd.
 */
export function tempDirArgs(cwd: string, dir: string = tempDir()): { before: string[]; after: string[] } {
  let tmp = realTemp.get(dir);
  try {
    if (tmp === undefined) realTemp.set(dir, (tmp = realpathSync(dir)));
  } catch {
    return { before: [], after: [] };
  }
  if (!isWithin(tmp, cwd)) {
    return { before: privateDir(tmp) || tmp === sep ? [] : ['--tmpfs', tmp], after: [] };
  }
  const after = readdirSync(tmp)
    .filter((name) => name.startsWith('aleph-'))
    .map((name) => join(tmp, name))
    .filter((path) => !isWithin(cwd, path))
    .flatMap((path) => (kindOf(path) === 'dir' ? ['--tmpfs', path] : ['--ro-bind', '/dev/null', path]));
  return { before: [], after };
}

export interface CommandArgs {
  readonly file: string;
  readonly args: readonly string[];
  readonly readable?: readonly string[];
}

export interface BubblewrapOptions {
  readonly seccompFd?: number | undefined;
  /** Mounts that keep the project's protected paths (from `prepareMounts`), after the cwd's bind. */
  readonly project?: readonly string[] | undefined;
  /** Runs first inside, exec'ing the command: `prlimit …` */
  readonly prefix?: readonly string[] | undefined;
  readonly disableUserns?: boolean | undefined;
  /** The size of /tmp and /dev/shm; unset when this bwrap cannot size a tmpfs. */
  readonly tmpBytes?: number | undefined;
}

/** The dirs of `--tmpfs DIR` pairs in `args`. */
const tmpfsDirs = (args: readonly string[]): string[] =>
  args.flatMap((arg, index) => (index > 0 && args[index - 1] === '--tmpfs' ? [arg] : []));

export function bubblewrapArgs(
  policy: ResolvedPolicy,
  cwd: string,
  command: CommandArgs,
  unset: readonly string[],
  options: BubblewrapOptions = {},
): string[] {
  const args = baseArgs(policy.network, options.disableUserns, options.tmpBytes);
  if (options.seccompFd !== undefined) args.push('--seccomp', String(options.seccompFd));
  for (const name of unset) args.push('--unsetenv', name);
  const temp = tempDirArgs(cwd);
  args.push(...temp.before, '--bind', cwd, cwd, ...(options.project ?? []), ...temp.after);
  const denials = mountedDenials(policy.deny, cwd);
  for (const { path, kind } of denials) {
    if (kind === 'dir') args.push('--tmpfs', path);
    else args.push('--ro-bind', '/dev/null', path);
  }
  for (const path of command.readable ?? []) args.push('--ro-bind', path, path);
  for (const { path, kind } of denials) if (kind === 'dir') args.push('--remount-ro', path);
  // Not recursive: what is mounted in them (/dev/pts, /dev/shm, a cwd under /run) keeps its mode.
  for (const dir of ['/dev', '/run', ...tmpfsDirs([...temp.before, ...temp.after])]) {
    if (dir !== cwd) args.push('--remount-ro', dir);
  }
  args.push('--chdir', cwd, '--', ...(options.prefix ?? []), command.file, ...command.args);
  return args;
}

/** The denied paths and temp entries mounted inside `cwd`: their ancestors there get pinned. */
export function mountedInside(policy: ResolvedPolicy, cwd: string): string[] {
  const temp = tempDirArgs(cwd).after.filter((arg) => arg.startsWith('/') && arg !== '/dev/null');
  return [...mountedDenials(policy.deny, cwd).map(({ path }) => path), ...temp].filter(
    (path) => isWithin(path, cwd) && path !== cwd,
  );
}

/** The fd the seccomp filter's file is opened on, by a `sh` that then runs bwrap. */
const SECCOMP_FD = 9;

export interface WrapperOptions {
  readonly filterFile?: string | undefined;
  /**
   * A pids cgroup the `sh` makes (unless it is there), gives `pids.max` = `processes` and joins
   * before bwrap starts (every task of the sandbox is counted in it); if it cannot, nothing runs.
   */
  readonly cgroup?: string | undefined;
  readonly processes?: number | undefined;
  /** A CPU group the `sh` joins first, if it can (the scheduler's weight of every confined command together). */
  readonly cpuGroup?: string | undefined;
  /** The limits, to explain an end by SIGXCPU or SIGXFSZ, or failed forks in the cgroup. */
  readonly limits?: {
    readonly processes: number;
    readonly cpuSeconds: number;
    readonly fileSizeBytes: number;
    readonly memoryBytes: number;
  };
  /**
   * The `sh` sets `limits` (but the task count) with its `ulimit` builtins before bwrap, which
   * passes them on: as root, where RLIMIT_NPROC binds nothing, no prlimit process is needed inside.
   */
  readonly setsLimits?: boolean | undefined;
}

/** `ulimit` builtins (dash counts data in KiB, file size in 512-byte blocks: rounded down, at least one). */
function ulimits(limits: NonNullable<WrapperOptions['limits']>): string {
  const units = (bytes: number, unit: number): number => Math.max(1, Math.floor(bytes / unit));
  return (
    `ulimit -d ${units(limits.memoryBytes, 1024)} && ulimit -f ${units(limits.fileSizeBytes, 512)} && ` +
    // soft < hard: SIGXCPU at the soft limit (a clear end), SIGKILL only a second later
    `ulimit -S -t ${limits.cpuSeconds} && ulimit -H -t ${limits.cpuSeconds + 1} || ` +
    '{ echo "aleph sandbox: cannot set the limits" >&2; exit 126; }; '
  );
}

/**
 * `name` in the absolute folders of `env`'s PATH. A relative entry (`.`, `node_modules/.bin`) is
 * skipped: it would be looked up in the command's cwd, where the model writes.
 */
export function onPath(name: string, env: Readonly<Record<string, string | undefined>>): string | undefined {
  for (const dir of (env['PATH'] ?? '').split(delimiter)) {
    if (!isAbsolute(dir)) continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch {
      // not here
    }
  }
  return undefined;
}

/**
 * The wrapper's one program besides bwrap, found in this process's PATH, not the command's: the
 * wrapper runs outside the sandbox (as root, where it makes cgroups), in the cwd, with the
 * command's environment, whose PATH a caller may take from a file the model wrote.
 */
let mkdirPath: string | undefined;
const mkdir = (): string => (mkdirPath ??= onPath('mkdir', process.env) ?? '/bin/mkdir');

/**
 * The whole command: a `sh` that joins the command's cgroup, opens the seccomp filter file on an
 * fd for bwrap (a spawner passes no extra fds: a wrapped command is file, args, cwd, env), runs bwrap,
 * and says in one line on stderr which limit ended the command, if one did. Without any of these,
 * bwrap itself.
 */
export function bubblewrapCommand(
  bwrap: string,
  build: (seccompFd: number | undefined) => string[],
  options: WrapperOptions = {},
): { file: string; args: string[] } {
  const { filterFile, cgroup, processes, cpuGroup, limits, setsLimits } = options;
  if (filterFile === undefined && cgroup === undefined && cpuGroup === undefined && limits === undefined) {
    return { file: bwrap, args: build(undefined) };
  }
  const open = filterFile === undefined ? '' : ` ${SECCOMP_FD}<"$filter"`;
  const join =
    '[ -z "$cpu" ] || { echo $$ > "$cpu/cgroup.procs"; } 2>/dev/null; ' +
    'if [ -n "$cg" ]; then { [ -d "$cg" ] || "$mk" "$cg"; } && echo "$max" > "$cg/pids.max" && ' +
    'echo $$ > "$cg/cgroup.procs" || ' +
    '{ echo "aleph sandbox: cannot make or join the pids cgroup $cg" >&2; exit 126; }; ' +
    // The failed forks so far (a cgroup is used again by a later command): shell builtins only.
    '{ read -r key failed < "$cg/pids.events"; } 2>/dev/null; fi; ';
  const explain =
    limits === undefined
      ? ''
      : 'case $rc in ' +
        `152) echo "aleph sandbox: killed by SIGXCPU: a process used its CPU time limit (${limits.cpuSeconds} s)" >&2;; ` +
        `153) echo "aleph sandbox: killed by SIGXFSZ: a file reached the size limit (${limits.fileSizeBytes} bytes)" >&2;; esac; ` +
        'if [ -n "$cg" ] && { read -r key now < "$cg/pids.events"; } 2>/dev/null && [ "$now" != "${failed:-0}" ]; then ' +
        `echo "aleph sandbox: the process limit (${limits.processes} tasks) was reached: some forks failed" >&2; fi; `;
  const set = setsLimits === true && limits !== undefined ? ulimits(limits) : '';
  const script = `filter=$1; cg=$2; cpu=$3; max=$4; mk=$5; shift 5; ${join}${set}"$@"${open}; rc=$?; ${explain}exit $rc`;
  const fd = filterFile === undefined ? undefined : SECCOMP_FD;
  return {
    file: '/bin/sh',
    args: [
      '-c',
      script,
      'sh',
      filterFile ?? '',
      cgroup ?? '',
      cpuGroup ?? '',
      processes === undefined ? 'max' : String(processes),
      cgroup === undefined ? '' : mkdir(),
      bwrap,
      ...build(fd),
    ],
  };
}
