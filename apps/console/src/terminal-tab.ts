// One terminal tab: an xterm.js view of one gateway session. It attaches from the session's screen
// snapshot (or its scrollback when the server has no `pty.snapshot`), then follows live output with
// each byte drawn exactly once, and acks only what xterm has drawn, so a flood cannot outrun the page.
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import { h } from './dom.js';
import {
  decodeBase64,
  RpcError,
  type GatewayConnection,
  type PtyExitEvent,
  type PtyOutput,
} from './gateway-client.js';

export type ExitInfo = Omit<PtyExitEvent, 'sessionId'>;

/** `pty.snapshot`'s result: the serialized screen, the offset it covers, the size it was taken at. */
interface Snapshot {
  readonly data: string;
  readonly offset: number;
  readonly cols?: number;
  readonly rows?: number;
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
  /** Live output that arrived before the snapshot or replay answered. */
  #early: PtyOutput[] | undefined = [];
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
      { class: 'terminal', 'data-session': sessionId, hidden: true },
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

  /** Draws the session's current screen (at its size), then live output from where it ends. */
  async attach(size?: { cols: number; rows: number }): Promise<void> {
    if (size !== undefined) this.terminal.resize(size.cols, size.rows);
    let start: { offset: number; data: Uint8Array | string };
    try {
      const snapshot = await this.#connection.request<Snapshot>('pty.snapshot', {
        sessionId: this.sessionId,
      });
      if (snapshot.cols !== undefined && snapshot.rows !== undefined)
        this.terminal.resize(snapshot.cols, snapshot.rows);
      start = { offset: snapshot.offset, data: snapshot.data };
    } catch (error) {
      if (!(error instanceof RpcError && error.code === 'method_not_found')) throw error;
      start = await this.#replay();
    }
    const end = typeof start.data === 'string' ? start.offset : start.offset + start.data.length;
    this.terminal.write(start.data);
    this.#next = end;
    const early = this.#early ?? [];
    this.#early = undefined;
    for (const output of early) this.output(output);
    this.fit();
  }

  /** The scrollback, asked for in the answers of at most 64 KiB the gateway gives, then drawn at once. */
  async #replay(): Promise<{ offset: number; data: Uint8Array }> {
    const chunks: Uint8Array[] = [];
    let from = 0;
    let first: number | undefined;
    for (;;) {
      const answer = await this.#connection.call('pty.replay', {
        sessionId: this.sessionId,
        fromOffset: from,
      });
      const data = decodeBase64(answer.data);
      first ??= answer.offset;
      chunks.push(data);
      from = answer.offset + data.length;
      if (answer.end === undefined || from >= answer.end || data.length === 0) break;
    }
    const all = new Uint8Array(chunks.reduce((sum, chunk) => sum + chunk.length, 0));
    chunks.reduce((at, chunk) => (all.set(chunk, at), at + chunk.length), 0);
    return { offset: first ?? 0, data: all };
  }

  /** Live output of this session: drawn once, in offset order, acked once drawn. */
  output(output: PtyOutput): void {
    if (this.#early !== undefined) {
      this.#early.push(output);
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
