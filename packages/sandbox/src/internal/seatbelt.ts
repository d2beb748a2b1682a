// The macOS sandbox-exec (Seatbelt) profile for one command. Deny by default: a command may run
// programs, read files (but the denied ones), write only in its cwd, /private/tmp and the user's
// temp dir (but the protected paths), use a terminal, and look up a few system services it needs
// to run at all. Not reachable: the network (off), Launch Services (`open`), Apple Events
// (`osascript`), the keychain, the pasteboard, the window server. Later rules win over earlier
// ones in SBPL, so the denials come after the allowances they narrow.
import { dirname, isAbsolute, join } from 'node:path';
import type { DeniedPath } from '../policy.js';

export interface SeatbeltOptions {
  readonly cwd: string;
  readonly deny: readonly DeniedPath[];
  readonly network: 'off' | 'on';
  /** Files readable although under a denied path (real paths). */
  readonly readable?: readonly string[];
  /** Files kept read-only wherever they lie (the policy's `readOnly`). */
  readonly readOnly?: readonly string[];
  /** Folders kept read-only wherever they lie (the policy's `readOnlyFolders`). */
  readonly readOnlyFolders?: readonly string[];
  /** The user's temp dir (real path), writable: macOS gives each user one under /private/var/folders. */
  readonly tempDir?: string;
  /** Whether `<cwd>/.git` is a directory (git writes in it); otherwise it is not created nor written. */
  readonly gitIsDir?: boolean;
}

/** An SBPL string literal. */
const literal = (text: string): string => `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

// `absent`: whatever comes to be there, so the path and all below it.
const filter = ({ path, kind }: { path: string; kind: 'dir' | 'file' | 'absent' }): string =>
  `(${kind === 'file' ? 'literal' : 'subpath'} ${literal(path)})`;

/** Services a command needs to start and resolve users, log, and find its temp dir. */
const SERVICES = [
  'com.apple.system.logger',
  'com.apple.logd',
  'com.apple.system.notification_center',
  'com.apple.system.opendirectoryd.libinfo',
  'com.apple.system.opendirectoryd.membership',
  'com.apple.bsd.dirhelper',
  'com.apple.system.DirectoryService.libinfo_v1',
];

/** With the network on: DNS, proxies, certificate checks. */
const NETWORK_SERVICES = [
  'com.apple.SystemConfiguration.configd',
  'com.apple.SystemConfiguration.DNSConfiguration',
  'com.apple.networkd',
  'com.apple.trustd.agent',
  'com.apple.dnssd.service',
];

/** What runs unconfined later, relative to the cwd: kept read-only, created neither. */
const PROJECT_DIRS = ['.claude', 'HEAD', '.git/hooks', '.git/worktrees', '.git/modules'];
const PROJECT_FILES = ['.git/config', '.git/commondir', '.git/config.worktree'];

const within = (path: string, root: string): boolean => path === root || path.startsWith(`${root}/`);

export function seatbeltProfile(options: SeatbeltOptions): string {
  const cwd = options.cwd.replace(/\/+$/, '') || '/';
  const writable = [
    `(subpath ${literal(cwd)})`,
    '(subpath "/private/tmp")',
    ...(options.tempDir !== undefined && isAbsolute(options.tempDir)
      ? [`(subpath ${literal(options.tempDir)})`]
      : []),
    '(literal "/dev/null")',
    '(literal "/dev/tty")',
    '(literal "/dev/ptmx")',
    '(regex #"^/dev/ttys[0-9]+$")',
  ];
  const lines = [
    '(version 1)',
    '(deny default)',
    '(allow process-exec process-fork)',
    '(allow signal (target same-sandbox))',
    '(allow process-info* (target same-sandbox))',
    '(allow sysctl-read)',
    '(allow user-preference-read)',
    '(allow ipc-posix-sem ipc-posix-shm)',
    '(allow pseudo-tty)',
    `(allow mach-lookup ${SERVICES.map((name) => `(global-name ${literal(name)})`).join(' ')})`,
    '(allow file-read*)',
    `(allow file-write* ${writable.join(' ')})`,
    '(allow file-ioctl (literal "/dev/tty") (literal "/dev/ptmx") (regex #"^/dev/ttys[0-9]+$"))',
  ];
  // Protected paths are matched by name at each access: a new `.git/hooks` made after a rename is
  // still denied. Their ancestors in the cwd (`.git` itself) cannot be renamed or removed, so the
  // protected files cannot be moved away, changed, and moved back.
  const protectedDirs = [
    ...(options.gitIsDir === true ? PROJECT_DIRS : ['.claude', 'HEAD', '.git']).map((relative) =>
      join(cwd, relative),
    ),
    ...(options.readOnlyFolders ?? []),
  ];
  const protectedFiles = [
    ...(options.gitIsDir === true ? PROJECT_FILES : []).map((relative) => join(cwd, relative)),
    ...(options.readOnly ?? []),
  ];
  const inCwd = [...protectedDirs, ...protectedFiles, ...options.deny.map(({ path }) => path)].filter(
    (path) => within(path, cwd) && path !== cwd,
  );
  const ancestors = new Set<string>([join(cwd, '.git')]);
  for (const path of inCwd) {
    for (let at = dirname(path); within(at, cwd) && at !== cwd; at = dirname(at)) ancestors.add(at);
  }
  lines.push(
    `(deny file-write* ${[
      ...protectedDirs.map((path) => filter({ path, kind: 'dir' })),
      ...protectedFiles.map((path) => filter({ path, kind: 'file' })),
      ...[...ancestors].sort().map((path) => `(literal ${literal(path)})`),
    ].join(' ')})`,
  );
  if (options.deny.length > 0) {
    lines.push(`(deny file-read* file-write* ${options.deny.map(filter).join(' ')})`);
  }
  if ((options.readable ?? []).length > 0) {
    lines.push(
      `(allow file-read* ${(options.readable ?? []).map((path) => `(literal ${literal(path)})`).join(' ')})`,
    );
  }
  if (options.network === 'on') {
    lines.push(
      '(allow network*)',
      `(allow mach-lookup ${NETWORK_SERVICES.map((name) => `(global-name ${literal(name)})`).join(' ')})`,
    );
  }
  return `${lines.join('\n')}\n`;
}
