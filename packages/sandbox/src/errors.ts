// The one error class of @aleph/sandbox. A sandbox that cannot be built as asked is an exception
// with a stable code and a one-line message naming the key or the cause: never a quiet run
// without confinement.

export type SandboxErrorCode =
  /** `required` mode and no backend on this platform (bwrap not installed, no sandbox-exec). */
  | 'backend_missing'
  /** The backend is installed but fails to start a sandbox (e.g. no user namespaces). */
  | 'backend_failed'
  /** A policy path that does not exist. */
  | 'path_missing'
  /** A policy path that is not an absolute path on this filesystem, or is the root itself. */
  | 'path_invalid'
  /** The command's cwd is a denied path or lies under one. */
  | 'cwd_denied'
  /** The command's cwd does not exist or is not a directory. */
  | 'cwd_missing'
  /** A denied or read-only file with more than one hard link: another name would expose it. */
  | 'path_linked'
  /** A resource limit that is not a positive integer. */
  | 'limit_invalid'
  /** The cwd (or the home, the cwd at or above it) holds too many entries to check what in it runs later. */
  | 'cwd_crowded';

export class SandboxError extends Error {
  override readonly name = 'SandboxError';
  readonly code: SandboxErrorCode;

  constructor(code: SandboxErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
