// Finding the package's two native helpers (spawner.c and watchdog.c, built into dist/native) and
// proving them usable before anything runs them: present, a program for this machine (the ELF
// header's class and machine match process.arch: a helper built elsewhere must not reach execvp,
// whose shell fallback would run it as a script), and executable. A package manager may drop the
// executable bit (pnpm pack keeps it only for `bin` entries), so a helper without it gets it back:
// in place, else as a copy in a cache folder. A helper that is still unusable is not used, and ONE
// warning says what that costs.
import { createHash } from 'node:crypto';
import {
  accessSync,
  chmodSync,
  closeSync,
  constants,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  writeFileSync,
} from 'node:fs';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** From src/internal (tests) and dist/internal alike, this is the package's dist/native. */
export const NATIVE_DIR = fileURLToPath(new URL('../../dist/native/', import.meta.url));
/** Where the helpers' C source and build script ship (see the README: building for another machine). */
const BUILD_SCRIPT = fileURLToPath(new URL('../../src/internal/build-native.sh', import.meta.url));

export type HelperName = 'spawner' | 'watchdog';
export type NativeHelper = { kind: 'usable'; path: string } | { kind: 'unusable'; why: string };

/** ELF e_machine of each Node architecture, and whether it is a 64-bit one. */
const MACHINES: Readonly<Record<string, readonly [number, boolean]>> = {
  x64: [62, true],
  arm64: [183, true],
  ia32: [3, false],
  arm: [40, false],
  ppc64: [21, true],
  s390x: [22, true],
  riscv64: [243, true],
  loong64: [258, true],
  mips: [8, false],
  mipsel: [8, false],
};
const MACHINE_NAMES = new Map(Object.entries(MACHINES).map(([arch, [machine]]) => [machine, arch]));

/** Why `header` (a file's first bytes) is not a Linux program for this process's machine, if it is not. */
export function elfMismatch(header: Buffer, arch: string = process.arch): string | undefined {
  if (header.length < 20 || header.readUInt32BE(0) !== 0x7f454c46) return 'is not an ELF program';
  const machine = header[5] === 2 ? header.readUInt16BE(18) : header.readUInt16LE(18);
  const expected = MACHINES[arch];
  if (expected === undefined) return undefined; // an architecture this table does not know: let exec decide
  const name = MACHINE_NAMES.get(machine) ?? `machine ${machine}`;
  if (machine !== expected[0]) return `is built for ${name}, this machine is ${arch}`;
  if ((header[4] === 2) !== expected[1])
    return `is a ${header[4] === 2 ? 64 : 32}-bit program, this machine is ${arch}`;
  return undefined;
}

function readHeader(path: string): Buffer {
  const fd = openSync(path, constants.O_RDONLY);
  try {
    const header = Buffer.alloc(64);
    return header.subarray(0, readSync(fd, header, 0, 64, 0));
  } finally {
    closeSync(fd);
  }
}

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Whether `path` is a folder of this user that no one else can write (nor swap what is in it). */
function privateFolder(path: string): boolean {
  try {
    const stat = lstatSync(path);
    return stat.isDirectory() && stat.uid === process.getuid?.() && (stat.mode & 0o022) === 0;
  } catch {
    return false;
  }
}

/** Whether `copy` is a regular file of this user, writable by no one else, holding `content`, executable. */
function trustedCopy(copy: string, content: Buffer): boolean {
  try {
    const stat = lstatSync(copy);
    if (!stat.isFile() || stat.uid !== process.getuid?.() || (stat.mode & 0o022) !== 0) return false;
    return readFileSync(copy).equals(content) && executable(copy);
  } catch {
    return false;
  }
}

/**
 * A copy of `path`, executable, in a per-user cache folder named after its content
 * (`<base>/aleph-pty/<digest>/`), else in a new private folder in the temp folder. A folder or a
 * copy found there is used only when it is this user's, writable by no one else, and the copy holds
 * the helper's exact bytes: another local user can plant neither.
 */
