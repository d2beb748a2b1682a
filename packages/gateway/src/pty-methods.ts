// The pty.* and events.* methods, on top of a PtyManager.
import type { PtyManager } from '@aleph/pty';
import { GatewayError } from './errors.js';
import { BINARY_VERSION } from './internal/binary-frames.js';
import type { Gateway } from './gateway.js';
import type { ModeTracker } from './internal/modes.js';
import type { OutputPump } from './internal/output-pump.js';
import type { SessionScreen } from './internal/screen.js';
import type { SizeLog } from './internal/size-log.js';
import {
  MAX_INPUT_BYTES,
  MAX_REPLAY_BYTES,
  MAX_SNAPSHOT_CELLS,
  methods,
  type MethodResult,
} from './protocol.js';

export interface PtyMethodsOptions {
  readonly ptyManager: PtyManager;
  readonly inputQueueBytes: number;
  readonly pumpFor: (sessionId: string) => OutputPump | undefined;
  readonly modesFor: (sessionId: string) => ModeTracker | undefined;
  readonly sizesFor: (sessionId: string) => SizeLog | undefined;
  /** After events.subscribe/unsubscribe: which sessions are watched may have changed. */
  readonly subscriptionsChanged: () => void;
}

/**
 * Registers the methods; returns what drops a session's server-side screen (all, without an id),
 * and what writes a binary input frame's keystrokes.
 */
