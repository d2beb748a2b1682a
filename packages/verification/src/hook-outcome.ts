// What a caller sees of every hook run: one record per run, whatever the verdict, so a server can
// publish it as an event and a CLI can print it. A hook that fails open is never silent this way.

/** Which configuration a hook came from; it decides how exit code 3 is read. */
export type HookRoute = 'stop_hooks' | 'claude_code' | 'gate' | 'extension';

export type HookEventName =
  | 'Stop'
  | 'SubagentStop'
  | 'PreToolUse'
  | 'PostToolUse'
  | 'PostToolUseFailure'
  | 'SessionStart'
  | 'UserPromptSubmit'
  | 'PreCompact'
  | 'Notification'
  | 'SessionEnd';

export interface HookOutcome {
  /** The hook's name: the `[[stop_hooks]]` name, or `<settings file>#Event[i].hooks[j]`. */
  readonly hook: string;
  readonly route: HookRoute;
  readonly event: HookEventName;
  /**
   * allow/block/halt/error for stop hooks; allow/deny/rewrite/feedback/error for tool hooks, and
   * halt for a tool hook's `"continue": false` (the run stops; `message` is its `stopReason`).
   */
  readonly kind: 'allow' | 'block' | 'halt' | 'error' | 'deny' | 'rewrite' | 'feedback';
  readonly exitCode?: number;
  readonly signal?: string;
  /** The first lines of stderr (at most 5 lines, 500 characters). */
  readonly stderr?: string;
  /** The first lines of the reason (block, halt, deny) or the error message. */
  readonly message?: string;
  /** Claude Code's `systemMessage`: shown to the user, never to the model. */
  readonly systemMessage?: string;
  readonly sessionId?: string;
  /** The tool a PreToolUse/PostToolUse hook ran for (Aleph's name). */
  readonly tool?: string;
  readonly durationMs: number;
}

export type HookOutcomeListener = (outcome: HookOutcome) => void;

/** The first `lines` lines of `text`, at most `characters` long, for a one-line report. */
export function firstLines(text: string, lines = 5, characters = 500): string {
  const head = text.trim().split('\n').slice(0, lines).join('\n');
  return head.length > characters ? `${head.slice(0, characters)}…` : head;
}
