// The adapter as it was before issue 18 (generateText every turn, the whole history converted
// again), kept only so the bench can show what the LanguageModelV3 path saves.
import type { LanguageModelV3 } from '@ai-sdk/provider';
import type { AiProvider, Message, ThinkRequest, ThinkResponse } from '@aleph/harness';
import { generateText, jsonSchema, tool, type ModelMessage, type ToolSet } from 'ai';

/** The pre-#18 conversion; providers.test.ts checks the new adapter's wire body against it. */
export function toModelMessages(messages: readonly Message[]): ModelMessage[] {
  return messages.map((message): ModelMessage => {
    if (message.role === 'user') return { role: 'user', content: message.content };
    if (message.role === 'assistant')
      return {
        role: 'assistant',
        content: [
          ...(message.content ? [{ type: 'text' as const, text: message.content }] : []),
          ...(message.toolCalls ?? []).map((call) => ({
            type: 'tool-call' as const,
            toolCallId: call.id,
            toolName: call.name,
            input: call.args,
          })),
        ],
      };
    return {
      role: 'tool',
      content: [
        {
          type: 'tool-result',
          toolCallId: message.toolCallId,
          toolName: message.toolName,
          output: message.isError
            ? { type: 'error-text', value: message.content }
            : { type: 'text', value: message.content },
        },
      ],
    };
  });
}

export function legacyProvider(model: LanguageModelV3): AiProvider {
  return {
    id: 'legacy',
    async think(request: ThinkRequest, signal: AbortSignal): Promise<ThinkResponse> {
      const tools: ToolSet = {};
      for (const spec of request.tools)
        tools[spec.name] = tool({ description: spec.description, inputSchema: jsonSchema(spec.inputSchema) });
      const result = await generateText({
        model,
        system: request.system,
        messages: toModelMessages(request.messages),
        tools,
        abortSignal: signal,
        maxRetries: 1,
      });
      return {
        text: result.text,
        toolCalls: result.toolCalls.map((call) => ({
          id: call.toolCallId,
          name: call.toolName,
          args: call.input,
        })),
        stopReason: result.finishReason === 'tool-calls' ? 'tool_use' : 'end_turn',
        usage: { inputTokens: result.usage.inputTokens ?? 0, outputTokens: result.usage.outputTokens ?? 0 },
      };
    },
  };
}
