import { once } from 'node:events';
import { spawn } from 'node:child_process';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connectGateway } from '@aleph/gateway/client';
import { PtySession } from '@aleph/pty';
import { afterEach, expect, it } from 'vitest';
import { WebSocket, WebSocketServer, type RawData } from 'ws';
import { startFakeLlm, writeCatStop, type FakeLlm } from '../test/fake-llm.js';
import { CLI, MAIN, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';

let server: ServerProcess | undefined;
afterEach(async () => {
  await server?.stop();
  if (server) rmSync(server.stateDir, { recursive: true, force: true });
});

it('`aleph attach` replays the scrollback, forwards keystrokes in raw mode and detaches with Ctrl-]', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  const { sessionId } = await client.spawn({
    command: '/bin/bash',
    args: ['--norc', '--noprofile'],
    cols: 80,
    rows: 24,
  });
  await client.input(sessionId, 'echo before-attach\r');
  await new Promise((r) => setTimeout(r, 300));

  // The CLI needs a real terminal for raw mode: run it inside a pty of its own.
  const terminal = PtySession.spawn({
    command: process.execPath,
    args: [CLI, 'attach', sessionId],
    env: { ALEPH_URL: server.url, ALEPH_TOKEN: server.token },
    cols: 100,
    rows: 30,
    cwd: resolve(import.meta.dirname, '..'),
  });
  let screen = '';
  terminal.onData((chunk) => (screen += chunk.toString()));
  await expect.poll(() => screen, { timeout: 20_000 }).toMatch(/[\r\n]before-attach\r+\n/);
  terminal.write('echo typed-through-attach\r');
  await expect.poll(() => screen, { timeout: 20_000 }).toMatch(/[\r\n]typed-through-attach\r+\n/);
  terminal.write('stty size\r');
  await expect.poll(() => screen, { timeout: 20_000 }).toMatch(/[\r\n]30 100\r+\n/); // resized to the attaching terminal
  // Another viewer (a console page) sizes it for its window; typing here after a pause takes it
  // back: the viewer used last sets the size (tmux's window-size latest).
  await client.resize(sessionId, 50, 20);
  await client.input(sessionId, 'stty size\r');
  await expect.poll(() => screen, { timeout: 20_000 }).toMatch(/[\r\n]20 50\r+\n/);
  await new Promise((pause) => setTimeout(pause, 1100)); // the pause (over 1 s) that makes typing "latest"
  terminal.write('stty size; echo typed-""again\r');
  await expect.poll(() => screen, { timeout: 20_000 }).toMatch(/[\r\n]30 100\r+\ntyped-again/);
  terminal.write('\x1d');
  expect(await terminal.exited).toMatchObject({ exitCode: 0 });
  expect(screen).toContain('[aleph: detached]');
  // Detaching leaves the terminal running.
  expect((await client.list()).map((s) => s.sessionId)).toContain(sessionId);
  await client.close();
}, 150_000); // a server and the CLI start, six round trips: minutes on a loaded machine

