// Shell stop hooks: an external command judges a stop attempt by its exit code — 0 allow, 2 block,
// 3 halt; anything else is an `error`, and the caller decides whether that fails open or closed.
// Speaks Claude Code's Stop-hook protocol too, so hooks written for it run unchanged.
import { runProcess, type ProcessOutcome } from './internal/run-process.js';

export type StopHookVerdict =
  | { readonly kind: 'allow' }
  | { readonly kind: 'block'; readonly reason: string }
  | { readonly kind: 'halt'; readonly reason: string }
  | { readonly kind: 'error'; readonly hookName: string; readonly message: string };

export interface StopHookContext {
  readonly finalText: string;
  readonly iterations: number;
  readonly toolCallsMade: number;
  readonly stopReason?: string | undefined;
  readonly sessionId?: string | undefined;
  /** True when this hook blocked the previous stop attempt (Claude Code's `stop_hook_active`). */
  readonly stopHookActive?: boolean | undefined;
  /** How many times in a row this hook has blocked. */
  readonly blockCount?: number | undefined;
  readonly cwd?: string | undefined;
}

export interface StopHookHandler {
  readonly name: string;
  evaluate(ctx: StopHookContext, signal: AbortSignal): Promise<StopHookVerdict>;
}

export interface ShellStopHookOptions {
  readonly name: string;
  readonly command: string;
  readonly timeoutMs?: number | undefined;
  readonly cwd?: string | undefined;
  readonly env?: Record<string, string> | undefined;
}

export const DEFAULT_HOOK_TIMEOUT_MS = 60_000;

const SAFE_CHARACTER = /^[A-Za-z0-9 /\-._:'=]$/;

/**
 * True only when every character is a letter, digit, space or one of `/ - . _ : ' =`.
 * An empty (or blank) command is not safe: it would "pass" without checking anything.
 */
export function isShellSafe(command: string): boolean {
  return shellSafetyProblem(command) === undefined;
}

/** Why `isShellSafe` rejects `command`, in words for an error message; undefined when it accepts it. */
export function shellSafetyProblem(command: string): string | undefined {
  if (command.trim() === '') return 'the command is empty';
  const bad = [...command].find((character) => !SAFE_CHARACTER.test(character));
  return bad === undefined
    ? undefined
    : `the command contains the shell metacharacter ${JSON.stringify(bad)}`;
}

export function hookInput(ctx: StopHookContext): string {
  return JSON.stringify({
    hook_event_name: 'Stop',
    final_text: ctx.finalText,
    iterations: ctx.iterations,
    tool_calls_made: ctx.toolCallsMade,
    stop_reason: ctx.stopReason ?? null,
    session_id: ctx.sessionId ?? null,
    stop_hook_active: ctx.stopHookActive ?? false,
    block_count: ctx.blockCount ?? 0,
    ...(ctx.cwd === undefined ? {} : { cwd: ctx.cwd }),
  });
}

/** Claude Code's JSON on stdout at exit 0: `{"decision":"block","reason"}` or `{"continue":false,"stopReason"}`. */
function claudeCodeDecision(stdout: string, name: string): StopHookVerdict {
  const text = stdout.trim();
  if (!text.startsWith('{')) return { kind: 'allow' };
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return { kind: 'allow' };
  }
  if (parsed === null || typeof parsed !== 'object') return { kind: 'allow' };
  const output = parsed as { decision?: unknown; reason?: unknown; continue?: unknown; stopReason?: unknown };
  if (output.continue === false) {
    const reason = typeof output.stopReason === 'string' ? output.stopReason : `stop hook "${name}" halted`;
    return { kind: 'halt', reason };
  }
  if (output.decision === 'block') {
    const reason = typeof output.reason === 'string' ? output.reason : `stop hook "${name}" blocked`;
    return { kind: 'block', reason };
  }
  return { kind: 'allow' };
}

export function verdictFromOutcome(
  name: string,
  outcome: ProcessOutcome,
  timeoutMs: number,
): StopHookVerdict {
  const error = (message: string): StopHookVerdict => ({ kind: 'error', hookName: name, message });
  switch (outcome.kind) {
    case 'exited': {
      const said = outcome.stderr.trim() || outcome.stdout.trim();
      switch (outcome.code) {
        case 0:
          return claudeCodeDecision(outcome.stdout, name);
        case 2:
          return { kind: 'block', reason: said || `stop hook "${name}" blocked the stop` };
        case 3:
          return { kind: 'halt', reason: said || `stop hook "${name}" halted the loop` };
        default:
          return error(
            `exited with code ${outcome.code}${outcome.code === 127 ? ' (command not found)' : ''}` +
              (outcome.stderr.trim() ? `: ${outcome.stderr.trim().slice(0, 500)}` : ''),
          );
      }
    }
    case 'signaled':
      return error(`killed by signal ${outcome.signal}`);
    case 'timed_out':
      return error(`timed out after ${timeoutMs} ms; its process group was killed`);
    case 'aborted':
      return error('cancelled; its process group was killed');
    case 'spawn_failed':
      return error(`could not be started: ${outcome.message}`);
    default: {
      const unreachable: never = outcome;
      return unreachable;
    }
  }
}

export class ShellStopHook implements StopHookHandler {
  readonly name: string;
  readonly command: string;
  readonly timeoutMs: number;
  readonly requireShellSafe: boolean;
  readonly #options: ShellStopHookOptions;

  /** A hook for an LLM-supplied command: anything `isShellSafe` rejects becomes an `error`, never an allow. */
  static shellSafe(options: ShellStopHookOptions): ShellStopHook {
    return new ShellStopHook(options, true);
  }

  constructor(options: ShellStopHookOptions, requireShellSafe = false) {
    this.name = options.name;
    this.command = options.command;
    this.timeoutMs = options.timeoutMs ?? DEFAULT_HOOK_TIMEOUT_MS;
    this.requireShellSafe = requireShellSafe;
    this.#options = options;
  }

  async evaluate(ctx: StopHookContext, signal: AbortSignal): Promise<StopHookVerdict> {
    const problem = this.requireShellSafe ? shellSafetyProblem(this.command) : undefined;
    if (problem !== undefined) return { kind: 'error', hookName: this.name, message: `refused: ${problem}` };
    const outcome = await runProcess({
      command: this.command,
      stdin: hookInput({ cwd: this.#options.cwd, ...ctx }),
      timeoutMs: this.timeoutMs,
      signal,
      cwd: this.#options.cwd,
      env: this.#options.env,
    });
    return verdictFromOutcome(this.name, outcome, this.timeoutMs);
  }
}
