// One client socket: its subscriptions, what it was sent and acknowledged per session, an
// AbortController that every request it made observes, and its outbound budget. Every byte the
// gateway sends (replies, replay, events) sits in the socket's buffer until the client reads it:
// past the budget the connection reads no more requests (and the few already read are answered
// `busy`), and when more than four budgets wait behind the frame it is reading it is closed, so a
// client that stops reading cannot grow the server's memory without bound. One frame, however
// large, is not held against a client that reads it: a client that stops reading in the middle of
// one is found by the keepalive (its pong never comes).
import type { Duplex } from 'node:stream';
import type { WebSocket } from 'ws';
import { topicMatches } from '../protocol.js';
import { InputFrameReader } from './binary-frames.js';

export const SLOW_CONSUMER_CLOSE_CODE = 4008;
/**
 * Merges an event held for a client that reads slowly with the next one of the same topic into one
 * (say, two pieces of a streamed reply into their concatenation), or answers undefined when they
 * must stay two events.
 */
export type Coalesce = (held: unknown, next: unknown) => unknown;
/** How often a connection that stopped reading is checked for having drained. */
const DRAIN_CHECK_MS = 10;
/** The largest payload whose WebSocket header is two bytes (RFC 6455, 5.2): an echo, a keystroke's output. */
const SHORT_PAYLOAD_BYTES = 125;
/** FIN and opcode 2 (binary), the first byte of an unfragmented binary frame's header. */
const FIN_BINARY = 0x82;

export class Connection {
  readonly id: string;
  readonly socket: WebSocket;
  readonly controller = new AbortController();
  readonly topics = new Set<string>();
  /** When set, pty.* events only for these sessions. */
  sessions: Set<string> | undefined;
  /** Per session: offset one past the last byte sent, and the last offset acknowledged. */
  readonly sent = new Map<string, number>();
  readonly acked = new Map<string, number>();
  /** Per session: where this client's stream began (a follow's offset, or its first live byte). */
  readonly startedAt = new Map<string, number>();
  /** Since when this connection has been over the high-water mark (slow-consumer clock). */
  overSince: number | undefined;
  awaitingPong = false;
  /** Requests read and not answered yet. */
  inFlight = 0;
  /** Since `pty.binary`: pty output goes out, and keystrokes may come in, as binary frames. */
  binary = false;
  /** Reads this client's binary input frames. */
  readonly input = new InputFrameReader();
  /** Outbound bytes (ws's queue and the socket's) past which the connection stops reading. */
  readonly budgetBytes: number;
  readonly #onHold: (outboundBytes: number) => void;
  /** The connection under the socket: a short binary frame goes out on it as one write. */
  readonly #wire: Duplex | undefined;
  #drainCheck: NodeJS.Timeout | undefined;
  /** Events held while the client is behind (coalesced where their topic allows), in order. */
  readonly #held: { topic: string; data: unknown; bytes: number }[] = [];
  /** Bytes of each frame over the budget not yet written out, oldest first: the first is the one being read. */
  readonly #large: number[] = [];
  #heldBytes = 0;
  #heldCheck: NodeJS.Timeout | undefined;

