import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { checkDependencyDirection, packageOf } from './dependency-direction.js';
import { makeWorkspace } from './fixture.js';
import { importsOf } from './imports.js';

const REPO = resolve(import.meta.dirname, '../../..');

it('the repository follows the package graph of DESIGN.md', () => {
  expect(checkDependencyDirection(REPO)).toEqual([]);
});

let root = '';
afterEach(() => rmSync(root, { recursive: true, force: true }));

const manifest = (
  name: string,
  fields: {
    dependencies?: object;
    devDependencies?: object;
    peerDependencies?: object;
    exports?: object;
  } = {},
) => ({ name: `@aleph/${name}`, ...fields });

describe('reports a synthetic violation between packages', () => {
  it.each([
    ['verification', 'pty', "import { PtySession } from '@aleph/pty';"],
    ['harness', 'pty', "export * from '@aleph/pty';"],
    ['harness', 'gateway', "const g = await import('@aleph/gateway');"],
    ['pty', 'power', "import '@aleph/power';"],
    ['power', 'verification', "import type { X } from '@aleph/verification';"],
    ['gateway', 'server', "import { main } from '@aleph/server';"],
    ['harness', 'sandbox', "type S = typeof import('@aleph/sandbox');"],
    ['gateway', 'cluster', "import { natsBus } from '@aleph/cluster';"],
    ['sandbox', 'pty', "const { PtySession } = require('@aleph/pty');"],
  ])('%s importing @aleph/%s in source', (from, to, line) => {
    root = makeWorkspace({
      [`packages/${from}/package.json`]: manifest(from),
      [`packages/${to}/package.json`]: manifest(to),
      [`packages/${from}/src/bad.ts`]: `// header\n${line}\n`,
      [`packages/${from}/src/bad.test.ts`]: line, // tests are not production source
      [`packages/${from}/test/support.ts`]: line, // nor is test support
    });
    const violations = checkDependencyDirection(root);
    expect(violations).toHaveLength(1);
    expect(violations[0]).toMatchObject({
      file: `packages/${from}/src/bad.ts:2`,
      importPath: `@aleph/${to}`,
    });
  });

  it('a JavaScript file outside src is read too', () => {
    root = makeWorkspace({
      'packages/verification/package.json': manifest('verification'),
      'packages/pty/package.json': manifest('pty'),
      'packages/verification/lib/extra.js': "import { PtySession } from '@aleph/pty';\n",
    });
    expect(checkDependencyDirection(root)).toMatchObject([{ file: 'packages/verification/lib/extra.js:1' }]);
  });

  it('a manifest dependency that breaks the graph', () => {
    root = makeWorkspace({
      'packages/verification/package.json': manifest('verification', {
        dependencies: { '@aleph/pty': 'workspace:^' },
      }),
      'packages/pty/package.json': manifest('pty'),
    });
    expect(checkDependencyDirection(root)).toEqual([
      {
        file: 'packages/verification/package.json',
        importPath: '@aleph/pty',
        message: '@aleph/verification may not depend on @aleph/pty (allowed: sandbox)',
      },
    ]);
  });

  it('a deep import, while an exported sub-path is fine', () => {
    root = makeWorkspace({
      'packages/gateway/package.json': manifest('gateway', { exports: { '.': './dist/index.js' } }),
      'packages/pty/package.json': manifest('pty', {
        exports: { '.': './dist/index.js', './testing': './t.js' },
      }),
      'packages/gateway/src/a.ts':
        "import { x } from '@aleph/pty/src/internal/x.js';\nimport '@aleph/pty/testing';",
    });
    const violations = checkDependencyDirection(root);
    expect(violations).toHaveLength(1);
    expect(violations[0]?.importPath).toBe('@aleph/pty/src/internal/x.js');
    expect(violations[0]?.message).toContain('deep import');
  });
});

describe('the cluster is a leaf that imports types only from the gateway and the harness', () => {
  const workspace = (source: string) =>
    makeWorkspace({
      'packages/cluster/package.json': manifest('cluster', {
        dependencies: {
          '@aleph/gateway': 'workspace:^',
          '@aleph/harness': 'workspace:^',
          '@nats-io/jetstream': '^3.0.0',
        },
      }),
      'packages/gateway/package.json': manifest('gateway'),
      'packages/harness/package.json': manifest('harness'),
      'apps/server/package.json': {
        name: '@aleph/server',
        dependencies: { '@aleph/cluster': 'workspace:^' },
      },
      'apps/server/src/main.ts': "import { JetStreamEventBus } from '@aleph/cluster';\n",
      'packages/cluster/src/bus.ts': source,
    });

  it('accepts type imports, type re-exports, typeof import() and its own third-party packages', () => {
    root = workspace(
      [
        "import type { EventBus } from '@aleph/gateway';",
        "import type { SessionStore } from '@aleph/harness';",
        "export type { EventBus as Bus } from '@aleph/gateway';",
        "type H = typeof import('@aleph/harness');",
        "import { jetstream } from '@nats-io/jetstream';",
      ].join('\n'),
    );
    expect(checkDependencyDirection(root)).toEqual([]);
  });

  it.each([
    ["import { createGateway } from '@aleph/gateway';", '@aleph/gateway'],
    ["import { type SessionStore, AgentHarness } from '@aleph/harness';", '@aleph/harness'],
    ["export { createGateway } from '@aleph/gateway';", '@aleph/gateway'],
    ["const harness = await import('@aleph/harness');", '@aleph/harness'],
    // Under verbatimModuleSyntax this still loads the module at run time.
    ["import { type EventBus } from '@aleph/gateway';", '@aleph/gateway'],
  ])('fails on a value import: %s', (line, target) => {
    root = workspace(line);
    expect(checkDependencyDirection(root)).toEqual([
      {
        file: 'packages/cluster/src/bus.ts:1',
        importPath: target,
        message: `@aleph/cluster may import only types from ${target}: write \`import type\``,
      },
    ]);
  });

  it('fails when it reaches another package, even for types', () => {
    root = workspace("import type { PtySession } from '@aleph/pty';");
    expect(checkDependencyDirection(root)[0]?.message).toBe(
      '@aleph/cluster may not depend on @aleph/pty (allowed: gateway, harness)',
    );
  });
});

