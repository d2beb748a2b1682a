// A session's screen, kept by a headless xterm.js (as VS Code's pty host does) so a client can be
// shown exactly what one that watched from the start sees: buffers, cursor, modes, colours.
// Created on the first snapshot asked of a session, from its scrollback, after the modes in force at
// its start (kept by a ModeTracker for every session; other state set by output older than the
// scrollback is not known: see PROTOCOL.md), each stretch of it at the size it was written for (a
// SizeLog), then fed its output as it comes — while that is cheap: a terminal that falls more than
// MAX_BEHIND_BYTES behind a flood is dropped, and built anew at the next snapshot. Sessions nobody
// snapshots cost nothing. Its memory is bounded whatever size a client asks for: at most
// MAX_SNAPSHOT_CELLS on screen (a bigger session has no screen: pty.snapshot refuses it) and
// BUFFER_CELLS in the normal buffer with its scrollback (fewer lines of scrollback for wide ones).
import type { PtySession } from '@aleph/pty';
import serializeModule from '@xterm/addon-serialize';
import unicode11Module from '@xterm/addon-unicode11';
import headless from '@xterm/headless';
import { MAX_SNAPSHOT_CELLS } from '../protocol.js';
import { boundCounts } from './bounded-counts.js';
import { unserializedModes } from './modes.js';
import type { SizeLog } from './size-log.js';

/** Lines of scrollback the server's terminal keeps, and a snapshot carries, at most. */
export const SNAPSHOT_SCROLLBACK_LINES = 1000;
/** Cells of the normal buffer (screen and scrollback) at most: ~12 bytes each in xterm.js. */
const BUFFER_CELLS = 2 * MAX_SNAPSHOT_CELLS;
/** Output written to the terminal and not parsed yet past which it is dropped (a flood). */
export const MAX_BEHIND_BYTES = 2 * 1024 * 1024;
const EMPTY = new Uint8Array(0);
/** How addon-serialize switches to the alternate buffer in a snapshot. */
const ALTERNATE_SWITCH = '\x1b[?1049h\x1b[H';

/** Whether a session of this size may have a screen (and a snapshot). */
export const screenFits = (cols: number, rows: number): boolean => cols * rows <= MAX_SNAPSHOT_CELLS;

/** Lines of scrollback for a terminal of this size: as many as BUFFER_CELLS leaves, up to the maximum. */
const scrollbackFor = (cols: number, rows: number): number =>
  Math.max(0, Math.min(SNAPSHOT_SCROLLBACK_LINES, Math.floor(BUFFER_CELLS / cols) - rows));

/**
 * A size the terminal may take: output written at a size past the budget (older, since the session
 * fits now) is replayed with fewer rows — that stretch is then not exact, but memory stays bounded.
 */
const bounded = (cols: number, rows: number) => ({
  cols,
  rows: screenFits(cols, rows) ? rows : Math.max(1, Math.floor(MAX_SNAPSHOT_CELLS / cols)),
});

/** The modes addon-serialize 0.14 writes (its `_serializeModes`, from the public `modes`). */
function serializedModes(modes: headless.IModes): string {
  const tracking = {
    none: '',
    x10: '\x1b[?9h',
    vt200: '\x1b[?1000h',
    drag: '\x1b[?1002h',
    any: '\x1b[?1003h',
  };
  return (
    (modes.applicationCursorKeysMode ? '\x1b[?1h' : '') +
    (modes.applicationKeypadMode ? '\x1b[?66h' : '') +
    (modes.bracketedPasteMode ? '\x1b[?2004h' : '') +
    (modes.insertMode ? '\x1b[4h' : '') +
    (modes.originMode ? '\x1b[?6h' : '') +
    (modes.reverseWraparoundMode ? '\x1b[?45h' : '') +
    (modes.sendFocusMode ? '\x1b[?1004h' : '') +
    (modes.wraparoundMode ? '' : '\x1b[?7l') +
    tracking[modes.mouseTrackingMode]
  );
}

type Line = NonNullable<ReturnType<headless.IBuffer['getLine']>>;
const passThrough = <T extends object>(target: T, key: string | symbol): unknown => {
  const value: unknown = Reflect.get(target, key, target);
  return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
};

