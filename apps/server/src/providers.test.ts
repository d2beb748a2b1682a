import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { APICallError, type LanguageModelV3 } from '@ai-sdk/provider';
import {
  AgentHarness,
  FatalProviderError,
  InMemorySessionStore,
  type Message,
  type ThinkRequest,
  type Tool,
  type ToolSpec,
  type TurnStep,
} from '@aleph/harness';
import { PtyManager } from '@aleph/pty';
import { generateText, jsonSchema, tool, type ToolSet } from 'ai';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { z } from 'zod';
import { toModelMessages } from '../bench/legacy-adapter.js';
import { startFakeLlm, writeCatStop, type FakeLlm, type Reply } from '../test/fake-llm.js';
import { startHugeReplyLlm } from '../test/huge-reply-llm.js';
import { configSchema } from './config.js';
import { httpFetch } from './http-fetch.js';
import {
  aiSdkProvider,
  classifyFailure,
  createProvider,
  DEFAULT_MAX_RETRIES,
  PromptCache,
  ProviderConfigError,
  retryDelayMs,
} from './providers.js';
import { builtinTools } from './tools.js';

let llm: FakeLlm;
let dir: string;
const ptys = new PtyManager();
beforeAll(async () => {
  llm = await startFakeLlm(writeCatStop);
  dir = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-providers-')));
});
afterAll(async () => {
  await llm.close();
  await ptys.closeAll();
  rmSync(dir, { recursive: true, force: true });
});

const agent = (provider: 'openai-compatible' | 'openai' | 'anthropic') =>
  configSchema.parse({
    agent: { provider, model: 'test-model', base_url: llm.baseUrl, api_key_env: 'FAKE_KEY' },
  }).agent;

describe.each(['openai-compatible', 'openai', 'anthropic'] as const)(
  '%s provider over its real wire format',
  (kind) => {
    it('runs a whole agent: write_file, shell cat, stop', async () => {
      const provider = createProvider(agent(kind), { FAKE_KEY: 'sk-test-123' })!;
      const file = `${kind}.txt`;
      const before = llm.requests.length;
      const harness = new AgentHarness({
        provider,
        tools: builtinTools({ cwd: dir, ptyManager: ptys, goals: new Map(), defaultShellTimeoutMs: 10_000 }),
        sessions: new InMemorySessionStore(),
      });
      const result = await harness.run({ prompt: `create the file ${file}` });
      expect(result.terminateReason).toEqual({ kind: 'model_stop' });
      expect(result.finalText).toContain('VERDICT: PASS');
      expect(result.totalTokens).toBe(3 * 19);
      expect(readFileSync(join(dir, file), 'utf8')).toBe(`hello from ${file}\n`);
      const sent = llm.requests.slice(before);
      expect(sent).toHaveLength(3);
      expect(
        sent.every((request) => request.format === (kind === 'anthropic' ? 'anthropic' : 'openai')),
      ).toBe(true);
      const last = sent[2]!;
      // Over node:http (httpFetch), not Node's fetch, which adds its browser headers.
      expect(last.headers['sec-fetch-mode']).toBeUndefined();
      if (kind === 'anthropic') {
        expect(last.headers['x-api-key']).toBe('sk-test-123');
        const blocks = last.body.messages.flatMap((message: any) =>
          Array.isArray(message.content) ? message.content : [],
        );
        expect(
          blocks.find(
            (block: any) =>
              block.type === 'tool_result' &&
              String(JSON.stringify(block.content)).includes(`hello from ${file}`),
          ),
        ).toBeDefined();
        expect(last.body.tools.map((tool: any) => tool.name)).toContain('write_file');
      } else {
        expect(last.headers.authorization).toBe('Bearer sk-test-123');
        const toolMessages = last.body.messages.filter((message: any) => message.role === 'tool');
        expect(toolMessages.map((message: any) => message.tool_call_id)).toHaveLength(2);
        expect(toolMessages[1].content).toContain(`hello from ${file}`);
        expect(last.body.tools.map((tool: any) => tool.function.name)).toContain('shell');
      }
    });
  },
);

