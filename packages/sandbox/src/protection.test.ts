// The protection invariant under real bubblewrap: every rename, copy-and-swap, hard link, symlink
// and bind trick a confined command tries against each protected path kind leaves the protected
// files unchanged and unread — `.git` (config, hooks, a hooks link into the cwd, core.hooksPath,
// the commondir / config.worktree redirects), `.claude`, a hooks file, the config file, the state
// dir with the cwd at $HOME. The host's `git status` afterwards runs nothing the command wrote.
import { spawn, spawnSync } from 'node:child_process';
import {
  appendFileSync,
  closeSync,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statfsSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeEach, describe, expect, it } from 'vitest';
import { createSandbox, type ConfiguredSandbox, type WrappedCommand } from './sandbox.js';
import { SandboxError } from './errors.js';
import { racyMs } from './policy.js';
import { gitConfigValue, MAX_LISTED } from './internal/project-mounts.js';

const linux = process.platform === 'linux';

interface Ran {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function run(command: WrappedCommand, onStart?: (pid: number) => void): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command.file, command.args, {
      cwd: command.cwd,
      env: command.env,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true, // its own process group, as a pty gives it
    });
    if (child.pid !== undefined) onStart?.(child.pid);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject).on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

const root = realpathSync(mkdtempSync('/var/tmp/aleph-protection-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const git = (cwd: string, ...args: string[]) =>
  spawnSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { cwd, encoding: 'utf8' });

const PWNED = join(root, 'pwned');
const EVIL = `touch ${PWNED}`;

interface Project {
  readonly dir: string;
  readonly home: string;
  readonly box: ConfiguredSandbox;
  /** Protected file contents before the command, to compare after. */
  readonly before: Map<string, string>;
}

let count = 0;

/** A git project inside a $HOME, with every protected path kind in it. */
function project(): Project {
  count += 1;
  const home = join(root, `home${count}`);
  const dir = home; // the cwd at $HOME: the state dir and the project under it
  mkdirSync(join(home, '.local', 'state', 'aleph'), { recursive: true });
  writeFileSync(join(home, '.local', 'state', 'aleph', 'token'), 'gateway-token-secret\n');
  expect(git(dir, 'init', '-q').status).toBe(0);
  mkdirSync(join(dir, 'scripts'));
  writeFileSync(join(dir, 'scripts', 'pre-commit'), '#!/bin/sh\nexit 0\n');
  symlinkSync('../../scripts/pre-commit', join(dir, '.git', 'hooks', 'pre-commit'));
  mkdirSync(join(dir, '.husky'));
  writeFileSync(join(dir, '.husky', 'pre-push'), '#!/bin/sh\nexit 0\n');
  expect(git(dir, 'config', 'core.hooksPath', '.husky').status).toBe(0);
  mkdirSync(join(dir, '.claude'));
  writeFileSync(join(dir, '.claude', 'settings.json'), '{}\n');
  mkdirSync(join(dir, 'hooks'));
  writeFileSync(join(dir, 'hooks', 'extra.json'), '{"hooks":{}}\n');
  mkdirSync(join(dir, 'conf'));
  writeFileSync(join(dir, 'conf', 'aleph.toml'), 'token = "config-token-secret"\n');
  writeFileSync(join(dir, 'a.txt'), 'a\n');
  expect(git(dir, 'add', 'a.txt').status).toBe(0);
  expect(git(dir, 'commit', '-qm', 'first', '--no-verify').status).toBe(0);
  const box = createSandbox(
    {
      network: 'off',
      denyRead: [join(home, '.local', 'state', 'aleph'), join(dir, 'conf', 'aleph.toml')],
      readOnly: [join(dir, 'hooks', 'extra.json'), join(dir, 'hooks', 'absent.json')],
    },
    { mode: 'required', home },
  );
  const before = new Map<string, string>();
  for (const file of protectedFiles(dir)) before.set(file, readFileSync(file, 'utf8'));
  return { dir, home, box, before };
}

const protectedFiles = (dir: string): string[] => [
  join(dir, '.git', 'config'),
  join(dir, 'scripts', 'pre-commit'),
  join(dir, '.husky', 'pre-push'),
  join(dir, '.claude', 'settings.json'),
  join(dir, 'hooks', 'extra.json'),
  join(dir, 'conf', 'aleph.toml'),
  join(dir, '.local', 'state', 'aleph', 'token'),
];

/** After the command: every protected file as it was, no redirect, nothing new, and git runs nothing. */
function expectIntact(p: Project): void {
  for (const [file, text] of p.before) expect(readFileSync(file, 'utf8'), file).toBe(text);
  const gitDir = readdirSync(join(p.dir, '.git'));
  expect(gitDir).not.toContain('commondir');
  expect(gitDir).not.toContain('config.worktree');
  expect(readdirSync(join(p.dir, '.git', 'hooks')).sort()).toContain('pre-commit');
  expect(readdirSync(join(p.dir, '.husky'))).toEqual(['pre-push']);
  expect(readdirSync(join(p.dir, 'hooks'))).toEqual(['extra.json']);
  expect(existsSync(join(p.dir, '.git', 'worktrees'))).toBe(false);
  expect(git(p.dir, 'status', '--short').status).toBe(0);
  expect(existsSync(PWNED)).toBe(false);
}

async function attack(p: Project, script: string): Promise<Ran> {
  const wrapped = p.box.wrap({ file: '/bin/sh', args: ['-c', script], cwd: p.dir, env: process.env });
  try {
    return await run(wrapped);
  } finally {
    wrapped.release();
  }
}

describe.skipIf(!linux)('protected paths keep their protection under every rename, link and bind', () => {
  beforeEach(() => rmSync(PWNED, { force: true }));

  it('renaming an ancestor away and putting a copy in its place fails: .git, .git/hooks, .claude, hooks/, conf/, .local', async () => {
    const p = project();
    const wrapped = p.box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          'mv .git .git.orig',
          'mv .git/hooks .git/hooks.orig',
          'mv .claude .claude.orig',
          'mv hooks hooks.orig',
          'mv conf conf.x',
          'mv .local .local.x',
          'mv .local/state .local/state.x',
          'mv scripts scripts.x',
          'mv .husky .husky.x',
          'rm -rf .git/hooks .claude hooks/extra.json',
          `cp -a .git g2 && printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> g2/config; mv g2 .git; cp -a g2/. .git/`,
          'cat conf.x/aleph.toml .local.x/state/aleph/token conf/aleph.toml .local/state/aleph/token',
          'echo done',
        ].join('; '),
      ],
      cwd: p.dir,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout).toBe('done\n');
    expect(ran.stderr).toMatch(/mv: cannot move '\.git' to '\.git\.orig': Device or resource busy/);
    expect(ran.stderr).not.toMatch(/secret/);
    expectIntact(p);
  });

  it('writes through links fail: a hooks link into the cwd, core.hooksPath, hard links of protected files', async () => {
    const p = project();
    const ran = await attack(
      p,
      [
        `echo '${EVIL}' >> .git/hooks/pre-commit`,
        `echo '${EVIL}' >> scripts/pre-commit`,
        `echo '${EVIL}' > .husky/pre-commit`,
        `echo '${EVIL}' >> .husky/pre-push`,
        'ln .git/config cfg && echo linked-config',
        'ln hooks/extra.json extra && echo linked-hooks',
        'ln conf/aleph.toml toml && cat toml',
        'ln -s ../../scripts/evil .git/hooks/post-checkout',
        'echo {} > hooks/absent.json',
        'echo done',
      ].join('; '),
    );
    expect(ran.stdout, ran.stderr).toBe('done\n');
    expect(ran.stderr).toMatch(/Invalid cross-device link/);
    expect(readdirSync(p.dir)).not.toContain('cfg');
    expect(existsSync(join(p.dir, 'hooks', 'absent.json'))).toBe(false);
    expectIntact(p);
  });

  it("with the cwd at $HOME, the home's dot entries are read-only and unrenamable; the rest stays writable", async () => {
    const p = project();
    writeFileSync(join(p.home, '.bashrc'), 'export A=1\n');
    writeFileSync(join(p.home, '.gitconfig'), '[user]\n\tname = t\n');
    mkdirSync(join(p.home, '.config', 'git'), { recursive: true });
    writeFileSync(join(p.home, '.config', 'git', 'config'), '');
    mkdirSync(join(p.home, '.cargo', 'bin'), { recursive: true });
    writeFileSync(join(p.home, '.cargo', 'bin', 'cargo'), '#!/bin/sh\n');
    linkSync(join(p.home, '.cargo', 'bin', 'cargo'), join(p.home, '.cargo', 'bin', 'rustc')); // as rustup does
    mkdirSync(join(p.home, 'dotfiles'));
    writeFileSync(join(p.home, 'dotfiles', 'profile'), 'export B=1\n');
    symlinkSync('dotfiles/profile', join(p.home, '.profile'));
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: p.home }); // a hard link in .cargo is no refusal
    const homeFiles = ['.bashrc', '.gitconfig', '.config/git/config', '.cargo/bin/cargo', 'dotfiles/profile'];
    const before = new Map(homeFiles.map((file) => [file, readFileSync(join(p.home, file), 'utf8')]));
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          `echo '${EVIL}' >> .bashrc`,
          `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> .gitconfig`,
          `echo '${EVIL}' >> .profile`,
          'mv .config .config.x',
          'rm -f .cargo/bin/cargo',
          'mv .gitconfig gitconfig.x',
          'mkdir -p project && echo ok > project/file && echo made > notes.txt && echo writable',
        ].join('; '),
      ],
      cwd: p.home,
      env: process.env,
    });
    let ran: Ran;
    try {
      ran = await run(wrapped);
    } finally {
      wrapped.release();
    }
    expect(ran.stdout, ran.stderr).toBe('writable\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(ran.stderr).toMatch(/Device or resource busy/);
    for (const [file, text] of before) expect(readFileSync(join(p.home, file), 'utf8'), file).toBe(text);
    expect(readFileSync(join(p.home, 'notes.txt'), 'utf8')).toBe('made\n');
    // The same set guards what confines in-process.
    const listed = box.protectedPaths(p.home).map(({ path }) => path);
    for (const name of ['.bashrc', '.gitconfig', '.config', '.cargo', 'dotfiles/profile'])
      expect(listed).toContain(join(p.home, name));
    // A cwd below the home folder leaves the home's dot entries alone (they are outside it, read-only).
    expect(box.protectedPaths(join(p.home, 'project')).map(({ path }) => path)).not.toContain(
      join(p.home, '.bashrc'),
    );
    expect(git(p.home, 'status', '--short').status).toBe(0);
    expect(existsSync(PWNED)).toBe(false);
  });

  it('a home link into the cwd made after the first command (the listings kept meanwhile) is kept read-only at the next', async () => {
    const p = project();
    const dotfiles = join(p.home, 'dotfiles');
    mkdirSync(join(dotfiles, 'git'), { recursive: true });
    mkdirSync(join(dotfiles, 'nvim'));
    writeFileSync(join(dotfiles, 'git', '.gitconfig'), '[user]\n\tname = t\n');
    writeFileSync(join(dotfiles, 'nvim', 'init.lua'), '-- mine\n');
    mkdirSync(join(p.home, '.config'));
    await sleep(2100); // the home's and .config's listings are old enough to be kept
    const write = [
      `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> git/.gitconfig`,
      `echo 'os.execute("${EVIL}")' >> nvim/init.lua`,
    ].join('; ');
    const command = () =>
      p.box.wrap({ file: '/bin/sh', args: ['-c', write], cwd: dotfiles, env: process.env });
    const first = command();
    await run(first).finally(() => first.release());
    symlinkSync('dotfiles/git/.gitconfig', join(p.home, '.gitconfig'));
    symlinkSync('../dotfiles/nvim', join(p.home, '.config', 'nvim'));
    const before = ['git/.gitconfig', 'nvim/init.lua'].map((file) =>
      readFileSync(join(dotfiles, file), 'utf8'),
    );
    const second = command();
    const ran = await run(second).finally(() => second.release());
    expect(ran.stderr).toMatch(/Read-only file system[\s\S]*Read-only file system/);
    expect(
      ['git/.gitconfig', 'nvim/init.lua'].map((file) => readFileSync(join(dotfiles, file), 'utf8')),
    ).toEqual(before);
  });

  it('however many protected paths the cwd holds (a file per mise environment), the ones listed after them are kept', async () => {
    count += 1;
    const home = join(root, `crowdedhome${count}`);
    const dotfiles = join(root, `crowded${count}`);
    mkdirSync(home, { recursive: true });
    mkdirSync(join(dotfiles, 'hooks'), { recursive: true });
    writeFileSync(join(dotfiles, 'bashrc'), 'export A=1\n');
    writeFileSync(join(dotfiles, 'hooks', 'extra.json'), '{}\n');
    symlinkSync(join(dotfiles, 'bashrc'), join(home, '.bashrc'));
    // What a command could make: each is protected, and they come before the home's links and the hooks files.
    for (let index = 0; index < 300; index += 1) writeFileSync(join(dotfiles, `mise.e${index}.toml`), '');
    const box = createSandbox(
      { network: 'off', readOnly: [join(dotfiles, 'hooks', 'extra.json')] },
      { mode: 'required', home },
    );
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        `echo '${EVIL}' >> bashrc; echo '{"hooks":{}}' > hooks/extra.json; echo x > other && echo writable`,
      ],
      cwd: dotfiles,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout, ran.stderr).toBe('writable\n');
    expect(readFileSync(join(dotfiles, 'bashrc'), 'utf8')).toBe('export A=1\n');
    expect(readFileSync(join(dotfiles, 'hooks', 'extra.json'), 'utf8')).toBe('{}\n');
  });

  it('with the cwd in a dotfiles repository the home links into, what the links lead to is read-only', async () => {
    const p = project();
    const dotfiles = join(p.home, 'dotfiles');
    mkdirSync(join(dotfiles, 'git'), { recursive: true });
    mkdirSync(join(dotfiles, 'nvim'));
    mkdirSync(join(dotfiles, 'claude'));
    writeFileSync(join(dotfiles, 'git', '.gitconfig'), '[user]\n\tname = t\n');
    writeFileSync(join(dotfiles, 'nvim', 'init.lua'), '-- mine\n');
    writeFileSync(join(dotfiles, 'claude', 'settings.json'), '{}\n');
    symlinkSync('dotfiles/git/.gitconfig', join(p.home, '.gitconfig')); // GNU stow's links
    mkdirSync(join(p.home, '.config'));
    symlinkSync('../dotfiles/nvim', join(p.home, '.config', 'nvim'));
    rmSync(join(p.home, '.claude', 'settings.json'));
    symlinkSync('../dotfiles/claude/settings.json', join(p.home, '.claude', 'settings.json'));
    const linked = ['git/.gitconfig', 'nvim/init.lua', 'claude/settings.json'];
    const before = new Map(linked.map((file) => [file, readFileSync(join(dotfiles, file), 'utf8')]));
    const wrapped = p.box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> git/.gitconfig`,
          `echo 'os.execute("${EVIL}")' >> nvim/init.lua`,
          'echo \'{"hooks":{}}\' > claude/settings.json',
          'mv git git.x',
          'echo made > notes.txt && echo writable',
        ].join('; '),
      ],
      cwd: dotfiles,
      env: process.env,
    });
    let ran: Ran;
    try {
      ran = await run(wrapped);
    } finally {
      wrapped.release();
    }
    expect(ran.stdout, ran.stderr).toBe('writable\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    for (const [file, text] of before) expect(readFileSync(join(dotfiles, file), 'utf8'), file).toBe(text);
    expect(readFileSync(join(dotfiles, 'notes.txt'), 'utf8')).toBe('made\n');
    const listed = p.box.protectedPaths(dotfiles).map(({ path }) => path);
    for (const file of ['git/.gitconfig', 'nvim', 'claude/settings.json'])
      expect(listed).toContain(join(dotfiles, file));
  });

  it("what .git/config includes or names as a program is read-only; an absent include can't be created", async () => {
    const p = project();
    mkdirSync(join(p.dir, 'tools'));
    writeFileSync(join(p.dir, 'tools', 'watch.sh'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    writeFileSync(join(p.dir, 'shared.gitconfig'), '[include]\n\tpath = nested.gitconfig\n');
    writeFileSync(join(p.dir, 'nested.gitconfig'), '[alias]\n\tlint = !tools/lint.sh --all\n');
    writeFileSync(join(p.dir, 'tools', 'lint.sh'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    // Scripts run through an interpreter, named in quotes, or on a continued line.
    writeFileSync(join(p.dir, 'clean.py'), 'pass\n');
    mkdirSync(join(p.dir, 'tools', 'conv dir'));
    writeFileSync(join(p.dir, 'tools', 'conv dir', 'conv.js'), '\n');
    writeFileSync(join(p.dir, 'tools', 'up.sh'), '#!/bin/sh\n');
    for (const [key, value] of [
      ['include.path', '../shared.gitconfig'],
      ['includeIf.gitdir:/.path', '../absent.gitconfig'],
      ['core.fsmonitor', 'sh tools/watch.sh'],
      ['filter.x.clean', 'python3 clean.py %f'],
      ['diff.conv.textconv', 'node "tools/conv dir/conv.js"'],
    ])
      expect(git(p.dir, 'config', '--add', key!, value!).status).toBe(0);
    appendFileSync(join(p.dir, '.git', 'config'), '[alias]\n\tup = !git fetch && \\\n  tools/up.sh\n');
    const files = [
      'shared.gitconfig',
      'nested.gitconfig',
      'tools/watch.sh',
      'tools/lint.sh',
      'clean.py',
      'tools/conv dir/conv.js',
      'tools/up.sh',
    ];
    const before = new Map(files.map((file) => [file, readFileSync(join(p.dir, file), 'utf8')]));
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: p.home });
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> shared.gitconfig`,
          `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> nested.gitconfig`,
          `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> absent.gitconfig`,
          `echo '${EVIL}' >> tools/watch.sh`,
          `echo '${EVIL}' >> tools/lint.sh`,
          `echo '${EVIL}' >> clean.py`,
          `echo '${EVIL}' >> 'tools/conv dir/conv.js'`,
          `echo '${EVIL}' >> tools/up.sh`,
          'mv tools tools.x',
          'echo ok > tools/other && echo writable',
        ].join('; '),
      ],
      cwd: p.dir,
      env: process.env,
    });
    let ran: Ran;
    try {
      ran = await run(wrapped);
    } finally {
      wrapped.release();
    }
    expect(ran.stdout, ran.stderr).toBe('writable\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    for (const [file, text] of before) expect(readFileSync(join(p.dir, file), 'utf8'), file).toBe(text);
    expect(existsSync(join(p.dir, 'absent.gitconfig'))).toBe(false); // its stand-in released
    expect(git(p.dir, 'status', '--short').status).toBe(0);
    expect(existsSync(PWNED)).toBe(false);
  });

  it('bind mounts and nested user namespaces are refused', async () => {
    const p = project();
    const ran = await attack(
      p,
      'mkdir -p g2/hooks; mount --bind g2 .git; unshare -Urm sh -c "mount --bind g2 .git && echo remounted"; ' +
        'unshare -m true && echo unshared; echo done',
    );
    expect(ran.stdout).toBe('done\n');
    expect(ran.stderr).toMatch(/unshare failed/);
    expectIntact(p);
  });

  it('a broken .git cannot make the cwd a git dir: HEAD is kept, so the config written beside objects/ and refs/ is never read', async () => {
    const p = project();
    // What git takes for a git dir when .git is not one: a valid HEAD, objects/ and refs/, a config.
    const ran = await attack(
      p,
      [
        'echo garbage > .git/HEAD',
        'git init -q --bare /tmp/bare && cp -r /tmp/bare/objects /tmp/bare/refs .',
        `printf '[core]\\n\\trepositoryformatversion = 0\\n\\tbare = false\\n\\tworktree = %s\\n\\tfsmonitor = "${EVIL}"\\n' "$PWD" > config`,
        "printf 'ref: refs/heads/main\\n' > HEAD",
        'echo done',
      ].join('; '),
    );
    expect(ran.stdout).toBe('done\n');
    expect(ran.stderr).toMatch(/HEAD: Is a directory|HEAD: Read-only file system/);
    expect(existsSync(join(p.dir, 'HEAD'))).toBe(false); // the stand-in gone with the command
    // The user's git, in the folder the run left: no git dir there, nothing of the model's run.
    const status = git(p.dir, 'status', '--short');
    expect(status.stderr).toMatch(/not a git repository/);
    expect(existsSync(PWNED)).toBe(false);
  });

  it('git redirects (commondir, config.worktree, a worktree or module git dir) cannot be written, and git works inside', async () => {
    const p = project();
    const wrapped = p.box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        `cp -a .git evil; printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> evil/config; echo ../evil > .git/commondir; ` +
          `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' > .git/config.worktree; mkdir -p .git/worktrees/x .git/modules/m; ` +
          'cat .git/commondir; echo b > b.txt && git add b.txt && git -c user.name=t -c user.email=t@t commit -qm second --no-verify && echo committed',
      ],
      cwd: p.dir,
      env: process.env,
    });
    const ran = await run(wrapped);
    // During the command the host's git works too: commondir is "." (the git dir itself).
    expect(git(p.dir, 'status', '--short').status).toBe(0);
    wrapped.release();
    expect(ran.stdout).toBe('.\ncommitted\n');
    expect(ran.stderr).toMatch(/commondir: Read-only file system/);
    expect(git(p.dir, 'log', '--format=%s').stdout).toBe('second\nfirst\n');
    rmSync(join(p.dir, 'evil'), { recursive: true });
    expectIntact(p);
  });

  it('a .git file naming a git dir inside the cwd (--separate-git-dir): that git dir is kept as .git is', async () => {
    count += 1;
    const dir = join(root, `separate${count}`);
    mkdirSync(dir, { recursive: true });
    expect(git(dir, 'init', '-q', `--separate-git-dir=${join(dir, '.gitdir')}`, '.').status).toBe(0);
    const before = readFileSync(join(dir, '.gitdir', 'config'), 'utf8');
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          `printf '#!/bin/sh\\n${EVIL}\\n' > .gitdir/hooks/pre-commit`,
          `printf '[core]\\n\\tfsmonitor = ${EVIL}\\n' >> .gitdir/config`,
          'mv .gitdir .gitdir-x',
          'echo x > x.txt && git add x.txt && echo added',
        ].join('; '),
      ],
      cwd: dir,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout, ran.stderr).toBe('added\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(existsSync(join(dir, '.gitdir', 'hooks', 'pre-commit'))).toBe(false);
    expect(readFileSync(join(dir, '.gitdir', 'config'), 'utf8')).toBe(before);
    expect(git(dir, 'status', '--short').status).toBe(0);
    expect(existsSync(PWNED)).toBe(false);
  });

  it('the redirects are gone after a SIGKILL of the whole group, once released', async () => {
    const p = project();
    const wrapped = p.box.wrap({
      file: '/bin/sh',
      args: ['-c', 'echo ../evil > .git/commondir 2>/dev/null; echo started; exec sleep 600'],
      cwd: p.dir,
      env: process.env,
    });
    let pid = 0;
    const ended = run(wrapped, (started) => (pid = started));
    await waitFor(() => existsSync(join(p.dir, '.git', 'commondir')));
    await waitFor(() => pid !== 0);
    expect(readFileSync(join(p.dir, '.git', 'commondir'), 'utf8')).toBe('.\n');
    process.kill(-pid, 'SIGKILL');
    await ended;
    wrapped.release();
    wrapped.release(); // idempotent
    expectIntact(p);
  });

  it('a protected file with another hard link is refused, naming it', () => {
    const p = project();
    linkSync(join(p.dir, '.git', 'config'), join(p.dir, 'config-copy'));
    let error: unknown;
    try {
      p.box.wrap({ file: 'true', args: [], cwd: p.dir, env: {} });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(SandboxError);
    expect(error).toMatchObject({ code: 'path_linked' });
    expect((error as Error).message).toMatch(/\.git\/config is kept read-only but has 2 hard links/);
    expect(readdirSync(join(p.dir, '.git'))).not.toContain('commondir'); // nothing left by the refusal
  });

  it("a cwd of more entries than are read at a command's start is refused, naming it; one within the bound is not", () => {
    const p = project();
    const crowded = join(p.dir, 'crowded');
    mkdirSync(crowded);
    for (let i = 0; i < MAX_LISTED; i++) closeSync(openSync(join(crowded, `f${i}`), 'w'));
    p.box.wrap({ file: 'true', args: [], cwd: crowded, env: {} }).release(); // exactly the bound: read whole
    closeSync(openSync(join(crowded, 'one-more'), 'w'));
    let error: unknown;
    try {
      p.box.wrap({ file: 'true', args: [], cwd: crowded, env: {} });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(SandboxError);
    expect(error).toMatchObject({ code: 'cwd_crowded' });
    expect((error as Error).message).toContain(`${crowded} holds more than 100,000 entries`);
    rmSync(crowded, { recursive: true, force: true });
  }, 180_000);

  it('lists the protected set by identity, a hard link of a protected file included', () => {
    const p = project();
    const set = p.box.protectedPaths(p.dir);
    const config = set.find(({ path }) => path === join(p.dir, '.git', 'config'));
    expect(config).toMatchObject({ access: 'read-only', kind: 'file' });
    expect(set.find(({ path }) => path === join(p.dir, 'scripts', 'pre-commit'))?.access).toBe('read-only');
    expect(set.find(({ path }) => path === join(p.home, '.local', 'state', 'aleph'))?.access).toBe('denied');
    linkSync(join(p.dir, '.git', 'config'), join(p.dir, 'config-link'));
    const stat = spawnSync('stat', ['-c', '%d %i', join(p.dir, 'config-link')], { encoding: 'utf8' });
    const [dev, ino] = stat.stdout.trim().split(' ').map(Number);
    expect(set.some((entry) => entry.dev === dev && entry.ino === ino && entry.access === 'read-only')).toBe(
      true,
    );
  });

  it('a kept series: stand-ins stay from one command to the next, protected in each, and go when it ends', async () => {
    const p = project();
    const end = p.box.keep(p.dir);
    const write =
      'echo ../evil > .git/commondir; echo x > .git/config.worktree; mkdir .git/worktrees/w; echo done';
    for (let command = 0; command < 2; command += 1) {
      const ran = await attack(p, write);
      expect(ran.stdout).toBe('done\n');
      expect(ran.stderr).toMatch(/commondir: Read-only file system/);
      expect(readFileSync(join(p.dir, '.git', 'commondir'), 'utf8')).toBe('.\n'); // still there, unchanged
    }
    end();
    end(); // idempotent
    expectIntact(p);
  });

  it('an empty .git stand-in another command holds is no git dir: kept read-only, nothing made in it', async () => {
    count += 1;
    const dir = join(root, `plain${count}`);
    mkdirSync(dir);
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const end = box.keep(dir);
    const first = box.wrap({ file: 'true', args: [], cwd: dir, env: {} });
    first.release();
    expect(readdirSync(dir).sort()).toEqual(['.claude', '.git', 'HEAD']); // kept: empty stand-ins
    const second = box.wrap({
      file: '/bin/sh',
      args: ['-c', 'echo ref > .git/HEAD; ls -A .git; echo done'],
      cwd: dir,
      env: {},
    });
    const ran = await run(second);
    second.release();
    expect(ran.stdout).toBe('done\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(readdirSync(join(dir, '.git'))).toEqual([]);
    end();
    expect(readdirSync(dir)).toEqual([]);
  });

  it('a kept stand-in given content from outside, once its emptiness was kept, is protected as what it holds', async () => {
    count += 1;
    const dir = join(root, `filled${count}`);
    mkdirSync(dir);
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const end = box.keep(dir);
    const quiet = (): void => box.wrap({ file: 'true', args: [], cwd: dir, env: {} }).release();
    quiet();
    await sleep(2100); // the stand-ins' listings are kept from the next read on, by their change times
    quiet();
    quiet();
    // From outside (the user, a tool): a hook script in the cwd, linked from .claude.
    writeFileSync(join(dir, 'hook.sh'), '#!/bin/sh\nexit 0\n');
    symlinkSync('../hook.sh', join(dir, '.claude', 'settings.json'));
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: ['-c', 'echo "touch pwned" >> hook.sh; echo done'],
      cwd: dir,
      env: {},
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout).toBe('done\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(readFileSync(join(dir, 'hook.sh'), 'utf8')).toBe('#!/bin/sh\nexit 0\n');
    end();
    expect(readdirSync(join(dir, '.claude'))).toEqual(['settings.json']); // not a stand-in: left
  });

  it('a folder is kept once unchanged for 100 ms where its change time has nanoseconds, else 2 s', () => {
    const { dev } = statSync(root);
    // Whole seconds (ext4's small inodes, ext3): a change within the same second leaves the time.
    expect(racyMs(root, { dev, ctimeMs: 1_700_000_000_000 })).toBe(2000);
    const fine = [0xef53, 0x01021994].includes(statfsSync(root).type); // ext4, tmpfs
    if (fine) expect(racyMs(root, { dev, ctimeMs: 1_700_000_000_123.456 })).toBe(100);
  });

  it('a file made in a cwd whose listing was kept is protected from the next command on', async () => {
    count += 1;
    const dir = join(root, `listed${count}`);
    mkdirSync(dir);
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const end = box.keep(dir);
    box.wrap({ file: 'true', args: [], cwd: dir, env: {} }).release();
    await sleep(300); // past the window in which a changed folder is read again at each command
    box.wrap({ file: 'true', args: [], cwd: dir, env: {} }).release(); // the cwd's listing is kept now
    const made = box.wrap({ file: '/bin/sh', args: ['-c', 'echo {} > .mcp.json'], cwd: dir, env: {} });
    expect((await run(made)).code).toBe(0);
    made.release();
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: ['-c', 'echo \'{"mcpServers":{}}\' > .mcp.json; echo done'],
      cwd: dir,
      env: {},
    });
    const ran = await run(wrapped);
    wrapped.release();
    end();
    expect(ran.stdout).toBe('done\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(readFileSync(join(dir, '.mcp.json'), 'utf8')).toBe('{}\n');
  });
});

