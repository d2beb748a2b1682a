// Bulk output frames are reused (FramePool): a frame must not carry other output while any socket
// it went to still holds it. Viewers here hold frames as a slow socket would, then check them.
import { PtySession } from '@aleph/pty';
import type { WebSocket } from 'ws';
import { afterEach, expect, it } from 'vitest';
import { readBinaryFrame } from './internal/binary-frames.js';
import { Connection } from './internal/connection.js';
import { FramePool, OutputPump } from './internal/output-pump.js';
import { DEFAULT_FLOW } from './gateway.js';

const sessions: PtySession[] = [];
afterEach(async () => {
  await Promise.all(sessions.splice(0).map((session) => session.close()));
});

/** A binary viewer whose socket writes each frame `lag` frames after it was sent (0: at once). */
function viewer(id: string, lag: number) {
  const held: { frame: Buffer; written: (() => void) | undefined }[] = [];
  const received: Buffer[] = [];
  const write = () => {
    const next = held.shift()!;
    const read = readBinaryFrame(next.frame); // what the socket sends is what the frame holds now
    if (typeof read !== 'string') received.push(Buffer.from(read.data));
    next.written?.(); // like ws, a frame sent without a callback is fine
  };
  const socket = {
    OPEN: 1,
    readyState: 1,
    bufferedAmount: 0,
    send(frame: Buffer, _options: unknown, written?: () => void) {
      held.push({ frame, written });
      while (held.length > lag) write();
    },
  };
  const connection = new Connection(id, socket as unknown as WebSocket, 4 * 1024 * 1024);
  connection.topics.add('pty.*');
  connection.binary = true;
  const drain = (): number => {
    if (held.length > 0) write();
    return held.length;
  };
  return { connection, received, drain };
}

it('a pooled frame carries no other output while a socket it went to still holds it', async () => {
  const session = PtySession.spawn({
    command: '/bin/sh',
    args: ['-c', 'stty raw -echo; seq 1 150000'],
    cols: 80,
    rows: 24,
    scrollbackBytes: 4 * 1024 * 1024,
  });
  sessions.push(session);
  const prompt = viewer('prompt', 0);
  const slow = viewer('slow', 3);
  const pool = new FramePool(DEFAULT_FLOW.maxBatchBytes);
  const pump = new OutputPump(session, () => [prompt.connection, slow.connection], DEFAULT_FLOW, pool);
  await session.exited;
  pump.ended();
  while (slow.drain() > 0);
  const expected = `${Array.from({ length: 150000 }, (_, i) => i + 1).join('\n')}\n`;
  // Where the bytes first differ from the program's output (-1: nowhere), not a diff of 900 KB.
  const differs = (chunks: Buffer[]) => {
    const text = Buffer.concat(chunks).toString('latin1');
    const at = [...expected].findIndex((char, index) => text[index] !== char);
    return at >= 0 || text.length !== expected.length ? { at, got: text.slice(at, at + 40) } : -1;
  };
  expect(differs(prompt.received)).toBe(-1);
  expect(differs(slow.received)).toBe(-1);
  expect(prompt.received.length).toBeGreaterThan(4); // enough frames for the pool to be used
});
