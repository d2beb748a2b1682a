// GatewayOptions.static (contract 4): a folder served at `/` beside the socket, safely: by identity,
// no symbolic link followed (in the folder or out of it, an index.html included), no swap between
// the check and the read.
import { spawn, spawnSync } from 'node:child_process';
import { linkSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { startGateway, type Harness } from '../test/support.js';

let h: Harness;
let dir: string;
beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'aleph-static-'));
  mkdirSync(join(dir, 'site', 'assets'), { recursive: true });
  writeFileSync(
    join(dir, 'site', 'index.html'),
    '<!doctype html><script type="module" src="/assets/index-Ab3dE_9z.js"></script>',
  );
  writeFileSync(join(dir, 'site', 'assets', 'index-Ab3dE_9z.js'), 'console.log("hi")');
  writeFileSync(join(dir, 'site', 'assets', 'style.css'), 'body{}');
  writeFileSync(join(dir, 'secret.txt'), 'outside the root');
  symlinkSync(join(dir, 'secret.txt'), join(dir, 'site', 'leak.txt'));
  h = await startGateway({ static: { root: join(dir, 'site') } });
});
afterEach(async () => {
  await h.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** A raw GET (fetch would normalise `..` away), with the path exactly as given. */
function get(path: string, headers: Record<string, string> = {}) {
  return new Promise<{
    status: number;
    headers: Record<string, string | string[] | undefined>;
    body: string;
  }>((resolve, reject) => {
    request({ host: '127.0.0.1', port: h.gateway.port, path, headers }, (response) => {
      let body = '';
      response.setEncoding('utf8').on('data', (chunk) => (body += chunk));
      response.on('end', () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, body }),
      );
    })
      .on('error', reject)
      .end();
  });
}

it('serves index.html at / with no-cache and a strict CSP, hashed assets immutable, with ETags', async () => {
  const index = await get('/');
  expect(index.status).toBe(200);
  expect(index.headers['content-type']).toBe('text/html; charset=utf-8');
  expect(index.headers['cache-control']).toBe('no-cache');
  const csp = String(index.headers['content-security-policy']);
  expect(csp).toContain("script-src 'self'");
  expect(csp).toContain("default-src 'none'");
  expect(csp).not.toMatch(/script-src[^;]*unsafe-inline/);
  expect(csp).not.toMatch(/https?:/); // no third-party origin
  expect(index.body).toContain('<script type="module"');

  const asset = await get('/assets/index-Ab3dE_9z.js');
  expect(asset.headers['content-type']).toBe('text/javascript; charset=utf-8');
  expect(asset.headers['cache-control']).toBe('public, max-age=31536000, immutable');
  expect((await get('/assets/style.css')).headers['cache-control']).toBe('no-cache');

  const again = await get('/', { 'if-none-match': String(index.headers.etag) });
  expect(again.status).toBe(304);
  expect(again.body).toBe('');
  expect((await get('/healthz')).body).toBe('{"ok":true}');
});

it('refuses paths out of the folder (.., encoded .., a symlink out) and other origins', async () => {
  for (const path of [
    '/../secret.txt',
    '/%2e%2e/secret.txt',
    '/assets/..%2f..%2fsecret.txt',
    '/leak.txt',
    '/nope.js',
  ]) {
    const response = await get(path);
    expect({ path, status: response.status }).toEqual({ path, status: 404 });
    expect(response.body).not.toContain('outside the root');
  }
  expect((await get('/', { origin: 'https://evil.example' })).status).toBe(403);
  expect((await get('/', { host: 'evil.example:1234' })).status).toBe(421);
  expect((await get('/', { origin: `http://127.0.0.1:${h.gateway.port}` })).status).toBe(200);
});

