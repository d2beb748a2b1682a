// The pty.* and events.* methods, on top of a PtyManager and the gateway's session registry: entries
// of the gateway's method table, each a handler of its zod-validated params.
import type { PtyManager, PtySession } from '@aleph/pty';
import type { ZodType } from 'zod';
import { GatewayError } from './errors.js';
import { BINARY_VERSION } from './internal/binary-frames.js';
import type { Connection } from './internal/connection.js';
import { remoteViewer } from './internal/remote-viewer.js';
import type { MethodTable } from './internal/rpc.js';
import type { SessionRegistry } from './internal/session-registry.js';
import {
  MAX_INPUT_BYTES,
  MAX_REPLAY_BYTES,
  methods,
  type MethodParams,
  type MethodResult,
} from './protocol.js';
import type { ForwardedMethod, RemoteTerminals } from './remote.js';

type Params<M extends ForwardedMethod> = ReturnType<(typeof methods)[M]['params']['parse']>;
export type SessionMethods = { [M in ForwardedMethod]: (params: Params<M>) => unknown };

/** The session methods a node runs for its own sessions, for its clients or for another node's. */
export function sessionMethods(ptyManager: PtyManager, registry: SessionRegistry): SessionMethods {
  return {
    'pty.input': (params) => {
      // Cheap bound before decoding: base64 of MAX_INPUT_BYTES is at most this long.
      if (params.data.length > Math.ceil(MAX_INPUT_BYTES / 3) * 4) {
        throw new GatewayError('frame_too_large', `pty.input data exceeds ${MAX_INPUT_BYTES} bytes`);
      }
      return { bytes: registry.write(params.sessionId, Buffer.from(params.data, 'base64')) };
    },
    'pty.resize': (params) => {
      ptyManager.require(params.sessionId).resize(params.cols, params.rows);
      return {};
    },
    'pty.close': (params) => ptyManager.close(params.sessionId),
    'pty.kill': (params) => ptyManager.close(params.sessionId),
    'pty.snapshot': async (params) => {
      const session = ptyManager.require(params.sessionId);
      const record = registry.get(session.id);
      if (record === undefined) throw new GatewayError('unknown_session', `unknown session ${session.id}`);
      return record.snapshot();
    },
    'pty.replay': (params) => {
      const { offset, data } = ptyManager.require(params.sessionId).replay(params.fromOffset);
      const length = Math.min(data.length, params.maxBytes ?? MAX_REPLAY_BYTES, MAX_REPLAY_BYTES);
      if (length === data.length) registry.get(params.sessionId)?.pump.release(); // replayed to the present
      return { offset, data: data.toString('base64', 0, length), end: offset + data.length };
    },
  };
}

/** What pty.list shows as a session's command (undefined: its program and arguments). */
export type CommandOf = (session: PtySession) => string | undefined;

/** pty.list's params: which sessions, and which page of them. */
export type ListQuery = NonNullable<MethodParams<'pty.list'>>;
type Listed = MethodResult<'pty.list'>[number];

/** A session's command as listed: worked out once per session (it never changes). */
const commands = new WeakMap<PtySession, string>();
function listedCommand(session: PtySession, commandOf: CommandOf | undefined): string {
  let command = commands.get(session);
  if (command === undefined) {
    command = commandOf?.(session) ?? [session.command, ...session.args].join(' ');
    commands.set(session, command);
  }
  return command;
}

/** The page `query` asks for: in id order after `cursor`, at most `limit`; all of them without either. */
export function pageOf<T>(items: T[], query: ListQuery, idOf: (item: T) => string): T[] {
  const { limit, cursor } = query;
  if (limit === undefined && cursor === undefined) return items;
  const after = cursor === undefined ? items : items.filter((item) => idOf(item) > cursor);
  after.sort((a, b) => (idOf(a) < idOf(b) ? -1 : 1));
  return limit === undefined || after.length <= limit ? after : after.slice(0, limit);
}

/** Whether a listed session is in the state `query` asks for. */
export const inState = (query: ListQuery, listed: Pick<Listed, 'exit'>): boolean =>
  query.state === undefined || (query.state === 'running') === (listed.exit === null);

/** This node's own sessions, as `pty.list` lists them: only those asked for are looked at. */
export function localList(
  ptyManager: PtyManager,
  commandOf: CommandOf | undefined,
  query: ListQuery = {},
): MethodResult<'pty.list'> {
  const { state } = query;
  let sessions = [...ptyManager.list(), ...ptyManager.listEnded()];
  if (state !== undefined)
    sessions = sessions.filter((session) => (state === 'running') === (session.exitInfo === undefined));
  return pageOf(sessions, query, (session) => session.id).map((session) => ({
    sessionId: session.id,
    pid: session.pid,
    command: listedCommand(session, commandOf),
    cols: session.cols,
    rows: session.rows,
    createdAt: session.createdAt,
    lastActivityAt: session.lastActivityAt,
    outputOffset: session.scrollback.end,
    exit: session.exitInfo ?? null,
    idleExpiresAt: ptyManager.idleExpiresAt(session.id),
  }));
}

