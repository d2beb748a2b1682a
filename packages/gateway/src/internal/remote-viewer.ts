// A connection as the remote terminals see it (remote.ts): its output of another node's session is
// framed and counted exactly as a local session's, so acks, backlog and `pty.follow` mean the same.
import type { RemoteViewer } from '../remote.js';
import { binaryOutputFramer } from './binary-frames.js';
import type { Connection } from './connection.js';
import { outputFramer } from './frames.js';

const views = new WeakMap<Connection, RemoteViewer>();

export function remoteViewer(connection: Connection): RemoteViewer {
  let view = views.get(connection);
  if (view !== undefined) return view;
  const framers = new Map<
    string,
    { text: ReturnType<typeof outputFramer>; binary: ReturnType<typeof outputFramer> }
  >();
  view = {
    id: connection.id,
    get open() {
      return connection.open;
    },
    get sessions() {
      return connection.sessions;
    },
    wants: (sessionId) => connection.wants('pty.output', sessionId),
    sendOutput(sessionId, offset, data) {
      let framer = framers.get(sessionId);
      if (framer === undefined) {
        framer = { text: outputFramer(sessionId), binary: binaryOutputFramer(sessionId) };
        framers.set(sessionId, framer);
      }
      if (!connection.startedAt.has(sessionId)) connection.startedAt.set(sessionId, offset);
      if (connection.binary) connection.send(framer.binary(offset, data), true);
      else connection.send(framer.text(offset, data));
      connection.sent.set(sessionId, offset + data.length);
    },
    backlog: (sessionId) => connection.backlog(sessionId),
    acked: (sessionId) => connection.acked.get(sessionId),
  };
  views.set(connection, view);
  return view;
}
