import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeWorkspace } from './fixture.js';
import { checkLedger, checkLineBudget, lineSlack, LEDGER_PATH, type Ceiling } from './line-budget.js';
import { countLines } from './workspace.js';

const REPO = resolve(import.meta.dirname, '../../..');

/**
 * The ratchet. A change here (raise or lower) appends a dated entry with its reason to
 * tools/shape/ledger.md in the same commit; the test below holds the two together.
 */
export const CEILING: Readonly<Record<string, Ceiling>> = {
  power: { lines: 240, files: 5 },
  pty: { lines: 3577, files: 18 },
  verification: { lines: 3042, files: 25 },
  harness: { lines: 3004, files: 12 },
  gateway: { lines: 4197, files: 26 },
  sandbox: { lines: 3568, files: 12 },
  server: { lines: 7760, files: 32 },
  mcp: { lines: 1419, files: 8 },
  console: { lines: 3356, files: 10 },
  cluster: { lines: 3513, files: 15 },
};

it('every package sits at its CEILING of lines and files (within the slack), no more', () => {
  expect(checkLineBudget(REPO, CEILING).failures).toEqual([]);
});

it('every CEILING is the last dated entry of its package in the ledger', () => {
  expect(checkLedger(readFileSync(join(REPO, LEDGER_PATH), 'utf8'), CEILING)).toEqual([]);
});

it('the harness is held at 12 source files, as in the seed', () => {
  expect(CEILING['harness']?.files).toBeLessThanOrEqual(12);
});

let root = '';
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe('the count', () => {
  const pty = { 'packages/pty/package.json': { name: '@aleph/pty' } };

  it.each([
    ['a line of C in src/internal', 'packages/pty/src/internal/spawner.c'],
    ['a JavaScript file in src', 'packages/pty/src/extra.js'],
    ['a TypeScript file outside src', 'packages/pty/lib/big.ts'],
    ['a shell script', 'packages/pty/scripts/build.sh'],
    ['a C header', 'packages/pty/src/internal/proc.h'],
    ['a stylesheet', 'packages/pty/src/style.css'],
    ['a declaration file written by hand', 'packages/pty/src/shim.d.ts'],
  ])('%s fails the package over its ceiling, naming it', (_what, path) => {
    root = makeWorkspace({ ...pty, 'packages/pty/src/a.ts': 'a\nb\n', [path]: 'one more\n' });
    expect(checkLineBudget(root, { pty: { lines: 2, files: 2 } }).failures).toEqual([
      '@aleph/pty has 3 lines of production source, over its CEILING of 2',
    ]);
  });

  it('an extensionless script with a #! line counts; other extensionless files do not', () => {
    root = makeWorkspace({
      ...pty,
      'packages/pty/bin/aleph-pty': '#!/bin/sh\nexec true\n',
      'packages/pty/LICENSE': 'MIT\n',
    });
    expect(checkLineBudget(root, { pty: { lines: 2, files: 1 } }).failures).toEqual([]);
  });

  it('tests, benches, test support, fixtures, tool configuration and build output do not count', () => {
    const big = 'x\n'.repeat(1000);
    root = makeWorkspace({
      ...pty,
      'packages/pty/src/a.ts': 'a\n',
      'packages/pty/src/a.test.ts': big,
      'packages/pty/src/a.spec.ts': big,
      'packages/pty/src/a.bench.ts': big,
      'packages/pty/bench/c-relay.c': big,
      'packages/pty/test/support.ts': big,
      'packages/pty/fixtures/hook.sh': big,
      'packages/pty/dist/index.js': big,
      'packages/pty/node_modules/x/index.js': big,
      'packages/pty/vitest.config.ts': big,
      'packages/pty/vite.config.ts': big,
      'packages/pty/tsconfig.json': big,
      'packages/pty/reliability/vitest.config.ts': big,
      'packages/pty/reliability/support.ts': big,
      'packages/pty/README.md': big,
    });
    expect(checkLineBudget(root, { pty: { lines: 1, files: 1 } }).failures).toEqual([]);
  });

  it('counts lines as wc -l does, plus an unterminated last line', () => {
    expect([
      countLines(''),
      countLines('a'),
      countLines('a\n'),
      countLines('a\nb'),
      countLines('\n\n'),
    ]).toEqual([0, 1, 1, 2, 2]);
  });
});

