// Test doubles for consumers of @aleph/harness: a provider that plays a script and records every
// request it was sent (and one that streams). For loop logic only — real providers are tested against their wire format.
import { ReplyAssembler } from './think.js';
import type {
  AiProvider,
  ReplyPart,
  StopReason,
  ThinkRequest,
  ThinkResponse,
  TokenUsage,
  ToolCall,
} from './types.js';

export type ScriptStep =
  | ThinkResponse
  | ((request: ThinkRequest, index: number, signal: AbortSignal) => ThinkResponse | Promise<ThinkResponse>);

export class ScriptedProvider implements AiProvider {
  readonly id = 'scripted';
  readonly requests: ThinkRequest[] = [];
  readonly #steps: readonly ScriptStep[];
  readonly #repeatLast: boolean;

  /** With `repeatLast`, the last step answers every request past the end of the script. */
  constructor(steps: readonly ScriptStep[], options: { repeatLast?: boolean } = {}) {
    this.#steps = steps;
    this.#repeatLast = options.repeatLast ?? false;
  }

  async think(request: ThinkRequest, signal: AbortSignal): Promise<ThinkResponse> {
    const index = this.requests.length;
    const recorded = { ...request, messages: [...request.messages] }; // the live history grows later
    this.requests.push(recorded);
    const step = this.#steps[index] ?? (this.#repeatLast ? this.#steps.at(-1) : undefined);
    if (step === undefined) throw new Error(`script exhausted at request ${index + 1}`);
    return typeof step === 'function' ? await step(recorded, index, signal) : step;
  }
}

let nextId = 0;
export function callTool(name: string, args: unknown = {}, text = ''): ThinkResponse {
  nextId += 1;
  const call: ToolCall = { id: `call_${nextId}`, name, args };
  return { text, toolCalls: [call], stopReason: 'tool_use', usage: { inputTokens: 10, outputTokens: 5 } };
}

export function callTools(calls: readonly { name: string; args?: unknown }[], text = ''): ThinkResponse {
  return {
    text,
    toolCalls: calls.map((call) => ({ id: `call_${(nextId += 1)}`, name: call.name, args: call.args ?? {} })),
    stopReason: 'tool_use',
    usage: { inputTokens: 10, outputTokens: 5 },
  };
}

export function stop(text = 'Done.\nVERDICT: PASS'): ThinkResponse {
  return { text, toolCalls: [], stopReason: 'end_turn', usage: { inputTokens: 10, outputTokens: 5 } };
}

/** One streamed reply: its parts, or a function of the request's signal giving them (delays, breaks). */
export type StreamStep = readonly ReplyPart[] | ((signal: AbortSignal) => AsyncIterable<ReplyPart>);

/**
 * A provider that streams: each request plays the next step's parts in order. `think` (for callers
 * that want the whole reply) assembles the same parts.
 */
export class StreamingScriptedProvider implements AiProvider {
  readonly id = 'scripted-stream';
  readonly requests: ThinkRequest[] = [];
  readonly #steps: readonly StreamStep[];

  constructor(steps: readonly StreamStep[]) {
    this.#steps = steps;
  }

  stream(request: ThinkRequest, signal: AbortSignal): AsyncIterable<ReplyPart> {
    const index = this.requests.length;
    this.requests.push({ ...request, messages: [...request.messages] });
    const step = this.#steps[index];
    if (step === undefined) throw new Error(`script exhausted at request ${index + 1}`);
    if (typeof step === 'function') return step(signal);
    return (async function* () {
      for (const part of step) yield await Promise.resolve(part); // one part a tick, as a socket gives them
    })();
  }

  async think(request: ThinkRequest, signal: AbortSignal): Promise<ThinkResponse> {
    const assembler = new ReplyAssembler();
    for await (const part of this.stream(request, signal)) assembler.add(part);
    return assembler.response();
  }
}

/** A reply as stream parts: the text in `chunks`, then the calls, usage and finish. */
export function streamed(
  chunks: readonly string[],
  options: { calls?: readonly ToolCall[]; usage?: TokenUsage; stopReason?: StopReason } = {},
): ReplyPart[] {
  const calls = options.calls ?? [];
  return [
    ...chunks.map((text): ReplyPart => ({ type: 'text', text })),
    ...calls.map((call): ReplyPart => ({ type: 'tool-call', call })),
    { type: 'usage', usage: options.usage ?? { inputTokens: 10, outputTokens: 5 } },
    { type: 'finish', stopReason: options.stopReason ?? (calls.length > 0 ? 'tool_use' : 'end_turn') },
  ];
}
