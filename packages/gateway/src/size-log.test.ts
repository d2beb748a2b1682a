// The sizes behind pty.snapshot's replay: each resize at the offset it took
// effect, the size in force at any offset, and a bounded log.
import { describe, expect, it } from 'vitest';
import { SizeLog } from './internal/size-log.js';

describe('SizeLog', () => {
  it('answers the size in force at an offset and the resizes after it', () => {
    const log = new SizeLog(80, 24);
    log.observe(80, 24, 0, 0);
    log.observe(80, 24, 100, 0);
    log.observe(120, 40, 200, 0);
    log.observe(100, 30, 500, 0);
    expect(log.from(0)).toEqual({
      cols: 80,
      rows: 24,
      changes: [
        { offset: 200, cols: 120, rows: 40 },
        { offset: 500, cols: 100, rows: 30 },
      ],
    });
    expect(log.from(300)).toEqual({ cols: 120, rows: 40, changes: [{ offset: 500, cols: 100, rows: 30 }] });
    expect(log.from(500)).toEqual({ cols: 100, rows: 30, changes: [] });
  });

  it('forgets what the scrollback no longer covers, and keeps at most 1024 resizes', () => {
    const log = new SizeLog(80, 24);
    for (let offset = 1; offset <= 5000; offset += 1) log.observe(80 + (offset % 2), 24, offset * 10, 0);
    const kept = log.from(0);
    expect(kept.changes).toHaveLength(1023);
    expect(kept.changes.at(-1)).toEqual({ offset: 50_000, cols: 80, rows: 24 });
    log.observe(90, 24, 50_010, 49_995);
    expect(log.from(0)).toEqual({
      cols: 81, // in force at 49 995, from 49 990
      rows: 24,
      changes: [
        { offset: 50_000, cols: 80, rows: 24 },
        { offset: 50_010, cols: 90, rows: 24 },
      ],
    });
  });
});
