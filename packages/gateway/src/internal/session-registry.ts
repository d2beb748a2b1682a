// The sessions the gateway serves, one record each: the session's output pump, its mode tracker
// and size log (what a snapshot needs), its watch (held while any open connection follows its
// output, so it is never idle-expired meanwhile) and its server-side screen. A record is made when
// the manager spawns (or already has) the session and ended in one place, `#forget`, when the
// manager forgets it: nothing of a session outlives its record.
import type { PtyManager, PtySession } from '@aleph/pty';
import { GatewayError } from '../errors.js';
import { MAX_INPUT_BYTES, MAX_SNAPSHOT_CELLS } from '../protocol.js';
import type { Connection } from './connection.js';
import { ModeTracker } from './modes.js';
import { FramePool, OutputPump, type FlowLimits } from './output-pump.js';
import type { SessionScreen, Snapshot } from './screen.js';
import { SizeLog } from './size-log.js';

export class SessionRecord {
  readonly session: PtySession;
  readonly pump: OutputPump;
  readonly modes: ModeTracker;
  readonly sizes: SizeLog;
  #watch: Disposable | undefined;
  #screen: SessionScreen | undefined;

  constructor(session: PtySession, pump: OutputPump) {
    this.session = session;
    this.pump = pump;
    // Every session's modes from its first byte (a session found at start: from where it is now).
    this.modes = new ModeTracker(session.scrollback.end);
    this.sizes = new SizeLog(session.cols, session.rows, session.scrollback.end);
    const read = (from: number, to: number): Uint8Array => {
      const { offset, data } = session.replay(from);
      return Buffer.from(data.subarray(0, Math.max(0, to - offset)));
    };
    // A view of the pty's read buffer, read at once (`read` copies what the tracker keeps).
    session.onDataView((chunk, offset) => {
      this.sizes.observe(session.cols, session.rows, offset, session.scrollback.start);
      this.modes.feed(chunk, session.scrollback.start, read);
    });
  }

