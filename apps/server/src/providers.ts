// LLM providers through the AI SDK, behind the harness's AiProvider. OpenAI-compatible covers
// Ollama, vLLM, llama.cpp, LM Studio and OpenRouter; OpenAI and Anthropic speak their own APIs.
// The harness runs the tools itself, so the SDK is asked for one step and returns the tool calls.
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import type { AiProvider, Message, ThinkRequest, ThinkResponse } from '@aleph/harness';
import { generateText, jsonSchema, tool, type LanguageModel, type ModelMessage, type ToolSet } from 'ai';
import type { Config } from './config.js';

export function toModelMessages(messages: readonly Message[]): ModelMessage[] {
  return messages.map((message): ModelMessage => {
    switch (message.role) {
      case 'user':
        return { role: 'user', content: message.content };
      case 'assistant':
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
      case 'tool':
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
      default: {
        const unreachable: never = message;
        return unreachable;
      }
    }
  });
}

const STOP_REASONS: Record<string, string> = {
  stop: 'end_turn',
  'tool-calls': 'tool_use',
  length: 'max_tokens',
};

export function aiSdkProvider(id: string, model: LanguageModel): AiProvider {
  return {
    id,
    async think(request: ThinkRequest, signal: AbortSignal): Promise<ThinkResponse> {
      const tools: ToolSet = {};
      for (const spec of request.tools) {
        tools[spec.name] = tool({ description: spec.description, inputSchema: jsonSchema(spec.inputSchema) });
      }
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
        stopReason: STOP_REASONS[result.finishReason] ?? result.finishReason,
        usage: { inputTokens: result.usage.inputTokens ?? 0, outputTokens: result.usage.outputTokens ?? 0 },
      };
    },
  };
}

export class ProviderConfigError extends Error {
  override readonly name = 'ProviderConfigError';
}

/** The configured provider, or undefined when none is configured (terminals still work). */
export function createProvider(
  agent: Config['agent'],
  env: NodeJS.ProcessEnv = process.env,
  modelOverride?: string,
): AiProvider | undefined {
  if (agent.provider === undefined) return undefined;
  const model = modelOverride ?? agent.model;
  if (model === undefined)
    throw new ProviderConfigError('[agent] provider is set but [agent].model is missing');
  const apiKey = agent.api_key_env === undefined ? undefined : env[agent.api_key_env];
  if (agent.api_key_env !== undefined && !apiKey) {
    throw new ProviderConfigError(
      `[agent].api_key_env names ${agent.api_key_env}, which is not set in the environment`,
    );
  }
  switch (agent.provider) {
    case 'openai-compatible': {
      if (agent.base_url === undefined)
        throw new ProviderConfigError('[agent].base_url is required for provider "openai-compatible"');
      const provider = createOpenAICompatible({
        name: 'openai-compatible',
        baseURL: agent.base_url,
        ...(apiKey ? { apiKey } : {}),
      });
      return aiSdkProvider(`openai-compatible:${model}`, provider.chatModel(model));
    }
    case 'openai': {
      const provider = createOpenAI({
        ...(agent.base_url ? { baseURL: agent.base_url } : {}),
        ...(apiKey ? { apiKey } : {}),
      });
      return aiSdkProvider(`openai:${model}`, provider.chat(model));
    }
    case 'anthropic': {
      const provider = createAnthropic({
        ...(agent.base_url ? { baseURL: agent.base_url } : {}),
        ...(apiKey ? { apiKey } : {}),
      });
      return aiSdkProvider(`anthropic:${model}`, provider(model));
    }
    default: {
      const unreachable: never = agent.provider;
      return unreachable;
    }
  }
}