/**
 * The terminal as the serializer sees it: each line ends at the terminal's width. xterm.js keeps a
 * line's cells past a shrink (`IBufferLine.length` > `cols`: documented) and addon-serialize 0.14
 * reads them, so a full-width wrapped row lost its last column and gained `---` junk after a shrink
 * (fixed upstream only in 0.15 betas, which need a beta @xterm/xterm). The
 * cells cut off are ones no client of this width can show.
 */
function widthBound(terminal: headless.Terminal): Parameters<serializeModule.SerializeAddon['activate']>[0] {
  const line = (real: Line | undefined): Line | undefined =>
    real && {
      get isWrapped() {
        return real.isWrapped;
      },
      length: Math.min(real.length, terminal.cols),
      getCell: (x, cell) => (x < terminal.cols ? real.getCell(x, cell) : undefined),
      translateToString: (trimRight, start, end) =>
        real.translateToString(trimRight, start, Math.min(end ?? terminal.cols, terminal.cols)),
    };
  const buffer = (real: headless.IBuffer): headless.IBuffer =>
    new Proxy(real, {
      get: (target, key) =>
        key === 'getLine' ? (y: number) => line(target.getLine(y)) : passThrough(target, key),
    });
  const buffers = {
    get active() {
      return buffer(terminal.buffer.active);
    },
    get normal() {
      return buffer(terminal.buffer.normal);
    },
    get alternate() {
      return buffer(terminal.buffer.alternate);
    },
  };
  return new Proxy(terminal, {
    get: (target, key) => (key === 'buffer' ? buffers : passThrough(target, key)),
  }) as unknown as Parameters<serializeModule.SerializeAddon['activate']>[0];
}

export interface Snapshot {
  readonly offset: number;
  readonly cols: number;
  readonly rows: number;
  readonly data: string;
}

export class SessionScreen {
  readonly #session: PtySession;
  readonly #terminal: headless.Terminal;
  readonly #serializer: serializeModule.SerializeAddon;
  readonly #listener: { dispose(): void };
  /** Offset one past the last byte written to the terminal, and bytes written but not parsed. */
  #fed: number;
  #behind = 0;
  #cols: number;
  #rows: number;
  #disposed = false;
  readonly #onDrop: () => void;
  readonly #modes: () => number;
  readonly #waiting = new Set<(error: Error) => void>();