  /** Holds the session's watch while `viewed` (and the session runs), lets it go otherwise. */
  watch(viewed: boolean): void {
    if (viewed && this.#watch === undefined) this.#watch = this.session.watch();
    if (!viewed && this.#watch !== undefined) {
      this.#watch[Symbol.dispose]();
      this.#watch = undefined;
    }
  }

  /** The screen after the output so far; the server's terminal is made at the first one. */
  async snapshot(): Promise<Snapshot> {
    const { session } = this;
    for (let attempt = 0; ; attempt += 1) {
      const screen = await this.#screenNow();
      try {
        return await screen.snapshot();
      } catch (error) {
        // Dropped under a flood while we waited: one more try from the scrollback, then busy.
        if (attempt > 0)
          throw new GatewayError('busy', `session ${session.id} is flooding: retry the snapshot`, {
            cause: error,
          });
      }
    }
  }

  async #screenNow(): Promise<SessionScreen> {
    // xterm.js is loaded with the first snapshot: a gateway that serves none does not carry it.
    const { SessionScreen, screenFits } = await import('./screen.js');
    const { session, modes } = this;
    const { cols, rows } = session;
    if (!screenFits(cols, rows)) {
      throw new GatewayError(
        'screen_too_large',
        `session ${session.id} is ${cols}×${rows}: a snapshot covers at most ${MAX_SNAPSHOT_CELLS} cells (cols × rows); resize it smaller, or replay its output`,
        { data: { cols, rows, maxCells: MAX_SNAPSHOT_CELLS } },
      );
    }
    if (this.#screen !== undefined) return this.#screen;
    const created: SessionScreen = new SessionScreen(session, {
      origin: modes.origin(session.scrollback.start),
      sizes: this.sizes,
      modes: () => modes.state,
      onDrop: () => {
        if (this.#screen === created) this.#screen = undefined;
      },
    });
    return (this.#screen = created);
  }

  /** The session is forgotten (or the gateway closes): its pump, watch and screen end. */
  end(): void {
    this.watch(false);
    this.pump.dispose();
    this.#screen?.dispose();
  }
}

export interface SessionRegistryOptions {
  readonly ptyManager: PtyManager;
  /** The open connections: a session's viewers are among them. */
  readonly connections: () => Iterable<Connection>;
  readonly flow: FlowLimits;
  /** Input bytes a session may have waiting for its program before a write answers `busy`. */
  readonly inputQueueBytes: number;
  /** A session ended: its last output has gone out to its viewers. */
  readonly onExit: (session: PtySession, info: NonNullable<PtySession['exitInfo']>) => void;
}

export class SessionRegistry {
  readonly #records = new Map<string, SessionRecord>();
  readonly #options: SessionRegistryOptions;
  /** The bulk output frames every session's pump fills, shared. */
  readonly #frames: FramePool;
  readonly #attach = (session: PtySession): void => this.#add(session);
  readonly #forget = (sessionId: string): void => {
    this.#records.get(sessionId)?.end();
    this.#records.delete(sessionId);
  };

  /** Records every session the manager has, and each it spawns or forgets from now on. */
  constructor(options: SessionRegistryOptions) {
    this.#options = options;
    this.#frames = new FramePool(options.flow.maxBatchBytes);
    options.ptyManager.on('spawn', this.#attach);
    options.ptyManager.on('forget', this.#forget);
    for (const session of options.ptyManager.list()) this.#add(session);
  }

  get(sessionId: string): SessionRecord | undefined {
    return this.#records.get(sessionId);
  }

  records(): IterableIterator<SessionRecord> {
    return this.#records.values();
  }

  #add(session: PtySession): void {
    if (this.#records.has(session.id)) return;
    const pump = new OutputPump(session, this.#options.connections, this.#options.flow, this.#frames);
    this.#records.set(session.id, new SessionRecord(session, pump));
    this.syncWatches(); // a connection subscribed to every session's output watches this one too
    session.onExit((info) => {
      pump.ended(); // the last output goes out before the exit event
      this.#options.onExit(session, info);
    });
  }

  /** Takes or lets go of each session's watch, after a subscription or a connection changed. */
  syncWatches(): void {
    const open = [...this.#options.connections()].filter((connection) => connection.open);
    for (const record of this.#records.values()) {
      const { session } = record;
      const running =
        this.#options.ptyManager.get(session.id) !== undefined && session.exitInfo === undefined;
      record.watch(running && open.some((connection) => connection.wants('pty.output', session.id)));
    }
  }

  /** Writes keystrokes to a session: what `pty.input` and a binary input frame do. */
  write(sessionId: string, bytes: Buffer): number {
    if (bytes.length > MAX_INPUT_BYTES) {
      throw new GatewayError(
        'frame_too_large',
        `pty.input data is ${bytes.length} bytes, over the ${MAX_INPUT_BYTES}-byte limit`,
      );
    }
    const session = this.#options.ptyManager.require(sessionId);
    const pending = session.pendingInputBytes;
    if (pending > 0 && pending + bytes.length > this.#options.inputQueueBytes) {
      throw new GatewayError(
        'busy',
        `session ${session.id} is not reading its input (${pending} bytes waiting); retry later`,
        { data: { pendingBytes: pending } },
      );
    }
    session.write(bytes);
    return bytes.length;
  }

  /** A connection went: the sessions it viewed hold their output for it, or run on without it. */
  left(connection: Connection): void {
    for (const record of this.#records.values()) record.pump.leave(connection);
  }

  /** After a connection went: flow control and watches without it. */
  checkFlow(): void {
    for (const record of this.#records.values()) record.pump.checkFlow();
    this.syncWatches(); // its sessions' idle TTL runs again from now, unless another viewer is there
  }

  /** Stops following the manager and ends every record (the sessions themselves are the manager's). */
  close(): void {
    this.#options.ptyManager.off('spawn', this.#attach);
    this.#options.ptyManager.off('forget', this.#forget);
    for (const record of this.#records.values()) record.end();
  }
}
