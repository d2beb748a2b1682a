// `pnpm start` is the whole product: the real script, from the repository root, as the README says.
// It builds what the server needs, prints the console URL, serves the console at /, and gives its
// children the user's environment — not pnpm's PATH (Aleph's own node_modules/.bin first) nor its
// npm_* variables — with new terminals in $HOME.
import { spawn, type ChildProcess } from 'node:child_process';
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join, resolve } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startFakeLlm, type FakeLlm } from '../test/fake-llm.js';
import { userEnvironment } from './user-environment.js';

const REPO = resolve(import.meta.dirname, '../../..');
let root: string;
let llm: FakeLlm;
let server: ChildProcess | undefined;
let client: GatewayClient | undefined;
beforeAll(async () => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-pnpm-start-')));
  llm = await startFakeLlm(() => ({ text: 'nothing to do\nVERDICT: PASS' }));
});
afterAll(async () => {
  await stopServer();
  await llm.close();
  rmSync(root, { recursive: true, force: true });
});

/** The user's shell: no runner's variables, no node_modules/.bin (this test may itself run under pnpm). */
function userShell(home: string, userBin?: string): NodeJS.ProcessEnv {
  const shellPath = (process.env['PATH'] ?? '')
    .split(delimiter)
    .filter((entry) => !/node_modules[\\/]\.bin|node-gyp-bin/.test(entry));
  const env: NodeJS.ProcessEnv = Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !/^(npm_|pnpm_|INIT_CWD$|PNPM_SCRIPT_SRC_DIR$|VITEST|NODE_ENV$|TURBO_)/.test(name),
    ),
  );
  return Object.assign(env, {
    PATH: [...(userBin === undefined ? [] : [userBin]), ...shellPath].join(delimiter),
    HOME: home,
    ALEPH_STATE_DIR: join(root, 'state'),
  });
}

