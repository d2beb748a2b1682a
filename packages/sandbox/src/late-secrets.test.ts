// Real bubblewrap: the home's credential stores are denied whenever they exist at a command's
// start, not only when they existed as the sandbox was made (a user logs in to a tool, or pushes
// with a credential store, while the server runs). The root lives in /var/tmp: the sandbox's
// private /tmp would hide it.
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox } from './sandbox.js';

const linux = process.platform === 'linux';
let root = '';
let home = '';
let work = '';

beforeAll(() => {
  root = realpathSync(mkdtempSync('/var/tmp/aleph-late-secrets-'));
  home = join(root, 'home');
  work = join(root, 'work');
  mkdirSync(home);
  mkdirSync(work);
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

describe.skipIf(!linux)('credential stores made after the sandbox', () => {
  it('are denied from the next command on, and named at once for checks by path', () => {
    const sandbox = createSandbox({ network: 'off' }, { mode: 'required', home });
    // Absent now: named by path (file tools refuse them before they exist), never mounted over.
    expect(sandbox.deniedPaths).toContainEqual({
      path: join(home, '.git-credentials'),
      kind: 'absent',
      source: 'protected',
    });
    expect(sandbox.deniedPaths).toContainEqual({
      path: join(home, '.ssh'),
      kind: 'absent',
      source: 'protected',
    });
    const cat = () => {
      const wrapped = sandbox.wrap({
        file: '/bin/sh',
        args: [
          '-c',
          `cat ${home}/.git-credentials ${home}/.ssh/id_ed25519 ${home}/.config/gh/hosts.yml; echo done`,
        ],
        cwd: work,
        env: process.env,
        exactEnv: true,
      });
      try {
        const ran = spawnSync(wrapped.file, wrapped.args, {
          cwd: wrapped.cwd,
          env: wrapped.env,
          encoding: 'utf8',
        });
        return ran.stdout;
      } finally {
        wrapped.release();
      }
    };
    expect(cat()).toBe('done\n'); // nothing there yet
    writeFileSync(join(home, '.git-credentials'), 'https://u:late-git-secret@example.com\n');
    mkdirSync(join(home, '.ssh'));
    writeFileSync(join(home, '.ssh', 'id_ed25519'), 'late-ssh-secret\n');
    mkdirSync(join(home, '.config', 'gh'), { recursive: true });
    writeFileSync(join(home, '.config', 'gh', 'hosts.yml'), 'oauth_token: late-gh-secret\n');
    const out = cat();
    expect(out).toContain('done');
    expect(out).not.toMatch(/late-git-secret|late-ssh-secret|late-gh-secret/);
    expect(sandbox.protectedPaths(work).map((entry) => entry.path)).toEqual(
      expect.arrayContaining([
        join(home, '.git-credentials'),
        join(home, '.ssh'),
        join(home, '.config', 'gh'),
      ]),
    );
  });
});
