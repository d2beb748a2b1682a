// The `aleph` client against a real server process under faults and hostile output: a server that
// dies mid-run or mid-attach, a model that prints terminal escapes, a late attach after a flood.
import { once } from 'node:events';
import { spawn } from 'node:child_process';
import type { AddressInfo } from 'node:net';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { connectGateway } from '@aleph/gateway/client';
import { PtySession } from '@aleph/pty';
import headless from '@xterm/headless';
import { afterEach, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import { restoreSequence } from './terminal-restore.js';
import { CLI, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';

let server: ServerProcess | undefined;
let llm: FakeLlm | undefined;
const dirs: string[] = [];
const terminals: PtySession[] = [];
afterEach(async () => {
  await Promise.all(terminals.splice(0).map((terminal) => terminal.close()));
  await server?.stop('SIGKILL');
  if (server) rmSync(server.stateDir, { recursive: true, force: true });
  server = undefined;
  await llm?.close();
  llm = undefined;
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

async function agentServer(brain: Brain, extra = ''): Promise<ServerProcess> {
  llm = await startFakeLlm(brain);
  server = await startServerProcess(
    `[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n[agent]\nprovider = "openai-compatible"\nmodel = "m"\nbase_url = "${llm.baseUrl}"\n${extra}`,
  );
  return server;
}

function workDir(): string {
  const dir = mkdtempSync(join(tmpdir(), 'aleph-cli-robust-'));
  dirs.push(dir);
  return dir;
}

/** The CLI in a terminal of its own (a TTY: the live ticker, raw mode). */
function inTerminal(
  args: string[],
  env: Record<string, string>,
): { screen: () => string; session: PtySession } {
  const session = PtySession.spawn({
    command: process.execPath,
    args: [CLI, ...args],
    env,
    cols: 100,
    rows: 30,
    cwd: resolve(import.meta.dirname, '..'),
  });
  terminals.push(session);
  let screen = '';
  session.onData((chunk) => (screen += chunk.toString()));
  return { screen: () => screen, session };
}

it('a server that dies mid-run or mid-attach is a lost connection: one line, exit 3, never 0 or a hang', async () => {
  const { url, token } = await agentServer((conversation) =>
    conversation.at(-1)?.role === 'user'
      ? { call: { name: 'shell', args: { command: 'sleep 20' } } }
      : { text: 'slept' },
  );
  const env = { ALEPH_URL: url, ALEPH_TOKEN: token };
  const work = workDir();
  // Piped: the run's output goes to a pipe (no ticker keeps the process alive).
  const piped = spawn(process.execPath, [CLI, 'run', 'sleep a while', '--cwd', work], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  piped.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  piped.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const pipedExit = new Promise<number | null>((done) => piped.once('exit', (code) => done(code)));
  // On a terminal: the ticker runs.
  const ticking = inTerminal(['run', 'sleep a while', '--cwd', work], env);
  // Attached to a terminal in raw mode.
  const client = await connectGateway(url, { token });
  const { sessionId } = await client.spawn({ command: '/bin/sh', cols: 80, rows: 24 });
  const attached = inTerminal(['attach', sessionId], env);

  await expect.poll(() => stdout, { timeout: 20_000 }).toContain('$ sleep 20');
  await expect.poll(() => ticking.screen(), { timeout: 20_000 }).toContain('$ sleep 20');
  await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain('detach with Ctrl-]');
  // Attached once it follows the session: then it gives the session its size.
  await expect.poll(async () => (await client.list())[0]?.cols, { timeout: 20_000 }).toBe(100);
  await client.close();
  await server!.stop('SIGKILL');

  expect(await pipedExit).toBe(3);
  const runId = /^run (\S+)/.exec(stdout)![1]!;
  expect(stderr).toBe(
    `aleph: connection to the server lost; run ${runId} state unknown — \`aleph sessions\` after a restart shows it\n`,
  );
  expect(await ticking.session.exited).toMatchObject({ exitCode: 3 });
  expect(ticking.screen()).toContain('connection to the server lost; run ');
  expect(await attached.session.exited).toMatchObject({ exitCode: 3 });
  expect(attached.screen()).toContain('[aleph: connection to the server lost]');
});

it('`aleph run` shows the control characters of model, tool and hook text instead of sending them to the terminal', async () => {
  const work = workDir();
  const hook = join(work, 'hook.sh');
  writeFileSync(hook, "#!/bin/sh\nprintf 'hook says \\033]0;pwned-title\\007 hi\\n' >&2\nexit 1\n");
  chmodSync(hook, 0o755);
  const clipboard = '\x1b]52;c;SGVsbG8=\x07'; // OSC 52: write "Hello" to the clipboard
  const { url, token } = await agentServer(
    (conversation) =>
      conversation.at(-1)?.role === 'user'
        ? { call: { name: 'shell', args: { command: `printf '${clipboard}'; echo; exit 1 # \x9b31m` } } }
        : {
            text: 'all good\x1b[2K\r  ✓ tests passed (forged)\x7f\tend\n  ✓ shell → exit code 0\nVERDICT: PASS',
          },
    `[[stop_hooks]]\nname = "noisy"\ncommand = "${hook}"\n`,
  );
  const result = await runToExit([CLI, 'run', 'print escapes', '--cwd', work], {
    ALEPH_URL: url,
    ALEPH_TOKEN: token,
  });
  expect(result.code).toBe(0);
  expect(result.stdout).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
  expect(result.stdout).toContain("$ printf '^[]52;c;SGVsbG8=^G'; echo; exit 1 # \\x9b31m"); // the command
  expect(result.stdout).toMatch(/✗ shell → .*\^\[\]52;c;SGVsbG8=\^G/); // its output
  expect(result.stdout).toContain(
    '│ all good^[[2K^M  ✓ tests passed (forged)^?\tend\n│   ✓ shell → exit code 0\n│ VERDICT: PASS',
  ); // the final text
  // No line of the model's text starts where aleph's own lines do.
  for (const line of result.stdout.split('\n')) expect(line).not.toMatch(/^(\s*✓|VERDICT)/);
  expect(result.stdout).toMatch(/⚠ .*noisy.*hook says \^\[\]0;pwned-title\^G hi/); // the hook's stderr
});

it('`aleph run` in a terminal: a model-chosen tool name in the live status line is shown, never sent raw', async () => {
  const work = workDir();
  // OSC 52 (clipboard write), OSC 0 (window title), a screen clear, C1 CSI, a newline to forge a line.
  const name = 'x\x1b]52;c;cHduZWQ=\x07\x1b]0;pwned\x07\x1b[2J\x9b31m\nforged';
  const { url, token } = await agentServer((conversation) =>
    conversation.at(-1)?.role === 'user'
      ? {
          calls: [
            { name, args: {} },
            { name: 'shell', args: { command: 'sleep 1.5' } },
          ],
        }
      : { text: 'done\nVERDICT: PASS' },
  );
  const { screen, session } = inTerminal(['run', 'hostile names', '--cwd', work], {
    ALEPH_URL: url,
    ALEPH_TOKEN: token,
    TERM: 'xterm',
  });
  const exit = await session.exited;
  expect(exit.exitCode).toBe(0);
  const out = screen();
  expect(out).toContain('running shell'); // the status line was drawn while the calls ran
  expect(out).not.toMatch(/\x1b\][0-9]/); // no OSC of any kind reached the terminal
  expect(out).not.toContain('\x1b[2J');
  expect(out).not.toMatch(/[\x80-\x9f]/);
  expect(out).toContain('x^[]52;c;cHduZWQ=^G^[]0;pwned^G^[[2J\\x9b31m^Jforged');
});

it('`aleph attach` after a full-screen flood shows the screen (pty.snapshot), not the raw scrollback', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  const { sessionId } = await client.spawn({
    command: '/bin/bash',
    args: ['--norc', '--noprofile'],
    cols: 100,
    rows: 30,
  });
  await client.call('pty.snapshot', { sessionId }); // someone watched it (the console does this)
  let tail = '';
  await client.subscribe(['pty.*'], [sessionId]);
  await client.follow(sessionId, 0, (data) => (tail = (tail + data.toString()).slice(-200)));
  // A vim-like session: the alternate screen, over 1 MiB of output, then back; then a marker.
  await client.input(
    sessionId,
    "printf '\\033[?1049h'; seq 1 250000; printf '\\033[?1049l'; echo after-$((1+1))\r",
  );
  await expect.poll(() => tail, { timeout: 60_000 }).toMatch(/after-2\r\n/);
  expect((await client.list()).find((s) => s.sessionId === sessionId)!.outputOffset).toBeGreaterThan(1 << 20);

  const attached = inTerminal(['attach', sessionId], { ALEPH_URL: server.url, ALEPH_TOKEN: server.token });
  await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain('detach with Ctrl-]');
  await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain('after-2');
  expect(attached.screen()).not.toMatch(/24999\d/); // none of the full-screen program's output
  expect(attached.screen().length).toBeLessThan(64 * 1024);
  attached.session.write('\x1d');
  expect(await attached.session.exited).toMatchObject({ exitCode: 0 });
  await client.close();
});

it('`aleph attach` gives the terminal back in its own modes however it ends: detach, the end, a signal, a lost server', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  const env = { ALEPH_URL: server.url, ALEPH_TOKEN: server.token };
  // A full-screen program's modes: the alternate screen, mouse reporting in SGR encoding, cursor
  // keys and keypad in application mode, bracketed paste, focus events, a hidden cursor, red text.
  const program = async (): Promise<string> =>
    (
      await client.spawn({
        command: '/bin/bash',
        args: [
          '--norc',
          '--noprofile',
          '-c',
          "printf '\\033[?1049h\\033[?1000h\\033[?1002h\\033[?1006h\\033[?1h\\033=\\033[?2004h\\033[?1004h\\033[?25l\\033[31mIN-%s' PROGRAM; read line; exit 7",
        ],
        cols: 100,
        rows: 30,
      })
    ).sessionId;
  const resets = ['\x1b[?1000l', '\x1b[?1002l', '\x1b[?1006l', '\x1b[?1l', '\x1b>', '\x1b[?2004l'];
  const restored = [...resets, '\x1b[?1004l', '\x1b[?25h', '\x1b[0m'];
  /** Attaches, leaves as `leave` says, and answers what the CLI wrote after that. */
  const attachAndLeave = async (
    sessionId: string,
    shown: string,
    leave: (attached: ReturnType<typeof inTerminal>) => void | Promise<unknown>,
  ) => {
    await client.resize(sessionId, 80, 24);
    const attached = inTerminal(['attach', sessionId], env);
    await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain('detach with Ctrl-]');
    await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain(shown);
    // Attached once it follows the session and listens: then it gives the session its size.
    await expect
      .poll(async () => (await client.list()).find((s) => s.sessionId === sessionId)?.cols, {
        timeout: 20_000,
      })
      .toBe(100);
    const from = attached.screen().length;
    await leave(attached);
    const { exitCode } = await attached.session.exited;
    return { exitCode, after: attached.screen().slice(from) };
  };
  const expectRestored = (after: string, line: string) => {
    for (const sequence of [...restored, '\x1b[?1049l']) expect(after).toContain(sequence);
    expect(after.lastIndexOf('\x1b[?1049h')).toBeLessThan(after.indexOf('\x1b[?1049l'));
    expect(after.indexOf('\x1b[?1049l')).toBeLessThan(after.indexOf(line)); // said on the user's screen
  };

  const first = await program();
  let left = await attachAndLeave(first, 'IN-PROGRAM', ({ session }) => session.write('\x1d'));
  expect(left.exitCode).toBe(0);
  expectRestored(left.after, '[aleph: detached]');

  left = await attachAndLeave(first, 'IN-PROGRAM', ({ session }) => session.write('bye\r'));
  expect(left.exitCode).toBe(7);
  expectRestored(left.after, '[aleph: terminal ended: exited, exit code 7]');

  left = await attachAndLeave(await program(), 'IN-PROGRAM', ({ session }) => {
    process.kill(session.pid, 'SIGTERM');
  });
  expect(left.exitCode).toBe(143);
  expectRestored(left.after, '[aleph: SIGTERM]');

  // A program in the normal screen: its modes are undone, but no screen is left (that would move
  // the cursor to wherever a saved position is).
  const plain = await client.spawn({ command: '/bin/cat', args: [], cols: 100, rows: 30 });
  await client.input(plain.sessionId, 'plain-text\r');
  await expect
    .poll(async () => (await client.call('pty.snapshot', { sessionId: plain.sessionId })).data)
    .toContain('plain-text');
  left = await attachAndLeave(plain.sessionId, 'plain-text', ({ session }) => session.write('\x1d'));
  for (const sequence of restored) expect(left.after).toContain(sequence);
  expect(left.after).not.toContain('\x1b[?1049l');

  const last = await program();
  left = await attachAndLeave(last, 'IN-PROGRAM', () => server!.stop('SIGKILL'));
  await client.close();
  expect(left.exitCode).toBe(3);
  expectRestored(left.after, '[aleph: connection to the server lost]');
});

it("`aleph sessions` shows an agent command by its command, not bubblewrap's argv, and an ended terminal's exit", async () => {
  const { url, token } = await agentServer((conversation) => {
    const results = conversation.filter((turn) => turn.role === 'tool').length;
    if (results === 0) return { call: { name: 'shell', args: { command: 'echo bye; exit 7' } } };
    if (results === 1) return { call: { name: 'shell', args: { command: 'sleep 20' } } };
    return { text: 'done' };
  });
  const env = { ALEPH_URL: url, ALEPH_TOKEN: token };
  const running = spawn(process.execPath, [CLI, 'run', 'two commands', '--cwd', workDir()], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const exited = new Promise((done) => running.once('exit', done));
  let stdout = '';
  running.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  try {
    await expect.poll(() => stdout, { timeout: 30_000 }).toContain('$ sleep 20');
    const listed = await runToExit([CLI, 'sessions'], env);
    if (process.env['ALEPH_PRINT_TRANSCRIPT']) console.log(listed.stdout);
    expect(listed.code).toBe(0);
    const terminals = listed.stdout.split('terminals (')[1]!.split('\n').slice(1).filter(Boolean);
    expect(terminals).toHaveLength(2); // live ones first, then the ended
    expect(terminals).toEqual([
      expect.stringMatching(/^ {2}\S+ {2}pid \d+ {2}200x50 {2}running {2}\$ sleep 20( {2}\(sandboxed\))?$/),
      expect.stringMatching(
        /^ {2}\S+ {2}pid \d+ {2}200x50 {2}ended \(exit code 7\) {2}\$ echo bye; exit 7( {2}\(sandboxed\))?$/,
      ),
    ]);
    const onlyRunning = await runToExit([CLI, 'sessions', '--running'], env);
    expect(onlyRunning.code).toBe(0);
    expect(onlyRunning.stdout).toMatch(/^agent runs \(1 running\)\n {2}\S+ {2}running /);
    const runningTerminals = onlyRunning.stdout
      .split('terminals (1 running)\n')[1]!
      .split('\n')
      .filter(Boolean);
    expect(runningTerminals).toEqual([terminals[0]]);
  } finally {
    running.kill('SIGINT'); // cancels the run
    await exited;
  }
});

/** A proxy to the server that answers pty.snapshot with method_not_found: a server before snapshots. */
async function noSnapshotProxy(upstreamUrl: string): Promise<{ url: string; close(): Promise<void> }> {
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
    const queued: string[] = [];
    upstream.on('open', () => queued.splice(0).forEach((frame) => upstream.send(frame)));
    downstream.on('message', (data) => {
      const frame = data.toString();
      const message = JSON.parse(frame) as { id?: number; method?: string };
      if (message.method === 'pty.snapshot')
        downstream.send(
          JSON.stringify({
            jsonrpc: '2.0',
            id: message.id,
            error: { code: -32601, message: 'unknown method', data: { code: 'method_not_found' } },
          }),
        );
      else if (upstream.readyState === WebSocket.OPEN) upstream.send(frame);
      else queued.push(frame);
    });
    upstream.on('message', (data, binary) => downstream.send(data, { binary }));
    downstream.on('close', () => upstream.close());
    upstream.on('close', () => downstream.close());
  });
  const { port } = proxy.address() as AddressInfo;
  return { url: `ws://127.0.0.1:${port}`, close: () => new Promise((done) => proxy.close(() => done())) };
}

it('`aleph attach` to a server without pty.snapshot follows the scrollback from the oldest byte', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  const { sessionId } = await client.spawn({ command: '/bin/sh', cols: 100, rows: 30 });
  await client.input(sessionId, 'echo before-$((2+2))\r');
  await expect.poll(async () => (await client.list())[0]!.outputOffset).toBeGreaterThan(20);
  const proxy = await noSnapshotProxy(server.url);
  try {
    const attached = inTerminal(['attach', sessionId], { ALEPH_URL: proxy.url, ALEPH_TOKEN: server.token });
    await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain('before-4');
    attached.session.write('\x1d');
    expect(await attached.session.exited).toMatchObject({ exitCode: 0 });
  } finally {
    await proxy.close();
    await client.close();
  }
});

