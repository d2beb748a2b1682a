// LLM providers through the AI SDK, behind the harness's AiProvider. OpenAI-compatible covers
// Ollama, vLLM, llama.cpp, LM Studio and OpenRouter; OpenAI and Anthropic speak their own APIs.
// The adapter talks to the model at the LanguageModelV3 level (`doStream` for the harness's reply
// stream, `doGenerate` for a whole reply): each message is
// converted once and appended to a prompt cached per history, so a turn costs its new messages, not
// the whole history (generateText re-converted and zod-validated the whole prompt every turn). It
// keeps what generateText gave: 429/5xx retried with backoff honouring retry-after, abort, usage and
// finish reasons. A failure that retrying cannot fix throws FatalProviderError: the run ends at once.
// The provider packages and the SDK's retry helpers are imported at a provider's first call, not at
// start: a server that configures one provider, or none, does not hold the others in memory.
import {
  APICallError,
  LoadAPIKeyError,
  LoadSettingError,
  type LanguageModelV3,
  type LanguageModelV3FinishReason,
  type LanguageModelV3FunctionTool,
  type LanguageModelV3GenerateResult,
  type LanguageModelV3Message,
  type LanguageModelV3StreamPart,
  type LanguageModelV3Usage,
} from '@ai-sdk/provider';
import type * as ProviderUtils from '@ai-sdk/provider-utils';
import {
  FatalProviderError,
  type AiProvider,
  type Message,
  type ReplyStream,
  type StopReason,
  type ThinkRequest,
  type ThinkResponse,
  type TokenUsage,
  type ToolCall,
  type ToolSpec,
} from '@aleph/harness';
import type { Config } from './config.js';
import type * as HttpFetchModule from './http-fetch.js';