export function executableCopy(
  path: string,
  name: string,
  bases: readonly string[] = [process.env['XDG_CACHE_HOME'] || join(homedir(), '.cache'), tmpdir()],
): string | undefined {
  const content = readFileSync(path);
  const digest = createHash('sha256').update(content).digest('hex').slice(0, 16);
  const place = (dir: string): string | undefined => {
    const copy = join(dir, `aleph-pty-${name}`);
    if (trustedCopy(copy, content)) return copy;
    const partial = `${copy}.${process.pid}`;
    writeFileSync(partial, content, { mode: 0o700 });
    chmodSync(partial, 0o700);
    renameSync(partial, copy); // another process may do the same: the rename is atomic
    return trustedCopy(copy, content) ? copy : undefined;
  };
  for (const base of bases) {
    try {
      const folders = [join(base, 'aleph-pty'), join(base, 'aleph-pty', digest)];
      for (const folder of folders) mkdirSync(folder, { recursive: true, mode: 0o700 });
      if (!folders.every(privateFolder)) continue; // another user's, or open to others
      const copy = place(folders[1]!);
      if (copy !== undefined) return copy;
    } catch {
      // not writable: the next place
    }
  }
  try {
    return place(mkdtempSync(join(tmpdir(), 'aleph-pty-'))); // new, so ours and private
  } catch {
    return undefined;
  }
}

function find(name: HelperName): NativeHelper {
  const path = `${NATIVE_DIR}aleph-pty-${name}`;
  if (process.platform === 'win32') return { kind: 'unusable', why: 'not used on Windows' };
  let header: Buffer;
  try {
    header = readHeader(path);
  } catch {
    return { kind: 'unusable', why: `${path} is missing` };
  }
  const mismatch = process.platform === 'linux' ? elfMismatch(header) : undefined;
  if (mismatch !== undefined) return { kind: 'unusable', why: `${path} ${mismatch}` };
  if (executable(path)) return { kind: 'usable', path };
  try {
    chmodSync(path, 0o755); // the package manager dropped the bit: our own file, so give it back
  } catch {
    // not ours to change (a read-only install): a copy then
  }
  if (executable(path)) return { kind: 'usable', path };
  const copy = executableCopy(path, name);
  if (copy !== undefined) return { kind: 'usable', path: copy };
  return {
    kind: 'unusable',
    why: `${path} is not executable, and no executable copy could be made (a read-only package and no writable, exec-allowed cache folder)`,
  };
}

const found = new Map<HelperName, NativeHelper>();
/** The helpers a warning has named already: each is named once. */
const warned = new Set<HelperName>();

/** What each helper's absence costs, said once. */
const LOSSES: Readonly<Record<HelperName, string>> = {
  spawner:
    "each spawn forks the server (node-pty), programs that leave their terminal's session (setsid, daemons) are not ended by closeAll(), and inherited descriptors are not closed in the program",
  watchdog: 'a server killed by SIGKILL leaves its terminals running',
};

function warn(): void {
  const unusable = [...found].filter(
    (entry): entry is [HelperName, { kind: 'unusable'; why: string }] =>
      entry[1].kind === 'unusable' && !warned.has(entry[0]),
  );
  if (unusable.length === 0 || process.platform === 'win32') return;
  for (const [name] of unusable) warned.add(name);
  process.emitWarning(
    `@aleph/pty: ${unusable.map(([, helper]) => helper.why).join('; ')}. Without ${unusable.length === 2 ? 'these helpers' : 'this helper'}: ${unusable.map(([each]) => LOSSES[each]).join('; ')}. To build them for this machine (a C compiler is needed): sh ${BUILD_SCRIPT}`,
    { code: 'ALEPH_PTY_HELPERS' },
  );
}

/**
 * The helper, if usable here. The first call finds both helpers, and if either is unusable emits
 * one warning naming what is lost; later calls answer from that. A helper found unusable later (it
 * exits as soon as it runs) gets a warning of its own.
 */
export function nativeHelper(name: HelperName): NativeHelper {
  if (found.size === 0) {
    for (const each of ['spawner', 'watchdog'] as const) found.set(each, find(each));
    warn();
  }
  return found.get(name) as NativeHelper;
}

/** The helper passed every check but does not work here (it exited at once): not used again. */
export function markUnusable(name: HelperName, why: string): void {
  nativeHelper(name);
  found.set(name, { kind: 'unusable', why });
  warn();
}