describe.skipIf(!linux)('what runs later or is shared through hard links stays unwritten', () => {
  it("git hook managers' files and pnpm's virtual store are read-only; the rest of node_modules stays writable", async () => {
    count += 1;
    const dir = join(root, `managers${count}`);
    const store = join(root, `store${count}`);
    mkdirSync(join(dir, '.husky', '_'), { recursive: true });
    expect(git(dir, 'init', '-q').status).toBe(0);
    expect(git(dir, 'config', 'core.hooksPath', '.husky/_').status).toBe(0);
    writeFileSync(join(dir, '.husky', '_', 'h'), '#!/bin/sh\n. "$(dirname "$0")/../$(basename "$0")"\n');
    writeFileSync(join(dir, '.husky', 'pre-commit'), 'npm test\n');
    writeFileSync(join(dir, '.pre-commit-config.yaml'), 'repos: []\n');
    writeFileSync(join(dir, 'lefthook.yml'), 'pre-commit:\n  commands: {}\n');
    // pnpm's layout: a package file in the virtual store is a hard link of the user's store's copy.
    mkdirSync(join(store, 'files'), { recursive: true });
    writeFileSync(join(store, 'files', 'index.js'), 'module.exports = 1;\n');
    mkdirSync(join(dir, 'node_modules', '.pnpm', 'zod@4.0.0', 'node_modules', 'zod'), { recursive: true });
    const linked = join(dir, 'node_modules', '.pnpm', 'zod@4.0.0', 'node_modules', 'zod', 'index.js');
    linkSync(join(store, 'files', 'index.js'), linked);
    mkdirSync(join(dir, 'node_modules', '.cache'));
    const files = [
      join(dir, '.husky', 'pre-commit'),
      join(dir, '.pre-commit-config.yaml'),
      join(dir, 'lefthook.yml'),
      join(store, 'files', 'index.js'),
    ];
    const before = files.map((file) => readFileSync(file, 'utf8'));
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          `echo '${EVIL}' >> .husky/pre-commit`,
          `echo '${EVIL}' > .husky/post-merge`,
          `echo '  - repo: local' >> .pre-commit-config.yaml`,
          `echo '${EVIL}' >> lefthook.yml`,
          `echo '${EVIL}' >> node_modules/.pnpm/zod@4.0.0/node_modules/zod/index.js`,
          'ln node_modules/.pnpm/zod@4.0.0/node_modules/zod/index.js stolen',
          'mv node_modules/.pnpm node_modules/.pnpm-x',
          'mv .husky .husky-x',
          'echo cached > node_modules/.cache/x && echo wrote-cache',
        ].join('; '),
      ],
      cwd: dir,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout, ran.stderr).toBe('wrote-cache\n');
    expect(files.map((file) => readFileSync(file, 'utf8'))).toEqual(before);
    expect(readdirSync(join(dir, '.husky')).sort()).toEqual(['_', 'pre-commit']);
    expect(existsSync(join(dir, 'stolen'))).toBe(false);
    expect(readFileSync(join(dir, 'node_modules', '.cache', 'x'), 'utf8')).toBe('cached\n');
    expect(existsSync(PWNED)).toBe(false);
  });
});