it('`aleph attach` to a session that already ended shows its tail and leaves with its exit code, terminal restored', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  const { sessionId } = await client.spawn({
    command: '/bin/bash',
    args: ['--norc', '--noprofile', '-c', 'echo bye-$((2+2)); exit 4'],
    cols: 100,
    rows: 30,
  });
  // Listed as ended (for 60 s): no pty.exit event will come again for it.
  await expect
    .poll(async () => (await client.list()).find((s) => s.sessionId === sessionId)?.exit?.exitCode, {
      timeout: 20_000,
    })
    .toBe(4);
  await client.close();
  const attached = inTerminal(['attach', sessionId], { ALEPH_URL: server.url, ALEPH_TOKEN: server.token });
  const line = '[aleph: terminal ended: exited, exit code 4]';
  await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain(line); // not "attached" forever
  expect(await attached.session.exited).toMatchObject({ exitCode: 4 });
  const screen = attached.screen();
  expect(screen.indexOf('bye-4')).toBeGreaterThanOrEqual(0);
  // The tail, then the terminal given back in its own modes, then the usual line.
  const restoredAt = screen.lastIndexOf(restoreSequence(undefined));
  expect(restoredAt).toBeGreaterThan(screen.indexOf('bye-4'));
  expect(restoredAt).toBeLessThan(screen.indexOf(line));
});

