import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { checkDependencyDirection, importsOf } from './dependency-direction.js';
import { makeWorkspace } from './fixture.js';

const REPO = resolve(import.meta.dirname, '../../..');

it('the repository follows the package graph of DESIGN.md', () => {
  expect(checkDependencyDirection(REPO)).toEqual([]);
});

describe('reports a synthetic violation', () => {
  let root = '';
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  const manifest = (name: string, dependencies: Record<string, string> = {}, exports?: object) => ({
    name: `@aleph/${name}`,
    dependencies,
    ...(exports ? { exports } : {}),
  });

  it.each([
    ['verification', 'pty', "import { PtySession } from '@aleph/pty';"],
    ['harness', 'pty', "export * from '@aleph/pty';"],
    ['harness', 'gateway', "const g = await import('@aleph/gateway');"],
    ['pty', 'power', "import '@aleph/power';"],
    ['power', 'verification', "import type { X } from '@aleph/verification';"],
    ['gateway', 'server', "import { main } from '@aleph/server';"],
  ])('%s importing @aleph/%s in source', (from, to, line) => {
    root = makeWorkspace({
      [`packages/${from}/package.json`]: manifest(from),
      [`packages/${to}/package.json`]: manifest(to),
      [`packages/${from}/src/bad.ts`]: `// header\n${line}\n`,
      [`packages/${from}/src/bad.test.ts`]: line, // tests are not production source
    });
    const violations = checkDependencyDirection(root);
    expect(violations).toHaveLength(1);
    expect(violations[0]).toMatchObject({ file: `packages/${from}/src/bad.ts`, importPath: `@aleph/${to}` });
  });

  it('a manifest dependency that breaks the graph', () => {
    root = makeWorkspace({
      'packages/verification/package.json': manifest('verification', { '@aleph/pty': 'workspace:^' }),
      'packages/pty/package.json': manifest('pty'),
    });
    expect(checkDependencyDirection(root)).toEqual([
      {
        file: 'packages/verification/package.json',
        importPath: '@aleph/pty',
        message: '@aleph/verification may not depend on @aleph/pty (allowed: none)',
      },
    ]);
  });

  it('a deep import, while an exported sub-path is fine', () => {
    root = makeWorkspace({
      'packages/gateway/package.json': manifest('gateway', {}, { '.': './dist/index.js' }),
      'packages/pty/package.json': manifest('pty', {}, { '.': './dist/index.js', './testing': './t.js' }),
      'packages/gateway/src/a.ts':
        "import { x } from '@aleph/pty/src/internal/x.js';\nimport '@aleph/pty/testing';",
    });
    const violations = checkDependencyDirection(root);
    expect(violations).toHaveLength(1);
    expect(violations[0]?.importPath).toBe('@aleph/pty/src/internal/x.js');
    expect(violations[0]?.message).toContain('deep import');
  });
});

it('finds static, dynamic, re-export and side-effect imports', () => {
  expect(
    importsOf(
      "import a from 'a';\nexport { b } from 'b';\nimport 'c';\nconst d = await import('d');\nimport type { E } from 'e';",
    ),
  ).toEqual(['a', 'b', 'c', 'd', 'e']);
});
