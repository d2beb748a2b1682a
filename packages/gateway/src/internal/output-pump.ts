// Moves one session's output to every viewer (a connection subscribed to its pty.output): batched
// (same-tick chunks at once when idle, at most one frame per `batchMs` under load, or sooner at
// `maxBatchBytes`), offsets without gaps, and flow control per viewer. A viewer whose backlog passes
// the high-water mark gets no more live frames: it falls behind, and once under the low-water mark
// it is caught up from the scrollback, then goes on live. The pty is paused only while every
// viewer is behind. When the last viewer disconnects, the session's output is held (the pty paused
// once it has made a scrollback's worth past what that viewer had acknowledged) for a grace period,
// so a client that reconnects within it loses nothing; after it, the program runs on.
import type { PtySession } from '@aleph/pty';
import type { Connection } from './connection.js';
import { binaryOutputFramer, binaryOutputHead } from './binary-frames.js';
import { outputFramer } from './frames.js';

export interface FlowLimits {
  readonly batchMs: number;
  readonly maxBatchBytes: number;
  readonly highWaterBytes: number;
  readonly lowWaterBytes: number;
  /** How long a detached session's output is held for a client to come back. */
  readonly detachGraceMs: number;
}

/** A frame this large means bulk output: the next one may wait for the batch window. */
const BULK_FRAME_BYTES = 1024;
/** #scheduled when the flush is a microtask (nothing to cancel). */
const SOON = Symbol('soon');
/**
 * Room left in the scrollback when a held session pauses. After the pause, what lands still comes
 * in: the rest of the read in hand (up to a session's 64 KiB read budget), what node-pty's paused
 * stream buffered (up to a read), and a read in flight. 128 KiB was one read short: a reconnect
 * storm under load lost 25 KB of a held session's output.
 */
export const HOLD_MARGIN_BYTES = 256 * 1024;
/** How often viewers that are behind are looked at (acks also wake the pump at once). */
const BEHIND_CHECK_MS = 10;
/** A frame is first made this large (an echo, a prompt); bulk output takes one from the pool. */
const SMALL_FRAME_BYTES = 2048;
/** The longest head of a binary output frame (a 255-byte session id). */
const MAX_HEAD_BYTES = 2 + 255 + 8;

/**
 * Bulk output frames, each taken again once every socket it went to has written it: a flood
 * allocates no frame per read (each of those would add to the garbage the GC collects).
 */
export class FramePool {
  readonly capacity: number;
  readonly #free: Buffer[] = []; // at most four: what a flood to a few viewers has in flight

  constructor(maxBatchBytes: number) {
    this.capacity = MAX_HEAD_BYTES + maxBatchBytes;
  }

  take(): Buffer {
    return this.#free.pop() ?? Buffer.allocUnsafe(this.capacity);
  }

  give(frame: Buffer): void {
    if (frame.length === this.capacity && this.#free.length < 4) this.#free.push(frame);
  }
}

export class OutputPump {
  readonly #session: PtySession;
  readonly #connections: () => Iterable<Connection>;
  readonly #limits: FlowLimits;
  readonly #pool: FramePool;
  /** The frame being filled: room for the binary head, then the pending output. */
  #frame: Buffer | undefined;
  #pendingBytes = 0;
  #firstOffset = 0;
  /** Offset one past the last byte sent live: where the next live frame starts. */
  #flushed: number;
  #lastFlushAt = 0;
  #lastFrameBytes = 0;
  #scheduled: NodeJS.Timeout | NodeJS.Immediate | typeof SOON | undefined;
  #behindCheck: NodeJS.Timeout | undefined;
  /** The pty is paused because every viewer is behind. */
  #blocked = false;
  /** Since the last viewer left: output from this offset on is held, until #graceTimer fires. */
  #holdFrom: number | undefined;
  #held: Disposable | undefined;
  #graceTimer: NodeJS.Timeout | undefined;
  readonly #textFrame: (offset: number, data: Buffer) => Buffer;
  readonly #binaryFrame: (offset: number, data: Buffer) => Buffer;
  readonly #head: ReturnType<typeof binaryOutputHead>;