/** One harness message as the model's prompt message; what generateText's conversion produced. */
function toPromptMessage(message: Message): LanguageModelV3Message {
  switch (message.role) {
    case 'user':
      return { role: 'user', content: [{ type: 'text', text: message.content }] };
    case 'assistant':
      return {
        role: 'assistant',
        content: [
          // Whitespace alone is no text: Anthropic refuses a text block without any.
          ...(message.content.trim() ? [{ type: 'text' as const, text: message.content }] : []),
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
}

interface CachedPrompt {
  readonly system: string;
  /** The harness messages converted so far, by identity: the cache's own array, append-only. */
  readonly source: Message[];
  /** The caller's array the prompt was last built from (the run's live history, usually). */
  origin: readonly Message[];
  /** The system message, then one prompt message per source message. */
  prompt: LanguageModelV3Message[];
}

/**
 * Prompts cached per history, keyed by the history's first message (one per run, so concurrent runs
 * on one provider do not share, and a finished run's cache goes with its messages). A turn costs its
 * new messages: the same array as last time (the harness's history, only appended to between
 * rewrites) is checked in O(1) and its new messages converted; another array (a compaction, a
 * guardrail) is compared by identity and the prompt rebuilt, in a new array, from the first change.
 * The prompt is handed out as is, not copied (O(history) a turn): the model reads it during the call
 * and must not change it (the AI SDK's providers only read it); a kept prompt only ever grows.
 */
export class PromptCache {
  readonly #byFirstMessage = new WeakMap<Message, CachedPrompt>();
  /** What a rewrite cut from a prompt, converted: a message that comes back is not converted again. */
  readonly #cut = new WeakMap<Message, LanguageModelV3Message>();

  build(system: string, messages: readonly Message[]): LanguageModelV3Message[] {
    const first = messages[0];
    let cached = first === undefined ? undefined : this.#byFirstMessage.get(first);
    if (cached === undefined || cached.system !== system) {
      cached = { system, source: [], origin: messages, prompt: [{ role: 'system', content: system }] };
      if (first !== undefined) this.#byFirstMessage.set(first, cached);
    }
    const { source } = cached;
    const converted = source.length;
    const appended = // a shortened array or prompt fails these checks and is compared below
      messages === cached.origin &&
      messages[converted - 1] === source[converted - 1] &&
      cached.prompt.length === converted + 1;
    if (!appended) {
      let same = 0;
      const shared = Math.min(converted, messages.length, cached.prompt.length - 1);
      while (same < shared && source[same] === messages[same]) same += 1;
      if (same < converted) {
        for (let index = same; index < converted && index + 1 < cached.prompt.length; index += 1)
          this.#cut.set(source[index]!, cached.prompt[index + 1]!);
        source.length = same;
        cached.prompt = cached.prompt.slice(0, same + 1);
      }
      cached.origin = messages;
    }
    const { prompt } = cached;
    for (let index = source.length; index < messages.length; index += 1) {
      source.push(messages[index]!);
      prompt.push(this.#cut.get(messages[index]!) ?? toPromptMessage(messages[index]!));
    }
    return prompt;
  }
}

/**
 * The AI SDK's unified finish reason as ours. Its `stop` also covers Anthropic's `pause_turn` (a
 * paused turn to resume, not an end) and a stop with no raw reason, so `end_turn` is kept for the
 * model's explicit stop only: OpenAI `stop`, Anthropic `end_turn`/`stop_sequence`. A missing or
 * unknown finish (OpenAI-compatible `null`) is the SDK's `other` (its former `unknown`), never a stop;
 * `function_call` is its `tool-calls`.
 */
const EXPLICIT_STOPS: ReadonlySet<string> = new Set(['stop', 'end_turn', 'stop_sequence']);
const STOP_REASONS: Record<LanguageModelV3FinishReason['unified'], StopReason> = {
  stop: 'end_turn',
  'tool-calls': 'tool_use',
  length: 'max_tokens',
  'content-filter': 'content_filter',
  error: 'error',
  other: 'other',
};

/** generateText reads an empty input as `{}`; an input that is not JSON goes to the tool's validation. */
/** How deep a call's arguments may nest: deeper ones are answered as invalid, never walked. */
const MAX_ARGS_DEPTH = 100;

/**
 * A call's arguments: its JSON, or the text as it came when that is not JSON or nests deeper than
 * MAX_ARGS_DEPTH (the tool then answers invalid arguments; what logs, hooks and tools do with
 * arguments walks them recursively, and a reply's 200,000 nested brackets would overflow the stack).
 */
function parseToolInput(input: string): unknown {
  if (input.trim() === '') return {};
  try {
    const args: unknown = JSON.parse(input);
    return nestsDeeper(args, MAX_ARGS_DEPTH) ? input : args;
  } catch {
    return input;
  }
}

function nestsDeeper(value: unknown, limit: number): boolean {
  const pending: [unknown, number][] = [[value, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth] = next;
    if (item === null || typeof item !== 'object') continue;
    if (depth >= limit) return true;
    for (const child of Object.values(item)) pending.push([child, depth + 1]);
  }
  return false;
}

function toThinkResponse(result: LanguageModelV3GenerateResult): ThinkResponse {
  let text = '';
  const toolCalls: ToolCall[] = [];
  for (const part of result.content) {
    if (part.type === 'text') text += part.text;
    else if (part.type === 'tool-call' && part.providerExecuted !== true)
      toolCalls.push({ id: part.toolCallId, name: part.toolName, args: parseToolInput(part.input) });
  }
  return { text, toolCalls, ...stopReasonOf(result.finishReason), usage: usageOf(result.usage) };
}

function toFunctionTools(specs: readonly ToolSpec[]): LanguageModelV3FunctionTool[] {
  return specs.map((spec) => ({
    type: 'function',
    name: spec.name,
    description: spec.description,
    inputSchema: spec.inputSchema,
  }));
}

/**
 * What a failure means. `fatal`: no retry, the run ends (401/403, an unknown model, another 4xx the
 * same request cannot recover from, a bad URL, an unresolvable host, a missing key). `refused`:
 * nothing listens at the URL; retried briefly (a local server restarting), then fatal. `retry`:
 * 429, 408/409, 5xx, a reset connection; retried with backoff, then a failure the watchdog counts.
 * `failure`: anything else (an unreadable response), counted by the watchdog at once.
 */
type FailureKind = 'fatal' | 'refused' | 'retry' | 'failure';

const MODEL_NOT_FOUND =
  /model_not_found|unknown model|model\b[^\n]{0,80}\b(not found|does not exist|not exist)/i;

function errorCode(error: unknown): string | undefined {
  const seen = new Set<unknown>();
  for (let current = error; current instanceof Error && !seen.has(current); current = current.cause) {
    seen.add(current);
    const code = (current as { code?: unknown }).code;
    if (typeof code === 'string') return code;
  }
  return undefined;
}

export function classifyFailure(error: unknown): FailureKind {
  if (bodyTooLarge(error)) return 'fatal'; // the same request would bring the same reply
  if (LoadAPIKeyError.isInstance(error) || LoadSettingError.isInstance(error)) return 'fatal';
  if (APICallError.isInstance(error)) {
    const status = error.statusCode;
    if (MODEL_NOT_FOUND.test(`${error.message} ${error.responseBody ?? ''}`)) return 'fatal';
    if (status === undefined) {
      const code = errorCode(error.cause);
      if (code === 'ENOTFOUND' || code === 'ERR_INVALID_URL') return 'fatal';
      if (code === 'ECONNREFUSED' || code === 'ConnectionRefused') return 'refused';
      return error.isRetryable ? 'retry' : 'failure';
    }
    if (error.isRetryable) return 'retry';
    return status >= 400 && status < 500 ? 'fatal' : 'failure';
  }
  if (errorCode(error) === 'ERR_INVALID_URL' || /invalid url|failed to parse url/i.test(String(error)))
    return 'fatal';
  return 'failure';
}

/** `retry-after-ms` or `retry-after` (seconds or a date) when the server sends one, up to a minute. */
export function retryDelayMs(error: unknown, backoffMs: number): number {
  const headers = APICallError.isInstance(error) ? error.responseHeaders : undefined;
  if (headers === undefined) return backoffMs;
  const afterMs = Number.parseFloat(headers['retry-after-ms'] ?? '');
  const afterSeconds = headers['retry-after'];
  let ms = Number.isNaN(afterMs) ? undefined : afterMs;
  if (ms === undefined && afterSeconds !== undefined) {
    const seconds = Number.parseFloat(afterSeconds);
    ms = Number.isNaN(seconds) ? Date.parse(afterSeconds) - Date.now() : seconds * 1000;
  }
  return ms !== undefined && ms >= 0 && ms <= 60_000 ? ms : backoffMs;
}

/** The longest provider failure a turn's error quotes. */
const MAX_ERROR_CHARS = 2000;

function excerpt(text: string, max = 200): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}

/** The provider's own words: status, message, a short excerpt of the body, the URL when unreachable. */
function describe(error: unknown): string {
  if (!APICallError.isInstance(error)) return error instanceof Error ? error.message : String(error);
  if (error.statusCode === undefined) return `${error.message} (${error.url})`;
  const body = error.responseBody ? ` — ${excerpt(error.responseBody)}` : '';
  return `HTTP ${error.statusCode}: ${error.message}${body}`;
}

export interface RetryOptions {
  /** Retries of a 429/408/409/5xx or a reset connection. Default 4: 1+2+4+8 s of backoff. */
  readonly maxRetries?: number;
  /** Retries while the connection is refused, before the failure is fatal. Default 2: 1+2 s. */
  readonly refusedRetries?: number;
  /** The first backoff; it doubles each retry. A server's retry-after (up to 60 s) wins. */
  readonly initialDelayMs?: number;
  /**
   * The first-token timeout ([agent] first_token_timeout_secs): a retry whose wait would end past it
   * is not waited for, and the failure is the turn's error (the HTTP status and the provider's words,
   * not the timeout's).
   */
  readonly firstTokenTimeoutMs?: number;
}

export const DEFAULT_MAX_RETRIES = 4;
export const DEFAULT_REFUSED_RETRIES = 2;

/** The SDK's retry helpers, imported once at the first model call (not per call, not at start). */
let retryHelpers: Promise<typeof ProviderUtils> | undefined;

/** Calls the model with the retry policy above; a failure comes out as FatalProviderError or an Error naming the provider. */
async function withRetries<T>(
  id: string,
  options: RetryOptions & ReplyLimitOptions,
  signal: AbortSignal,
  call: () => PromiseLike<T>,
): Promise<T> {
  const { isAbortError, retryWithExponentialBackoff } = await (retryHelpers ??=
    import('@ai-sdk/provider-utils'));
  const maxRetries = options.maxRetries ?? DEFAULT_MAX_RETRIES;
  const refusedRetries = options.refusedRetries ?? DEFAULT_REFUSED_RETRIES;
  let attempts = 0;
  let refused = 0;
  const started = performance.now();
  const retry = retryWithExponentialBackoff({
    maxRetries: Math.max(maxRetries, refusedRetries),
    initialDelayInMs: options.initialDelayMs ?? 1000,
    backoffFactor: 2,
    abortSignal: signal,
    shouldRetry: (error) => {
      const kind = classifyFailure(error);
      if (kind === 'refused') return (refused += 1) <= refusedRetries;
      return kind === 'retry' && attempts <= maxRetries;
    },
    getDelayInMs: ({ error, exponentialBackoffDelay }) => {
      const delayMs = retryDelayMs(error, exponentialBackoffDelay);
      const deadline = options.firstTokenTimeoutMs;
      // The turn would time out during the wait: it fails now, with the cause (thrown out of the retry loop).
      if (deadline !== undefined && performance.now() - started + delayMs >= deadline) throw error;
      return delayMs;
    },
    createRetryError: ({ errors }) => errors.at(-1),
  });
  const attempt = retry(() => {
    attempts += 1;
    return call();
  });
  return Promise.resolve(attempt).catch((error: unknown) => {
    if (signal.aborted || isAbortError(error)) throw error;
    if (bodyTooLarge(error)) throw replyTooLarge(id, options.maxReplyChars ?? DEFAULT_MAX_REPLY_CHARS, error);
    const kind = classifyFailure(error);
    const tries = attempts > 1 ? ` (after ${attempts} attempts)` : '';
    // The provider's words are an excerpt: a body or message of megabytes is no turn error, event or log line.
    const message = `${id}: ${excerpt(describe(error), MAX_ERROR_CHARS)}${tries}`;
    if (kind === 'fatal' || kind === 'refused') {
      const status = APICallError.isInstance(error) ? error.statusCode : undefined;
      throw new FatalProviderError(message, {
        cause: error,
        ...(status === undefined ? {} : { status }),
      });
    }
    throw new Error(message, { cause: error });
  });
}

/** The SDK's usage as ours: every input token (cached ones included), output, cache reads. */
function usageOf(usage: LanguageModelV3Usage): TokenUsage {
  const cached = usage.inputTokens.cacheRead ?? 0;
  return {
    inputTokens: usage.inputTokens.total ?? 0,
    outputTokens: usage.outputTokens.total ?? 0,
    ...(cached > 0 ? { cachedInputTokens: cached } : {}),
  };
}

function stopReasonOf(
  finish: LanguageModelV3FinishReason,
): Pick<ThinkResponse, 'stopReason' | 'rawStopReason'> {
  const { unified, raw } = finish;
  const mapped = STOP_REASONS[unified] ?? 'other';
  return {
    stopReason: mapped === 'end_turn' && !EXPLICIT_STOPS.has(raw ?? '') ? 'other' : mapped,
    ...(raw === undefined ? {} : { rawStopReason: raw }),
  };
}

const NO_FINISH = /ended without a finish reason/i;

/**
 * A reply's bound: its text, reasoning and tool-call arguments, in characters (as
 * max_tool_results_kib_per_turn counts). Counted as the parts arrive; past it the reply is cut off
 * and the run ends with replyTooLarge's message: asking again would bring the same reply, and
 * nothing of it runs. Where the bytes arrive (the provider's fetch), one event of a streamed reply,
 * or a whole reply that is not streamed, may take three times that plus 64 KiB: room for UTF-8 (up
 * to three bytes a character), JSON's usual escapes (`\n`, `\"`) and the wire's framing.
 */
export interface ReplyLimitOptions {
  /** Default 4 MiB of characters ([agent].max_reply_kib's default). */
  readonly maxReplyChars?: number;
}

export const DEFAULT_MAX_REPLY_CHARS = 4096 * 1024;
export const wireBytesFor = (maxReplyChars: number): number => maxReplyChars * 3 + 64 * 1024;

/** The code of http-fetch's BodyTooLargeError (that module is loaded at the first request only). */
const BODY_TOO_LARGE: typeof HttpFetchModule.BODY_TOO_LARGE = 'ALEPH_BODY_TOO_LARGE';

function bodyTooLarge(error: unknown): boolean {
  const seen = new Set<unknown>();
  for (let current = error; current instanceof Error && !seen.has(current); current = current.cause) {
    seen.add(current);
    if ((current as { code?: unknown }).code === BODY_TOO_LARGE) return true;
  }
  return false;
}

/** The run's error for a reply over the bound: stable words naming the setting. */
export function replyTooLarge(id: string, maxReplyChars: number, cause?: unknown): FatalProviderError {
  const kib = Math.round((maxReplyChars / 1024) * 10) / 10;
  return new FatalProviderError(
    `${id}: the model's reply is larger than ${kib} KiB of text and tool-call arguments ([agent].max_reply_kib): it was cut off, and nothing of it was run`,
    cause === undefined ? undefined : { cause },
  );
}

/** Why a stream part or a read broke the reply, in words that name the cause. */
function streamFailure(id: string, error: unknown): Error {
  // A malformed chunk is quoted in its parse error: an excerpt, not megabytes of it, goes on.
  const cause =
    error instanceof Error && error.cause instanceof Error ? ` (${excerpt(error.cause.message, 300)})` : '';
  return new Error(`${id}: the reply stream broke: ${excerpt(describe(error), 500)}${cause}`, {
    cause: error,
  });
}

/**
 * The model's stream as reply parts. Text and tool-input fragments go on as they come; a finished
 * call as a tool call; the finish as usage then finish. An `error` part (a malformed chunk, an error
 * event) or a broken read throws, naming the cause; a finish with a tool call still unfinished
 * throws too: half a reply is never handed on as a whole one.
 */
async function* replyParts(
  id: string,
  stream: ReadableStream<LanguageModelV3StreamPart>,
  maxReplyChars: number,
): ReplyStream {
  const reader = stream.getReader();
  const open = new Map<string, string>(); // tool inputs started and not yet a call: id → name
  const streamedInputs = new Set<string>(); // calls whose input came as deltas (counted already)
  let chars = 0;
  let unfinishedReply = false;
  try {
    for (;;) {
      let read: Awaited<ReturnType<typeof reader.read>>;
      try {
        read = await reader.read();
      } catch (error) {
        throw bodyTooLarge(error) ? replyTooLarge(id, maxReplyChars, error) : streamFailure(id, error);
      }
      if (read.done) return;
      const part = read.value;
      switch (part.type) {
        case 'text-delta':
        case 'reasoning-delta':
          chars += part.delta.length;
          break;
        case 'tool-input-delta':
          chars += part.delta.length;
          streamedInputs.add(part.id);
          break;
        case 'tool-call':
          if (!streamedInputs.has(part.toolCallId)) chars += part.input.length;
          break;
        default:
          break;
      }
      if (chars > maxReplyChars) throw replyTooLarge(id, maxReplyChars);
      switch (part.type) {
        case 'text-delta':
          yield { type: 'text', text: part.delta };
          break;
        case 'reasoning-delta':
          yield { type: 'reasoning', text: part.delta };
          break;
        case 'tool-input-start':
          if (part.providerExecuted !== true) open.set(part.id, part.toolName);
          break;
        case 'tool-input-delta': {
          const name = open.get(part.id);
          if (name !== undefined) yield { type: 'tool-call-delta', callId: part.id, name, text: part.delta };
          break;
        }
        case 'tool-call':
          open.delete(part.toolCallId);
          if (part.providerExecuted === true) break;
          yield {
            type: 'tool-call',
            call: { id: part.toolCallId, name: part.toolName, args: parseToolInput(part.input) },
          };
          break;
        case 'finish': {
          const unfinished = [...open.values()];
          if (unfinished.length > 0)
            throw new Error(
              `${id}: the reply finished with the tool call ${unfinished.join(', ')} unfinished`,
            );
          yield { type: 'usage', usage: usageOf(part.usage) };
          // No finish reason on the wire: `other` (no explicit stop), as the whole-reply path reads it.
          yield unfinishedReply
            ? { type: 'finish', stopReason: 'other' }
            : { type: 'finish', ...stopReasonOf(part.finishReason) };
          break;
        }
        case 'error':
          if (bodyTooLarge(part.error)) throw replyTooLarge(id, maxReplyChars, part.error);
          // A reply that ended without a finish reason is read as such (not a stop), by its finish part.
          if (NO_FINISH.test(String((part.error as Error | undefined)?.message ?? part.error))) {
            unfinishedReply = true;
            break;
          }
          throw streamFailure(id, part.error);
        default:
          break; // starts and ends, metadata, sources, files: nothing the loop reads
      }
    }
  } finally {
    // Given up early (a timeout, a cancel, a throw above): let go of the body so its socket closes.
    void reader.cancel().catch(() => undefined);
  }
}

/**
 * Anthropic prompt caching on the reply stream (the harness's path; `think`, the whole-reply path,
 * sends the prompt as generateText would): a breakpoint on the system prompt and one on the
 * conversation's last message (the tail the next turn extends), so each turn reads the history so
 * far from the cache.
 */
export interface CacheOptions {
  /** Mark cache breakpoints (Anthropic). Default true. */
  readonly promptCaching?: boolean;
}

const EPHEMERAL = { anthropic: { cacheControl: { type: 'ephemeral' } } } as const;

/** The prompt with Anthropic cache breakpoints on the system message and the last message. */
function withBreakpoints(prompt: readonly LanguageModelV3Message[]): LanguageModelV3Message[] {
  const last = prompt.length - 1;
  return prompt.map((message, index) =>
    (index === 0 && message.role === 'system') || index === last
      ? { ...message, providerOptions: { ...message.providerOptions, ...EPHEMERAL } }
      : message,
  );
}

/** A model whose provider package is imported at its first call, not when the server starts. */
export interface DeferredModel {
  /** How the model's own `provider` begins (`anthropic` for `anthropic.messages`). */
  readonly provider: string;
  load(): Promise<LanguageModelV3>;
}

/** The model, loaded once (a failed load is tried again at the next call). */
function modelLoader(id: string, model: LanguageModelV3 | DeferredModel): () => Promise<LanguageModelV3> {
  if (!('load' in model)) return () => Promise.resolve(model);
  let loading: Promise<LanguageModelV3> | undefined;
  return () =>
    (loading ??= model.load().catch((error: unknown) => {
      loading = undefined;
      throw new FatalProviderError(`${id}: cannot load the provider: ${(error as Error).message}`, {
        cause: error,
      });
    }));
}

export function aiSdkProvider(
  id: string,
  model: LanguageModelV3 | DeferredModel,
  options: RetryOptions & CacheOptions & ReplyLimitOptions = {},
): AiProvider {
  const maxReplyChars = options.maxReplyChars ?? DEFAULT_MAX_REPLY_CHARS;
  const prompts = new PromptCache();
  const toolsBySpecs = new WeakMap<readonly ToolSpec[], LanguageModelV3FunctionTool[]>();
  const caching = (options.promptCaching ?? true) && model.provider.startsWith('anthropic');
  const loaded = modelLoader(id, model);
  const callOptions = (request: ThinkRequest, signal: AbortSignal, cached: boolean) => {
    let tools = toolsBySpecs.get(request.tools);
    if (tools === undefined) toolsBySpecs.set(request.tools, (tools = toFunctionTools(request.tools)));
    const prompt = prompts.build(request.system, request.messages);
    return {
      prompt: cached ? withBreakpoints(prompt) : prompt,
      ...(tools.length ? { tools, toolChoice: { type: 'auto' as const } } : {}),
      abortSignal: signal,
    };
  };
  return {
    id,
    async think(request: ThinkRequest, signal: AbortSignal): Promise<ThinkResponse> {
      const call = callOptions(request, signal, false);
      const ready = await loaded();
      const response = toThinkResponse(await withRetries(id, options, signal, () => ready.doGenerate(call)));
      const chars = response.toolCalls.reduce(
        (sum, toolCall) => sum + (JSON.stringify(toolCall.args)?.length ?? 0),
        response.text.length,
      );
      if (chars > maxReplyChars) throw replyTooLarge(id, maxReplyChars);
      return response;
    },
    stream(request: ThinkRequest, signal: AbortSignal): ReplyStream {
      const call = callOptions(request, signal, caching);
      return (async function* () {
        // Only the request is retried: once the reply has begun, a break fails the turn.
        const ready = await loaded();
        const { stream } = await withRetries(id, options, signal, () =>
          ready.doStream({ ...call, includeRawChunks: false }),
        );
        yield* replyParts(id, stream, maxReplyChars);
      })();
    },
  };
}

function isHttpUrl(text: string): boolean {
  try {
    return ['http:', 'https:'].includes(new URL(text).protocol);
  } catch {
    return false;
  }
}

export class ProviderConfigError extends Error {
  override readonly name = 'ProviderConfigError';
}

/**
 * The environment variable holding the provider's key: `api_key_env`, else the SDK's default. The
 * server reads it once and removes it from its own environment, so no child ever sees it.
 */
const DEFAULT_KEY_VARIABLE: Readonly<Record<string, string>> = {
  openai: 'OPENAI_API_KEY',
  anthropic: 'ANTHROPIC_API_KEY',
};
export const providerKeyVariable = (agent: Config['agent']): string | undefined =>
  agent.api_key_env ?? DEFAULT_KEY_VARIABLE[agent.provider ?? ''];

let transport: Promise<typeof HttpFetchModule> | undefined;
/**
 * The bounded httpFetch, its module loaded at the first request (one module more at start made V8
 * optimize at idle): an event of a streamed reply at most `maxBytes` characters, a whole other reply
 * at most `maxBytes` bytes.
 */
function providerFetch(maxBytes: number): typeof fetch {
  let bounded: typeof fetch | undefined;
  return async (input, init) => {
    bounded ??= (await (transport ??= import('./http-fetch.js'))).boundedHttpFetch(maxBytes);
    return bounded(input, init);
  };
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
  const keyVariable = providerKeyVariable(agent);
  const apiKey = keyVariable === undefined ? undefined : env[keyVariable];
  if (agent.api_key_env !== undefined && !apiKey) {
    throw new ProviderConfigError(
      `[agent].api_key_env names ${agent.api_key_env}, which is not set in the environment`,
    );
  }
  // OpenAI's and Anthropic's APIs need a key: without one every run would fail at its first call.
  if (!apiKey && agent.provider !== 'openai-compatible')
    throw new ProviderConfigError(
      `[agent] provider "${agent.provider}" needs an API key: set ${keyVariable} in the server's environment (or name another variable in [agent].api_key_env)`,
    );
  if (agent.base_url !== undefined && !isHttpUrl(agent.base_url))
    throw new ProviderConfigError(`[agent].base_url ${JSON.stringify(agent.base_url)} is not an http(s) URL`);
  const { provider: kind, base_url: baseURL } = agent;
  const maxReplyChars = agent.max_reply_kib * 1024;
  const fetch = providerFetch(wireBytesFor(maxReplyChars));
  const settings = { ...(baseURL ? { baseURL } : {}), ...(apiKey ? { apiKey } : {}), fetch };
  const firstTokenTimeoutMs = agent.first_token_timeout_secs * 1000;
  const deferred = (load: () => Promise<LanguageModelV3>, options?: CacheOptions): AiProvider =>
    aiSdkProvider(
      `${kind}:${model}`,
      { provider: kind, load },
      { ...options, maxReplyChars, firstTokenTimeoutMs },
    );
  switch (kind) {
    case 'openai-compatible':
      if (baseURL === undefined)
        throw new ProviderConfigError('[agent].base_url is required for provider "openai-compatible"');
      return deferred(async () =>
        (await import('@ai-sdk/openai-compatible'))
          .createOpenAICompatible({ name: kind, baseURL, ...settings })
          .chatModel(model),
      );
    case 'openai':
      return deferred(async () => (await import('@ai-sdk/openai')).createOpenAI(settings).chat(model));
    case 'anthropic':
      return deferred(async () => (await import('@ai-sdk/anthropic')).createAnthropic(settings)(model), {
        promptCaching: agent.prompt_caching,
      });
    default: {
      const unreachable: never = kind;
      return unreachable;
    }
  }
}
