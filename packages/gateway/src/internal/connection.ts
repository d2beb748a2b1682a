// One client socket: its subscriptions, what it was sent and acknowledged per session, and an
// AbortController that every request it made observes.
import type { WebSocket } from 'ws';
import { topicMatches } from '../protocol.js';

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
  /** Since when this connection has been over the high-water mark (slow-consumer clock). */
  overSince: number | undefined;
  awaitingPong = false;

  constructor(id: string, socket: WebSocket) {
    this.id = id;
    this.socket = socket;
  }

  get open(): boolean {
    return this.socket.readyState === this.socket.OPEN;
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

  /** Sends a text frame (a Buffer holds its UTF-8 bytes). */
  send(frame: string | Buffer): void {
    if (this.open) this.socket.send(frame, { binary: false });
  }
}
