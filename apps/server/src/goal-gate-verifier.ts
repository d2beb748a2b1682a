// The goal gate in the chain: when the model asks to stop, the global gate command and the goal's
// own gate must pass. Fail-closed (gateVeto): a gate that errors — or a command with shell
// metacharacters — cannot certify completion. `wrap` confines the model-set command, not the global gate.
import {
  effectiveGate,
  type EffectiveGateOptions,
  gateVeto,
  type GateState,
  type TurnVerifier,
  type TurnVerifyContext,
  type VerifierVerdict,
} from '@aleph/verification';
import type { Goal } from './tools.js';

export class GoalGateVerifier implements TurnVerifier {
  readonly name = 'goal_gate';
  readonly #states = new Map<string, GateState>();

  constructor(
    private readonly options: EffectiveGateOptions & {
      globalGate: string | undefined;
      goals: Map<string, Goal>;
      cwd: string;
    },
  ) {}

  async verify(ctx: TurnVerifyContext, signal: AbortSignal): Promise<VerifierVerdict> {
    if (ctx.stopReason === undefined) return { kind: 'continue' };
    const key = ctx.sessionId ?? '';
    const gates = effectiveGate(
      this.options.globalGate,
      this.options.goals.get(key)?.gateCommand,
      this.options,
    );
    if (gates.length === 0) return { kind: 'continue' };
    const state = this.#states.get(key) ?? { consecutiveErrors: 0 };
    this.#states.set(key, state);
    return gateVeto(
      gates,
      {
        finalText: ctx.finalText,
        iterations: ctx.iterations,
        toolCallsMade: ctx.toolCallsMade,
        stopReason: ctx.stopReason,
        sessionId: ctx.sessionId,
        projectDir: ctx.projectDir ?? this.options.cwd,
        transcriptPath: ctx.transcriptPath,
        permissionMode: ctx.permissionMode,
      },
      signal,
      { state },
    );
  }
}
