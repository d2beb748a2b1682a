// Files inside a run's working directory, opened so that nothing outside it is read or written —
// not through a dangling, a nested or a racing symlink — and so that no open can block: anything
// but a regular file is refused before it is opened for data (a FIFO's open() would hold a libuv
// worker forever, and four of them wedge every fs call of the server).
//
// The path is resolved once (`confine`), then opened component by component from the root with
// O_NOFOLLOW, each step relative to the directory already open (Linux: /proc/self/fd/N/name, an
// openat). A symlink swapped in after the check makes that step fail instead of being followed.
// Elsewhere the steps go by path: the same checks, with a race window left (documented).
//
// Protection is by identity, not by name: every directory opened on the way and the file itself
// are compared (device + inode of the open descriptor) against the protected set — identities
// recorded when it was made and those its paths have now — so renaming an ancestor (`mv .git
// .git.orig`, `mv conf conf.x`), a copy put back at the old name, or a hard link changes nothing.
// Writes are atomic: a temp file in the same folder, fsynced, renamed over the target, mode and
// owner kept; a kill mid-write leaves the old file or the new one, never a torn one.
import { randomBytes } from 'node:crypto';
import {
  constants,
  existsSync,
  lstatSync,
  readlinkSync,
  realpathSync,
  statSync,
  type BigIntStats,
  type Stats,
} from 'node:fs';
import { lstat, mkdir, open, opendir, rename, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname, relative, resolve, sep } from 'node:path';

