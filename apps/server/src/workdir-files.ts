// Files inside a run's working directory, opened so that nothing outside it is read or written —
// not through a dangling, a nested or a racing symlink — and so that no open can block: anything
// but a regular file is refused before it is opened for data (a FIFO's open() would hold a libuv
// worker forever, and four of them wedge every fs call of the server).
//
// The path is resolved once (`confine`), then opened component by component from the root with
// O_NOFOLLOW, each step relative to the directory already open (Linux: /proc/self/fd/N/name, an
// openat). A symlink swapped in after the check makes that step fail instead of being followed.
// Elsewhere the steps go by path: the same checks, with a race window left (documented).
import { constants, existsSync, lstatSync, readlinkSync, realpathSync, type Stats } from 'node:fs';
import { lstat, mkdir, open, type FileHandle } from 'node:fs/promises';
import { basename, dirname, relative, resolve, sep } from 'node:path';

const { O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_NOFOLLOW, O_NONBLOCK, O_DIRECTORY } = constants;
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

export const deniedBy = (real: string, denied: readonly DeniedEntry[]): DeniedEntry | undefined =>
  denied.find(({ path }) => real === path || real.startsWith(path === sep ? path : path + sep));

/**
 * Resolves `path` inside `root`, following every symlink (dangling ones to where they point).
 * A path under one the sandbox denies is refused too: the file tools run in-process, unconfined.
 */
export function confine(root: string, path: string, denied: readonly DeniedEntry[] = []): string {
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

/** Opens the directory `real` (inside `realRoot`) one component at a time, never following a link. */
async function openDirectory(
  realRoot: string,
  real: string,
  create: boolean,
  shown: string,
): Promise<FileHandle> {
  let handle = await open(realRoot, O_RDONLY | O_DIRECTORY);
  let byPath = realRoot;
  try {
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
    }
    return handle;
  } catch (error) {
    await handle.close();
    throw error;
  }
}

export type OpenMode = 'read' | 'write' | 'edit';
const FLAGS: Record<OpenMode, number> = { read: O_RDONLY, write: O_WRONLY | O_CREAT, edit: O_RDWR };

/**
 * Opens the regular file `path` inside `root`. `write` creates it (and its folders); the caller
 * truncates. The handle is the caller's to close.
 */
export async function openInside(
  root: string,
  path: string,
  mode: OpenMode,
  denied: readonly DeniedEntry[] = [],
): Promise<FileHandle> {
  const real = confine(root, path, denied);
  const realRoot = realpathSync(root);
  const shown = relative(realRoot, real) || '.';
  if (real === realRoot) throw new RefusedPath(`refused: ${path} is the working directory itself`);
  const directory = await openDirectory(realRoot, dirname(real), mode === 'write', shown);
  try {
    const at = AT_FD ? `/proc/self/fd/${directory.fd}/${basename(real)}` : real;
    // Look before opening: a FIFO or a device is never opened at all.
    const before = await lstat(at).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT' && mode === 'write') return undefined;
      throw error;
    });
    if (before !== undefined && !before.isFile()) throw notRegular(shown, before);
    const handle = await open(at, FLAGS[mode] | O_NOFOLLOW | O_NONBLOCK).catch((error: unknown) => {
      throw isLinkError(error) ? raced(shown) : error;
    });
    const stats = await handle.stat();
    if (!stats.isFile()) {
      await handle.close();
      throw notRegular(shown, stats);
    }
    return handle;
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