  constructor(
    session: PtySession,
    connections: () => Iterable<Connection>,
    limits: FlowLimits,
    pool = new FramePool(limits.maxBatchBytes),
  ) {
    this.#session = session;
    this.#connections = connections;
    this.#limits = limits;
    this.#pool = pool;
    this.#textFrame = outputFramer(session.id);
    this.#binaryFrame = binaryOutputFramer(session.id);
    this.#head = binaryOutputHead(session.id);
    this.#flushed = session.scrollback.end;
    // A view of the pty's read buffer: copied into the frame at once, never kept.
    session.onDataView((chunk, offset) => this.#onData(chunk, offset));
  }

  /** Connections that want this session's output now. */
  *#viewers(): Generator<Connection> {
    for (const connection of this.#connections())
      if (connection.open && connection.wants('pty.output', this.#session.id)) yield connection;
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
    const head = this.#head.bytes;
    const need = head + this.#pendingBytes + chunk.length;
    let frame = this.#frame;
    if (frame === undefined || frame.length < need) {
      const larger = need > SMALL_FRAME_BYTES ? this.#pool.take() : Buffer.allocUnsafe(SMALL_FRAME_BYTES);
      if (frame !== undefined) {
        frame.copy(larger, head, head, head + this.#pendingBytes);
        this.#pool.give(frame);
      }
      frame = this.#frame = larger;
    }
    chunk.copy(frame, head + this.#pendingBytes);
    this.#pendingBytes += chunk.length;
  }

  flush(): void {
    if (this.#scheduled !== undefined && this.#scheduled !== SOON) {
      clearTimeout(this.#scheduled as NodeJS.Timeout);
      clearImmediate(this.#scheduled as NodeJS.Immediate);
    }
    this.#scheduled = undefined;
    if (this.#pendingBytes === 0 || this.#frame === undefined) return;
    const whole = this.#frame;
    const frame = whole.subarray(0, this.#head.bytes + this.#pendingBytes);
    const data = frame.subarray(this.#head.bytes);
    this.#frame = undefined;
    const offset = this.#firstOffset;
    this.#pendingBytes = 0;
    this.#lastFlushAt = performance.now();
    this.#lastFrameBytes = data.length;
    const end = offset + data.length;
    this.#flushed = end;
    let text: Buffer | undefined;
    let binary: Buffer | undefined;
    let live = 0;
    let viewers = 0;
    // The frame goes back to the pool once every socket it went to is done with it.
    let sending = 1;
    const written = (): void => {
      if (--sending === 0) this.#pool.give(whole);
    };
    for (const viewer of this.#viewers()) {
      viewers += 1;
      let sent = viewer.sent.get(this.#session.id);
      if (sent === undefined) {
        sent = offset; // a new viewer starts live
        viewer.startedAt.set(this.#session.id, offset);
      }
      if (sent !== offset || viewer.backlog(this.#session.id) > this.#limits.highWaterBytes) continue;
      if (viewer.binary) {
        if (binary === undefined) this.#head.write(whole, offset);
        // Only a pooled frame needs to know when it was written (a small one is never reused).
        const pooled = whole.length === this.#pool.capacity;
        sending += pooled ? 1 : 0;
        viewer.send((binary = frame), true, pooled ? written : undefined);
      } else viewer.send((text ??= this.#textFrame(offset, data)));
      viewer.sent.set(this.#session.id, end);
      if (viewer.backlog(this.#session.id) <= this.#limits.highWaterBytes) live += 1;
    }
    written();
    if (viewers > 0 && live < viewers) this.checkFlow();
    else if (viewers === 0) this.#holdIfDue();
  }

  /** Re-evaluates flow control now (after an ack, a new viewer, a disconnect). */
  checkFlow(): void {
    let viewers = 0;
    let live = 0;
    let behind = 0;
    for (const viewer of this.#viewers()) {
      viewers += 1;
      const id = this.#session.id;
      const sent = viewer.sent.get(id) ?? this.#flushed;
      if (sent < this.#flushed && viewer.backlog(id) <= this.#limits.lowWaterBytes) this.#catchUp(viewer);
      const caughtUp = (viewer.sent.get(id) ?? this.#flushed) === this.#flushed;
      if (caughtUp && viewer.backlog(id) <= this.#limits.highWaterBytes) live += 1;
      else behind += 1;
    }
    this.#setBlocked(viewers > 0 && live === 0);
    this.#watchBehind(behind > 0);
    if (viewers === 0) this.#holdIfDue();
  }

  /**
   * Sends a viewer that fell behind what it missed, from the scrollback, up to the high-water mark
   * (or all of it: a session's end goes out after its last output, to every viewer).
   */
  #catchUp(viewer: Connection, highWaterBytes = this.#limits.highWaterBytes): void {
    const id = this.#session.id;
    let sent = viewer.sent.get(id) ?? this.#flushed;
    const { offset, data } = this.#session.replay(sent);
    // Older bytes are gone from the scrollback: the viewer sees the gap in offsets (and can take
    // a snapshot); what is kept follows without one.
    sent = offset;
    const end = Math.min(this.#flushed, offset + data.length);
    while (sent < end && viewer.backlog(id) <= highWaterBytes) {
      const length = Math.min(this.#limits.maxBatchBytes, end - sent);
      const bytes = data.subarray(sent - offset, sent - offset + length);
      if (viewer.binary) viewer.send(this.#binaryFrame(sent, bytes), true);
      else viewer.send(this.#textFrame(sent, bytes));
      sent += length;
    }
    viewer.sent.set(id, sent);
  }

  /** A viewer asks for the output from `fromOffset` on; answers where it will resume. */
  followFrom(viewer: Connection, fromOffset: number): number {
    const offset = Math.min(Math.max(fromOffset, this.#session.scrollback.start), this.#flushed);
    viewer.sent.set(this.#session.id, offset);
    viewer.startedAt.set(this.#session.id, offset);
    // Acks of the stream before this one say nothing about the new one beyond its start.
    const acked = viewer.acked.get(this.#session.id);
    if (acked !== undefined && acked > offset) viewer.acked.set(this.#session.id, offset);
    this.#holdFrom = undefined; // the one it was held for is back, or another viewer is: it is theirs now
    // After the answer to this request has gone out: the frames follow it.
    setImmediate(() => {
      this.checkFlow(); // behind: it keeps the pty paused until it has caught up
      this.#endHold();
    });
    return offset;
  }

  /**
   * A client is back (an ack, a replay that reached the present): the held output is its to read
   * now, and the pty runs again as flow control allows.
   */
  release(): void {
    if (this.#holdFrom === undefined && this.#held === undefined) return;
    this.#endHold();
    this.checkFlow();
  }

  /** The last viewer is leaving: hold the output from what it had acknowledged. */
  leave(viewer: Connection): void {
    const id = this.#session.id;
    if (!viewer.wants('pty.output', id) || this.#limits.detachGraceMs <= 0) return;
    if (this.#session.exitInfo !== undefined) return; // ended: the manager keeps its tail
    for (const other of this.#viewers()) if (other !== viewer) return;
    // Hold from what it is known to have: its last ack, else where its stream began. What was
    // sent but never acknowledged may still have been in flight when it went.
    const from = viewer.acked.get(id) ?? viewer.startedAt.get(id) ?? this.#flushed;
    this.#holdFrom = Math.min(this.#holdFrom ?? from, from);
    if (this.#graceTimer !== undefined) clearTimeout(this.#graceTimer);
    this.#graceTimer = setTimeout(() => this.#endHold(), this.#limits.detachGraceMs);
    this.#graceTimer.unref();
  }

  #holdIfDue(): void {
    if (this.#holdFrom === undefined || this.#held !== undefined) return;
    const room = Math.min(this.#limits.highWaterBytes, this.#session.scrollback.capacity - HOLD_MARGIN_BYTES);
    if (this.#session.scrollback.end - this.#holdFrom < room) return;
    this.#held = this.#session.hold();
  }

  #endHold(): void {
    if (this.#graceTimer !== undefined) clearTimeout(this.#graceTimer);
    this.#graceTimer = undefined;
    this.#holdFrom = undefined;
    this.#held?.[Symbol.dispose]();
    this.#held = undefined;
  }

  #setBlocked(blocked: boolean): void {
    if (blocked === this.#blocked) return;
    this.#blocked = blocked;
    if (blocked) this.#session.pause();
    else this.#session.resume();
  }

  #watchBehind(on: boolean): void {
    if (on && this.#behindCheck === undefined) {
      this.#behindCheck = setInterval(() => this.checkFlow(), BEHIND_CHECK_MS);
      this.#behindCheck.unref();
    } else if (!on && this.#behindCheck !== undefined) {
      clearInterval(this.#behindCheck);
      this.#behindCheck = undefined;
    }
  }

  /** For tests and `pty.list`: the pty is held for a detached client. */
  get holding(): boolean {
    return this.#holdFrom !== undefined;
  }

  /** The session ended: its last output goes out; the pump stays for viewers that follow its tail. */
  ended(): void {
    this.flush();
    // A viewer that fell behind gets the rest now (at most a scrollback): its pty.exit follows.
    for (const viewer of this.#viewers())
      if ((viewer.sent.get(this.#session.id) ?? this.#flushed) < this.#flushed)
        this.#catchUp(viewer, Infinity);
    this.#endHold();
  }

  dispose(): void {
    this.flush();
    this.#watchBehind(false);
    this.#endHold();
  }
}
