// The one error class of @aleph/pty. `code` is stable: the gateway maps it onto JSON-RPC errors.

export type PtyErrorCode =
  'session_limit' | 'unknown_session' | 'spawn_failed' | 'session_closed' | 'invalid_size';

export class PtyError extends Error {
  override readonly name = 'PtyError';
  readonly code: PtyErrorCode;

  constructor(code: PtyErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
