// The mode tracker behind pty.snapshot's start state (issue 17): the same modes whatever the chunk
// boundaries, the same modes as xterm.js, and the state at the scrollback's start.
import headless from '@xterm/headless';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ModeTracker, modesToSequences } from './internal/modes.js';

const pieces = [
  '\x1b[?1049h',
  '\x1b[?1049l',
  '\x1b[?1047h',
  '\x1b[?47l',
  '\x1b[?1h',
  '\x1b[?1l',
  '\x1b[?25l',
  '\x1b[?25h',
  '\x1b[?2004h',
  '\x1b[?2004l',
  '\x1b[?1000h',
  '\x1b[?1002h',
  '\x1b[?1003l',
  '\x1b[?1006h',
  '\x1b[?1006l',
  '\x1b[?1004h',
  '\x1b[?6h',
  '\x1b[?6l',
  '\x1b[?7l',
  '\x1b[?7h',
  '\x1b=',
  '\x1b>',
  '\x1b[?1;2004;25h',
  '\x1b[?12;1049l',
  '\x1b[31m',
  '\x1b[2J',
  '\x1b]0;title\x07',
  '\x1b[>1h',
  '\x1b[?1\n049h',
  '\x1b[?1049\x18h',
  '\x1b\x1b[?1h',
  '\x1b[\x1b[?1h',
  '\x1b[\n?1049h',
  '\x1b[\x18?25l',
  '\x1b[1;2H',
  'hello ',
  '\r\n',
  'é€',
  '?1049h',
];
const stream = fc
  .array(fc.constantFrom(...pieces), { maxLength: 30 })
  .map((parts) => Buffer.from(parts.join('')));

const stateOf = (chunks: Uint8Array[]) => {
  const tracker = new ModeTracker();
  for (const chunk of chunks) tracker.feed(chunk);
  return tracker.state;
};

describe('ModeTracker', () => {
  it('finds the same modes whatever the chunk boundaries (every split, and random ones)', () => {
    fc.assert(
      fc.property(stream, fc.array(fc.nat(), { maxLength: 8 }), (bytes, cuts) => {
        const whole = stateOf([bytes]);
        for (let at = 0; at <= bytes.length; at += 1)
          expect(stateOf([bytes.subarray(0, at), bytes.subarray(at)])).toBe(whole);
        const points = [...new Set(cuts.map((cut) => cut % (bytes.length + 1)))].sort((a, b) => a - b);
        const chunks = [0, ...points].map((from, k) => bytes.subarray(from, [...points, bytes.length][k]));
        expect(stateOf(chunks)).toBe(whole);
        expect(stateOf([...bytes].map((byte) => Uint8Array.of(byte)))).toBe(whole);
      }),
      { numRuns: 300 },
    );
  });

  it('puts a fresh xterm.js in the modes xterm.js reached from the stream', async () => {
    const write = (term: headless.Terminal, data: string | Uint8Array) =>
      new Promise<void>((resolve) => term.write(data, resolve));
    const view = (term: headless.Terminal) => ({ buffer: term.buffer.active.type, ...term.modes });
    const live = new headless.Terminal({ allowProposedApi: true });
    const fresh = new headless.Terminal({ allowProposedApi: true });
    try {
      await fc.assert(
        fc.asyncProperty(stream, async (bytes) => {
          await write(live, '\x1bc');
          await write(fresh, '\x1bc');
          await write(live, bytes);
          await write(fresh, modesToSequences(stateOf([bytes])));
          expect(view(fresh)).toEqual(view(live));
        }),
        { numRuns: 200 },
      );
    } finally {
      live.dispose();
      fresh.dispose();
    }
  });

  it('knows the modes at the start of what is kept, long after they were set', () => {
    const tracker = new ModeTracker();
    const first = Buffer.from('\x1b[?1049h\x1b[?1h\x1b=');
    tracker.feed(first);
    const filler = Buffer.alloc(64 * 1024, 'x');
    let end = first.length;
    for (let k = 0; k < 40; k += 1) {
      tracker.feed(filler, Math.max(0, end + filler.length - 1024 * 1024));
      end += filler.length;
    }
    const start = end - 1024 * 1024;
    const origin = tracker.origin(start);
    expect(origin.offset).toBeGreaterThanOrEqual(start);
    expect(origin.offset - start).toBeLessThanOrEqual(filler.length);
    expect(origin.sequences).toBe('\x1b[?1h\x1b=\x1b[?1049h');
    tracker.feed(Buffer.from('\x1b[?1049l'), start);
    expect(tracker.origin(end + 1).sequences).toBe('\x1b[?1h\x1b=');
  });

  it('keeps the normal buffer behind an alternate screen entered before what is kept', () => {
    const tracker = new ModeTracker();
    const output: Buffer[] = [];
    const read = (from: number, to: number) => Buffer.concat(output).subarray(from, to);
    const feed = (chunk: Buffer, keepFrom: number) => {
      output.push(chunk);
      tracker.feed(chunk, keepFrom, read);
    };
    feed(Buffer.from('\x1b[?2004hprompt$ vim\r\n\x1b[?2004l'), 0);
    const entry = Buffer.concat(output).length;
    feed(Buffer.from('\x1b[?1049h\x1b[?1h\x1b='), 0);
    const filler = Buffer.alloc(64 * 1024, 'x');
    for (let k = 0; k < 20; k += 1)
      feed(filler, Math.max(0, Buffer.concat(output).length + filler.length - 1024 * 1024));
    const origin = tracker.origin(Buffer.concat(output).length - 1024 * 1024);
    expect(origin.offset).toBeGreaterThan(entry);
    // The tail ends where vim switched (its own modes then come from the tracker, not the tail).
    expect(Buffer.from(origin.sequences).toString()).toBe(
      '\x1b[?2004hprompt$ vim\r\n\x1b[?2004l\x1b[?1h\x1b=\x1b[?1049h',
    );
  });
});
