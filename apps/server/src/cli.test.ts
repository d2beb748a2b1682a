import { rmSync } from 'node:fs';
import { resolve } from 'node:path';
import { connectGateway } from '@aleph/gateway/client';
import { PtySession } from '@aleph/pty';
import { afterEach, expect, it } from 'vitest';
import { CLI, startServerProcess, type ServerProcess } from '../test/server-process.js';

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
  await expect.poll(() => screen, { timeout: 10_000 }).toMatch(/[\r\n]before-attach\r+\n/);
  terminal.write('echo typed-through-attach\r');
  await expect.poll(() => screen, { timeout: 10_000 }).toMatch(/[\r\n]typed-through-attach\r+\n/);
  terminal.write('stty size\r');
  await expect.poll(() => screen, { timeout: 10_000 }).toMatch(/[\r\n]30 100\r+\n/); // resized to the attaching terminal
  terminal.write('\x1d');
  expect(await terminal.exited).toMatchObject({ exitCode: 0 });
  expect(screen).toContain('[aleph: detached]');
  // Detaching leaves the terminal running.
  expect((await client.list()).map((s) => s.sessionId)).toContain(sessionId);
  await client.close();
});