/** The screen a terminal shows after `output`: its rows, trailing blanks cut. */
async function rendered(output: string, cols: number, rows: number): Promise<string[]> {
  const terminal = new headless.Terminal({ cols, rows, allowProposedApi: true });
  await new Promise<void>((done) => terminal.write(output, done));
  const buffer = terminal.buffer.active;
  const lines: string[] = [];
  for (let row = 0; row < rows; row += 1)
    lines.push(buffer.getLine(buffer.viewportY + row)?.translateToString(true) ?? '');
  terminal.dispose();
  return lines;
}

it('`aleph attach` at the session’s size shows exactly its screen: the banner is never written into it', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  // A full screen with the cursor on its last row (less's `:` prompt): a line after it scrolls it.
  const { sessionId } = await client.spawn({
    command: '/bin/bash',
    args: [
      '--norc',
      '--noprofile',
      '-c',
      'for i in $(seq 1 29); do echo row-$i; done; printf last-row; read line',
    ],
    cols: 100,
    rows: 30,
  });
  await expect
    .poll(async () => (await client.call('pty.snapshot', { sessionId })).data, { timeout: 20_000 })
    .toContain('last-row');
  const expected = await rendered((await client.call('pty.snapshot', { sessionId })).data, 100, 30);
  const attached = inTerminal(['attach', sessionId], { ALEPH_URL: server.url, ALEPH_TOKEN: server.token });
  await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain('last-row');
  await expect.poll(() => attached.screen(), { timeout: 20_000 }).toContain('detach with Ctrl-]');
  await expect.poll(() => rendered(attached.screen(), 100, 30), { timeout: 5_000 }).toEqual(expected);
  expect(expected[0]).toBe('row-1');
  attached.session.write('\x1d');
  expect(await attached.session.exited).toMatchObject({ exitCode: 0 });
  await client.close();
});

