// Claude Code PreToolUse/PostToolUse command hooks around Aleph's tool calls, shaped for the
// harness's hook point (allow | deny{reason} | rewrite{args}; after → optional feedback). The same
// runner and contract as Stop: exit 2 → stderr; exit 0 → JSON; other codes → a non-blocking error,
// reported and ignored. There is no human in the loop, so `"ask"` is a deny that says so.
// `"continue": false` stops the run (over any `decision`), its `stopReason` meant for the user.
// PreToolUse `additionalContext` reaches the model too: with the deny reason, or kept per call id
// and given back by `after` as feedback (the harness's one path to the model's next Think).
import { matcherMatches, type ClaudeCodeCommandHook, type ClaudeCodeHooks } from './claude-code-settings.js';
import { firstLines, type HookOutcome, type HookOutcomeListener } from './hook-outcome.js';
import { describeFailure, processFacts, runCommandHook } from './internal/command-hook.js';
import { capForModel, parseHookJson } from './internal/hook-output.js';
import type { CommandWrapper, ProcessOutcome } from './internal/run-process.js';
import { matchPermissionRule } from './internal/permission-rule.js';
import { claudeToolName, fromClaudeInput, toClaudeInput } from './internal/tool-names.js';
import { claudeToolResponse, type FileBefore } from './internal/tool-response.js';
import { constants } from 'node:fs';
import { open } from 'node:fs/promises';
import { isAbsolute, resolve } from 'node:path';

/** originalFile is read up to this size; a larger file is told as null. */
const ORIGINAL_FILE_CAP = 1024 * 1024;

export interface ToolHookCall {
  readonly id: string;
  readonly name: string;
  readonly args: unknown;
}

export interface ToolHookResult {
  readonly output: string;
  readonly isError?: boolean;
}

export interface ToolHookRunContext {
  readonly sessionId?: string;
  readonly signal?: AbortSignal;
  /** The run's project root; the options' `projectDir` when absent. */
  readonly projectDir?: string;
  readonly transcriptPath?: string;
  readonly permissionMode?: string;
  /** PostToolUse: how long the call ran (stdin `duration_ms`). */
  readonly durationMs?: number;
}

/**
 * deny: not run, `reason` is its result; rewrite: run with `args`, the batch serially (harness);
 * stop: not run, and the run ends once the hooks are done, `reason` shown to the user (not the model).
 */
export type ToolHookDecision =
  | { readonly kind: 'allow' }
  | { readonly kind: 'deny'; readonly reason: string }
  | { readonly kind: 'rewrite'; readonly args: unknown }
  | { readonly kind: 'stop'; readonly reason: string };

/** `feedback`: for the model's next Think; `stop`: end the run, the reason shown to the user. */
export interface ToolHookAfter {
  readonly feedback?: string;
  readonly stop?: string;
}

export interface ClaudeCodeToolHooksOptions {
  /** The run's project root: hooks run there; `tool_input` paths are absolute from it. */
  readonly projectDir: string;
  readonly stripEnv?: readonly string[];
  /** Confines the hooks marked `sandbox` (a project settings file the model may have written); the rest run as the user. */
  readonly wrap?: CommandWrapper;
  readonly onHookOutcome?: HookOutcomeListener;
  /** The prompt's id, on every hook's stdin as `prompt_id`. */
  readonly promptId?: string;
}

const TOOL_EVENTS = ['PreToolUse', 'PostToolUse', 'PostToolUseFailure'] as const;
type Event = (typeof TOOL_EVENTS)[number];

/** One hook's answer before a call. */
type Answer =
  | { kind: 'allow' }
  | { kind: 'deny'; reason: string }
  | { kind: 'stop'; reason: string }
  | { kind: 'rewrite'; input: Record<string, unknown> }
  | { kind: 'error'; message: string };

function preToolAnswer(
  name: string,
  outcome: ProcessOutcome,
  timeoutMs: number,
): Answer & { systemMessage?: string; context?: string } {
  if (outcome.kind === 'exited' && outcome.code === 2)
    return { kind: 'deny', reason: outcome.stderr.trim() || `PreToolUse hook "${name}" blocked the call` };
  if (outcome.kind !== 'exited' || outcome.code !== 0)
    return { kind: 'error', message: describeFailure(outcome, timeoutMs) };
  const output = parseHookJson(outcome.stdout);
  const specific = output?.hookSpecificOutput;
  const message = {
    ...(output?.systemMessage === undefined ? {} : { systemMessage: output.systemMessage }),
    ...(specific?.additionalContext ? { context: specific.additionalContext } : {}),
  };
  const decision = specific?.permissionDecision ?? (output?.decision === 'block' ? 'deny' : undefined);
  const reason = specific?.permissionDecisionReason ?? output?.reason ?? '';
  if (output?.continue === false)
    return {
      kind: 'stop',
      reason: output.stopReason || `PreToolUse hook "${name}" stopped the run`,
      ...message,
    };
  if (decision === 'deny')
    return { kind: 'deny', reason: reason || `PreToolUse hook "${name}" denied the call`, ...message };
  if (decision === 'ask')
    return {
      kind: 'deny',
      reason: `PreToolUse hook "${name}" asked for the user's confirmation, and no user is present to give it${reason ? `: ${reason}` : ''}`,
      ...message,
    };
  if (specific?.updatedInput !== undefined)
    return { kind: 'rewrite', input: specific.updatedInput, ...message };
  return { kind: 'allow', ...message };
}

