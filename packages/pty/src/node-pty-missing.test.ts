// node-pty whose native module was never built (its install script declined): importing @aleph/pty
// says so, with the commands that build it, not node-pty's own stack trace. A copy of the built
// package beside a node-pty that fails as the real one does without its addon.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';

const root = mkdtempSync(join(tmpdir(), 'aleph-pty-unbuilt-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

it("an unbuilt node-pty: the import fails naming node-pty's error and how to build it", () => {
  const here = join(root, 'node_modules', '@aleph', 'pty');
  mkdirSync(here, { recursive: true });
  cpSync(join(import.meta.dirname, '..', 'dist'), join(here, 'dist'), { recursive: true });
  cpSync(join(import.meta.dirname, '..', 'package.json'), join(here, 'package.json'));
  const nodePty = join(root, 'node_modules', 'node-pty');
  mkdirSync(nodePty, { recursive: true });
  writeFileSync(join(nodePty, 'package.json'), '{"name":"node-pty","version":"1.1.0","main":"index.js"}');
  writeFileSync(
    join(nodePty, 'index.js'),
    "throw new Error('Failed to load native module: pty.node, checked: build/Release, build/Debug, prebuilds/linux-x64');\n",
  );
  const ran = spawnSync(process.execPath, ['--input-type=module', '-e', "await import('@aleph/pty')"], {
    cwd: root,
    encoding: 'utf8',
  });
  expect(ran.status).not.toBe(0);
  expect(ran.stderr).toContain(
    '@aleph/pty: node-pty could not be loaded (Failed to load native module: pty.node, checked: build/Release, build/Debug, prebuilds/linux-x64). Its native module is built by its install script, which did not run or failed: with npm, `npm install-scripts approve node-pty` then `npm rebuild node-pty`',
  );
});
