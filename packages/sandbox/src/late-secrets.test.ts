// Real bubblewrap: the home's credential stores are denied whenever they exist at a command's
// start, not only when they existed as the sandbox was made (a user logs in to a tool, or pushes
// with a credential store, while the server runs). The root lives in /var/tmp: the sandbox's
// private /tmp would hide it.
import { spawnSync } from 'node:child_process';
import { linkSync, mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandboxError } from './errors.js';
import { createSandbox, type ConfiguredSandbox } from './sandbox.js';

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

/** Runs `cat` of three late credential stores in `home` through `sandbox`: what it printed. */
function catIn(sandbox: ConfiguredSandbox, home: string, ...more: string[]): string {
  const wrapped = sandbox.wrap({
    file: '/bin/sh',
    args: [
      '-c',
      `cat ${home}/.git-credentials ${home}/.ssh/id_ed25519 ${home}/.config/gh/hosts.yml ${more.join(' ')}; echo done`,
    ],
    cwd: work,
    env: process.env,
    exactEnv: true,
  });
  try {
    return spawnSync(wrapped.file, wrapped.args, { cwd: wrapped.cwd, env: wrapped.env, encoding: 'utf8' })
      .stdout;
  } finally {
    wrapped.release();
  }
}

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
    const cat = () => catIn(sandbox, home);
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

  it('are denied when the answer of earlier commands was kept, from the next command on', async () => {
    // A home whose folders did not change for a while: what the commands found is kept, checked by
    // the folders' change times and the entries' identities, not searched for again.
    const quiet = join(root, 'quiet-home');
    mkdirSync(join(quiet, '.config'), { recursive: true });
    mkdirSync(join(quiet, '.ssh'));
    writeFileSync(join(quiet, '.npmrc'), '//registry.example/:_authToken=npm-secret\n');
    // A link to a store elsewhere that is not there yet (a disk not mounted, a dotfiles checkout).
    const elsewhere = join(root, 'aws-elsewhere');
    symlinkSync(elsewhere, join(quiet, '.aws'));
    await sleep(2100);
    const sandbox = createSandbox({ network: 'off' }, { mode: 'required', home: quiet });
    expect(catIn(sandbox, quiet)).toBe('done\n');
    expect(catIn(sandbox, quiet)).toBe('done\n');
    // A second name for a denied file, made in a folder no check covers: refused at the next command.
    linkSync(join(quiet, '.npmrc'), join(work, 'npmrc'));
    try {
      expect(() => catIn(sandbox, quiet)).toThrow(SandboxError);
      expect(() => catIn(sandbox, quiet)).toThrow(/hard links/);
    } finally {
      rmSync(join(work, 'npmrc'));
    }
    expect(catIn(sandbox, quiet)).toBe('done\n');
    // The link's target appears: nothing in the home changed.
    mkdirSync(elsewhere);
    writeFileSync(join(elsewhere, 'credentials'), 'late-aws-secret\n');
    expect(catIn(sandbox, quiet, join(quiet, '.aws', 'credentials'))).toBe('done\n');
    // Made in the home itself and in a folder that was there (.config); a key in a denied folder.
    writeFileSync(join(quiet, '.git-credentials'), 'https://u:late-git-secret@example.com\n');
    mkdirSync(join(quiet, '.config', 'gh'));
    writeFileSync(join(quiet, '.config', 'gh', 'hosts.yml'), 'oauth_token: late-gh-secret\n');
    writeFileSync(join(quiet, '.ssh', 'id_ed25519'), 'late-ssh-secret\n');
    const out = catIn(sandbox, quiet);
    expect(out).toContain('done');
    expect(out).not.toMatch(/late-git-secret|late-ssh-secret|late-gh-secret/);
    expect(sandbox.protectedPaths(work).map((entry) => entry.path)).toEqual(
      expect.arrayContaining([join(quiet, '.git-credentials'), join(quiet, '.config', 'gh')]),
    );
  });
});