  constructor(
    id: string,
    socket: WebSocket,
    budgetBytes: number,
    onHold: (outboundBytes: number) => void = () => {},
    wire?: Duplex,
  ) {
    this.id = id;
    this.socket = socket;
    this.budgetBytes = budgetBytes;
    this.#onHold = onHold;
    this.#wire = wire;
  }

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
  }

  /** Bytes sent to this client that it has not read yet. */
  get outboundBytes(): number {
    return this.socket.bufferedAmount;
  }

  get overBudget(): boolean {
    return this.socket.bufferedAmount > this.budgetBytes;
  }

  wants(topic: string, sessionId?: string): boolean {
    if (sessionId !== undefined && this.sessions !== undefined && !this.sessions.has(sessionId)) return false;
    for (const pattern of this.topics) if (topicMatches(pattern, topic)) return true;
    return false;
  }

  /** Bytes of `sessionId` sent but not acknowledged; 0 for a client that never acks that session. */
  unacked(sessionId: string): number {
    const acked = this.acked.get(sessionId);
    if (acked === undefined) return 0;
    return Math.max(0, (this.sent.get(sessionId) ?? 0) - acked);
  }

  /** How far behind this client is on `sessionId`, by acks and by bytes stuck in its socket. */
  backlog(sessionId: string): number {
    return Math.max(this.unacked(sessionId), this.socket.bufferedAmount);
  }

  /**
   * Sends a text frame (a Buffer holds its UTF-8 bytes), or a binary one; then holds reading if over
   * budget. `written` is called once, when the socket is done with the frame (or will never send it).
   */
  send(frame: string | Buffer, binary = false, written?: () => void): void {
    if (!this.open) return written?.();
    if (
      binary &&
      this.#wire !== undefined &&
      frame.length <= SHORT_PAYLOAD_BYTES &&
      typeof frame !== 'string'
    ) {
      // ws writes a frame's header and its payload as two writes (a writev after cork/uncork);
      // a short one costs less as one buffer, one write. The socket is ws's own (no compression,
      // nothing ws queues: it writes each frame as it is sent), so the order of frames holds.
      const whole = Buffer.allocUnsafe(2 + frame.length);
      whole[0] = FIN_BINARY;
      whole[1] = frame.length;
      frame.copy(whole, 2);
      this.#wire.write(whole, written === undefined ? undefined : () => written());
    } else if (frame.length * (typeof frame === 'string' ? 3 : 1) > this.budgetBytes) {
      const bytes = typeof frame === 'string' ? Buffer.byteLength(frame) : frame.length;
      if (bytes > this.budgetBytes) {
        this.#large.push(bytes);
        // ws calls back in the order the frames were sent (or all at once when the socket fails).
        this.socket.send(frame, { binary }, () => {
          this.#large.shift();
          written?.();
        });
      } else this.socket.send(frame, { binary }, written);
    } else this.socket.send(frame, { binary }, written);
    if (this.socket.bufferedAmount > this.budgetBytes) this.#holdReading();
  }

  /** Unread bytes behind the frame the client is reading when that one is over the budget: what a slow reader is judged by. */
  get #behind(): number {
    return this.socket.bufferedAmount - (this.#large[0] ?? 0);
  }

  /**
   * Sends an event. While the client has more than a quarter of its budget unread, events wait
   * here instead, in order, and one whose topic can be coalesced merges into the event held just
   * before it: a slow reader of a streamed reply gets fewer, larger pieces, never a growing queue.
   */
  sendEvent(topic: string, data: unknown, frame: () => string, coalesce: Coalesce | undefined): void {
    if (!this.open) return;
    const behind = this.#held.length > 0 || this.socket.bufferedAmount > this.budgetBytes / 4;
    if (!behind) return this.send(frame());
    const last = this.#held.at(-1);
    const merged = last?.topic === topic && coalesce !== undefined ? coalesce(last.data, data) : undefined;
    if (last !== undefined && merged !== undefined) {
      const bytes = JSON.stringify(merged).length;
      this.#heldBytes += bytes - last.bytes;
      Object.assign(last, { data: merged, bytes });
    } else {
      const bytes = JSON.stringify(data).length;
      this.#held.push({ topic, data, bytes });
      this.#heldBytes += bytes;
    }
    if (this.#heldBytes + this.#behind > 4 * this.budgetBytes) return this.#holdReading(true);
    this.#heldCheck ??= setInterval(() => this.#sendHeld(), DRAIN_CHECK_MS);
    this.#heldCheck.unref();
  }

  #sendHeld(): void {
    while (this.open && this.#held.length > 0 && this.socket.bufferedAmount <= this.budgetBytes / 4) {
      const { topic, data, bytes } = this.#held.shift() as { topic: string; data: unknown; bytes: number };
      this.#heldBytes -= bytes;
      this.send(JSON.stringify({ jsonrpc: '2.0', method: topic, params: data }));
    }
    if (this.open && this.#held.length > 0) return;
    clearInterval(this.#heldCheck);
    this.#heldCheck = undefined;
    this.#held.length = 0;
    this.#heldBytes = 0;
  }

  #holdReading(tooMuchHeld = false): void {
    if (tooMuchHeld || this.#behind > 4 * this.budgetBytes) {
      this.socket.close(SLOW_CONSUMER_CLOSE_CODE, 'slow consumer: read what was sent, then reconnect');
      // Reading again, for the client's answer to the close: the handshake ends when it has read up to it.
      if (this.#drainCheck !== undefined) this.socket.resume();
      this.dispose();
      return;
    }
    if (this.#drainCheck !== undefined) return;
    this.socket.pause();
    this.#onHold(this.socket.bufferedAmount);
    this.#drainCheck = setInterval(() => {
      if (this.open && this.socket.bufferedAmount > this.budgetBytes / 2) return;
      this.dispose();
      if (this.open) this.socket.resume();
    }, DRAIN_CHECK_MS);
    this.#drainCheck.unref();
  }

  get readingHeld(): boolean {
    return this.#drainCheck !== undefined;
  }

  dispose(): void {
    if (this.#drainCheck !== undefined) clearInterval(this.#drainCheck);
    this.#drainCheck = undefined;
    if (!this.open) {
      clearInterval(this.#heldCheck);
      this.#heldCheck = undefined;
    }
  }
}