/** What one PostToolUse hook says: feedback for the model, and a stop (`continue: false`) for the user. */
function postToolAnswer(name: string, outcome: ProcessOutcome): { feedback?: string; stop?: string } {
  if (outcome.kind === 'exited' && outcome.code === 2)
    return outcome.stderr.trim() ? { feedback: outcome.stderr.trim() } : {};
  if (outcome.kind !== 'exited' || outcome.code !== 0) return {};
  const output = parseHookJson(outcome.stdout);
  const parts = [
    output?.decision === 'block' ? output.reason : undefined,
    output?.hookSpecificOutput?.additionalContext,
  ].filter((part): part is string => part !== undefined && part !== '');
  return {
    ...(parts.length === 0 ? {} : { feedback: parts.join('\n') }),
    ...(output?.continue === false
      ? { stop: output.stopReason || `PostToolUse hook "${name}" stopped the run` }
      : {}),
  };
}

export class ClaudeCodeToolHooks {
  readonly #hooks: readonly ClaudeCodeCommandHook[];
  readonly #options: ClaudeCodeToolHooksOptions;
  /** PreToolUse `additionalContext` of a call that was let through, until its `after`. */
  readonly #context = new Map<string, string>();
  /** A write's or edit's file as it was before the call, for PostToolUse `originalFile`. */
  readonly #before = new Map<string, FileBefore>();

  constructor(
    hooks: ClaudeCodeHooks | readonly ClaudeCodeCommandHook[],
    options: ClaudeCodeToolHooksOptions,
  ) {
    const list = 'hooks' in hooks ? hooks.hooks : hooks;
    this.#hooks = list.filter((hook) => (TOOL_EVENTS as readonly string[]).includes(hook.event));
    this.#options = options;
  }

  /** True when any PreToolUse/PostToolUse hook is configured. */
  get active(): boolean {
    return this.#hooks.length > 0;
  }

