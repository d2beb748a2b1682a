import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { makeWorkspace } from './fixture.js';
import { importCircles } from './import-circles.js';

const REPO = resolve(import.meta.dirname, '../../..');

it('no package has an import circle in its production source', () => {
  expect(importCircles(REPO)).toEqual([]);
});

let root = '';
afterEach(() => rmSync(root, { recursive: true, force: true }));

it('reports a two-file circle, a type-only one included, naming the files in order', () => {
  root = makeWorkspace({
    'packages/power/package.json': { name: '@aleph/power' },
    'packages/power/src/power-capability.ts': "import { createGuard } from './internal/guard.js';\n",
    'packages/power/src/internal/guard.ts': "import type { SleepGuard } from '../power-capability.js';\n",
    'packages/power/src/index.ts': "export * from './power-capability.js';\n",
  });
  expect(importCircles(root)).toEqual([
    ['packages/power/src/internal/guard.ts', 'packages/power/src/power-capability.ts'],
  ]);
});

it('reports a longer loop once, and ignores tests and one-way imports', () => {
  root = makeWorkspace({
    'packages/harness/package.json': { name: '@aleph/harness' },
    'packages/harness/src/types.ts': "import type { E } from './errors.js';\n",
    'packages/harness/src/errors.ts': "import type { T } from './tool-service.js';\n",
    'packages/harness/src/tool-service.ts': "import type { X } from './types.js';\n",
    'packages/harness/src/a.ts': "import './types.js';\n",
    'packages/harness/src/a.test.ts': "import './a.js';\nimport './b.test.js';\n",
  });
  expect(importCircles(root)).toEqual([
    [
      'packages/harness/src/errors.ts',
      'packages/harness/src/tool-service.ts',
      'packages/harness/src/types.ts',
    ],
  ]);
});
