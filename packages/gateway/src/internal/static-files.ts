// A folder served at `/` (the web console's build): GET and HEAD only, the MIME type by extension,
// `index.html` revalidated on every load and hashed assets cached for good, a weak ETag, and a
// Content-Security-Policy that allows no inline script and no other origin. Nothing is logged, so
// a token a client might put in a URL by mistake goes nowhere.
//
// Invariant: a byte is served only from a file reached from the folder found at start, one path
// component at a time, without following any symbolic link (in or out of the folder, the
// `index.html` of a directory included), and it is read from the very descriptor that was checked:
// no name is looked up twice, so nothing renamed or swapped in between can redirect the read. On
// Linux each component is opened beneath the descriptor of its parent (`/proc/self/fd/N/name`, as
// `openat` would); elsewhere by path with `O_NOFOLLOW`, then every directory on the way is checked
// to still be the one opened (device and inode). A hard link is a name of the file itself, so it
// is served like any file of the folder.
import { constants, existsSync, type Stats } from 'node:fs';
import { open, realpath, stat, lstat, type FileHandle } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, join } from 'node:path';
import { pipeline } from 'node:stream';

const MIME: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.webp': 'image/webp',
  '.ico': 'image/x-icon',
  '.woff2': 'font/woff2',
  '.woff': 'font/woff',
  '.ttf': 'font/ttf',
  '.wasm': 'application/wasm',
  '.txt': 'text/plain; charset=utf-8',
};

/**
 * Scripts only from this origin, no inline script; inline styles are allowed because xterm.js's DOM
 * renderer sets them (cell sizes, theme). The socket is this origin too (`connect-src 'self'`).
 */
export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "manifest-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** Vite names built assets `name-<hash>.ext`: their content never changes under that name. */
const HASHED = /-[A-Za-z0-9_-]{8}\.[a-z0-9]+$/;

// O_NONBLOCK: opening a FIFO put in the folder must not wait for a writer (it is then refused as
// not a regular file). Where a flag does not exist (Windows) it is 0, and the checks after the
// open catch what it would have refused.
const NOFOLLOW = (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0) | constants.O_RDONLY;
const DIRECTORY = NOFOLLOW | (constants.O_DIRECTORY ?? 0);

interface Identity {
  readonly dev: number;
  readonly ino: number;
}
const same = (a: Identity, b: Identity): boolean => a.dev === b.dev && a.ino === b.ino;

/** A name opened on the way down: its descriptor, the path it was opened by, what fstat said. */
interface Level {
  readonly handle: FileHandle;
  readonly path: string;
  readonly info: Stats;
}

/** A file found: its descriptor (to read and close), what fstat said of it, and its name. */
interface Found {
  readonly handle: FileHandle;
  readonly info: Stats;
  readonly name: string;
}

/**
 * The request's path as folder components; undefined for what names nothing in the folder (a
 * `..`, a NUL, bad percent-encoding). `directory` when it ends with a slash (or is `/`).
 */
