// The bench's model: a LanguageModelV3 that answers at once, K tool calls a step until step N, then
// a stop. It records nothing (ai/test's MockLanguageModelV3 keeps every call's options, which would
// count its own memory against the loop that drives it); every system in the bench gets the same one.
import type {
  LanguageModelV3,
  LanguageModelV3GenerateResult,
  LanguageModelV3StreamPart,
} from '@ai-sdk/provider';
import type { ThinkResponse } from '@aleph/harness';

const usage: LanguageModelV3GenerateResult['usage'] = {
  inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 5, text: 5, reasoning: 0 },
};

/** A step's reply as the stream parts a provider would send (text, or K calls, then the finish). */
function streamOf(result: LanguageModelV3GenerateResult): ReadableStream<LanguageModelV3StreamPart> {
  const parts: LanguageModelV3StreamPart[] = [{ type: 'stream-start', warnings: [] }];
  for (const part of result.content) {
    if (part.type === 'text') {
      parts.push({ type: 'text-start', id: 't' }, { type: 'text-delta', id: 't', delta: part.text });
      parts.push({ type: 'text-end', id: 't' });
    } else if (part.type === 'tool-call') parts.push(part);
  }
  parts.push({ type: 'finish', usage: result.usage, finishReason: result.finishReason });
  return new ReadableStream({
    start(controller) {
      for (const part of parts) controller.enqueue(part);
      controller.close();
    },
  });
}

export function instantModel(steps: number, callsPerStep: number): LanguageModelV3 {
  let step = 0;
  const model: LanguageModelV3 = {
    specificationVersion: 'v3',
    provider: 'bench',
    modelId: 'instant',
    supportedUrls: {},
    doGenerate: () => {
      step += 1;
      if (step >= steps)
        return Promise.resolve({
          content: [{ type: 'text', text: 'done' }],
          finishReason: { unified: 'stop', raw: 'stop' },
          usage,
          warnings: [],
        });
      return Promise.resolve({
        content: Array.from({ length: callsPerStep }, (_, index) => ({
          type: 'tool-call' as const,
          toolCallId: `call_${step}_${index}`,
          toolName: 'noop',
          input: JSON.stringify({ n: step, i: index }),
        })),
        finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
        usage,
        warnings: [],
      });
    },
    doStream: async (options) => ({ stream: streamOf(await model.doGenerate(options)) }),
  };
  return model;
}

/** The same script one level up, for the core-only line: a provider with nothing to convert. */
export function instantThink(steps: number, callsPerStep: number): () => ThinkResponse {
  let step = 0;
  return () => {
    step += 1;
    if (step >= steps)
      return {
        text: 'done',
        toolCalls: [],
        stopReason: 'end_turn',
        usage: { inputTokens: 10, outputTokens: 5 },
      };
    return {
      text: '',
      toolCalls: Array.from({ length: callsPerStep }, (_, index) => ({
        id: `call_${step}_${index}`,
        name: 'noop',
        args: { n: step, i: index },
      })),
      stopReason: 'tool_use',
      usage: { inputTokens: 10, outputTokens: 5 },
    };
  };
}
