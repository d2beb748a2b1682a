// Issue 16: the binary fast path (`pty.binary`) carries exactly what the JSON frames carry, both
// ways, and a bad binary frame gets a stable error while the connection goes on.
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { GatewayClient } from './client.js';
import type { GatewayError } from './errors.js';
import {
  binaryInputFrame,
  binaryOutputFramer,
  InputFrameReader,
  readBinaryFrame,
} from './internal/binary-frames.js';
import { MAX_INPUT_BYTES } from './protocol.js';
import { KEYS, keystrokeDump, outputOf, startGateway, until, type Harness } from '../test/support.js';

describe('the layout', () => {
  it('an output frame reads back as its session, offset and bytes', () => {
    fc.assert(
      fc.property(
        fc.string({ minLength: 1, maxLength: 60 }),
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
        fc.uint8Array({ maxLength: 300 }),
        (sessionId, offset, bytes) => {
          const frame = binaryOutputFramer(sessionId)(offset, Buffer.from(bytes));
          expect(readBinaryFrame(frame)).toEqual({
            kind: 'output',
            sessionId,
            offset,
            data: Buffer.from(bytes),
          });
        },
      ),
    );
  });

  it('an input frame reads back as its session and bytes', () => {
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 60 }), fc.uint8Array(), (sessionId, bytes) => {
        expect(readBinaryFrame(binaryInputFrame(sessionId, bytes))).toEqual({
          kind: 'input',
          sessionId,
          data: Buffer.from(bytes),
        });
      }),
    );
  });

  it('a run of input frames reads as each frame does alone, whichever session ids follow one another', () => {
    // Ids that differ in one byte, in length only, or not at all: the reader keeps the last one.
    const ids = fc.constantFrom('a', 'b', 'ab', 'ba', 'é', 'e\u0301', 'x'.repeat(255), 'x'.repeat(254) + 'y');
    const frame = fc.oneof(
      fc.tuple(ids, fc.uint8Array({ maxLength: 20 })).map(([id, bytes]) => binaryInputFrame(id, bytes)),
      fc.uint8Array({ maxLength: 12 }).map((bytes) => Buffer.from(bytes)), // anything at all
    );
    fc.assert(
      fc.property(fc.array(frame, { maxLength: 30 }), (frames) => {
        const reader = new InputFrameReader();
        for (const bytes of frames) {
          const alone = readBinaryFrame(bytes);
          const read = reader.read(bytes);
          if (typeof alone === 'string') expect(read).toEqual(alone);
          else if (alone.kind === 'output') expect(read).toMatch(/input frames \(kind 2\) only/);
          else expect(read).toEqual({ sessionId: alone.sessionId, data: alone.data });
        }
      }),
    );
  });

  it('a frame too short, of an unknown kind or with no session id says what is wrong', () => {
    expect(readBinaryFrame(Buffer.from([2]))).toMatch(/too short/);
    expect(readBinaryFrame(Buffer.from([3, 1, 0x41]))).toMatch(/unknown binary frame kind 3/);
    expect(readBinaryFrame(Buffer.from([2, 0, 0x41]))).toMatch(/session id/);
    expect(readBinaryFrame(Buffer.from([2, 9, 0x41]))).toMatch(/too short for its 9-byte session id/);
    expect(readBinaryFrame(Buffer.from([1, 1, 0x41, 0, 0, 0]))).toMatch(/too short/);
  });
});

let h: Harness;
/** Each test of the block gets a gateway of its own. */
function withGateway(): void {
  beforeEach(async () => {
    h = await startGateway();
  });
  afterEach(async () => {
    await h.dispose();
  });
}

describe('over a real gateway: output', () => {
  withGateway();

  it('a binary viewer and a JSON viewer get the same bytes at the same offsets as the scrollback holds', async () => {
    const binary = await h.connect();
    const json = await h.connect({ binary: false });
    await binary.subscribe(['pty.*']);
    await json.subscribe(['pty.*']);
    // Every byte value, raw (no line discipline on output), then a bulk of lines.
    const { sessionId } = await json.spawn({
      command: '/bin/sh',
      args: [
        '-c',
        'stty raw -echo; i=0; while [ $i -lt 256 ]; do printf "\\\\$(printf %o $i)"; i=$((i+1)); done; seq 1 40000; printf END',
      ],
      cols: 80,
      rows: 24,
    });
    const fromBinary = outputOf(binary, sessionId);
    const fromJson = outputOf(json, sessionId);
    await fromBinary.waitFor(/END$/, 60_000); // 256 forks of printf first: slow on a loaded machine
    await fromJson.waitFor(/END$/, 60_000);
    const scrollback = h.manager.require(sessionId).replay(0);
    expect(scrollback.offset).toBe(0);
    expect(fromBinary.bytes()).toEqual(scrollback.data);
    expect(fromJson.bytes()).toEqual(scrollback.data);
    // Offsets without gaps: each frame starts where the one before it ended.
    for (const chunks of [fromBinary.chunks, fromJson.chunks]) {
      let next = 0;
      for (const chunk of chunks) {
        expect(chunk.offset).toBe(next);
        next += chunk.data.length;
      }
    }
    expect(fromBinary.bytes().subarray(0, 256)).toEqual(
      Buffer.from(Array.from({ length: 256 }, (_, i) => i)),
    );
  });
});

