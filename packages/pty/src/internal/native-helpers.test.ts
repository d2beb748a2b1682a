// A helper copy made for a read-only install (no exec bit, not ours to chmod): another local user
// can plant neither the copy nor the folder it is looked up in.
import { createHash } from 'node:crypto';
import {
  chmodSync,
  chownSync,
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { executableCopy } from './native-helpers.js';

const root = process.getuid?.() === 0;
let work: string;
let helper: string;
let digest: string;
beforeEach(() => {
  work = mkdtempSync(join(tmpdir(), 'aleph-helper-copy-'));
  helper = join(work, 'aleph-pty-spawner');
  copyFileSync('/bin/true', helper);
  chmodSync(helper, 0o644);
  digest = createHash('sha256').update(readFileSync(helper)).digest('hex').slice(0, 16);
});
afterEach(() => rmSync(work, { recursive: true, force: true }));

const planted = (base: string): string => {
  const dir = join(base, 'aleph-pty', digest);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const copy = join(dir, 'aleph-pty-spawner');
  writeFileSync(copy, '#!/bin/sh\ntouch /tmp/planted\n', { mode: 0o755 });
  return copy;
};

it('a copy with other bytes in our own folder is replaced by the helper before it is used', () => {
  const base = join(work, 'cache');
  const copy = planted(base);
  expect(executableCopy(helper, 'spawner', [base])).toBe(copy);
  expect(readFileSync(copy).equals(readFileSync(helper))).toBe(true);
  expect(statSync(copy).mode & 0o777).toBe(0o700);
});

it.skipIf(!root)(
  "another user's copy, or a folder others can write, is never used: a private one is made",
  () => {
    const theirs = join(work, 'theirs');
    const copy = planted(theirs);
    chownSync(copy, 12345, 12345);
    chownSync(join(theirs, 'aleph-pty'), 12345, 12345);
    chownSync(join(theirs, 'aleph-pty', digest), 12345, 12345);
    const open = join(work, 'open');
    mkdirSync(join(open, 'aleph-pty'), { recursive: true });
    chmodSync(join(open, 'aleph-pty'), 0o777);
    const made = executableCopy(helper, 'spawner', [theirs, open]);
    expect(made).toBeDefined();
    expect(made).not.toBe(copy);
    expect(made!.startsWith(open)).toBe(false);
    expect(readFileSync(made!).equals(readFileSync(helper))).toBe(true);
    expect(statSync(made!).uid).toBe(process.getuid?.());
    expect(readFileSync(copy, 'utf8')).toContain('planted'); // theirs left alone
    rmSync(join(made!, '..'), { recursive: true, force: true });
  },
);
