// Test doubles for consumers of @aleph/harness: a provider that plays a script and records every
// request it was sent. For loop logic only — real providers are tested against their wire format.
import type { AiProvider, ThinkRequest, ThinkResponse, ToolCall } from './types.js';

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
