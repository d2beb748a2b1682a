// Moves one session's output to every subscribed connection: batched (same-tick chunks at once
// when idle, at most one frame per `batchMs` under load, or sooner at `maxBatchBytes`), offsets
// without gaps, and flow control — above the high-water mark of any subscriber's backlog the pty is
// paused, below the low-water mark of all it is resumed. A subscriber stuck above the mark for
// longer than `slowConsumerMs` is disconnected (it can reconnect and replay) so it cannot freeze
// the session for everyone else.
import type { PtySession } from '@aleph/pty';
import { SLOW_CONSUMER_CLOSE_CODE, type Connection } from './connection.js';
import { outputFramer } from './frames.js';

export interface FlowLimits {
  readonly batchMs: number;
  readonly maxBatchBytes: number;
  readonly highWaterBytes: number;
  readonly lowWaterBytes: number;
  readonly slowConsumerMs: number;
}

/** A frame this large means bulk output: the next one may wait for the batch window. */
const BULK_FRAME_BYTES = 1024;
/** #scheduled when the flush is a microtask (nothing to cancel). */
const SOON = Symbol('soon');

export class OutputPump {
  readonly #session: PtySession;
  readonly #connections: () => Iterable<Connection>;
  readonly #limits: FlowLimits;
  readonly #chunks: Buffer[] = [];
  #pendingBytes = 0;
  #firstOffset = 0;
  #lastFlushAt = 0;
  #lastFrameBytes = 0;
  #scheduled: NodeJS.Timeout | NodeJS.Immediate | typeof SOON | undefined;
  #flowCheck: NodeJS.Timeout | undefined;
  readonly #frame: (offset: number, data: Buffer) => Buffer;

  constructor(session: PtySession, connections: () => Iterable<Connection>, limits: FlowLimits) {
    this.#session = session;
    this.#connections = connections;
    this.#limits = limits;
    this.#frame = outputFramer(session.id);
    session.onData((chunk, offset) => this.#onData(chunk, offset));
  }

  #onData(chunk: Buffer, offset: number): void {
    const max = this.#limits.maxBatchBytes;
    // A frame never carries more than maxBatchBytes: what does not fit goes in the next one.
    while (this.#pendingBytes + chunk.length >= max) {
      const room = max - this.#pendingBytes;
      this.#push(chunk.subarray(0, room), offset);
      this.flush();
      chunk = chunk.subarray(room);
      offset += room;
    }
    if (chunk.length === 0) return;
    this.#push(chunk, offset);
    if (this.#scheduled !== undefined) return;
    // Interactive traffic (small frames) goes out as soon as this read's chunks are in, before the
    // event loop moves on to other sessions: no added latency for an echo, however busy the loop.
    // Bulk output (the last frame was large) is held for up to batchMs to make fewer frames.
    if (this.#lastFrameBytes < BULK_FRAME_BYTES) {
      this.#scheduled = SOON;
      queueMicrotask(() => this.#scheduled === SOON && this.flush());
      return;
    }
    const wait = this.#lastFlushAt + this.#limits.batchMs - performance.now();
    this.#scheduled = wait <= 0 ? setImmediate(() => this.flush()) : setTimeout(() => this.flush(), wait);
  }

  #push(chunk: Buffer, offset: number): void {
    if (this.#pendingBytes === 0) this.#firstOffset = offset;
    this.#chunks.push(chunk);
    this.#pendingBytes += chunk.length;
  }

  flush(): void {
    if (this.#scheduled !== undefined && this.#scheduled !== SOON) {
      clearTimeout(this.#scheduled as NodeJS.Timeout);
      clearImmediate(this.#scheduled as NodeJS.Immediate);
    }
    this.#scheduled = undefined;
    if (this.#pendingBytes === 0) return;
    const data =
      this.#chunks.length === 1
        ? (this.#chunks[0] as Buffer)
        : Buffer.concat(this.#chunks, this.#pendingBytes);
    const offset = this.#firstOffset;
    this.#chunks.length = 0;
    this.#pendingBytes = 0;
    this.#lastFlushAt = performance.now();
    this.#lastFrameBytes = data.length;
    const frame = this.#frame(offset, data);
    const end = offset + data.length;
    let over = false;
    for (const connection of this.#connections()) {
      if (!connection.open || !connection.wants('pty.output', this.#session.id)) continue;
      connection.send(frame);
      connection.sent.set(this.#session.id, end);
      if (connection.backlog(this.#session.id) > this.#limits.highWaterBytes) over = true;
    }
    if (over) this.#pause();
  }

  /** Re-evaluates flow control now (after an ack, a disconnect). */
  checkFlow(): void {
    if (this.#flowCheck === undefined) return;
    const now = performance.now();
    let blocked = false;
    for (const connection of this.#connections()) {
      if (!connection.open || !connection.wants('pty.output', this.#session.id)) continue;
      const backlog = connection.backlog(this.#session.id);
      if (backlog > this.#limits.lowWaterBytes) {
        blocked = true;
        connection.overSince ??= now;
        if (now - connection.overSince > this.#limits.slowConsumerMs) {
          connection.socket.close(
            SLOW_CONSUMER_CLOSE_CODE,
            'slow consumer: reconnect and replay from your last offset',
          );
        }
      } else {
        connection.overSince = undefined;
      }
    }
    if (!blocked) this.#resume();
  }

  #pause(): void {
    if (this.#flowCheck !== undefined) return;
    this.#session.pause();
    this.#flowCheck = setInterval(() => this.checkFlow(), 10);
    this.#flowCheck.unref();
  }

  #resume(): void {
    if (this.#flowCheck !== undefined) clearInterval(this.#flowCheck);
    this.#flowCheck = undefined;
    for (const connection of this.#connections()) connection.overSince = undefined;
    this.#session.resume();
  }

  dispose(): void {
    this.flush();
    if (this.#flowCheck !== undefined) clearInterval(this.#flowCheck);
    this.#flowCheck = undefined;
  }
}
