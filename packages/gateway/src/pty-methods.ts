// The pty.* and events.* methods, on top of a PtyManager and the gateway's session registry: entries
// of the gateway's method table, each a handler of its zod-validated params.
import type { PtyManager, PtySession } from '@aleph/pty';
import { GatewayError } from './errors.js';
import { BINARY_VERSION } from './internal/binary-frames.js';
import type { MethodTable } from './internal/rpc.js';
import type { SessionRegistry } from './internal/session-registry.js';
import { MAX_INPUT_BYTES, MAX_REPLAY_BYTES, methods, type MethodResult } from './protocol.js';

/** The methods that work on one session's terminal. */
function registerTerminalMethods(
  table: MethodTable,
  ptyManager: PtyManager,
  registry: SessionRegistry,
  commandOf: CommandOf | undefined,
): void {
  // start: the event loop never waits for the program to start.
  table.register('pty.spawn', methods['pty.spawn'].params, (params): Promise<MethodResult<'pty.spawn'>> =>
    ptyManager.start(params).then((session) => ({ sessionId: session.id, pid: session.pid })),
  );

  table.register('pty.input', methods['pty.input'].params, (params): MethodResult<'pty.input'> => {
    // Cheap bound before decoding: base64 of MAX_INPUT_BYTES is at most this long.
    if (params.data.length > Math.ceil(MAX_INPUT_BYTES / 3) * 4) {
      throw new GatewayError('frame_too_large', `pty.input data exceeds ${MAX_INPUT_BYTES} bytes`);
    }
    return { bytes: registry.write(params.sessionId, Buffer.from(params.data, 'base64')) };
  });

  table.register('pty.resize', methods['pty.resize'].params, (params): MethodResult<'pty.resize'> => {
    ptyManager.require(params.sessionId).resize(params.cols, params.rows);
    return {};
  });

  table.register('pty.close', methods['pty.close'].params, (params) => ptyManager.close(params.sessionId));

  table.register('pty.list', methods['pty.list'].params, (): MethodResult<'pty.list'> =>
    [...ptyManager.list(), ...ptyManager.listEnded()].map((session) => ({
      sessionId: session.id,
      pid: session.pid,
      command: commandOf?.(session) ?? [session.command, ...session.args].join(' '),
      cols: session.cols,
      rows: session.rows,
      createdAt: session.createdAt,
      lastActivityAt: session.lastActivityAt,
      outputOffset: session.scrollback.end,
      exit: session.exitInfo ?? null,
      idleExpiresAt: ptyManager.idleExpiresAt(session.id),
    })),
  );

  table.register('pty.snapshot', methods['pty.snapshot'].params, async (params) => {
    const session = ptyManager.require(params.sessionId);
    const record = registry.get(session.id);
    if (record === undefined) throw new GatewayError('unknown_session', `unknown session ${session.id}`);
    return record.snapshot();
  });
}

/** The methods that shape what one connection is sent: replay, acks, follow, binary frames. */
function registerStreamMethods(table: MethodTable, ptyManager: PtyManager, registry: SessionRegistry): void {
  table.register(
    'pty.binary',
    methods['pty.binary'].params,
    (_params, context): MethodResult<'pty.binary'> => {
      context.connection.binary = true;
      return { version: BINARY_VERSION };
    },
  );

  table.register('pty.replay', methods['pty.replay'].params, (params): MethodResult<'pty.replay'> => {
    const { offset, data } = ptyManager.require(params.sessionId).replay(params.fromOffset);
    const length = Math.min(data.length, params.maxBytes ?? MAX_REPLAY_BYTES, MAX_REPLAY_BYTES);
    if (length === data.length) registry.get(params.sessionId)?.pump.release(); // replayed to the present
    return { offset, data: data.toString('base64', 0, length), end: offset + data.length };
  });

  table.register('pty.ack', methods['pty.ack'].params, (params, context): MethodResult<'pty.ack'> => {
    ptyManager.require(params.sessionId);
    const { acked, sent } = context.connection;
    const previous = acked.get(params.sessionId) ?? 0;
    // An ack never counts past what this connection's current stream was sent: a stale ack of
    // frames from before a pty.follow must not move the detach hold past what the client has.
    const offset = Math.min(params.offset, sent.get(params.sessionId) ?? params.offset);
    acked.set(params.sessionId, Math.max(previous, offset));
    const pump = registry.get(params.sessionId)?.pump;
    pump?.release();
    pump?.checkFlow();
    return {};
  });

  table.register(
    'pty.follow',
    methods['pty.follow'].params,
    (params, context): MethodResult<'pty.follow'> => {
      const session = ptyManager.require(params.sessionId);
      if (!context.connection.wants('pty.output', session.id)) {
        throw new GatewayError('invalid_request', `subscribe to pty.output of session ${session.id} first`);
      }
      const pump = registry.get(session.id)?.pump;
      const offset = pump?.followFrom(context.connection, params.fromOffset) ?? session.scrollback.end;
      return { offset, end: session.scrollback.end, exit: session.exitInfo ?? null };
    },
  );

  table.register('events.subscribe', methods['events.subscribe'].params, (params, context) => {
    for (const topic of params.topics) context.connection.topics.add(topic);
    if (params.sessions !== undefined) context.connection.sessions = new Set(params.sessions);
    registry.syncWatches();
    return { topics: [...context.connection.topics] };
  });

  table.register('events.unsubscribe', methods['events.unsubscribe'].params, (params, context) => {
    for (const topic of params.topics) context.connection.topics.delete(topic);
    registry.syncWatches();
    return { topics: [...context.connection.topics] };
  });
}

/** What pty.list shows as a session's command (undefined: its program and arguments). */
export type CommandOf = (session: PtySession) => string | undefined;

/** Adds the pty.* and events.* methods to the table. */
export function registerPtyMethods(
  table: MethodTable,
  ptyManager: PtyManager,
  registry: SessionRegistry,
  commandOf?: CommandOf,
): void {
  registerTerminalMethods(table, ptyManager, registry, commandOf);
  registerStreamMethods(table, ptyManager, registry);
}
