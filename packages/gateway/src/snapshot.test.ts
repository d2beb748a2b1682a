// pty.snapshot (issue 17): a client that asks for the screen late — here after 1.3 MB of output and
// inside vim — draws what a client that watched from the start draws, and goes on from there.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import unicode11Module from '@xterm/addon-unicode11';
import headless from '@xterm/headless';
import { afterEach, beforeEach, expect, it, vi } from 'vitest';
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
  /** Resizes the watcher makes before the output at their offset, as a terminal on screen would. */
  const resizes: { offset: number; cols: number; rows: number }[] = [];
  /** Feeds the watcher everything received so far. */
  const watch = async () => {
    const all = Buffer.concat(received);
    while (resizes[0] !== undefined && resizes[0].offset <= all.length) {
      const { offset, cols, rows } = resizes.shift()!;
      await write(watcher, all.subarray(watched, offset));
      watched = offset;
      watcher.resize(cols, rows);
    }
    const fresh = all.subarray(watched);
    watched = all.length;
    await write(watcher, fresh);
  };
  /**
   * Resizes the session once all its output so far has arrived: the programs here are idle then, so
   * the resize takes effect at that offset (what follows is the program's redraw for the new size).
   */
  const resize = async (cols: number, rows: number) => {
    const outputOffset = async () => {
      const sessions = await client.call('pty.list', {});
      return sessions.find((session) => session.sessionId === sessionId)!.outputOffset;
    };
    const offset = await outputOffset();
    await until(() => total >= offset, 'the output before the resize');
    await client.resize(sessionId, cols, rows);
    resizes.push({ offset, cols, rows });
  };
  const screenShows = async (pattern: RegExp) => {
    await watch();
    return pattern.test(screenOf(watcher).lines.join('\n'));
  };
  const waitScreen = async (pattern: RegExp, what: string) => {
    for (const deadline = Date.now() + 20_000; Date.now() < deadline;) {
      if (await screenShows(pattern)) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`timed out waiting for ${what}; the screen:\n${screenOf(watcher).lines.join('\n')}`);
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
  return { client, sessionId, watcher, type, resize, waitScreen, lateClient, total: () => total };
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

// vim entered the alternate screen more than 1 MiB of output
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

// Outside tester, T-A: the first snapshot after a resize replayed the whole scrollback at the new
// size, so vim's screen (drawn at 80×24, then redrawn at 120×40) came out as 39 of 40 wrong lines.
it('a first snapshot after resizes replays each stretch of output at the size it was written for', async () => {
  const { watcher, type, resize, waitScreen, lateClient } = await watchedShell();
  await type('seq 1 3000 > numbers.txt; seq 1 60\r');
  await waitScreen(/^60\nprompt\$ $/m, 'seq');
  await type("vim -u NONE -N -c 'set nu' numbers.txt\r");
  await waitScreen(/^ {2}23 23$/m, 'vim at 80×24');
  await resize(120, 40);
  await waitScreen(/^ {2}39 39$/m, 'vim redrawn at 120×40');
  await type('50%');
  await waitScreen(/^1500 1500$/m, 'the middle of the file');
  await resize(100, 30);
  await waitScreen(/^1500 1500$/m, 'vim redrawn at 100×30');
  await new Promise((resolve) => setTimeout(resolve, 300)); // any redraw still coming is drawn by both

  const { snapshot, late, catchUp } = await lateClient();
  expect([snapshot.cols, snapshot.rows]).toEqual([100, 30]);
  expect(screenOf(late)).toEqual(screenOf(watcher));

  await type(':q!\r');
  await waitScreen(/^prompt\$ $/m, 'the prompt after vim');
  await catchUp();
  expect(screenOf(watcher).lines.join('\n')).toMatch(/^60$/m);
  expect(screenOf(late)).toEqual(screenOf(watcher));
  watcher.dispose();
  late.dispose();
});

/** The bytes a left click at the top-left cell sends, and whether the cursor is hidden (xterm.js internals). */
function inputState(term: headless.Terminal) {
  const core = (term as unknown as { _core?: Record<string, unknown> })._core;
  const mouse = core?.['coreMouseService'] as
    { triggerMouseEvent(event: Record<string, unknown>): boolean } | undefined;
  const service = core?.['coreService'] as { isCursorHidden: boolean } | undefined;
  if (mouse === undefined || service === undefined)
    throw new Error('@xterm/headless changed its internals: update inputState in snapshot.test.ts');
  const sent: string[] = [];
  const listener = term.onData((data) => sent.push(data));
  mouse.triggerMouseEvent({
    col: 2,
    row: 3,
    x: 0,
    y: 0,
    button: 0,
    action: 1,
    ctrl: false,
    alt: false,
    shift: false,
  });
  listener.dispose();
  return { click: sent.join(''), cursorHidden: service.isCursorHidden };
}

// Outside tester, T-C: a snapshot dropped the SGR mouse encoding (?1006), so after a reattach a
// click reached htop/vim as an X10 report (ESC [ M …) that they read as keys; and a hidden cursor.
it('a snapshot keeps the mouse encoding and a hidden cursor, so a click after a reattach sends the same bytes', async () => {
  const { watcher, type, waitScreen, lateClient } = await watchedShell();
  await type("printf '\\033[?1006;1000h\\033[?25l'; echo mouse-on\r");
  await waitScreen(/^mouse-on$/m, 'the modes set');
  const { late } = await lateClient();
  expect(inputState(watcher)).toEqual({ click: '\x1b[<0;3;4M', cursorHidden: true });
  expect(inputState(late)).toEqual(inputState(watcher));

  for (const encoding of [1015, 1005, 1016]) {
    await type(`printf '\\033[?${encoding}h'; echo encoding-${encoding}\r`);
    await waitScreen(new RegExp(`^encoding-${encoding}$`, 'm'), `?${encoding}`);
    const { snapshot } = await lateClient();
    expect(snapshot.data).toContain(`\x1b[?${encoding}h`);
  }
  watcher.dispose();
  late.dispose();
});

// Outside tester, G-A: one resize to 10000×10000 and one snapshot cost the server ~1.15 GB, never
// given back, and seconds of a blocked event loop. The snapshot's terminal has a cell budget now.
it('a session too large for a snapshot is refused with screen_too_large, and served again once smaller', async () => {
  const { client, sessionId, type, waitScreen, lateClient } = await watchedShell();
  await lateClient(); // the server's terminal exists: growing past the budget drops it
  const heapBefore = process.memoryUsage();
  await client.resize(sessionId, 10_000, 10_000);
  await type('echo huge\r');
  await waitScreen(/^huge$/m, 'output at 10000×10000');
  const refused = await client.call('pty.snapshot', { sessionId }).then(
    () => undefined,
    (error: unknown) => error as { code?: string; message: string },
  );
  expect(refused?.code).toBe('screen_too_large');
  expect(refused?.message).toMatch(/10000×10000: a snapshot covers at most 500000 cells/);
  const heapAfter = process.memoryUsage();
  // A 10000×10000 xterm.js buffer is 1.2 GB of typed arrays: nothing near that was allocated.
  expect(heapAfter.arrayBuffers - heapBefore.arrayBuffers).toBeLessThan(100 * 1024 * 1024);

  // Back under the budget: a snapshot again (the output written at 10000×10000 replayed in fewer rows).
  await client.resize(sessionId, 1000, 500);
  await type('echo wide\r');
  await waitScreen(/^wide$/m, 'output at 1000×500');
  const { snapshot, late } = await lateClient();
  expect([snapshot.cols, snapshot.rows]).toEqual([1000, 500]);
  expect(screenOf(late).lines.join('\n')).toMatch(/^wide$/m);
  late.dispose();
});

// After vim shrank to 50×10, a snapshot must not lose the last column of a full-width wrapped row
// nor add `---` junk rows (addon-serialize read cells past the new width).
it('a snapshot after a shrink keeps full-width wrapped rows whole', async () => {
  const { watcher, type, resize, waitScreen, lateClient } = await watchedShell();
  await type(
    `for i in $(seq 1 40); do printf "%02d-%s\\n" $i $(printf 'abcdefgh%.0s' $(seq 1 $((i % 4 + 6)))); done > long.txt\r`,
  );
  await type("vim -u NONE -N -c 'set nu' long.txt\r");
  await waitScreen(/^ {2}1 01-abcdefgh/m, 'vim at 80×24');
  await lateClient(); // the server's terminal exists before the shrink, as in the tester's run
  await resize(50, 10);
  await waitScreen(/^ {2}1 01-abcdefghabcdefgh/m, 'vim redrawn at 50×10');
  await new Promise((resolve) => setTimeout(resolve, 300)); // any redraw still coming is drawn by both
  const { late } = await lateClient();
  expect(screenOf(watcher).lines.filter((text) => text.length === 50).length).toBeGreaterThan(3);
  expect(screenOf(late)).toEqual(screenOf(watcher));
  watcher.dispose();
  late.dispose();
});

it('counts emoji 2 columns wide, as programs (glibc wcwidth), tmux and the console do', async () => {
  const client = await h.connect();
  // `😀|`, then `😀😀` with `Z` written at column 3: over the second emoji, for a program.
  const { sessionId } = await client.spawn({
    command: '/bin/sh',
    args: [
      '-c',
      "printf '\\360\\237\\230\\200|\\n\\360\\237\\230\\200\\360\\237\\230\\200\\033[3GZ\\n'; sleep 30",
    ],
    cols: 40,
    rows: 5,
  });
  let snapshot = await client.request<MethodResult<'pty.snapshot'>>('pty.snapshot', { sessionId });
  for (const deadline = Date.now() + 20_000; !snapshot.data.includes('Z') && Date.now() < deadline;)
    snapshot = await client.request<MethodResult<'pty.snapshot'>>('pty.snapshot', { sessionId });
  // Drawn by a terminal with Unicode 11 widths (the console's): `|` in column 3, `Z` over the emoji.
  const late = terminal(40, 5);
  late.loadAddon(new unicode11Module.Unicode11Addon());
  late.unicode.activeVersion = '11';
  await write(late, snapshot.data);
  const lines = screenOf(late).lines;
  expect(lines.slice(0, 2)).toEqual(['😀|', '😀Z']);
  expect(late.buffer.active.getLine(0)?.getCell(2)?.getChars()).toBe('|');
  await client.closeSession(sessionId);
});

it("a program's binary output parsed for a snapshot writes nothing to the server's console", async () => {
  const logged: unknown[][] = [];
  const spies = (['error', 'warn', 'info', 'log', 'debug'] as const).map((level) =>
    vi.spyOn(console, level).mockImplementation((...args: unknown[]) => void logged.push(args)),
  );
  try {
    const client = await h.connect();
    await client.subscribe(['pty.*']);
    const { sessionId } = await client.spawn({
      command: '/bin/sh',
      args: ['-c', 'stty raw -echo; printf R; read -r line; head -c 200000 /dev/urandom; printf END'],
      cols: 80,
      rows: 24,
    });
    let seen = '';
    await client.follow(sessionId, 0, (data) => void (seen = (seen + data.toString('latin1')).slice(-16)));
    await until(() => seen.includes('R'), 'the program to start');
    await client.request('pty.snapshot', { sessionId }); // the server's terminal exists from here
    await client.input(sessionId, 'go\n');
    await until(() => seen.endsWith('END'), 'the random bytes');
    await client.request('pty.snapshot', { sessionId }); // parsed up to here
    expect(logged.map((args) => String(args[0]).slice(0, 80))).toEqual([]);
  } finally {
    for (const spy of spies) spy.mockRestore();
  }
});

it('counts of 2^31 in the output (repeat, insert, scroll, tab) are cut to the screen: the snapshot answers', async () => {
  const client = await h.connect();
  await client.subscribe(['pty.*']);
  const huge = (final: string) => `\\033[2147483647${final}`;
  /** The screen a late client draws from a snapshot of a program printing `script`'s output. */
  const screenAfter = async (script: string) => {
    const { sessionId } = await client.spawn({
      command: '/bin/sh',
      args: ['-c', `printf '${script}'; echo; echo counted-end; sleep 30`],
      cols: 80,
      rows: 24,
    });
    let output = '';
    await client.follow(sessionId, 0, (data) => (output += data.toString()));
    await until(() => output.includes('counted-end'), 'the output', 10_000);
    const snapshot = await client.request<MethodResult<'pty.snapshot'>>('pty.snapshot', { sessionId });
    const late = terminal(80, 24);
    await write(late, snapshot.data);
    const { lines, cursor } = screenOf(late);
    late.dispose();
    return { lines, cursor };
  };
  // The repeat fills the screen with "a" and scrolls it, as 2^31 "a"s would (2^31 mod 80 = 48 on the last).
  const repeated = await screenAfter(`a${huge('b')}`);
  expect(repeated.lines.slice(0, 21)).toEqual(Array(21).fill('a'.repeat(80)));
  expect(repeated.lines.slice(21, 23)).toEqual(['a'.repeat(48), 'counted-end']);
  // Lines inserted, deleted and scrolled past the screen leave it empty, tabs and cells stay on it.
  const emptied = await screenAfter(
    `top\\nmiddle${huge('L')}${huge('M')}${huge('S')}${huge('T')}${huge('I')}${huge('Z')}${huge('@')}${huge('P')}${huge('X')}x`,
  );
  expect(emptied.lines.join('\n').trim()).toBe('x\ncounted-end');
  expect(await client.request('pty.list', {})).toBeDefined(); // and the server answers on
});
