// A project file the model can write (`.mcp.json`), read so that it can neither block the server
// nor show it anything else: the real path must lie inside the project and under no denied path,
// it is opened without following a final link and without blocking (a FIFO), and only a regular
// file of bounded size is read. What was opened is checked again by its descriptor's real path.
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

/** Bytes of a project `.mcp.json` read at most (larger: refused, not cut). */
export const PROJECT_FILE_MAX_BYTES = 1024 * 1024;

const inside = (root: string, path: string): boolean => {
  const rel = relative(root, path);
  return rel === '' || (rel !== '..' && !rel.startsWith(`..${sep}`) && !isAbsolute(rel));
};

const code = (error: unknown): string => (error as NodeJS.ErrnoException).code ?? 'error';

/**
 * The file's text; undefined when nothing is at `path`; `{ problem }` (naming the file, never
 * quoting it) when it is there but not read.
 */
export function readProjectFile(
  path: string,
  root: string,
  denied: readonly string[] = [],
): string | undefined | { readonly problem: string } {
  try {
    lstatSync(path, { bigint: true }); // bigint: see below
  } catch {
    return undefined;
  }
  const refused = (why: string): { problem: string } => ({ problem: `${path}: ${why}; not read` });
  let real: string;
  let realRoot: string;
  try {
    realRoot = realpathSync(root);
    real = realpathSync(path);
  } catch (error) {
    return refused(`cannot be resolved (${code(error)})`);
  }
  const check = (at: string): string | undefined => {
    if (!inside(realRoot, at)) return `is a link to a path outside the project (${realRoot})`;
    const under = denied.find((deny) => inside(deny, at));
    return under === undefined ? undefined : `lies under ${under}, a path the sandbox denies`;
  };
  const before = check(real);
  if (before !== undefined) return refused(before);
  let fd: number;
  try {
    fd = openSync(real, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch (error) {
    return refused(`cannot be opened (${code(error)})`);
  }
  try {
    // BigInt stats: Node 20's shared stat array left holding a FIFO's made the next import() fail.
    const stat = fstatSync(fd, { bigint: true });
    if (!stat.isFile()) return refused('is not a regular file');
    if (stat.size > BigInt(PROJECT_FILE_MAX_BYTES))
      return refused(`is ${stat.size} bytes, over the limit of ${PROJECT_FILE_MAX_BYTES}`);
    let opened = real;
    try {
      opened = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      // no /proc: the path checks above stand
    }
    const after = check(opened);
    if (after !== undefined)
      return refused(`changed while it was opened: it ${after.replace(/^is /, 'is now ')}`);
    const buffer = Buffer.alloc(PROJECT_FILE_MAX_BYTES + 1);
    let read = 0;
    while (read < buffer.length) {
      const got = readSync(fd, buffer, read, buffer.length - read, read);
      if (got === 0) break;
      read += got;
    }
    if (read > PROJECT_FILE_MAX_BYTES)
      return refused(`grew over the limit of ${PROJECT_FILE_MAX_BYTES} bytes while it was read`);
    return buffer.subarray(0, read).toString('utf8');
  } catch (error) {
    return refused(`cannot be read (${code(error)})`);
  } finally {
    closeSync(fd);
  }
}
