// The reply stream over the real wire: fake OpenAI-compatible and Anthropic servers that answer
// `stream: true` with server-sent events, chunk by chunk, slowly or broken on purpose.
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import type { LanguageModelV3 } from '@ai-sdk/provider';
import {
  AgentHarness,
  InMemorySessionStore,
  ReplyAssembler,
  type ReplyDelta,
  type ReplyPart,
  type ThinkRequest,
  type Tool,
  type TurnStep,
} from '@aleph/harness';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { startFakeLlm, type FakeLlm, type Reply } from '../test/fake-llm.js';
import { aiSdkProvider } from './providers.js';

// A fresh endpoint each test: its scripted replies and stream modes never leak into the next.
let replies: Reply[] = [];
let llm: FakeLlm;
beforeEach(async () => {
  const script = (replies = []);
  llm = await startFakeLlm(() => script.shift() ?? { text: 'The answer is 42.\nVERDICT: PASS' });
});
afterEach(() => llm.close());

const sdkModel = (kind: 'openai' | 'anthropic'): LanguageModelV3 =>
  kind === 'openai'
    ? createOpenAI({ baseURL: llm.baseUrl, apiKey: 'sk-test' }).chat('test-model')
    : createAnthropic({ baseURL: llm.baseUrl, apiKey: 'sk-test' })('test-model');

const note: Tool<{ text: string }> = {
  name: 'note',
  description: 'Take a note',
  input: z.object({ text: z.string() }),
  claim: () => ({ kind: 'none' }),
  execute: ({ text }) => Promise.resolve({ output: `noted ${text}` }),
};

const request = (content = 'what is the answer?'): ThinkRequest => ({
  system: 'You are a careful engineer.',
  messages: [{ role: 'user', content }],
  tools: [{ name: 'note', description: 'Take a note', inputSchema: { type: 'object' } }],
});
const never = new AbortController().signal;

async function collect(stream: AsyncIterable<ReplyPart>): Promise<ReplyPart[]> {
  const parts: ReplyPart[] = [];
  for await (const part of stream) parts.push(part);
  return parts;
}

describe.each(['openai', 'anthropic'] as const)('%s: doStream', (kind) => {
  it('a reply in 3 chunks comes as 3 text parts, in order, and assembles to what doGenerate gives', async () => {
    const provider = aiSdkProvider('p', sdkModel(kind));
    const parts = await collect(provider.stream!(request(), never));
    const texts = parts.flatMap((part) => (part.type === 'text' ? [part.text] : []));
    expect(texts.length).toBeGreaterThanOrEqual(3);
    expect(texts.join('')).toBe('The answer is 42.\nVERDICT: PASS');
    const assembler = new ReplyAssembler();
    for (const part of parts) assembler.add(part);
    const whole = await provider.think(request(), never);
    expect(assembler.response()).toEqual(whole);
    expect(llm.requests.at(-2)?.body.stream).toBe(true);
  });

  it('tool calls: argument fragments, then the whole call with parsed args; cached tokens reported', async () => {
    replies.push({ text: 'Noting.', call: { name: 'note', args: { text: 'hello world' } } });
    llm.streamNext({ usage: { input: 1000, output: 20, cached: 800 } });
    const parts = await collect(aiSdkProvider('p', sdkModel(kind)).stream!(request(), never));
    const fragments = parts.flatMap((part) => (part.type === 'tool-call-delta' ? [part.text] : []));
    expect(fragments.join('')).toBe('{"text":"hello world"}');
    expect(parts.find((part) => part.type === 'tool-call')).toMatchObject({
      call: { name: 'note', args: { text: 'hello world' } },
    });
    expect(parts.find((part) => part.type === 'usage')).toEqual({
      type: 'usage',
      usage: { inputTokens: 1000, outputTokens: 20, cachedInputTokens: 800 },
    });
    expect(parts.at(-1)).toMatchObject({ type: 'finish', stopReason: 'tool_use' });
  });
});

it('anthropic: the request carries cache breakpoints on the system prompt and the last message', async () => {
  const provider = aiSdkProvider('anthropic:m', sdkModel('anthropic'));
  const history: ThinkRequest = {
    ...request(),
    messages: [
      { role: 'user', content: 'first' },
      { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'second' },
    ],
  };
  await collect(provider.stream!(history, never));
  const body = llm.requests.at(-1)!.body;
  expect(body.system).toEqual([
    { type: 'text', text: 'You are a careful engineer.', cache_control: { type: 'ephemeral' } },
  ]);
  const last = body.messages.at(-1);
  expect(last.content.at(-1)).toMatchObject({
    type: 'text',
    text: 'second',
    cache_control: { type: 'ephemeral' },
  });
  expect(JSON.stringify(body.messages.slice(0, -1))).not.toContain('cache_control');
  // Off when asked.
  await collect(aiSdkProvider('p', sdkModel('anthropic'), { promptCaching: false }).stream!(history, never));
  expect(JSON.stringify(llm.requests.at(-1)!.body)).not.toContain('cache_control');
});