/** The methods that work on one session's terminal. */
function registerTerminalMethods(
  table: MethodTable,
  ptyManager: PtyManager,
  registry: SessionRegistry,
  { commandOf, remote }: TableOptions,
): void {
  // start: the event loop never waits for the program to start.
  table.register('pty.spawn', methods['pty.spawn'].params, (params): Promise<MethodResult<'pty.spawn'>> => {
    const { node, ...spawn } = params;
    if (node !== undefined) {
      if (remote?.spawn === undefined)
        throw new GatewayError(
          'invalid_params',
          `params.node: this server is not a node of a cluster (no node ${JSON.stringify(node)}); spawn without "node"`,
        );
      return remote.spawn(node, spawn);
    }
    return ptyManager.start(spawn).then((session) => ({ sessionId: session.id, pid: session.pid }));
  });

  const local = sessionMethods(ptyManager, registry);
  // A session this node does not have is another node's (or none's): the call goes there.
  const route = <M extends ForwardedMethod>(method: M): void =>
    table.register(method, methods[method].params as unknown as ZodType<Params<M>>, (params) => {
      if (remote === undefined || ptyManager.get(params.sessionId) !== undefined)
        return (local[method] as (params: Params<M>) => unknown)(params);
      const data = (params as { data?: string }).data;
      if (data !== undefined && data.length > Math.ceil(MAX_INPUT_BYTES / 3) * 4)
        throw new GatewayError('frame_too_large', `pty.input data exceeds ${MAX_INPUT_BYTES} bytes`);
      return remote.call(method, params);
    });
  route('pty.input');
  route('pty.resize');
  route('pty.close');
  route('pty.kill');
  route('pty.snapshot');
  route('pty.replay');

  table.register('pty.list', methods['pty.list'].params, (params = {}) =>
    remote === undefined
      ? localList(ptyManager, commandOf, params)
      : remote
          .list()
          .then((others) =>
            pageOf(
              [
                ...localList(ptyManager, commandOf, params),
                ...others.filter((other) => inState(params, other)),
              ],
              params,
              (listed) => listed.sessionId,
            ),
          ),
  );
}

/** Distinct topics one connection may hold: each event is matched against them. */
const MAX_TOPICS = 256;

/** The methods that shape what one connection is sent: acks, follow, binary frames, subscriptions. */
function registerStreamMethods(
  table: MethodTable,
  ptyManager: PtyManager,
  registry: SessionRegistry,
  remote: RemoteTerminals | undefined,
): void {
  table.register(
    'pty.binary',
    methods['pty.binary'].params,
    (_params, context): MethodResult<'pty.binary'> => {
      context.connection.binary = true;
      return { version: BINARY_VERSION };
    },
  );

  // Acks of another node's session count here (this connection's backlog) and there (its pty's pace).
  const remoteAck = async (connection: Connection, sessionId: string, offset: number): Promise<object> => {
    if (remote === undefined || (!connection.sent.has(sessionId) && !(await remote.has(sessionId))))
      throw new GatewayError('unknown_session', `unknown session ${sessionId}`);
    const upTo = Math.min(offset, connection.sent.get(sessionId) ?? offset);
    connection.acked.set(sessionId, Math.max(connection.acked.get(sessionId) ?? 0, upTo));
    remote.ack(remoteViewer(connection), sessionId, upTo);
    return {};
  };
  table.register('pty.ack', methods['pty.ack'].params, (params, context) => {
    if (remote !== undefined && ptyManager.get(params.sessionId) === undefined)
      return remoteAck(context.connection, params.sessionId, params.offset);
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
    (params, context): MethodResult<'pty.follow'> | Promise<MethodResult<'pty.follow'>> => {
      if (remote !== undefined && ptyManager.get(params.sessionId) === undefined) {
        if (!context.connection.wants('pty.output', params.sessionId))
          throw new GatewayError(
            'invalid_request',
            `subscribe to pty.output of session ${params.sessionId} first`,
          );
        const { connection } = context;
        return remote.follow(remoteViewer(connection), params.sessionId, params.fromOffset).then((answer) => {
          // As a local follow: the new stream starts at `offset`; older acks say nothing beyond it.
          connection.sent.set(params.sessionId, answer.offset);
          connection.startedAt.set(params.sessionId, answer.offset);
          const acked = connection.acked.get(params.sessionId);
          if (acked !== undefined && acked > answer.offset)
            connection.acked.set(params.sessionId, answer.offset);
          return answer;
        });
      }
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
    const { topics } = context.connection;
    const more = new Set(params.topics.filter((topic) => !topics.has(topic))).size;
    if (topics.size + more > MAX_TOPICS)
      throw new GatewayError(
        'invalid_params',
        `params.topics: a connection has at most ${MAX_TOPICS} topics (it has ${topics.size}; ${more} more asked): unsubscribe some first, or use a pattern (pty.*)`,
      );
    for (const topic of params.topics) topics.add(topic);
    if (params.sessions !== undefined) context.connection.sessions = new Set(params.sessions);
    registry.syncWatches();
    remote?.sync(remoteViewer(context.connection));
    return { topics: [...context.connection.topics] };
  });

  table.register('events.unsubscribe', methods['events.unsubscribe'].params, (params, context) => {
    for (const topic of params.topics) context.connection.topics.delete(topic);
    registry.syncWatches();
    remote?.sync(remoteViewer(context.connection));
    return { topics: [...context.connection.topics] };
  });
}

/** Adds the pty.* and events.* methods to the table. */
export function registerPtyMethods(
  table: MethodTable,
  ptyManager: PtyManager,
  registry: SessionRegistry,
  options: TableOptions = {},
): void {
  registerTerminalMethods(table, ptyManager, registry, options);
  registerStreamMethods(table, ptyManager, registry, options.remote);
}

interface TableOptions {
  readonly commandOf?: CommandOf | undefined;
  /** Other nodes' terminals (cluster mode). */
  readonly remote?: RemoteTerminals | undefined;
}