it('`aleph attach` writes nothing of the session after the terminal is restored, mid-flood of mode changes', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  // Every line enters the alternate screen, turns mouse reporting on and hides the cursor.
  const { sessionId } = await client.spawn({
    command: '/bin/bash',
    args: [
      '--norc',
      '--noprofile',
      '-c',
      "while :; do printf '\\033[?1049h\\033[?1000h\\033[?1006h\\033[?25lFLOOD %s\\n' {1..200}; done",
    ],
    cols: 100,
    rows: 30,
  });
  try {
    for (let round = 0; round < 3; round += 1) {
      const attached = inTerminal(['attach', sessionId], {
        ALEPH_URL: server.url,
        ALEPH_TOKEN: server.token,
      });
      await expect
        .poll(() => attached.screen().split('FLOOD').length, { timeout: 20_000 })
        .toBeGreaterThan(2000);
      attached.session.write('\x1d');
      expect(await attached.session.exited).toMatchObject({ exitCode: 0 });
      const screen = attached.screen().replaceAll('\r\r\n', '\r\n'); // the pty's own \n → \r\n
      const line = '\r\n[aleph: detached]\r\n';
      expect(screen.endsWith(line), `round ${round}: ${JSON.stringify(screen.slice(-300))}`).toBe(true);
      // The restore (leaving the alternate screen) and the line are the last bytes.
      expect(screen.slice(0, -line.length).endsWith(restoreSequence(1049)), `round ${round}`).toBe(true);
    }
  } finally {
    await client.closeSession(sessionId);
    await client.close();
  }
});

