// pty.snapshot (issue 17): a client that asks for the screen late — here after 1.3 MB of output and
// inside vim — draws what a client that watched from the start draws, and goes on from there.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import headless from '@xterm/headless';
import { afterEach, beforeEach, expect, it } from 'vitest';
import type { MethodResult } from './protocol.js';
import { startGateway, until, type Harness } from '../test/support.js';

let h: Harness;
let dir: string;
beforeEach(async () => {
  h = await startGateway();
  dir = mkdtempSync(join(tmpdir(), 'aleph-snapshot-'));
});
afterEach(async () => {
  await h.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const terminal = (cols: number, rows: number) =>
  new headless.Terminal({ cols, rows, scrollback: 1000, allowProposedApi: true });
const write = (term: headless.Terminal, data: string | Uint8Array) =>
  new Promise<void>((resolve) => term.write(data, resolve));

/** What a person sees: the active buffer, its visible lines with their colours, the cursor, the modes. */
function screenOf(term: headless.Terminal) {
  const buffer = term.buffer.active;
  const lines: string[] = [];
  const colours: string[] = [];
  for (let y = 0; y < term.rows; y += 1) {
    const line = buffer.getLine(buffer.viewportY + y);
    lines.push(line?.translateToString(true) ?? '');
    let attrs = '';
    for (let x = 0; x < term.cols; x += 1) {
      const cell = line?.getCell(x);
      if (cell !== undefined)
        attrs += `${cell.getFgColorMode()}:${cell.getFgColor()}/${cell.getBgColorMode()}:${cell.getBgColor()}/${cell.isBold()}${cell.isInverse()},`;
    }
    colours.push(attrs);
  }
  return {
    buffer: buffer.type,
    cursor: [buffer.cursorX, buffer.cursorY],
    size: [term.cols, term.rows],
    modes: { ...term.modes },
    lines,
    colours,
  };
}

/** A bash session in `dir`, with a headless terminal that watches its output from byte 0. */
async function watchedShell() {
  const client = await h.connect();
  await client.subscribe(['pty.*']);
  const { sessionId } = await client.spawn({
    command: '/bin/bash',
    args: ['--norc', '--noprofile'],
    env: { TERM: 'xterm-256color', PS1: 'prompt$ ' },
    cwd: dir,
    cols: 80,
    rows: 24,
  });
  const received: Buffer[] = [];
  let total = 0;
  await client.follow(sessionId, 0, (data) => {
    received.push(data);
    total += data.length;
  });
  const watcher = terminal(80, 24);
  let watched = 0;
  /** Feeds the watcher everything received so far. */
  const watch = async () => {
    const all = Buffer.concat(received);
    const fresh = all.subarray(watched);
    watched = all.length;
    await write(watcher, fresh);
  };
  const screenShows = async (pattern: RegExp) => {
    await watch();
    return pattern.test(screenOf(watcher).lines.join('\n'));
  };
  const waitScreen = async (pattern: RegExp, what: string) => {
    for (const deadline = Date.now() + 60_000; Date.now() < deadline;) {
      if (await screenShows(pattern)) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`timed out waiting for ${what}`);
  };
  const type = (keys: string) => client.input(sessionId, keys);
  /** A late client: pty.snapshot now, then the output after its offset, as a follow brings it. */
  const lateClient = async () => {
    const snapshot = await client.request<MethodResult<'pty.snapshot'>>('pty.snapshot', { sessionId });
    await until(() => total >= snapshot.offset, 'the output up to the snapshot');
    await watch();
    const late = terminal(snapshot.cols, snapshot.rows);
    await write(late, snapshot.data);
    let fed = snapshot.offset;
    /** Brings the late client up to what the watcher has seen. */
    const catchUp = async () => {
      await watch();
      await write(late, Buffer.concat(received).subarray(fed, watched));
      fed = watched;
    };
    await catchUp();
    return { snapshot, late, catchUp };
  };
  return { watcher, type, waitScreen, lateClient, total: () => total };
}

it('a snapshot after 1.3 MB of output, inside vim, draws the screen a watcher from the start sees', async () => {
  const { watcher, type, waitScreen, lateClient, total } = await watchedShell();
  await type('seq 1 200000\r');
  await waitScreen(/^200000\nprompt\$ $/m, 'seq to finish');
  expect(total()).toBeGreaterThan(1024 * 1024 + 200_000);
  await type('vim -u NONE -N notes.txt\r');
  await waitScreen(/"notes.txt" \[New\]/, 'vim');
  await type(':syntax on\r:set number hlsearch\rihello \x16\x1b[31mvim\x1b');
  await waitScreen(/^ {2}1 hello/m, 'the typed text');

  const { snapshot, late, catchUp } = await lateClient();
  expect(snapshot.offset).toBeGreaterThan(1024 * 1024);
  expect(screenOf(watcher).buffer).toBe('alternate');
  expect(screenOf(late)).toEqual(screenOf(watcher));

  // And it goes on from there: both see vim quit to the same prompt.
  await type(':q!\r');
  await waitScreen(/^prompt\$ $/m, 'the prompt after vim');
  await catchUp();
  expect(screenOf(watcher).buffer).toBe('normal');
  expect(screenOf(late)).toEqual(screenOf(watcher));
  watcher.dispose();
  late.dispose();
});

// Issue 17, the outside tester's case: vim entered the alternate screen more than 1 MiB of output
// before the first snapshot. The late client must be in vim's alternate screen, and after `:q!`
// show the shell's scrollback (not vim's leftovers under the prompt).
it('a first snapshot taken 1.3 MiB of redraws after vim entered the alternate screen', async () => {
  const { watcher, type, waitScreen, lateClient, total } = await watchedShell();
  await type('echo before-vim\r');
  await waitScreen(/^before-vim$/m, 'the echo');
  await type('vim -u NONE -N\r');
  await waitScreen(/^~/m, 'vim');
  const entered = total();
  await type(':r !seq 1 100000\r');
  await waitScreen(/^100000/m, 'the numbers read in');
  await type('gg:set number\r');
  // Redraws until more than 1.3 MiB of output came after vim started.
  for (let round = 0; total() - entered < 1.3 * 1024 * 1024; round += 1) {
    expect(round).toBeLessThan(50);
    await type(`:for i in range(200) | exe "normal \\<C-f>" | redraw! | endfor | echo "round-${round}"\r`);
    await waitScreen(new RegExp(`^round-${round}`, 'm'), `redraw round ${round}`);
  }
  const { late, catchUp } = await lateClient();
  expect(screenOf(watcher).buffer).toBe('alternate');
  expect(screenOf(late)).toEqual(screenOf(watcher));

  await type(':q!\r');
  await waitScreen(/^prompt\$ $/m, 'the prompt after vim');
  await catchUp();
  expect(screenOf(watcher).buffer).toBe('normal');
  expect(screenOf(watcher).lines.join('\n')).toMatch(/^before-vim$/m);
  expect(screenOf(late)).toEqual(screenOf(watcher));
  watcher.dispose();
  late.dispose();
});
