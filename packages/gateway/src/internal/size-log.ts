// The sizes a session's output was written for, so that pty.snapshot's terminal — made late, from
// the scrollback — replays each stretch of output at the size it was drawn at, resizing where the
// session was resized (a program redraws for the new size after it: vim's screen replayed at the
// size of the moment is garbage). Tracked for every session from its first byte.
//
// Each entry is a size and the output offset it took effect at: the offset of the first chunk that
// came after the resize (as a terminal that watched live resizes before drawing that chunk). Kept:
// the entries the scrollback still covers, plus the one in force at its start; at most MAX_ENTRIES
// (a client resizing in a loop), the oldest forgotten first.

/** Resizes remembered at most; older ones are forgotten (their output is replayed at a later size). */
export const MAX_ENTRIES = 1024;

export interface SizeChange {
  readonly offset: number;
  readonly cols: number;
  readonly rows: number;
}

export class SizeLog {
  /** [offset, cols, rows] triples, oldest first: the size in force from `offset` on. */
  readonly #entries: number[];

  /** The session's size at `offset`, where tracking starts (0 for a new session). */
  constructor(cols: number, rows: number, offset = 0) {
    this.#entries = [offset, cols, rows];
  }

  /**
   * Called before the output at `offset` is handled, with the session's size then. `keepFrom`: the
   * scrollback's oldest offset; entries before the one in force there are forgotten.
   */
  observe(cols: number, rows: number, offset: number, keepFrom: number): void {
    const entries = this.#entries;
    while (entries.length > 3 && entries[3]! <= keepFrom) entries.splice(0, 3);
    let last = entries.length - 3;
    if (entries[last + 1] === cols && entries[last + 2] === rows) return;
    if (entries[last] === offset && last > 0) {
      entries.length = last; // the size before never drew a byte
      last -= 3;
      if (entries[last + 1] === cols && entries[last + 2] === rows) return;
    }
    entries.push(offset, cols, rows);
    if (entries.length > MAX_ENTRIES * 3) entries.splice(0, 3);
  }

  /** The size in force at `offset` (the oldest kept if `offset` is older), then every later change. */
  from(offset: number): { readonly cols: number; readonly rows: number; readonly changes: SizeChange[] } {
    const entries = this.#entries;
    let first = 0;
    while (first + 3 < entries.length && entries[first + 3]! <= offset) first += 3;
    const changes: SizeChange[] = [];
    for (let k = first + 3; k < entries.length; k += 3)
      changes.push({ offset: entries[k]!, cols: entries[k + 1]!, rows: entries[k + 2]! });
    return { cols: entries[first + 1]!, rows: entries[first + 2]!, changes };
  }
}
