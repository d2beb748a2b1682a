// readModelWritableFile on real files, links, a FIFO and a device. The FIFO is read in a child with
// a timeout: a blocking open would hold this worker's thread for good.
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { MODEL_FILE_MAX_BYTES, readModelWritableFile } from './index.js';

const root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-model-file-')));
const project = join(root, 'project');
mkdirSync(join(project, 'secret'), { recursive: true });
writeFileSync(join(project, 'notes.md'), 'hello\n');
writeFileSync(join(project, 'secret', 'key'), 'SECRET\n');
writeFileSync(join(root, 'outside.md'), 'OUTSIDE\n');
afterAll(() => rmSync(root, { recursive: true, force: true }));

const confined = { roots: [project], denied: [join(project, 'secret')] };

describe('readModelWritableFile', () => {
  it('reads a regular file in the project, through a link inside it too', () => {
    expect(readModelWritableFile(join(project, 'notes.md'), confined)).toEqual({
      kind: 'read',
      real: join(project, 'notes.md'),
      text: 'hello\n',
      bytes: 6,
      whole: true,
    });
    symlinkSync('notes.md', join(project, 'inner-link.md'));
    expect(readModelWritableFile(join(project, 'inner-link.md'), confined)).toMatchObject({
      kind: 'read',
      real: join(project, 'notes.md'),
    });
  });

  it('nothing there is missing; a dangling link cannot be resolved', () => {
    expect(readModelWritableFile(join(project, 'absent.md'), confined)).toEqual({ kind: 'missing' });
    symlinkSync(join(root, 'nowhere'), join(project, 'dangling.md'));
    expect(readModelWritableFile(join(project, 'dangling.md'), confined)).toEqual({
      kind: 'refused',
      why: 'unresolved',
      reason: 'cannot be resolved (ENOENT)',
      code: 'ENOENT',
    });
  });

  it('a link out of the project, or to a denied path, is refused without reading it', () => {
    symlinkSync(join(root, 'outside.md'), join(project, 'out.md'));
    symlinkSync(join(project, 'secret', 'key'), join(project, 'key.md'));
    const out = readModelWritableFile(join(project, 'out.md'), confined);
    expect(out).toEqual({
      kind: 'refused',
      why: 'outside',
      reason: `is a link to a path outside ${project}`,
      real: join(root, 'outside.md'),
    });
    const denied = readModelWritableFile(join(project, 'key.md'), confined);
    expect(denied).toMatchObject({ kind: 'refused', why: 'denied', under: join(project, 'secret') });
    expect(JSON.stringify([out, denied])).not.toMatch(/OUTSIDE|SECRET/);
    // Without roots, anywhere but the denied paths.
    expect(readModelWritableFile(join(project, 'out.md'))).toMatchObject({ kind: 'read', text: 'OUTSIDE\n' });
  });

  it('a folder and a device are not regular files (/dev/zero is never read)', () => {
    expect(readModelWritableFile(project)).toMatchObject({ kind: 'refused', why: 'not_file' });
    symlinkSync('/dev/zero', join(project, 'zero.json'));
    expect(readModelWritableFile(join(project, 'zero.json'))).toMatchObject({
      kind: 'refused',
      why: 'not_file',
      reason: 'is not a regular file',
    });
  });

  it('a FIFO is refused at once, never waited on', () => {
    const fifo = join(project, 'fifo.json');
    execFileSync('mkfifo', [fifo]);
    const script = `import { readModelWritableFile } from ${JSON.stringify(join(import.meta.dirname, 'model-file.ts'))};
      console.log(JSON.stringify(readModelWritableFile(${JSON.stringify(fifo)})));`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      timeout: 60_000, // a blocking open fails it; tsx starts slowly under load
      encoding: 'utf8',
      cwd: join(import.meta.dirname, '..'),
    });
    expect(JSON.parse(out)).toEqual({
      kind: 'refused',
      why: 'not_file',
      reason: 'is not a regular file',
      real: fifo,
    });
  }, 90_000);

  it('a file over the limit is refused, or its head read with larger: head', () => {
    const big = join(project, 'big.md');
    writeFileSync(big, 'x'.repeat(MODEL_FILE_MAX_BYTES + 1));
    expect(readModelWritableFile(big)).toMatchObject({
      kind: 'refused',
      why: 'too_large',
      reason: `is ${MODEL_FILE_MAX_BYTES + 1} bytes, over the limit of ${MODEL_FILE_MAX_BYTES}`,
    });
    expect(readModelWritableFile(big, { maxBytes: 10, larger: 'head' })).toMatchObject({
      kind: 'read',
      text: 'x'.repeat(10),
      bytes: MODEL_FILE_MAX_BYTES + 1,
      whole: false,
    });
    expect(readModelWritableFile(join(project, 'notes.md'), { maxBytes: 6 })).toMatchObject({
      text: 'hello\n',
      whole: true,
    });
  });
});
