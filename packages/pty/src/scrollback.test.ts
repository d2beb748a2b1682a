import fc from 'fast-check';
import { expect, it } from 'vitest';
import { Scrollback } from './scrollback.js';

it('keeps the newest bytes, addressed by absolute offset (model-based)', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 64 }),
      fc.array(fc.uint8Array({ maxLength: 100 }), { maxLength: 30 }),
      fc.nat(),
      (capacity, chunks, from) => {
        const ring = new Scrollback(capacity);
        const all = Buffer.concat(chunks);
        for (const chunk of chunks) ring.append(chunk);
        const start = Math.max(0, all.length - capacity);
        const offset = Math.min(Math.max(from % (all.length + 2), start), all.length);
        const read = ring.read(from % (all.length + 2));
        expect(ring.end).toBe(all.length);
        expect(read.offset).toBe(offset);
        expect(Buffer.compare(read.data, all.subarray(offset))).toBe(0);
      },
    ),
  );
});

it('keeps the same bytes while its ring grows to the capacity as output comes (model-based)', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 20_000 }),
      fc.array(fc.integer({ min: 0, max: 6000 }), { maxLength: 12 }),
      fc.nat(),
      (capacity, sizes, from) => {
        const ring = new Scrollback(capacity);
        let next = 0;
        const chunks = sizes.map((size) => Buffer.from(Array.from({ length: size }, () => next++ % 251)));
        const all = Buffer.concat(chunks);
        for (const chunk of chunks) ring.append(chunk);
        const start = Math.max(0, all.length - capacity);
        const offset = Math.min(Math.max(from % (all.length + 2), start), all.length);
        const read = ring.read(from % (all.length + 2));
        expect(ring.end).toBe(all.length);
        expect(read.offset).toBe(offset);
        expect(Buffer.compare(read.data, all.subarray(offset))).toBe(0);
      },
    ),
    { numRuns: 200 },
  );
});
