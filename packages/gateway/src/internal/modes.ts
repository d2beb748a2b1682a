// The few terminal modes a screen depends on, tracked for every session from its first byte, so
// that pty.snapshot's terminal — made late, from the scrollback — starts in the modes in force at
// the scrollback's start (vim's `ESC[?1049h` sent more than 1 MiB ago still holds). The scan looks for ESC
// with indexOf and parses only `ESC [ ? Pm h/l`, `ESC =`, `ESC >` and `ESC c`, across chunks.
//
// The state at the scrollback's start: an exact log of changes would hold ~10^5 entries per MiB
// (vim hides and shows the cursor around every redraw), so instead the state is checkpointed at a
// chunk's end (outside any sequence) at least CHECKPOINT_BYTES apart; checkpoints the scrollback
// has dropped are forgotten. The snapshot's terminal starts at the first checkpoint in the
// scrollback: at most CHECKPOINT_BYTES (plus a chunk) later than its oldest byte, never inside a
// sequence.

const CHECKPOINT_BYTES = 4096;
/**
 * The normal buffer behind an alternate screen entered before the scrollback's start is rebuilt
 * from the output just before the switch: this much of it, copied when the scrollback is about to
 * drop it (within TAIL_MARGIN_BYTES of its start; a read is at most 64 KiB).
 */
export const NORMAL_TAIL_BYTES = 32 * 1024;
const TAIL_MARGIN_BYTES = 256 * 1024;
/** Alternate-screen periods remembered at most (a program toggling it in a loop). */
const MAX_PERIODS = 256;
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

/** Flags, with the sequences that set and reset them, in the order they are written. */
const SWITCHES: readonly (readonly [number, string, string])[] = [
  [CURSOR_KEYS, '\x1b[?1h', '\x1b[?1l'],
  [ORIGIN, '\x1b[?6h', '\x1b[?6l'],
  [NO_WRAP, '\x1b[?7l', '\x1b[?7h'],
  [CURSOR_HIDDEN, '\x1b[?25l', '\x1b[?25h'],
  [KEYPAD, '\x1b=', '\x1b>'],
  [FOCUS_EVENTS, '\x1b[?1004h', '\x1b[?1004l'],
  [BRACKETED_PASTE, '\x1b[?2004h', '\x1b[?2004l'],
];
const code = (state: number, shift: number) => (state >> shift) & 7;

/** Escape sequences that take a terminal in modes `from` (default: a fresh one) to `state`. */
export function modesToSequences(state: number, from = DEFAULT): string {
  let out = '';
  for (const [flag, set, reset] of SWITCHES)
    if ((state & flag) !== (from & flag)) out += state & flag ? set : reset;
  for (const [shift, params] of [
    [TRACKING_SHIFT, TRACKING],
    [ENCODING_SHIFT, ENCODING],
  ] as const) {
    const [now, was] = [code(state, shift), code(from, shift)];
    if (now !== was) out += now ? `\x1b[?${params[now]}h` : `\x1b[?${params[was]}l`;
  }
  // Last: the scrollback's bytes then land in the alternate buffer, as they did live.
  if ((state & ALTERNATE) !== (from & ALTERNATE)) out += state & ALTERNATE ? '\x1b[?1049h' : '\x1b[?1049l';
  return out;
}

/**
 * The modes in `state` that xterm.js's SerializeAddon (0.14) leaves out of a snapshot, as the
 * sequences that set them: the mouse encoding (`?1005`/`?1006`/`?1015`/`?1016`; without it a click
 * after a reattach reaches the program in X10 encoding) and a hidden cursor (`?25l`).
 */
export function unserializedModes(state: number): string {
  const encoding = code(state, ENCODING_SHIFT);
  return (state & CURSOR_HIDDEN ? '\x1b[?25l' : '') + (encoding ? `\x1b[?${ENCODING[encoding]}h` : '');
}

/** Parser states between chunks. */
const enum Scan {
  Ground,
  Escape, // after ESC
  Csi, // after ESC [ : only `?` goes on
  Private, // after ESC [ ? : digits and `;` until h or l
}
/** A stay in the alternate screen: from the ESC that entered it to the one that left it. */
interface Period {
  readonly entry: number;
  exit: number;
  /** Output before `entry` (the normal buffer's last state), once copied. */
  tail?: Uint8Array;
}

