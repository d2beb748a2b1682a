// What `aleph run` prints, in words: how a run ended (with its turns, time and tokens), a turn's
// line (its tool calls, or the provider's failure), a tool's result (a shell's exit code), and a
// hook's outcome (an error with its exit code and stderr, a veto with its message). Pure functions
// of the agent.* events, so each line is tested without a server.
import type { TerminateReason, TokenUsage, TurnFigures, TurnStep } from '@aleph/harness';
import type { HookOutcome, HookRoute } from '@aleph/verification';

/**
 * An `agent.hook` event that is no hook run: a hook in the user's settings that will not run as
 * written (an event Aleph does not run, a typo'd event name, `onFailure`, disableAllHooks…).
 */
export interface HookWarning {
  readonly kind: 'warning';
  /** `git`: what the user's own git would run (a nested repository a run staged). */
  readonly route: HookRoute | 'git';
  /** Names the file (and the hook) it is about. */
  readonly message: string;
}

/**
 * Text from the model, a tool, a hook or the server, with its control characters made visible
 * (`^[`, `^M`, `\x9b`), and so are bidi controls (`\u202e`): an OSC 52 clipboard write, a title
 * change, a screen clear, a forged line or text shown reordered never reaches the user's terminal. Newlines and tabs stay. Everything `aleph` prints goes through it.
 */
export const neutralize = (text: string): string =>
  // eslint-disable-next-line no-control-regex
  text.replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, (char) => {
    const code = char.charCodeAt(0);
    if (code === 0x7f) return '^?';
    if (code < 0x20) return `^${String.fromCharCode(code + 0x40)}`;
    // Bidi controls (a terminal that does bidi would show what follows reordered) as \uXXXX.
    return code <= 0x9f ? `\\x${code.toString(16)}` : `\\u${code.toString(16).padStart(4, '0')}`;
  });

/** The same for text that must stay on one line (the live status line): newlines and tabs shown too. */
export const neutralizeLine = (text: string): string =>
  neutralize(text.replace(/\n/g, '^J').replace(/\t/g, '^I'));

/** What starts each line of the model's reply: no line of it can pass for one of `aleph`'s own. */
export const REPLY_GUTTER = '│ ';

/**
 * The model's reply as it streams, each line behind `REPLY_GUTTER` and neutralised: a reply line
 * such as `  ✓ shell → exit code 0` or `done: the model stopped` never reaches column 0.
 * Call the returned function with each piece as it comes.
 */
export function replyWriter(): (text: string) => string {
  let atLineStart = true;
  return (text) => {
    let out = '';
    for (const part of text.split(/(?<=\n)/)) {
      if (part === '') continue;
      if (atLineStart) out += REPLY_GUTTER;
      out += part;
      atLineStart = part.endsWith('\n');
    }
    return neutralize(out);
  };
}

export const firstLine = (text: string, max = 100): string => {
  const line = text.trim().split('\n')[0] ?? '';
  return line.length > max ? `${line.slice(0, max)}…` : line;
};

const plural = (count: number, word: string): string => `${count} ${word}${count === 1 ? '' : 's'}`;

function count(value: number): string {
  if (value < 1000) return `${value}`;
  return `${(value / 1000).toFixed(value < 100_000 ? 1 : 0)}k`;
}

const tokens = (value: number): string => `${count(value)} tokens`;

/** The end of a run in words: `the model stopped`, `halted by goal_gate: …`, `provider error: …`. */
export function describeEnd(reason: TerminateReason): string {
  switch (reason.kind) {
    case 'model_stop':
      return reason.stopReason === undefined
        ? 'the model stopped'
        : `the model stopped; a Stop hook ended the session: ${firstLine(reason.stopReason, 200)}`;
    case 'halted':
      return `halted by ${reason.by}: ${firstLine(reason.reason, 200)}`;
    case 'max_iterations':
      return 'reached the turn cap ([agent] max_iterations)';
    case 'consecutive_failures':
      return `${reason.count} turns in a row failed${reason.lastError ? `; last: ${firstLine(reason.lastError, 200)}` : ''}`;
    case 'cancelled':
      return 'cancelled';
    case 'interrupted':
      return 'interrupted (the server stopped during the run)';
    case 'error': {
      const { error } = reason;
      switch (error.kind) {
        case 'llm':
          return `provider error: ${firstLine(error.message, 200)}`;
        case 'stalled_turn':
          return `a turn stalled for ${(error.elapsedMs / 1000).toFixed(1)} s ([agent] turn_timeout_secs)`;
        case 'cancelled':
          return 'cancelled';
        case 'tool':
        case 'session':
          return `${error.kind} error: ${firstLine(error.message, 200)}`;
        default: {
          const unreachable: never = error;
          return String(unreachable);
        }
      }
    }
    default: {
      const unreachable: never = reason;
      return String(unreachable);
    }
  }
}

/**
 * `done: the model stopped (4 turns, 12.3 s, 8.1k tokens) · the model's verdict PASS · 7.9k in (6.0k cached),
 * 200 out · first token 0.4 s · $0.0210`: the tokens in full when the run reports them, the mean time
 * to first token over its turns, the cost when the config has a price for the model.
 */
