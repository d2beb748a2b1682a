// PREPARE's context budget: a turn never fails on context size. Over budget → compactToFit (stub
// old tool outputs and large tool-call arguments, then summarise the oldest messages with a pluggable compactor); still over →
// truncateToFit, a deterministic floor that always fits. The tool definitions, sent with every
// request, count in the budget: the history gets what they leave (at least a quarter of it).
import type { ContextBudgetOptions, Message, ToolCall, ToolSpec } from './types.js';

/** Tool calls' share of the estimate, per assistant message: over budget, every turn re-reads them all. */
const callChars = new WeakMap<readonly ToolCall[], number>();

/** What one message adds to the estimate, in characters (a token is taken as 4). */
export function messageChars(message: Message): number {
  const calls = message.role === 'assistant' ? message.toolCalls : undefined;
  if (calls === undefined || calls.length === 0) return message.content.length + 16;
  let chars = callChars.get(calls);
  if (chars === undefined) {
    chars = calls.reduce(
      (sum, call) => sum + JSON.stringify(call.args ?? {}).length + call.name.length + 16,
      0,
    );
    callChars.set(calls, chars);
  }
  return message.content.length + 16 + chars;
}

export function estimateTokens(messages: readonly Message[]): number {
  return Math.ceil(messages.reduce((chars, message) => chars + messageChars(message), 0) / 4);
}

const specTokens = new WeakMap<readonly ToolSpec[], number>();

/** What the tool definitions add to every request, in estimated tokens (measured once per list). */
export function toolSpecTokens(specs: readonly ToolSpec[]): number {
  let tokens = specTokens.get(specs);
  if (tokens === undefined) {
    tokens = specs.length === 0 ? 0 : Math.ceil(JSON.stringify(specs).length / 4);
    specTokens.set(specs, tokens);
  }
  return tokens;
}

/**
 * The history's budget beside tool definitions of `toolTokens`: what they leave of `maxTokens`, but
 * never under a quarter of it (the task and the newest results must still reach the model).
 */
export function historyBudget(
  options: ContextBudgetOptions | undefined,
  toolTokens: number,
): ContextBudgetOptions | undefined {
  if (options === undefined || toolTokens === 0) return options;
  const maxTokens = Math.max(options.maxTokens - toolTokens, Math.ceil(options.maxTokens / 4));
  return { ...options, maxTokens };
}

