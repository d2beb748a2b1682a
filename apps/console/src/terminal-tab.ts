// One terminal tab: an xterm.js view of one gateway session. It attaches from the session's screen
// snapshot, then follows its output (`pty.follow`) with each byte drawn exactly once, and acks only
// what xterm has drawn, so a flood cannot outrun the page. Size, with several viewers of a session
// (other tabs, `aleph attach`): the viewer used last sets it, as tmux's `window-size latest` — a
// view sends its size when it is fitted, focused, or typed in after a pause, never otherwise.
import { FitAddon } from '@xterm/addon-fit';
import { Unicode11Addon } from '@xterm/addon-unicode11';
import { Terminal } from '@xterm/xterm';
import { TERMINAL_ANSWERS } from '@aleph/gateway/client';
import { h } from './dom.js';
import {
  encodeBase64,
  RpcError,
  type GatewayConnection,
  type MethodResult,
  type PtyExitEvent,
  type PtyOutput,
} from './gateway-client.js';

export type ExitInfo = Omit<PtyExitEvent, 'sessionId'>;

/** Keys after this long a pause take the size back: a viewer typing again is the latest one. */
const TYPING_PAUSE_MS = 1000;
/** The most bytes one pty.input carries: the gateway refuses more (`frame_too_large`). */
const INPUT_MAX_BYTES = 64 * 1024;
/** How often a piece of a long input refused as `busy` (the program not reading yet) is retried. */
const BUSY_RETRIES = 30;
/**
 * How long after this view was last used (a key, a paste, a click in it) it answers the program's
 * terminal queries. Every viewer's xterm.js answers them (cursor position, device attributes,
 * colours, modes); a real terminal answers once, and a second answer reaches the program as keys
 * (vim saw a `y`). So only the view used last answers — as far as it can tell: until another
 * viewer takes the size, or for this long.
 */
const ANSWER_FOR_MS = 60_000;

export function describeExit(exit: ExitInfo): string {
  const how =
    exit.signal !== null ? `signal ${exit.signal}` : exit.exitCode !== null ? `code ${exit.exitCode}` : '';
  const why: Record<ExitInfo['reason'], string> = {
    exited: 'the program exited',
    closed: 'closed',
    evicted: 'evicted: too many sessions, the oldest was ended',
    expired: 'expired: idle past the time limit',
    shutdown: 'the server shut down',
  };
  return `Session ended — ${why[exit.reason] ?? exit.reason}${how ? ` (${how})` : ''}`;
}

export class TerminalTab {
  readonly element: HTMLElement;
  readonly terminal: Terminal;
  readonly #fit = new FitAddon();
  readonly #notice: HTMLElement;
  readonly #connection: GatewayConnection;
  /** The offset one past the last byte handed to xterm. */
  #next = 0;
  /** Whether pty.follow has answered: output frames are this view's stream from `#next` on. */
  #following = false;
  #exit: ExitInfo | undefined;
  #fitFrame = 0;
  readonly #sizeNote: HTMLElement;
  /** When this view last sent its size, and last sent keys (performance.now()). */
  #sizedAt = -Infinity;
  #typedAt = -Infinity;
  /** Input going out piece by piece (a paste over INPUT_MAX_BYTES): later input waits behind it. */
  #inputChain: Promise<void> | undefined;
  /** When the user last used this view: a key, a paste or a click in it. */
  #usedAt = -Infinity;
  /** Whether, as far as this view knows, the pty has its size (false once the list says not). */
  #sized = false;

