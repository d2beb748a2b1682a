// Reading a file the model may have written (a project's `.mcp.json`, `AGENTS.md`, hooks settings)
// in a process that is not confined: it must neither block that process nor show it anything else.
// The real path must lie in one of the roots and under no denied path; the file is opened without
// following a last link and without blocking (a FIFO would hold the thread for good), only a
// regular file is read, bounded, and what was opened is checked again by its descriptor's path (a
// folder on the way swapped for a link between the check and the open). BigInt stats throughout:
// Node 20's shared stat array, left holding a FIFO's, made the next import() of a package fail.
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readlinkSync,
  readSync,
  realpathSync,
} from 'node:fs';
import { isAbsolute, relative, sep } from 'node:path';

/** Bytes of a model-writable file read at most, by default. */
export const MODEL_FILE_MAX_BYTES = 1024 * 1024;

export interface ModelFileOptions {
  /** Folders its real path must lie in (any one of them); a link leading out is refused. Default: no such check. */
  readonly roots?: readonly string[] | undefined;
  /** Real paths whose contents are never read: the path itself and everything under it. */
  readonly denied?: readonly string[] | undefined;
  /** Bytes read at most. Default `MODEL_FILE_MAX_BYTES`. */
  readonly maxBytes?: number | undefined;
  /** A larger file: `refuse` it (default), or read its first `maxBytes` (`whole: false`). */
  readonly larger?: 'refuse' | 'head' | undefined;
}

/** Why a file that is there was not read. */
export type ModelFileRefusal =
  | 'unresolved' // its real path cannot be found (a dangling link, a loop)
  | 'outside' // its real path lies in none of the roots
  | 'denied' // its real path lies under a denied path (`under`)
  | 'unreadable' // it cannot be opened or read (`reason` holds the errno code)
  | 'not_file' // a FIFO, a device, a folder, a socket
  | 'too_large' // over `maxBytes`, with `larger: 'refuse'`
  | 'changed'; // what was opened is not what was checked (a folder on the way swapped)

export type ModelFile =
  /** Nothing at the path (not even a dangling link). */
  | { readonly kind: 'missing' }
  /**
   * `reason` quotes nothing of the file and does not name it (`is not a regular file`); `real`: its
   * real path, once known; `under`: the denied path; `code`: the errno code, if one says why.
   */
  | {
      readonly kind: 'refused';
      readonly why: ModelFileRefusal;
      readonly reason: string;
      readonly real?: string;
      readonly under?: string;
      readonly code?: string;
    }
  /** `bytes`: the file's size; `whole`: all of it is in `text` (UTF-8). */
  | {
      readonly kind: 'read';
      readonly real: string;
      readonly text: string;
      readonly bytes: number;
      readonly whole: boolean;
    };

const inside = (root: string, path: string): boolean => {
  const rel = relative(root, path);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
};

const errno = (error: unknown): string => (error as NodeJS.ErrnoException).code ?? 'error';

const realOr = (path: string): string => {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
};

/**
 * Reads a file the model may have written, confined and without blocking. Never throws: a file that
 * is there but is not read is `refused`, with a reason that quotes nothing of it.
 */
export function readModelWritableFile(path: string, options: ModelFileOptions = {}): ModelFile {
  try {
    lstatSync(path, { bigint: true });
  } catch {
    return { kind: 'missing' };
  }
  let real: string;
  try {
    real = realpathSync(path);
  } catch (error) {
    const code = errno(error);
    return { kind: 'refused', why: 'unresolved', reason: `cannot be resolved (${code})`, code };
  }
  const roots = options.roots?.map(realOr);
  const denied = options.denied ?? [];
  const check = (at: string): Extract<ModelFile, { kind: 'refused' }> | undefined => {
    if (roots !== undefined && !roots.some((root) => inside(root, at))) {
      const where = roots.length === 1 ? `outside ${roots[0]}` : `outside ${roots.join(' and ')}`;
      return { kind: 'refused', why: 'outside', reason: `is a link to a path ${where}`, real: at };
    }
    const under = denied.find((deny) => inside(deny, at));
    if (under === undefined) return undefined;
    return { kind: 'refused', why: 'denied', reason: `lies under ${under}, a denied path`, real: at, under };
  };
  const before = check(real);
  if (before !== undefined) return before;
  const max = options.maxBytes ?? MODEL_FILE_MAX_BYTES;
  let fd: number;
  try {
    fd = openSync(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    const code = errno(error);
    return { kind: 'refused', why: 'unreadable', reason: `cannot be opened (${code})`, real, code };
  }
  try {
    const stat = fstatSync(fd, { bigint: true });
    if (!stat.isFile()) return { kind: 'refused', why: 'not_file', reason: 'is not a regular file', real };
    const bytes = Number(stat.size);
    if (bytes > max && options.larger !== 'head')
      return {
        kind: 'refused',
        why: 'too_large',
        reason: `is ${bytes} bytes, over the limit of ${max}`,
        real,
      };
    let opened = real;
    try {
      opened = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      // no /proc: the checks above stand
    }
    const after = check(opened);
    if (after !== undefined)
      return { ...after, why: 'changed', reason: `changed while it was opened: it ${after.reason}` };
    // One byte more than allowed: a file grown past the limit since fstat is seen, not cut silently.
    const buffer = Buffer.alloc(Math.min(bytes, max) + 1);
    let read = 0;
    while (read < buffer.length) {
      const got = readSync(fd, buffer, read, buffer.length - read, read);
      if (got === 0) break;
      read += got;
    }
    if (read > max && options.larger !== 'head')
      return {
        kind: 'refused',
        why: 'too_large',
        reason: `grew over the limit of ${max} bytes while it was read`,
        real,
      };
    const kept = Math.min(read, max);
    return {
      kind: 'read',
      real,
      text: buffer.subarray(0, kept).toString('utf8'),
      bytes,
      whole: read <= max && kept >= bytes,
    };
  } catch (error) {
    const code = errno(error);
    return { kind: 'refused', why: 'unreadable', reason: `cannot be read (${code})`, real, code };
  } finally {
    closeSync(fd);
  }
}
