// The output frame's fast reader against JSON.parse, the reference: it must read every frame the
// server builds exactly as JSON.parse does, and anything it accepts must mean the same to JSON.parse.
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { outputFramer, readOutputFrame } from './internal/frames.js';
import type { PtyOutput } from './client.js';
import { startGateway, until, type Harness } from '../test/support.js';

const asJson = (frame: Buffer) =>
  (JSON.parse(frame.toString('utf8')) as { params: { sessionId: string; offset: number; data: string } })
    .params;

describe('pty.output frames', () => {
  it('reads every frame the server builds as JSON.parse does', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.uuid(), fc.string({ minLength: 1 }), fc.string({ unit: 'grapheme', minLength: 1 })),
        fc.maxSafeNat(),
        fc.uint8Array({ maxLength: 300 }),
        (sessionId, offset, bytes) => {
          const frame = outputFramer(sessionId)(offset, Buffer.from(bytes));
          const expected = { sessionId, offset, data: Buffer.from(bytes).toString('base64') };
          expect(asJson(frame)).toEqual(expected);
          // Ids that need escaping in JSON take the slow path; all else reads fast, and the same.
          const fast = readOutputFrame(frame);
          if (JSON.stringify(sessionId) === `"${sessionId}"`)
            expect(fast).toEqual({ ...expected, bytes: Buffer.from(bytes) });
          else expect(fast).toBeUndefined();
        },
      ),
      { numRuns: 500 },
    );
  });

  it('accepts a damaged or foreign frame only if JSON.parse reads the same from it', () => {
    const base = outputFramer('0c6d1f3e-8b1c-4a55-9d4e-2f4b1b9e5a77')(4096, Buffer.from('hé!'));
    const edit = fc.record({
      at: fc.nat({ max: base.length }),
      remove: fc.nat({ max: 3 }),
      insert: fc.constantFrom(
        '',
        '"',
        '\\',
        '0',
        '1',
        ' ',
        '}',
        ',"x":1',
        '\\u0041',
        'é',
        'A',
        '=',
        '-',
        '\x01',
        '\n',
      ),
    });
    fc.assert(
      fc.property(fc.array(edit, { minLength: 1, maxLength: 3 }), (edits) => {
        let text = base.toString('utf8');
        for (const { at, remove, insert } of edits)
          text = text.slice(0, at) + insert + text.slice(at + remove);
        const frame = Buffer.from(text);
        const fast = readOutputFrame(frame);
        if (fast === undefined) return;
        const { bytes, ...fields } = fast;
        const json = asJson(frame);
        expect(json).toEqual(fields);
        expect(bytes).toEqual(Buffer.from(json.data, 'base64'));
      }),
      { numRuns: 2000 },
    );
  });

  it('leaves other messages to JSON.parse', () => {
    for (const text of [
      '{"jsonrpc":"2.0","id":1,"result":{}}',
      '{"jsonrpc":"2.0","method":"pty.exit","params":{"sessionId":"a","exitCode":0,"signal":null,"reason":"exited"}}',
      '{"jsonrpc":"2.0","method":"pty.output","params":{"sessionId":"a","offset":1,"data":"QQ=="},"x":1}',
      '{"jsonrpc":"2.0","method":"pty.output","params":{"sessionId":"a","offset":01,"data":"QQ=="}}',
      '{"jsonrpc":"2.0","method":"pty.output","params":{"sessionId":"a","offset":1,"data":"Q\\u0051=="}}',
      '',
    ])
      expect(readOutputFrame(Buffer.from(text))).toBeUndefined();
  });
});

describe('the typed client', () => {
  let harness: Harness | undefined;
  afterEach(() => harness?.dispose());

  it('reads pty.output in any JSON layout, not only the one the server builds', async () => {
    harness = await startGateway();
    const client = await harness.connect({ autoAck: false });
    await client.subscribe(['pty.*']);
    const outputs: PtyOutput[] = [];
    const events: unknown[] = [];
    client.onOutput((output) => outputs.push(output));
    client.onEvent((topic, params) => topic === 'pty.output' && events.push(params));
    // publish() serializes with JSON.stringify: keys in this order, and a quote escaped.
    const reordered = { data: Buffer.from('hé').toString('base64'), offset: 7, sessionId: 'a' };
    harness.gateway.publish('pty.output', reordered);
    harness.gateway.publish('pty.output', { sessionId: 'say "hi"', offset: 0, data: 'AA==' });
    await until(() => outputs.length === 2, 'both outputs');
    expect(outputs).toEqual([
      { sessionId: 'a', offset: 7, data: Buffer.from('hé') },
      { sessionId: 'say "hi"', offset: 0, data: Buffer.from([0]) },
    ]);
    expect(events).toEqual([reordered, { sessionId: 'say "hi"', offset: 0, data: 'AA==' }]);
  });
});
