// Issue 12 item 8 and issue 17: output is held for a client that went away, and flow control is per
// viewer, so one that stalls cannot freeze a terminal for the others.
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { PtyOutput } from './client.js';
import { startGateway, until, type Harness } from '../test/support.js';

let h: Harness;
beforeEach(async () => {
  h = await startGateway();
});
afterEach(async () => {
  await h.dispose();
});

/** Checks that `text` is exactly `seq 1 count` through a terminal (CRLF line ends). */
function expectSeq(text: string, count: number): void {
  const lines = text.split('\r\n');
  expect(lines.pop()).toBe('');
  expect(lines.length).toBe(count);
  const wrong = lines.findIndex((line, index) => line !== String(index + 1));
  expect(wrong === -1 ? 'every line in order' : `line ${wrong + 1} is ${lines[wrong]}`).toBe(
    'every line in order',
  );
}

it('a 200 ms disconnect during seq 1 2000000 loses nothing', async () => {
  const count = 2_000_000;
  const first = await h.connect();
  await first.subscribe(['pty.*']);
  const handled: Buffer[] = [];
  let reached = 0;
  let sessionId = '';
  first.onOutput((output: PtyOutput) => {
    if (output.sessionId !== sessionId || output.offset !== reached) return;
    handled.push(output.data);
    reached += output.data.length;
  });
  ({ sessionId } = await first.spawn({ command: 'seq', args: ['1', String(count)], cols: 80, rows: 24 }));
  await until(() => reached > 1024 * 1024, 'the first MiB');
  await first.close();
  await new Promise((resolve) => setTimeout(resolve, 200)); // the disconnect

  const second = await h.connect();
  await second.subscribe(['pty.*'], [sessionId]);
  const exited = new Promise((resolve) => second.onExit(resolve));
  await second.follow(sessionId, reached, (data) => handled.push(data));
  await exited;
  expectSeq(Buffer.concat(handled).toString('latin1'), count);
}, 90_000); // 14 MB through a pty, twice over the socket: minutes, not seconds, on a loaded machine

it('a viewer that acks once and stalls does not hold the terminal for another', async () => {
  const total = 12 * 1024 * 1024;
  const stalled = await h.connect({ autoAck: false });
  await stalled.subscribe(['pty.*']);
  const reader = await h.connect();
  await reader.subscribe(['pty.*']);
  const { sessionId } = await reader.spawn({
    command: '/bin/sh',
    args: ['-c', `read go; head -c ${total} /dev/zero | tr '\\0' s; read done`],
    cols: 80,
    rows: 24,
  });
  const got = { reader: 0, stalled: 0 };
  reader.onOutput((output) => void (got.reader += output.data.length));
  let stalledEnd = 0;
  stalled.onOutput((output) => {
    got.stalled += output.data.length;
    stalledEnd = output.offset + output.data.length;
  });
  await stalled.ack(sessionId, 0); // it acks (so its unacked bytes count), then never again
  await reader.input(sessionId, 'go\r');
  // Within the test's time: before, the stalled viewer held it for 30 s, then was cut off.
  await until(() => got.reader >= total, 'the reader to get all of it', 20_000);
  expect(got.stalled).toBeLessThan(total / 2); // it fell behind at the high-water mark
  // Once it acks what it has, it is caught up from the scrollback, to the very end.
  await stalled.ack(sessionId, stalledEnd);
  await until(() => stalledEnd >= total, 'the stalled viewer to catch up');
});

it('a session that ends while nobody watches is still listed 2 s later, with its exit status and its tail', async () => {
  const first = await h.connect();
  await first.subscribe(['pty.*']);
  const { sessionId } = await first.spawn({
    command: '/bin/sh',
    args: ['-c', 'read go; printf "the tail"; exit 3'],
    cols: 80,
    rows: 24,
  });
  await first.close();
  const driver = await h.connect();
  const ended = new Promise((resolve) => h.manager.once('exit', resolve));
  await driver.input(sessionId, 'go\r');
  await ended;
  await new Promise((resolve) => setTimeout(resolve, 2000)); // the client comes back 2 s later

  const second = await h.connect();
  const listed = (await second.list()).find((entry) => entry.sessionId === sessionId);
  expect(listed?.exit).toEqual({ exitCode: 3, signal: null, reason: 'exited' });
  await second.subscribe(['pty.*'], [sessionId]);
  const received: Buffer[] = [];
  const followed = await second.follow(sessionId, 0, (data) => received.push(data));
  expect(followed.exit).toEqual({ exitCode: 3, signal: null, reason: 'exited' });
  await until(() => Buffer.concat(received).length >= followed.end, 'the tail');
  expect(Buffer.concat(received).toString()).toContain('the tail');
  expect((await second.replay(sessionId, 0)).data.toString()).toContain('the tail');
});
