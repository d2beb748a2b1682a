// Fails loudly when a node-pty upgrade moves a private field PtySession relies on (see
// node-pty-internals.ts): each is looked for on a real UnixTerminal, and the exit hook must fire.
import { closeSync, constants, openSync } from 'node:fs';
import { createRequire } from 'node:module';
import * as nodePty from 'node-pty';
import { describe, expect, it } from 'vitest';
import { internalsOf, missingInternals, whenProgramExits, writeQueueOf } from './node-pty-internals.js';

const version = (createRequire(import.meta.url)('node-pty/package.json') as { version: string }).version;

describe.runIf(process.platform !== 'win32')(`node-pty ${version}'s private fields`, () => {
  it('are all where the adapter reads them', async () => {
    const pty = nodePty.spawn('/bin/sh', ['-c', 'sleep 0.3'], { cols: 80, rows: 24, encoding: null });
    // Held open, as PtySession holds it: the master does not close first, so the exit comes first.
    const slave = openSync(internalsOf(pty)?.slavePath ?? '/dev/null', constants.O_RDWR | constants.O_NOCTTY);
    let exited = false;
    whenProgramExits(pty, () => {
      exited = true;
      closeSync(slave);
    });
    const missing = missingInternals(pty);
    expect(
      missing,
      `node-pty ${version} moved ${missing.join(', ')}: update src/internal/node-pty-internals.ts`,
    ).toEqual([]);
    const internals = internalsOf(pty);
    expect(internals?.slavePath).toMatch(/^\/dev\/pts\/\d+$|^\/dev\/tty/);
    expect(internals?.socket?.destroyed).toBe(false);
    expect(writeQueueOf(pty)).toEqual([]);
    await new Promise<void>((resolve) => pty.onExit(() => resolve()));
    expect(exited, `node-pty ${version} no longer sets _boundClose on exit`).toBe(true);
  });
});
