// The bwrap command line for one confined command. Order matters: bwrap applies mounts in
// sequence, so the read-only root comes first, then the private /tmp and /run, then the writable cwd
// (which may lie under /tmp), then the denied paths over all of them, then the readable files over
// those. Every tmpfs is mounted and every readable file bound before any tmpfs is made read-only,
// and a denied path inside a denied dir gets no mount of its own (it is hidden already, and its
// mount point could not be made on the read-only tmpfs).
import { existsSync, lstatSync, readdirSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, sep } from 'node:path';
import { isWithin, PROTECTED_PROJECT_PATHS, type DeniedPath, type ResolvedPolicy } from '../policy.js';

/** Everything but the cwd and the denied paths: the same for every command. */
export function baseArgs(network: 'off' | 'on'): string[] {
  return [
    // Ending bwrap ends the sandbox; its pid 1 ending kills every process left in it.
    '--die-with-parent',
    // No controlling terminal inside: a confined process cannot push input to ours (TIOCSTI).
    '--new-session',
    '--unshare-all',
    ...(network === 'on' ? ['--share-net'] : []),
    // bwrap started by root keeps every capability unless told not to (remount would then work).
    '--cap-drop',
    'ALL',
    '--ro-bind',
    '/',
    '/',
    '--dev',
    '/dev',
    '--proc',
    '/proc',
    // A uid-0 command (the server run as root) passes sysctl's owner check: /proc/sys writable meant
    // kernel.core_pattern, i.e. code run as root outside every namespace. The host's entries, read-only.
    ...PROC_KNOBS.flatMap((name) => ['--ro-bind-try', `/proc/${name}`, `/proc/${name}`]),
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

/**
 * What runs unconfined later stays read-only inside (PROTECTED_PROJECT_PATHS). An absent dir becomes
 * an empty read-only dir (bwrap makes its mount point: an empty dir left in the cwd), so it cannot
 * be created either. An absent git file (`commondir`, `config.worktree`) cannot be mounted over
 * without creating it, which would break git: it is listed in `created`, removed after the command
 * if it appeared. A symlink is left alone: its target outside the cwd is read-only already.
 */
export function projectConfigArgs(cwd: string): { args: string[]; created: string[] } {
  const args: string[] = [];
  const created: string[] = [];
  const git = join(cwd, '.git');
  const gitKind = kindOf(git);
  if (gitKind === 'file') args.push('--ro-bind', git, git);
  for (const relative of PROTECTED_PROJECT_PATHS) {
    if (relative.startsWith('.git/') && gitKind !== 'dir') continue;
    const path = join(cwd, relative);
    const kind = kindOf(path);
    if (kind === 'dir' || kind === 'file') args.push('--ro-bind', path, path);
    else if (kind !== undefined) continue;
    else if (relative === '.git/config' || relative.endsWith('commondir') || relative.endsWith('.worktree')) {
      created.push(path);
    } else args.push('--tmpfs', path, '--remount-ro', path);
  }
  return { args, created };
}

/** Under the private /tmp or /run: hidden already unless the cwd brings it back. */
const privateDir = (path: string): boolean => isWithin(path, '/tmp') || isWithin(path, '/run');

/**
 * The server's temp dir holds the pty spawn helper's request FIFO (`aleph-pty-*`): whoever writes
 * it runs a command unconfined, and a FIFO on a read-only mount is still writable. Outside /tmp the
 * whole dir gets a tmpfs (`before`, under the cwd's bind); when the cwd contains it (`--cwd /tmp`),
 * each `aleph-*` entry of it does (`after`), but the one holding the cwd.
 */
export function tempDirArgs(cwd: string, dir: string = tmpdir()): { before: string[]; after: string[] } {
  let tmp: string;
  try {
    tmp = realpathSync(dir);
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

export function bubblewrapArgs(
  policy: ResolvedPolicy,
  cwd: string,
  command: { file: string; args: readonly string[]; readable?: readonly string[] },
  unset: readonly string[],
  seccompFd?: number,
): string[] {
  const args = baseArgs(policy.network);
  if (seccompFd !== undefined) args.push('--seccomp', String(seccompFd));
  for (const name of unset) args.push('--unsetenv', name);
  const temp = tempDirArgs(cwd);
  args.push(...temp.before, '--bind', cwd, cwd, ...temp.after, ...projectConfigArgs(cwd).args);
  for (const path of policy.readOnly) args.push('--ro-bind', path, path);
  const denials = mountedDenials(policy.deny, cwd);
  for (const { path, kind } of denials) {
    if (kind === 'dir') args.push('--tmpfs', path);
    else args.push('--ro-bind', '/dev/null', path);
  }
  for (const path of command.readable ?? []) args.push('--ro-bind', path, path);
  for (const { path, kind } of denials) if (kind === 'dir') args.push('--remount-ro', path);
  args.push('--chdir', cwd, '--', command.file, ...command.args);
  return args;
}

/** The fd the seccomp filter's file is opened on, by a `sh` that then execs bwrap. */
const SECCOMP_FD = 9;

const shQuote = (text: string): string => `'${text.replaceAll("'", "'\\''")}'`;

/**
 * The whole command: bwrap itself, or a `sh` that opens the seccomp filter file on an fd for bwrap
 * (a spawner passes no extra fds: a wrapped command is file, args, cwd, env) and, once bwrap has ended
 * (nothing of the sandbox outlives it), removes the protected files that appeared (`created`).
 */
export function bubblewrapCommand(
  bwrap: string,
  filterFile: string | undefined,
  build: (seccompFd: number | undefined) => string[],
  created: readonly string[] = [],
): { file: string; args: string[] } {
  if (filterFile === undefined && created.length === 0) return { file: bwrap, args: build(undefined) };
  const open = filterFile === undefined ? '' : ` ${SECCOMP_FD}<"$filter"`;
  const script =
    created.length === 0
      ? `filter=$1; shift; exec "$@"${open}`
      : `filter=$1; shift; "$@"${open}; rc=$?; for f in ${created.map(shQuote).join(' ')}; do ` +
        `if [ -e "$f" ] || [ -L "$f" ]; then rm -rf -- "$f"; ` +
        `echo "aleph sandbox: removed $f (git reads it unconfined later)" >&2; fi; done; exit $rc`;
  const fd = filterFile === undefined ? undefined : SECCOMP_FD;
  return { file: '/bin/sh', args: ['-c', script, 'sh', filterFile ?? '', bwrap, ...build(fd)] };
}
