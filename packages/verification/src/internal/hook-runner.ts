// Runs a set of stop hooks for one stop attempt and folds their verdicts into a chain verdict,
// fail-open: a hook that errors is reported and ignored. Keeps the consecutive-block count per
// session so an endlessly blocking hook turns into a halt instead of an endless loop.
import type { StopHookHandler, StopHookVerdict } from '../stop-hooks.js';
import { CONTINUE, sessionKey, type TurnVerifyContext, type VerifierVerdict } from '../turn-verifier.js';

export const DEFAULT_MAX_CONSECUTIVE_BLOCKS = 8;

export type HookErrorListener = (error: Extract<StopHookVerdict, { kind: 'error' }>) => void;

export interface HookRunnerOptions {
  readonly maxConsecutiveBlocks?: number;
  readonly onHookError?: HookErrorListener;
}

export class HookRunner {
  readonly #blocks = new Map<string, number>();
  readonly #max: number;
  readonly #onHookError: HookErrorListener | undefined;

  constructor(options: HookRunnerOptions = {}) {
    this.#max = options.maxConsecutiveBlocks ?? DEFAULT_MAX_CONSECUTIVE_BLOCKS;
    this.#onHookError = options.onHookError;
  }

  async run(
    hooks: readonly StopHookHandler[],
    ctx: TurnVerifyContext,
    signal: AbortSignal,
  ): Promise<VerifierVerdict> {
    if (ctx.stopReason === undefined || hooks.length === 0) return CONTINUE;
    const key = sessionKey(ctx);
    const blockCount = this.#blocks.get(key) ?? 0;
    const hookCtx = {
      finalText: ctx.finalText,
      iterations: ctx.iterations,
      toolCallsMade: ctx.toolCallsMade,
      stopReason: ctx.stopReason,
      sessionId: ctx.sessionId,
      stopHookActive: blockCount > 0,
      blockCount,
    };
    const verdicts = await Promise.all(hooks.map((hook) => hook.evaluate(hookCtx, signal)));
    signal.throwIfAborted();

    const blocks: string[] = [];
    for (const [index, verdict] of verdicts.entries()) {
      const name = hooks[index]?.name ?? `hook ${index}`;
      switch (verdict.kind) {
        case 'allow':
          break;
        case 'halt':
          this.#blocks.delete(key);
          return { kind: 'halt', reason: `stop hook "${name}" halted: ${verdict.reason}` };
        case 'block':
          blocks.push(verdict.reason);
          break;
        case 'error':
          this.#onHookError?.(verdict); // fail-open: a broken hook must not wedge the loop
          break;
        default: {
          const unreachable: never = verdict;
          return unreachable;
        }
      }
    }
    if (blocks.length === 0) {
      this.#blocks.delete(key);
      return CONTINUE;
    }
    const count = blockCount + 1;
    this.#blocks.set(key, count);
    if (count >= this.#max) {
      this.#blocks.delete(key);
      return {
        kind: 'halt',
        reason: `stop hooks blocked ${count} consecutive stop attempts (cap ${this.#max}); halting instead of looping. Last reason: ${blocks.join('; ')}`,
      };
    }
    return {
      kind: 'veto',
      reason: `stop hook blocked the stop (${count} in a row)`,
      feedback: blocks.join('\n\n'),
    };
  }
}
