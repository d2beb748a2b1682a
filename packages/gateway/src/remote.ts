// Terminals of other nodes, for a gateway that is one node of several (cluster mode): a session
// method whose session this node does not have goes to `RemoteTerminals`, which forwards it to the
// node that has it and answers as that node would; a connection that follows such a session gets its
// output through the `RemoteViewer` view of itself, paced by its own backlog. Without `remote`,
// nothing here is used.
import type { MethodParams, MethodResult } from './protocol.js';

/** The session methods forwarded to the node that has the session. */
export type ForwardedMethod =
  'pty.input' | 'pty.resize' | 'pty.close' | 'pty.kill' | 'pty.snapshot' | 'pty.replay';

/** One connection, as the remote terminals see it: where a remote session's output goes. */
export interface RemoteViewer {
  /** The connection's id (unique on this node). */
  readonly id: string;
  readonly open: boolean;
  /** The connection wants `sessionId`'s output now (subscribed to it). */
  wants(sessionId: string): boolean;
  /** The connection names the sessions it wants (undefined: every session). */
  readonly sessions: ReadonlySet<string> | undefined;
  /** Sends output as this connection's `pty.output` (JSON or binary, as it asked), and counts it sent. */
  sendOutput(sessionId: string, offset: number, data: Buffer): void;
  /** How far behind the connection is on `sessionId` (unacknowledged bytes, bytes in its socket). */
  backlog(sessionId: string): number;
  /** The last offset of `sessionId` the client acknowledged, if any. */
  acked(sessionId: string): number | undefined;
}

export interface RemoteTerminals {
  /** The session is another node's (or was): its calls go through `call`. */
  has(sessionId: string): Promise<boolean>;
  /**
   * Runs a session method on the node that has the session and answers its result; rejects with
   * the `GatewayError` that node answered (`unknown_session` when no node has it).
   */
  call(
    method: ForwardedMethod,
    params: { readonly sessionId: string; readonly [key: string]: unknown },
  ): Promise<unknown>;
  /**
   * `pty.spawn` with `node`: forks on that node (this one included) and answers its result; rejects
   * with `invalid_params` when no live node has that name.
   */
  spawn?(node: string, params: MethodParams<'pty.spawn'>): Promise<MethodResult<'pty.spawn'>>;
  /** The sessions of every other live node, for `pty.list`. */
  list(): Promise<MethodResult<'pty.list'>>;
  /**
   * The viewer follows a remote session from `fromOffset`: answers as `pty.follow` does, then
   * sends its output to the viewer from that offset on, as its backlog allows.
   */
  follow(viewer: RemoteViewer, sessionId: string, fromOffset: number): Promise<MethodResult<'pty.follow'>>;
  /** The viewer acknowledged a remote session's output up to `offset`. */
  ack(viewer: RemoteViewer, sessionId: string, offset: number): void;
  /** The viewer's subscriptions changed (or it went): start or stop its feeds of remote sessions. */
  sync(viewer: RemoteViewer): void;
}