/** Reads the session's output from `from` to `to` (a copy). */
export type ReadOutput = (from: number, to: number) => Uint8Array;

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
  /** Offset of the ESC that began the sequence being parsed. */
  #sequenceAt = 0;
  readonly #periods: Period[] = [];

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
   * (the scrollback's start); checkpoints before the last one at or before it are dropped. `read`
   * copies the output before an alternate-screen entry that the scrollback is about to drop.
   */
  feed(chunk: Uint8Array, keepFrom = 0, read?: ReadOutput): void {
    let i = 0;
    const n = chunk.length;
    while (i < n) {
      if (this.#scan === Scan.Ground) {
        const at = chunk.indexOf(ESC, i);
        if (at < 0) break;
        // Fast path: most sequences are `ESC [` then not `?` (cursor moves, colours): skip them.
        // (A C0 control there runs inside the sequence, and ESC, CAN, SUB end it: the slow path.)
        const third = at + 2 < n ? chunk[at + 2]! : 0x3f;
        if (chunk[at + 1] === 0x5b && third >= 0x20 && third !== 0x3f) {
          i = at + 3;
          continue;
        }
        this.#scan = Scan.Escape;
        this.#sequenceAt = this.#end + at;
        i = at + 1;
        continue;
      }
      const byte = chunk[i++]!;
      if (byte === ESC) {
        this.#scan = Scan.Escape;
        this.#sequenceAt = this.#end + i - 1;
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
          if (byte === 0x3d)
            this.#state |= KEYPAD; // ESC =
          else if (byte === 0x3e)
            this.#state &= ~KEYPAD; // ESC >
          else if (byte === 0x63) this.#change(DEFAULT); // ESC c: full reset
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
              let state = this.#state;
              for (const param of this.#params) state = applyMode(state, param, byte === 0x68);
              this.#change(state);
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
    const periods = this.#periods;
    while (periods.length > 0 && (periods[0]!.exit < keepFrom || periods.length > MAX_PERIODS))
      periods.shift();
    if (read === undefined) return;
    for (const period of periods) {
      if (period.entry - keepFrom >= TAIL_MARGIN_BYTES) break;
      period.tail ??= read(Math.max(keepFrom, period.entry - NORMAL_TAIL_BYTES), period.entry);
    }
  }

  #change(state: number): void {
    const was = this.#state & ALTERNATE;
    this.#state = state;
    if (was === (state & ALTERNATE)) return;
    if (state & ALTERNATE) this.#periods.push({ entry: this.#sequenceAt, exit: Infinity });
    else {
      const last = this.#periods[this.#periods.length - 1];
      if (last !== undefined && last.exit === Infinity) last.exit = this.#sequenceAt;
    }
  }

  /** What a terminal made at `offset` is written first: the normal buffer's tail, then the modes. */
  #prelude(offset: number, state: number): { offset: number; sequences: string | Uint8Array } {
    if (!(state & ALTERNATE)) return { offset, sequences: modesToSequences(state) };
    const tail = this.#periods.find((period) => period.entry < offset && offset <= period.exit)?.tail;
    if (tail === undefined) return { offset, sequences: modesToSequences(state) };
    const after = new ModeTracker();
    after.feed(tail);
    return { offset, sequences: Buffer.concat([tail, Buffer.from(modesToSequences(state, after.state))]) };
  }

  /**
   * Where a terminal made from output kept since `from` should start, and the escape sequences
   * that set the modes in force there (after the normal buffer's last output, if the alternate
   * screen was entered before): the first checkpoint at or after `from`, or the present.
   */
  origin(from: number): { offset: number; sequences: string | Uint8Array } {
    const checkpoints = this.#checkpoints;
    for (let k = 0; k < checkpoints.length; k += 2) {
      if (checkpoints[k]! >= from) return this.#prelude(checkpoints[k]!, checkpoints[k + 1]!);
    }
    if (this.#scan === Scan.Ground) return this.#prelude(this.#end, this.#state);
    // Inside a sequence with no checkpoint kept (a pathological stream): the last known state.
    const last = checkpoints.length - 2;
    return this.#prelude(Math.max(from, checkpoints[last]!), checkpoints[last + 1]!);
  }
}
