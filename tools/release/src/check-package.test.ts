import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { checkPackage } from './check-package.mjs';

const CHECK = resolve(import.meta.dirname, 'check-package.mjs');

let root = '';
afterEach(() => rmSync(root, { recursive: true, force: true }));

function makePackage(files: Record<string, string>): string {
  root = mkdtempSync(join(tmpdir(), 'aleph-release-'));
  const manifest = {
    name: '@aleph/example',
    exports: {
      '.': { types: './dist/index.d.ts', default: './dist/index.js' },
      './package.json': './package.json',
    },
  };
  for (const [path, content] of Object.entries({ 'package.json': JSON.stringify(manifest), ...files })) {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), content);
  }
  return root;
}

const built = {
  'src/index.ts': 'export const a = 1;\n',
  'src/index.test.ts': 'test\n',
  'src/internal/x.ts': 'export const x = 1;\n',
  'dist/index.js': '',
  'dist/index.d.ts': '',
  'dist/internal/x.js': '',
  'dist/internal/x.d.ts': '',
};

it('a built package passes', () => {
  expect(checkPackage(makePackage(built))).toEqual([]);
});

it('an unbuilt package fails, naming every missing file and the manifest field', () => {
  expect(checkPackage(makePackage({ 'src/index.ts': 'export const a = 1;\n' }))).toEqual([
    './dist/index.d.ts (exports["."]["types"]) is missing',
    './dist/index.js (exports["."]["default"]) is missing',
    'dist/index.js (from src/index.ts) is missing',
    'dist/index.d.ts (from src/index.ts) is missing',
  ]);
});

it('a stale output left by a renamed source fails', () => {
  const dir = makePackage({ ...built, 'dist/internal/old-name.js': '' });
  expect(checkPackage(dir)).toEqual([
    'dist/internal/old-name.js has no source in src/ (a stale build output)',
  ]);
});

it('as prepack, it exits non-zero and says why on stderr', () => {
  const dir = makePackage({ 'src/index.ts': 'export const a = 1;\n' });
  const result = spawnSync(process.execPath, [CHECK], { cwd: dir, encoding: 'utf8' });
  expect(result.status).toBe(1);
  expect(result.stderr).toContain('@aleph/example is not built, or its build is stale; refusing to pack it');
  expect(result.stderr).toContain('Run `pnpm build`');
});

it('pnpm pack of an unbuilt package fails loudly instead of shipping an empty tarball', () => {
  const dir = makePackage({ 'src/index.ts': 'export const a = 1;\n' });
  const manifest = {
    name: '@aleph/example',
    version: '0.0.0',
    exports: { '.': './dist/index.js' },
    scripts: { prepack: `node ${CHECK}` },
  };
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest));
  const result = spawnSync('pnpm', ['pack', '--pack-destination', join(dir, 'out')], {
    cwd: dir,
    encoding: 'utf8',
  });
  expect(result.status).not.toBe(0);
  expect(`${result.stdout}${result.stderr}`).toContain('refusing to pack it');
});