describe('the ratchet', () => {
  it('reports a package over its file ceiling', () => {
    root = makeWorkspace({
      'packages/harness/package.json': { name: '@aleph/harness' },
      ...Object.fromEntries(Array.from({ length: 13 }, (_, i) => [`packages/harness/src/f${i}.ts`, 'x'])),
    });
    expect(checkLineBudget(root, { harness: { lines: 13, files: 12 } }).failures).toEqual([
      '@aleph/harness has 13 production source files, over its CEILING of 12',
    ]);
  });

  it('reports a package with no ceiling, with the figures to write', () => {
    root = makeWorkspace({
      'apps/server/package.json': { name: '@aleph/server' },
      'apps/server/src/a.ts': 'x\n',
    });
    expect(checkLineBudget(root, {}).failures).toEqual([
      '@aleph/server has no CEILING: add one (1 lines, 1 files) to tools/shape/src/line-budget.test.ts and a dated entry to tools/shape/ledger.md',
    ]);
  });

  it('fails on headroom beyond the slack, and on a lost file: a shrink lowers the ceiling', () => {
    root = makeWorkspace({
      'packages/power/package.json': { name: '@aleph/power' },
      'packages/power/src/a.ts': 'x\n'.repeat(494),
    });
    expect(lineSlack(500)).toBe(5);
    expect(checkLineBudget(root, { power: { lines: 499, files: 1 } }).failures).toEqual([]);
    expect(checkLineBudget(root, { power: { lines: 500, files: 2 } }).failures).toEqual([
      '@aleph/power has 494 lines, 6 under its CEILING of 500 (slack 5): lower the CEILING to 494 in this commit, with a ledger entry',
      '@aleph/power has 1 production source files, under its CEILING of 2: lower it to 1 in this commit, with a ledger entry',
    ]);
  });

  it('the slack is 1% of the ceiling, at least 5 lines', () => {
    expect([lineSlack(100), lineSlack(600), lineSlack(2815)]).toEqual([5, 6, 28]);
  });
});

describe('the ledger', () => {
  const today = new Date('2026-12-01T12:00:00Z');
  const ledger = (...lines: string[]): string =>
    ['# Ledger', '', 'Prose with - dashes is fine.', '', ...lines, ''].join('\n');

  it('accepts a CEILING that is the last entry of its section', () => {
    const text = ledger(
      '## pty',
      '',
      '- 2026-11-30 lines 90 files 3: baseline of the count',
      '- 2026-12-01 lines 100 files 3: the spawn helper reads its FIFO in chunks',
    );
    expect(checkLedger(text, { pty: { lines: 100, files: 3 } }, today)).toEqual([]);
  });

  it('a CEILING raise without a ledger entry fails, naming the package and both figures', () => {
    const text = ledger(
      '## pty',
      '- 2026-12-01 lines 100 files 3: the spawn helper reads its FIFO in chunks',
    );
    expect(checkLedger(text, { pty: { lines: 120, files: 3 } }, today)).toEqual([
      '@aleph/pty: CEILING is 120 lines, 3 files, but the last entry of tools/shape/ledger.md (line 6) says 100 lines, 3 files: every change of a CEILING appends a dated entry with its reason',
    ]);
  });

  it('a package with a CEILING and no section fails, and so does a section without a CEILING', () => {
    const text = ledger('## gateway', '- 2026-12-01 lines 10 files 1: the event bus seam of its own');
    expect(checkLedger(text, { pty: { lines: 1, files: 1 } }, today)).toEqual([
      '@aleph/pty has a CEILING but no entry in tools/shape/ledger.md: add "## pty" and a dated entry',
      'tools/shape/ledger.md has a section for gateway, which has no CEILING',
    ]);
  });

  it.each([
    ['an entry without a date', '- lines 10 files 1: the reason for it all', 'not an entry'],
    [
      'an impossible date',
      '- 2026-02-30 lines 10 files 1: the reason for it all',
      '2026-02-30 is not a date',
    ],
    ['a date in the future', '- 2027-01-01 lines 10 files 1: the reason for it all', 'is in the future'],
    ['an empty reason', '- 2026-12-01 lines 10 files 1: more', 'says nothing'],
    [
      'entries out of date order',
      '- 2026-11-01 lines 10 files 1: the reason for it all',
      'append, in date order',
    ],
  ])('%s fails', (_what, entry, message) => {
    const text = ledger('## pty', '- 2026-11-20 lines 9 files 1: the first reason of all', entry);
    const failures = checkLedger(text, { pty: { lines: 10, files: 1 } }, today);
    expect(failures.join('\n')).toContain(message);
  });
});

it('a real workspace edit trips the rule: a line appended to a copy of the spawn helper fails it', () => {
  root = makeWorkspace({ 'packages/pty/package.json': { name: '@aleph/pty' } });
  mkdirSync(join(root, 'packages/pty/src/internal'), { recursive: true });
  const spawner = readFileSync(join(REPO, 'packages/pty/src/internal/spawner.c'), 'utf8');
  writeFileSync(join(root, 'packages/pty/src/internal/spawner.c'), spawner);
  const exact = { lines: countLines(spawner), files: 1 };
  expect(checkLineBudget(root, { pty: exact }).failures).toEqual([]);
  writeFileSync(join(root, 'packages/pty/src/internal/spawner.c'), `${spawner}/* one more */\n`);
  expect(checkLineBudget(root, { pty: exact }).failures).toEqual([
    `@aleph/pty has ${exact.lines + 1} lines of production source, over its CEILING of ${exact.lines}`,
  ]);
});