/** A run's history with its estimate kept as it grows: an append counts its message, `reset` all. */
export class History {
  #messages: Message[] = [];
  #chars = 0;
  get messages(): readonly Message[] {
    return this.#messages;
  }
  /** Always `estimateTokens(messages)`. */
  get tokens(): number {
    return Math.ceil(this.#chars / 4);
  }
  push(message: Message): void {
    this.#messages.push(message);
    this.#chars += messageChars(message);
  }
  reset(messages: readonly Message[]): void {
    this.#messages = [];
    this.#chars = 0;
    for (const message of messages) this.push(message);
  }
}

/** Units that must stay together: an assistant message with the tool results that answer it. */
function units(messages: readonly Message[]): Message[][] {
  const out: Message[][] = [];
  for (const message of messages) {
    const last = out.at(-1);
    if (message.role === 'tool' && last !== undefined) last.push(message);
    else out.push([message]);
  }
  return out;
}

export interface FitResult {
  readonly messages: readonly Message[];
  readonly mode: 'none' | 'compact' | 'truncate';
  readonly fromTokens: number;
  readonly toTokens: number;
}

/** One stub per elided output, the same object every turn: a provider's prompt cache sees it unchanged. */
const stubs = new WeakMap<Message, Message>();
function stubOf(message: Extract<Message, { role: 'tool' }>): Message {
  const known = stubs.get(message);
  if (known !== undefined) return known;
  const content = `[output of ${message.toolName} elided to fit the context: ${message.content.length} chars]`;
  const stub = { ...message, content };
  stubs.set(message, stub);
  return stub;
}

/** Stubs of assistant messages whose large tool-call arguments are elided, the same object every turn. */
const callStubs = new WeakMap<Message, Message>();
/** The message with each call's arguments over `stubOver` characters elided (a 3 MB `write_file`). */
function elideArgs(message: Extract<Message, { role: 'assistant' }>, stubOver: number, memo = true): Message {
  const known = memo ? callStubs.get(message) : undefined;
  if (known !== undefined) return known;
  const toolCalls = (message.toolCalls ?? []).map((call) => {
    const chars = JSON.stringify(call.args ?? {}).length;
    const args = { elided: `[arguments of ${call.name} elided to fit the context: ${chars} chars]` };
    return chars > stubOver ? { ...call, args } : call;
  });
  const stub = { ...message, toolCalls };
  if (memo) callStubs.set(message, stub);
  return stub;
}

/** The tool calls' share of the estimate is over `limit`. */
const largeArgs = (message: Message, limit: number): message is Extract<Message, { role: 'assistant' }> =>
  message.role === 'assistant' && messageChars(message) - message.content.length - 16 > limit;

export function compactToFit(
  messages: readonly Message[],
  options: ContextBudgetOptions,
): readonly Message[] {
  const stubOver = options.stubOver ?? 400;
  // Keep the newest unit's outputs intact: the model is acting on them now. Large arguments go
  // everywhere, the newest call's too: the call has run, and its result says what it did.
  const groups = units(messages);
  const keepFrom = messages.length - (groups.at(-1)?.length ?? 0);
  let compacted: Message[] = messages.map((message, index) => {
    if (largeArgs(message, stubOver)) return elideArgs(message, stubOver);
    if (message.role === 'tool' && index < keepFrom && message.content.length > stubOver)
      return stubOf(message);
    return message;
  });
  if (estimateTokens(compacted) <= options.maxTokens || options.compactor === undefined) return compacted;
  // Summarise the oldest half of the units after the task itself.
  const all = units(compacted);
  const head = all.slice(0, 1).flat();
  const middle = all.slice(1, Math.max(1, Math.floor(all.length / 2)));
  if (middle.length === 0) return compacted;
  const summary = options.compactor(middle.flat());
  compacted = [
    ...head,
    { role: 'user', content: `[summary of earlier work]\n${summary}` },
    ...all.slice(1 + middle.length).flat(),
  ];
  return compacted;
}

/** Deterministic floor: the task, a marker, and as many of the newest units as fit. */
export function truncateToFit(messages: readonly Message[], maxTokens: number): readonly Message[] {
  const all = units(messages);
  const first = all[0] ?? [];
  const kept: Message[][] = [];
  const marker = (dropped: number): Message => ({
    role: 'user',
    content: `[${dropped} earlier message(s) truncated to fit the context]`,
  });
  // The newest units that fit beside the task and a marker, counted as they are added (linear).
  let chars = [...first, marker(0)].reduce((sum, message) => sum + messageChars(message), 0);
  for (let index = all.length - 1; index >= 1; index -= 1) {
    const unit = all[index] ?? [];
    chars += unit.reduce((sum, message) => sum + messageChars(message), 0);
    if (Math.ceil(chars / 4) > maxTokens) break;
    kept.push(unit);
  }
  kept.reverse();
  const dropped = messages.length - first.length - kept.reduce((sum, unit) => sum + unit.length, 0);
  let result = [...first, ...(dropped > 0 ? [marker(dropped)] : []), ...kept.flat()];
  // Even the task alone is too big: cut message texts down, newest last, until it fits.
  let perMessage = Math.floor((maxTokens * 4) / Math.max(1, result.length));
  const original = result;
  while (estimateTokens(result) > maxTokens && perMessage > 8) {
    const limit = perMessage;
    result = original.map((message) => {
      const cut =
        message.content.length > limit
          ? { ...message, content: `${message.content.slice(0, limit)}…[cut]` }
          : message;
      return largeArgs(cut, limit) ? elideArgs(cut, limit, false) : cut;
    });
    perMessage = Math.floor(perMessage / 2);
  }
  return result;
}

/** `fromTokens`: the messages' estimate when the caller keeps one (a `History`). */
export function fitToBudget(
  messages: readonly Message[],
  options: ContextBudgetOptions | undefined,
  fromTokens = estimateTokens(messages),
): FitResult {
  if (options === undefined || fromTokens <= options.maxTokens)
    return { messages, mode: 'none', fromTokens, toTokens: fromTokens };
  const compacted = compactToFit(messages, options);
  const compactedTokens = estimateTokens(compacted);
  if (compactedTokens <= options.maxTokens)
    return { messages: compacted, mode: 'compact', fromTokens, toTokens: compactedTokens };
  const truncated = truncateToFit(compacted, options.maxTokens);
  return { messages: truncated, mode: 'truncate', fromTokens, toTokens: estimateTokens(truncated) };
}
