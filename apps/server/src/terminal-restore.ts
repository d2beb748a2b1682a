// What `aleph attach` writes to the user's terminal when it leaves it — on detach, at the session's
// end, on a lost connection or a signal: the attached program's modes undone (mouse reporting and
// its encodings, focus events, bracketed paste, application cursor keys and keypad, a scroll region,
// a hidden cursor, colours), as tmux and ssh users expect. The alternate screen is left only when
// the program is in it, read from its output: `?1049l` outside it would move the cursor to a saved
// position (it restores the cursor even when there is no screen to leave).

/** Alternate-screen switches: `CSI ? Pm h|l` (1049, 1047, 47) and `ESC c` (a full reset). */
// eslint-disable-next-line no-control-regex
const SWITCH = /\x1b(?:\[\?([\d;]*)([hl])|c)/g;
/** The start of a switch cut at a chunk's end: kept for the next chunk. */
// eslint-disable-next-line no-control-regex
const PARTIAL = /\x1b(?:\[(?:\?[\d;]*)?)?$/;
const ALTERNATE_MODES = new Set([1049, 1047, 47]);

/** Follows a program's output to know whether it is in the alternate screen, and by which mode. */
export class AlternateScreenWatch {
  #mode: number | undefined;
  #carry = '';

  /** The mode the program entered the alternate screen with, or undefined in the normal screen. */
  get mode(): number | undefined {
    return this.#mode;
  }

  feed(chunk: Uint8Array | string): void {
    const text = this.#carry + (typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('latin1'));
    for (const [, params, action] of text.matchAll(SWITCH)) {
      if (action === undefined) {
        this.#mode = undefined; // ESC c
        continue;
      }
      for (const param of (params ?? '').split(';').map(Number))
        if (ALTERNATE_MODES.has(param)) this.#mode = action === 'h' ? param : undefined;
    }
    this.#carry = PARTIAL.exec(text.slice(-16))?.[0] ?? '';
  }
}

/** The sequence that gives the user's terminal back in its ordinary modes. */
export function restoreSequence(alternateMode: number | undefined): string {
  return [
    '\x1b[?1000l\x1b[?1001l\x1b[?1002l\x1b[?1003l\x1b[?9l', // mouse reporting off
    '\x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l', // mouse encodings back to the default
    '\x1b[?1004l', // focus events off
    '\x1b[?2004l', // bracketed paste off
    '\x1b[?1l\x1b>', // normal cursor keys, numeric keypad
    alternateMode === undefined ? '' : `\x1b[?${alternateMode}l`, // the normal screen (and cursor)
    '\x1b7\x1b[r\x1b8', // no scroll region (DECSTBM homes the cursor: saved and restored around it)
    '\x1b[?7h', // line wrap on
    '\x1b[?25h', // the cursor shown
    '\x1b[0m', // default colours and attributes
  ].join('');
}