it('`aleph attach`: a terminal query is answered once with two attached, by the one typed in last', async () => {
  server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
  const client = await connectGateway(server.url, { token: server.token });
  const { sessionId } = await client.spawn({
    command: '/bin/bash',
    args: ['--norc', '--noprofile'],
    cols: 100,
    rows: 30,
  });
  const env = { ALEPH_URL: server.url, ALEPH_TOKEN: server.token };
  /** `aleph attach` in a terminal that answers cursor position queries, as every real one does. */
  const answering = () => {
    const attached = inTerminal(['attach', sessionId], env);
    let tail = '';
    attached.session.onData((chunk) => {
      const text = tail + chunk.toString('latin1');
      for (let at = text.indexOf('\x1b[6n'); at >= 0; at = text.indexOf('\x1b[6n', at + 1))
        attached.session.write('\x1b[5;1R');
      tail = text.slice(-3);
    });
    return attached;
  };
  // Asks for the cursor position once (DSR 6), then counts the answers that came in 3 s.
  const ask = async (attached: ReturnType<typeof inTerminal>, mark: string) => {
    attached.session.write(
      `stty -echo -icanon min 0 time 10; printf '\\033[6n'; sleep 3; a=$(dd bs=4096 count=1 2>/dev/null); stty sane; echo ${mark}=$(printf %s "$a" | tr -cd R | wc -c)\r`,
    );
    await expect.poll(() => attached.screen(), { timeout: 20_000 }).toMatch(new RegExp(`${mark}=\\d+\\r`));
    return new RegExp(`${mark}=\\d+`).exec(attached.screen())![0];
  };
  const ready = async (attached: ReturnType<typeof inTerminal>) => {
    await expect
      .poll(() => attached.screen(), { timeout: 20_000 })
      .toMatch(/detach with Ctrl-\][^]*bash[^\n]*[#$]/);
  };
  try {
    const first = answering();
    await ready(first);
    expect(await ask(first, 'ALONE')).toBe('ALONE=1'); // a sole viewer answers
    const second = answering();
    await ready(second);
    expect(await ask(first, 'TWO')).toBe('TWO=1'); // the second terminal answered too
    first.session.write('\x1d');
    second.session.write('\x1d');
    expect(await first.session.exited).toMatchObject({ exitCode: 0 });
    expect(await second.session.exited).toMatchObject({ exitCode: 0 });
  } finally {
    await client.closeSession(sessionId);
    await client.close();
  }
});
