import { expect, it } from 'vitest';
import { AlternateScreenWatch, restoreSequence } from './terminal-restore.js';

it('knows the alternate screen from a switch cut anywhere across chunks, with other modes beside it', () => {
  const output = 'text \x1b[?1049;1006h vim \x1b[?1049l shell \x1b[?1;47h less';
  for (let cut = 0; cut <= output.length; cut += 1)
    for (let second = cut; second <= output.length; second += 3) {
      const watch = new AlternateScreenWatch();
      watch.feed(Buffer.from(output.slice(0, cut), 'latin1'));
      watch.feed(output.slice(cut, second));
      watch.feed(output.slice(second));
      expect(watch.mode, `cut at ${cut} and ${second}`).toBe(47);
    }
  const watch = new AlternateScreenWatch();
  watch.feed('\x1b[?1049h');
  watch.feed('\x1bc'); // a full reset leaves it
  expect(watch.mode).toBeUndefined();
});

it('leaves the alternate screen by the mode the program used, and only when it is in it', () => {
  expect(restoreSequence(1049)).toContain('\x1b[?1049l');
  expect(restoreSequence(1047)).toContain('\x1b[?1047l');
  expect(restoreSequence(undefined)).not.toMatch(/\x1b\[\?(1049|1047|47)l/);
  // The colours are reset last: DECRC (ESC 8) restores the attributes it saved.
  expect(restoreSequence(undefined).endsWith('\x1b[?25h\x1b[0m')).toBe(true);
});