describe('third-party dependencies belong to their package', () => {
  it.each(['dependencies', 'devDependencies', 'peerDependencies', 'optionalDependencies'])(
    'node-pty in verification %s fails',
    (field) => {
      root = makeWorkspace({
        'packages/verification/package.json': manifest('verification', { [field]: { 'node-pty': '1.1.0' } }),
      });
      expect(checkDependencyDirection(root)).toEqual([
        expect.objectContaining({
          file: 'packages/verification/package.json',
          importPath: 'node-pty',
          message: expect.stringContaining(
            `@aleph/verification may not depend on node-pty in ${field}`,
          ) as string,
        }),
      ]);
    },
  );

  it('node-pty in pty passes; test tools and @types of allowed packages pass in devDependencies', () => {
    root = makeWorkspace({
      'packages/pty/package.json': manifest('pty', {
        dependencies: { 'node-pty': '1.1.0' },
        devDependencies: { vitest: '4', typescript: '5', '@types/node': '20', 'fast-check': '4' },
      }),
      'packages/verification/package.json': manifest('verification', {
        dependencies: { re2js: '2' },
        devDependencies: { '@types/smol-toml': '1' },
      }),
    });
    expect(checkDependencyDirection(root)).toEqual([]);
  });

  it('a test tool is not allowed as a runtime dependency', () => {
    root = makeWorkspace({
      'packages/power/package.json': manifest('power', { dependencies: { vitest: '4' } }),
    });
    expect(checkDependencyDirection(root)[0]?.message).toContain(
      '@aleph/power may not depend on vitest in dependencies',
    );
  });

  it('production source importing a package that is not its own fails; a test importing it does not', () => {
    root = makeWorkspace({
      'packages/verification/package.json': manifest('verification'),
      'packages/verification/src/a.ts':
        "import { spawn } from 'node-pty';\nimport { readFileSync } from 'node:fs';\nimport 'fs';\n",
      'packages/verification/src/a.test.ts': "import { spawn } from 'node-pty';\n",
    });
    expect(checkDependencyDirection(root)).toEqual([
      {
        file: 'packages/verification/src/a.ts:1',
        importPath: 'node-pty',
        message:
          '@aleph/verification production source may not import node-pty (allowed: re2js, smol-toml, zod)',
      },
    ]);
  });

  it('production source importing an allowed package it holds only in devDependencies fails', () => {
    root = makeWorkspace({
      'packages/gateway/package.json': manifest('gateway', { devDependencies: { ws: '8' } }),
      'packages/gateway/src/a.ts': "import type { WebSocket } from 'ws';\n",
    });
    expect(checkDependencyDirection(root)).toEqual([
      {
        file: 'packages/gateway/src/a.ts:1',
        importPath: 'ws',
        message: "ws is imported by production source but is not in @aleph/gateway's dependencies",
      },
    ]);
  });
});

describe('computed dynamic imports are flagged', () => {
  it.each([
    ['const m = await import(name);', 'name'],
    ['const m = await import(`@aleph/${which}`);', '`@aleph/${which}`'],
    ["const m = require('@aleph/' + which);", "'@aleph/' + which"],
  ])('%s', (line, shown) => {
    root = makeWorkspace({
      'packages/power/package.json': manifest('power'),
      'packages/power/src/a.ts': line,
    });
    expect(checkDependencyDirection(root)).toEqual([
      {
        file: 'packages/power/src/a.ts:1',
        importPath: shown,
        message: `computed dynamic import of ${shown}: the dependency rules cannot see where it leads; import a literal specifier`,
      },
    ]);
  });

  it('a literal template import is not computed', () => {
    root = makeWorkspace({
      'packages/power/package.json': manifest('power'),
      'packages/power/src/a.ts': 'await import(`node:fs`);',
    });
    expect(checkDependencyDirection(root)).toEqual([]);
  });
});

it('finds static, dynamic, re-export, side-effect, require and type imports, with their kind and line', () => {
  expect(
    importsOf(
      [
        "import a from 'a';",
        "export { b } from 'b';",
        "import 'c';",
        "const d = await import('d');",
        "import type { E } from 'e';",
        "export type { F } from 'f';",
        "type G = typeof import('g');",
        "import h = require('h');",
        'const i = await import(name);',
        "manager.require('not-a-module');",
      ].join('\n'),
    ).map(({ specifier, kind, line }) => `${line} ${kind} ${specifier}`),
  ).toEqual([
    '1 value a',
    '2 value b',
    '3 value c',
    '4 value d',
    '5 type e',
    '6 type f',
    '7 type g',
    '8 value h',
    '9 computed name',
  ]);
});

it('names the package of a specifier', () => {
  expect([packageOf('ws'), packageOf('@xterm/xterm/css/xterm.css'), packageOf('zod/v4')]).toEqual([
    'ws',
    '@xterm/xterm',
    'zod',
  ]);
});
