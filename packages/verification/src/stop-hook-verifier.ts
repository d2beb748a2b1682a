// The chain's adapter for the user's `[[stop_hooks]]`: runs them when the model asks to stop.
// Fail-open: a hook that errors is recorded and the stop proceeds.
import { HookRunner, type HookRunnerOptions } from './internal/hook-runner.js';
import type { StopHookHandler } from './stop-hooks.js';
import type { TurnVerifier, TurnVerifyContext, VerifierVerdict } from './turn-verifier.js';

export class StopHookVerifier implements TurnVerifier {
  readonly name = 'stop_hooks';
  readonly stopHook = true;
  readonly hooks: readonly StopHookHandler[];
  readonly #runner: HookRunner;

  constructor(hooks: readonly StopHookHandler[], options: HookRunnerOptions = {}) {
    this.hooks = [...hooks];
    this.#runner = new HookRunner(options);
  }

  verify(ctx: TurnVerifyContext, signal: AbortSignal): Promise<VerifierVerdict> {
    return this.#runner.run(this.hooks, ctx, signal);
  }
}