  async before(call: ToolHookCall, ctx: ToolHookRunContext = {}): Promise<ToolHookDecision> {
    const projectDir = ctx.projectDir ?? this.#options.projectDir;
    const claudeInput = toClaudeInput(call.name, call.args, projectDir);
    if (
      (call.name === 'write_file' || call.name === 'edit_file') &&
      this.#hooks.some((hook) => hook.event === 'PostToolUse')
    )
      this.#before.set(call.id, await fileBefore(call.args, projectDir));
    const runs = await this.#run('PreToolUse', call, ctx, { tool_input: claudeInput });
    const denials: string[] = [];
    const stops: string[] = [];
    const contexts: string[] = [];
    let rewritten: Record<string, unknown> | undefined;
    let rewrittenInSandbox = false;
    for (const { hook, outcome, durationMs } of runs) {
      const answer = preToolAnswer(hook.name, outcome, hook.timeoutMs);
      if (answer.kind === 'rewrite' && hook.sandbox === true) rewrittenInSandbox = true;
      const context = answer.kind === 'error' ? undefined : answer.context;
      if (context !== undefined) contexts.push(context);
      if (answer.kind === 'deny') denials.push(answer.reason);
      if (answer.kind === 'stop') stops.push(answer.reason);
      // Several rewrites apply in configuration order, each merged over the input so far.
      if (answer.kind === 'rewrite')
        rewritten = { ...(rewritten ?? (claudeInput as Record<string, unknown>)), ...answer.input };
      const said =
        answer.kind === 'deny' || answer.kind === 'stop'
          ? answer.reason
          : answer.kind === 'error'
            ? answer.message
            : (context ?? '');
      this.#report(
        hook,
        call,
        ctx,
        outcome,
        durationMs,
        answer.kind === 'stop'
          ? 'halt'
          : answer.kind === 'allow' && context !== undefined
            ? 'feedback'
            : answer.kind,
        said,
        answer.kind === 'error' ? undefined : answer.systemMessage,
      );
    }
    // A sandboxed hook's file may be the model's: what it rewrote is judged again by the hooks that
    // run as the user (they judged the input before the rewrite), and only a deny or a stop counts.
    if (rewritten !== undefined && rewrittenInSandbox && stops.length === 0 && denials.length === 0) {
      const again = { ...call, args: fromClaudeInput(call.name, rewritten, projectDir) };
      await this.#judgeAgain(
        again,
        ctx,
        rewritten,
        'the input as a sandboxed hook rewrote it',
        denials,
        stops,
        (hook) => hook.sandbox !== true,
      );
    }
    // The `goal` tool's gate_command is a shell command the runner runs later: `Bash` hooks judge it
    // now, as the shell call it will be.
    const gate = (call.args as { gate_command?: unknown } | null)?.gate_command;
    if (call.name === 'goal' && typeof gate === 'string' && stops.length === 0 && denials.length === 0) {
      const asShell = { id: call.id, name: 'shell', args: { command: gate } };
      await this.#judgeAgain(
        asShell,
        ctx,
        { command: gate },
        'the gate_command, judged as a shell call',
        denials,
        stops,
      );
    }
    if (stops.length > 0) return { kind: 'stop', reason: stops.join('\n') };
    if (denials.length > 0)
      return { kind: 'deny', reason: capForModel([...denials, ...contexts].join('\n\n')) };
    if (contexts.length > 0) this.#context.set(call.id, contexts.join('\n\n'));
    if (rewritten !== undefined)
      return { kind: 'rewrite', args: fromClaudeInput(call.name, rewritten, projectDir) };
    return { kind: 'allow' };
  }

  /**
   * A command that is not a tool call but will run as one would (a project `.mcp.json` stdio
   * server's, started at a run's start), judged by the PreToolUse hooks as that `shell` (`Bash`)
   * call: a deny, or a stop (there is no run to stop yet), comes back as a deny with the hook's
   * reason and `why`; a rewrite cannot be applied and counts as nothing, as in the goal's gate.
   */
  async judgeCommand(
    command: string,
    why: string,
    ctx: ToolHookRunContext & { readonly id: string },
  ): Promise<{ readonly kind: 'allow' } | { readonly kind: 'deny'; readonly reason: string }> {
    const reasons: string[] = [];
    const call = { id: ctx.id, name: 'shell', args: { command } };
    await this.#judgeAgain(call, ctx, { command }, why, reasons, reasons);
    return reasons.length === 0 ? { kind: 'allow' } : { kind: 'deny', reason: reasons.join('\n') };
  }

  /**
   * `feedback` is always there ('' for none) while the harness's hook point still types it as
   * required; once that takes ToolHookAfter, an empty one is left out.
   */
  async after(
    call: ToolHookCall,
    result: ToolHookResult,
    ctx: ToolHookRunContext = {},
  ): Promise<void | (ToolHookAfter & { readonly feedback: string })> {
    // Claude Code: PostToolUse after a success only; a failed call is PostToolUseFailure, told `error`.
    const projectDir = ctx.projectDir ?? this.#options.projectDir;
    const toolInput = toClaudeInput(call.name, call.args, projectDir);
    const original = this.#before.get(call.id);
    this.#before.delete(call.id);
    const duration = ctx.durationMs === undefined ? {} : { duration_ms: ctx.durationMs };
    const runs =
      result.isError === true
        ? await this.#run('PostToolUseFailure', call, ctx, {
            tool_input: toolInput,
            error: result.output,
            is_interrupt: false,
            ...duration,
          })
        : await this.#run('PostToolUse', call, ctx, {
            tool_input: toolInput,
            tool_response: claudeToolResponse(call.name, call.args, result.output, projectDir, original),
            ...duration,
          });
    const before = this.#context.get(call.id);
    this.#context.delete(call.id);
    const feedback: string[] = before === undefined ? [] : [before];
    const stops: string[] = [];
    for (const { hook, outcome, durationMs } of runs) {
      const said = postToolAnswer(hook.name, outcome);
      if (said.feedback !== undefined) feedback.push(said.feedback);
      if (said.stop !== undefined) stops.push(said.stop);
      const failed = !(outcome.kind === 'exited' && (outcome.code === 0 || outcome.code === 2));
      const json =
        outcome.kind === 'exited' && outcome.code === 0 ? parseHookJson(outcome.stdout) : undefined;
      this.#report(
        hook,
        call,
        ctx,
        outcome,
        durationMs,
        failed
          ? 'error'
          : said.stop !== undefined
            ? 'halt'
            : said.feedback === undefined
              ? 'allow'
              : 'feedback',
        failed ? describeFailure(outcome, hook.timeoutMs) : (said.stop ?? said.feedback ?? ''),
        json?.systemMessage,
      );
    }
    if (feedback.length === 0 && stops.length === 0) return undefined;
    return {
      feedback: feedback.length === 0 ? '' : capForModel(feedback.join('\n\n')),
      ...(stops.length === 0 ? {} : { stop: stops.join('\n') }),
    };
  }

  /** PreToolUse hooks on `call` once more: only a deny (said with `why`) or a stop counts. */
  async #judgeAgain(
    call: ToolHookCall,
    ctx: ToolHookRunContext,
    toolInput: Record<string, unknown>,
    why: string,
    denials: string[],
    stops: string[],
    only?: (hook: ClaudeCodeCommandHook) => boolean,
  ): Promise<void> {
    for (const { hook, outcome } of await this.#run(
      'PreToolUse',
      call,
      ctx,
      { tool_input: toolInput },
      only,
    )) {
      const answer = preToolAnswer(hook.name, outcome, hook.timeoutMs);
      if (answer.kind === 'deny') denials.push(`${answer.reason} (${why})`);
      if (answer.kind === 'stop') stops.push(answer.reason);
    }
  }

  async #run(
    event: Event,
    call: ToolHookCall,
    ctx: ToolHookRunContext,
    fields: Record<string, unknown>,
    only: (hook: ClaudeCodeCommandHook) => boolean = () => true,
  ) {
    const tool = claudeToolName(call.name);
    const projectDir = ctx.projectDir ?? this.#options.projectDir;
    const matched = this.#hooks.filter((hook) => {
      if (!only(hook)) return false;
      if (hook.event !== event || !matcherMatches(hook.matcher, [tool, call.name])) return false;
      if (hook.if === undefined) return true;
      const match = matchPermissionRule(hook.if, tool, call.name, fields['tool_input'], projectDir);
      if (typeof match === 'string') return match === 'match';
      // Neither narrowed nor widened in silence: it runs, and the user is told why.
      this.#options.onHookOutcome?.({
        hook: hook.name,
        route: 'claude_code',
        event,
        kind: 'error',
        message: `"if" could not be applied (${match.unknown}); the hook ran as if it had none`,
        ...(ctx.sessionId === undefined ? {} : { sessionId: ctx.sessionId }),
        tool: call.name,
        durationMs: 0,
      });
      return true;
    });
    const seen = new Set<string>();
    const unique = matched.filter((hook) => {
      const key = JSON.stringify([hook.command, hook.args ?? null]);
      return seen.has(key) ? false : (seen.add(key), true);
    });
    const input = {
      session_id: ctx.sessionId ?? '',
      ...(ctx.transcriptPath === undefined ? {} : { transcript_path: ctx.transcriptPath }),
      cwd: projectDir,
      permission_mode: ctx.permissionMode ?? 'default',
      hook_event_name: event,
      ...(this.#options.promptId === undefined ? {} : { prompt_id: this.#options.promptId }),
      tool_name: tool,
      ...fields,
      tool_use_id: call.id,
    };
    const signal = ctx.signal ?? new AbortController().signal;
    return Promise.all(
      unique.map(async (hook) => {
        const run = await runCommandHook(
          {
            ...hook,
            stripEnv: this.#options.stripEnv,
            wrap: hook.sandbox === true ? this.#options.wrap : undefined,
            claudeCode: true,
          },
          input,
          projectDir,
          signal,
        );
        return { hook, ...run };
      }),
    );
  }

  #report(
    hook: ClaudeCodeCommandHook,
    call: ToolHookCall,
    ctx: ToolHookRunContext,
    outcome: ProcessOutcome,
    durationMs: number,
    kind: HookOutcome['kind'],
    said: string,
    systemMessage: string | undefined,
  ): void {
    this.#options.onHookOutcome?.({
      hook: hook.name,
      route: 'claude_code',
      event: hook.event,
      kind,
      ...processFacts(outcome),
      ...(said === '' ? {} : { message: firstLines(said) }),
      ...(systemMessage === undefined ? {} : { systemMessage }),
      ...(ctx.sessionId === undefined ? {} : { sessionId: ctx.sessionId }),
      tool: call.name,
      durationMs,
    });
  }
}

async function fileBefore(args: unknown, projectDir: string): Promise<FileBefore> {
  const path = (args as { path?: unknown } | null)?.path;
  if (typeof path !== 'string') return { existed: false, original: null };
  const file = isAbsolute(path) ? path : resolve(projectDir, path);
  // The path is the model's: opened without blocking (a FIFO), read only as a regular file, and
  // no further than the cap (a link to /dev/zero).
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK).catch(() => undefined);
  if (handle === undefined) return { existed: false, original: null };
  try {
    const stats = await handle.stat({ bigint: true });
    if (!stats.isFile() || stats.size > BigInt(ORIGINAL_FILE_CAP)) return { existed: true, original: null };
    const buffer = Buffer.alloc(Number(stats.size) + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    return { existed: true, original: bytesRead > stats.size ? null : buffer.toString('utf8', 0, bytesRead) };
  } catch {
    return { existed: true, original: null };
  } finally {
    await handle.close();
  }
}
