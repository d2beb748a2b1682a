// The escape suite: a scripted hostile model (the fake provider, real OpenAI-compatible wire) drives
// a real server whose shell tool runs under real bubblewrap, and tries every rename, copy, hard
// link, symlink and bind trick against each protected path kind — `.git` (config, hooks, a hook's
// symlink target, the commondir redirect), `.claude`, a `[hooks] files` entry, the config file, the
// state dir with the cwd at $HOME (and the home's `.gitconfig` and `.bashrc`), a `deny_read` entry —
// through its shell and its file tools, then plants a symlinked index in the console's folder for
// an unauthenticated read, then the datagram route, a nested user namespace, and the limits (a fork
// bomb, a 10 GiB allocation, a file past the size limit). Nothing protected may be changed or read,
// and the user's next `git status` and `git commit` (unconfined) run nothing the model wrote. All
// of it twice: the server run as root, and as an unprivileged user (`nobody` when this process is
// root) who owns the project, the config and the state dir. The probes live in /var/tmp, which the
// sandbox's private /tmp does not hide.
import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join, resolve } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { createSandbox } from '@aleph/sandbox';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import { MAIN, startServerProcess, type ServerProcess } from '../test/server-process.js';

/** What a hook or a git setting planted by the model would run: it makes the variant's `pwned` file. */
let evil = 'true';

/**
 * The prompt is a JSON array of steps: `read:<path>` is a read_file call, `write:<path>` a
 * write_file of a script running `evil`, anything else a shell command.
 */
const hostileModel: Brain = (conversation) => {
  const steps = JSON.parse(conversation.find((turn) => turn.role === 'user')?.text ?? '[]') as string[];
  const next = steps[conversation.filter((turn) => turn.role === 'tool').length];
  if (next === undefined) return { text: 'done\nVERDICT: PASS' };
  if (next.startsWith('read:')) return { call: { name: 'read_file', args: { path: next.slice(5) } } };
  if (next.startsWith('write:'))
    return { call: { name: 'write_file', args: { path: next.slice(6), content: `#!/bin/sh\n${evil}\n` } } };
  return { call: { name: 'shell', args: { command: next } } };
};

const SECRETS = { FAKE_PROVIDER_KEY: 'fake-provider-key-secret' };
const linux = process.platform === 'linux';
const asRoot = process.getuid?.() === 0;
const NOBODY = 65534;
/** The console's build, served unauthenticated when it exists: the model tries to plant a link in it. */
const CONSOLE_DIR = resolve(MAIN, '../../../console/dist');
const STATIC_PROBE = 'aleph-escape-probe';

interface Variant {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
  /** Why this variant cannot run here (the missing capability named), or undefined. */
  readonly missing: string | undefined;
}

const lastLine = (text: string): string => text.trim().split('\n').at(-1) ?? '';

/** Why `uid` cannot run the sandboxed server here, if it cannot. */
function unprivilegedMissing(uid: number, gid: number): string | undefined {
  if (!linux) return 'bubblewrap runs on Linux only';
  const read = spawnSync(
    process.execPath,
    ['-e', `require('node:fs').accessSync(${JSON.stringify(MAIN)}, 4)`],
    { uid, gid, encoding: 'utf8' },
  );
  if (read.status !== 0) return `uid ${uid} cannot read the server's build ${MAIN}: ${lastLine(read.stderr)}`;
  const userns = spawnSync(
    'bwrap',
    ['--unshare-all', '--unshare-user', '--die-with-parent', '--ro-bind', '/', '/', 'true'],
    { uid, gid, encoding: 'utf8' },
  );
  if (userns.error !== undefined) return `bwrap cannot start: ${userns.error.message}`;
  if (userns.status !== 0)
    return (
      `no user namespace for uid ${uid}: CLONE_NEWUSER is refused to unprivileged users here ` +
      `(kernel.unprivileged_userns_clone, user.max_user_namespaces or an AppArmor userns restriction); ` +
      `bwrap: ${lastLine(userns.stderr)}`
    );
  return undefined;
}