function componentsOf(url: string | undefined): { parts: string[]; directory: boolean } | undefined {
  let path: string;
  try {
    path = decodeURIComponent((url ?? '/').split(/[?#]/)[0] ?? '/');
  } catch {
    return undefined;
  }
  if (!path.startsWith('/') || path.includes('\0')) return undefined;
  const parts = path.split(/[\\/]/).filter((part) => part !== '' && part !== '.');
  if (parts.includes('..')) return undefined;
  return { parts, directory: /[\\/]$/.test(path) };
}

/** Opens the folder's files by identity (see the invariant above). */
class Folder {
  readonly #root: string;
  readonly #identity: Identity;
  /** Linux: a name is opened beneath its parent's descriptor, never by a path that could be swapped. */
  readonly #beneath = process.platform === 'linux' && existsSync('/proc/self/fd');

  constructor(root: string, identity: Identity) {
    this.#root = root;
    this.#identity = identity;
  }

  /** The regular file at `parts` (a directory's `index.html`), opened; undefined when there is none. */
  async find(parts: readonly string[], directory: boolean): Promise<Found | undefined> {
    const levels: Level[] = [];
    let found: Found | undefined;
    try {
      let level = await this.#open(levels, this.#root, DIRECTORY);
      if (!same(level.info, this.#identity)) return undefined; // the folder was replaced since
      for (const [index, name] of parts.entries())
        level = await this.#open(levels, name, index < parts.length - 1 ? DIRECTORY : NOFOLLOW);
      let name = parts.at(-1) ?? 'index.html';
      if (level.info.isDirectory()) level = await this.#open(levels, (name = 'index.html'), NOFOLLOW);
      else if (directory) return undefined; // `/file/`
      if (!level.info.isFile() || !(await this.#unmoved(levels))) return undefined;
      found = { handle: level.handle, info: level.info, name };
      return found;
    } catch {
      return undefined; // ELOOP (a symlink), ENOENT, ENOTDIR, EACCES…: not a file of the folder
    } finally {
      const rest = levels.filter((level) => level.handle !== found?.handle);
      await Promise.all(rest.map((level) => level.handle.close()));
    }
  }

  /**
   * Opens `name` in the last of `levels` (the root by its path when there is none yet) without
   * following a link, and adds it to them.
   */
  async #open(levels: Level[], name: string, flags: number): Promise<Level> {
    const parent = levels.at(-1);
    const path = parent === undefined ? name : join(parent.path, name);
    const beneath = parent !== undefined && this.#beneath;
    const handle = await open(beneath ? `/proc/self/fd/${parent.handle.fd}/${name}` : path, flags);
    try {
      const level = { handle, path, info: await handle.stat() };
      levels.push(level);
      return level;
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /** Without openat: each name on the way still names what was opened (no swap, no symlink). */
  async #unmoved(levels: readonly Level[]): Promise<boolean> {
    if (this.#beneath) return true;
    for (const level of levels) if (!same(await lstat(level.path), level.info)) return false;
    return true;
  }
}

/** The folder as found now (its real path, its identity); undefined when there is none. */
async function folderAt(root: string): Promise<Folder | undefined> {
  try {
    const path = await realpath(root);
    const info = await stat(path);
    return info.isDirectory() ? new Folder(path, info) : undefined;
  } catch {
    return undefined;
  }
}

function headersFor(found: Found, hashed: boolean): Record<string, string> {
  const { info, name } = found;
  const extension = extname(name).toLowerCase();
  return {
    'content-type': MIME[extension] ?? 'application/octet-stream',
    'cache-control': extension !== '.html' && hashed ? 'public, max-age=31536000, immutable' : 'no-cache',
    etag: `W/"${info.size.toString(16)}-${Math.floor(info.mtimeMs).toString(16)}"`,
    'content-security-policy': CONTENT_SECURITY_POLICY,
    'x-content-type-options': 'nosniff',
    'referrer-policy': 'no-referrer',
    'cross-origin-resource-policy': 'same-origin',
  };
}

export function staticFiles(
  root: string,
): (request: IncomingMessage, response: ServerResponse) => Promise<boolean> {
  const folder = folderAt(root);
  /** Answers the request if it is for a file of the folder; false when it is not one (a 404). */
  return async (request, response) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') return false;
    const path = componentsOf(request.url);
    if (path === undefined) return false;
    const found = await (await folder)?.find(path.parts, path.directory);
    if (found === undefined) return false;
    const { handle, info } = found;
    const headers = headersFor(found, HASHED.test(path.parts.at(-1) ?? ''));
    const notModified = request.headers['if-none-match'] === headers.etag;
    if (notModified || request.method === 'HEAD' || info.size === 0) {
      await handle.close();
      if (notModified) response.writeHead(304, headers).end();
      else response.writeHead(200, { ...headers, 'content-length': info.size }).end();
      return true;
    }
    response.writeHead(200, { ...headers, 'content-length': info.size });
    // The descriptor that was checked is the one read, up to the size announced; a client that
    // goes away ends the read (and closes the descriptor).
    pipeline(handle.createReadStream({ start: 0, end: info.size - 1 }), response, () => {});
    return true;
  };
}
