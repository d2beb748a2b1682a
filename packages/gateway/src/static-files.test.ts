// GatewayOptions.static (contract 4): a folder served at `/` beside the socket, safely.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
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
