// An ordered list of verifiers plus a kill-switch. The first non-`continue` verdict wins; a verifier
// that throws is recorded and treated as `continue`, so a buggy verifier can never break the loop.
// It tells every verifier whether the session's previous stop attempt was blocked by a Stop hook
// (Claude Code's `stop_hook_active`); a veto of Aleph's own (an evidence nudge, a to-do reminder) does not count.
import {
  CONTINUE,
  sessionKey,
  type TurnVerifier,
  type TurnVerifyContext,
  type VerifierVerdict,
} from './turn-verifier.js';

export type VerifierErrorListener = (verifier: string, error: unknown) => void;

export class VerifierChainBuilder {
  readonly #verifiers: TurnVerifier[] = [];
  #onError: VerifierErrorListener | undefined;

  with(verifier: TurnVerifier | null | undefined): this {
    if (verifier) this.#verifiers.push(verifier);
    return this;
  }

  onError(listener: VerifierErrorListener): this {
    this.#onError = listener;
    return this;
  }

  build(): VerifierChain {
    return new VerifierChain(this.#verifiers, this.#onError);
  }
}

export class VerifierChain {
  readonly #verifiers: readonly TurnVerifier[];
  readonly #onError: VerifierErrorListener | undefined;
  /** Sessions whose last stop attempt was vetoed by a Stop hook. */
  readonly #stopVetoed = new Set<string>();
  #enabled = true;

  static builder(): VerifierChainBuilder {
    return new VerifierChainBuilder();
  }

  constructor(verifiers: readonly TurnVerifier[], onError?: VerifierErrorListener) {
    this.#verifiers = [...verifiers];
    this.#onError = onError;
  }

  get enabled(): boolean {
    return this.#enabled;
  }

  get names(): string[] {
    return this.#verifiers.map((verifier) => verifier.name);
  }

  setEnabled(on: boolean): void {
    this.#enabled = on;
  }

  /** Rejects with `signal.reason` when aborted; running hooks see the same signal and are killed. */
  async run(ctx: TurnVerifyContext, signal: AbortSignal): Promise<VerifierVerdict> {
    if (!this.#enabled) return CONTINUE;
    if (ctx.stopReason === undefined) return this.#run(ctx, signal);
    const key = sessionKey(ctx);
    const verdict = await this.#run({ ...ctx, previousStopBlocked: this.#stopVetoed.has(key) }, signal);
    const byHook =
      verdict.kind === 'veto' &&
      this.#verifiers.some((verifier) => verifier.stopHook === true && verifier.name === verdict.source);
    if (byHook) this.#stopVetoed.add(key);
    else this.#stopVetoed.delete(key);
    return verdict;
  }

  async #run(ctx: TurnVerifyContext, signal: AbortSignal): Promise<VerifierVerdict> {
    for (const verifier of this.#verifiers) {
      signal.throwIfAborted();
      let verdict: VerifierVerdict;
      try {
        verdict = await verifier.verify(ctx, signal);
      } catch (error) {
        signal.throwIfAborted();
        this.#onError?.(verifier.name, error);
        continue;
      }
      signal.throwIfAborted();
      if (verdict.kind !== 'continue') return { ...verdict, source: verdict.source ?? verifier.name };
    }
    return CONTINUE;
  }
}
