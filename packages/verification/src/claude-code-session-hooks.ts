// Claude Code's session events around a run: SessionStart (before the first turn; its stdout or
// `additionalContext` is context for the model), UserPromptSubmit (may block the prompt, stop the
// run, or add context), PreCompact, Notification and SessionEnd (told, never deciding). Same runner
// and contract as the tool and Stop hooks: the event as JSON on stdin with the common fields, the
// project root as cwd, exit 2 → stderr (for the user), any other failure a reported non-blocking
// error. Every hook run is one HookOutcome; a broken hook never ends a run.
import {
  matcherMatches,
  type ClaudeCodeCommandHook,
  type ClaudeCodeEvent,
  type ClaudeCodeHooks,
} from './claude-code-settings.js';
import { firstLines, type HookOutcome, type HookOutcomeListener } from './hook-outcome.js';
import { describeFailure, processFacts, runCommandHook } from './internal/command-hook.js';
import { capForModel, parseHookJson } from './internal/hook-output.js';
import type { CommandWrapper, ProcessOutcome } from './internal/run-process.js';

export type SessionHookEvent = Extract<
  ClaudeCodeEvent,
  'SessionStart' | 'UserPromptSubmit' | 'PreCompact' | 'Notification' | 'SessionEnd'
>;

export interface ClaudeCodeSessionHooksOptions {
  /** The run's project root: hooks run there (`cwd`, `CLAUDE_PROJECT_DIR`). */
  readonly projectDir: string;
  /** The prompt's id, on every hook's stdin as `prompt_id`. */
  readonly promptId?: string | undefined;
  readonly stripEnv?: readonly string[] | undefined;
  /** Confines the hooks marked `sandbox` (a project settings file the model may have written); the rest run as the user. */
  readonly wrap?: CommandWrapper | undefined;
  readonly onHookOutcome?: HookOutcomeListener | undefined;
}

export interface SessionHookContext {
  readonly sessionId: string;
  readonly transcriptPath?: string | undefined;
  /** Claude Code's `permission_mode` (default `bypassPermissions`: nobody is asked). */
  readonly permissionMode?: string | undefined;
  readonly signal?: AbortSignal | undefined;
}

/** What SessionStart and UserPromptSubmit hooks decided. */
export type SessionHookDecision =
  /** Go on; `context` (their stdout or `additionalContext`) is for the model. */
  | { readonly kind: 'continue'; readonly context?: string }
  /** UserPromptSubmit: the prompt is not sent to the model; `reason` is for the user. */
  | { readonly kind: 'block'; readonly reason: string }
  /** `"continue": false`: the run ends before its first turn; `reason` (its `stopReason`) is for the user. */
  | { readonly kind: 'stop'; readonly reason: string };

/** Each event's matcher is tried on this stdin field (Claude Code: source, trigger, notification_type, reason). */
const MATCHED_FIELD: Readonly<Record<SessionHookEvent, string | undefined>> = {
  SessionStart: 'source',
  UserPromptSubmit: undefined,
  PreCompact: 'trigger',
  Notification: 'notification_type',
  SessionEnd: 'reason',
};

interface Heard {
  readonly hook: ClaudeCodeCommandHook;
  readonly outcome: ProcessOutcome;
  readonly durationMs: number;
}

const succeeded = (outcome: ProcessOutcome): boolean =>
  outcome.kind === 'exited' && (outcome.code === 0 || outcome.code === 2);

export class ClaudeCodeSessionHooks {
  readonly #hooks: readonly ClaudeCodeCommandHook[];
  readonly #options: ClaudeCodeSessionHooksOptions;

  constructor(
    hooks: ClaudeCodeHooks | readonly ClaudeCodeCommandHook[],
    options: ClaudeCodeSessionHooksOptions,
  ) {
    const list = 'hooks' in hooks ? hooks.hooks : hooks;
    this.#hooks = list.filter((hook) => hook.event in MATCHED_FIELD);
    this.#options = options;
  }

  /** True when a hook of `event` is configured. */
  has(event: SessionHookEvent): boolean {
    return this.#hooks.some((hook) => hook.event === event);
  }

