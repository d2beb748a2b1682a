import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { apiReportProblems, requiredBump, writeReports } from './api-report.js';

const REPO = resolve(import.meta.dirname, '../../..');

it('every public package’s checked-in API report is its built API, covered by the pending changesets', () => {
  expect(apiReportProblems(REPO)).toEqual([]);
});

describe('on a throw-away workspace', () => {
  let root = '';
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  const write = (path: string, content: string): void => {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), content);
  };
  const workspace = (version = '0.2.0'): void => {
    root = mkdtempSync(join(tmpdir(), 'aleph-api-'));
    write(
      'packages/example/package.json',
      JSON.stringify({
        name: '@aleph/example',
        version,
        exports: {
          '.': { types: './dist/index.d.ts', default: './dist/index.js' },
          './testing': { types: './dist/testing.d.ts', default: './dist/testing.js' },
          './package.json': './package.json',
        },
      }),
    );
    write('packages/example/dist/index.d.ts', "export { open, type Options } from './internal/open.js';\n");
    write(
      'packages/example/dist/internal/open.d.ts',
      '/** Opens. */\nexport interface Options { readonly path: string }\nexport declare function open(options: Options): void;\n',
    );
    write('packages/example/dist/testing.d.ts', 'export declare const fake: () => void;\n');
    writeReports(root, 'current');
    writeReports(root, 'released');
  };
  const changeset = (bump: string): void =>
    write('.changeset/change.md', `---\n'@aleph/example': ${bump}\n---\n\nWhat changed.\n`);

  it('a fresh report passes', () => {
    workspace();
    expect(apiReportProblems(root)).toEqual([]);
  });

  it('a changed public type with a stale report fails, naming the command', () => {
    workspace();
    write(
      'packages/example/dist/internal/open.d.ts',
      'export interface Options { readonly path: string; readonly mode: number }\nexport declare function open(options: Options): void;\n',
    );
    expect(apiReportProblems(root)).toEqual([
      '@aleph/example: packages/example/etc/example.api.md is not the API of the build: run `pnpm api:update` and commit it',
    ]);
  });

  it.each([
    ['none', undefined],
    ['a patch', 'patch'],
  ])('an updated report with %s changeset fails; a minor one passes', (pending, bump) => {
    workspace();
    write(
      'packages/example/dist/testing.d.ts',
      'export declare const fake: () => void;\nexport declare const other: number;\n',
    );
    writeReports(root, 'current');
    if (bump !== undefined) changeset(bump);
    expect(apiReportProblems(root)).toEqual([
      `@aleph/example: its API changed since its last release (packages/example/etc/example.released.api.md) and needs a changeset with at least a minor bump (pending: ${bump ?? 'none'})`,
    ]);
    changeset('minor');
    expect(apiReportProblems(root)).toEqual([]);
  });

  it('from 1.0, removing a declaration needs a major bump', () => {
    workspace('1.0.0');
    write('packages/example/dist/testing.d.ts', 'export {};\n');
    writeReports(root, 'current');
    changeset('minor');
    expect(apiReportProblems(root)[0]).toContain(
      'needs a changeset with at least a major bump (pending: minor)',
    );
  });

  it('a comment-only change of the declarations changes nothing', () => {
    workspace();
    write('packages/example/dist/testing.d.ts', '/** A fake. */\nexport declare const fake: () => void;\n');
    expect(apiReportProblems(root)).toEqual([]);
  });
});

it('classifies a change of report: 0.x is minor either way; from 1.0 a removal is major', () => {
  const before = '## `x`\n\n```ts\n// a\nconst a: 1;\n\n// b\nconst b: 2;\n```\n';
  const added = '## `x`\n\n```ts\n// a\nconst a: 1;\n\n// b\nconst b: 2;\n\n// c\nconst c: 3;\n```\n';
  const changed = '## `x`\n\n```ts\n// a\nconst a: 9;\n\n// b\nconst b: 2;\n```\n';
  expect([
    requiredBump(before, before, '1.0.0'),
    requiredBump(before, added, '1.0.0'),
    requiredBump(before, changed, '1.0.0'),
    requiredBump(before, changed, '0.3.0'),
  ]).toEqual([undefined, 'minor', 'major', 'minor']);
});
