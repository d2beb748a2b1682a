// The one error class of @aleph/harness, for the boundary (a bad tool definition, a store failure).
// A run's expected ends are values (`TerminateReason`), not exceptions. This file imports nothing of
// the package: the types and the tool service build on it, never the other way round.

/** Why a run ended in error (`TerminateReason` `error`). */
export type HarnessErrorInfo =
  | { readonly kind: 'llm'; readonly message: string }
  | { readonly kind: 'tool'; readonly message: string }
  | { readonly kind: 'session'; readonly message: string }
  | { readonly kind: 'cancelled' }
  | { readonly kind: 'stalled_turn'; readonly elapsedMs: number };

/** `conflict`: a fenced session append found the log moved on (another writer). */
export type HarnessErrorCode = HarnessErrorInfo['kind'] | 'invalid_tool' | 'conflict';

export class HarnessError extends Error {
  override readonly name = 'HarnessError';
  readonly code: HarnessErrorCode;

  constructor(code: HarnessErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }
}

/**
 * A provider failure that retrying cannot fix (401/403, an unknown model, a bad URL): the run ends at
 * once as `error: llm` with this message. Recognised by `fatal === true`, so a provider need not
 * import this class.
 */
export class FatalProviderError extends Error {
  override readonly name = 'FatalProviderError';
  readonly fatal = true;
  readonly status?: number;

  constructor(message: string, options?: { status?: number; cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    if (options?.status !== undefined) this.status = options.status;
  }
}
