// A program's output decides the counts of its control sequences, and xterm.js does as many steps as
// a count says: `ESC [ 2147483647 b` (repeat the last character) allocates and prints 2^31 cells,
// `ESC [ 2147483647 L` (insert lines) or `… S` (scroll up) loops 2^31 times. On the server's terminal
// that blocks the event loop and grows memory without bound, so every count past what can change the
// screen is cut to it before xterm.js acts: the screen comes out as it would, in the same order.
// The same goes for a page's xterm.js (a browser tab blocked): the console applies it too.

type Handler = (params: { readonly params: Int32Array; readonly length: number }) => boolean;
interface InputHandlers {
  readonly [name: string]: Handler | undefined;
}

/** Each final byte with a count, what bounds it, and xterm.js's own handler of it. */
const COUNTED: readonly [final: string, bound: 'cols' | 'rows' | 'cells', handler: string][] = [
  ['b', 'cells', 'repeatPrecedingCharacter'], // REP
  ['@', 'cols', 'insertChars'], // ICH
  ['P', 'cols', 'deleteChars'], // DCH
  ['X', 'cols', 'eraseChars'], // ECH
  ['I', 'cols', 'cursorForwardTab'], // CHT
  ['Z', 'cols', 'cursorBackwardTab'], // CBT
  ['L', 'rows', 'insertLines'], // IL
  ['M', 'rows', 'deleteLines'], // DL
  ['S', 'rows', 'scrollUp'], // SU
  ['T', 'rows', 'scrollDown'], // SD
];

/**
 * The count `wanted`, cut to `cells` (a screen's worth) for REP: the screen is as full of the
 * character, and the cursor ends in the same column (the count keeps its remainder by `cols`).
 */
export function boundedCount(
  wanted: number,
  bound: 'cols' | 'rows' | 'cells',
  cols: number,
  rows: number,
): number {
  if (bound === 'cols') return Math.min(wanted, cols);
  if (bound === 'rows') return Math.min(wanted, rows);
  const cells = cols * rows;
  return wanted <= cells ? wanted : cells + ((wanted - cells) % cols);
}

/** What boundCounts needs of an xterm.js terminal: `@xterm/xterm`'s and `@xterm/headless`'s both fit. */
export interface CountedTerminal {
  readonly cols: number;
  readonly rows: number;
  readonly parser: {
    registerCsiHandler(
      id: { final: string },
      callback: (params: (number | number[])[]) => boolean | Promise<boolean>,
    ): { dispose(): void };
  };
}

/**
 * Cuts the counts of an xterm.js terminal's control sequences (repeat, insert/delete/erase
 * characters, insert/delete lines, scroll, tab) to what can change its screen, so that a program's
 * `ESC [ 2147483647 b` cannot block the page or the process. The cut sequence goes to xterm.js's own
 * handler at once, in place, so nothing after it is reordered. Call it once, after creating the terminal.
 */
export function boundCounts(terminal: CountedTerminal): void {
  const handlers = (terminal as unknown as { _core?: { _inputHandler?: InputHandlers } })._core
    ?._inputHandler;
  for (const [final, bound, name] of COUNTED) {
    const own = handlers?.[name]?.bind(handlers);
    terminal.parser.registerCsiHandler({ final }, (params) => {
      const wanted = params[0];
      if (typeof wanted !== 'number') return false;
      const count = boundedCount(wanted, bound, terminal.cols, terminal.rows);
      if (count === wanted) return false; // xterm.js's own handler, as it is
      // Without xterm.js's handler at hand (another version), the sequence is dropped: never run whole.
      own?.({ params: Int32Array.of(count), length: 1 }); // each of these reads its first parameter only
      return true;
    });
  }
}
