// The few terminal modes a screen depends on, tracked for every session from its first byte, so
// that pty.snapshot's terminal — made late, from the scrollback — starts in the modes in force at
// the scrollback's start (issue 17: vim's `ESC[?1049h` more than 1 MiB ago). The scan looks for ESC
// with indexOf and parses only `ESC [ ? Pm h/l`, `ESC =`, `ESC >` and `ESC c`, across chunks.
//
// The state at the scrollback's start: an exact log of changes would hold ~10^5 entries per MiB
// (vim hides and shows the cursor around every redraw), so instead the state is checkpointed at a
// chunk's end (outside any sequence) at least CHECKPOINT_BYTES apart; checkpoints the scrollback
// has dropped are forgotten. The snapshot's terminal starts at the first checkpoint in the
// scrollback: at most CHECKPOINT_BYTES (plus a chunk) later than its oldest byte, never inside a
// sequence.

const CHECKPOINT_BYTES = 4096;
const ESC = 0x1b;

/** Bit flags of the mode word; mouse tracking and mouse encoding are small codes in their own bits. */
const ALTERNATE = 1 << 0; // ?1049 / ?1047 / ?47
const CURSOR_KEYS = 1 << 1; // ?1
const CURSOR_HIDDEN = 1 << 2; // ?25 reset
const BRACKETED_PASTE = 1 << 3; // ?2004
const FOCUS_EVENTS = 1 << 4; // ?1004
const ORIGIN = 1 << 5; // ?6
const NO_WRAP = 1 << 6; // ?7 reset
const KEYPAD = 1 << 7; // ESC = / ?66
const TRACKING_SHIFT = 8; // 3 bits: index in TRACKING
const ENCODING_SHIFT = 11; // 3 bits: index in ENCODING
const TRACKING = [0, 9, 1000, 1001, 1002, 1003];
const ENCODING = [0, 1005, 1006, 1015, 1016];
/** The power-on state: every flag above is off (cursor shown, wrap on). */
const DEFAULT = 0;

const FLAGS = new Map<number, number>([
  [1049, ALTERNATE],
  [1047, ALTERNATE],
  [47, ALTERNATE],
  [1, CURSOR_KEYS],
  [2004, BRACKETED_PASTE],
  [1004, FOCUS_EVENTS],
  [6, ORIGIN],
  [66, KEYPAD],
]);
/** Flags whose set state is the mode's reset (`l`). */
const INVERTED = new Map<number, number>([
  [25, CURSOR_HIDDEN],
  [7, NO_WRAP],
]);

/** Applies `ESC [ ? param h|l` to a mode word. */
export function applyMode(state: number, param: number, set: boolean): number {
  const flag = FLAGS.get(param);
  if (flag !== undefined) return set ? state | flag : state & ~flag;
  const inverted = INVERTED.get(param);
  if (inverted !== undefined) return set ? state & ~inverted : state | inverted;
  const tracking = TRACKING.indexOf(param);
  if (tracking > 0) {
    // As xterm.js: setting one tracking mode replaces another; resetting any turns tracking off.
    const cleared = state & ~(7 << TRACKING_SHIFT);
    return set ? cleared | (tracking << TRACKING_SHIFT) : cleared;
  }
  const encoding = ENCODING.indexOf(param);
  if (encoding > 0) {
    const cleared = state & ~(7 << ENCODING_SHIFT);
    return set ? cleared | (encoding << ENCODING_SHIFT) : cleared;
  }
  return state;
}

/** Escape sequences that put a fresh terminal in `state` (empty for the default). */
export function modesToSequences(state: number): string {
  let out = '';
  const set = (param: number) => (out += `\x1b[?${param}h`);
  if (state & CURSOR_KEYS) set(1);
  if (state & ORIGIN) set(6);
  if (state & NO_WRAP) out += '\x1b[?7l';
  if (state & CURSOR_HIDDEN) out += '\x1b[?25l';
  if (state & KEYPAD) out += '\x1b=';
  const tracking = TRACKING[(state >> TRACKING_SHIFT) & 7];
  if (tracking) set(tracking);
  const encoding = ENCODING[(state >> ENCODING_SHIFT) & 7];
  if (encoding) set(encoding);
  if (state & FOCUS_EVENTS) set(1004);
  if (state & BRACKETED_PASTE) set(2004);
  // Last: the scrollback's bytes then land in the alternate buffer, as they did live.
  if (state & ALTERNATE) set(1049);
  return out;
}