describe('over a real gateway: keystrokes', () => {
  withGateway();

  it('keystrokes in binary frames reach the program as the JSON requests do, byte for byte', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const byRequest = await keystrokeDump(client, KEYS, (sessionId, key) => client.input(sessionId, key));
    const byBinary = await keystrokeDump(client, KEYS, (sessionId, key) => client.type(sessionId, key));
    expect(byRequest).toMatch(/68 c3 a9 6c 6c 6f/);
    expect(byBinary).toBe(byRequest);
  });

  it('keystrokes to two sessions in turn, each in binary frames, reach each its own program', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const program = {
      command: '/bin/sh',
      args: ['-c', 'stty raw -echo; printf READY; head -c 40 | od -An -c -v; printf DONE'],
      cols: 80,
      rows: 24,
    };
    const first = await client.spawn(program);
    const second = await client.spawn(program);
    const outputs = [outputOf(client, first.sessionId), outputOf(client, second.sessionId)];
    for (const output of outputs) await output.waitFor(/READY/);
    for (let i = 0; i < 40; i += 1) {
      client.type(first.sessionId, 'a');
      client.type(second.sessionId, i % 2 === 0 ? 'b' : 'c');
    }
    for (const output of outputs) await output.waitFor(/DONE/);
    const typed = (text: string) => text.replace(/READY|DONE|\s|[0-9]{7}/g, '');
    expect(typed(outputs[0]!.text())).toBe('a'.repeat(40));
    expect(typed(outputs[1]!.text())).toBe('bc'.repeat(20));
  });

  /** Text frames the typed client does not hand over (errors with id null), as parsed JSON. */
  const errorsOf = (client: GatewayClient) => {
    const errors: { code: string; message: string; sessionId?: string }[] = [];
    client.socket.on('message', (raw, isBinary) => {
      if (isBinary) return;
      const message = JSON.parse(String(raw)) as {
        id?: unknown;
        error?: { message: string; data: { code: string; sessionId?: string } };
      };
      if (message.id === null && message.error)
        errors.push({ message: message.error.message, ...message.error.data });
    });
    return errors;
  };

  it('a binary frame before pty.binary, or a malformed one after it, gets invalid_request and the connection goes on', async () => {
    const client = await h.connect({ binary: false });
    const errors = errorsOf(client);
    client.socket.send(binaryInputFrame('x', Buffer.from('a')));
    await until(() => errors.length === 1, 'the first error');
    expect(errors[0]).toMatchObject({ code: 'invalid_request', message: /before pty\.binary/ });
    expect(await client.useBinaryFrames()).toBe(true);
    client.socket.send(Buffer.from([2]));
    client.socket.send(Buffer.from([7, 1, 0x41]));
    client.socket.send(Buffer.from([2, 40, 0x41]));
    client.socket.send(binaryOutputFramer('x')(0, Buffer.from('a')));
    await until(() => errors.length === 5, 'four more errors');
    expect(errors.slice(1).map((error) => error.code)).toEqual(Array(4).fill('invalid_request'));
    expect(errors.slice(1).map((error) => error.message)).toEqual([
      expect.stringMatching(/too short/),
      expect.stringMatching(/unknown binary frame kind 7/),
      expect.stringMatching(/too short for its 40-byte session id/),
      expect.stringMatching(/input frames \(kind 2\) only/),
    ]);
    expect(await client.list()).toEqual([]);
  });

  it('binary keystrokes to an unknown session, or over the cap, are refused naming the session; nothing is written', async () => {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const refused: GatewayError[] = [];
    client.onInputError((error) => refused.push(error));
    client.type('no-such-session', 'x');
    await until(() => refused.length === 1, 'the unknown session');
    client.type('n'.repeat(300), 'x'); // longer than a binary frame's id: sent as JSON, refused alike
    await until(() => refused.length === 2, 'the long id');
    expect(refused.pop()!.data).toMatchObject({ code: 'unknown_session', sessionId: 'n'.repeat(300) });
    expect(refused[0]!.code).toBe('unknown_session');
    expect(refused[0]!.data).toMatchObject({ sessionId: 'no-such-session' });

    const { sessionId } = await client.spawn({
      command: '/bin/sh',
      args: ['-c', 'stty raw -echo; printf READY; head -c 3 | od -An -tx1; printf DONE'],
      cols: 80,
      rows: 24,
    });
    const output = outputOf(client, sessionId);
    await output.waitFor(/READY/);
    client.type(sessionId, Buffer.alloc(MAX_INPUT_BYTES + 1, 0x61));
    await until(() => refused.length === 2, 'the over-cap frame');
    expect(refused[1]!.code).toBe('frame_too_large');
    expect(refused[1]!.data).toMatchObject({ sessionId });
    client.type(sessionId, 'abc');
    await output.waitFor(/DONE/);
    expect(output.text()).toMatch(/61 62 63/); // the refused frame wrote none of its bytes
    expect(output.text()).not.toMatch(/61 61 61/);
  });
});
