// The goal gate: the fail-closed dual of StopHookVerifier. Same ShellStopHook underneath, but a
// broken gate cannot certify completion — an `error` vetoes the stop instead of letting it pass.
import type { HookOutcomeListener } from './hook-outcome.js';
import type { CommandWrapper } from './internal/run-process.js';
import { ShellStopHook, type StopHookContext, type StopHookHandler } from './stop-hooks.js';
import { CONTINUE, type VerifierVerdict } from './turn-verifier.js';

export const DEFAULT_MAX_CONSECUTIVE_GATE_ERRORS = 3;

/** Carries the consecutive-error count across stop attempts; keep one per run. */
export interface GateState {
  consecutiveErrors: number;
  /** The run's tool calls at the last error: an error after more of them starts the count afresh. */
  toolCallsAtError?: number;
}

export interface GateVetoOptions {
  readonly state?: GateState;
  readonly maxConsecutiveErrors?: number;
}

export async function gateVeto(
  gates: readonly StopHookHandler[],
  ctx: StopHookContext,
  signal: AbortSignal,
  options: GateVetoOptions = {},
): Promise<VerifierVerdict> {
  const state = options.state ?? { consecutiveErrors: 0 };
  const maxErrors = options.maxConsecutiveErrors ?? DEFAULT_MAX_CONSECUTIVE_GATE_ERRORS;
  for (const gate of gates) {
    const verdict = await gate.evaluate(ctx, signal);
    signal.throwIfAborted();
    switch (verdict.kind) {
      case 'allow':
        continue;
      case 'block':
      case 'halt':
        state.consecutiveErrors = 0;
        return {
          kind: 'veto',
          reason: `goal gate "${gate.name}" did not pass`,
          feedback: `The goal gate \`${gate.name}\` did not pass: ${verdict.reason || 'it exited with code 2'}`,
        };
      case 'error': {
        // Consecutive means with no tool call in between: a model that worked on the cause (a
        // failing test) since the last failure is not halted for it; one that only stops again is.
        if (state.toolCallsAtError !== undefined && ctx.toolCallsMade > state.toolCallsAtError)
          state.consecutiveErrors = 0;
        state.toolCallsAtError = ctx.toolCallsMade;
        state.consecutiveErrors += 1;
        if (state.consecutiveErrors >= maxErrors) {
          return {
            kind: 'halt',
            reason: `goal gate "${gate.name}" failed ${state.consecutiveErrors} times in a row (${verdict.message}); completion cannot be verified`,
          };
        }
        return {
          kind: 'veto',
          reason: `goal gate "${gate.name}" did not pass (${verdict.message}): completion cannot be claimed`,
          feedback: `The goal gate \`${gate.name}\` did not pass (${verdict.message}), so completion cannot be claimed. Fix the cause (or the gate command).${
            verdict.output === undefined ? '' : `\nWhat it printed:\n${verdict.output}`
          }`,
        };
      }
      default: {
        const unreachable: never = verdict;
        return unreachable;
      }
    }
  }
  state.consecutiveErrors = 0;
  return CONTINUE;
}

export interface EffectiveGateOptions {
  readonly cwd?: string | undefined;
  readonly timeoutMs?: number | undefined;
  /** Runs the model-set `gate_command` inside a sandbox; the global gate runs as configured. */
  readonly wrap?: CommandWrapper | undefined;
  /** Environment variable names the gates never see (`ALEPH_TOKEN`, the provider key …). */
  readonly stripEnv?: readonly string[] | undefined;
  readonly onHookOutcome?: HookOutcomeListener | undefined;
}

/**
 * The global gate (the user's configuration: a shell command, as a stop hook's) and the goal's own
 * command (the model's: a shell-safe hook, metacharacters → error, confined by `wrap`).
 */
export function effectiveGate(
  globalGate: string | undefined,
  goalGateCommand: string | undefined,
  options: EffectiveGateOptions = {},
): StopHookHandler[] {
  const gates: StopHookHandler[] = [];
  const add = (name: string, command: string | undefined, modelSet: boolean): void => {
    if (command === undefined) return;
    const hook = {
      name,
      command,
      route: 'gate' as const,
      cwd: options.cwd,
      timeoutMs: options.timeoutMs,
      stripEnv: options.stripEnv,
      wrap: modelSet ? options.wrap : undefined,
      onHookOutcome: options.onHookOutcome,
    };
    gates.push(modelSet ? ShellStopHook.shellSafe(hook) : new ShellStopHook(hook));
  };
  add('[agent] gate_command', globalGate, false);
  add("the goal's gate_command", goalGateCommand, true);
  return gates;
}
