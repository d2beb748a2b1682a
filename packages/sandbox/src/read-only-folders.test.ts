// The server's own code under a run's folder: `readOnlyFolders` inside the cwd stay as they are under
// real bubblewrap — not written, removed, renamed (nor any folder between them and the cwd), nor
// swapped for a link — while the rest of the cwd stays writable; the file tools are told too.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createSandbox } from './sandbox.js';

const root = realpathSync(mkdtempSync('/var/tmp/aleph-read-only-folders-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe.skipIf(process.platform !== 'linux')('readOnlyFolders', () => {
  it('a folder of the list inside the cwd cannot be changed, moved or replaced; the rest can', () => {
    const dir = join(root, 'project');
    const code = join(dir, 'packages', 'tool', 'dist');
    const deps = join(dir, 'node_modules', 'dep');
    mkdirSync(code, { recursive: true });
    mkdirSync(deps, { recursive: true });
    writeFileSync(join(code, 'index.js'), 'export const ok = true;\n');
    writeFileSync(join(deps, 'index.js'), 'module.exports = 1;\n');
    const box = createSandbox(
      {
        network: 'off',
        readOnlyFolders: [code, join(dir, 'node_modules'), join(root, 'absent', 'dist')],
      },
      { mode: 'required' },
    );
    expect(box.readOnlyPaths).toEqual(expect.arrayContaining([code, join(dir, 'node_modules')]));
    const attempts = [
      'echo "globalThis.pwned = 1" >> packages/tool/dist/index.js',
      'rm -rf packages/tool/dist',
      'mv packages/tool/dist packages/tool/old',
      'mv packages/tool packages/old-tool',
      'mv packages packages-old',
      'rm -rf node_modules/dep && ln -s /tmp node_modules/dep',
      'mv node_modules nm-old',
      'echo written > elsewhere.txt',
    ];
    const results = attempts.map((script) => {
      const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', script], cwd: dir, env: process.env });
      try {
        return spawnSync(wrapped.file, wrapped.args, { cwd: wrapped.cwd, env: wrapped.env, encoding: 'utf8' })
          .status;
      } finally {
        wrapped.release?.();
      }
    });
    expect(
      results.slice(0, -1).every((status) => status !== 0),
      String(results),
    ).toBe(true);
    expect(results.at(-1)).toBe(0);
    expect(readFileSync(join(code, 'index.js'), 'utf8')).toBe('export const ok = true;\n');
    expect(readFileSync(join(deps, 'index.js'), 'utf8')).toBe('module.exports = 1;\n');
    expect(readFileSync(join(dir, 'elsewhere.txt'), 'utf8')).toBe('written\n');
  });

  it('a relative folder is refused, naming it', () => {
    expect(() => createSandbox({ network: 'off', readOnlyFolders: ['dist'] }, { mode: 'off' })).toThrow(
      /read_only_folders: "dist" is not an absolute path/,
    );
  });
});