describe.skipIf(!linux)("other tools' project config that runs later", () => {
  it("mise's config files, Yarn's .yarnrc.yml, releases and plugins, and editors' workspace tasks and settings are read-only when present; no file stand-in shows in a project", async () => {
    count += 1;
    const dir = join(root, `tools${count}`);
    mkdirSync(join(dir, '.config', 'mise', 'conf.d'), { recursive: true });
    mkdirSync(join(dir, '.yarn', 'releases'), { recursive: true });
    mkdirSync(join(dir, '.yarn', 'plugins'), { recursive: true });
    mkdirSync(join(dir, 'conf'));
    writeFileSync(join(dir, 'mise.toml'), '[env]\nFOO = "bar"\n');
    writeFileSync(join(dir, 'mise.ci.toml'), '[env]\nCI = "1"\n');
    writeFileSync(join(dir, '.config', 'mise', 'conf.d', 'a.toml'), '[tools]\n');
    writeFileSync(join(dir, 'conf', 'mise-local.toml'), '[env]\n');
    symlinkSync('conf/mise-local.toml', join(dir, '.mise.local.toml'));
    writeFileSync(join(dir, '.yarnrc.yml'), 'yarnPath: .yarn/releases/yarn-4.cjs\n');
    writeFileSync(join(dir, '.yarn', 'releases', 'yarn-4.cjs'), '// yarn\n');
    writeFileSync(join(dir, '.yarn', 'plugins', 'plugin.cjs'), '// plugin\n');
    mkdirSync(join(dir, '.vscode'));
    writeFileSync(join(dir, '.vscode', 'tasks.json'), '{"version":"2.0.0","tasks":[]}\n');
    writeFileSync(join(dir, '.vscode', 'extensions.json'), '{}\n');
    const files = [
      join(dir, '.vscode', 'tasks.json'),
      join(dir, 'mise.toml'),
      join(dir, 'mise.ci.toml'),
      join(dir, '.config', 'mise', 'conf.d', 'a.toml'),
      join(dir, 'conf', 'mise-local.toml'),
      join(dir, '.yarnrc.yml'),
      join(dir, '.yarn', 'releases', 'yarn-4.cjs'),
      join(dir, '.yarn', 'plugins', 'plugin.cjs'),
    ];
    const before = files.map((file) => readFileSync(file, 'utf8'));
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const hook = `[hooks]\\nenter = "${EVIL}"\\n`;
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          `printf '${hook}' >> mise.toml`,
          `printf '${hook}' >> mise.ci.toml`,
          `printf '${hook}' >> .config/mise/conf.d/a.toml`,
          `printf '${hook}' > .config/mise/conf.d/b.toml`,
          `printf '${hook}' >> .mise.local.toml`,
          `printf '${hook}' >> conf/mise-local.toml`,
          "echo 'yarnPath: evil.cjs' > .yarnrc.yml",
          `echo '${EVIL}' >> .yarn/releases/yarn-4.cjs`,
          `echo '${EVIL}' > .yarn/plugins/evil.cjs`,
          `echo '{"tasks":[{"label":"x","command":"${EVIL}","runOptions":{"runOn":"folderOpen"}}]}' > .vscode/tasks.json`,
          'mv .vscode .vscode-x',
          'mv .yarn .yarn-x',
          'mv .config .config-x',
          'echo data > .tool-versions && echo data > .vscode/extensions.json && echo wrote-data',
        ].join('; '),
      ],
      cwd: dir,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout, ran.stderr).toBe('wrote-data\n');
    expect(files.map((file) => readFileSync(file, 'utf8'))).toEqual(before);
    expect(readdirSync(join(dir, '.config', 'mise', 'conf.d'))).toEqual(['a.toml']);
    expect(readdirSync(join(dir, '.yarn', 'plugins'))).toEqual(['plugin.cjs']);

    // A repository without them: nothing the command sees in it that git would stage (a model's
    // `git add -A` committed an empty stand-in into every project).
    const bare = join(root, `bare${count}`);
    mkdirSync(bare);
    spawnSync('git', ['init', '-q'], { cwd: bare });
    const second = box.wrap({
      file: '/bin/sh',
      args: ['-c', 'git add -A && git status --porcelain; echo ok'],
      cwd: bare,
      env: process.env,
    });
    const made = await run(second);
    second.release();
    expect(made.stdout, made.stderr).toBe('ok\n');
    expect(existsSync(PWNED)).toBe(false);
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe.skipIf(!linux)('project MCP servers and dev containers other tools start as the user', () => {
  it('.mcp.json, .vscode/mcp.json, .cursor/mcp.json, .devcontainer/ and .devcontainer.json are read-only when present; absent ones get no stand-in', async () => {
    count += 1;
    const dir = join(root, `started${count}`);
    for (const folder of ['.vscode', '.cursor', join('.devcontainer', 'gpu')])
      mkdirSync(join(dir, folder), { recursive: true });
    const servers = '{"mcpServers":{"db":{"command":"db-mcp"}}}\n';
    const container = '{"image":"node:22"}\n';
    const files = {
      '.mcp.json': servers,
      '.vscode/mcp.json': servers,
      '.cursor/mcp.json': servers,
      '.devcontainer/devcontainer.json': container,
      '.devcontainer/gpu/devcontainer.json': container,
      '.devcontainer.json': container,
    };
    for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const evilServer = `{"mcpServers":{"db":{"command":"sh","args":["-c","${EVIL}"]}}}`;
    const evilContainer = `{"image":"node:22","initializeCommand":"${EVIL}"}`;
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          ...Object.keys(files).map(
            (file) => `echo '${file.includes('devcontainer') ? evilContainer : evilServer}' > ${file}`,
          ),
          `echo '${evilContainer}' > .devcontainer/other.json`,
          'mv .devcontainer .devcontainer-x',
          'echo x > other.json && echo writable',
        ].join('; '),
      ],
      cwd: dir,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout, ran.stderr).toBe('writable\n');
    for (const [file, text] of Object.entries(files))
      expect(readFileSync(join(dir, file), 'utf8'), file).toBe(text);
    expect(readdirSync(join(dir, '.devcontainer')).sort()).toEqual(['devcontainer.json', 'gpu']);
    // Absent: no stand-in shows in the project while a command runs.
    const empty = join(root, `nothing${count}`);
    mkdirSync(empty);
    const second = box.wrap({ file: '/bin/sh', args: ['-c', 'ls -A'], cwd: empty, env: process.env });
    const listed = await run(second);
    second.release();
    expect(listed.stdout.split('\n')).not.toContain('.mcp.json');
    expect(listed.stdout.split('\n')).not.toContain('.devcontainer');
  });
});

