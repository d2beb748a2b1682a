// A session's screen, kept by a headless xterm.js (as VS Code's pty host does) so a client can be
// shown exactly what one that watched from the start sees: buffers, cursor, modes, colours.
// Created on the first snapshot asked of a session, from its scrollback, after the modes in force at
// its start (kept by a ModeTracker for every session; other state set by output older than the
// scrollback is not known: see PROTOCOL.md), then fed its output as it comes — while that is
// cheap: a terminal that falls more than MAX_BEHIND_BYTES behind a flood is dropped, and built anew
// at the next snapshot. Sessions nobody snapshots cost nothing.
import type { PtySession } from '@aleph/pty';
import serializeModule from '@xterm/addon-serialize';
import headless from '@xterm/headless';

/** Lines of scrollback the server's terminal keeps, and a snapshot carries. */
export const SNAPSHOT_SCROLLBACK_LINES = 1000;
/** Output written to the terminal and not parsed yet past which it is dropped (a flood). */
const MAX_BEHIND_BYTES = 2 * 1024 * 1024;
const EMPTY = new Uint8Array(0);
/** How addon-serialize switches to the alternate buffer in a snapshot. */
const ALTERNATE_SWITCH = '\x1b[?1049h\x1b[H';

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
  readonly #waiting = new Set<(error: Error) => void>();

  /**
   * `origin`: where to start in the scrollback and the modes in force there (from the session's
   * ModeTracker); without it, the scrollback's start in the default modes.
   */
  constructor(
    session: PtySession,
    origin: { readonly offset: number; readonly sequences: string | Uint8Array } | undefined,
    onDrop: () => void,
  ) {
    this.#session = session;
    this.#onDrop = onDrop;
    this.#cols = session.cols;
    this.#rows = session.rows;
    this.#terminal = new headless.Terminal({
      cols: session.cols,
      rows: session.rows,
      scrollback: SNAPSHOT_SCROLLBACK_LINES,
      allowProposedApi: true,
    });
    this.#serializer = new serializeModule.SerializeAddon();
    this.#terminal.loadAddon(this.#serializer);
    if (origin !== undefined && origin.sequences.length > 0) this.#terminal.write(origin.sequences);
    const { offset, data } = session.replay(origin?.offset ?? 0);
    this.#fed = offset;
    this.#write(data);
    this.#listener = session.onData((chunk) => this.#write(chunk));
  }

  #write(chunk: Uint8Array): void {
    if (this.#disposed) return;
    // A resize takes effect where it happened in the stream: before the output that follows it.
    const { cols, rows } = this.#session;
    if (cols !== this.#cols || rows !== this.#rows) {
      this.#cols = cols;
      this.#rows = rows;
      this.#terminal.write(EMPTY, () => this.#terminal.resize(cols, rows));
    }
    this.#fed += chunk.length;
    this.#behind += chunk.length;
    if (this.#behind > MAX_BEHIND_BYTES) return this.dispose();
    this.#terminal.write(chunk, () => (this.#behind -= chunk.length));
  }

  /** The screen after every byte written so far: serialized once the terminal has parsed them. */
  snapshot(): Promise<Snapshot> {
    this.#write(EMPTY); // a resize not followed by output yet
    const offset = this.#fed;
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
          data: this.#serialize(),
        });
      });
    });
  }

  #serialize(): string {
    const data = this.#serializer.serialize({ scrollback: SNAPSHOT_SCROLLBACK_LINES });
    // addon-serialize 0.14 ends the normal buffer with the cursor's attributes and then switches to
    // the alternate one without resetting them: they would leak into its first cells, and be saved
    // as the cursor state the program's exit from the alternate buffer restores. Reset them first.
    return data.replace(ALTERNATE_SWITCH, `\x1b[0m${ALTERNATE_SWITCH}`);
  }

  get disposed(): boolean {
    return this.#disposed;
  }

  dispose(): void {
    if (this.#disposed) return;
    this.#disposed = true;
    this.#listener.dispose();
    this.#terminal.dispose();
    for (const reject of this.#waiting) reject(new Error('the screen was dropped (a flood)'));
    this.#waiting.clear();
    this.#onDrop();
  }
}