  /**
   * `origin`: where to start in the scrollback and the modes in force there (from the session's
   * ModeTracker); without it, the scrollback's start in the default modes. `sizes`: the sizes the
   * output was written for (without it, all at the session's size now). `modes`: the session's
   * mode word now (its ModeTracker's), for the modes addon-serialize does not write.
   */
  constructor(
    session: PtySession,
    options: {
      readonly origin?: { readonly offset: number; readonly sequences: string | Uint8Array } | undefined;
      readonly sizes?: SizeLog | undefined;
      readonly modes?: (() => number) | undefined;
      readonly onDrop: () => void;
    },
  ) {
    this.#session = session;
    this.#onDrop = options.onDrop;
    this.#modes = options.modes ?? (() => 0);
    const { offset, data } = session.replay(options.origin?.offset ?? 0);
    const sizes = options.sizes?.from(offset) ?? { cols: session.cols, rows: session.rows, changes: [] };
    this.#cols = sizes.cols;
    this.#rows = sizes.rows;
    const start = bounded(sizes.cols, sizes.rows);
    this.#terminal = new headless.Terminal({
      ...start,
      scrollback: scrollbackFor(start.cols, start.rows),
      allowProposedApi: true,
      logLevel: 'off', // (xterm.js writes each parse error of a program's binary output to the console)
    });
    boundCounts(this.#terminal); // a count of 2^31 in the output must not block the event loop
    // Unicode 11 widths (emoji 2 columns), as programs (glibc's wcwidth), tmux and the console count.
    this.#terminal.loadAddon(new unicode11Module.Unicode11Addon());
    this.#terminal.unicode.activeVersion = '11';
    this.#serializer = new serializeModule.SerializeAddon();
    this.#serializer.activate(widthBound(this.#terminal));
    const sequences = options.origin?.sequences ?? '';
    if (sequences.length > 0) this.#terminal.write(sequences);
    // Each stretch of the scrollback at the size it was written for, as a terminal that watched.
    this.#fed = offset;
    for (const change of sizes.changes) {
      if (change.offset > this.#fed) this.#feed(data.subarray(this.#fed - offset, change.offset - offset));
      this.#resizeTo(change.cols, change.rows);
    }
    this.#write(data.subarray(this.#fed - offset));
    this.#listener = session.onData((chunk) => this.#write(chunk));
  }

  #write(chunk: Uint8Array): void {
    if (this.#disposed) return;
    // A resize takes effect where it happened in the stream: before the output that follows it.
    const { cols, rows } = this.#session;
    if (cols !== this.#cols || rows !== this.#rows) {
      // Grown past the budget: no screen (pty.snapshot refuses such a session until it shrinks).
      if (!screenFits(cols, rows)) return this.dispose();
      this.#resizeTo(cols, rows);
    }
    this.#feed(chunk);
  }

  #feed(chunk: Uint8Array): void {
    if (this.#disposed) return;
    this.#fed += chunk.length;
    this.#behind += chunk.length;
    if (this.#behind > MAX_BEHIND_BYTES) return this.dispose();
    this.#terminal.write(chunk, () => (this.#behind -= chunk.length));
  }

  /** Resizes the terminal once the output written so far is parsed (within the cell budget). */
  #resizeTo(cols: number, rows: number): void {
    this.#cols = cols;
    this.#rows = rows;
    const size = bounded(cols, rows);
    this.#terminal.write(EMPTY, () => {
      if (this.#disposed) return;
      // Fewer lines of scrollback first: the lines it drops never take the wider size's memory.
      this.#terminal.options.scrollback = scrollbackFor(size.cols, size.rows);
      this.#terminal.resize(size.cols, size.rows);
    });
  }

  /** The screen after every byte written so far: serialized once the terminal has parsed them. */
  snapshot(): Promise<Snapshot> {
    this.#write(EMPTY); // a resize not followed by output yet
    const offset = this.#fed;
    // The modes at `offset` that addon-serialize does not write (mouse encoding, a hidden cursor).
    const modes = unserializedModes(this.#modes());
    return new Promise((resolve, reject) => {
      if (this.#disposed) return reject(new Error('the screen was dropped'));
      this.#waiting.add(reject);
      // Write callbacks run in order, each right after its chunk is parsed: here the terminal has
      // seen exactly the first `offset` bytes.
      this.#terminal.write(EMPTY, () => {
        this.#waiting.delete(reject);
        resolve({
          offset,
          cols: this.#terminal.cols,
          rows: this.#terminal.rows,
          data: this.#serialize() + modes,
        });
      });
    });
  }

  #serialize(): string {
    const terminal = this.#terminal;
    const data = this.#serializer.serialize({
      scrollback: terminal.options.scrollback ?? 0,
      excludeModes: true,
    });
    // addon-serialize 0.14 ends the normal buffer with the cursor's attributes and then switches to
    // the alternate one without resetting them: they would leak into its first cells, and be saved
    // as the cursor state the program's exit from the alternate buffer restores. Reset them first.
    // It also moves the cursor back one column short after a last row that fills the width (from
    // the pending-wrap column): place it absolutely, unless it is in that pending-wrap state itself.
    // Then the modes (after the move: with origin mode on, CUP would be relative to the margins).
    const { cursorX, cursorY } = terminal.buffer.active;
    const cursor = cursorX < terminal.cols ? `\x1b[${cursorY + 1};${cursorX + 1}H` : '';
    return (
      data.replace(ALTERNATE_SWITCH, `\x1b[0m${ALTERNATE_SWITCH}`) + cursor + serializedModes(terminal.modes)
    );
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#listener.dispose();
    this.#serializer.dispose();
    this.#terminal.dispose();
    for (const reject of this.#waiting) reject(new Error('the screen was dropped (a flood)'));
    this.#waiting.clear();
    this.#onDrop();
  }
}
