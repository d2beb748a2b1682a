// One terminal tab: an xterm.js view of one gateway session. It attaches from the session's screen
// snapshot, then follows its output (`pty.follow`) with each byte drawn exactly once, and acks only
// what xterm has drawn, so a flood cannot outrun the page. Size, with several viewers of a session
// (other tabs, `aleph attach`): the viewer used last sets it, as tmux's `window-size latest` — a
// view sends its size when it is fitted, focused, or typed in after a pause, never otherwise.
import { FitAddon } from '@xterm/addon-fit';
import { SerializeAddon } from '@xterm/addon-serialize';
import { Unicode11Addon } from '@xterm/addon-unicode11';
import { WebLinksAddon } from '@xterm/addon-web-links';
import { Terminal } from '@xterm/xterm';
import { boundCounts, MAX_INPUT_BYTES, TERMINAL_ANSWERS } from '@aleph/gateway/client';
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
const INPUT_MAX_BYTES = MAX_INPUT_BYTES;
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
/** Keys typed while the connection is down are kept up to this many bytes, then refused (the bell). */
export const QUEUE_MAX_BYTES = 4096;
/** Where a tab leaves its screen for the next load of this page (sessionStorage, per session). */
const SAVED_SCREEN_KEY = 'aleph.screen.';

/** A URL a terminal may open: the web's own schemes only (never `javascript:` or `data:`). */
export function openableUrl(text: string): string | undefined {
  try {
    const url = new URL(text);
    return url.protocol === 'http:' || url.protocol === 'https:' ? url.href : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Pasted text as the program gets it: tab and line ends kept, every other control character
 * (C0, DEL, C1) dropped. A paste cannot then end bracketed paste early (ESC[201~) nor type control
 * keys, so text copied from a page or a model's reply runs only when the user presses Enter.
 */
export function pastedText(text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]/g, '');
}

export function describeExit(exit: ExitInfo): string {
  const how =
    exit.signal !== null ? `signal ${exit.signal}` : exit.exitCode !== null ? `code ${exit.exitCode}` : '';
  const why: Record<ExitInfo['reason'], string> = {
    exited: 'the program exited',
    closed: 'closed',
    evicted: 'evicted: too many sessions, the oldest was ended',
    expired: 'expired: idle past the time limit',
    shutdown: 'the server shut down',
    node_lost: 'its node was lost (the cluster node running it stopped answering)',
  };
  return `Session ended — ${why[exit.reason] ?? exit.reason}${how ? ` (${how})` : ''}`;
}

/** Each tab's own name in the page's DOM (`tab-…`, `panel-…`): a tab exists before its session. */
let tabCount = 0;

export class TerminalTab {
  readonly element: HTMLElement;
  readonly key = `t${(tabCount += 1)}`;
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
  /** Drawn at another viewer's size (not this box's) until this view is used again: not garbled. */
  #mirroring = false;
  #quietResize = false;
  /** A fit is coming (next frame): this view is about to send its own size. */
  #fitPending = false;
  /** Whether `attach` got as far as following: a resume follows on from `#next`. */
  #attached = false;
  /** The offset one past the last byte xterm has drawn (not only been handed). */
  #drawn = 0;
  /** Keys typed while the connection was down, sent in order once it is back. */
  #queued: Uint8Array[] = [];
  #queuedBytes = 0;
  /** Typed while down and refused (over the queue): said in the tab until the connection is back. */
  #refusedBytes = 0;
  readonly #linkNote: HTMLElement;
  readonly #serialize = new SerializeAddon();
  /** The program's title (OSC 0/2), as text; empty until it sets one. */
  #programTitle = '';
  /** Alt+N/W/A/1–9 go to the page (true) or to the program (false), per tab. */
  #pageKeys = true;
  #sessionId: string | undefined;
  #label: string;
  /**
   * Opened before its session exists (Alt+N: the tab takes the keys typed next, at once, as a
   * desktop terminal's new tab does), or not yet following it: keys typed meanwhile wait, in
   * order, and go once it follows its session.
   */
  #starting: boolean;

  /** A tab on `sessionId`; without one, a new tab whose session is on its way (see `start`). */
  constructor(
    connection: GatewayConnection,
    sessionId: string | undefined,
    label: string,
    readonly onChange: () => void = () => {},
  ) {
    this.#connection = connection;
    this.#sessionId = sessionId;
    this.#label = label;
    this.#starting = sessionId === undefined;
    this.#linkNote = h('div', { class: 'link-note', role: 'status', hidden: true });
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
      {
        class: 'term-tab',
        'data-session': sessionId ?? false,
        hidden: true,
        role: 'tabpanel',
        id: `panel-${this.key}`,
        'aria-labelledby': `tab-${this.key}`,
      },
      this.#notice,
      this.#linkNote,
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
    boundCounts(this.terminal); // a program's `ESC [ 2147483647 b` must not block the page
    this.terminal.loadAddon(this.#fit);
    this.terminal.loadAddon(this.#serialize);
    // Links open in a new tab with no way back to this page; only http(s), whatever the text says.
    this.terminal.loadAddon(
      new WebLinksAddon((_event, uri) => {
        const url = openableUrl(uri);
        if (url !== undefined) window.open(url, '_blank', 'noopener,noreferrer');
      }),
    );
    this.terminal.onTitleChange((title) => {
      // Shown as text (never markup); control characters dropped, length bounded.
      // eslint-disable-next-line no-control-regex
      this.#programTitle = title.replace(/[\x00-\x1f\x7f]/g, '').slice(0, 200);
      this.onChange();
    });
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
      return !(this.#pageKeys && isPageKey(event));
    });
    screen.addEventListener(
      'mousedown',
      () => {
        this.#used();
        if (this.#mirroring) this.#sendSize();
      },
      true,
    );
    // A paste is text: its control characters are dropped before xterm.js brackets it, so
    // what it holds (an ESC[201~ ending the bracket, ^U, a CR) cannot act as typed keys.
    screen.addEventListener(
      'paste',
      (event) => {
        this.#used();
        const text = event.clipboardData?.getData('text/plain');
        if (text === undefined) return;
        event.preventDefault();
        event.stopImmediatePropagation();
        this.terminal.paste(pastedText(text));
      },
      true,
    );
    this.terminal.onData((text) => {
      if (text.replace(TERMINAL_ANSWERS, '') !== '') this.#send(text);
      else if (this.#answering()) this.#answer(text);
    });
    this.terminal.onBinary((binary) => this.#send(binary, true));
    this.terminal.onResize(() => {
      if (!this.#quietResize) this.#sendSize();
    });
    this.terminal.textarea?.addEventListener('focus', () => this.#sendSize());
  }

  /** The session shown; undefined while a new tab's session is on its way. */
  get sessionId(): string | undefined {
    return this.#sessionId;
  }

  get label(): string {
    return this.#label;
  }

  /** A new tab's session exists: it is this tab's from now on (attach follows it). */
  start(sessionId: string, label: string): void {
    this.#sessionId = sessionId;
    this.#label = label;
    this.element.dataset['session'] = sessionId;
    this.onChange();
  }

  get exit(): ExitInfo | undefined {
    return this.#exit;
  }

  /** What the tab is called: the program's own title (OSC 0/2) if it set one, else its label. */
  get title(): string {
    return this.#programTitle || this.label;
  }

  get programTitle(): string {
    return this.#programTitle;
  }

  /** The title the program set before a reload, until it sets another. */
  set programTitle(title: string) {
    this.#programTitle ||= title;
    this.onChange();
  }

  get pageKeys(): boolean {
    return this.#pageKeys;
  }

  set pageKeys(on: boolean) {
    this.#pageKeys = on;
    this.onChange();
  }

  /** Bytes typed while the connection was down, not sent yet. */
  get queuedBytes(): number {
    return this.#queuedBytes;
  }

  /**
   * Draws the session's screen from its snapshot (at the size it was taken), then follows it from
   * the offset the snapshot covers: what a client that watched from the start would show. With no
   * snapshot to be had, it follows from the oldest byte of the scrollback, as `aleph attach` does.
   */
  async attach(): Promise<void> {
    this.#following = false; // frames before pty.follow's answer belong to the stream before it
    if (await this.#attachSaved()) return;
    const snapshot = await this.#screen();
    this.terminal.reset();
    if (snapshot !== undefined) {
      this.terminal.resize(snapshot.cols, snapshot.rows);
      this.terminal.write(snapshot.data);
    }
    const follow = await this.#connection.call('pty.follow', {
      sessionId: this.#id,
      fromOffset: snapshot?.offset ?? 0,
    });
    this.#followed(follow);
  }

  /**
   * The screen this page left for itself at its last unload (its own scrollback, not the server's
   * shorter one), if the server still holds the output after it: then nothing is lost or twice.
   */
  async #attachSaved(): Promise<boolean> {
    const key = SAVED_SCREEN_KEY + this.#id;
    const text = sessionStorage.getItem(key);
    sessionStorage.removeItem(key);
    if (text === null) return false;
    const saved = JSON.parse(text) as { offset: number; cols: number; rows: number; data: string };
    this.terminal.reset();
    this.terminal.resize(saved.cols, saved.rows);
    this.terminal.write(saved.data);
    const follow = await this.#connection.call('pty.follow', {
      sessionId: this.#id,
      fromOffset: saved.offset,
    });
    if (follow.offset !== saved.offset) return false; // the server no longer has what came after
    this.#followed(follow);
    return true;
  }

  #followed(follow: MethodResult<'pty.follow'>): void {
    this.#next = this.#drawn = follow.offset;
    this.#following = true;
    this.#attached = true;
    if (follow.exit !== null) this.ended(follow.exit);
    this.fit();
    if (this.#starting) {
      this.#starting = false;
      if (this.#connection.open) this.flushQueued();
    }
  }

  /** The session, once there is one: only asked for on the way to following it. */
  get #id(): string {
    if (this.#sessionId === undefined) throw new Error('the tab has no session yet');
    return this.#sessionId;
  }

  /** Leaves this view's screen for the next load of the page (see #attachSaved). */
  save(): void {
    if (!this.#attached) return;
    try {
      const data = this.#serialize.serialize({ scrollback: this.terminal.options.scrollback ?? 1000 });
      const { cols, rows } = this.terminal;
      sessionStorage.setItem(
        SAVED_SCREEN_KEY + this.#id,
        JSON.stringify({ offset: this.#drawn, cols, rows, data }),
      );
    } catch {
      // over the storage quota: the next load takes the server's snapshot
    }
  }

  /**
   * Follows on from the last byte drawn, on a new connection: nothing lost, nothing twice. Output
   * the server no longer holds means the screen is taken again from a snapshot.
   */
  async resume(): Promise<void> {
    if (!this.#attached) return this.attach();
    if (this.#exit !== undefined) return;
    this.#following = false;
    let follow: MethodResult<'pty.follow'>;
    try {
      follow = await this.#connection.call('pty.follow', {
        sessionId: this.#id,
        fromOffset: this.#next,
      });
    } catch (error) {
      if (error instanceof RpcError && error.code === 'unknown_session')
        return this.ended({ exitCode: null, signal: null, reason: 'shutdown' });
      throw error;
    }
    if (follow.offset > this.#next) return this.attach();
    this.#followed(follow);
    if (this.#sized) this.#sendSize();
  }

  /** The connection is up again: the keys typed meanwhile go, in order. */
  flushQueued(): void {
    const queued = this.#queued;
    this.#queued = [];
    this.#queuedBytes = 0;
    this.#refusedBytes = 0;
    this.#showLink();
    for (const bytes of queued) this.#input(bytes);
  }

  /**
   * Says in the tab what the link is doing to typing (queued or refused), or nothing when up. What
   * was refused stays said over the retries, until the connection is back.
   */
  #showLink(): void {
    const down = !this.#connection.open;
    this.#linkNote.hidden = !down;
    if (!down) return;
    this.#linkNote.textContent =
      this.#refusedBytes > 0
        ? `Not connected: ${this.#refusedBytes} bytes refused (the bell): at most ${QUEUE_MAX_BYTES} bytes wait for the connection` +
          (this.#queuedBytes > 0 ? `, and ${this.#queuedBytes} are queued.` : '.')
        : this.#queuedBytes > 0
          ? `Not connected: ${this.#queuedBytes} bytes typed are queued, sent when the connection is back.`
          : 'Not connected: what you type is queued and sent when the connection is back.';
    this.onChange();
  }

  /** The connection dropped: the tab says so (and what typing does meanwhile). */
  disconnected(): void {
    this.#showLink();
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
    await this.#connection.call('pty.resize', { sessionId: this.#id, cols, rows }).catch(() => {});
    return this.#snapshot().catch(() => undefined);
  }

  /** A snapshot, retried while the server answers `busy` (its terminal is catching up a flood). */
  async #snapshot(): Promise<MethodResult<'pty.snapshot'>> {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await this.#connection.call('pty.snapshot', { sessionId: this.#id });
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
    this.terminal.write(fresh, () => {
      this.#drawn = Math.max(this.#drawn, end);
      this.#connection.handled(this.#id, end);
    });
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
  failed(error: unknown, what = 'Cannot show this session'): void {
    if (this.#exit !== undefined) return;
    if (this.#starting && this.#queuedBytes > 0) void this.terminal.write('\x07'); // typed, not sent
    if (this.#sessionId === undefined) this.#label = 'not started'; // a new tab whose shell never was
    this.#starting = false;
    this.#queued = [];
    this.#queuedBytes = 0;
    this.#notice.textContent = `${what}: ${error instanceof Error ? error.message : String(error)}`;
    this.#notice.hidden = false;
    this.terminal.options.disableStdin = true;
    this.onChange();
  }

  /** Fits the terminal to its box (once per frame); the resize goes to the pty. */
  fit(): void {
    cancelAnimationFrame(this.#fitFrame);
    this.#fitPending = true;
    this.#fitFrame = requestAnimationFrame(() => {
      this.#fitPending = false;
      if (!this.element.hidden && !this.#mirroring) this.#fit.fit();
    });
  }

  /**
   * The pty's size as the server listed it, asked for at `askedAt`: another viewer's size means
   * this view's keys take it back (and the note says so). An answer older than this view's own
   * last resize says nothing new.
   */
  listed(cols: number, rows: number, askedAt: number): void {
    if (askedAt < this.#sizedAt || this.#exit !== undefined || !this.#following || this.#fitPending) return;
    this.#sizeNote.hidden = true; // measured without it: the box it leaves is this view's
    const own = this.#fitted() ?? this.terminal;
    this.#sized = cols === own.cols && rows === own.rows;
    this.#sizeNote.hidden = this.#sized;
    this.#sizeNote.textContent = `Sized ${cols}×${rows} by another viewer: click or type here to size it for this window (${own.cols}×${own.rows}).`;
    if (this.#sized || (cols === this.terminal.cols && rows === this.terminal.rows)) return;
    // Drawn at the pty's size (scrolled if bigger than the box), as the program draws it: a screen
    // drawn for 120 columns wrapped into 80 is garbled. Not sent back: it is the pty's already.
    this.#mirroring = true;
    this.#quietResize = true; // the pty has this size already: nothing to send
    try {
      this.terminal.resize(Math.max(2, cols), rows);
    } finally {
      this.#quietResize = false;
    }
  }

  /** The size this view's box fits, if it is laid out. */
  #fitted(): { cols: number; rows: number } | undefined {
    const proposed = this.element.hidden ? undefined : this.#fit.proposeDimensions();
    return proposed !== undefined && Number.isFinite(proposed.cols) && Number.isFinite(proposed.rows)
      ? { cols: Math.max(2, proposed.cols), rows: Math.max(1, proposed.rows) }
      : undefined;
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
    if (this.#sessionId !== undefined) sessionStorage.removeItem(SAVED_SCREEN_KEY + this.#sessionId);
    this.terminal.dispose();
    this.element.remove();
  }

  /** Gives the pty this view's size: this view is the latest one used. */
  #sendSize(): void {
    // Before pty.follow answers, the view holds the snapshot's size (the pty's), or none yet.
    if (this.#exit !== undefined || !this.#following) return;
    if (this.#mirroring) {
      this.#mirroring = false;
      this.#sizeNote.hidden = true; // measured without it: the box it leaves is this view's
      const own = this.#fitted();
      if (own !== undefined && (own.cols !== this.terminal.cols || own.rows !== this.terminal.rows))
        return this.terminal.resize(own.cols, own.rows); // onResize sends it
    }
    const { cols, rows } = this.terminal;
    this.#sizedAt = performance.now();
    this.#sized = true;
    this.#sizeNote.hidden = true;
    this.#connection.call('pty.resize', { sessionId: this.#id, cols, rows }).catch(() => {});
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
    if (!this.#connection.open || this.#starting) {
      // A new tab's own keys wait whole (a connection's drop, of unknown length, is bounded).
      if (!this.#connection.open && this.#queuedBytes + bytes.length > QUEUE_MAX_BYTES) {
        bell();
        this.#refusedBytes += bytes.length;
        return this.#showLink();
      }
      this.#queued.push(bytes);
      this.#queuedBytes += bytes.length;
      return this.#showLink();
    }
    if (this.#inputChain === undefined && bytes.length <= INPUT_MAX_BYTES) {
      // `busy`: the program is not reading; say so rather than drop the keys silently.
      this.#piece(bytes).catch((error: unknown) => {
        if (!(error instanceof RpcError)) return;
        if (error.code === 'busy') bell();
        // Sent as the socket dropped: it may or may not have arrived; said, not guessed.
        if (error.code === 'disconnected') {
          bell();
          this.#linkNote.hidden = false;
          this.#linkNote.textContent = `${bytes.length} bytes typed as the connection dropped may not have arrived.`;
        }
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
    return this.#connection.call('pty.input', { sessionId: this.#id, data: encodeBase64(bytes) });
  }
}

/** Alt+N/W/A/1–9: the page's keys (main.ts), unless a tab gives them to its program. */
export function isPageKey(event: KeyboardEvent): boolean {
  return event.altKey && !event.ctrlKey && !event.metaKey && /^(Key[NWA]|Digit[1-9])$/.test(event.code);
}