/** A WebSocket proxy that holds back agent.run's answer, so the run's events reach the CLI first. */
async function replyDelayingProxy(
  upstreamUrl: string,
  delayMs: number,
): Promise<{ url: string; close(): Promise<void> }> {
  const proxy = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await once(proxy, 'listening');
  proxy.on('connection', (downstream, request) => {
    const upstream = new WebSocket(
      upstreamUrl,
      request.headers['sec-websocket-protocol']?.split(/,\s*/) ?? [],
      {
        headers: { authorization: request.headers.authorization ?? '' },
      },
    );
    const queued: [RawData, boolean][] = [];
    upstream.on('open', () => queued.splice(0).forEach(([data, binary]) => upstream.send(data, { binary })));
    downstream.on('message', (data, binary) =>
      upstream.readyState === WebSocket.OPEN ? upstream.send(data, { binary }) : queued.push([data, binary]),
    );
    upstream.on('message', (data, binary) => {
      const held = !binary && /"result":\{"runId"/.test(data.toString());
      setTimeout(
        () => downstream.readyState === WebSocket.OPEN && downstream.send(data, { binary }),
        held ? delayMs : 0,
      );
    });
    downstream.on('close', () => upstream.close());
    upstream.on('close', () => downstream.close());
  });
  const { port } = proxy.address() as AddressInfo;
  return {
    url: `ws://127.0.0.1:${port}`,
    close: () => new Promise((done) => proxy.close(() => done())),
  };
}

it('`aleph run` never drops the events that arrive before agent.run answers (a run over in milliseconds)', async () => {
  const llm = await startFakeLlm(() => ({ text: 'instant answer\nVERDICT: PASS' }));
  const work = mkdtempSync(join(tmpdir(), 'aleph-cli-instant-'));
  server = await startServerProcess(
    `[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n[agent]\nprovider = "openai-compatible"\nmodel = "m"\nbase_url = "${llm.baseUrl}"\n`,
  );
  const proxy = await replyDelayingProxy(server.url, 1500);
  try {
    const result = await runToExit([CLI, 'run', 'answer at once', '--cwd', work], {
      ALEPH_URL: proxy.url,
      ALEPH_TOKEN: server.token,
    });
    expect(result.stdout).toContain('instant answer');
    expect(result.stdout).toMatch(
      /done: the model stopped \(1 turn, \d+\.\d s, 19 tokens\) · the model's verdict PASS/,
    );
    expect(result.code).toBe(0);
  } finally {
    await proxy.close();
    await llm.close();
    rmSync(work, { recursive: true, force: true });
  }
});

it('`aleph run` says what happened: a failing shell command, a hook error, a veto, a provider error', async () => {
  const work = mkdtempSync(join(tmpdir(), 'aleph-cli-transcript-'));
  writeFileSync(
    join(work, 'lint.sh'),
    '#!/bin/sh\necho "lint: src/app.ts:3: missing semicolon" >&2\nexit 1\n',
  );
  writeFileSync(
    join(work, 'tests.sh'),
    '#!/bin/sh\necho "2 tests failed: run pnpm test and fix them" >&2\nexit 2\n',
  );
  chmodSync(join(work, 'lint.sh'), 0o755);
  chmodSync(join(work, 'tests.sh'), 0o755);
  const llm: FakeLlm = await startFakeLlm((conversation) => {
    const last = conversation.at(-1);
    if (last?.role === 'user' && conversation.filter((turn) => turn.role === 'user').length === 1)
      return { text: 'Running the build first.', call: { name: 'shell', args: { command: 'make build' } } };
    if (last?.role === 'tool')
      return { text: 'The build needs a Makefile; nothing else to do.\nVERDICT: PARTIAL' };
    // The hook's feedback came back: the next request meets a revoked key.
    llm.failNext({ status: 401, message: 'Incorrect API key provided', code: 'invalid_api_key' });
    return { text: 'Looking at the tests.', call: { name: 'list_files', args: {} } };
  });
  server = await startServerProcess(
    `[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\n` +
      `[[stop_hooks]]\nname = "lint"\ncommand = "${join(work, 'lint.sh')}"\n[[stop_hooks]]\nname = "tests"\ncommand = "${join(work, 'tests.sh')}"\n`,
  );
  try {
    const result = await runToExit([CLI, 'run', 'build the project', '--cwd', work], {
      ALEPH_URL: server.url,
      ALEPH_TOKEN: server.token,
    });
    if (process.env['ALEPH_PRINT_TRANSCRIPT']) console.log(result.stdout);
    expect(result.stdout).toMatch(/✗ shell → exit code \d+ · .*make/);
    expect(result.stdout).toContain('turn 1: 1 tool call (1 failed)');
    expect(result.stdout).toMatch(
      /⚠ Stop hook "lint" failed \(exit code 1\): .*lint: src\/app\.ts:3: missing semicolon/,
    );
    expect(result.stdout).toMatch(/⚑ veto by stop_hooks: stop hook "tests" .*2 tests failed/);
    expect(result.stdout).toMatch(
      /ended: provider error: .*HTTP 401: Incorrect API key provided.* \(4 turns, /,
    );
    expect(result.code).toBe(1);
  } finally {
    await llm.close();
    rmSync(work, { recursive: true, force: true });
  }
});

it('aleph --version and aleph-server --version print the package version', async () => {
  const { version } = JSON.parse(readFileSync(resolve(import.meta.dirname, '../package.json'), 'utf8')) as {
    version: string;
  };
  for (const args of [
    [CLI, '--version'],
    [MAIN, '--version'],
    [CLI, '-v'],
  ]) {
    const result = await runToExit(args, {});
    expect(result.stdout).toBe(`${version}\n`);
    expect(result.code).toBe(0);
  }
});

it('bad input gets one line naming the thing and a non-zero exit, never a stack trace', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'aleph-cli-bad-'));
  writeFileSync(join(dir, 'a-file'), '');
  // A server.json left by a server that has exited.
  const gone = spawn(process.execPath, ['-e', '']);
  await once(gone, 'exit');
  writeFileSync(
    join(dir, 'server.json'),
    JSON.stringify({ url: 'ws://127.0.0.1:1', token: 'x'.repeat(24), pid: gone.pid }),
  );
  const env = { ALEPH_STATE_DIR: dir, ALEPH_URL: undefined, ALEPH_TOKEN: undefined, INIT_CWD: undefined };
  const cases: [string[], RegExp][] = [
    [['run', 'hi', '--cwd', join(dir, 'nope')], /^aleph run: --cwd \S+nope does not exist\n$/],
    [['run', 'hi', '--cwd', join(dir, 'a-file')], /^aleph run: --cwd \S+a-file is not a directory\n$/],
    [['run', '  '], /^aleph run: the prompt is empty\n$/],
    [['run', 'hi', '--bogus'], /^aleph: Unknown option '--bogus'.*\nusage:/],
    [['sessions'], new RegExp(`^aleph: no server running \\(the last one, pid ${gone.pid}, has exited\\)`)],
    [['run'], /^aleph run: missing the prompt\nusage:/],
    [['attach'], /^aleph attach: missing the terminal id\nusage:/],
  ];
  try {
    for (const [args, expected] of cases) {
      const result = await runToExit([CLI, ...args], env, { cwd: dir });
      expect(result.stderr).toMatch(expected);
      expect(result.stderr).not.toMatch(/\n\s+at /);
      expect(result.code).not.toBe(0);
    }
    // No server.json where this CLI looks: it says where that is.
    const empty = join(dir, 'empty-state');
    mkdirSync(empty);
    const none = await runToExit([CLI, 'sessions'], { ...env, ALEPH_STATE_DIR: empty }, { cwd: dir });
    expect(none.stderr).toBe(
      `aleph: no server to connect to: none has written ${join(empty, 'server.json')} (a server started with another ALEPH_STATE_DIR writes it there); start one with \`pnpm start\`, or pass --url and --token\n`,
    );
    const server = await runToExit([MAIN, '--config', dir], env);
    expect(server.stderr).toContain(`config file ${dir} is a directory, not a file`);
    expect(server.code).toBe(2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

it('the CLI sends the directory it was run in (or INIT_CWD under pnpm); a run without one is refused', async () => {
  const llm = await startFakeLlm(writeCatStop);
  const here = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-cli-here-')));
  const elsewhere = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-cli-elsewhere-')));
  server = await startServerProcess(
    `[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n[agent]\nprovider = "openai-compatible"\nmodel = "m"\nbase_url = "${llm.baseUrl}"\n`,
  );
  const env = { ALEPH_URL: server.url, ALEPH_TOKEN: server.token, INIT_CWD: undefined };
  try {
    // The bin run from any folder: `node …/dist/cli.js` (what a global link runs).
    let result = await runToExit([CLI, 'run', 'create the file here.txt'], env, { cwd: here });
    expect(result.code).toBe(0);
    expect(readFileSync(join(here, 'here.txt'), 'utf8')).toBe('hello from here.txt\n');
    // Under `pnpm -C <repo> aleph`, the process runs in the repository; INIT_CWD is the user's folder.
    result = await runToExit(
      [CLI, 'run', 'create the file init.txt', '--cwd', 'sub'],
      { ...env, INIT_CWD: here },
      { cwd: elsewhere },
    );
    expect(result.stderr).toMatch(/--cwd \S+\/sub does not exist/);
    mkdirSync(join(here, 'sub'));
    result = await runToExit(
      [CLI, 'run', 'create the file init.txt', '--cwd', 'sub'],
      { ...env, INIT_CWD: here },
      { cwd: elsewhere },
    );
    expect(result.code).toBe(0);
    expect(existsSync(join(here, 'sub', 'init.txt'))).toBe(true);
    expect(readdirSync(elsewhere)).toEqual([]);

    // A model the provider rejects: one line that names it, exit 1.
    llm.failNext({
      status: 404,
      message: 'The model `no-such-model` does not exist',
      code: 'model_not_found',
    });
    result = await runToExit([CLI, 'run', 'hi', '--model', 'no-such-model'], env, { cwd: here });
    expect(result.stdout).toMatch(
      /\nended: provider error: .*The model `no-such-model` does not exist.* \(\d+ turns?, /,
    );
    expect(result.code).toBe(1);

    const client = await connectGateway(server.url, { token: server.token });
    await expect(client.request('agent.run', { prompt: 'no directory' })).rejects.toMatchObject({
      code: 'invalid_params',
      message: expect.stringContaining('params.cwd is required'),
    });
    await expect(client.request('agent.run', { prompt: 'relative', cwd: 'sub' })).rejects.toMatchObject({
      code: 'invalid_params',
      message: 'params.cwd: sub is not an absolute path',
    });
    await client.close();
  } finally {
    await llm.close();
    rmSync(here, { recursive: true, force: true });
    rmSync(elsewhere, { recursive: true, force: true });
  }
});
