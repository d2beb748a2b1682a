// Extension Stop hooks: in-process handlers registered for HookEvent.Stop, plus the Stop (or
// SubagentStop) command hooks of Claude Code settings and hooks files, run unchanged under Claude
// Code's contract (route `claude_code`: exit 3 is an error, the timeout 600 s, cwd the project
// root). Fail-open, like StopHookVerifier.
import {
  parseClaudeCodeHooksFile,
  type ClaudeCodeCommandHook,
  type ClaudeCodeHooks,
} from './claude-code-settings.js';
import { VerificationError } from './errors.js';
import type { HookOutcomeListener } from './hook-outcome.js';
import { HookRunner, type HookRunnerOptions } from './internal/hook-runner.js';
import type { CommandWrapper } from './internal/run-process.js';
import {
  ShellStopHook,
  type StopHookContext,
  type StopHookHandler,
  type StopHookVerdict,
} from './stop-hooks.js';
import type { TurnVerifier, TurnVerifyContext, VerifierVerdict } from './turn-verifier.js';

export const HookEvent = { Stop: 'Stop' } as const;
export type HookEvent = (typeof HookEvent)[keyof typeof HookEvent];

export type StopHookFunction = (ctx: StopHookContext, signal: AbortSignal) => Promise<StopHookVerdict>;

export interface ClaudeCodeHookRunOptions {
  /** Environment variable names no hook sees (`ALEPH_TOKEN`, the provider key …). */
  readonly stripEnv?: readonly string[];
  /** Confines the hooks marked `sandbox` (a project settings file the model may have written); the rest run as the user. */
  readonly wrap?: CommandWrapper;
  readonly onHookOutcome?: HookOutcomeListener;
}

/** Shell hooks for the command hooks of one event (`Stop` or `SubagentStop`). */
export function claudeCodeStopHooks(
  hooks: ClaudeCodeHooks | readonly ClaudeCodeCommandHook[],
  event: 'Stop' | 'SubagentStop' = 'Stop',
  options: ClaudeCodeHookRunOptions = {},
): ShellStopHook[] {
  const list = 'hooks' in hooks ? hooks.hooks : hooks;
  return list
    .filter((hook) => hook.event === event)
    .map(
      (hook) =>
        new ShellStopHook({
          name: hook.name,
          command: hook.command,
          args: hook.args,
          timeoutMs: hook.timeoutMs,
          pluginRoot: hook.pluginRoot,
          route: 'claude_code',
          ...options,
          wrap: hook.sandbox === true ? options.wrap : undefined,
        }),
    );
}

/** The Stop command hooks of one Claude Code hooks or settings file. They run in the project root. */
export function loadHooksFile(path: string, options: ClaudeCodeHookRunOptions = {}): ShellStopHook[] {
  const file = parseClaudeCodeHooksFile(path);
  return file.disableAllHooks ? [] : claudeCodeStopHooks(file.hooks, 'Stop', options);
}

export interface ExtensionStopHookVerifierOptions extends HookRunnerOptions, ClaudeCodeHookRunOptions {
  /** Claude Code hooks files read with `loadHooksFile` (no settings discovery). */
  readonly files?: readonly string[];
  /** Hooks found by `discoverClaudeCodeHooks`; the runner's `event` picks Stop or SubagentStop. */
  readonly hooks?: ClaudeCodeHooks;
}

export class ExtensionStopHookVerifier implements TurnVerifier {
  readonly name = 'extension_stop_hooks';
  readonly stopHook = true;
  readonly #handlers: StopHookHandler[] = [];
  readonly #runner: HookRunner;

  constructor(options: ExtensionStopHookVerifierOptions = {}) {
    this.#runner = new HookRunner(options);
    const run = { stripEnv: options.stripEnv, wrap: options.wrap, onHookOutcome: options.onHookOutcome };
    const defined = Object.fromEntries(Object.entries(run).filter(([, value]) => value !== undefined));
    for (const file of options.files ?? []) this.#handlers.push(...loadHooksFile(file, defined));
    if (options.hooks !== undefined)
      this.#handlers.push(...claudeCodeStopHooks(options.hooks, this.#runner.event, defined));
  }

  get handlers(): readonly StopHookHandler[] {
    return this.#handlers;
  }

  /** Registers a handler; returns a function that unregisters it. */
  register(event: HookEvent, handler: StopHookHandler | StopHookFunction, name = 'extension'): () => void {
    if (event !== HookEvent.Stop)
      throw new VerificationError('invalid_config', `unknown hook event ${String(event)}`);
    const entry: StopHookHandler = typeof handler === 'function' ? { name, evaluate: handler } : handler;
    this.#handlers.push(entry);
    return () => {
      const index = this.#handlers.indexOf(entry);
      if (index >= 0) this.#handlers.splice(index, 1);
    };
  }

  verify(ctx: TurnVerifyContext, signal: AbortSignal): Promise<VerifierVerdict> {
    return this.#runner.run([...this.#handlers], ctx, signal);
  }
}