describe.each(['openai', 'anthropic'] as const)('%s: through the harness', (kind) => {
  it('the run streams deltas before its step, and the tokens of every reply sum in the result', async () => {
    replies.push({ text: 'Let me note it.', call: { name: 'note', args: { text: 'x' } } });
    replies.push({ text: 'Noted and done.\nVERDICT: PASS' });
    llm.streamNext(
      { usage: { input: 100, output: 10, cached: 60 } },
      { usage: { input: 130, output: 12, cached: 100 } },
    );
    const events: string[] = [];
    const deltas: ReplyDelta[] = [];
    const result = await new AgentHarness({
      provider: aiSdkProvider('p', sdkModel(kind)),
      tools: [note],
      sessions: new InMemorySessionStore(),
    }).run(
      { prompt: 'note x' },
      {
        onDelta: (delta) => (deltas.push(delta), events.push(`delta ${delta.iteration}`)),
        onStep: (step) => events.push(`step ${step.iteration}`),
      },
    );
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(events.indexOf('step 1')).toBeGreaterThan(events.lastIndexOf('delta 1'));
    expect(events.filter((event) => event === 'delta 2').length).toBeGreaterThanOrEqual(3);
    expect(events.at(-1)).toBe('step 2');
    const text = deltas.filter((delta) => delta.iteration === 2 && delta.kind === 'text');
    expect(text.map((delta) => delta.text).join('')).toBe(result.finalText);
    expect(result.usage).toEqual({ inputTokens: 230, outputTokens: 22, cachedInputTokens: 160 });
    expect(result.turns?.map((turn) => turn.firstTokenMs !== undefined)).toEqual([true, true]);
  });

  const broken: [string, Parameters<FakeLlm['streamNext']>[0], object, RegExp][] = [
    ['a connection reset mid-reply', { cutAfter: 3, cut: 'reset' }, {}, /reply stream broke/],
    ['a malformed chunk', { malformed: true }, {}, /reply stream broke/],
    [
      'no first token within the first-token timeout',
      { stallAfter: 0 },
      { firstTokenTimeoutMs: 150 },
      /first-token timeout/,
    ],
    ['a stall mid-reply past the idle timeout', { stallAfter: 3 }, { idleTimeoutMs: 150 }, /idle timeout/],
    ['a reply whose parts never finish', { noFinish: true }, { idleTimeoutMs: 150 }, /idle timeout/],
  ];
  for (const [name, mode, deps, cause] of broken) {
    it(`${name}: the turn fails naming the cause, 3 in a row end the run; never a stop, never a hang`, async () => {
      llm.streamNext(mode, mode, mode);
      replies.push(
        ...Array.from({ length: 3 }, () => ({ text: 'All done, everything passes.\nVERDICT: PASS' })),
      );
      const steps: TurnStep[] = [];
      const result = await new AgentHarness({
        provider: aiSdkProvider('p', sdkModel(kind)),
        tools: [note],
        sessions: new InMemorySessionStore(),
        turnTimeoutMs: 20_000,
        ...deps,
      }).run({ prompt: 'x' }, { onStep: (step) => steps.push(step) });
      expect(result.terminateReason).toMatchObject({ kind: 'consecutive_failures', count: 3 });
      expect(steps.map((step) => step.error)).toEqual(
        Array.from({ length: 3 }, () => expect.stringMatching(cause)),
      );
      expect(result.finalText).toBe('');
    });
  }

  it('cancel mid-stream: the provider sees the request closed at once', async () => {
    replies.push({ text: 'tick '.repeat(200) });
    llm.streamNext({ chunks: 200, delayMs: 20 });
    const controller = new AbortController();
    let cancelledAt = 0;
    const result = await new AgentHarness({
      provider: aiSdkProvider('p', sdkModel(kind)),
      tools: [note],
      sessions: new InMemorySessionStore(),
    }).run(
      { prompt: 'count' },
      {
        signal: controller.signal,
        onDelta: (delta) => {
          if (delta.seq === 3 && cancelledAt === 0) {
            cancelledAt = performance.now();
            controller.abort();
          }
        },
      },
    );
    expect(result.terminateReason).toEqual({ kind: 'cancelled' });
    const entry = llm.requests.at(-1)!;
    await expect.poll(() => entry.closedAt, { timeout: 2000 }).toBeDefined();
    // Closed by the cancel (the reply had seconds left to stream), not by the stream's end.
    expect(entry.closedAt! - cancelledAt).toBeLessThan(1000);
  });
});