describe('provider configuration', () => {
  it('no provider → undefined (terminals still work)', () => {
    expect(createProvider(configSchema.parse({}).agent)).toBeUndefined();
  });

  it.each([
    [
      { provider: 'openai-compatible', model: 'm' },
      '[agent].base_url is required for provider "openai-compatible"',
    ],
    [{ provider: 'openai' }, '[agent] provider is set but [agent].model is missing'],
    [
      { provider: 'anthropic', model: 'm', api_key_env: 'NOPE_NOT_SET' },
      '[agent].api_key_env names NOPE_NOT_SET, which is not set in the environment',
    ],
  ])('%j → a clear error', (agentConfig, message) => {
    expect(() => createProvider(configSchema.parse({ agent: agentConfig }).agent, {})).toThrow(
      new ProviderConfigError(message),
    );
  });
});

const history: Message[] = [
  { role: 'user', content: 'fix the parser' },
  {
    role: 'assistant',
    content: 'Reading both.',
    toolCalls: [
      { id: 'c1', name: 'read_file', args: { path: 'a.ts' } },
      { id: 'c2', name: 'shell', args: { command: 'pnpm test' } },
    ],
  },
  { role: 'tool', toolCallId: 'c1', toolName: 'read_file', content: 'export const a = 1;\n' },
  { role: 'tool', toolCallId: 'c2', toolName: 'shell', content: 'exit 1: 2 failed', isError: true },
  { role: 'user', content: '[hook tests] 2 tests fail' },
  { role: 'assistant', content: '', toolCalls: [{ id: 'c3', name: 'read_file', args: {} }] },
  { role: 'tool', toolCallId: 'c3', toolName: 'read_file', content: 'ok' },
];
const specs: ToolSpec[] = [
  {
    name: 'read_file',
    description: 'reads a file',
    inputSchema: { type: 'object', properties: { path: { type: 'string' } }, additionalProperties: false },
  },
  {
    name: 'shell',
    description: 'runs a command',
    inputSchema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
];

function sdkModel(kind: 'openai' | 'anthropic', baseURL: string, model = 'test-model'): LanguageModelV3 {
  // The server's own transport (createProvider passes it): its failures must read as fetch's do.
  return kind === 'openai'
    ? createOpenAI({ baseURL, apiKey: 'sk-test', fetch: httpFetch }).chat(model)
    : createAnthropic({ baseURL, apiKey: 'sk-test', fetch: httpFetch })(model);
}

const request = (messages: readonly Message[] = history): ThinkRequest => ({
  system: 'You are a careful engineer.',
  messages,
  tools: specs,
});
const never = new AbortController().signal;

describe.each(['openai', 'anthropic'] as const)('%s: the LanguageModelV3 path', (kind) => {
  it('sends the body generateText sent for the same history and tools', async () => {
    const provider = aiSdkProvider('p', sdkModel(kind, llm.baseUrl));
    const before = llm.requests.length;
    await provider.think(request(), never);
    const tools: ToolSet = {};
    for (const spec of specs)
      tools[spec.name] = tool({ description: spec.description, inputSchema: jsonSchema(spec.inputSchema) });
    await generateText({
      model: sdkModel(kind, llm.baseUrl),
      system: request().system,
      messages: toModelMessages(history),
      tools,
      maxRetries: 0,
    });
    const [ours, theirs] = llm.requests.slice(before);
    expect(ours!.body).toEqual(theirs!.body);
  });

  it('maps a `length` finish to max_tokens and a content-filter finish to content_filter', async () => {
    const scripted = await startFakeLlm((conversation) => {
      const task = conversation.find((turn) => turn.role === 'user')?.text ?? '';
      return { text: 'cut sh', finish: task === 'long' ? 'length' : 'content_filter' };
    });
    try {
      const provider = aiSdkProvider('p', sdkModel(kind, scripted.baseUrl));
      const long = await provider.think(request([{ role: 'user', content: 'long' }]), never);
      expect(long).toMatchObject({ text: 'cut sh', toolCalls: [], stopReason: 'max_tokens' });
      const filtered = await provider.think(request([{ role: 'user', content: 'filtered' }]), never);
      expect(filtered.stopReason).toBe('content_filter');
    } finally {
      await scripted.close();
    }
  });

  it('reports tool calls, their parsed arguments and the usage', async () => {
    const provider = aiSdkProvider('p', sdkModel(kind, llm.baseUrl));
    const response = await provider.think(
      request([{ role: 'user', content: 'create the file x.txt' }]),
      never,
    );
    expect(response.stopReason).toBe('tool_use');
    expect(response.toolCalls).toEqual([
      { id: expect.any(String), name: 'write_file', args: { path: 'x.txt', content: 'hello from x.txt\n' } },
    ]);
    expect(response.usage).toEqual({ inputTokens: 12, outputTokens: 7 });
  });

  it('arguments nesting past 100 levels come as their text, for the tool to answer invalid', async () => {
    const nested = (depth: number): unknown => (depth === 0 ? 'x' : { a: nested(depth - 1) });
    const scripted = await startFakeLlm((conversation) => {
      const depth = Number(conversation.find((turn) => turn.role === 'user')?.text);
      return { call: { name: 'todo', args: { items: nested(depth) } } };
    });
    try {
      const provider = aiSdkProvider('p', sdkModel(kind, scripted.baseUrl));
      const shallow = await provider.think(request([{ role: 'user', content: '98' }]), never);
      expect(shallow.toolCalls[0]?.args).toEqual({ items: nested(98) });
      const deep = await provider.think(request([{ role: 'user', content: '100' }]), never);
      expect(deep.toolCalls[0]?.args).toBe(JSON.stringify({ items: nested(100) }));
    } finally {
      await scripted.close();
    }
  });
});

describe.each(['openai', 'anthropic'] as const)('%s: failures over the real wire', (kind) => {
  const fast = { initialDelayMs: 5 };

  it('401 → FatalProviderError with the status and the provider message, not retried', async () => {
    llm.failNext({ status: 401, message: 'Incorrect API key provided: sk-te***', code: 'invalid_api_key' });
    const before = llm.requests.length;
    const failure = aiSdkProvider(`${kind}:m`, sdkModel(kind, llm.baseUrl)).think(request(), never);
    await expect(failure).rejects.toBeInstanceOf(FatalProviderError);
    await expect(failure).rejects.toMatchObject({ fatal: true, status: 401 });
    await expect(failure).rejects.toThrow(/^openai:m|anthropic:m/);
    await expect(failure).rejects.toThrow(/HTTP 401: .*Incorrect API key provided/);
    expect(llm.requests.length - before).toBe(1);
  });

  it('404 for an unknown model → fatal, naming the model', async () => {
    llm.failNext({
      status: 404,
      message: 'The model `gpt-9` does not exist or you do not have access to it.',
      code: kind === 'openai' ? 'model_not_found' : 'not_found_error',
    });
    const failure = aiSdkProvider('p', sdkModel(kind, llm.baseUrl, 'gpt-9')).think(request(), never);
    await expect(failure).rejects.toMatchObject({ fatal: true, status: 404 });
    await expect(failure).rejects.toThrow(/gpt-9/);
  });

  it('a 400 the same request cannot recover from → fatal', async () => {
    llm.failNext({ status: 400, message: 'messages: tool_use ids were found without tool_result blocks' });
    const failure = aiSdkProvider('p', sdkModel(kind, llm.baseUrl)).think(request(), never);
    await expect(failure).rejects.toMatchObject({ fatal: true, status: 400 });
  });

  it('a provider message of 2 MB is quoted as an excerpt: the turn’s error stays a few KiB', async () => {
    llm.failNext({ status: 400, message: `bad request: ${'x'.repeat(2_000_000)}` });
    const failure = aiSdkProvider('p', sdkModel(kind, llm.baseUrl)).think(request(), never);
    const error = (await failure.catch((caught: unknown) => caught)) as Error;
    expect(error).toMatchObject({ fatal: true, status: 400 });
    expect(error.message).toMatch(/^p: HTTP 400: bad request: x+…$/);
    expect(error.message.length).toBeLessThan(2100);
  });

  it('a refused port → retried, then fatal, naming the URL', async () => {
    const port = await freePort();
    const baseUrl = `http://127.0.0.1:${port}/v1`;
    const failure = aiSdkProvider('p', sdkModel(kind, baseUrl), fast).think(request(), never);
    await expect(failure).rejects.toBeInstanceOf(FatalProviderError);
    await expect(failure).rejects.toThrow(/ECONNREFUSED/);
    await expect(failure).rejects.toThrow(`127.0.0.1:${port}`);
    await expect(failure).rejects.toThrow('(after 3 attempts)');
  });

  it('429 then 200 → retried after the server’s retry-after, not the backoff', async () => {
    llm.failNext({ status: 429, message: 'Rate limit reached', headers: { 'retry-after': '0' } });
    const before = llm.requests.length;
    // A backoff longer than the test's timeout: only honouring retry-after lets this pass.
    const provider = aiSdkProvider('p', sdkModel(kind, llm.baseUrl), { initialDelayMs: 600_000 });
    const response = await provider.think(request([{ role: 'user', content: 'create the file y' }]), never);
    expect(response.toolCalls[0]?.name).toBe('write_file');
    expect(llm.requests.length - before).toBe(2);
  });

  it('500 then 200 → retried with backoff', async () => {
    llm.failNext({ status: 500, message: 'upstream overloaded' });
    const before = llm.requests.length;
    const provider = aiSdkProvider('p', sdkModel(kind, llm.baseUrl), fast);
    const response = await provider.think(request([{ role: 'user', content: 'create the file z' }]), never);
    expect(response.toolCalls[0]?.name).toBe('write_file');
    expect(llm.requests.length - before).toBe(2);
  });

  it('5xx past the retries → a plain failure for the watchdog, with the provider message', async () => {
    const overloaded = { status: 503, message: 'Overloaded', code: 'overloaded_error' };
    llm.failNext(...Array.from({ length: DEFAULT_MAX_RETRIES + 1 }, () => overloaded));
    const failure = aiSdkProvider('p', sdkModel(kind, llm.baseUrl), fast).think(request(), never);
    await expect(failure).rejects.toThrow(`HTTP 503: Overloaded`);
    await expect(failure).rejects.toThrow(`(after ${DEFAULT_MAX_RETRIES + 1} attempts)`);
    await expect(failure).rejects.not.toHaveProperty('fatal');
  });

  it.each([
    ['429', { status: 429, message: 'Rate limit reached', code: 'rate_limit_exceeded' }],
    ['500', { status: 500, message: 'upstream overloaded' }],
    ['overloaded', { status: 529, message: 'Overloaded', code: 'overloaded_error' }],
  ] as const)(
    'a %s whose retry would wait past the first-token timeout is the turn’s error, not the timeout',
    async (_, failure) => {
      llm.failNext(failure);
      const provider = aiSdkProvider('p', sdkModel(kind, llm.baseUrl), {
        initialDelayMs: 5000,
        firstTokenTimeoutMs: 1000,
      });
      const steps: TurnStep[] = [];
      const harness = new AgentHarness({
        provider,
        tools: [],
        sessions: new InMemorySessionStore(),
        firstTokenTimeoutMs: 1000,
        maxIterations: 1,
      });
      await harness.run({ prompt: 'hello' }, { onStep: (step) => steps.push(step) });
      expect(steps[0]?.error).toContain(`p: HTTP ${failure.status}: ${failure.message}`);
      expect(steps[0]?.error).not.toContain('first-token');
    },
  );

  it('an abort during the backoff ends the wait and is not wrapped', async () => {
    llm.failNext({ status: 500, message: 'upstream overloaded' });
    const before = llm.requests.length;
    const controller = new AbortController();
    const slow = aiSdkProvider('p', sdkModel(kind, llm.baseUrl), { initialDelayMs: 600_000 });
    const failure = slow.think(request(), controller.signal);
    await vi.waitFor(() => expect(llm.requests.length).toBe(before + 1));
    controller.abort();
    await expect(failure).rejects.toMatchObject({ name: 'AbortError' });
    await expect(failure).rejects.not.toBeInstanceOf(FatalProviderError);
  });
});

describe('what a user misconfigured ends the run at once', () => {
  it('a run against a bad key ends as error: llm after one request', async () => {
    llm.failNext({ status: 401, message: 'invalid x-api-key', code: 'authentication_error' });
    const before = llm.requests.length;
    const harness = new AgentHarness({
      provider: createProvider(agent('anthropic'), { FAKE_KEY: 'sk-wrong' })!,
      tools: [],
      sessions: new InMemorySessionStore(),
    });
    const result = await harness.run({ prompt: 'hello' });
    expect(result.terminateReason).toEqual({
      kind: 'error',
      error: { kind: 'llm', message: expect.stringMatching(/HTTP 401: invalid x-api-key/) },
    });
    expect(llm.requests.length - before).toBe(1);
  });

  it.each([
    ['anthropic', 'ANTHROPIC_API_KEY'],
    ['openai', 'OPENAI_API_KEY'],
  ] as const)(
    '%s with no key → a config error at start naming %s, not a failure at each run',
    (kind, name) => {
      const config = configSchema.parse({
        agent: { provider: kind, model: 'm', base_url: llm.baseUrl },
      }).agent;
      expect(() => createProvider(config, {})).toThrow(
        new ProviderConfigError(
          `[agent] provider "${kind}" needs an API key: set ${name} in the server's environment (or name another variable in [agent].api_key_env)`,
        ),
      );
      expect(() => createProvider(config, { [name]: '' })).toThrow(ProviderConfigError);
      expect(createProvider(config, { [name]: 'sk-x' })).toBeDefined();
      // A local OpenAI-compatible server often needs none.
      const local = configSchema.parse({
        agent: { provider: 'openai-compatible', model: 'm', base_url: llm.baseUrl },
      }).agent;
      expect(createProvider(local, {})).toBeDefined();
    },
  );

  it('a base_url that is not an http(s) URL is a config error', () => {
    expect(() =>
      createProvider(
        configSchema.parse({
          agent: { provider: 'openai-compatible', model: 'm', base_url: 'localhost:11434' },
        }).agent,
      ),
    ).toThrow(new ProviderConfigError('[agent].base_url "localhost:11434" is not an http(s) URL'));
  });

  it('an unresolvable host → fatal without retries', () => {
    const cause = Object.assign(new Error('getaddrinfo ENOTFOUND llm.invalid'), { code: 'ENOTFOUND' });
    const error = new APICallError({
      message: 'Cannot connect to API: getaddrinfo ENOTFOUND llm.invalid',
      url: 'http://llm.invalid/v1/chat/completions',
      requestBodyValues: {},
      cause,
      isRetryable: true,
    });
    expect(classifyFailure(error)).toBe('fatal');
  });
});

describe('retry-after', () => {
  const limited = (headers: Record<string, string>) =>
    new APICallError({
      message: '429',
      url: 'u',
      requestBodyValues: {},
      statusCode: 429,
      responseHeaders: headers,
    });
  it.each([
    [{ 'retry-after-ms': '250' }, 250],
    [{ 'retry-after': '3' }, 3000],
    [{ 'retry-after': '600' }, 1000], // over a minute: the backoff
    [{}, 1000],
  ])('%j → %d ms', (headers, ms) => {
    expect(retryDelayMs(limited(headers), 1000)).toBe(ms);
  });
});

describe('PromptCache', () => {
  const fresh = (system: string, messages: readonly Message[]) => new PromptCache().build(system, messages);

  it('converts each message once: a longer history reuses the converted prefix', () => {
    const cache = new PromptCache();
    const first = cache.build('s', history.slice(0, 3));
    const second = cache.build('s', history);
    expect(second).toEqual(fresh('s', history));
    for (let index = 0; index < first.length; index += 1) expect(second[index]).toBe(first[index]);
  });

  it('a changed message, a shorter history or another system prompt is converted again', () => {
    const cache = new PromptCache();
    cache.build('s', history);
    const rewritten: Message[] = [...history.slice(0, 2), { role: 'user', content: 'compacted' }];
    expect(cache.build('s', rewritten)).toEqual(fresh('s', rewritten));
    expect(cache.build('s', history.slice(0, 2))).toEqual(fresh('s', history.slice(0, 2)));
    expect(cache.build('other', history)).toEqual(fresh('other', history));
    expect(cache.build('s', history)).toEqual(fresh('s', history));
  });

  it('two histories on one provider do not share a prompt', () => {
    const cache = new PromptCache();
    const other: Message[] = [{ role: 'user', content: 'another run' }];
    cache.build('s', history.slice(0, 2));
    cache.build('s', other);
    expect(cache.build('s', history)).toEqual(fresh('s', history));
    expect(cache.build('s', [...other, { role: 'assistant', content: 'hi' }])).toHaveLength(3);
  });

  it('a shortened prompt is rebuilt; a rewrite never changes a prompt handed out earlier', () => {
    const cache = new PromptCache();
    cache.build('s', history).pop();
    expect(cache.build('s', history)).toEqual(fresh('s', history));
    const live = [...history];
    const before = cache.build('s', live);
    const kept = [...before];
    cache.build('s', [...history.slice(0, 2), { role: 'user', content: 'compacted' }]);
    expect(before).toEqual(kept);
  });

  it('the same array again: only what was appended is converted, and the prompt is the same array', () => {
    const cache = new PromptCache();
    const live: Message[] = history.slice(0, 3);
    const first = cache.build('s', live);
    live.push(...history.slice(3));
    const second = cache.build('s', live);
    expect(second).toBe(first);
    expect(second).toEqual(fresh('s', history));
    live.length = 2; // shortened in place: caught by the O(1) check, rebuilt
    expect(cache.build('s', live)).toEqual(fresh('s', history.slice(0, 2)));
  });

  it('a message a rewrite cut and brought back (a truncation window that slid) is not converted again', () => {
    const cache = new PromptCache();
    const before = cache.build('s', history);
    const slid: Message[] = [
      history[0]!,
      { role: 'user', content: '[1 earlier message(s) truncated]' },
      ...history.slice(2),
    ];
    const after = cache.build('s', slid);
    expect(after).toEqual(fresh('s', slid));
    for (let index = 3; index < after.length; index += 1) expect(after[index]).toBe(before[index]);
  });

  it('property: whatever the caller appends, rewrites or passes again, the prompt equals a full rebuild', () => {
    const pool = [...history, { role: 'user', content: 'go on' } as Message];
    const step = fc.oneof(
      // The harness's own turn: the same history array, appended to.
      fc.record({
        kind: fc.constant('append' as const),
        picks: fc.array(fc.nat(pool.length - 1), { maxLength: 4 }),
      }),
      // A compaction or a guardrail: a new array, some messages kept, some replaced, some dropped.
      fc.record({
        kind: fc.constant('rewrite' as const),
        keep: fc.nat(12),
        stub: fc.option(fc.nat(12), { nil: undefined }),
        tail: fc.nat(4),
      }),
      fc.record({ kind: fc.constant('system' as const), system: fc.constantFrom('s', 't') }),
    );
    fc.assert(
      fc.property(fc.array(step, { maxLength: 30 }), (steps) => {
        const cache = new PromptCache();
        let live: Message[] = [{ role: 'user', content: 'task' }];
        let system = 's';
        for (const next of steps) {
          if (next.kind === 'append') live.push(...next.picks.map((pick) => ({ ...pool[pick]! })));
          if (next.kind === 'system') system = next.system;
          if (next.kind === 'rewrite') {
            const kept = live.slice(0, Math.max(1, Math.min(next.keep, live.length)));
            if (next.stub !== undefined && next.stub > 0 && next.stub < kept.length)
              kept[next.stub] = { role: 'user', content: `[elided ${next.stub}]` };
            live = [...kept, ...live.slice(live.length - Math.min(next.tail, live.length - kept.length))];
          }
          const prompt = cache.build(system, live);
          expect(prompt).toEqual(fresh(system, live));
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('the adapter in a run', () => {
  it('property: through compactions and truncations, every prompt the model gets equals a full rebuild', async () => {
    const echo: Tool<{ out: string }> = {
      name: 'echo',
      description: 'returns its `out`',
      input: z.object({ out: z.string() }),
      claim: () => ({ kind: 'none' }),
      execute: (input) => Promise.resolve({ output: input.out }),
    };
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.array(fc.string({ maxLength: 900 }), { minLength: 1, maxLength: 3 }), { maxLength: 12 }),
        fc.integer({ min: 60, max: 3000 }),
        fc.boolean(),
        async (turns, maxTokens, summarise) => {
          const prompts: unknown[] = [];
          let step = 0;
          const model: LanguageModelV3 = {
            specificationVersion: 'v3',
            provider: 'test',
            modelId: 'scripted',
            supportedUrls: {},
            doGenerate: (options) => {
              prompts.push(structuredClone(options.prompt));
              const outs = turns[step++];
              return Promise.resolve({
                content: outs
                  ? outs.map((out, index) => ({
                      type: 'tool-call' as const,
                      toolCallId: `c${step}_${index}`,
                      toolName: 'echo',
                      input: JSON.stringify({ out }),
                    }))
                  : [{ type: 'text' as const, text: 'done' }],
                finishReason: outs
                  ? { unified: 'tool-calls', raw: 'tool_calls' }
                  : { unified: 'stop', raw: 'stop' },
                usage: {
                  inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 },
                  outputTokens: { total: 1, text: 1, reasoning: 0 },
                },
                warnings: [],
              });
            },
            doStream: () => Promise.reject(new Error('not streamed')),
          };
          // What the harness handed the adapter each turn, rebuilt from scratch.
          const adapter = aiSdkProvider('test', model);
          const expected: unknown[] = [];
          const provider = {
            id: 'test',
            think: (request: ThinkRequest, signal: AbortSignal) => {
              expected.push(new PromptCache().build(request.system, [...request.messages]));
              return adapter.think(request, signal);
            },
          };
          const result = await new AgentHarness({
            provider,
            tools: [echo],
            sessions: new InMemorySessionStore(),
            contextBudget: { maxTokens, ...(summarise ? { compactor: (ms) => `${ms.length} msgs` } : {}) },
          }).run({ prompt: 'task' });
          expect(result.terminateReason).toEqual({ kind: 'model_stop' });
          expect(prompts).toHaveLength(turns.length + 1);
          expect(prompts).toEqual(expected);
        },
      ),
      { numRuns: 80 },
    );
  });
});

describe('only an explicit stop stops, over the real wire', () => {
  const note: Tool<{ text: string }> = {
    name: 'note',
    description: 'notes a line',
    input: z.object({ text: z.string() }),
    claim: () => ({ kind: 'none' }),
    execute: (input) => Promise.resolve({ output: `noted ${input.text}` }),
  };
  const runScript = async (kind: 'openai-compatible' | 'anthropic', script: readonly Reply[]) => {
    let index = 0;
    const scripted = await startFakeLlm(() => script[Math.min(index++, script.length - 1)]!);
    try {
      const provider = createProvider(
        configSchema.parse({
          agent: { provider: kind, model: 'm', base_url: scripted.baseUrl, api_key_env: 'FAKE_KEY' },
        }).agent,
        { FAKE_KEY: 'sk-test' },
      )!;
      const steps: TurnStep[] = [];
      const result = await new AgentHarness({
        provider,
        tools: [note],
        sessions: new InMemorySessionStore(),
      }).run({ prompt: 'task' }, { onStep: (step) => steps.push(step) });
      return { result, steps, requests: scripted.requests };
    } finally {
      await scripted.close();
    }
  };
  const call = { call: { name: 'note', args: { text: 'a' } } };
  const said = (request: { body: any }) => JSON.stringify(request.body.messages);

  it('openai-compatible: "tool_calls" with no calls, null, "function_call" and an empty "stop" go on', async () => {
    const { result, steps, requests } = await runScript('openai-compatible', [
      { text: '', raw: 'tool_calls' },
      { text: 'Let me look first.', raw: null },
      call,
      { text: '', raw: 'function_call' },
      { text: '', raw: 'stop' },
      { text: 'Done.\nVERDICT: PASS', raw: 'stop' },
    ]);
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(result.finalText).toBe('Done.\nVERDICT: PASS');
    expect(requests).toHaveLength(6);
    expect(steps.map((step) => step.error)).toEqual([
      'the reply ended for tool calls (finish reason "tool_calls") but had none',
      'the reply had no tool calls and no explicit stop (finish reason none)',
      undefined,
      'the reply ended for tool calls (finish reason "function_call") but had none',
      'the reply was empty: no text and no tool calls',
      undefined,
    ]);
    expect(said(requests[1]!)).toContain('not taken as a stop');
    expect(said(requests[5]!)).toContain('[harness] the reply was empty');
  });

  it('anthropic: "tool_use" with no calls, "pause_turn" and an empty "end_turn" go on; no empty message is sent back', async () => {
    const { result, steps, requests } = await runScript('anthropic', [
      { text: '', raw: 'tool_use' },
      { text: 'Searching…', raw: 'pause_turn' },
      call,
      { text: '', raw: 'end_turn' },
      { text: 'Done.', raw: 'stop_sequence' },
    ]);
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(steps.map((step) => step.error)).toEqual([
      'the reply ended for tool calls (finish reason "tool_use") but had none',
      'the reply had no tool calls and no explicit stop (finish reason "pause_turn")',
      undefined,
      'the reply was empty: no text and no tool calls',
      undefined,
    ]);
    for (const request of requests)
      for (const message of request.body.messages) expect(message.content).not.toEqual([]);
  });

  it.each(['openai-compatible', 'anthropic'] as const)(
    '%s: a provider that only answers empty replies ends the run by the failure watchdog, not as a stop',
    async (kind) => {
      const { result } = await runScript(kind, [{ text: '' }]);
      expect(result.terminateReason).toEqual({
        kind: 'consecutive_failures',
        count: 3,
        lastError: 'the reply was empty: no text and no tool calls',
      });
    },
  );
});

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

describe('a reply over [agent].max_reply_kib', () => {
  const limited = (kind: 'openai-compatible' | 'anthropic', baseUrl: string, kib: number) =>
    configSchema.parse({
      agent: { provider: kind, model: 'm', base_url: baseUrl, api_key_env: 'FAKE_KEY', max_reply_kib: kib },
    }).agent;
  const TOO_LARGE =
    /the model's reply is larger than (\d+) KiB of text and tool-call arguments \(\[agent\]\.max_reply_kib\): it was cut off, and nothing of it was run/;

  it.each([
    ['openai-compatible', 64 * 1024],
    ['anthropic', 64 * 1024],
    ['openai-compatible', 1 << 30], // the whole content in one event
    ['anthropic', 1 << 30],
  ] as const)(
    '%s, %i characters an event: the run ends with an error naming the key, the call never runs, the rest is never read',
    async (kind, piece) => {
      const size = 20_000_000;
      const path = `huge-${kind}-${piece}.txt`;
      const endpoint = await startHugeReplyLlm({ size, piece, path });
      try {
        const harness = new AgentHarness({
          provider: createProvider(limited(kind, endpoint.baseUrl, 256), { FAKE_KEY: 'sk-test' })!,
          tools: builtinTools({
            cwd: dir,
            ptyManager: ptys,
            goals: new Map(),
            defaultShellTimeoutMs: 10_000,
          }),
          sessions: new InMemorySessionStore(),
        });
        const result = await harness.run({ prompt: 'write the big file' });
        expect(result.terminateReason).toEqual({
          kind: 'error',
          error: { kind: 'llm', message: expect.stringMatching(TOO_LARGE) },
        });
        expect((result.terminateReason as any).error.message).toContain('larger than 256 KiB');
        expect(existsSync(join(dir, path))).toBe(false);
        // One request (not retried), cut off by the client long before its end.
        expect(endpoint.written).toHaveLength(1);
        await vi.waitFor(() => expect(endpoint.cutShort[0]).toBe(true));
        expect(endpoint.written[0]).toBeLessThan(size / 4);
      } finally {
        await endpoint.close();
      }
    },
  );

  it('a whole reply that is not streamed, over the bound: the same error', async () => {
    const big = await startFakeLlm(() => ({
      call: { name: 'write_file', args: { path: 'x.txt', content: 'A'.repeat(300_000) } },
    }));
    try {
      const provider = createProvider(limited('openai-compatible', big.baseUrl, 16), { FAKE_KEY: 'k' })!;
      const failure = provider.think(request(), never);
      await expect(failure).rejects.toBeInstanceOf(FatalProviderError);
      await expect(failure).rejects.toThrow(TOO_LARGE);
      expect(big.requests).toHaveLength(1);
    } finally {
      await big.close();
    }
  });

  it('a reply within the bound, in many events, runs as before', async () => {
    const path = 'within-bound.txt';
    const endpoint = await startHugeReplyLlm({ size: 200_000, piece: 1000, path });
    try {
      const provider = createProvider(limited('openai-compatible', endpoint.baseUrl, 256), {
        FAKE_KEY: 'k',
      })!;
      const parts = [];
      for await (const part of provider.stream!(request(), never)) parts.push(part);
      const call = parts.find((part) => part.type === 'tool-call');
      expect(call?.type === 'tool-call' && (call.call.args as { content: string }).content).toHaveLength(
        200_000,
      );
      expect(parts.at(-1)).toMatchObject({ type: 'finish', stopReason: 'tool_use' });
    } finally {
      await endpoint.close();
    }
  });

  it('a bad bound is a config error naming the key', () => {
    expect(() => configSchema.parse({ agent: { max_reply_kib: 0 } })).toThrow(/must be a positive integer/);
    expect(configSchema.parse({}).agent.max_reply_kib).toBe(4096);
  });
});

it('a malformed chunk of a megabyte breaks the turn with an excerpt of it, not all of it', async () => {
  const server = createHttpServer((request, response) => {
    request.resume();
    request.on('end', () => {
      response.writeHead(200, { 'content-type': 'text/event-stream' });
      response.end(`data: {"choices": [ {"delta": ${'A'.repeat(1_000_000)}\n\n`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  try {
    const { port } = server.address() as AddressInfo;
    const provider = createProvider(
      configSchema.parse({
        agent: { provider: 'openai-compatible', model: 'm', base_url: `http://127.0.0.1:${port}/v1` },
      }).agent,
      {},
    )!;
    const failure = (async () => {
      for await (const part of provider.stream!(request(), never)) void part;
    })();
    await expect(failure).rejects.toThrow(/the reply stream broke: .*AAAA/);
    const message = await failure.then(
      () => '',
      (error: Error) => error.message,
    );
    expect(message.length).toBeLessThan(1000);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});
