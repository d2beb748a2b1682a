// The one error class of @aleph/harness, for the boundary (a bad tool definition, a store failure).
// A run's expected ends are values (`TerminateReason`), not exceptions.
import type { HarnessErrorInfo } from './types.js';

export type HarnessErrorCode = HarnessErrorInfo['kind'] | 'invalid_tool';

export class HarnessError extends Error {
  override readonly name = 'HarnessError';
  readonly code: HarnessErrorCode;

  constructor(code: HarnessErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}
