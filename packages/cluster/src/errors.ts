// The one error type of @aleph/cluster: a literal-union `code` a caller can switch over, and the
// NATS error it came from as `cause`.

export type ClusterErrorCode =
  /** No server in `servers` answered (the message names them). */
  | 'unreachable'
  /** The servers refused the credentials. */
  | 'auth'
  /** A node with this name is alive in the cluster. */
  | 'duplicate_node'
  /** A stream, consumer or bucket exists with a configuration this version cannot use; its data is kept. */
  | 'incompatible'
  /** An append or a lease renewal lost to another node (it holds the run now). */
  | 'fenced'
  /** The connection was closed. */
  | 'closed'
  | 'invalid_options';

export class ClusterError extends Error {
  override readonly name = 'ClusterError';
  readonly code: ClusterErrorCode;

  constructor(code: ClusterErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
