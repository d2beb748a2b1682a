// The one error class of @aleph/verification, for bugs and for the boundary (bad configuration).
// Expected outcomes (a hook that blocks or fails) are verdict values, never exceptions.

export type VerificationErrorCode = 'invalid_config' | 'invalid_hooks_file';

export class VerificationError extends Error {
  override readonly name = 'VerificationError';
  readonly code: VerificationErrorCode;

  constructor(code: VerificationErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
