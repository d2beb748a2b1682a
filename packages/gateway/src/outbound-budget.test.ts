// Issue 12 item 5: every byte the gateway sends counts against its connection's budget, so a client
// that asks for much and reads nothing cannot grow the server's memory without bound.
import { afterEach, expect, it } from 'vitest';
import { z } from 'zod';
import { ErrorCodes } from './index.js';
import { silentClient, startGateway, TOKEN, until, type Harness } from '../test/support.js';

let h: Harness | undefined;
afterEach(async () => {
  await h?.dispose();
  h = undefined;
});

it('a client that reads nothing and sends 200 × pty.replay of 1 MiB keeps server memory bounded; every request is answered', async () => {
  let held = false;
  const logger = {
    debug() {},
    info: (_: object, message?: string) => void (held ||= /reading held/.test(message ?? '')),
    warn() {},
    error() {},
  };
  h = await startGateway({ logger });
  let marked = false;
  h.gateway.register('test.mark', z.object({}).optional(), () => ((marked = true), {}));
  const session = h.manager.spawn({
    command: '/bin/sh',
    args: ['-c', `head -c ${1100 * 1024} /dev/zero | tr '\\0' x; exec sleep 1000`],
    cols: 80,
    rows: 24,
  });
  await until(() => session.scrollback.end >= 1100 * 1024, 'a full 1 MiB scrollback');

  const before = process.memoryUsage().rss;
  const client = await silentClient(h.gateway.url, { token: TOKEN });
  for (let id = 1; id <= 200; id += 1) {
    client.send(
      JSON.stringify({
        jsonrpc: '2.0',
        id,
        method: 'pty.replay',
        params: { sessionId: session.id, fromOffset: 0 },
      }),
    );
  }
  client.send(JSON.stringify({ jsonrpc: '2.0', id: 201, method: 'test.mark' }));
  // Either the gateway stopped reading this client, or it read (and answered) every request.
  await until(() => held || marked, 'the gateway to hold reading or answer all 201 requests');
  const grown = process.memoryUsage().rss - before;
  // Measured: unbounded (before the budget), +620 MB; with it, ~+60 MB, mostly garbage not yet
  // collected (each replay copies the 1 MiB scrollback). The budget itself is 4 MiB.
  expect(grown).toBeLessThan(160 * 1024 * 1024);

  // The server still answers others at once.
  const other = await h.connect();
  expect((await other.list()).map((entry) => entry.sessionId)).toEqual([session.id]);

  // Reading again, the client gets an answer to every request: data or `busy`, never silence.
  type Answer = { id: number; result?: { data: string }; error?: { code: number } };
  const answers = new Map<number, Answer>();
  client.read((text) => {
    const message = JSON.parse(text) as Answer;
    answers.set(message.id, message);
  });
  await until(() => answers.size === 201, 'an answer to each of the 201 requests', 20_000);
  const busy = [...answers.values()].filter((answer) => answer.error?.code === ErrorCodes.busy);
  const data = [...answers.entries()]
    .filter(([id, answer]) => id <= 200 && answer.result !== undefined)
    .map(([, answer]) => answer);
  expect(busy.length + data.length).toBe(answers.has(201) && answers.get(201)!.result ? 200 : 201);
  expect(busy.length).toBeGreaterThan(0);
  // Replay comes in bounded answers: 64 KiB of output, 87 KiB of base64.
  for (const answer of data) expect(answer.result!.data.length).toBe(Math.ceil((64 * 1024) / 3) * 4);
  client.destroy();
});

it('follow reads a scrollback longer than one replay answer, every byte once', async () => {
  h = await startGateway();
  const session = h.manager.spawn({
    command: '/bin/sh',
    args: ['-c', `seq 1 60000; exec sleep 1000`],
    cols: 80,
    rows: 24,
  });
  await until(() => session.scrollback.read(0).data.includes('\n60000\r\n'), 'all of seq');
  const client = await h.connect();
  await client.subscribe(['pty.*'], [session.id]);
  const received: Buffer[] = [];
  await client.follow(session.id, 0, (data) => received.push(data));
  const transcript = session.scrollback.read(0).data;
  expect(transcript.length).toBeGreaterThan(4 * 64 * 1024);
  await until(() => Buffer.concat(received).length >= transcript.length, 'the whole scrollback');
  expect(Buffer.concat(received).equals(transcript)).toBe(true);
});

it('a client that reads gets an event of 32 × its budget whole and stays connected; one that stops reading is closed with 4008 once four budgets wait behind it', async () => {
  const budget = 64 * 1024;
  h = await startGateway({ outboundBudgetBytes: budget });
  const reader = await h.connect();
  const stopped = await h.connect();
  const closes = new Map<string, number>();
  reader.socket.on('close', (code) => closes.set('reader', code));
  stopped.socket.on('close', (code) => closes.set('stopped', code));
  const got: string[] = [];
  reader.onEvent((_, params) => got.push((params as { text: string }).text));
  await reader.subscribe(['test.*']);
  await stopped.subscribe(['test.*']);
  stopped.socket.pause(); // it reads nothing from now on

  const big = 'b'.repeat(32 * budget);
  h.gateway.publish('test.big', { text: big });
  await until(() => got.length === 1, 'the large event at the client that reads');
  expect(got[0]).toBe(big);
  // Then 24 MiB more (past the kernel's socket buffers), each once the one that reads has the last.
  for (let index = 0; index < 384; index += 1) {
    h.gateway.publish('test.small', { text: String(index % 10).repeat(budget) });
    await until(() => got.length === index + 2, 'the event at the client that reads');
  }
  stopped.socket.resume(); // it reads what it was sent: the server's close comes last
  await until(() => closes.has('stopped'), 'the close at the client that stopped reading');
  expect(closes.get('stopped')).toBe(4008);
  expect(closes.has('reader')).toBe(false);
  expect(await reader.list()).toEqual([]); // still answered
});