it('follows no symbolic link, in the folder or out of it: every link form is a 404', async () => {
  const site = join(dir, 'site');
  mkdirSync(join(dir, 'outside'));
  writeFileSync(join(dir, 'outside', 'index.html'), 'outside the root');
  mkdirSync(join(site, 'sub'));
  symlinkSync(join(dir, 'secret.txt'), join(site, 'sub', 'index.html')); // a symlinked index, out
  mkdirSync(join(site, 'inner'));
  symlinkSync('../index.html', join(site, 'inner', 'index.html')); // a symlinked index, in
  symlinkSync(join(dir, 'outside'), join(site, 'out')); // a symlinked folder, out
  symlinkSync('assets', join(site, 'alias')); // a symlinked folder, in
  symlinkSync('assets/style.css', join(site, 'style.css')); // a link to a file in the folder
  symlinkSync('/', join(site, 'slash'));
  symlinkSync('nowhere', join(site, 'dangling'));
  for (const path of [
    '/sub',
    '/sub/',
    '/sub/index.html',
    '/inner',
    '/inner/',
    '/out',
    '/out/',
    '/out/index.html',
    '/alias/style.css',
    '/style.css',
    '/slash/etc/passwd',
    '/dangling',
    '/%73ub', // "sub", encoded
    '/sub%2findex.html',
    '/sub%5cindex.html', // a backslash
    '/sub/./index.html',
    '//sub//index.html',
    '/assets/..%5c..%5csecret.txt',
    '/%252e%252e/secret.txt', // encoded twice: a literal "%2e%2e" folder, which does not exist
    '/..',
    '/%2e%2e',
    '/assets/%2e%2e/%2e%2e/secret.txt',
    '/index.html%00.js',
    '/%E0%A4%A', // bad percent-encoding
  ]) {
    const response = await get(path);
    expect({ path, status: response.status }).toEqual({ path, status: 404 });
    expect(response.body).not.toContain('outside the root');
  }
  // The real files next to them are served; a folder's own index.html is, with or without a slash.
  expect((await get('/assets/style.css')).body).toBe('body{}');
  writeFileSync(join(site, 'assets', 'index.html'), 'assets index');
  expect((await get('/assets')).body).toBe('assets index');
  expect((await get('/assets/')).body).toBe('assets index');
  expect((await get('/assets/style.css/')).status).toBe(404); // a file named as a folder
});

it('serves a hard link as the file it is, and refuses a FIFO without waiting for a writer', async () => {
  const site = join(dir, 'site');
  linkSync(join(site, 'assets', 'style.css'), join(site, 'hard.css'));
  expect((await get('/hard.css')).body).toBe('body{}');
  if (spawnSync('mkfifo', [join(site, 'pipe.txt')]).status !== 0) return; // no mkfifo: nothing to check
  expect((await get('/pipe.txt')).status).toBe(404);
  expect((await get('/', { 'x-after': 'fifo' })).status).toBe(200);
});

it('a name swapped for a symlink while requests are served never leads out of the folder', async () => {
  // A writer flips site/x between a real folder and a symlink to one outside (and site/y/index.html
  // between a file and a symlink out) as fast as it can, while 400 requests read through them.
  const site = join(dir, 'site');
  mkdirSync(join(dir, 'outside'));
  writeFileSync(join(dir, 'outside', 'index.html'), 'outside the root');
  mkdirSync(join(site, 'x'));
  writeFileSync(join(site, 'x', 'index.html'), 'inside');
  symlinkSync(join(dir, 'outside'), join(site, 'x.link'));
  mkdirSync(join(site, 'y'));
  writeFileSync(join(site, 'y', 'index.html'), 'inside');
  writeFileSync(join(site, 'y', 'real.html'), 'inside');
  symlinkSync(join(dir, 'outside', 'index.html'), join(site, 'y', 'link.html'));
  const flipper = spawn(
    process.execPath,
    [
      '-e',
      `const { renameSync: mv } = require('node:fs'); process.chdir(process.argv[1]);
       for (;;) { try {
         mv('x', 'x.dir'); mv('x.link', 'x'); mv('x', 'x.link'); mv('x.dir', 'x');
         mv('y/index.html', 'y/real.html'); mv('y/link.html', 'y/index.html');
         mv('y/index.html', 'y/link.html'); mv('y/real.html', 'y/index.html');
       } catch {} }`,
      site,
    ],
    { stdio: 'ignore' },
  );
  try {
    const bodies: string[] = [];
    for (let round = 0; round < 50; round += 1) {
      const paths = ['/x/index.html', '/x/', '/x', '/y/', '/y/index.html', '/y', '/x/index.html', '/y/'];
      const responses = await Promise.all(paths.map((path) => get(path)));
      bodies.push(...responses.map((response) => response.body));
    }
    expect(bodies.filter((body) => body.includes('outside the root'))).toEqual([]);
    expect(bodies).toContain('inside'); // the requests did reach the files while they moved
  } finally {
    flipper.kill('SIGKILL');
  }
});