describe.skipIf(!linux)("other version control systems' repository config", () => {
  it('.hg/hgrc (and what it %includes), .sl/config and .jj/repo/config.toml are read-only, their folders cannot be swapped; the rest stays writable', async () => {
    count += 1;
    const dir = join(root, `vcs${count}`);
    mkdirSync(join(dir, '.hg'), { recursive: true });
    writeFileSync(join(dir, '.hg', 'hgrc'), '[ui]\nusername = u\n%include ../hg-extra.rc\n');
    writeFileSync(join(dir, 'hg-extra.rc'), '[extensions]\n');
    writeFileSync(join(dir, '.hg', 'requires'), 'store\n');
    mkdirSync(join(dir, '.sl'));
    writeFileSync(join(dir, '.sl', 'config'), '[ui]\n');
    mkdirSync(join(dir, '.jj', 'repo', 'op_store'), { recursive: true }); // config.toml absent
    const files = [join(dir, '.hg', 'hgrc'), join(dir, 'hg-extra.rc'), join(dir, '.sl', 'config')];
    const before = files.map((file) => readFileSync(file, 'utf8'));
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const hook = `[hooks]\\npre-status = ${EVIL}\\n`;
    const wrapped = box.wrap({
      file: '/bin/sh',
      args: [
        '-c',
        [
          `printf '${hook}' >> .hg/hgrc`,
          `printf '${hook}' >> hg-extra.rc`,
          `printf '${hook}' >> .sl/config`,
          `printf '[ui]\\npager = "${EVIL}"\\n' > .jj/repo/config.toml`,
          'mv .hg .hg-x',
          'mv .jj .jj-x',
          'echo op > .jj/repo/op_store/1 && echo wrote-op',
          'echo r >> .hg/requires && echo wrote-requires',
        ].join('; '),
      ],
      cwd: dir,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout, ran.stderr).toBe('wrote-op\nwrote-requires\n');
    expect(files.map((file) => readFileSync(file, 'utf8'))).toEqual(before);
    expect(existsSync(join(dir, '.jj', 'repo', 'config.toml'))).toBe(false); // its stand-in is gone
    expect(readdirSync(dir).sort()).toEqual(['.hg', '.jj', '.sl', 'hg-extra.rc']);
  });

  it('an absent repository folder gets no stand-in: nothing appears in the project', async () => {
    count += 1;
    const dir = join(root, `novcs${count}`);
    mkdirSync(dir, { recursive: true });
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'ls -A'], cwd: dir, env: process.env });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout).not.toMatch(/\.hg|\.jj|\.sl/);
  });
});