/** Parser states between chunks. */
const enum Scan {
  Ground,
  Escape, // after ESC
  Csi, // after ESC [ : only `?` goes on
  Private, // after ESC [ ? : digits and `;` until h or l
}
/** A private sequence with more parameters than this is not a mode change we track. */
const MAX_PARAMS = 16;

export class ModeTracker {
  #state = DEFAULT;
  #scan = Scan.Ground;
  readonly #params: number[] = [];
  #param = -1; // -1: no digit yet in the current parameter
  /** Offset one past the last byte scanned. */
  #end: number;
  /** [offset, state] pairs, oldest first: the state before the byte at offset. */
  readonly #checkpoints: number[] = [];

  /** `offset`: the session's output offset where tracking starts (0 for a new session). */
  constructor(offset = 0) {
    this.#end = offset;
    this.#checkpoints.push(offset, DEFAULT);
  }

  /** The current mode word (see applyMode). */
  get state(): number {
    return this.#state;
  }

  /**
   * Scans a chunk of output (the bytes at `offset`..). `keepFrom`: the oldest offset still kept
   * (the scrollback's start); checkpoints before the last one at or before it are dropped.
   */
  feed(chunk: Uint8Array, keepFrom = 0): void {
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.#scan === Scan.Ground) {
        const at = chunk.indexOf(ESC, i);
        if (at < 0) break;
        this.#scan = Scan.Escape;
        i = at + 1;
        continue;
      }
      const byte = chunk[i++]!;
      if (byte === ESC) {
        this.#scan = Scan.Escape;
        continue;
      }
      if (byte === 0x18 || byte === 0x1a) {
        this.#scan = Scan.Ground; // CAN / SUB abort a sequence
        continue;
      }
      if (byte < 0x20) continue; // other C0 controls run inside a sequence without ending it
      switch (this.#scan) {
        case Scan.Escape:
          if (byte === 0x5b) {
            this.#scan = Scan.Csi;
            continue;
          }
          if (byte === 0x3d) this.#state |= KEYPAD; // ESC =
          else if (byte === 0x3e) this.#state &= ~KEYPAD; // ESC >
          else if (byte === 0x63) this.#state = DEFAULT; // ESC c: full reset
          this.#scan = Scan.Ground;
          continue;
        case Scan.Csi:
          if (byte === 0x3f) {
            this.#scan = Scan.Private;
            this.#params.length = 0;
            this.#param = -1;
          } else this.#scan = Scan.Ground;
          continue;
        case Scan.Private:
          if (byte >= 0x30 && byte <= 0x39) {
            this.#param = (this.#param < 0 ? 0 : this.#param * 10) + (byte - 0x30);
            if (this.#param > 99999) this.#scan = Scan.Ground;
          } else if (byte === 0x3b) {
            this.#params.push(this.#param < 0 ? 0 : this.#param);
            this.#param = -1;
            if (this.#params.length > MAX_PARAMS) this.#scan = Scan.Ground;
          } else {
            if (byte === 0x68 || byte === 0x6c) {
              this.#params.push(this.#param < 0 ? 0 : this.#param);
              for (const param of this.#params) this.#state = applyMode(this.#state, param, byte === 0x68);
            }
            this.#scan = Scan.Ground;
          }
          continue;
      }
    }
    this.#end += n;
    const checkpoints = this.#checkpoints;
    if (this.#scan === Scan.Ground && this.#end - checkpoints[checkpoints.length - 2]! >= CHECKPOINT_BYTES) {
      checkpoints.push(this.#end, this.#state);
    }
    // Keep the first checkpoint at or after keepFrom (and any later): earlier ones can't be used.
    let drop = 0;
    while (drop + 2 < checkpoints.length && checkpoints[drop]! < keepFrom) drop += 2;
    if (drop > 0) checkpoints.splice(0, drop);
  }

  /**
   * Where a terminal made from output kept since `from` should start, and the escape sequences
   * that set the modes in force there: the first checkpoint at or after `from`, or the present.
   */
  origin(from: number): { offset: number; sequences: string } {
    const checkpoints = this.#checkpoints;
    for (let k = 0; k < checkpoints.length; k += 2) {
      if (checkpoints[k]! >= from) return { offset: checkpoints[k]!, sequences: modesToSequences(checkpoints[k + 1]!) };
    }
    if (this.#scan === Scan.Ground) return { offset: this.#end, sequences: modesToSequences(this.#state) };
    // Inside a sequence with no checkpoint kept (a pathological stream): the last known state.
    const last = checkpoints.length - 2;
    return { offset: Math.max(from, checkpoints[last]!), sequences: modesToSequences(checkpoints[last + 1]!) };
  }
}
