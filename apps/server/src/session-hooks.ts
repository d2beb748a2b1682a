// Claude Code's session hooks around one run: SessionStart (once a session: `startup` for a new one,
// `resume` for a follow-up) and UserPromptSubmit before the first turn, their context added to the
// system prompt; a blocked prompt or a `"continue": false` ends the run before it begins, halted with
// the hook's reason. When the run ends: Notification (`idle_prompt`: the session waits for the user),
// then SessionEnd (`other`). PreCompact before each compaction. No hook failure ends a run.
import type { RunResult } from '@aleph/harness';
import type { ClaudeCodeSessionHooks, SessionHookDecision } from '@aleph/verification';

export interface RunSessionContext {
  readonly sessionId: string;
  readonly transcriptPath?: string | undefined;
  readonly model?: string | undefined;
}

/** What the run starts with: the context hooks added, or the end they chose. */
export type SessionOpening =
  | { readonly kind: 'open'; readonly context: string }
  | { readonly kind: 'refused'; readonly result: RunResult };

export class RunSessionHooks {
  readonly #hooks: ClaudeCodeSessionHooks;
  readonly #session: RunSessionContext;

  constructor(hooks: ClaudeCodeSessionHooks, session: RunSessionContext) {
    this.#hooks = hooks;
    this.#session = session;
  }

  /** SessionStart (unless `source` is undefined: a run taken over mid-way), then UserPromptSubmit. */
  async open(prompt: string, source: 'startup' | 'resume' | undefined): Promise<SessionOpening> {
    const contexts: string[] = [];
    const take = (decision: SessionHookDecision, event: string): RunResult | undefined => {
      switch (decision.kind) {
        case 'continue':
          if (decision.context !== undefined)
            contexts.push(`## From the ${event} hooks\n\n${decision.context}`);
          return undefined;
        case 'block':
          return this.#refused(`${event} hook blocked the prompt`, decision.reason);
        case 'stop':
          return this.#refused(`${event} hook`, decision.reason);
        default: {
          const unreachable: never = decision;
          return unreachable;
        }
      }
    };
    if (source !== undefined) {
      const started = await this.#hooks.sessionStart({ ...this.#context(), source, ...this.#model() });
      const end = take(started, 'SessionStart');
      if (end !== undefined) return { kind: 'refused', result: end };
    }
    const submitted = await this.#hooks.userPromptSubmit({ ...this.#context(), prompt });
    const end = take(submitted, 'UserPromptSubmit');
    if (end !== undefined) return { kind: 'refused', result: end };
    return {
      kind: 'open',
      context: contexts.length === 0 ? '' : `# Context from the session's hooks\n\n${contexts.join('\n\n')}`,
    };
  }

  /** PreCompact, trigger `auto`: the history is about to be compacted to fit. */
  async beforeCompaction(info: { sessionId: string }): Promise<void> {
    await this.#hooks.preCompact({ ...this.#context(), sessionId: info.sessionId, trigger: 'auto' });
  }

  /** The run ended: Notification (idle_prompt), then SessionEnd (other). */
  async close(result: RunResult): Promise<void> {
    const how = result.terminateReason.kind.replace(/_/g, ' ');
    await this.#hooks.notification({
      ...this.#context(),
      message: `The run ended (${how}); the session waits for your input`,
      notificationType: 'idle_prompt',
    });
    await this.#hooks.sessionEnd({ ...this.#context(), reason: 'other' });
  }

  #context(): { sessionId: string; transcriptPath?: string } {
    const { sessionId, transcriptPath } = this.#session;
    return { sessionId, ...(transcriptPath === undefined ? {} : { transcriptPath }) };
  }

  #model(): { model?: string } {
    return this.#session.model === undefined ? {} : { model: this.#session.model };
  }

  #refused(by: string, reason: string): RunResult {
    return {
      sessionId: this.#session.sessionId,
      terminateReason: { kind: 'halted', by, reason },
      iterations: 0,
      totalTokens: 0,
      toolTimeline: [],
      finalText: '',
    };
  }
}
