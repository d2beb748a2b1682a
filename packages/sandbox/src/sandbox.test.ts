// Real bubblewrap (CI installs it): what a confined command can and cannot do, and the same
// commands with the mode off. The test root lives in /var/tmp so that the private /tmp of the
// sandbox does not hide the paths the policy is meant to hide.
import { spawn, spawnSync } from 'node:child_process';
import {
  accessSync,
  chmodSync,
  constants,
  existsSync,
  linkSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createSandbox, type SandboxMode, type WrappedCommand } from './sandbox.js';
import { SandboxError } from './errors.js';

const linux = process.platform === 'linux';
const runWritable = ((): boolean => {
  try {
    accessSync('/run', constants.W_OK);
    return true;
  } catch {
    return false;
  }
})();

interface Ran {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function run(command: WrappedCommand): Promise<Ran> {
  return new Promise((resolve, reject) => {
    const child = spawn(command.file, command.args, {
      cwd: command.cwd,
      env: command.env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject).on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

let root = '';
let work = '';
let state = '';
let home = '';
let listener: Server;
let port = 0;
let unixListener: Server;
let socketPath = '';

let unixSocket: Server;
const SOCKET = `/run/aleph-sandbox-test-${process.pid}.sock`;
const unixConnect = () => ({
  file: process.execPath,
  args: [
    '-e',
    `require('net').connect('${SOCKET}').on('data', (d) => process.stdout.write('got ' + d)).on('error', (e) => console.log(e.code))`,
  ],
  cwd: work,
  env: process.env,
});

beforeAll(async () => {
  root = mkdtempSync('/var/tmp/aleph-sandbox-test-');
  work = join(root, 'work');
  state = join(root, 'state');
  home = join(root, 'home');
  mkdirSync(work);
  mkdirSync(join(state, 'sessions'), { recursive: true });
  mkdirSync(join(root, 'secrets', 'inner'), { recursive: true });
  writeFileSync(join(state, 'sessions', 'log.jsonl'), 'session-log\n');
  writeFileSync(join(root, 'secrets', 'inner', 'key'), 'inner-secret\n');
  mkdirSync(join(home, '.ssh'), { recursive: true });
  writeFileSync(join(state, 'token'), 'gateway-token-123\n');
  writeFileSync(join(home, '.ssh', 'id_ed25519'), 'private-key\n');
  writeFileSync(join(home, '.netrc'), 'machine x password hunter2\n');
  writeFileSync(join(home, '.git-credentials'), 'https://u:git-cred-secret@example.com\n');
  mkdirSync(join(home, '.config', 'gh'), { recursive: true });
  writeFileSync(join(home, '.config', 'gh', 'hosts.yml'), 'oauth_token: gh-token-secret\n');
  mkdirSync(join(home, '.claude'), { recursive: true });
  writeFileSync(join(home, '.claude', '.credentials.json'), '{"token":"claude-cred-secret"}\n');
  writeFileSync(join(home, '.claude', 'CLAUDE.md'), 'claude-md-readable\n');
  // Coding agents' settings: Claude Code's env (API keys), its IDE tokens, opencode, Continue, Aider, Cursor.
  writeFileSync(join(home, '.claude', 'settings.json'), '{"env":{"ANTHROPIC_API_KEY":"settings-secret"}}\n');
  writeFileSync(join(home, '.claude', 'settings.local.json'), '{"env":{"KEY":"local-settings-secret"}}\n');
  mkdirSync(join(home, '.claude', 'ide'), { recursive: true });
  writeFileSync(join(home, '.claude', 'ide', '4242.lock'), '{"authToken":"ide-secret"}\n');
  mkdirSync(join(home, '.local', 'share', 'opencode'), { recursive: true });
  writeFileSync(join(home, '.local', 'share', 'opencode', 'auth.json'), '{"key":"opencode-secret"}\n');
  mkdirSync(join(home, '.continue'), { recursive: true });
  writeFileSync(join(home, '.continue', 'config.json'), '{"apiKey":"continue-secret"}\n');
  writeFileSync(join(home, '.aider.conf.yml'), 'openai-api-key: aider-secret\n');
  mkdirSync(join(home, '.cursor'), { recursive: true });
  writeFileSync(join(home, '.cursor', 'mcp.json'), '{"env":{"TOKEN":"cursor-secret"}}\n');
  writeFileSync(join(home, '.npmrc'), '//registry.example/:_authToken=npm-token-secret\n');
  writeFileSync(join(home, '.claude.json'), '{"primaryApiKey":"claude-json-secret"}\n');
  mkdirSync(join(home, '.claude', 'projects', 'p'), { recursive: true });
  writeFileSync(join(home, '.claude', 'projects', 'p', 's.jsonl'), '{"transcript":"transcript-secret"}\n');
  mkdirSync(join(home, '.codex'), { recursive: true });
  writeFileSync(join(home, '.codex', 'auth.json'), '{"OPENAI_API_KEY":"codex-secret"}\n');
  writeFileSync(join(home, '.bash_history'), 'export TOKEN=history-secret\n');
  writeFileSync(join(home, '.pgpass'), 'db:5432:*:u:pgpass-secret\n');
  writeFileSync(join(home, '.Xauthority'), 'x11-cookie-secret\n');
  mkdirSync(join(home, '.gem'), { recursive: true });
  writeFileSync(join(home, '.gem', 'credentials'), ':rubygems_api_key: gem-secret\n');
  writeFileSync(join(home, '.yarnrc.yml'), 'npmAuthToken: yarn-secret\n');
  mkdirSync(join(home, '.config', 'containers'), { recursive: true });
  writeFileSync(
    join(home, '.config', 'containers', 'auth.json'),
    '{"auths":{"r":{"auth":"podman-secret"}}}\n',
  );
  mkdirSync(join(home, '.oci'), { recursive: true });
  writeFileSync(join(home, '.oci', 'config'), 'key_file=oci-secret\n');
  writeFileSync(join(home, '.rediscli_history'), 'AUTH redis-secret\n');
  writeFileSync(join(home, '.env'), 'API_KEY=dotenv-secret\n');
  listener = createServer((socket) => socket.end('hello\n'));
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  port = (listener.address() as { port: number }).port;
  // Where docker's, dbus' and databases' sockets live; the test runs as root in CI.
  unixSocket = createServer((socket) => socket.end('hello\n'));
  if (runWritable) await new Promise<void>((resolve) => unixSocket.listen(SOCKET, resolve));
  // A host Unix socket outside /tmp, as /var/run/docker.sock or /run/user/$UID/bus are.
  socketPath = join(root, 'host.sock');
  unixListener = createServer((socket) => socket.end('unix hello\n'));
  await new Promise<void>((resolve) => unixListener.listen(socketPath, resolve));
});

afterAll(async () => {
  await new Promise((resolve) => listener.close(resolve));
  if (runWritable) await new Promise((resolve) => unixSocket.close(resolve));
  await new Promise((resolve) => unixListener.close(resolve));
  rmSync(root, { recursive: true, force: true });
});

const SECRET_ENV = {
  ALEPH_TOKEN: 'aleph-token-secret',
  ALEPH_URL: 'http://127.0.0.1:1',
  PROVIDER_KEY: 'provider-key-secret',
  OPENAI_API_KEY: 'openai-key-secret',
  GITHUB_TOKEN: 'github-token-secret',
  LISTED_TOKEN: 'listed-token-value',
};

function sandbox(mode: SandboxMode, network: 'on' | 'off' = 'off') {
  return createSandbox(
    { network, denyRead: [state], env: ['LISTED_TOKEN', 'PROVIDER_KEY'], secretEnv: ['PROVIDER_KEY'] },
    { mode, home },
  );
}

const sh = (mode: SandboxMode, script: string, network: 'on' | 'off' = 'off'): Promise<Ran> =>
  run(
    sandbox(mode, network).wrap({
      file: '/bin/sh',
      args: ['-c', script],
      cwd: work,
      env: { ...process.env, ...SECRET_ENV },
    }),
  );

describe.skipIf(!linux)('bubblewrap (required)', () => {
  it('uses bubblewrap on this machine', () => {
    expect(sandbox('required').backend).toBe('bubblewrap');
  });

  it('writes in the cwd and the private /tmp, and nowhere else', async () => {
    const ran = await sh(
      'required',
      'echo in > inside.txt && echo t > /tmp/t && cat /tmp/t; echo out > ../outside.txt',
    );
    expect(readFileSync(join(work, 'inside.txt'), 'utf8')).toBe('in\n');
    expect(ran.stdout).toBe('t\n');
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(ran.code).not.toBe(0);
    expect(readdirSync(root)).not.toContain('outside.txt');
  });

  // As root the command is uid 0 (a user ns mapping 0 to 0): sysctl's owner check passes.
  it('cannot write a host sysctl or any other writable kernel knob under /proc', async () => {
    const ran = await sh(
      'required',
      'v=$(cat /proc/sys/vm/swappiness) && echo "$v" > /proc/sys/vm/swappiness && echo wrote-sysctl; ' +
        'find /proc/sys /proc/sysrq-trigger /proc/irq /proc/bus /proc/fs /proc/mtrr -writable 2>/dev/null | head -3',
    );
    expect(ran.stdout).toBe('');
    expect(ran.stderr).toMatch(/swappiness: Read-only file system|Permission denied/);
  });

  // The pty spawn helper's request FIFO runs whatever is written to it, unconfined.
  it("cannot reach the spawn helper's FIFO in the server's TMPDIR outside /tmp; that dir is no cwd", async () => {
    const temp = join(root, 'server-tmp');
    mkdirSync(join(temp, 'aleph-pty-x1'), { recursive: true });
    expect(spawnSync('mkfifo', [join(temp, 'aleph-pty-x1', 'request')]).status).toBe(0);
    writeFileSync(join(temp, 'other.txt'), 'other\n');
    const saved = process.env['TMPDIR'];
    process.env['TMPDIR'] = temp;
    try {
      const probe = `for f in ${temp}/aleph-pty-x1/request ${temp}/other.txt; do [ -e "$f" ] && echo "seen $f"; done; echo end`;
      const elsewhere = await sh('required', probe);
      expect(elsewhere.stdout).toBe('end\n');
      // That dir as cwd would be writable inside, the FIFO with it: refused. A folder in it is not.
      const error = catchError(() =>
        sandbox('required').wrap({ file: '/bin/sh', args: ['-c', probe], cwd: temp, env: process.env }),
      );
      expect(error).toMatchObject({ code: 'cwd_denied' });
      mkdirSync(join(temp, 'project'));
      const inside = await run(
        sandbox('required').wrap({
          file: '/bin/sh',
          args: ['-c', probe],
          cwd: join(temp, 'project'),
          env: process.env,
        }),
      );
      expect(inside.stdout).toBe('end\n');
    } finally {
      if (saved === undefined) delete process.env['TMPDIR'];
      else process.env['TMPDIR'] = saved;
    }
  });

  it('cannot read the denied state dir, ~/.ssh or ~/.netrc', async () => {
    const ran = await sh(
      'required',
      `cat ${state}/token; cat ${home}/.ssh/id_ed25519; cat ${home}/.netrc; ls ${state}`,
    );
    expect(ran.stdout).not.toMatch(/gateway-token-123|private-key|hunter2|token/);
    expect(ran.stderr).toMatch(/token: No such file/);
  });

  it("cannot read the home's credential stores, agents' transcripts and histories; the rest of ~/.claude stays readable", async () => {
    const ran = await sh(
      'required',
      `cat ${home}/.git-credentials ${home}/.config/gh/hosts.yml ${home}/.claude/.credentials.json ${home}/.npmrc; grep -rs secret ${home}; cat ${home}/.claude/CLAUDE.md`,
    );
    expect(ran.stdout).not.toMatch(/secret/);
    expect(ran.stdout).toContain('claude-md-readable');
  });

  it('cannot read the credential stores the environment moves out of the home; the rest of those folders stays readable', async () => {
    const moved = join(root, 'moved');
    const files: Record<string, string> = {
      'claude/.credentials.json': 'claude-oauth-secret',
      'claude/.claude.json': 'claude-json-secret',
      'claude/projects/p/s.jsonl': 'claude-transcript-secret',
      'claude/CLAUDE.md': 'moved-claude-md-readable',
      'xdg/gh/hosts.yml': 'gh-moved-secret',
      'xdg/nvim/init.lua': 'moved-config-readable',
      'kube/a': 'kube-a-secret',
      'kube/b': 'kube-b-secret',
      'gcp.json': 'gcp-key-secret',
      'aws/credentials': 'aws-moved-secret',
      'gnupg/private-keys-v1.d/k.key': 'gpg-moved-secret',
    };
    for (const [path, text] of Object.entries(files)) {
      mkdirSync(join(moved, path, '..'), { recursive: true });
      writeFileSync(join(moved, path), `${text}\n`);
    }
    const box = createSandbox(
      { network: 'off' },
      {
        mode: 'required',
        home,
        env: {
          ...process.env,
          CLAUDE_CONFIG_DIR: join(moved, 'claude'),
          XDG_CONFIG_HOME: join(moved, 'xdg'),
          KUBECONFIG: `${join(moved, 'kube', 'a')}:${join(moved, 'kube', 'b')}`,
          GOOGLE_APPLICATION_CREDENTIALS: join(moved, 'gcp.json'),
          AWS_SHARED_CREDENTIALS_FILE: join(moved, 'aws', 'credentials'),
          GNUPGHOME: join(moved, 'gnupg'),
        },
      },
    );
    const ran = await run(
      box.wrap({ file: '/bin/sh', args: ['-c', `grep -rsh . ${moved}`], cwd: work, env: process.env }),
    );
    expect(ran.stdout).not.toMatch(/secret/);
    expect(ran.stdout).toContain('moved-claude-md-readable');
    expect(ran.stdout).toContain('moved-config-readable');
  });

  // As root, uid 0 inside keeps the owner's read bit of root-owned files (CI runs as root).
  it.runIf(process.getuid?.() === 0 && existsSync('/etc/shadow'))(
    "as root, cannot read the system's password hashes; the rest of /etc stays readable",
    async () => {
      const ran = await sh('required', 'cat /etc/shadow; ls /etc/ssl/private; head -c 5 /etc/passwd');
      expect(ran.stdout).toBe('root:');
    },
  );

  it('reads the files it is given as readable (a hook transcript in the state dir), read-only; the rest stays hidden', async () => {
    const log = join(state, 'sessions', 'log.jsonl');
    const ran = await run(
      sandbox('required').wrap({
        file: '/bin/sh',
        args: ['-c', `cat ${log}; cat ${state}/token; cat ${home}/.ssh/id_ed25519; echo x >> ${log}`],
        cwd: work,
        env: process.env,
        readable: [log, join(home, '.ssh', 'id_ed25519'), join(state, 'absent.jsonl')],
      }),
    );
    expect(ran.stdout).toBe('session-log\n');
    expect(ran.stderr).toMatch(/token: No such file/);
    expect(ran.stderr).toMatch(/id_ed25519: No such file/);
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(readFileSync(log, 'utf8')).toBe('session-log\n');
  });

  it('sees no ALEPH_*, no provider key, no *_TOKEN or *_API_KEY unless listed', async () => {
    const ran = await sh('required', 'env');
    expect(ran.stdout).not.toMatch(/aleph-token-secret|ALEPH_|provider-key-secret|openai-key|github-token/);
    expect(ran.stdout).toMatch(/^LISTED_TOKEN=listed-token-value$/m);
    expect(ran.stdout).toMatch(/^PATH=/m);
  });

  it('sees none of them either when the spawner merges the env over its own (as a pty does)', async () => {
    const box = createSandbox(
      { network: 'off', secretEnv: ['PROVIDER_KEY'] },
      { mode: 'required', home, env: { ...process.env, ...SECRET_ENV } },
    );
    const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'env'], cwd: work, env: process.env });
    expect(wrapped.args.join(' ')).not.toMatch(/secret/);
    const ran = await run({ ...wrapped, env: { ...process.env, ...SECRET_ENV, ...wrapped.env } });
    expect(ran.stdout).not.toMatch(/secret|ALEPH_/);
    expect(ran.stdout).toMatch(/^PATH=/m);
  });

  it('with exactEnv, names no variable on the command line and, spawned with exactly its env, sees only the allowed ones', async () => {
    const env = { ...process.env, ...SECRET_ENV };
    const box = sandbox('required');
    const merged = box.wrap({ file: '/bin/sh', args: ['-c', 'env'], cwd: work, env });
    const exact = box.wrap({ file: '/bin/sh', args: ['-c', 'env'], cwd: work, env, exactEnv: true });
    expect(merged.args).toContain('--unsetenv');
    expect(exact.args).not.toContain('--unsetenv');
    expect(exact.args.length).toBeLessThan(merged.args.length);
    expect(exact.env).toEqual(merged.env);
    merged.release();
    const ran = await run(exact);
    exact.release();
    expect(ran.stdout).not.toMatch(/aleph-token-secret|ALEPH_|provider-key-secret|openai-key|github-token/);
    expect(ran.stdout).toMatch(/^LISTED_TOKEN=listed-token-value$/m);
    expect(ran.stdout).toMatch(/^PATH=/m);
  });

  it('writes the seccomp filter file again when it was removed or changed since the last command', () => {
    const box = sandbox('required');
    const filterOf = (wrapped: WrappedCommand): string => wrapped.args[3] ?? '';
    const first = box.wrap({ file: 'true', args: [], cwd: work, env: {} });
    first.release();
    const file = filterOf(first);
    expect(file).toMatch(/\.bpf$/);
    const bytes = readFileSync(file);
    rmSync(file); // a tmp cleaner
    box.wrap({ file: 'true', args: [], cwd: work, env: {} }).release();
    expect(readFileSync(file)).toEqual(bytes);
    // A valid program (return allow), so a command of a test file running beside this one that
    // reads it meanwhile still starts: only the content differs.
    writeFileSync(file, Buffer.from([6, 0, 0, 0, 0, 0, 0xff, 0x7f]));
    box.wrap({ file: 'true', args: [], cwd: work, env: {} }).release();
    expect(readFileSync(file)).toEqual(bytes);
  });

  it.each(['off', 'on'] as const)(
    'refuses setuid and setgid bits (chmod, open with O_CREAT), allows a plain chmod (network %s)',
    async (network) => {
      const dir = `suid-${network}`;
      const create = (mode: number, name: string) =>
        `${JSON.stringify(process.execPath)} -e "try { require('fs').closeSync(require('fs').openSync('${name}', 'wx', ${mode})); console.log('created ${name}') } catch (e) { console.log('open ${name}: ' + e.code) }"`;
      const ran = await sh(
        'required',
        [
          `mkdir ${dir} && cd ${dir} && cp /bin/sh ./suid && cp /bin/sh ./plain`,
          'chmod 4755 ./suid 2>&1; echo "chmod u+s: $?"',
          'chmod 2755 ./suid 2>&1; echo "chmod g+s: $?"',
          'chmod 755 ./plain; echo "chmod 755: $?"',
          'mkdir d; chmod g+s d 2>&1; echo "dir g+s: $?"',
          create(0o4755, 'made-suid'),
          create(0o755, 'made-plain'),
        ].join('\n'),
        network,
      );
      expect(ran.stdout).toMatch(/Operation not permitted/);
      expect(ran.stdout).toMatch(/^chmod u\+s: 1$/m);
      expect(ran.stdout).toMatch(/^chmod g\+s: 1$/m);
      expect(ran.stdout).toMatch(/^chmod 755: 0$/m);
      expect(ran.stdout).toMatch(/^dir g\+s: 1$/m);
      expect(ran.stdout).toMatch(/^open made-suid: EPERM$/m);
      expect(ran.stdout).toMatch(/^created made-plain$/m);
      // On the host: no file with a set-id bit, the plain chmod kept.
      expect(statSync(join(work, dir, 'suid')).mode & 0o6000).toBe(0);
      expect(statSync(join(work, dir, 'plain')).mode & 0o7777).toBe(0o755);
      expect(existsSync(join(work, dir, 'made-suid'))).toBe(false);
    },
  );

  const connect = (network: 'on' | 'off', mode: SandboxMode = 'required') =>
    run(
      sandbox(mode, network).wrap({
        file: process.execPath,
        args: [
          '-e',
          `require('net').connect(${port}, '127.0.0.1').on('data', (d) => process.stdout.write('got ' + d)).on('error', (e) => { console.log(e.code); process.exitCode = 1; })`,
        ],
        cwd: work,
        env: process.env,
      }),
    );

  it('cannot reach a listener on the host loopback with network off', async () => {
    const ran = await connect('off');
    expect(ran.stdout).not.toMatch(/got hello/);
    expect(ran.code).toBe(1);
  });

  it('reaches it with network on', async () => {
    const ran = await connect('on');
    expect(ran.stdout).toBe('got hello\n');
  });

  it.skipIf(!runWritable)(
    'cannot reach a unix socket under /run (sockets ignore read-only mounts)',
    async () => {
      const ran = await run(sandbox('required', 'on').wrap(unixConnect()));
      expect(ran.stdout).toBe('ENOENT\n');
    },
  );
  const connectUnix = (network: 'on' | 'off') =>
    run(
      sandbox('required', network).wrap({
        file: process.execPath,
        args: [
          '-e',
          `require('net').connect(${JSON.stringify(socketPath)}).on('data', (d) => process.stdout.write('got ' + d)).on('error', (e) => { console.log(e.code); process.exitCode = 1; })`,
        ],
        cwd: work,
        env: process.env,
      }),
    );

  it("cannot connect to the host's Unix sockets with network off, and can with it on", async () => {
    const off = await connectUnix('off');
    expect(off.stdout).toBe('EPERM\n');
    expect(off.code).toBe(1);
    const on = await connectUnix('on');
    expect(on.stdout).toBe('got unix hello\n');
  });

  it('keeps socketpair (pipes between its own processes) and leaves no filter fd open, with network off', async () => {
    const ran = await sh(
      'required',
      `python3 -c 'import socket; a, b = socket.socketpair(); a.send(b"pair"); print(b.recv(4).decode())'; ls /proc/self/fd`,
    );
    const [pair, ...fds] = ran.stdout.trim().split('\n');
    expect(pair).toBe('pair');
    expect(fds).not.toContain('9'); // the filter's fd, closed by bwrap
  });

  it('leaves nothing behind: a setsid escapee dies with the command', async () => {
    const marker = String(900_000 + Math.floor(Math.random() * 99_999));
    const ran = await sh('required', escapee(marker));
    try {
      expect(ran.stdout).toBe('started\n');
      await waitFor(() => sleepers(marker).length === 0);
    } finally {
      for (const pid of sleepers(marker)) process.kill(pid, 'SIGKILL');
    }
  });

  it('refuses a cwd under a denied path, naming it', () => {
    const error = catchError(() =>
      sandbox('required').wrap({ file: '/bin/true', args: [], cwd: state, env: {} }),
    );
    expect(error).toBeInstanceOf(SandboxError);
    expect(error).toMatchObject({ code: 'cwd_denied' });
    expect(error.message).toBe(`cwd: ${state} is under the denied path ${state}`);
  });
});

describe.skipIf(!linux)('what runs unconfined later stays read-only in the cwd', () => {
  // A stop hook or Claude Code runs .claude/settings*.json hooks and .git/hooks unconfined.
  it('cannot create .claude, nor write git hooks or git config; the rest of the cwd is writable', async () => {
    const project = join(root, 'project');
    mkdirSync(join(project, '.git', 'hooks'), { recursive: true });
    writeFileSync(join(project, '.git', 'config'), '[core]\n');
    const ran = await run(
      sandbox('required').wrap({
        file: '/bin/sh',
        args: [
          '-c',
          'mkdir -p .claude; echo "{}" > .claude/settings.json; echo evil > .git/hooks/pre-commit; ' +
            'echo "[core] fsmonitor = evil" >> .git/config; echo ok > file.txt; echo x > .git/HEAD; echo done',
        ],
        cwd: project,
        env: process.env,
      }),
    );
    expect(ran.stdout).toBe('done\n');
    expect(ran.stderr).toMatch(/\.claude\/settings\.json: Read-only file system/);
    expect(readdirSync(join(project, '.git', 'hooks'))).toEqual([]);
    expect(readFileSync(join(project, '.git', 'config'), 'utf8')).toBe('[core]\n');
    expect(readdirSync(join(project, '.claude'))).toEqual([]);
    expect(readFileSync(join(project, 'file.txt'), 'utf8')).toBe('ok\n');
    expect(readFileSync(join(project, '.git', 'HEAD'), 'utf8')).toBe('x\n');
  });

  // git reads another config through them; the user's next `git status` runs its fsmonitor.
  it('cannot point git at another config (commondir, config.worktree, a submodule git dir); a commit still works', async () => {
    const project = join(root, 'git-project');
    mkdirSync(project);
    const git = (...args: string[]) =>
      spawnSync('git', ['-c', 'user.name=t', '-c', 'user.email=t@t', ...args], {
        cwd: project,
        encoding: 'utf8',
      });
    expect(git('init', '-q').status).toBe(0);
    writeFileSync(join(project, 'a.txt'), 'a\n');
    const wrapped = sandbox('required').wrap({
      file: '/bin/sh',
      args: [
        '-c',
        'git add a.txt && git -c user.name=t -c user.email=t@t commit -qm first && echo committed; ' +
          'echo /elsewhere > .git/commondir; printf "[core]\\n\\tfsmonitor = evil\\n" > .git/config.worktree; ' +
          'mkdir -p .git/modules/m; echo x > .git/modules/m/config',
      ],
      cwd: project,
      env: process.env,
    });
    const ran = await run(wrapped);
    wrapped.release();
    expect(ran.stdout).toBe('committed\n');
    expect(ran.stderr).toMatch(/commondir: Read-only file system/);
    const left = readdirSync(join(project, '.git'));
    expect(left).not.toContain('commondir');
    expect(left).not.toContain('config.worktree');
    expect(left).not.toContain('modules');
    expect(git('log', '--format=%s').stdout).toBe('first\n');
  });

  it('cannot change an existing .claude/settings.json', async () => {
    const project = join(root, 'claude-project');
    mkdirSync(join(project, '.claude'), { recursive: true });
    writeFileSync(join(project, '.claude', 'settings.json'), '{}\n');
    const ran = await run(
      sandbox('required').wrap({
        file: '/bin/sh',
        args: ['-c', 'echo "{\\"hooks\\": 1}" > .claude/settings.json; echo x > .claude/settings.local.json'],
        cwd: project,
        env: process.env,
      }),
    );
    expect(ran.stderr).toMatch(/Read-only file system/);
    expect(readdirSync(join(project, '.claude'))).toEqual(['settings.json']);
    expect(readFileSync(join(project, '.claude', 'settings.json'), 'utf8')).toBe('{}\n');
  });
});

describe.skipIf(!linux)('denied paths inside denied dirs, outside /tmp (the default state dir)', () => {
  // The server denies its state dir and the session store inside it; a user may list nested paths.
  const nested = () =>
    createSandbox(
      {
        network: 'off',
        denyRead: [join(root, 'secrets', 'inner'), state, join(state, 'sessions'), join(root, 'secrets')],
      },
      { mode: 'required', home },
    );

  it('runs commands, and hides the nested paths', async () => {
    const ran = await run(
      nested().wrap({
        file: '/bin/sh',
        args: ['-c', `echo ok; cat ${state}/sessions/log.jsonl ${root}/secrets/inner/key; ls ${state}`],
        cwd: work,
        env: process.env,
      }),
    );
    expect(ran.stderr).not.toMatch(/bwrap/);
    expect(ran.stdout).toBe('ok\n');
    expect(ran.stderr).toMatch(/log.jsonl: No such file/);
  });
});

describe.skipIf(!linux)('mode off: the same commands run unconfined', () => {
  it('reports backend none and why', () => {
    const off = sandbox('off');
    expect(off.backend).toBe('none');
    expect(off.unconfinedReason).toBe('sandbox mode is off');
  });

  it('writes outside the cwd and reads the state dir', async () => {
    const ran = await sh('off', `echo out > ../outside-off.txt && cat ${state}/token`);
    expect(ran.code).toBe(0);
    expect(ran.stdout).toBe('gateway-token-123\n');
    expect(readFileSync(join(root, 'outside-off.txt'), 'utf8')).toBe('out\n');
  });

  it('still strips ALEPH_TOKEN and the provider key, keeps the rest', async () => {
    const ran = await sh('off', 'env');
    expect(ran.stdout).not.toMatch(/aleph-token-secret|provider-key-secret/);
    expect(ran.stdout).toMatch(/^OPENAI_API_KEY=openai-key-secret$/m);
  });

  it('reaches the host loopback', async () => {
    const ran = await run(
      sandbox('off').wrap({
        file: process.execPath,
        args: [
          '-e',
          `require('net').connect(${port}, '127.0.0.1').on('data', (d) => process.stdout.write('got ' + d))`,
        ],
        cwd: work,
        env: process.env,
      }),
    );
    expect(ran.stdout).toBe('got hello\n');
  });

  it.skipIf(!runWritable)('reaches a unix socket under /run', async () => {
    const ran = await run(sandbox('off').wrap(unixConnect()));
    expect(ran.stdout).toBe('got hello\n');
  });

  it('lets a setsid escapee outlive the command (which is why the sandbox matters)', async () => {
    const marker = String(900_000 + Math.floor(Math.random() * 99_999));
    await sh('off', escapee(marker));
    try {
      await waitFor(() => sleepers(marker).length === 1);
    } finally {
      for (const pid of sleepers(marker)) process.kill(pid, 'SIGKILL');
    }
  });
});

describe('bad input', () => {
  let fake = '';
  afterEach(() => rmSync(fake, { force: true, recursive: true }));

  it('a deny_read path that does not exist names the key', () => {
    const error = catchError(() =>
      createSandbox({ network: 'off', denyRead: ['/nonexistent/secrets'] }, { mode: 'off', home }),
    );
    expect(error).toMatchObject({
      code: 'path_missing',
      message: 'deny_read: /nonexistent/secrets does not exist',
    });
  });

  it('a deny_read outside the filesystem names the key', () => {
    for (const path of ['relative/dir', '/', '/proc/1/environ']) {
      const error = catchError(() =>
        createSandbox({ network: 'off', denyRead: [path] }, { mode: 'auto', home }),
      );
      expect(error).toMatchObject({ code: 'path_invalid' });
      expect(error.message).toMatch(new RegExp(`^deny_read: "${path.replace(/\//g, '\\/')}" is not a path`));
    }
  });

  it.skipIf(!linux)(
    'bwrap present but failing: required throws the cause, auto runs unconfined and says why',
    () => {
      fake = mkdtempSync('/var/tmp/aleph-fake-bwrap-');
      const bwrapPath = join(fake, 'bwrap');
      writeFileSync(
        bwrapPath,
        '#!/bin/sh\necho "bwrap: No permissions to create a new namespace" >&2\nexit 1\n',
      );
      chmodSync(bwrapPath, 0o755);
      const error = catchError(() =>
        createSandbox({ network: 'off' }, { mode: 'required', bwrapPath, home }),
      );
      expect(error).toMatchObject({
        code: 'backend_failed',
        message: `${bwrapPath} fails to start a sandbox: bwrap: No permissions to create a new namespace`,
      });
      const auto = createSandbox({ network: 'off' }, { mode: 'auto', bwrapPath, home });
      expect(auto.backend).toBe('none');
      expect(auto.unconfinedReason).toMatch(/No permissions to create a new namespace/);
    },
  );

  it.skipIf(!linux)('a policy bwrap cannot apply fails at creation, not on every command', () => {
    fake = mkdtempSync('/var/tmp/aleph-fake-bwrap-');
    const bwrapPath = join(fake, 'bwrap');
    // Starts a bare sandbox, but fails on any command with a cwd: only the real policy's probe sees it.
    writeFileSync(
      bwrapPath,
      '#!/bin/sh\ncase "$*" in *--bind*) echo "bwrap: Can\'t mkdir /x/sessions: Read-only file system" >&2; exit 1;; esac\n',
    );
    chmodSync(bwrapPath, 0o755);
    const error = catchError(() =>
      createSandbox({ network: 'off', denyRead: [state] }, { mode: 'required', bwrapPath, home }),
    );
    expect(error).toMatchObject({
      code: 'backend_failed',
      message: `${bwrapPath} fails to apply the sandbox policy: bwrap: Can't mkdir /x/sessions: Read-only file system`,
    });
    expect(createSandbox({ network: 'off' }, { mode: 'auto', bwrapPath, home }).backend).toBe('none');
  });

  it.skipIf(!linux)(
    'a bwrap that cannot size a tmpfs (before 0.8) still confines, and says /tmp has no size',
    async () => {
      fake = mkdtempSync('/var/tmp/aleph-fake-bwrap-');
      const bwrapPath = join(fake, 'bwrap');
      const real = spawnSync('sh', ['-c', 'command -v bwrap'], { encoding: 'utf8' }).stdout.trim();
      writeFileSync(
        bwrapPath,
        `#!/bin/sh\ncase "$*" in *--size*) echo "bwrap: Unknown option --size" >&2; exit 1;; esac\nexec ${real} "$@"\n`,
      );
      chmodSync(bwrapPath, 0o755);
      const box = createSandbox(
        { network: 'off', limits: { tmpBytes: 4096 } },
        { mode: 'required', bwrapPath, home },
      );
      expect(box.backend).toBe('bubblewrap');
      expect(box.limits.tmpBy).toBe('none');
      expect(box.limits.note).toMatch(
        /this bwrap cannot size a tmpfs \(--size, bubblewrap 0\.8\): \/tmp and \/dev\/shm have no size limit/,
      );
      const ran = await run(
        box.wrap({
          file: '/bin/sh',
          args: ['-c', 'head -c 100000 /dev/zero > /tmp/f && echo written; touch /run/x'],
          cwd: work,
          env: process.env,
        }),
      );
      expect(ran.stdout).toBe('written\n');
      expect(ran.stderr).toMatch(/Read-only file system/);
      expect(sandbox('required').limits.tmpBy).toBe('size');
    },
  );

  it('a limit that is not a positive integer names the key', () => {
    for (const [key, value] of [
      ['processes', 0],
      ['memoryBytes', -1],
      ['fileSizeBytes', 1.5],
      ['cpuSeconds', Number.NaN],
      ['tmpBytes', 0],
      ['processes', 2 ** 60],
    ] as const) {
      const error = catchError(() =>
        createSandbox({ network: 'off', limits: { [key]: value } }, { mode: 'off', home }),
      );
      expect(error).toBeInstanceOf(SandboxError);
      expect(error).toMatchObject({
        code: 'limit_invalid',
        message: `limits.${key}: must be a positive integer, not ${String(value)}`,
      });
    }
  });

  it('a read_only path that is not absolute names the key', () => {
    const error = catchError(() =>
      createSandbox({ network: 'off', readOnly: ['hooks/extra.json'] }, { mode: 'off', home }),
    );
    expect(error).toMatchObject({
      code: 'path_invalid',
      message: 'read_only: "hooks/extra.json" is not an absolute path',
    });
  });

  it('a denied file with another hard link is refused, naming it', () => {
    fake = mkdtempSync('/var/tmp/aleph-linked-');
    writeFileSync(join(fake, 'key'), 'secret\n');
    linkSync(join(fake, 'key'), join(fake, 'key-too'));
    const error = catchError(() =>
      createSandbox({ network: 'off', denyRead: [join(fake, 'key')] }, { mode: 'off', home }),
    );
    expect(error).toMatchObject({
      code: 'path_linked',
      message: `deny_read: ${join(fake, 'key')} has 2 hard links: another name for it would stay readable; remove the extra links`,
    });
  });

  it.skipIf(!linux)('a cwd that is missing or a file is refused, naming it', () => {
    fake = mkdtempSync('/var/tmp/aleph-cwd-');
    writeFileSync(join(fake, 'file'), '');
    for (const cwd of [join(fake, 'absent'), join(fake, 'file')]) {
      const error = catchError(() => sandbox('required').wrap({ file: '/bin/true', args: [], cwd, env: {} }));
      expect(error).toBeInstanceOf(SandboxError);
      expect(error).toMatchObject({ code: 'cwd_missing', message: `cwd: ${cwd} is not a directory` });
    }
  });

  it.skipIf(!linux)(
    'a cwd of /, in a system folder, holding home folders or a shared temporary folder ($TMPDIR too) is refused: it would be writable inside',
    () => {
      // $TMPDIR: a folder of the test's own, made the shared temporary folder for the check.
      const sharedTemp = realpathSync(mkdtempSync(join(root, 'tmpdir-')));
      const cases = [
        ['/', 'cwd: / is the root folder: the cwd is writable inside; choose a project directory'],
        [
          '/usr/bin',
          'cwd: /usr/bin is in the system folder /usr: the cwd is writable inside; choose a project directory',
        ],
        [
          '/etc',
          'cwd: /etc is in the system folder /etc: the cwd is writable inside; choose a project directory',
        ],
        [
          '/tmp',
          'cwd: /tmp is a temporary folder all programs share: the cwd stands for the private /tmp and is writable inside; choose a folder in it',
        ],
        [
          '/var/tmp',
          'cwd: /var/tmp is a temporary folder all programs share: the cwd stands for the private /tmp and is writable inside; choose a folder in it',
        ],
        [
          '/run',
          'cwd: /run is in the system folder /run: the cwd is writable inside; choose a project directory',
        ],
        [
          '/home',
          "cwd: /home is a folder holding other people's folders: the cwd is writable inside; choose a project directory",
        ],
        [
          sharedTemp,
          `cwd: ${sharedTemp} is a temporary folder all programs share: the cwd stands for the private /tmp and is writable inside; choose a folder in it`,
        ],
      ];
      const saved = process.env['TMPDIR'];
      process.env['TMPDIR'] = sharedTemp;
      try {
        for (const [cwd, message] of cases) {
          const error = catchError(() =>
            sandbox('required').wrap({ file: '/bin/true', args: [], cwd: cwd!, env: {} }),
          );
          expect(error).toMatchObject({ code: 'cwd_denied', message });
        }
      } finally {
        if (saved === undefined) delete process.env['TMPDIR'];
        else process.env['TMPDIR'] = saved;
      }
      // Unconfined, nothing is made writable: the cwd is the caller's business.
      expect(sandbox('off').wrap({ file: '/bin/true', args: [], cwd: '/', env: {} }).cwd).toBe('/');
    },
  );

  it.skipIf(!linux)('no bwrap at all: required names the package to install', () => {
    const error = catchError(() =>
      createSandbox({ network: 'off' }, { mode: 'required', env: { PATH: '' }, home }),
    );
    expect(error).toMatchObject({ code: 'backend_missing' });
    expect(error.message).toMatch(/^bwrap not found on PATH: install bubblewrap/);
  });
});

function catchError(work: () => unknown): Error & { code?: string } {
  try {
    work();
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected an error');
}

/** Starts `setsid sleep <marker>` and returns once it runs: setsid calls setsid() and then execs sleep
 * in the same pid, so a cmdline that starts with `sleep` has left the session. */
const escapee = (marker: string): string =>
  `setsid sleep ${marker} >/dev/null 2>&1 & until grep -qa ^sleep /proc/$!/cmdline; do :; done; echo started`;

/** Pids of `sleep <marker>` processes, from /proc. */
function sleepers(marker: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (cmdline === `sleep\0${marker}\0` && !/\) Z /.test(stat)) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

async function waitFor(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}
