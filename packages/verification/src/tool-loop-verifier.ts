// The death-loop watchdog: the same tool with the same arguments, again and again. Stateless —
// everything is derived from the context's trailing run of identical calls.
import {
  CONTINUE,
  type TurnVerifier,
  type TurnVerifyContext,
  type VerifierVerdict,
} from './turn-verifier.js';

export const DEFAULT_REPEAT_THRESHOLD = 5;
export const DEFAULT_HALT_THRESHOLD = 8;

export interface ToolLoopVerifierOptions {
  readonly repeatThreshold?: number;
  readonly haltThreshold?: number;
}

export class ToolLoopVerifier implements TurnVerifier {
  readonly name = 'tool_loop';
  readonly #repeat: number;
  readonly #halt: number;

  constructor(options: ToolLoopVerifierOptions = {}) {
    this.#repeat = options.repeatThreshold ?? DEFAULT_REPEAT_THRESHOLD;
    this.#halt = options.haltThreshold ?? DEFAULT_HALT_THRESHOLD;
  }

  verify(ctx: TurnVerifyContext): Promise<VerifierVerdict> {
    return Promise.resolve(this.#judge(ctx));
  }

  #judge(ctx: TurnVerifyContext): VerifierVerdict {
    const calls = ctx.recentToolCalls;
    const last = calls.at(-1);
    if (last === undefined) return CONTINUE;
    let run = 0;
    for (let index = calls.length - 1; index >= 0; index -= 1) {
      const call = calls[index];
      if (call?.name !== last.name || call.argsHash !== last.argsHash) break;
      run += 1;
    }
    const repeat = ctx.robustnessProfile?.toolLoopRepeatThreshold ?? this.#repeat;
    const halt = ctx.robustnessProfile?.toolLoopHaltThreshold ?? this.#halt;
    if (run >= halt) {
      return {
        kind: 'halt',
        reason: `tool loop: ${last.name} was called ${run} times in a row with identical arguments (halt threshold ${halt})`,
      };
    }
    // One veto per streak: only on the turn whose calls carried the run across the threshold.
    const newCalls = Math.max(1, ctx.callsThisTurn ?? 1);
    if (run >= repeat && run - newCalls < repeat) {
      return {
        kind: 'veto',
        reason: `tool loop: ${last.name} repeated ${run} times`,
        feedback:
          `You have called ${last.name} ${run} times in a row with identical arguments and got the same ` +
          `result. Repeating it will not change the outcome: change the arguments, try a different ` +
          `approach, or stop and report what is blocking you.`,
      };
    }
    return CONTINUE;
  }
}
