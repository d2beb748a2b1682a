// Shell stop hooks: an external command judges a stop attempt, speaking Claude Code's Stop
// contract on both routes (`[[stop_hooks]]` and Claude Code settings files): exit 0 → its JSON
// (`decision`, `continue:false`, `systemMessage`) or allow; exit 2 → block with stderr only; any
// other code is an `error` the caller fails open or closed on. Exit 3 = halt is Aleph's own rule,
// kept for `[[stop_hooks]]` and the gate only: a Claude Code hook knows nothing of it.
import type { HookEventName, HookOutcomeListener, HookRoute } from './hook-outcome.js';
import { firstLines } from './hook-outcome.js';
import { describeFailure, processFacts, runCommandHook } from './internal/command-hook.js';
import { capForModel, parseHookJson } from './internal/hook-output.js';
import type { CommandWrapper, ProcessOutcome } from './internal/run-process.js';

export type StopHookVerdict =
  | { readonly kind: 'allow'; readonly systemMessage?: string }
  | { readonly kind: 'block'; readonly reason: string; readonly systemMessage?: string }
  /** `stop`: Claude Code's `"continue": false` — the model's stop stands, `reason` is the stopReason. */
  | { readonly kind: 'halt'; readonly reason: string; readonly stop?: true; readonly systemMessage?: string }
  | {
      readonly kind: 'error';
      readonly hookName: string;
      readonly message: string;
      /**
       * What a command that exited printed, stdout then stderr, each cut as for the model: a test
       * runner's failures are on its stdout. Absent when it printed nothing or did not exit.
       */
      readonly output?: string;
    };

export interface StopHookContext {
  readonly finalText: string;
  readonly iterations: number;
  readonly toolCallsMade: number;
  readonly stopReason?: string | undefined;
  readonly sessionId?: string | undefined;
  /** True when the previous stop attempt was blocked (Claude Code's `stop_hook_active`). */
  readonly stopHookActive?: boolean | undefined;
  /** How many times in a row this hook has blocked. */
  readonly blockCount?: number | undefined;
  /** Where the hook runs when its options give no `cwd`; stdin's `cwd`, `CLAUDE_PROJECT_DIR`. */
  readonly projectDir?: string | undefined;
  readonly transcriptPath?: string | undefined;
  readonly permissionMode?: string | undefined;
  /** `SubagentStop` for a `spawn_agent` run; `Stop` when absent. */
  readonly event?: 'Stop' | 'SubagentStop' | undefined;
  /** SubagentStop: the parent's session and transcript (stdin `session_id`, `transcript_path`). */
  readonly parentSessionId?: string | undefined;
  readonly parentTranscriptPath?: string | undefined;
  /** The prompt's id (stdin `prompt_id`). */
  readonly promptId?: string | undefined;
  /** @deprecated use `projectDir`. */
  readonly cwd?: string | undefined;
}

export interface StopHookHandler {
  readonly name: string;
  evaluate(ctx: StopHookContext, signal: AbortSignal): Promise<StopHookVerdict>;
}

export interface ShellStopHookOptions {
  readonly name: string;
  readonly command: string;
  /** Arguments for `command`, executed without a shell (a Claude Code settings entry's `args`). */
  readonly args?: readonly string[] | undefined;
  readonly timeoutMs?: number | undefined;
  /** Where it runs; the run's project root (`ctx.projectDir`) when absent. */
  readonly cwd?: string | undefined;
  readonly env?: Record<string, string> | undefined;
  /** Environment variable names never passed to the hook (`ALEPH_TOKEN`, the provider key …). */
  readonly stripEnv?: readonly string[] | undefined;
  /** Runs the command inside a sandbox (`Sandbox.wrap`). */
  readonly wrap?: CommandWrapper | undefined;
  /** `claude_code` reads exit 3 as a non-blocking error; the default route keeps 3 = halt. */
  readonly route?: HookRoute | undefined;
  /** A plugin hook's plugin folder, handed over as `CLAUDE_PLUGIN_ROOT`. */
  readonly pluginRoot?: string | undefined;
  readonly onHookOutcome?: HookOutcomeListener | undefined;
}

/** `[[stop_hooks]]` and the gate. */
export const DEFAULT_HOOK_TIMEOUT_MS = 60_000;
/** Claude Code's default for command hooks: 600 s. */
export const CLAUDE_CODE_HOOK_TIMEOUT_MS = 600_000;

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

/** Claude Code's Stop input, with Aleph's own fields alongside. */
export function hookInput(ctx: StopHookContext, cwd?: string): Record<string, unknown> {
  const event = ctx.event ?? 'Stop';
  // SubagentStop, as in Claude Code: session_id/transcript_path are the parent's, agent_* the sub-agent's.
  const parent = event === 'SubagentStop' && ctx.parentSessionId !== undefined;
  const transcriptPath = parent ? ctx.parentTranscriptPath : ctx.transcriptPath;
  return {
    session_id: (parent ? ctx.parentSessionId : ctx.sessionId) ?? '',
    ...(transcriptPath === undefined ? {} : { transcript_path: transcriptPath }),
    cwd: cwd ?? ctx.projectDir ?? ctx.cwd ?? process.cwd(),
    permission_mode: ctx.permissionMode ?? 'default',
    hook_event_name: event,
    ...(ctx.promptId === undefined ? {} : { prompt_id: ctx.promptId }),
    stop_hook_active: ctx.stopHookActive ?? false,
    last_assistant_message: ctx.finalText,
    ...(event === 'SubagentStop'
      ? {
          agent_id: ctx.sessionId ?? '',
          ...(ctx.transcriptPath === undefined ? {} : { agent_transcript_path: ctx.transcriptPath }),
        }
      : {}),
    final_text: ctx.finalText,
    iterations: ctx.iterations,
    tool_calls_made: ctx.toolCallsMade,
    stop_reason: ctx.stopReason ?? null,
    block_count: ctx.blockCount ?? 0,
  };
}

