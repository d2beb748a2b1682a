// The nested repositories the user's own `git status` in a project enters: gitlinks (mode 160000)
// in the project's index whose folder holds a git dir of its own. git runs a status inside each,
// with that repository's config (a `core.fsmonitor` runs as the user). The sandbox keeps the
// project's `.git/config` and `.git/modules` read-only, but the index stays the model's to write
// (`git add`), and a repository it makes and stages within one command is not there to protect
// beforehand: this says which there are, for the caller to warn about. The index is read here
// (versions 2 to 4), never by running git.
import { lstatSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { isWithin } from './policy.js';

/** An index larger than this is not read (a caller then says it could not tell). */
const MAX_INDEX_BYTES = 256 * 1024 * 1024;
const GITLINK = 0o160000;

/**
 * The gitlinks of `cwd`'s index whose folder holds its own git dir: a `.git` folder, or a `.git`
 * file naming a git dir outside `cwd/.git/modules` (a submodule git made is there, kept read-only).
 * Paths relative to `cwd`. Undefined when the index cannot be read as one (no repository: []).
 */
export function embeddedRepositories(cwd: string): string[] | undefined {
  let index: Buffer;
  try {
    if (lstatSync(join(cwd, '.git', 'index')).size > MAX_INDEX_BYTES) return undefined;
    index = readFileSync(join(cwd, '.git', 'index'));
  } catch {
    return [];
  }
  const links = gitlinks(index, hashLength(cwd));
  return links?.filter((path) => ownGitDir(cwd, path));
}

/** SHA-256 repositories have 32-byte names in the index. */
function hashLength(cwd: string): number {
  try {
    return /objectformat\s*=\s*sha256/i.test(readFileSync(join(cwd, '.git', 'config'), 'utf8')) ? 32 : 20;
  } catch {
    return 20;
  }
}

/** The paths of the gitlink entries of an index, or undefined when it is not one. */
function gitlinks(index: Buffer, hash: number): string[] | undefined {
  if (index.length < 12 || index.toString('latin1', 0, 4) !== 'DIRC') return undefined;
  const version = index.readUInt32BE(4);
  if (version < 2 || version > 4) return undefined;
  const count = index.readUInt32BE(8);
  const found: string[] = [];
  let at = 12;
  let previous: Buffer = Buffer.alloc(0);
  for (let entry = 0; entry < count; entry += 1) {
    const start = at;
    if (at + 40 + hash + 2 > index.length) return undefined;
    const mode = index.readUInt32BE(at + 24);
    const flags = index.readUInt16BE(at + 40 + hash);
    at += 40 + hash + 2 + (version >= 3 && (flags & 0x4000) !== 0 ? 2 : 0);
    let path: Buffer;
    if (version === 4) {
      // A varint of how many bytes of the previous path to drop, then the rest, NUL-terminated.
      let strip = 0;
      for (let byte = 0x80; (byte & 0x80) !== 0;) {
        if (at >= index.length) return undefined;
        byte = index[at]!;
        at += 1;
        strip = (strip << 7) | (byte & 0x7f);
        if ((byte & 0x80) !== 0) strip += 1;
      }
      const end = index.indexOf(0, at);
      if (end < 0 || strip > previous.length) return undefined;
      path = Buffer.concat([previous.subarray(0, previous.length - strip), index.subarray(at, end)]);
      at = end + 1;
    } else {
      const end = index.indexOf(0, at);
      if (end < 0) return undefined;
      path = index.subarray(at, end);
      at = start + Math.ceil((end + 1 - start) / 8) * 8; // NUL-padded to a multiple of 8
    }
    previous = path;
    if (mode === GITLINK) found.push(path.toString('utf8'));
  }
  return found;
}

/** Whether the gitlink's folder has a git dir git would enter that is not one of `.git/modules`. */
function ownGitDir(cwd: string, path: string): boolean {
  const dotGit = join(cwd, path, '.git');
  try {
    const stat = lstatSync(dotGit);
    if (!stat.isFile()) return true; // a folder (or a link to one): a repository of its own
    const named = /^gitdir:\s*(.+?)\s*$/m.exec(readFileSync(dotGit, 'utf8'))?.[1];
    return named === undefined || !isWithin(resolve(dirname(dotGit), named), join(cwd, '.git', 'modules'));
  } catch {
    return false; // not checked out: git does not enter it
  }
}