describe('git config values as git reads them', () => {
  it('quotes, escapes and comments', () => {
    expect(gitConfigValue('.githooks # team hooks')).toBe('.githooks');
    expect(gitConfigValue('.githooks;x')).toBe('.githooks');
    expect(gitConfigValue('"hooks # not a comment"  ; one')).toBe('hooks # not a comment');
    expect(gitConfigValue('a\\"b\\\\c  d  ')).toBe('a"b\\c  d');
  });
});

describe.skipIf(!linux)('core.hooksPath wherever git reads it', () => {
  it("a relative hooksPath from the user's ~/.gitconfig, and one with a comment in .git/config, are read-only", async () => {
    count += 1;
    const home = join(root, `githome${count}`);
    const [globalProject, commented] = ['global', 'commented'].map((name) => join(root, `${name}${count}`));
    mkdirSync(home, { recursive: true });
    writeFileSync(join(home, '.gitconfig'), '[core]\n\thooksPath = .githooks\n');
    for (const dir of [globalProject!, commented!]) {
      mkdirSync(join(dir, '.githooks'), { recursive: true });
      writeFileSync(join(dir, '.githooks', 'pre-commit'), '#!/bin/sh\nexit 0\n');
      expect(git(dir, 'init', '-q').status).toBe(0);
    }
    mkdirSync(join(commented!, '.team-hooks'));
    writeFileSync(join(commented!, '.team-hooks', 'pre-commit'), '#!/bin/sh\nexit 0\n');
    appendFileSync(join(commented!, '.git', 'config'), '[core]\n\thooksPath = .team-hooks # team hooks\n');
    const box = createSandbox({ network: 'off' }, { mode: 'required', home });
    for (const [dir, hooks] of [
      [globalProject!, '.githooks'],
      [commented!, '.team-hooks'],
    ] as const) {
      const wrapped = box.wrap({
        file: '/bin/sh',
        args: ['-c', `echo '${EVIL}' >> ${hooks}/pre-commit; echo x > ${hooks}/post-commit; echo done`],
        cwd: dir,
        env: process.env,
      });
      const ran = await run(wrapped);
      wrapped.release();
      expect(ran.stdout).toBe('done\n');
      expect(readFileSync(join(dir, hooks, 'pre-commit'), 'utf8'), dir).toBe('#!/bin/sh\nexit 0\n');
      expect(readdirSync(join(dir, hooks))).toEqual(['pre-commit']);
    }
  });
  it("in a linked worktree or a subfolder of a work tree, what the repository's config names there is read-only", async () => {
    count += 1;
    const main = join(root, `repo${count}`);
    mkdirSync(join(main, '.githooks'), { recursive: true });
    mkdirSync(join(main, 'tools'));
    writeFileSync(join(main, '.githooks', 'pre-commit'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    writeFileSync(join(main, 'tools', 'lint.sh'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    expect(git(main, 'init', '-q').status).toBe(0);
    expect(git(main, 'config', 'core.hooksPath', '.githooks').status).toBe(0);
    expect(git(main, 'config', 'alias.lint', '!tools/lint.sh').status).toBe(0);
    expect(git(main, 'add', '-A').status).toBe(0);
    expect(git(main, 'commit', '-qm', 'first').status).toBe(0);
    const worktree = join(root, `worktree${count}`);
    expect(git(main, 'worktree', 'add', '-q', worktree).status).toBe(0);
    const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(root, 'nohome') });
    for (const [cwd, hooks, lint] of [
      [worktree, '.githooks', 'tools/lint.sh'],
      [join(main, 'tools'), undefined, 'lint.sh'],
    ] as const) {
      const wrapped = box.wrap({
        file: '/bin/sh',
        args: [
          '-c',
          [
            ...(hooks === undefined
              ? []
              : [`echo '${EVIL}' >> ${hooks}/pre-commit`, `echo x > ${hooks}/post-commit`]),
            `echo '${EVIL}' >> ${lint}`,
            'echo x > other.txt && echo writable',
          ].join('; '),
        ],
        cwd,
        env: process.env,
      });
      const ran = await run(wrapped);
      wrapped.release();
      expect(ran.stdout, ran.stderr).toBe('writable\n');
      expect(ran.stderr).toMatch(/Read-only file system/);
      rmSync(join(cwd, 'other.txt'));
    }
    for (const dir of [main, worktree]) {
      expect(readFileSync(join(dir, '.githooks', 'pre-commit'), 'utf8'), dir).toBe('#!/bin/sh\nexit 0\n');
      expect(readFileSync(join(dir, 'tools', 'lint.sh'), 'utf8'), dir).toBe('#!/bin/sh\nexit 0\n');
    }
    expect(existsSync(join(worktree, '.githooks', 'post-commit'))).toBe(false);
    expect(git(worktree, 'commit', '-q', '--allow-empty', '-m', 'second').status).toBe(0);
    expect(git(worktree, 'lint').status).toBe(0);
    expect(existsSync(PWNED)).toBe(false);
  });
});

describe.skipIf(!linux)('files read to find the protected set', () => {
  it('a FIFO where a .git file, a git or Mercurial config or a commondir is read blocks nothing: read as absent', () => {
    count += 1;
    // What a command in the folder above could leave: FIFOs a later run's checks would open.
    const project = join(root, `fifos${count}`);
    mkdirSync(project, { recursive: true });
    expect(git(project, 'init', '-q').status).toBe(0);
    mkdirSync(join(project, 'nested'));
    expect(git(join(project, 'nested'), 'init', '-q').status).toBe(0);
    expect(git(join(project, 'nested'), 'commit', '-q', '--allow-empty', '-m', 'n').status).toBe(0);
    expect(git(project, 'add', 'nested').status).toBe(0);
    mkdirSync(join(project, 'git-fifo', 'deeper'), { recursive: true });
    mkdirSync(join(project, 'hg', '.hg'), { recursive: true });
    mkdirSync(join(project, 'pointer', 'gitdir'), { recursive: true });
    writeFileSync(join(project, 'pointer', '.git'), 'gitdir: gitdir\n');
    for (const fifo of [
      'git-fifo/.git',
      'hg/.hg/hgrc',
      'pointer/gitdir/config',
      'pointer/gitdir/commondir',
      'nested/.git/commondir',
    ])
      spawnSync('mkfifo', [join(project, fifo)]);
    // In a child: a blocking open fails the test (a timeout) instead of hanging it.
    const script = `import { createSandbox } from ${JSON.stringify(join(import.meta.dirname, 'sandbox.ts'))};
      import { embeddedRepositories, gitDirOf } from ${JSON.stringify(join(import.meta.dirname, 'embedded-repositories.ts'))};
      const box = createSandbox({ network: 'off' }, { mode: 'required', home: ${JSON.stringify(join(root, 'nohome'))} });
      for (const dir of ['git-fifo', 'git-fifo/deeper', 'hg', 'pointer']) {
        const cwd = ${JSON.stringify(project)} + '/' + dir;
        box.wrap({ file: '/bin/true', args: [], cwd, env: {} }).release();
        box.protectedPaths(cwd);
        gitDirOf(cwd);
      }
      const nested = await embeddedRepositories(${JSON.stringify(project)});
      console.log(JSON.stringify(nested?.repositories.map(({ path, programs }) => [path, programs])));`;
    const ran = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      timeout: 60_000, // tsx starts slowly under load
      encoding: 'utf8',
      cwd: join(import.meta.dirname, '..'),
    });
    expect(ran.error?.message, ran.stderr).toBeUndefined();
    expect(ran.stdout.trim(), ran.stderr).toBe('[["nested",[]]]');
  }, 90_000); // the child's own bound, and tsx's start under load

  it('a config that includes itself many times is read once: what it includes is kept, at a bounded cost', () => {
    count += 1;
    const project = join(root, `includes${count}`);
    mkdirSync(join(project, 'sub', 'hg', '.hg'), { recursive: true });
    expect(git(join(project, 'sub'), 'init', '-q').status).toBe(0);
    // Left by a command in the folder above: 40 includes of itself, 40 to the power of the depth followed.
    const self = '[include]\n\tpath = config\n'.repeat(40);
    appendFileSync(join(project, 'sub', '.git', 'config'), `${self}[include]\n\tpath = ../kept.gitconfig\n`);
    writeFileSync(join(project, 'sub', 'kept.gitconfig'), '[user]\n');
    writeFileSync(
      join(project, 'sub', 'hg', '.hg', 'hgrc'),
      `${'%include hgrc\n'.repeat(40)}%include ../kept.rc\n`,
    );
    writeFileSync(join(project, 'sub', 'hg', 'kept.rc'), '[ui]\n');
    // In a child: a run that does not end fails the test (a timeout) instead of holding it.
    const script = `import { spawnSync } from 'node:child_process';
      import { createSandbox } from ${JSON.stringify(join(import.meta.dirname, 'sandbox.ts'))};
      const box = createSandbox({ network: 'off' }, { mode: 'required', home: ${JSON.stringify(join(root, 'nohome'))} });
      for (const [dir, file] of [['sub', 'kept.gitconfig'], ['sub/hg', 'kept.rc']]) {
        const w = box.wrap({ file: '/bin/sh', args: ['-c', 'echo x >> ' + file + ' || echo kept'], cwd: ${JSON.stringify(project)} + '/' + dir, env: process.env });
        const ran = spawnSync(w.file, w.args, { cwd: w.cwd, env: w.env, encoding: 'utf8' });
        w.release();
        process.stdout.write(ran.stdout);
      }`;
    const ran = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      timeout: 60_000, // tsx starts slowly under load
      encoding: 'utf8',
      cwd: join(import.meta.dirname, '..'),
    });
    expect(ran.error?.message, ran.stderr).toBeUndefined();
    expect(ran.stdout, ran.stderr).toBe('kept\nkept\n');
    expect(readFileSync(join(project, 'sub', 'kept.gitconfig'), 'utf8')).toBe('[user]\n');
    expect(readFileSync(join(project, 'sub', 'hg', 'kept.rc'), 'utf8')).toBe('[ui]\n');
  }, 90_000); // the child's own bound, and tsx's start under load
});