export function verdictFromOutcome(
  name: string,
  outcome: ProcessOutcome,
  timeoutMs: number,
  route: HookRoute = 'stop_hooks',
): StopHookVerdict {
  if (outcome.kind === 'exited' && outcome.code === 0) {
    const output = parseHookJson(outcome.stdout);
    const message = output?.systemMessage === undefined ? {} : { systemMessage: output.systemMessage };
    // `continue: false` halts and overrides any decision; plain text (no JSON object) allows.
    if (output?.continue === false)
      return {
        kind: 'halt',
        reason: capForModel(output.stopReason ?? `stop hook "${name}" halted`),
        stop: true,
        ...message,
      };
    if (output?.decision === 'block')
      return { kind: 'block', reason: capForModel(output.reason ?? ''), ...message };
    return { kind: 'allow', ...message };
  }
  // Exit 2: stderr only is fed to the model (stdout and any JSON in it are ignored), even when empty.
  if (outcome.kind === 'exited' && outcome.code === 2)
    return { kind: 'block', reason: capForModel(outcome.stderr.trim()) };
  if (outcome.kind === 'exited' && outcome.code === 3 && route !== 'claude_code')
    return {
      kind: 'halt',
      reason: capForModel(outcome.stderr.trim()) || `stop hook "${name}" halted the loop`,
    };
  const printed =
    outcome.kind === 'exited'
      ? [outcome.stdout.trim(), outcome.stderr.trim()].filter((text) => text !== '').map(capForModel)
      : [];
  return {
    kind: 'error',
    hookName: name,
    message: describeFailure(outcome, timeoutMs),
    ...(printed.length > 0 ? { output: printed.join('\n') } : {}),
  };
}

export class ShellStopHook implements StopHookHandler {
  readonly name: string;
  readonly command: string;
  readonly args: readonly string[] | undefined;
  readonly timeoutMs: number;
  readonly route: HookRoute;
  readonly requireShellSafe: boolean;
  readonly #options: ShellStopHookOptions;

  /** A hook for an LLM-supplied command: anything `isShellSafe` rejects becomes an `error`, never an allow. */
  static shellSafe(options: ShellStopHookOptions): ShellStopHook {
    return new ShellStopHook(options, true);
  }

  constructor(options: ShellStopHookOptions, requireShellSafe = false) {
    this.name = options.name;
    this.command = options.command;
    this.args = options.args;
    this.route = options.route ?? 'stop_hooks';
    this.timeoutMs =
      options.timeoutMs ??
      (this.route === 'claude_code' ? CLAUDE_CODE_HOOK_TIMEOUT_MS : DEFAULT_HOOK_TIMEOUT_MS);
    this.requireShellSafe = requireShellSafe;
    this.#options = options;
  }

  async evaluate(ctx: StopHookContext, signal: AbortSignal): Promise<StopHookVerdict> {
    const problem = this.requireShellSafe ? shellSafetyProblem(this.command) : undefined;
    if (problem !== undefined) {
      const verdict: StopHookVerdict = { kind: 'error', hookName: this.name, message: `refused: ${problem}` };
      this.#report(ctx, verdict, undefined, 0);
      return verdict;
    }
    const projectDir = ctx.projectDir ?? ctx.cwd;
    const { outcome, durationMs } = await runCommandHook(
      { ...this.#options, timeoutMs: this.timeoutMs, claudeCode: this.route === 'claude_code' },
      hookInput(ctx, this.#options.cwd ?? projectDir),
      projectDir,
      signal,
    );
    const verdict = verdictFromOutcome(this.name, outcome, this.timeoutMs, this.route);
    this.#report(ctx, verdict, outcome, durationMs);
    return verdict;
  }

  #report(
    ctx: StopHookContext,
    verdict: StopHookVerdict,
    outcome: ProcessOutcome | undefined,
    durationMs: number,
  ): void {
    const listener = this.#options.onHookOutcome;
    if (listener === undefined) return;
    const event: HookEventName = ctx.event ?? 'Stop';
    const said = verdict.kind === 'error' ? verdict.message : verdict.kind === 'allow' ? '' : verdict.reason;
    listener({
      hook: this.name,
      route: this.route,
      event,
      kind: verdict.kind,
      ...processFacts(outcome),
      ...(said === '' ? {} : { message: firstLines(said) }),
      ...(verdict.kind !== 'error' && verdict.systemMessage !== undefined
        ? { systemMessage: verdict.systemMessage }
        : {}),
      ...(ctx.sessionId === undefined ? {} : { sessionId: ctx.sessionId }),
      durationMs,
    });
  }
}
