// One terminal tab: an xterm.js view of one gateway session. It attaches from the session's screen
// snapshot, then follows its output (`pty.follow`) with each byte drawn exactly once, and acks only
// what xterm has drawn, so a flood cannot outrun the page.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import { h } from './dom.js';
import {
  RpcError,
  type GatewayConnection,
  type MethodResult,
  type PtyExitEvent,
  type PtyOutput,
} from './gateway-client.js';

export type ExitInfo = Omit<PtyExitEvent, 'sessionId'>;

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

  constructor(
    connection: GatewayConnection,
    readonly sessionId: string,
    readonly title: string,
    readonly onChange: () => void = () => {},
  ) {
    this.#connection = connection;
    this.#notice = h('div', { class: 'notice', role: 'status', hidden: true });
    const screen = h('div', { class: 'screen' });
    this.element = h(
      'section',
      { class: 'term-tab', 'data-session': sessionId, hidden: true },
      this.#notice,
      screen,
    );
    this.terminal = new Terminal({
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, monospace',
      fontSize: 13,
      scrollback: 5000,
      theme: { background: '#111417' },
    });
    this.terminal.loadAddon(this.#fit);
    this.terminal.open(screen);
    // Alt+N/W/1–9 and Alt+A belong to the page (see main.ts), not to the program.
    this.terminal.attachCustomKeyEventHandler(
      (event) => !(event.altKey && /^(Key[NWA]|Digit[1-9])$/.test(event.code)),
    );
    this.terminal.onData((text) => this.#send(text));
    this.terminal.onBinary((binary) => this.#send(binary, true));
    this.terminal.onResize(({ cols, rows }) => {
      if (this.#exit === undefined)
        this.#connection.call('pty.resize', { sessionId, cols, rows }).catch(() => {});
    });
  }

  get exit(): ExitInfo | undefined {
    return this.#exit;
  }

  /**
   * Draws the session's screen from its snapshot (at the size it was taken), then follows it from
   * the offset the snapshot covers: what a client that watched from the start would show.
   */
  async attach(): Promise<void> {
    this.#following = false; // frames before pty.follow's answer belong to the stream before it
    const snapshot = await this.#snapshot();
    this.terminal.reset();
    this.terminal.resize(snapshot.cols, snapshot.rows);
    this.terminal.write(snapshot.data);
    const follow = await this.#connection.call('pty.follow', {
      sessionId: this.sessionId,
      fromOffset: snapshot.offset,
    });
    this.#next = follow.offset;
    this.#following = true;
    if (follow.exit !== null) this.ended(follow.exit);
    this.fit();
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
      void this.attach().catch(() => {});
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

  /** Fits the terminal to its box (once per frame); the resize goes to the pty. */
  fit(): void {
    cancelAnimationFrame(this.#fitFrame);
    this.#fitFrame = requestAnimationFrame(() => {
      if (!this.element.hidden) this.#fit.fit();
    });
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

  #send(text: string, binary = false): void {
    if (this.#exit !== undefined) return;
    // onBinary hands a string of bytes (mouse reports): btoa encodes exactly those.
    const sent = binary
      ? this.#connection.call('pty.input', { sessionId: this.sessionId, data: btoa(text) })
      : this.#connection.input(this.sessionId, text);
    sent.catch((error: unknown) => {
      // `busy`: the program is not reading; say so rather than drop the keys silently.
      if (error instanceof RpcError && error.code === 'busy') this.terminal.write('\x07');
    });
  }
}
