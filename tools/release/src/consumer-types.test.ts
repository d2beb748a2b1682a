// The consumer's type-check without a registry: the clean consumer project of the release test
// (TypeScript strict, `module: nodenext`, `skipLibCheck: false`, Node types and no DOM lib) compiled
// against the workspace's built packages, linked where npm would install them. It catches in every
// test run what a consumer would see from the published declarations: a declaration that needs a
// type package its manifest does not depend on, a dependency's declarations that need the DOM lib,
// an entry point whose types do not resolve under nodenext. The published tarballs themselves are
// checked by `published.test.ts`.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { consumedPackages, writeConsumer } from './consumer.js';
import { publicPackages } from './public-packages.js';

const REPO = resolve(import.meta.dirname, '../../..');
let dir = '';
afterAll(() => {
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

it('a strict nodenext consumer type-checks every entry point and smoke program, with no skipLibCheck', () => {
  dir = mkdtempSync(join(tmpdir(), 'aleph-consumer-types-'));
  const packages = publicPackages(REPO);
  writeConsumer(dir, consumedPackages(packages));
  const modules = join(dir, 'node_modules');
  mkdirSync(join(modules, '@aleph'), { recursive: true });
  mkdirSync(join(modules, '@types'));
  for (const pkg of packages) symlinkSync(pkg.dir, join(modules, pkg.name));
  // The consumer's own dependencies (package.json of the consumer): zod and Node's types.
  symlinkSync(realpathSync(join(REPO, 'packages/harness/node_modules/zod')), join(modules, 'zod'));
  symlinkSync(realpathSync(join(REPO, 'node_modules/@types/node')), join(modules, '@types/node'));
  expect(existsSync(join(modules, 'zod/package.json'))).toBe(true);

  const tsc = spawnSync(
    process.execPath,
    [join(REPO, 'node_modules/typescript/bin/tsc'), '-p', dir, '--noEmit'],
    { encoding: 'utf8' },
  );
  expect(`${tsc.stdout}${tsc.stderr}`).toBe('');
  expect(tsc.status).toBe(0);
}, 600_000);