  constructor(
    connection: GatewayConnection,
    readonly sessionId: string,
    readonly title: string,
    readonly onChange: () => void = () => {},
  ) {
    this.#connection = connection;
    this.#notice = h('div', { class: 'notice', role: 'status', hidden: true });
    this.#sizeNote = h('div', {
      class: 'size-note',
      role: 'status',
      hidden: true,
      onclick: () => this.terminal.focus(),
    });
    const screen = h('div', { class: 'screen' });
    this.element = h(
      'section',
      { class: 'term-tab', 'data-session': sessionId, hidden: true },
      this.#notice,
      this.#sizeNote,
      screen,
    );
    this.terminal = new Terminal({
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace',
      fontSize: 13,
      scrollback: 5000,
      theme: { background: '#111417' },
      allowProposedApi: true, // the unicode API
    });
    this.terminal.loadAddon(this.#fit);
    // Unicode 11 widths (emoji 2 columns), as programs (glibc's wcwidth), tmux and the server's
    // snapshots count: xterm.js's default (Unicode 6) drew them 1 column, shifting the line after.
    this.terminal.loadAddon(new Unicode11Addon());
    this.terminal.unicode.activeVersion = '11';
    this.terminal.open(screen);
    // Alt+N/W/1–9 and Alt+A belong to the page (see main.ts), not to the program.
    this.terminal.attachCustomKeyEventHandler((event) => {
      if (event.type === 'keydown') this.#used();
      // Ctrl+Shift+C copies the selection, as desktop terminals do (Ctrl+C stays ^C for the program).
      if (event.ctrlKey && event.shiftKey && event.code === 'KeyC') {
        if (event.type === 'keydown' && this.terminal.hasSelection())
          void navigator.clipboard?.writeText(this.terminal.getSelection()).catch(() => {});
        event.preventDefault();
        return false;
      }
      return !(event.altKey && /^(Key[NWA]|Digit[1-9])$/.test(event.code));
    });
    screen.addEventListener('mousedown', () => this.#used(), true);
    this.terminal.textarea?.addEventListener('paste', () => this.#used(), true);
    this.terminal.onData((text) => {
      if (text.replace(TERMINAL_ANSWERS, '') !== '') this.#send(text);
      else if (this.#answering()) this.#answer(text);
    });
    this.terminal.onBinary((binary) => this.#send(binary, true));
    this.terminal.onResize(() => this.#sendSize());
    this.terminal.textarea?.addEventListener('focus', () => this.#sendSize());
  }

  get exit(): ExitInfo | undefined {
    return this.#exit;
  }

  /**
   * Draws the session's screen from its snapshot (at the size it was taken), then follows it from
   * the offset the snapshot covers: what a client that watched from the start would show. With no
   * snapshot to be had, it follows from the oldest byte of the scrollback, as `aleph attach` does.
   */
  async attach(): Promise<void> {
    this.#following = false; // frames before pty.follow's answer belong to the stream before it
    const snapshot = await this.#screen();
    this.terminal.reset();
    if (snapshot !== undefined) {
      this.terminal.resize(snapshot.cols, snapshot.rows);
      this.terminal.write(snapshot.data);
    }
    const follow = await this.#connection.call('pty.follow', {
      sessionId: this.sessionId,
      fromOffset: snapshot?.offset ?? 0,
    });
    this.#next = follow.offset;
    this.#following = true;
    if (follow.exit !== null) this.ended(follow.exit);
    this.fit();
  }

  /**
   * The session's screen, or undefined: follow its scrollback instead. A session over the server's
   * snapshot cap (`screen_too_large`: sized by another viewer) is given this view's size, as the
   * viewer used last, and asked once more. `unknown_session` is the caller's to handle.
   */
  async #screen(): Promise<MethodResult<'pty.snapshot'> | undefined> {
    try {
      return await this.#snapshot();
    } catch (error) {
      if (error instanceof RpcError && error.code === 'unknown_session') throw error;
      if (!(error instanceof RpcError && error.code === 'screen_too_large')) return undefined;
    }
    const proposed = this.#fit.proposeDimensions();
    const fits = proposed !== undefined && Number.isFinite(proposed.cols) && Number.isFinite(proposed.rows);
    const { cols, rows } = fits ? proposed : this.terminal;
    this.terminal.resize(cols, rows); // not sent: not following yet
    this.#sizedAt = performance.now();
    this.#sized = true;
    // An ended session refuses (session_closed): its snapshot stays too large, the scrollback serves.
    await this.#connection.call('pty.resize', { sessionId: this.sessionId, cols, rows }).catch(() => {});
    return this.#snapshot().catch(() => undefined);
  }

  /** A snapshot, retried while the server answers `busy` (its terminal is catching up a flood). */
  async #snapshot(): Promise<MethodResult<'pty.snapshot'>> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.#connection.call('pty.snapshot', { sessionId: this.sessionId });
      } catch (error) {
        if (!(error instanceof RpcError && error.code === 'busy') || attempt === 10) throw error;
        await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
      }
    }
  }

  /** Live output of this session: drawn once, in offset order, acked once drawn. */
  output(output: PtyOutput): void {
    if (!this.#following) return;
    if (output.offset > this.#next) {
      // This view fell behind past the scrollback: output was lost for it. Start again from a snapshot.
      void this.attach().catch((error: unknown) => this.failed(error));
      return;
    }
    const end = output.offset + output.data.length;
    if (end <= this.#next) return;
    const fresh = output.offset < this.#next ? output.data.subarray(this.#next - output.offset) : output.data;
    this.#next = end;
    this.terminal.write(fresh, () => this.#connection.handled(this.sessionId, end));
  }

  ended(exit: ExitInfo): void {
    if (this.#exit !== undefined) return;
    this.#exit = exit;
    this.#notice.textContent = describeExit(exit);
    this.#notice.hidden = false;
    this.terminal.options.disableStdin = true;
    this.onChange();
  }

  /** Says in the tab that it cannot show the session (never a blank tab taking keys unseen). */
  failed(error: unknown): void {
    if (this.#exit !== undefined) return;
    this.#notice.textContent = `Cannot show this session: ${error instanceof Error ? error.message : String(error)}`;
    this.#notice.hidden = false;
    this.terminal.options.disableStdin = true;
  }

  /** Fits the terminal to its box (once per frame); the resize goes to the pty. */
  fit(): void {
    cancelAnimationFrame(this.#fitFrame);
    this.#fitFrame = requestAnimationFrame(() => {
      if (!this.element.hidden) this.#fit.fit();
    });
  }

  /**
   * The pty's size as the server listed it, asked for at `askedAt`: another viewer's size means
   * this view's keys take it back (and the note says so). An answer older than this view's own
   * last resize says nothing new.
   */
  listed(cols: number, rows: number, askedAt: number): void {
    if (askedAt < this.#sizedAt || this.#exit !== undefined) return;
    this.#sized = cols === this.terminal.cols && rows === this.terminal.rows;
    this.#sizeNote.hidden = this.#sized;
    this.#sizeNote.textContent = `Sized ${cols}×${rows} by another viewer: click or type here to size it for this window (${this.terminal.cols}×${this.terminal.rows}).`;
  }

  show(visible: boolean): void {
    this.element.hidden = !visible;
    if (visible) {
      this.fit();
      this.terminal.focus();
    }
  }

  dispose(): void {
    cancelAnimationFrame(this.#fitFrame);
    this.terminal.dispose();
    this.element.remove();
  }

  /** Gives the pty this view's size: this view is the latest one used. */
  #sendSize(): void {
    // Before pty.follow answers, the view holds the snapshot's size (the pty's), or none yet.
    if (this.#exit !== undefined || !this.#following) return;
    const { cols, rows } = this.terminal;
    this.#sizedAt = performance.now();
    this.#sized = true;
    this.#sizeNote.hidden = true;
    this.#connection.call('pty.resize', { sessionId: this.sessionId, cols, rows }).catch(() => {});
  }

  #used(): void {
    this.#usedAt = performance.now();
  }

  /** Whether this view answers queries: used last, as far as it knows (see ANSWER_FOR_MS). */
  #answering(): boolean {
    return this.#sized && performance.now() - this.#usedAt < ANSWER_FOR_MS;
  }

  /** An answer to a query: sent as is, without taking the size (it is not typing). */
  #answer(text: string): void {
    if (this.#exit !== undefined) return;
    this.#input(new TextEncoder().encode(text));
  }

  #send(text: string, binary = false): void {
    if (this.#exit !== undefined) return;
    // Sent before the keys on the same socket, so the program reads them at this view's size.
    const now = performance.now();
    if (!this.#sized || now - this.#typedAt > TYPING_PAUSE_MS) this.#sendSize();
    this.#typedAt = now;
    // onBinary hands a string of bytes (mouse reports), one per character.
    this.#input(
      binary ? Uint8Array.from(text, (char) => char.charCodeAt(0)) : new TextEncoder().encode(text),
    );
  }

  /**
   * Input to the pty, in order. Keys go at once; input over INPUT_MAX_BYTES (a paste) goes in pieces,
   * each after the last was written, a piece refused as `busy` retried after a pause, and input
   * that comes meanwhile waits behind it. What cannot be written rings the bell, never silently.
   */
  #input(bytes: Uint8Array): void {
    const bell = (): void => void this.terminal.write('\x07');
    if (this.#inputChain === undefined && bytes.length <= INPUT_MAX_BYTES) {
      // `busy`: the program is not reading; say so rather than drop the keys silently.
      this.#piece(bytes).catch((error: unknown) => {
        if (error instanceof RpcError && error.code === 'busy') bell();
      });
      return;
    }
    const chain = (this.#inputChain ?? Promise.resolve()).then(async () => {
      for (let at = 0; at < bytes.length; at += INPUT_MAX_BYTES)
        for (let attempt = 1; ; attempt += 1) {
          try {
            await this.#piece(bytes.subarray(at, at + INPUT_MAX_BYTES));
            break;
          } catch (error) {
            const busy = error instanceof RpcError && error.code === 'busy';
            if (!busy || attempt === BUSY_RETRIES || this.#exit !== undefined) return bell();
            await new Promise((resolve) => setTimeout(resolve, Math.min(100 * attempt, 1000)));
          }
        }
    });
    this.#inputChain = chain;
    void chain.then(() => {
      if (this.#inputChain === chain) this.#inputChain = undefined;
    });
  }

  #piece(bytes: Uint8Array): Promise<unknown> {
    return this.#connection.call('pty.input', { sessionId: this.sessionId, data: encodeBase64(bytes) });
  }
}