export function endLine(done: {
  terminateReason: TerminateReason;
  iterations: number;
  elapsedMs?: number | undefined;
  totalTokens?: number | undefined;
  usage?: TokenUsage | undefined;
  turns?: readonly TurnFigures[] | undefined;
  costUsd?: number | undefined;
  selfVerdict?: string | null | undefined;
}): string {
  const figures = [
    plural(done.iterations, 'turn'),
    ...(done.elapsedMs === undefined ? [] : [`${(done.elapsedMs / 1000).toFixed(1)} s`]),
    ...(done.totalTokens === undefined ? [] : [tokens(done.totalTokens)]),
  ];
  const { usage } = done;
  const firsts = (done.turns ?? []).flatMap((turn) =>
    turn.firstTokenMs === undefined ? [] : [turn.firstTokenMs],
  );
  const mean = firsts.reduce((sum, value) => sum + value, 0) / Math.max(1, firsts.length);
  const tail = [
    ...(done.selfVerdict ? [`the model's verdict ${done.selfVerdict}`] : []),
    ...(usage === undefined
      ? []
      : [
          `${count(usage.inputTokens)} in${usage.cachedInputTokens ? ` (${count(usage.cachedInputTokens)} cached)` : ''}, ${count(usage.outputTokens)} out`,
        ]),
    ...(firsts.length === 0 ? [] : [`first token ${(mean / 1000).toFixed(1)} s`]),
    ...(done.costUsd === undefined ? [] : [`$${done.costUsd.toFixed(4)}`]),
  ];
  const head = done.terminateReason.kind === 'model_stop' ? 'done' : 'ended';
  return [`${head}: ${describeEnd(done.terminateReason)} (${figures.join(', ')})`, ...tail].join(' · ');
}

/**
 * A turn: `turn 2: 3 tool calls (1 failed), vetoed`, or why it failed: `turn 1: the provider
 * failed: …`. `calls` counts the results seen this turn (the step counts only the successes).
 */
export function stepLine(step: TurnStep, calls?: { ok: number; failed: number }): string {
  // The harness's words for a reply that was not a stop (cut off, empty, no finish) start "the reply".
  if (step.error?.startsWith('the reply '))
    return `turn ${step.iteration}: ${firstLine(step.error, 200)}; not a stop, the model was told to go on`;
  if (step.error !== undefined)
    return `turn ${step.iteration}: the provider failed: ${firstLine(step.error, 200)}`;
  const total = calls === undefined ? step.executed : calls.ok + calls.failed;
  const parts = [
    calls === undefined
      ? `${plural(step.executed, 'tool call')} ok`
      : `${plural(total, 'tool call')}${calls.failed > 0 ? ` (${calls.failed} failed)` : ''}`,
  ];
  if (step.vetoed) parts.push('vetoed');
  if (step.splitChild) parts.push(`sub-agent ${step.splitChild}`);
  return `turn ${step.iteration}: ${parts.join(', ')}`;
}

/** A tool's result; a shell's says how the command ended: `✗ shell → exit code 3 · make: *** …`. */
export function toolLine(tool: {
  name: string;
  ok: boolean;
  output: string;
  end?: string | undefined;
}): string {
  const mark = tool.ok ? '✓' : '✗';
  if (tool.end === undefined) return `  ${mark} ${tool.name} → ${firstLine(tool.output)}`;
  const body = firstLine(tool.output.slice(0, Math.max(0, tool.output.lastIndexOf('\n['))));
  return `  ${mark} ${tool.name} → ${tool.end}${body ? ` · ${body}` : ''}`;
}

/**
 * A hook's outcome worth a line (an allow says nothing unless it carries a message for the user);
 * a warning about the hooks' settings is its own `⚠` line.
 */
export function hookLines(event: HookOutcome | HookWarning): string[] {
  return event.kind === 'warning' ? [`  ⚠ ${firstLine(event.message, 400)}`] : outcomeLines(event);
}

function outcomeLines(outcome: HookOutcome): string[] {
  const name = `${outcome.event} hook "${outcome.hook}"${outcome.tool ? ` (${outcome.tool})` : ''}`;
  const lines: string[] = [];
  const how = [
    ...(outcome.exitCode === undefined ? [] : [`exit code ${outcome.exitCode}`]),
    ...(outcome.signal === undefined ? [] : [`signal ${outcome.signal}`]),
  ].join(', ');
  switch (outcome.kind) {
    case 'error': {
      // The exit code is said once, in the parentheses.
      const message = (outcome.message ?? '').replace(/^exited with code \d+:?\s*/, '');
      lines.push(
        `  ⚠ ${name} failed${how ? ` (${how})` : ''}${message ? `: ${firstLine(message, 200)}` : ''}`,
      );
      for (const line of (outcome.stderr ?? '').split('\n').filter(Boolean).slice(0, 3))
        if (!lines[0]!.includes(line.trim())) lines.push(`      ${firstLine(line, 200)}`);
      break;
    }
    case 'block':
    case 'halt':
    case 'deny':
      // A stop hook's block or halt is the verifier's verdict, printed with its reason there;
      // a tool hook's is not.
      if (outcome.event === 'Stop' || outcome.event === 'SubagentStop') break;
      lines.push(
        `  ⚑ ${name} ${outcome.kind === 'halt' ? 'halted the run' : outcome.kind === 'deny' ? 'denied the call' : 'blocked'}${how ? ` (${how})` : ''}: ${firstLine(outcome.message ?? '', 200)}`,
      );
      break;
    case 'rewrite':
      lines.push(`  ✎ ${name} rewrote the arguments`);
      break;
    case 'feedback':
      // What the model reads next from a tool hook (additionalContext, a PostToolUse block).
      lines.push(`  ↳ ${name} told the model: ${firstLine(outcome.message ?? '', 200)}`);
      break;
    case 'allow':
      break;
    default: {
      const unreachable: never = outcome.kind;
      lines.push(String(unreachable));
    }
  }
  if (outcome.systemMessage) lines.push(`  ℹ ${name}: ${firstLine(outcome.systemMessage, 200)}`);
  return lines;
}
