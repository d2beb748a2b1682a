// A folder served at `/` (the web console's build): GET and HEAD only, nothing outside the folder
// (`..`, encoded or not, and symlinks that lead out are refused), the MIME type by extension,
// `index.html` revalidated on every load and hashed assets cached for good, a weak ETag, and a
// Content-Security-Policy that allows no inline script and no other origin. Nothing is logged, so
// a token a client might put in a URL by mistake goes nowhere.
import { createReadStream } from 'node:fs';
import { realpath, stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, join, sep } from 'node:path';

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

export function staticFiles(
  root: string,
): (request: IncomingMessage, response: ServerResponse) => Promise<boolean> {
  const realRoot = realpath(root).catch(() => undefined);
  /** Answers the request if it is for a file of the folder; false when it is not one (a 404). */
  return async (request, response) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') return false;
    const base = await realRoot;
    if (base === undefined) return false;
    let path: string;
    try {
      path = decodeURIComponent((request.url ?? '/').split(/[?#]/)[0] ?? '/');
    } catch {
      return false;
    }
    if (!path.startsWith('/') || path.includes('\0') || path.split(/[\\/]/).includes('..')) return false;
    if (path.endsWith('/')) path += 'index.html';
    let file: string;
    let size: number;
    let modified: number;
    try {
      file = await realpath(join(base, path));
      if (file !== base && !file.startsWith(base + sep)) return false; // a symlink that leads out
      let info = await stat(file);
      if (info.isDirectory()) {
        file = join(file, 'index.html');
        info = await stat(file);
      }
      if (!info.isFile()) return false;
      size = info.size;
      modified = info.mtimeMs;
    } catch {
      return false;
    }
    const etag = `W/"${size.toString(16)}-${Math.floor(modified).toString(16)}"`;
    const extension = extname(file).toLowerCase();
    const headers = {
      'content-type': MIME[extension] ?? 'application/octet-stream',
      'cache-control':
        extension !== '.html' && HASHED.test(file) ? 'public, max-age=31536000, immutable' : 'no-cache',
      etag,
      'content-security-policy': CONTENT_SECURITY_POLICY,
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'cross-origin-resource-policy': 'same-origin',
    };
    if (request.headers['if-none-match'] === etag) {
      response.writeHead(304, headers).end();
      return true;
    }
    response.writeHead(200, { ...headers, 'content-length': size });
    if (request.method === 'HEAD') {
      response.end();
      return true;
    }
    createReadStream(file)
      .on('error', () => response.destroy())
      .pipe(response);
    return true;
  };
}