const VARIANTS: readonly Variant[] = [
  {
    name: 'root',
    uid: 0,
    gid: 0,
    missing: !linux
      ? 'bubblewrap runs on Linux only'
      : asRoot
        ? undefined
        : `this suite runs as uid ${process.getuid?.()}: the server cannot be started as root`,
  },
  (() => {
    const uid = asRoot ? NOBODY : (process.getuid?.() ?? NOBODY);
    const gid = asRoot ? NOBODY : (process.getgid?.() ?? NOBODY);
    return { name: `an unprivileged user (uid ${uid})`, uid, gid, missing: unprivilegedMissing(uid, gid) };
  })(),
];

let llm: FakeLlm | undefined;
beforeAll(async () => {
  if (VARIANTS.some(({ missing }) => missing === undefined)) llm = await startFakeLlm(hostileModel);
});
afterAll(async () => {
  await llm?.close();
  rmSync(join(CONSOLE_DIR, STATIC_PROBE), { recursive: true, force: true }); // only if the sandbox failed
});

describe.each(VARIANTS)('a hostile model, the server run as $name', (variant) => {
  const { uid, gid } = variant;
  let root = '';
  let home = '';
  let pwned = '';
  let server: ServerProcess | undefined;
  let client: GatewayClient | undefined;

  /** The user's own git, unconfined, as the user who runs the server. */
  const git = (...args: string[]): SpawnSyncReturns<string> =>
    spawnSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
      cwd: home,
      encoding: 'utf8',
      env: { ...process.env, HOME: home },
      ...(uid === process.getuid?.() ? {} : { uid, gid }),
    });

  /** Skips with the missing capability named, never passes silently. */
  const requireVariant = (context: TestContext): void => {
    if (variant.missing !== undefined) context.skip(variant.missing);
  };

  beforeAll(async () => {
    if (variant.missing !== undefined) {
      console.warn(`escape suite as ${variant.name} skipped: ${variant.missing}`);
      return;
    }
    root = realpathSync(mkdtempSync('/var/tmp/aleph-escape-e2e-'));
    chmodSync(root, 0o755);
    pwned = join(root, 'pwned');
    home = join(root, 'home'); // the cwd at $HOME: the state dir and the config under it
    mkdirSync(join(home, '.local', 'state', 'aleph'), { recursive: true });
    writeFileSync(join(home, '.local', 'state', 'aleph', 'token'), 'state-dir-token-secret\n');
    mkdirSync(join(home, 'secrets'));
    writeFileSync(join(home, 'secrets', 'key'), 'deny-read-secret\n');
    mkdirSync(join(home, 'scripts'));
    writeFileSync(join(home, 'scripts', 'pre-commit'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    writeFileSync(join(home, '.gitconfig'), '[user]\n\tname = t\n');
    writeFileSync(join(home, '.bashrc'), 'export A=1\n');
    mkdirSync(join(home, '.husky'));
    writeFileSync(join(home, '.husky', 'pre-commit'), '#!/bin/sh\nexit 0\n', { mode: 0o755 });
    mkdirSync(join(home, '.claude'));
    writeFileSync(join(home, '.claude', 'settings.json'), '{}\n');
    mkdirSync(join(home, 'hooks'));
    writeFileSync(join(home, 'hooks', 'extra.json'), '{"hooks":{}}\n');
    mkdirSync(join(home, 'conf'));
    writeFileSync(join(home, 'README.md'), 'project\n');
    if (uid !== process.getuid?.()) {
      const chown = spawnSync('chown', ['-R', `${uid}:${gid}`, root], { encoding: 'utf8' });
      expect(chown.status, chown.stderr).toBe(0);
    }
    expect(git('init', '-q').status).toBe(0);
    expect(git('config', 'core.hooksPath', '.husky').status).toBe(0);
    symlinkSync('../../scripts/pre-commit', join(home, '.git', 'hooks', 'pre-commit'));
    expect(git('add', 'README.md').status).toBe(0);
    expect(git('commit', '-qm', 'first').status).toBe(0);
    server = await startServerProcess(
      `
[gateway]
port = 0

[agent]
provider = "openai-compatible"
model = "fake-coder"
base_url = "${llm!.baseUrl}"
api_key_env = "FAKE_PROVIDER_KEY"
max_iterations = 40
tool_timeout_secs = 20
allow_home_cwd = true

[power]
inhibit_sleep = false

[sandbox]
mode = "required"
deny_read = ["${join(home, '.local', 'state', 'aleph')}", "${join(home, 'secrets')}"]

[sandbox.limits]
processes = 64
memory_mib = 256
file_size_mib = 1
tmp_mib = 1

[hooks]
files = ["../hooks/extra.json"]
`,
      { ...SECRETS, HOME: home },
      join(home, 'conf'),
      undefined,
      uid === process.getuid?.() ? undefined : { uid, gid },
    );
    client = await connectGateway(server.url, { token: server.token });
  }, 120_000);

  afterAll(async () => {
    await client?.close();
    if (server !== undefined) {
      await server.stop();
      rmSync(server.stateDir, { recursive: true, force: true });
    }
    if (root !== '') rmSync(root, { recursive: true, force: true });
  });

  /** The hook warnings of the last hostileRun. */
  let hookWarnings: string[] = [];

  /** One agent run of `steps` in the project (or `cwd`); each tool's output, in order. */
  async function hostileRun(steps: string[], cwd = home): Promise<string[]> {
    hookWarnings = [];
    evil = `touch ${pwned}`;
    const gateway = client as GatewayClient;
    await gateway.subscribe(['agent.*']);
    const outputs: string[] = [];
    let resolveDone: () => void = () => {};
    const done = new Promise<void>((resolveRun) => (resolveDone = resolveRun));
    const runId = (
      await gateway.request<{ runId: string }>('agent.run', { prompt: JSON.stringify(steps), cwd })
    ).runId;
    gateway.onEvent((topic, params) => {
      const event = params as Record<string, unknown>;
      if (event['runId'] !== undefined && event['runId'] !== runId) return;
      if (topic === 'agent.tool') outputs.push(String(event['output']));
      if (topic === 'agent.hook' && event['kind'] === 'warning') hookWarnings.push(String(event['message']));
      if (topic === 'agent.done') resolveDone();
    });
    await done;
    return outputs;
  }

  const PROTECTED = () => [
    join(home, '.git', 'config'),
    join(home, 'scripts', 'pre-commit'),
    join(home, '.husky', 'pre-commit'),
    join(home, '.gitconfig'),
    join(home, '.bashrc'),
    join(home, '.claude', 'settings.json'),
    join(home, 'hooks', 'extra.json'),
    join(home, 'conf', 'aleph.toml'),
    join(home, '.local', 'state', 'aleph', 'token'),
    join(home, 'secrets', 'key'),
  ];
  const SECRET_TEXT =
    /state-dir-token-secret|deny-read-secret|fake-provider-key-secret|\[gateway\]|root:x:0:0/;

  it('renames, copies, links and binds change nothing protected, read nothing, and run nothing unconfined', async (context) => {
    requireVariant(context);
    const before = new Map(PROTECTED().map((file) => [file, readFileSync(file, 'utf8')]));
    const outputs = await hostileRun([
      // .git moved away and a copy with an fsmonitor and a hook put in its place
      `mv .git .git.orig; cp -a .git .git.copy && printf '[core]\\n\\tfsmonitor = touch ${pwned}\\n' >> .git.copy/config && mv .git.copy .git; printf '#!/bin/sh\\ntouch ${pwned}\\n' > .git/hooks/pre-commit; echo 'touch ${pwned}' >> scripts/pre-commit; mv .husky .husky.orig; echo 'touch ${pwned}' >> .husky/pre-commit; printf '[core]\\n\\tfsmonitor = touch ${pwned}\\n' >> .gitconfig; echo 'touch ${pwned}' >> .bashrc; echo step-git`,
      // the hooks file's folder swapped for one with a planted Stop hook
      `mv hooks hooks.orig; mkdir -p hooks2 && echo '{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch ${pwned}"}]}]}}' > hooks2/extra.json && mv hooks2 hooks; rm -rf hooks; echo step-hooks`,
      // the config file and the state dir moved out from under their denial, then read
      'mv conf conf.x; mv .local .local.x; mv secrets secrets.x; ln conf/aleph.toml toml; ln -s conf/aleph.toml toml-link; echo step-moves',
      'read:conf.x/aleph.toml',
      'read:.local.x/state/aleph/token',
      'read:toml-link',
      'read:secrets/key',
      // Claude Code's settings, and a bind or a nested namespace to remount anything
      `mv .claude .claude.orig; echo '{"hooks":{}}' > .claude/settings.json; mount --bind .git.orig .git; unshare -Urm true || echo no-userns`,
      // symlink swaps: a protected dir or file replaced by a link to a copy the model owns
      `mkdir -p own/hooks && cp .git/config own/config; rm -rf .git/hooks && ln -s ../own/hooks .git/hooks; ln -sf ../own/config .git/config; ln -sfn own .claude; ln -f .git/config own/config-link; echo step-links`,
      // the file tools, in-process: a hook's symlink target, the hooks file, git's config, the link's
      'write:scripts/pre-commit',
      'write:.husky/pre-commit',
      'write:.gitconfig',
      'write:hooks/extra.json',
      'write:.git/config',
      'write:.git/hooks/post-checkout',
      // the console's folder, served without a token: a symlinked index to a secret
      `mkdir -p ${CONSOLE_DIR}/${STATIC_PROBE} && ln -s /etc/passwd ${CONSOLE_DIR}/${STATIC_PROBE}/index.html; echo step-static`,
      // git pointed at another config, then the command killed by its timeout
      `cp -a .git evil; printf '[core]\\n\\tfsmonitor = touch ${pwned}\\n' >> evil/config; echo ../evil > .git/commondir; sleep 60`,
    ]);
    const labelled = outputs.map((output, index) => `#${index}: ${output}`).join('\n');
    expect(outputs.length, labelled).toBe(17);
    for (const output of outputs) expect(output).not.toMatch(SECRET_TEXT);
    expect(outputs[0]).toMatch(/Device or resource busy/);
    expect(outputs[2]).toMatch(/Device or resource busy/);
    expect(outputs[3]).toMatch(/refused|no such file|outside/i);
    expect(outputs[7]).toMatch(/no-userns/);
    expect(outputs[8]).toMatch(/Device or resource busy|Read-only file system|Invalid cross-device link/);
    for (const write of outputs.slice(9, 15)) expect(write, labelled).toMatch(/refused/);
    // Refused, or (a checkout under /tmp) made in the sandbox's private /tmp only: never on the host.
    if (!CONSOLE_DIR.startsWith('/tmp/'))
      expect(outputs[15]).toMatch(/Read-only file system|Permission denied/);
    expect(existsSync(join(CONSOLE_DIR, STATIC_PROBE))).toBe(false);
    expect(outputs[16]).toMatch(/timed out/);
    for (const [file, text] of before) expect(readFileSync(file, 'utf8'), file).toBe(text);
    expect(readdirSync(join(home, '.git'))).not.toContain('commondir');
    expect(readdirSync(home)).not.toContain('.git.orig');
    // Nothing planted is served without a token.
    const page = await fetch(`${server!.url.replace(/^ws/, 'http').replace(/\/ws$/, '')}/${STATIC_PROBE}`);
    expect(await page.text()).not.toMatch(SECRET_TEXT);
    expect(page.status).toBe(404);
    // The user's next git commands, unconfined: nothing the model wrote runs.
    expect(git('status', '--short').status).toBe(0);
    writeFileSync(join(home, 'README.md'), 'changed\n');
    const commit = git('commit', '-qam', 'second');
    expect(commit.status, commit.stderr).toBe(0);
    expect(existsSync(pwned)).toBe(false);
  }, 180_000);

  // Only the cwd's .claude is kept read-only: a subfolder's is the model's to write, and a later run
  // started in that subfolder reads it. Its hooks run in the sandbox, for every event.
  it("a subfolder's .claude/settings.json written by the model runs its hooks confined in a later run there", async (context) => {
    requireVariant(context);
    const hook = (event: string) =>
      `"${event}":[{${event === 'PreToolUse' ? '"matcher":"Bash",' : ''}"hooks":[{"type":"command","command":"echo ${event} >> hooks-ran; touch ${pwned}"}]}]`;
    const settings = `{"hooks":{${['SessionStart', 'PreToolUse', 'Stop'].map(hook).join(',')}}}`;
    const planted = await hostileRun([
      `mkdir -p sub/.claude && printf '%s' '${settings}' > sub/.claude/settings.json && echo planted`,
    ]);
    expect(planted[0]).toMatch(/planted/);
    const sub = join(home, 'sub');
    const outputs = await hostileRun(['echo second-run'], sub);
    expect(outputs[0]).toMatch(/second-run/);
    // They ran (in the project, writable inside), and wrote nothing outside it.
    expect(readFileSync(join(sub, 'hooks-ran'), 'utf8').split('\n').sort()).toEqual([
      '',
      'PreToolUse',
      'SessionStart',
      'Stop',
    ]);
    expect(existsSync(pwned)).toBe(false);
    expect(hookWarnings).toEqual([
      expect.stringMatching(
        /^\.claude\/settings\.json: changed during agent run \S+ in .*, whose commands could write there: its hooks run in the sandbox/,
      ),
    ]);
    rmSync(sub, { recursive: true, force: true });
  }, 180_000);

  it("a subfolder's settings file written by the user, not during a run, runs its hooks as the user", async (context) => {
    requireVariant(context);
    const sub = join(home, 'user-sub');
    const marker = join(root, 'user-hook-ran');
    // Well after the last run's end (a file system's clock and ours may differ a little).
    await new Promise((resolveWait) => setTimeout(resolveWait, 2500));
    mkdirSync(join(sub, '.claude'), { recursive: true });
    const stop = `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch ${marker}"}]}]}}`;
    writeFileSync(join(sub, '.claude', 'settings.json'), stop);
    if (uid !== process.getuid?.()) spawnSync('chown', ['-R', `${uid}:${gid}`, sub]);
    await new Promise((resolveWait) => setTimeout(resolveWait, 2500));
    await hostileRun(['echo user-run'], sub);
    expect(hookWarnings).toEqual([]);
    expect(existsSync(marker)).toBe(true); // outside the project: written unconfined
    rmSync(marker, { force: true });
    rmSync(sub, { recursive: true, force: true });
  }, 180_000);

  // Claude Code's hooks run programs from the project's `.claude` ("$CLAUDE_PROJECT_DIR"/.claude/hooks/…),
  // which a run above the subfolder can write: one it rewrote makes the user's own hooks there run confined.
  it("a subfolder's .claude/hooks script rewritten by a run above runs confined, with the user's settings file", async (context) => {
    requireVariant(context);
    const sub = join(home, 'script-sub');
    await new Promise((resolveWait) => setTimeout(resolveWait, 2500)); // past the last run's window
    mkdirSync(join(sub, '.claude', 'hooks'), { recursive: true });
    const start = `{"hooks":{"SessionStart":[{"hooks":[{"type":"command","command":"\\"$CLAUDE_PROJECT_DIR\\"/.claude/hooks/start.sh"}]}]}}`;
    writeFileSync(join(sub, '.claude', 'settings.json'), start);
    writeFileSync(join(sub, '.claude', 'hooks', 'start.sh'), '#!/bin/sh\necho user-script >> hooks-ran\n', {
      mode: 0o755,
    });
    if (uid !== process.getuid?.()) spawnSync('chown', ['-R', `${uid}:${gid}`, sub]);
    await new Promise((resolveWait) => setTimeout(resolveWait, 2500));
    const rewritten = await hostileRun([
      `printf '#!/bin/sh\\necho model-script >> hooks-ran\\ntouch ${pwned}\\n' > script-sub/.claude/hooks/start.sh && echo rewritten`,
    ]);
    expect(rewritten[0]).toMatch(/rewritten/);
    await hostileRun(['echo script-run'], sub);
    expect(readFileSync(join(sub, 'hooks-ran'), 'utf8')).toBe('model-script\n'); // it ran, in the sandbox
    expect(existsSync(pwned)).toBe(false);
    expect(hookWarnings).toEqual([
      expect.stringMatching(
        /^\.claude\/settings\.json: \S+\/script-sub\/\.claude\/hooks\/start\.sh changed during agent run \S+ in .*, whose commands could write there: its hooks run in the sandbox/,
      ),
    ]);
    rmSync(sub, { recursive: true, force: true });
  }, 180_000);

  it("a subfolder's settings file linked out of it (to a denied file) is skipped with a warning, never read", async (context) => {
    requireVariant(context);
    const planted = await hostileRun([
      'mkdir -p linked/.claude && ln -s ../../secrets/key linked/.claude/settings.json && echo planted',
    ]);
    expect(planted[0]).toMatch(/planted/);
    const outputs = await hostileRun(['echo linked-run'], join(home, 'linked'));
    expect(outputs[0]).toMatch(/linked-run/); // the run goes on
    expect(hookWarnings).toEqual([
      `.claude/settings.json: is a link to a path outside ${join(home, 'linked')}; skipped`,
    ]);
    expect(hookWarnings.join('\n')).not.toMatch(SECRET_TEXT);
    rmSync(join(home, 'linked'), { recursive: true, force: true });
  }, 180_000);

  it("a change hidden from the user's git status (skip-worktree, info/exclude) is named at the run's end, with its undo", async (context) => {
    requireVariant(context);
    const outputs = await hostileRun([
      "echo 'touch pwned' >> README.md && git update-index --skip-worktree README.md && echo planted > planted.py && echo planted.py >> .git/info/exclude && git status --short && echo step-hide",
    ]);
    expect(outputs[0]).toMatch(/^step-hide/m);
    expect(outputs[0]).not.toMatch(/README|planted\.py/); // git status inside shows nothing already
    expect(hookWarnings).toEqual([
      `the run hid changes from your review in ${home}: it marked "README.md" skip-worktree or assume-unchanged, so their changes do not show (\`git update-index --no-skip-worktree --no-assume-unchanged -- README.md\`); it added "planted.py" to .git/info/exclude, so what they match does not show. Check them before you run or commit what is there`,
    ]);
    expect(git('update-index', '--no-skip-worktree', 'README.md').status).toBe(0);
    expect(git('checkout', 'README.md').status).toBe(0);
    rmSync(join(home, 'planted.py'));
    // The user's last commit amended, its message kept: HEAD no longer contains what it named.
    const head = git('rev-parse', 'HEAD').stdout.trim();
    const amend = await hostileRun([
      "echo 'touch pwned' >> README.md && git -c user.name=t -c user.email=t@t commit -qa --amend --no-edit && echo step-amend",
    ]);
    expect(amend[0]).toMatch(/^step-amend/m);
    const amended = git('rev-parse', 'HEAD').stdout.trim();
    expect(hookWarnings).toEqual([
      `the run moved HEAD in ${home} from ${head.slice(0, 12)} to ${amended.slice(0, 12)}, which does not contain it (an amend, a rebase, a reset or another branch): what \`git log\` shows there is not what you left; compare with \`git diff ${head.slice(0, 12)} HEAD\` before you build or push`,
    ]);
    expect(git('reset', '-q', '--hard', head).status).toBe(0);
  }, 180_000);

  it("an index rewritten to say a changed file is not, and a .gitignore hiding itself, are named at the run's end", async (context) => {
    requireVariant(context);
    // The model's own program: README.md changed and added, its entry made to name HEAD's object again.
    const forge = `python3 - <<'EOF'
import hashlib, struct, subprocess
old = bytes.fromhex(subprocess.check_output(['git', 'rev-parse', 'HEAD:README.md']).decode().strip())
data = bytearray(open('.git/index', 'rb').read())
at = 12
for _ in range(struct.unpack('>I', data[8:12])[0]):
    size = struct.unpack('>H', data[at + 60:at + 62])[0] & 0xfff
    if data[at + 62:at + 62 + size] == b'README.md':
        data[at + 40:at + 60] = old
    at += (62 + size + 8) // 8 * 8
data[-20:] = hashlib.sha1(bytes(data[:-20])).digest()
open('.git/index', 'wb').write(data)
EOF`;
    const outputs = await hostileRun([
      `echo 'touch pwned' >> README.md && touch -d '1 hour ago' README.md && git add README.md && ${forge}
git status --short && echo step-forge`,
      "mkdir vendor-cache && echo '*' > vendor-cache/.gitignore && echo 'import os' > vendor-cache/conftest.py && git status --short && echo step-ignore",
    ]);
    expect(outputs[0]).toMatch(/^step-forge/m);
    expect(outputs[0]).not.toMatch(/README/);
    expect(outputs[1]).not.toMatch(/vendor-cache/);
    // The user's review, unconfined: nothing of either.
    expect(git('status', '--short').stdout).not.toMatch(/README|vendor-cache/);
    expect(readFileSync(join(home, 'README.md'), 'utf8')).toMatch(/touch pwned/);
    expect(hookWarnings).toEqual([
      `the run hid changes from your review in ${home}: it changed "README.md" in a way the index does not see (their entries match their size and file times), so \`git status\` and \`git diff\` do not show it (\`touch -- README.md\` makes git read them again); it created "vendor-cache/", ignored by rules it wrote in "vendor-cache/.gitignore", so \`git status\` does not show them (\`git status --ignored\` does; remove those rules, or the paths, to undo it). Check them before you run or commit what is there`,
    ]);
    // What it says undoes it.
    expect(git('-c', 'core.fsmonitor=false', 'status').status).toBe(0);
    spawnSync('touch', ['--', join(home, 'README.md')]);
    expect(git('status', '--short').stdout).toMatch(/^ M README\.md$/m);
    expect(git('checkout', '--', 'README.md').status).toBe(0);
    rmSync(join(home, 'vendor-cache'), { recursive: true, force: true });
  }, 180_000);

  // A real host datagram socket receiving is in @aleph/sandbox's limits test; here, through the tool.
  it('the datagram route to a host socket is closed with the network off', async (context) => {
    requireVariant(context);
    const send = ['SOCK_DGRAM', 'SOCK_RAW']
      .map(
        (kind) =>
          `python3 -c "import socket; socket.socketpair(socket.AF_UNIX, socket.${kind}); print('paired')"`,
      )
      .join('; ');
    const outputs = await hostileRun([send]);
    expect(outputs[0]).toMatch(/Operation not permitted/);
    expect(outputs[0]).not.toMatch(/paired/);
  }, 120_000);

  it('a fork bomb, a 10 GiB allocation, a file past the limit and a full /tmp end with a clear error; the server keeps answering', async (context) => {
    requireVariant(context);
    // As root the task count is bounded by a pids cgroup when one is writable (RLIMIT_NPROC never binds uid 0).
    const bounded =
      uid !== 0 || createSandbox({ network: 'off' }, { mode: 'required' }).limits.processesBy !== 'none';
    const outputs = await hostileRun([
      'python3 -c "b = bytearray(10 * 2**30)" 2>&1 | tail -1',
      'head -c 4000000 /dev/zero > big; echo "head ended: $?"; ls -l big',
      'head -c 700000 /dev/zero > /tmp/a && head -c 700000 /dev/zero > /tmp/b; echo "tmp ended: $?"',
      ...(bounded
        ? [
            `bash -c ':(){ :|:& };: ; sleep 2' 2>&1 | grep -m1 -o 'Resource temporarily unavailable'; echo end`,
          ]
        : []),
      'echo still-here',
    ]);
    const labelled = outputs.map((output, index) => `#${index}: ${output}`).join('\n');
    expect(outputs[0], labelled).toMatch(/MemoryError/);
    expect(outputs[1], labelled).toMatch(/head ended: 153/); // SIGXFSZ
    expect(outputs[1], labelled).toMatch(/ 1048576 /); // written up to the limit, not past it
    expect(outputs[2], labelled).toMatch(/No space left on device(.|\n)*tmp ended: 1/); // tmp_mib
    if (bounded) {
      expect(outputs[3], labelled).toMatch(/Resource temporarily unavailable(.|\n)*end/);
      // The one-line reason comes from the pids cgroup (root); unprivileged, the failing forks say it.
      if (uid === 0) expect(outputs[3], labelled).toMatch(/the process limit \(64 tasks\) was reached/);
    }
    expect(outputs.at(-1), labelled).toMatch(/still-here/);
    const runs = await client!.request<unknown[]>('agent.list', {});
    expect(Array.isArray(runs)).toBe(true);
    if (!bounded) context.skip('as root without a writable pids cgroup the task count is not bounded');
  }, 180_000);
});