  /**
   * SessionStart, once a session, before its first turn: `source` is `startup` for a new session,
   * `resume` for a follow-up. It cannot block; `"continue": false` stops the run.
   */
  async sessionStart(
    ctx: SessionHookContext & {
      readonly source: 'startup' | 'resume' | 'clear' | 'compact';
      readonly model?: string;
    },
  ): Promise<SessionHookDecision> {
    const heard = await this.#run('SessionStart', ctx, {
      source: ctx.source,
      ...(ctx.model === undefined ? {} : { model: ctx.model }),
    });
    return this.#decide('SessionStart', heard, ctx, false);
  }

  /** UserPromptSubmit, before the prompt reaches the model: may block it, stop the run, or add context. */
  async userPromptSubmit(
    ctx: SessionHookContext & { readonly prompt: string },
  ): Promise<SessionHookDecision> {
    const heard = await this.#run('UserPromptSubmit', ctx, { prompt: ctx.prompt });
    return this.#decide('UserPromptSubmit', heard, ctx, true);
  }

  /** PreCompact: told before the history is compacted (`auto`: to fit the context); it cannot stop it. */
  async preCompact(
    ctx: SessionHookContext & { readonly trigger: 'auto' | 'manual'; readonly customInstructions?: string },
  ): Promise<void> {
    await this.#tell('PreCompact', ctx, {
      trigger: ctx.trigger,
      custom_instructions: ctx.customInstructions ?? '',
    });
  }

  /** Notification: `notification_type` as Claude Code names them (`idle_prompt`: waiting for the user). */
  async notification(
    ctx: SessionHookContext & {
      readonly message: string;
      readonly notificationType: string;
      readonly title?: string;
    },
  ): Promise<void> {
    await this.#tell('Notification', ctx, {
      message: ctx.message,
      notification_type: ctx.notificationType,
      ...(ctx.title === undefined ? {} : { title: ctx.title }),
    });
  }

  /** SessionEnd: `reason` as Claude Code names them (`other` when a run ends by itself). */
  async sessionEnd(ctx: SessionHookContext & { readonly reason: string }): Promise<void> {
    await this.#tell('SessionEnd', ctx, { reason: ctx.reason });
  }

  #decide(
    event: SessionHookEvent,
    heard: readonly Heard[],
    ctx: SessionHookContext,
    mayBlock: boolean,
  ): SessionHookDecision {
    const contexts: string[] = [];
    const blocks: string[] = [];
    const stops: string[] = [];
    for (const run of heard) {
      const { hook, outcome } = run;
      if (!succeeded(outcome)) {
        this.#report(event, run, ctx, 'error', describeFailure(outcome, hook.timeoutMs));
        continue;
      }
      if (outcome.kind === 'exited' && outcome.code === 2) {
        // Claude Code: UserPromptSubmit blocks and erases the prompt; elsewhere stderr is for the user only.
        const said = outcome.stderr.trim();
        if (mayBlock) {
          const reason = said || `${event} hook ${hook.name} blocked the prompt`;
          blocks.push(reason);
          this.#report(event, run, ctx, 'block', reason);
        } else this.#report(event, run, ctx, 'allow', said);
        continue;
      }
      const json = parseHookJson(outcome.kind === 'exited' ? outcome.stdout : '');
      if (json?.continue === false) {
        const reason = json.stopReason || `${event} hook ${hook.name} stopped the run`;
        stops.push(reason);
        this.#report(event, run, ctx, 'halt', reason, json.systemMessage);
        continue;
      }
      if (mayBlock && json?.decision === 'block') {
        const reason = json.reason || `${event} hook ${hook.name} blocked the prompt`;
        blocks.push(reason);
        this.#report(event, run, ctx, 'block', reason, json.systemMessage);
        continue;
      }
      const context = contextOf(outcome);
      if (context !== undefined) contexts.push(context);
      this.#report(
        event,
        run,
        ctx,
        context === undefined ? 'allow' : 'feedback',
        context ?? '',
        json?.systemMessage,
      );
    }
    if (stops.length > 0) return { kind: 'stop', reason: stops.join('\n') };
    if (blocks.length > 0) return { kind: 'block', reason: blocks.join('\n') };
    return contexts.length === 0
      ? { kind: 'continue' }
      : { kind: 'continue', context: capForModel(contexts.join('\n\n')) };
  }

  async #tell(
    event: SessionHookEvent,
    ctx: SessionHookContext,
    fields: Record<string, unknown>,
  ): Promise<void> {
    for (const run of await this.#run(event, ctx, fields)) {
      const ok = succeeded(run.outcome);
      const said = run.outcome.kind === 'exited' && run.outcome.code === 2 ? run.outcome.stderr.trim() : '';
      this.#report(
        event,
        run,
        ctx,
        ok ? 'allow' : 'error',
        ok ? said : describeFailure(run.outcome, run.hook.timeoutMs),
      );
    }
  }

  async #run(
    event: SessionHookEvent,
    ctx: SessionHookContext,
    fields: Record<string, unknown>,
  ): Promise<Heard[]> {
    const field = MATCHED_FIELD[event];
    const value = field === undefined ? undefined : fields[field];
    const matched = this.#hooks.filter(
      (hook) =>
        hook.event === event &&
        (field === undefined || matcherMatches(hook.matcher, [typeof value === 'string' ? value : ''])),
    );
    if (matched.length === 0) return [];
    const { projectDir, promptId, stripEnv, wrap } = this.#options;
    const input = {
      session_id: ctx.sessionId,
      ...(ctx.transcriptPath === undefined ? {} : { transcript_path: ctx.transcriptPath }),
      cwd: projectDir,
      permission_mode: ctx.permissionMode ?? 'bypassPermissions',
      hook_event_name: event,
      ...(promptId === undefined ? {} : { prompt_id: promptId }),
      ...fields,
    };
    const signal = ctx.signal ?? new AbortController().signal;
    // Claude Code runs an event's matching hooks in parallel.
    return Promise.all(
      matched.map(async (hook) => ({
        hook,
        ...(await runCommandHook(
          { ...hook, stripEnv, wrap: hook.sandbox === true ? wrap : undefined, claudeCode: true },
          input,
          projectDir,
          signal,
        )),
      })),
    );
  }

  #report(
    event: SessionHookEvent,
    { hook, outcome, durationMs }: Heard,
    ctx: SessionHookContext,
    kind: HookOutcome['kind'],
    said: string,
    systemMessage?: string,
  ): void {
    this.#options.onHookOutcome?.({
      hook: hook.name,
      route: 'claude_code',
      event,
      kind,
      ...processFacts(outcome),
      ...(said === '' ? {} : { message: firstLines(said) }),
      ...(systemMessage === undefined ? {} : { systemMessage }),
      sessionId: ctx.sessionId,
      durationMs,
    });
  }
}

/** Exit 0: `hookSpecificOutput.additionalContext`, else plain (non-JSON) stdout, is context for the model. */
function contextOf(outcome: ProcessOutcome): string | undefined {
  if (outcome.kind !== 'exited' || outcome.code !== 0) return undefined;
  const json = parseHookJson(outcome.stdout);
  const text =
    json === undefined ? outcome.stdout.trim() : (json.hookSpecificOutput?.additionalContext ?? '').trim();
  return text === '' ? undefined : text;
}
