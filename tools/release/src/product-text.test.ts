import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { productTextProblems } from './product-text.js';
import { publicPackages } from './public-packages.js';
import { changesetProblems } from './release-check.js';
import { tarballProblems, type Tarball } from './tarball.js';

const REPO = resolve(import.meta.dirname, '../../..');

it('pending changesets and the public packages’ READMEs speak of the product', () => {
  const readmes = publicPackages(REPO).flatMap((pkg) =>
    productTextProblems(readFileSync(join(pkg.dir, 'README.md'), 'utf8')).map(
      (p) => `${pkg.name} README.md:${p}`,
    ),
  );
  expect([...changesetProblems(REPO), ...readmes]).toEqual([]);
});

describe('words about how the project is built are refused', () => {
  it.each([
    ['(tester6 F9: an unconfined stop hook read the key)', 'tester6'],
    ['each issue-16 target beside its figure', 'issue-16'],
    ['see issue #16', 'issue #16'],
    ['the shape a sandbox takes (TEAM contract 1)', 'TEAM'],
    ['CEILING server 2809→2834', 'CEILING'],
    ['(hooks5 item 5)', 'hooks5'],
    ['the tool-loop verifier as in the seed', 'the seed'],
  ])('%s', (line, word) => {
    const problems = productTextProblems(`fine\n${line}\n`);
    expect(problems[0]).toMatch(new RegExp(`^2: "${word.replace(/[.*+?^${}()|[\]\\#]/g, '\\$&')}"`));
  });

  it('product words pass: a team of agents, a contract with Claude Code, seeds of a random test', () => {
    expect(
      productTextProblems(
        'Claude Code’s hook contract is the reference.\nA fast-check seed.\nTeams install it.',
      ),
    ).toEqual([]);
  });
});

describe('a tarball fit to publish', () => {
  const manifest = JSON.stringify({
    name: '@aleph/example',
    version: '0.2.0',
    exports: { '.': { types: './dist/index.d.ts', default: './dist/index.js' } },
  });
  const good: Tarball = {
    name: '@aleph/example',
    version: '0.2.0',
    file: 'example.tgz',
    files: [
      { path: 'package.json', text: manifest },
      { path: 'README.md', text: '# @aleph/example\n' },
      { path: 'LICENSE', text: 'MIT' },
      { path: 'dist/index.js', text: 'export {};\n//# sourceMappingURL=index.js.map' },
      { path: 'dist/index.js.map', text: JSON.stringify({ sources: ['../src/index.ts'] }) },
      { path: 'dist/index.d.ts', text: 'export {};' },
      { path: 'src/index.ts', text: 'export {};' },
    ],
  };
  const without = (path: string): Tarball => ({ ...good, files: good.files.filter((f) => f.path !== path) });
  const withFile = (path: string, text = ''): Tarball => ({
    ...good,
    files: [...good.files, { path, text }],
  });

  it('passes', () => {
    expect(tarballProblems(good)).toEqual([]);
  });

  it.each([
    [without('LICENSE'), 'LICENSE is not in the tarball'],
    [without('README.md'), 'README.md is not in the tarball'],
    [without('dist/index.d.ts'), './dist/index.d.ts (exports["."]["types"]) is not in the tarball'],
    [without('src/index.ts'), 'dist/index.js.map points at src/index.ts, which is not in the tarball'],
    [withFile('dist/.tsbuildinfo'), 'dist/.tsbuildinfo: build bookkeeping in the tarball'],
    [withFile('dist/index.test.js'), 'dist/index.test.js: test or bench code in the tarball'],
    [withFile('bench/helper.ts'), 'bench/helper.ts: test or bench code in the tarball'],
    [withFile('dist/x.d.ts', '/** The shape of TEAM contract 1. */'), 'dist/x.d.ts:1: "TEAM"'],
  ])('fails: %#', (tarball, problem) => {
    expect(tarballProblems(tarball).join('\n')).toContain(problem);
  });
});