const { O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = constants;
const AT_FD = existsSync('/proc/self/fd');
const MAX_LINKS = 40; // as the kernel's ELOOP limit

export class PathOutsideWorkdir extends Error {}

/** A path the file tools refuse (outside, not a regular file, changed while opened). */
export class RefusedPath extends Error {}

function lexists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

/** A path the sandbox denies (real path), and the key that denies it, as an error names it. */
export interface DeniedEntry {
  readonly path: string;
  readonly key: string;
}

/** `denied`: neither read nor written; `read-only`: read, never written. */
export type ProtectedAccess = 'denied' | 'read-only';

export interface ProtectedEntry extends DeniedEntry {
  readonly access: ProtectedAccess;
}

interface Identified {
  readonly entry: ProtectedEntry;
  readonly identity: string;
}

/** A file's identity, `dev:ino`, as the protected set keys it. */
export const identityOf = (stats: BigIntStats): string => `${stats.dev}:${stats.ino}`;

function identify(entries: readonly ProtectedEntry[]): Identified[] {
  const found: Identified[] = [];
  for (const entry of entries) {
    try {
      found.push({ entry, identity: identityOf(statSync(entry.path, { bigint: true })) });
    } catch {
      // Absent now: its name is still protected, and its identity if it appears later.
    }
  }
  return found;
}

/**
 * What the file tools protect, by identity: the device and inode each path had when the set was
 * made, and the one it has at each check. An object keeps its protection under any name it gets.
 */
export class ProtectedSet {
  readonly #entries: readonly ProtectedEntry[];
  readonly #recorded: readonly Identified[];

  constructor(entries: readonly ProtectedEntry[], recorded: readonly Identified[] = identify(entries)) {
    this.#entries = entries;
    this.#recorded = recorded;
  }

  /** This set and `entries`, theirs recorded now. */
  with(entries: readonly ProtectedEntry[]): ProtectedSet {
    return new ProtectedSet([...this.#entries, ...entries], [...this.#recorded, ...identify(entries)]);
  }

  /** Identity → entry: what was recorded and what the paths are now (a `denied` entry wins). */
  current(): ReadonlyMap<string, ProtectedEntry> {
    const map = new Map<string, ProtectedEntry>();
    for (const { entry, identity } of [...this.#recorded, ...identify(this.#entries)]) {
      if (map.get(identity)?.access !== 'denied') map.set(identity, entry);
    }
    return map;
  }
}

export const deniedBy = (real: string, denied: readonly DeniedEntry[]): DeniedEntry | undefined =>
  denied.find(({ path }) => real === path || real.startsWith(path === sep ? path : path + sep));

/**
 * The longest path resolved, as the system bounds one (PATH_MAX): resolving takes time in the square
 * of its length on the server's thread (a 200 KB path held every run and terminal for a minute).
 */
export const MAX_PATH_CHARS = 4096;

/**
 * Resolves `path` inside `root`, following every symlink (dangling ones to where they point).
 * A path under one the sandbox denies is refused too: the file tools run in-process, unconfined.
 */
export function confine(root: string, path: string, denied: readonly DeniedEntry[] = []): string {
  if (path.length > MAX_PATH_CHARS)
    throw new RefusedPath(
      `refused: a path of ${path.length} characters; the longest taken is ${MAX_PATH_CHARS}`,
    );
  const realRoot = realpathSync(root);
  let target = resolve(realRoot, path);
  for (let hops = 0; ; hops += 1) {
    let existing = target;
    while (!lexists(existing)) existing = dirname(existing);
    let realExisting: string;
    try {
      realExisting = realpathSync(existing);
    } catch {
      // A dangling symlink: confine where it points, not the link itself.
      if (hops >= MAX_LINKS) throw new RefusedPath(`path ${JSON.stringify(path)}: too many symbolic links`);
      target = resolve(dirname(existing), readlinkSync(existing), relative(existing, target));
      continue;
    }
    const real = resolve(realExisting, relative(existing, target));
    if (real !== realRoot && !real.startsWith(realRoot + sep)) {
      throw new PathOutsideWorkdir(
        `path ${JSON.stringify(path)} is outside the working directory ${realRoot}`,
      );
    }
    const under = deniedBy(real, denied);
    if (under !== undefined) {
      throw new RefusedPath(
        `refused: ${JSON.stringify(path)} is under ${under.path}, denied by ${under.key}`,
      );
    }
    return real;
  }
}

const KIND_NAMES: readonly [string, (stats: Stats) => boolean][] = [
  ['a directory', (s) => s.isDirectory()],
  ['a FIFO (named pipe)', (s) => s.isFIFO()],
  ['a socket', (s) => s.isSocket()],
  ['a character device', (s) => s.isCharacterDevice()],
  ['a block device', (s) => s.isBlockDevice()],
  ['a symbolic link', (s) => s.isSymbolicLink()],
];

function notRegular(path: string, stats: Stats): RefusedPath {
  const kind = KIND_NAMES.find(([, test]) => test(stats))?.[0] ?? 'not a regular file';
  return new RefusedPath(`refused: ${path} is ${kind}, not a regular file`);
}

const raced = (path: string): RefusedPath =>
  new RefusedPath(`refused: ${path} changed while it was being opened (a symbolic link appeared)`);

function isLinkError(error: unknown): boolean {
  const code = (error as NodeJS.ErrnoException).code;
  return code === 'ELOOP' || code === 'ENOTDIR' || code === 'EMLINK';
}

export type OpenMode = 'read' | 'write' | 'edit';
const FLAGS: Record<OpenMode, number> = { read: O_RDONLY, write: O_WRONLY | O_CREAT, edit: O_RDWR };

/** What a call checks against: the sandbox's denied paths (by name) and the protected set (by identity). */
export interface Guard {
  readonly denied?: readonly DeniedEntry[] | undefined;
  readonly protection?: ProtectedSet | undefined;
}

/** Refuses an open descriptor that is (or, for a directory, holds) something protected from `mode`. */
async function checkIdentity(
  handle: FileHandle,
  protectedNow: ReadonlyMap<string, ProtectedEntry>,
  mode: OpenMode,
  path: string,
): Promise<void> {
  const entry = protectedNow.get(identityOf(await handle.stat({ bigint: true })));
  if (entry === undefined || (entry.access === 'read-only' && mode === 'read')) return;
  throw new RefusedPath(
    `refused: ${JSON.stringify(path)} is, or lies under, ${entry.path} (${entry.key}), whatever it is called now`,
  );
}

/**
 * Opens the directory `real` (inside `realRoot`) one component at a time, never following a link,
 * each directory on the way checked against the protected set.
 */
async function openDirectory(
  realRoot: string,
  real: string,
  create: boolean,
  check: (handle: FileHandle) => Promise<void>,
  shown: string,
): Promise<FileHandle> {
  let handle = await open(realRoot, O_RDONLY | O_DIRECTORY);
  let byPath = realRoot;
  try {
    await check(handle);
    for (const part of relative(realRoot, real).split(sep).filter(Boolean)) {
      byPath = resolve(byPath, part);
      const at = AT_FD ? `/proc/self/fd/${handle.fd}/${part}` : byPath;
      if (create) {
        await mkdir(at).catch((error: NodeJS.ErrnoException) => {
          if (error.code !== 'EEXIST') throw error;
        });
      }
      const next = await open(at, O_RDONLY | O_DIRECTORY | O_NOFOLLOW).catch((error: unknown) => {
        throw isLinkError(error) ? raced(shown) : error;
      });
      await handle.close();
      handle = next;
      await check(handle);
    }
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}

interface Located {
  readonly real: string;
  readonly shown: string;
  readonly directory: FileHandle;
  /** The entry's name in `directory`, as a path the kernel resolves from that descriptor. */
  readonly at: (name: string) => string;
  readonly check: (handle: FileHandle) => Promise<void>;
}

/** Confines `path`, then opens its folder (created for `write`), every step checked. */
async function locate(root: string, path: string, mode: OpenMode, guard: Guard): Promise<Located> {
  const real = confine(root, path, guard.denied);
  const realRoot = realpathSync(root);
  const shown = relative(realRoot, real) || '.';
  if (real === realRoot) throw new RefusedPath(`refused: ${path} is the working directory itself`);
  const protectedNow = guard.protection?.current() ?? new Map<string, ProtectedEntry>();
  const check = (handle: FileHandle): Promise<void> => checkIdentity(handle, protectedNow, mode, path);
  const directory = await openDirectory(realRoot, dirname(real), mode === 'write', check, shown);
  const at = (name: string): string =>
    AT_FD ? `/proc/self/fd/${directory.fd}/${name}` : resolve(dirname(real), name);
  return { real, shown, directory, at, check };
}

/** The regular file `name` in a located folder, never a FIFO or a device opened (looked at first). */
async function openRegular(
  located: Located,
  flags: number,
  absentOk: boolean,
): Promise<FileHandle | undefined> {
  const at = located.at(basename(located.real));
  const before = await lstat(at).catch((error: NodeJS.ErrnoException) => {
    if (error.code === 'ENOENT' && absentOk) return undefined;
    throw error;
  });
  if (before === undefined) return undefined;
  if (!before.isFile()) throw notRegular(located.shown, before);
  const handle = await open(at, flags | O_NOFOLLOW | O_NONBLOCK).catch((error: unknown) => {
    throw isLinkError(error) ? raced(located.shown) : error;
  });
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) throw notRegular(located.shown, stats);
    await located.check(handle);
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}

/**
 * Opens the regular file `path` inside `root` for reading (`read`) or reading and writing (`edit`).
 * The handle is the caller's to close.
 */
export async function openInside(
  root: string,
  path: string,
  mode: 'read' | 'edit',
  guard: Guard = {},
): Promise<FileHandle> {
  const located = await locate(root, path, mode, guard);
  try {
    return (await openRegular(located, FLAGS[mode], false))!;
  } finally {
    await located.directory.close();
  }
}

/** The most entries `listInside` reads, and the most characters of their names. */
export const LIST_MAX_ENTRIES = 10_000;
export const LIST_MAX_CHARS = 256 * 1024;

/**
 * The entries of the directory `path` inside `root` (a protected directory is refused like a file),
 * sorted, directories ending in `/`. Read one at a time and at most `LIST_MAX_ENTRIES` of them or
 * `LIST_MAX_CHARS` characters of names (a folder of a million files must not fill the server's
 * memory): `more` says some were left unread, and those listed are then the first the directory
 * gave, not the first by name.
 */
export async function listInside(
  root: string,
  path: string,
  guard: Guard = {},
): Promise<{ names: string[]; more: boolean }> {
  const real = confine(root, path, guard.denied);
  const realRoot = realpathSync(root);
  const protectedNow = guard.protection?.current() ?? new Map<string, ProtectedEntry>();
  const check = (handle: FileHandle): Promise<void> => checkIdentity(handle, protectedNow, 'read', path);
  const directory = await openDirectory(realRoot, real, false, check, relative(realRoot, real) || '.');
  try {
    const names: string[] = [];
    let chars = 0;
    let more = false;
    const entries = await opendir(AT_FD ? `/proc/self/fd/${directory.fd}` : real, { bufferSize: 256 });
    try {
      for (let entry = await entries.read(); entry !== null; entry = await entries.read()) {
        if (names.length === LIST_MAX_ENTRIES || chars + entry.name.length > LIST_MAX_CHARS) {
          more = true;
          break;
        }
        names.push(entry.isDirectory() ? `${entry.name}/` : entry.name);
        chars += entry.name.length + 1;
      }
    } finally {
      await entries.close();
    }
    return { names: names.sort(), more };
  } finally {
    await directory.close();
  }
}

/**
 * Replaces (or creates) the regular file `path` inside `root` with `content`, atomically: a temp
 * file in the same folder, written and fsynced, given the old file's mode and owner, renamed over
 * it, then the folder fsynced. Returns the path written, relative to the root.
 */
export async function replaceInside(
  root: string,
  path: string,
  content: string,
  guard: Guard = {},
): Promise<string> {
  const located = await locate(root, path, 'write', guard);
  const { directory, at, shown } = located;
  const name = basename(located.real);
  const temp = `.${name}.${randomBytes(6).toString('hex')}.aleph-tmp`;
  try {
    const old = await openRegular(located, O_RDONLY, true);
    const kept = old === undefined ? undefined : await old.stat();
    await old?.close();
    const file = await open(at(temp), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0o666);
    try {
      await file.writeFile(content);
      if (kept !== undefined) {
        await file.chmod(kept.mode & 0o7777);
        const mine = await file.stat();
        if (mine.uid !== kept.uid || mine.gid !== kept.gid)
          await file.chown(kept.uid, kept.gid).catch((error: NodeJS.ErrnoException) => {
            throw new RefusedPath(
              `refused: ${shown} is owned by uid ${kept.uid}:${kept.gid}; replacing it would change its owner (${error.code ?? error.message})`,
            );
          });
      }
      await file.sync();
    } finally {
      await file.close();
    }
    await rename(at(temp), at(name));
    await directory.sync();
    return shown;
  } catch (error) {
    await unlink(at(temp)).catch(() => {});
    throw error;
  } finally {
    await directory.close();
  }
}

/** Reads at most `cap` bytes while reading: the head and the tail of a bigger file, with a marker. */
export async function readCapped(handle: FileHandle, cap: number): Promise<string> {
  const { size } = await handle.stat();
  const readAt = async (length: number, position: number): Promise<Buffer> => {
    const buffer = Buffer.alloc(length);
    let filled = 0;
    while (filled < length) {
      const { bytesRead } = await handle.read(buffer, filled, length - filled, position + filled);
      if (bytesRead === 0) break;
      filled += bytesRead;
    }
    return buffer.subarray(0, filled);
  };
  if (size <= cap) return (await readAt(size, 0)).toString('utf8');
  const head = Math.floor(cap / 4);
  const tail = cap - head;
  const [first, last] = [await readAt(head, 0), await readAt(tail, size - tail)];
  return `${first.toString('utf8')}\n…[${size - cap} bytes cut]…\n${last.toString('utf8')}`;
}
