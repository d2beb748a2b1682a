// Runs a set of stop hooks for one stop attempt and folds their verdicts into a chain verdict,
// fail-open: a hook that errors is reported and ignored. Keeps the consecutive-block count per
// session so an endlessly blocking hook turns into a halt instead of an endless loop. A block
// after which the model did work (tool calls) before stopping again starts the count afresh: a
// Claude Code "Ralph loop" (a Stop hook that feeds the next prompt until its own end) is not stuck.
import type { StopHookHandler, StopHookVerdict } from '../stop-hooks.js';
import { capForModel } from './hook-output.js';
import { CONTINUE, sessionKey, type TurnVerifyContext, type VerifierVerdict } from '../turn-verifier.js';

export const DEFAULT_MAX_CONSECUTIVE_BLOCKS = 8;

export type HookErrorListener = (error: Extract<StopHookVerdict, { kind: 'error' }>) => void;

export interface HookRunnerOptions {
  /** Blocks in a row, with no tool call between them, before the verdict becomes a halt (8). */
  readonly maxConsecutiveBlocks?: number;
  readonly onHookError?: HookErrorListener;
  /** `SubagentStop` for a verifier that judges `spawn_agent` runs; by default `Stop`, or `SubagentStop` with a `parent`. */
  readonly event?: 'Stop' | 'SubagentStop';
  /** SubagentStop: the parent run's session, told to hooks as `session_id`/`transcript_path`. */
  readonly parent?: { readonly sessionId: string; readonly transcriptPath?: string | undefined } | undefined;
  /** The prompt's id, told to hooks as `prompt_id`. */
  readonly promptId?: string | undefined;
}

export class HookRunner {
  /** Per session: blocks in a row, and `toolCallsMade` when the last one was given. */
  readonly #blocks = new Map<string, { count: number; toolCalls: number }>();
  readonly #max: number;
  readonly #onHookError: HookErrorListener | undefined;
  readonly event: 'Stop' | 'SubagentStop';
  readonly #parent: HookRunnerOptions['parent'];
  readonly #promptId: string | undefined;

  constructor(options: HookRunnerOptions = {}) {
    this.#max = options.maxConsecutiveBlocks ?? DEFAULT_MAX_CONSECUTIVE_BLOCKS;
    this.#onHookError = options.onHookError;
    this.event = options.event ?? (options.parent ? 'SubagentStop' : 'Stop');
    this.#parent = options.parent;
    this.#promptId = options.promptId;
  }

  async run(
    hooks: readonly StopHookHandler[],
    ctx: TurnVerifyContext,
    signal: AbortSignal,
  ): Promise<VerifierVerdict> {
    if (ctx.stopReason === undefined || hooks.length === 0) return CONTINUE;
    const key = sessionKey(ctx);
    const last = this.#blocks.get(key);
    // Tool calls since the last block mean progress: the count starts again (still a stop after a block).
    const blockCount = last === undefined || ctx.toolCallsMade > last.toolCalls ? 0 : last.count;
    const hookCtx = {
      finalText: ctx.finalText,
      iterations: ctx.iterations,
      toolCallsMade: ctx.toolCallsMade,
      stopReason: ctx.stopReason,
      sessionId: ctx.sessionId,
      // Claude Code's rule: the model is continuing because its last stop was refused (by anything).
      stopHookActive: ctx.previousStopBlocked ?? last !== undefined,
      blockCount,
      projectDir: ctx.projectDir,
      transcriptPath: ctx.transcriptPath,
      permissionMode: ctx.permissionMode,
      event: this.event,
      parentSessionId: this.#parent?.sessionId,
      parentTranscriptPath: this.#parent?.transcriptPath,
      promptId: this.#promptId,
    };
    const verdicts = await Promise.all(hooks.map((hook) => hook.evaluate(hookCtx, signal)));
    signal.throwIfAborted();

    const blocks: { name: string; reason: string }[] = [];
    for (const [index, verdict] of verdicts.entries()) {
      const name = hooks[index]?.name ?? `hook ${index}`;
      switch (verdict.kind) {
        case 'allow':
          break;
        case 'halt':
          this.#blocks.delete(key);
          // `"continue": false`: the stop stands, ended with the hook's stopReason (Claude Code's rule).
          return verdict.stop === true
            ? { kind: 'halt', reason: verdict.reason, stop: true }
            : { kind: 'halt', reason: `stop hook "${name}" halted: ${verdict.reason}` };
        case 'block':
          blocks.push({ name, reason: verdict.reason });
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
    this.#blocks.set(key, { count, toolCalls: ctx.toolCallsMade });
    const names = blocks.map((block) => `"${block.name}"`).join(', ');
    const said = blocks.map((block) => block.reason).filter((reason) => reason !== '');
    if (count >= this.#max) {
      this.#blocks.delete(key);
      return {
        kind: 'halt',
        reason: `stop hooks blocked ${count} consecutive stop attempts (cap ${this.#max}); halting instead of looping. Last: ${names}${said.length > 0 ? `: ${said.join('; ').slice(0, 500)}` : ''}`,
      };
    }
    const firstLine = said[0]?.split('\n')[0]?.slice(0, 200);
    return {
      kind: 'veto',
      reason: `stop hook ${names} blocked the stop (${count} in a row)${firstLine ? `: ${firstLine}` : ''}`,
      // An empty reason is a block all the same (as in Claude Code); the model still learns who blocked.
      feedback: capForModel(
        blocks
          .map(
            (block) => block.reason || `Stop hook "${block.name}" blocked the stop without giving a reason.`,
          )
          .join('\n\n'),
      ),
    };
  }
}