/** Runs pnpm as the user would, in its own process group; answers its output once the server is up. */
async function pnpmStart(args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<string> {
  server = spawn('pnpm', args, { cwd, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  server.stdout!.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  server.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise<number | null>((done) => server!.once('exit', done));
  const started = await Promise.race([
    (async () => {
      while (!/^console: \S+/m.test(stdout) || !/^(provider: |no LLM provider configured)/m.test(stdout))
        await new Promise((wait) => setTimeout(wait, 100));
      return true;
    })(),
    exited.then(() => false),
  ]);
  expect(started, `pnpm ${args.join(' ')} ended early:\n${stdout}\n${stderr}`).toBe(true);
  expect(`${stdout}${stderr}`).not.toMatch(/collects .*telemetry/i); // Turborepo's notice: it is off
  return stdout;
}

/** Stops the server started by pnpmStart: its process group (pnpm, turbo's children, the server). */
async function stopServer(): Promise<void> {
  await client?.close();
  client = undefined;
  if (server?.pid !== undefined && server.exitCode === null && server.signalCode === null) {
    const exited = new Promise((done) => server!.once('exit', done));
    process.kill(-server.pid, 'SIGTERM');
    await exited;
  }
  server = undefined;
}

it('userEnvironment drops only what a runner added; without a runner nothing changes', () => {
  const user = {
    PATH: `/home/u/bin${delimiter}/usr/bin`,
    HOME: '/home/u',
    NPM_TOKEN: 't',
    NODE: '/opt/node',
  };
  expect(userEnvironment(user)).toEqual({ env: user, removed: [] });
  const underPnpm = {
    ...user,
    PATH: [
      '/r/apps/server/node_modules/.bin',
      '/r/node_modules/.bin',
      '/p/dist/node-gyp-bin',
      user.PATH,
    ].join(delimiter),
    npm_lifecycle_event: 'start',
    npm_config_user_agent: 'pnpm/10',
    npm_node_execpath: '/usr/bin/node',
    pnpm_config_verify_deps_before_run: 'false',
    PNPM_SCRIPT_SRC_DIR: '/r',
    INIT_CWD: '/r',
    _: '/usr/bin/pnpm',
  };
  expect(userEnvironment(underPnpm).env).toEqual(user); // NPM_TOKEN and the user's own NODE kept
  // A node_modules/.bin the user put later in PATH is theirs: only the leading run is the runner's.
  const later = {
    ...underPnpm,
    PATH: `/r/node_modules/.bin${delimiter}/home/u/bin${delimiter}/w/node_modules/.bin`,
  };
  expect(userEnvironment(later).env['PATH']).toBe(`/home/u/bin${delimiter}/w/node_modules/.bin`);
});

it(
  'from the repository root: builds, prints the console URL, serves it at /, and terminals and hooks get the user environment',
  { timeout: 300_000 },
  async () => {
    const home = join(root, 'home');
    const userBin = join(root, 'user-bin'); // the user's own tsc, first on their PATH
    const project = join(root, 'project');
    mkdirSync(home);
    mkdirSync(userBin);
    writeFileSync(join(userBin, 'tsc'), '#!/bin/sh\necho the-users-tsc\n');
    chmodSync(join(userBin, 'tsc'), 0o755);
    mkdirSync(join(project, '.claude'), { recursive: true });
    // A Claude Code Stop hook that records what it sees.
    writeFileSync(
      join(project, '.claude/settings.json'),
      JSON.stringify({
        hooks: {
          Stop: [
            {
              hooks: [
                {
                  type: 'command',
                  command:
                    'env > "$CLAUDE_PROJECT_DIR/hook-env.txt"; tsc >> "$CLAUDE_PROJECT_DIR/hook-env.txt"',
                },
              ],
            },
          ],
        },
      }),
    );
    // A relative entry first on the user's PATH (`bin`): looked up in each child's cwd, a run's
    // folder, where the model could have written `bin/tsc`. Dropped for every child.
    mkdirSync(join(project, 'bin'));
    writeFileSync(join(project, 'bin', 'tsc'), '#!/bin/sh\necho the-projects-tsc\n');
    chmodSync(join(project, 'bin', 'tsc'), 0o755);
    const env = userShell(home, userBin);
    env['PATH'] = `bin${delimiter}${env['PATH'] ?? ''}`;
    Object.assign(env, {
      ALEPH_PORT: '0',
      ALEPH_PROVIDER: 'openai-compatible',
      ALEPH_MODEL: 'fake',
      ALEPH_BASE_URL: llm.baseUrl,
    });
    const stdout = await pnpmStart(['start'], REPO, env);

    const consoleUrl = /^console: (\S+)/m.exec(stdout)![1]!;
    const token = decodeURIComponent(/#token=(.+)$/.exec(consoleUrl)![1]!);
    const page = await fetch(new URL('/', consoleUrl));
    expect(page.status).toBe(200);
    expect(await page.text()).toContain('<title>Aleph console</title>');

    const wsUrl = /listening on (\S+)/.exec(stdout)![1]!;
    client = await connectGateway(wsUrl, { token });
    await client.subscribe(['pty.*', 'agent.*']);
    let output = '';
    client.onOutput((chunk) => (output += chunk.data.toString()));
    // A terminal as the console opens one: no command, no cwd.
    const terminal = await client.spawn({ cols: 200, rows: 50 });
    await client.input(
      terminal.sessionId,
      'echo "cwd=$(pwd)"; echo "tsc=$(tsc)"; echo "npm-vars=$(env | grep -c ^npm_)"; echo "path=$PATH"; exit\n',
    );
    await expect.poll(() => output, { timeout: 20_000 }).toMatch(/path=\S*\r?\n/);
    expect(output).toContain(`cwd=${home}`);
    expect(output).toContain('tsc=the-users-tsc');
    expect(output).toContain('npm-vars=0');
    const terminalPath = /path=(\S*)\r?\n/.exec(output)![1]!;
    expect(terminalPath.split(delimiter)).not.toContainEqual(expect.stringContaining(REPO));

    const done = new Promise<void>((resolveDone) =>
      client!.onEvent((topic) => topic === 'agent.done' && resolveDone()),
    );
    await client.request('agent.run', { prompt: 'check', cwd: project });
    await done;
    const hookEnv = readFileSync(join(project, 'hook-env.txt'), 'utf8');
    expect(hookEnv.split('\n').filter((line) => /^(npm_|pnpm_|INIT_CWD=)/.test(line))).toEqual([]);
    expect(/^PATH=(.*)$/m.exec(hookEnv)![1]!.split(delimiter)).not.toContainEqual(
      expect.stringContaining(REPO),
    );
    expect(hookEnv).toContain('the-users-tsc');
    expect(hookEnv).not.toContain('the-projects-tsc');
    expect(/^PATH=(.*)$/m.exec(hookEnv)![1]!.split(delimiter)).not.toContain('bin');
  },
);

it(
  'from the project (`pnpm --dir <repo> start`): the aleph.toml there is read and its workdir is where terminals open',
  { timeout: 300_000 },
  async () => {
    await stopServer();
    const home = join(root, 'home2');
    const project = join(root, 'elsewhere');
    mkdirSync(home);
    mkdirSync(join(project, 'wd'), { recursive: true });
    writeFileSync(
      join(project, 'aleph.toml'),
      '[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n[agent]\nworkdir = "wd"\n',
    );
    const stdout = await pnpmStart(['--dir', REPO, 'start'], project, userShell(home));
    expect(stdout).toMatch(new RegExp(`^config: ${join(project, 'aleph.toml')}$`, 'm'));
    const token = decodeURIComponent(/#token=(.+)$/m.exec(stdout)![1]!);
    client = await connectGateway(/listening on (\S+)/.exec(stdout)![1]!, { token });
    await client.subscribe(['pty.*']);
    let output = '';
    client.onOutput((chunk) => (output += chunk.data.toString()));
    const terminal = await client.spawn({ cols: 200, rows: 50 });
    await client.input(terminal.sessionId, 'echo "cwd=$(pwd)"; exit\n');
    await expect.poll(() => output, { timeout: 20_000 }).toMatch(/cwd=\S+\r?\n/);
    expect(output).toContain(`cwd=${join(project, 'wd')}\r`);
  },
);

it.each([
  ['SIGTERM', 'a supervisor, `kill`, `timeout`'],
  ['SIGHUP', 'which pnpm does not pass on'],
] as const)(
  'a %s to pnpm alone (%s) ends the server: nothing keeps serving',
  { timeout: 300_000 },
  async (signal, _why) => {
    await stopServer();
    const home = join(root, `home-${signal}`);
    mkdirSync(home);
    const env = Object.assign(userShell(home), { ALEPH_PORT: '0' });
    const stdout = await pnpmStart(['start'], REPO, env);
    const health = new URL('/healthz', /^console: (\S+)/m.exec(stdout)![1]);
    expect((await fetch(health)).status).toBe(200);
    const exited = new Promise((done) => server!.once('exit', done));
    process.kill(server!.pid!, signal); // pnpm's own pid, not its group
    await exited;
    await expect
      .poll(
        () =>
          fetch(health).then(
            () => 'serving',
            () => 'gone',
          ),
        { timeout: 20_000 },
      )
      .toBe('gone');
  },
);