export function registerPtyMethods(
  gateway: Gateway,
  options: PtyMethodsOptions,
): { dropScreens: (sessionId?: string) => void; writeInput: (sessionId: string, bytes: Buffer) => number } {
  const { ptyManager } = options;
  const screens = new Map<string, SessionScreen>();

  gateway.register('pty.spawn', methods['pty.spawn'].params, (params): MethodResult<'pty.spawn'> => {
    const session = ptyManager.spawn(params);
    return { sessionId: session.id, pid: session.pid };
  });

  /** Writes keystrokes to a session: what `pty.input` and a binary input frame do. */
  const writeInput = (sessionId: string, bytes: Buffer): number => {
    if (bytes.length > MAX_INPUT_BYTES) {
      throw new GatewayError(
        'frame_too_large',
        `pty.input data is ${bytes.length} bytes, over the ${MAX_INPUT_BYTES}-byte limit`,
      );
    }
    const session = ptyManager.require(sessionId);
    const pending = session.pendingInputBytes;
    if (pending > 0 && pending + bytes.length > options.inputQueueBytes) {
      throw new GatewayError(
        'busy',
        `session ${session.id} is not reading its input (${pending} bytes waiting); retry later`,
        {
          data: { pendingBytes: pending },
        },
      );
    }
    session.write(bytes);
    return bytes.length;
  };

  gateway.register('pty.input', methods['pty.input'].params, (params): MethodResult<'pty.input'> => {
    // Cheap bound before decoding: base64 of MAX_INPUT_BYTES is at most this long.
    if (params.data.length > Math.ceil(MAX_INPUT_BYTES / 3) * 4) {
      throw new GatewayError('frame_too_large', `pty.input data exceeds ${MAX_INPUT_BYTES} bytes`);
    }
    return { bytes: writeInput(params.sessionId, Buffer.from(params.data, 'base64')) };
  });

  gateway.register(
    'pty.binary',
    methods['pty.binary'].params,
    (_params, context): MethodResult<'pty.binary'> => {
      context.connection.binary = true;
      return { version: BINARY_VERSION };
    },
  );

  gateway.register('pty.resize', methods['pty.resize'].params, (params): MethodResult<'pty.resize'> => {
    ptyManager.require(params.sessionId).resize(params.cols, params.rows);
    return {};
  });

  gateway.register('pty.close', methods['pty.close'].params, (params) => ptyManager.close(params.sessionId));

  gateway.register('pty.list', methods['pty.list'].params, (): MethodResult<'pty.list'> =>
    [...ptyManager.list(), ...ptyManager.listEnded()].map((session) => ({
      sessionId: session.id,
      pid: session.pid,
      command: [session.command, ...session.args].join(' '),
      cols: session.cols,
      rows: session.rows,
      createdAt: session.createdAt,
      lastActivityAt: session.lastActivityAt,
      outputOffset: session.scrollback.end,
      exit: session.exitInfo ?? null,
    })),
  );

  gateway.register('pty.replay', methods['pty.replay'].params, (params): MethodResult<'pty.replay'> => {
    const { offset, data } = ptyManager.require(params.sessionId).replay(params.fromOffset);
    const length = Math.min(data.length, params.maxBytes ?? MAX_REPLAY_BYTES, MAX_REPLAY_BYTES);
    if (length === data.length) options.pumpFor(params.sessionId)?.release(); // replayed to the present
    return { offset, data: data.toString('base64', 0, length), end: offset + data.length };
  });

  gateway.register('pty.snapshot', methods['pty.snapshot'].params, async (params) => {
    const session = ptyManager.require(params.sessionId);
    for (let attempt = 0; ; attempt += 1) {
      // xterm.js is loaded with the first snapshot: a gateway that serves none does not carry it.
      const { SessionScreen, screenFits } = await import('./internal/screen.js');
      const { cols, rows } = session;
      if (!screenFits(cols, rows)) {
        throw new GatewayError(
          'screen_too_large',
          `session ${session.id} is ${cols}×${rows}: a snapshot covers at most ${MAX_SNAPSHOT_CELLS} cells (cols × rows); resize it smaller, or replay its output`,
          { data: { cols, rows, maxCells: MAX_SNAPSHOT_CELLS } },
        );
      }
      let screen = screens.get(session.id);
      if (screen === undefined) {
        const modes = options.modesFor(session.id);
        const created: SessionScreen = new SessionScreen(session, {
          origin: modes?.origin(session.scrollback.start),
          sizes: options.sizesFor(session.id),
          modes: modes && (() => modes.state),
          onDrop: () => {
            if (screens.get(session.id) === created) screens.delete(session.id);
          },
        });
        screens.set(session.id, (screen = created));
      }
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
  });

  gateway.register('pty.ack', methods['pty.ack'].params, (params, context): MethodResult<'pty.ack'> => {
    ptyManager.require(params.sessionId);
    const { acked, sent } = context.connection;
    const previous = acked.get(params.sessionId) ?? 0;
    // An ack never counts past what this connection's current stream was sent: a stale ack of
    // frames from before a pty.follow must not move the detach hold past what the client has.
    const offset = Math.min(params.offset, sent.get(params.sessionId) ?? params.offset);
    acked.set(params.sessionId, Math.max(previous, offset));
    const pump = options.pumpFor(params.sessionId);
    pump?.release();
    pump?.checkFlow();
    return {};
  });

  gateway.register(
    'pty.follow',
    methods['pty.follow'].params,
    (params, context): MethodResult<'pty.follow'> => {
      const session = ptyManager.require(params.sessionId);
      if (!context.connection.wants('pty.output', session.id)) {
        throw new GatewayError('invalid_request', `subscribe to pty.output of session ${session.id} first`);
      }
      const pump = options.pumpFor(session.id);
      const offset = pump?.followFrom(context.connection, params.fromOffset) ?? session.scrollback.end;
      return { offset, end: session.scrollback.end, exit: session.exitInfo ?? null };
    },
  );

  gateway.register('events.subscribe', methods['events.subscribe'].params, (params, context) => {
    for (const topic of params.topics) context.connection.topics.add(topic);
    if (params.sessions !== undefined) context.connection.sessions = new Set(params.sessions);
    options.subscriptionsChanged();
    return { topics: [...context.connection.topics] };
  });

  gateway.register('events.unsubscribe', methods['events.unsubscribe'].params, (params, context) => {
    for (const topic of params.topics) context.connection.topics.delete(topic);
    options.subscriptionsChanged();
    return { topics: [...context.connection.topics] };
  });

  const dropScreens = (sessionId?: string): void => {
    for (const [id, screen] of screens) if (sessionId === undefined || id === sessionId) screen.dispose();
  };
  return { dropScreens, writeInput };
}
