import { existsSync, realpathSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { sep } from 'node:path';
import { isWithin } from './policy.js';

/** The system's own trees: a cwd in one (or `/`) would make it writable inside. */
const SYSTEM_TREES =
  '/usr /etc /bin /sbin /lib /lib32 /lib64 /libx32 /boot /dev /proc /sys /run /System /Library /private/etc'.split(
    ' ',
  );
/** Folders that only hold other people's folders: a cwd there would make all of them writable. */
const SYSTEM_FOLDERS =
  '/home /Users /var /opt /srv /mnt /media /Volumes /Applications /private /private/var'.split(' ');
/** Temporary folders every program shares (and `$TMPDIR`): other programs' files and sockets are there. */
const SHARED_TEMP = ['/tmp', '/var/tmp', '/private/tmp', '/private/var/tmp'];

export interface UnsafeCwd {
  /**
   * `root`: `/`; `system`: in one of the system's own trees (`/usr`, `/etc`, `/run`…); `holder`: a
   * folder holding other people's (`/home`, `/var`, `/opt`…); `shared_temp`: `/tmp`, `/var/tmp` or
   * `$TMPDIR`.
   */
  readonly kind: 'root' | 'system' | 'holder' | 'shared_temp';
  /** The folder that makes it unsafe: the system tree, or the cwd itself. */
  readonly folder: string;
}

/**
 * Why `real` (a real path) cannot be the cwd of a confined command, which is writable inside:
 * undefined for any other folder.
 */
export function unsafeCwd(real: string): UnsafeCwd | undefined {
  if (real === sep) return { kind: 'root', folder: real };
  const system = SYSTEM_TREES.find((tree) => isWithin(real, tree));
  if (system !== undefined) return { kind: 'system', folder: system };
  if (SYSTEM_FOLDERS.includes(real)) return { kind: 'holder', folder: real };
  const temp = [...SHARED_TEMP, tmpdir()].some(
    (folder) => real === folder || (existsSync(folder) && real === realpathSync(folder)),
  );
  return temp ? { kind: 'shared_temp', folder: real } : undefined;
}
