import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RecordingPowerCapability } from '@aleph/power/testing';
import { ShellStopHook, StopHookVerifier, ToolLoopVerifier, VerifierChain } from '@aleph/verification';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentHarness,
  FatalProviderError,
  InMemorySessionStore,
  MAX_TIMER_MS,
  Orchestrator,
  timerDelay,
  type CommandSandbox,
  type HarnessDeps,
  type Message,
  type SessionEvent,
  type ThinkResponse,
  type Tool,
  type ToolHookContext,
  type ToolHooks,
  type ToolInvocation,
  type TurnStep,
} from './index.js';
import { callTool, callTools, ScriptedProvider, stop } from './testing.js';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'aleph-harness-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => (clearTimeout(timer), reject(new Error('aborted'))), {
      once: true,
    });
  });

const echoTool: Tool<{ text: string }> = {
  name: 'echo',
  description: 'Echo text back',
  input: z.object({ text: z.string() }),
  claim: () => ({ kind: 'none' }),
  execute: ({ text }) => Promise.resolve({ output: text }),
};

const harness = (provider: ScriptedProvider, extra: Partial<HarnessDeps> = {}) =>
  new AgentHarness({ provider, tools: [echoTool], sessions: new InMemorySessionStore(), ...extra });

const lastUserText = (messages: readonly Message[]) =>
  messages.filter((m) => m.role === 'user').at(-1)?.content;

describe('ends', () => {
  it('the model stops → model_stop, with counters', async () => {
    const provider = new ScriptedProvider([
      callTool('echo', { text: 'hi' }),
      stop('All good.\nVERDICT: PASS'),
    ]);
    const result = await harness(provider).run({ prompt: 'say hi' });
    expect(result).toMatchObject({
      terminateReason: { kind: 'model_stop' },
      iterations: 2,
      totalTokens: 30,
      finalText: 'All good.\nVERDICT: PASS',
    });
    expect(result.toolTimeline).toEqual([expect.objectContaining({ name: 'echo', ok: true })]);
    expect(provider.requests[1]!.messages.at(-1)).toMatchObject({
      role: 'tool',
      toolName: 'echo',
      content: 'hi',
    });
    expect(provider.requests[0]!.tools[0]).toMatchObject({
      name: 'echo',
      inputSchema: { type: 'object', properties: { text: { type: 'string' } } },
    });
  });

  it("a long run does not pile listeners onto the caller's signal", async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    const provider = new ScriptedProvider([callTool('echo', { text: 'again' })], { repeatLast: true });
    await harness(provider, { maxIterations: 30 }).run(
      { prompt: 'loop' },
      { signal: new AbortController().signal },
    );
    await new Promise((resolve) => setImmediate(resolve));
    process.off('warning', onWarning);
    expect(warnings.filter((warning) => warning.name === 'MaxListenersExceededWarning')).toEqual([]);
  });

  it('maxIterations is a hard cap', async () => {
    const provider = new ScriptedProvider([callTool('echo', { text: 'again' })], { repeatLast: true });
    const result = await harness(provider, { maxIterations: 4 }).run({ prompt: 'loop' });
    expect(result.terminateReason).toEqual({ kind: 'max_iterations' });
    expect(result.iterations).toBe(4);
    expect(provider.requests).toHaveLength(4);
  });

  it('turnTimeoutMs bounds Think → stalled_turn', async () => {
    let sawAbort = false;
    const provider = new ScriptedProvider([
      (_request, _index, signal) =>
        new Promise((_, reject) =>
          signal.addEventListener('abort', () => ((sawAbort = true), reject(new Error('aborted')))),
        ),
    ]);
    const result = await harness(provider, { turnTimeoutMs: 100 }).run({ prompt: 'think forever' });
    expect(result.terminateReason).toMatchObject({ kind: 'error', error: { kind: 'stalled_turn' } });
    const error = (result.terminateReason as { error: { elapsedMs: number } }).error;
    expect(error.elapsedMs).toBeGreaterThanOrEqual(90);
    expect(sawAbort).toBe(true);
  });

  it('a turn or tool timeout above 2^31-1 ms waits (clamped), never fires after 1 ms', async () => {
    const thirtyDays = 2_592_000 * 1000;
    const patient: Tool<object> = {
      name: 'patient',
      description: 'answers after a moment',
      input: z.object({}),
      timeoutMs: thirtyDays,
      execute: () => sleep(50).then(() => ({ output: 'finished' })),
    };
    const provider = new ScriptedProvider([
      () => sleep(50).then(() => callTool('patient')),
      () => sleep(50).then(() => stop()),
    ]);
    const result = await harness(provider, { tools: [patient], turnTimeoutMs: thirtyDays }).run({
      prompt: 'x',
    });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(provider.requests[1]!.messages.at(-1)).toMatchObject({ content: 'finished' });
    expect([timerDelay(thirtyDays), timerDelay(Infinity), timerDelay(-5)]).toEqual([
      MAX_TIMER_MS,
      MAX_TIMER_MS,
      0,
    ]);
  });

  it('error results are answers, not failures: a failing command 3+ turns in a row, then a stop → model_stop', async () => {
    // A shell command exiting non-zero, a test run failing, a throw, a timeout: the call ran, and
    // the model reads its result.
    const shell: Tool<{ command: string }> = {
      name: 'shell',
      description: 'runs a command',
      input: z.object({ command: z.string() }),
      timeoutMs: 50,
      execute: ({ command }, ctx) =>
        command === 'hang'
          ? sleep(10_000, ctx.signal).then(() => ({ output: 'late' }))
          : command === 'throw'
            ? Promise.reject(new Error('boom'))
            : Promise.resolve({ output: `$ ${command}\n[exit code 1]`, isError: true }),
    };
    const provider = new ScriptedProvider([
      callTool('shell', { command: 'pnpm test' }),
      callTool('shell', { command: 'grep -r missing .' }),
      callTool('shell', { command: 'throw' }),
      callTool('shell', { command: 'hang' }),
      callTool('shell', { command: 'pnpm test' }),
      stop('Tests still fail.\nVERDICT: FAIL'),
    ]);
    const steps: TurnStep[] = [];
    const result = await harness(provider, { tools: [shell] }).run(
      { prompt: 'fix the tests' },
      { onStep: (step) => steps.push(step) },
    );
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(result.iterations).toBe(6);
    expect(steps.slice(0, 5).map((step) => [step.executed, step.error])).toEqual(
      Array(5).fill([0, undefined]),
    );
    const results = provider.requests[5]!.messages.filter((m) => m.role === 'tool');
    expect(results.map((m) => [m.content, m.role === 'tool' && m.isError])).toEqual([
      ['$ pnpm test\n[exit code 1]', true],
      ['$ grep -r missing .\n[exit code 1]', true],
      ['tool shell failed: boom', true],
      ['tool shell timed out after 50 ms', true],
      ['$ pnpm test\n[exit code 1]', true],
    ]);
  });

  it('calls a hook denied are feedback, not failures: three turns of denials do not end the run', async () => {
    const toolHooks: ToolHooks = {
      before: (call) =>
        Promise.resolve(
          (call.args as { text: string }).text.startsWith('grep')
            ? { kind: 'deny', reason: 'use rg instead of grep' }
            : { kind: 'allow' },
        ),
    };
    const provider = new ScriptedProvider([
      callTool('echo', { text: 'grep -r foo .' }),
      callTools([
        { name: 'echo', args: { text: 'grep foo a' } },
        { name: 'echo', args: { text: 'grep foo b' } },
      ]),
      callTool('echo', { text: 'grep -n foo' }),
      callTool('echo', { text: 'rg foo' }),
      stop(),
    ]);
    const result = await harness(provider, { toolHooks }).run({ prompt: 'find foo' });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(result.iterations).toBe(5);
    expect(provider.requests[3]!.messages.at(-1)).toMatchObject({
      content: 'use rg instead of grep',
      isError: true,
    });
  });

  it('3 turns whose calls could none be run (unknown tool, bad args) → consecutive_failures, naming the cause', async () => {
    const provider = new ScriptedProvider([
      callTool('nope'),
      callTools([{ name: 'echo', args: { text: 3 } }, { name: 'nope' }]),
      callTool('echo', { txt: 'hi' }),
      stop(),
    ]);
    const steps: TurnStep[] = [];
    const result = await harness(provider).run({ prompt: 'x' }, { onStep: (step) => steps.push(step) });
    expect(result.terminateReason).toEqual({
      kind: 'consecutive_failures',
      count: 3,
      lastError: expect.stringMatching(/^no call could be run: invalid arguments for echo: text/),
    });
    expect(provider.requests).toHaveLength(3);
    expect(provider.requests[1]!.messages.at(-1)).toMatchObject({
      content: expect.stringContaining('unknown tool "nope"'),
      isError: true,
    });
    // A turn with one call that ran resets the streak.
    const mixed = new ScriptedProvider([
      callTool('nope'),
      callTool('nope'),
      callTools([{ name: 'nope' }, { name: 'echo', args: { text: 'ok' } }]),
      callTool('nope'),
      callTool('nope'),
      stop(),
    ]);
    expect((await harness(mixed).run({ prompt: 'x' })).terminateReason).toEqual({ kind: 'model_stop' });
  });

  it('provider failures count toward the watchdog', async () => {
    const provider = new ScriptedProvider([() => Promise.reject(new Error('503 from upstream'))], {
      repeatLast: true,
    });
    const steps: TurnStep[] = [];
    const result = await harness(provider).run({ prompt: 'x' }, { onStep: (step) => steps.push(step) });
    expect(result.terminateReason).toEqual({
      kind: 'consecutive_failures',
      count: 3,
      lastError: '503 from upstream',
    });
    expect(lastUserText(provider.requests[2]!.messages)).toContain('503 from upstream');
    // The cause is in every step, for the server to show (not only in the session file).
    expect(steps.map((step) => step.error)).toEqual(Array(3).fill('503 from upstream'));
  });

  it('a FatalProviderError (or any rejection with fatal: true) ends the run at once as error: llm', async () => {
    for (const fatal of [
      new FatalProviderError('401 Unauthorized: API key is missing', { status: 401 }),
      Object.assign(new Error('model "nope" not found'), { fatal: true }),
    ]) {
      const provider = new ScriptedProvider([() => Promise.reject(fatal)], { repeatLast: true });
      const result = await harness(provider).run({ prompt: 'x' });
      expect(result.terminateReason).toEqual({
        kind: 'error',
        error: { kind: 'llm', message: fatal.message },
      });
      expect(provider.requests).toHaveLength(1);
    }
  });

  it('a reply cut off at the token limit is not a stop: the model is told and the run goes on', async () => {
    const cut: ThinkResponse = { text: 'Here is the long answ', toolCalls: [], stopReason: 'max_tokens' };
    const provider = new ScriptedProvider([cut, stop('short answer')]);
    const steps: TurnStep[] = [];
    const result = await harness(provider).run({ prompt: 'x' }, { onStep: (step) => steps.push(step) });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(result.finalText).toBe('short answer');
    expect(provider.requests).toHaveLength(2);
    expect(provider.requests[1]!.messages.at(-2)).toEqual({ role: 'assistant', content: cut.text });
    expect(lastUserText(provider.requests[1]!.messages)).toMatch(/cut off at the output token limit/);
    expect(steps[0]).toMatchObject({ state: 'continue', error: expect.stringMatching(/cut off/) });
  });

  it('a model that is cut off every time is ended by the failure watchdog, naming the cause', async () => {
    const cut: ThinkResponse = { text: '…', toolCalls: [], stopReason: 'max_tokens' };
    const result = await harness(new ScriptedProvider([cut], { repeatLast: true })).run({ prompt: 'x' });
    expect(result.terminateReason).toEqual({
      kind: 'consecutive_failures',
      count: 3,
      lastError: 'the reply was cut off at the output token limit',
    });
  });

  it('only an explicit stop with something said stops: tool_use with no calls, other, a missing finish and an empty reply go on', async () => {
    const replies: ThinkResponse[] = [
      { text: '', toolCalls: [], stopReason: 'tool_use', rawStopReason: 'tool_calls' },
      { text: 'Let me check.', toolCalls: [], stopReason: 'other' },
      callTool('echo', { text: 'a' }),
      { text: 'x', toolCalls: [] } as unknown as ThinkResponse, // an untyped provider: no finish
      { text: '  \n', toolCalls: [], stopReason: 'end_turn' },
      stop('short answer'),
    ];
    const provider = new ScriptedProvider(replies);
    const steps: TurnStep[] = [];
    const result = await harness(provider).run({ prompt: 'x' }, { onStep: (step) => steps.push(step) });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(result.finalText).toBe('short answer');
    expect(steps.map((step) => step.error)).toEqual([
      'the reply ended for tool calls (finish reason "tool_calls") but had none',
      'the reply had no tool calls and no explicit stop (finish reason none)',
      undefined,
      'the reply had no tool calls and no explicit stop (finish reason none)',
      'the reply was empty: no text and no tool calls',
      undefined,
    ]);
    expect(lastUserText(provider.requests[1]!.messages)).toMatch(/not taken as a stop/);
    // An empty reply is logged, not sent back: nothing said, and Anthropic refuses an empty message.
    expect(provider.requests[1]!.messages.filter((message) => message.role === 'assistant')).toEqual([]);
    const sentBack = provider.requests[5]!.messages.filter((message) => message.role === 'assistant');
    expect(sentBack.map((message) => message.content)).toEqual(['Let me check.', '', 'x']); // '' is the call's
  });

  it('a provider that only answers empty stops is ended by the failure watchdog, not as a stop', async () => {
    const empty: ThinkResponse = { text: '', toolCalls: [], stopReason: 'end_turn' };
    const result = await harness(new ScriptedProvider([empty], { repeatLast: true })).run({ prompt: 'x' });
    expect(result.terminateReason).toEqual({
      kind: 'consecutive_failures',
      count: 3,
      lastError: 'the reply was empty: no text and no tool calls',
    });
  });

  it('a content-filter finish ends the run as an error, never as a stop', async () => {
    const filtered: ThinkResponse = { text: '', toolCalls: [], stopReason: 'content_filter' };
    const result = await harness(new ScriptedProvider([filtered, stop()])).run({ prompt: 'x' });
    expect(result.terminateReason).toEqual({
      kind: 'error',
      error: { kind: 'llm', message: "the provider's content filter stopped the reply" },
    });
  });

  it('an abort mid-tool ends the run cancelled, promptly, and the tool sees it', async () => {
    let toolSawAbort = false;
    const slow: Tool<object> = {
      name: 'slow',
      description: 'waits',
      input: z.object({}),
      execute: async (_args, ctx) => {
        await sleep(10_000, ctx.signal).catch(() => (toolSawAbort = true));
        return { output: 'late' };
      },
    };
    const controller = new AbortController();
    const provider = new ScriptedProvider([callTool('slow'), stop()]);
    setTimeout(() => controller.abort(), 100);
    const started = Date.now();
    const result = await harness(provider, { tools: [slow] }).run(
      { prompt: 'x' },
      { signal: controller.signal },
    );
    expect(result.terminateReason).toEqual({ kind: 'cancelled' });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(toolSawAbort).toBe(true);
  });
});

describe('verifier chain', () => {
  it('a stop hook that blocks once: its feedback is in the next request, then the stop goes through', async () => {
    const script = join(dir, 'hook.sh');
    writeFileSync(
      script,
      `#!/bin/sh\nif [ -f ${dir}/blocked ]; then exit 0; fi\ntouch ${dir}/blocked\necho "run the tests first" >&2\nexit 2\n`,
    );
    chmodSync(script, 0o755);
    const chain = VerifierChain.builder()
      .with(new StopHookVerifier([new ShellStopHook({ name: 'tests', command: script })]))
      .build();
    const provider = new ScriptedProvider([stop('done?'), stop('now done')]);
    const steps: unknown[] = [];
    const result = await harness(provider, { verifier: chain }).run(
      { prompt: 'x' },
      { onStep: (step) => steps.push(step) },
    );
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(lastUserText(provider.requests[1]!.messages)).toBe('run the tests first');
    expect(steps).toEqual([
      expect.objectContaining({ state: 'continue', vetoed: true }),
      expect.objectContaining({ state: 'done', vetoed: false }),
    ]);
  });

  it('a stop hook that halts ends the run halted, naming it', async () => {
    const chain = VerifierChain.builder()
      .with(
        new StopHookVerifier([
          new ShellStopHook({ name: 'budget', command: 'echo "out of budget" >&2; exit 3' }),
        ]),
      )
      .build();
    const result = await harness(new ScriptedProvider([stop()]), { verifier: chain }).run({ prompt: 'x' });
    expect(result.terminateReason).toEqual({
      kind: 'halted',
      by: 'stop_hooks',
      reason: 'stop hook "budget" halted: out of budget',
    });
  });

  it('5 identical calls → feedback (and the 5th is not run); 8 → halt', async () => {
    let executions = 0;
    const counting: Tool<{ path: string }> = {
      name: 'read',
      description: 'read',
      input: z.object({ path: z.string() }),
      claim: () => ({ kind: 'none' }),
      execute: () => (executions++, Promise.resolve({ output: 'same' })),
    };
    const chain = VerifierChain.builder().with(new ToolLoopVerifier()).build();
    const provider = new ScriptedProvider([callTool('read', { path: 'a' })], { repeatLast: true });
    const result = await harness(provider, { verifier: chain, tools: [counting] }).run({ prompt: 'x' });
    expect(result.terminateReason).toMatchObject({
      kind: 'halted',
      by: 'tool_loop',
      reason: expect.stringContaining('8 times in a row'),
    });
    expect(lastUserText(provider.requests[5]!.messages)).toMatch(/called read 5 times in a row/);
    expect(provider.requests).toHaveLength(8);
    expect(executions).toBe(6); // calls 1-4, 6, 7: the vetoed 5th and the halting 8th never ran
  });
});

describe('tool-loop verifier', () => {
  const reader: Tool<{ path: string }> = {
    name: 'read',
    description: 'read',
    input: z.object({ path: z.string() }),
    claim: () => ({ kind: 'none' }),
    execute: () => Promise.resolve({ output: 'same' }),
  };
  const looping = () => new ScriptedProvider([callTool('read', { path: 'a' })], { repeatLast: true });

  it('a halt threshold above the 8-call window fires', async () => {
    const chain = VerifierChain.builder()
      .with(new ToolLoopVerifier({ haltThreshold: 12 }))
      .build();
    const provider = looping();
    const result = await harness(provider, { verifier: chain, tools: [reader], maxIterations: 20 }).run({
      prompt: 'x',
    });
    expect(result.terminateReason).toMatchObject({
      kind: 'halted',
      by: 'tool_loop',
      reason: expect.stringContaining('12 times in a row'),
    });
    expect(provider.requests).toHaveLength(12);
  });

  it('the same command once per stop attempt, with every stop blocked (a Ralph loop), is not a tool loop', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-ralph-'));
    const count = join(dir, 'count');
    // Blocks the first 10 stops, as a Ralph loop's hook does until its work is done.
    const hook = `n=$(cat ${count} 2>/dev/null || echo 0); echo $((n+1)) > ${count}; [ $n -ge 10 ] && exit 0; echo "again" >&2; exit 2`;
    const chain = VerifierChain.builder()
      .with(new ToolLoopVerifier())
      .with(new StopHookVerifier([new ShellStopHook({ name: 'ralph', command: hook })]))
      .build();
    const script = Array.from({ length: 11 }, () => [callTool('read', { path: 'a' }), stop('done')]).flat();
    const provider = new ScriptedProvider(script);
    try {
      const result = await harness(provider, { verifier: chain, tools: [reader], maxIterations: 30 }).run({
        prompt: 'x',
      });
      expect(result.terminateReason).toEqual({ kind: 'model_stop' });
      expect(provider.requests).toHaveLength(22);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("the model's robustness profile (HarnessDeps.robustnessProfile) sets the thresholds", async () => {
    const chain = VerifierChain.builder().with(new ToolLoopVerifier()).build();
    const provider = looping();
    const result = await harness(provider, {
      verifier: chain,
      tools: [reader],
      robustnessProfile: { toolLoopRepeatThreshold: 2, toolLoopHaltThreshold: 10 },
    }).run({ prompt: 'x' });
    expect(lastUserText(provider.requests[2]!.messages)).toMatch(/called read 2 times in a row/);
    expect(result.terminateReason).toMatchObject({ reason: expect.stringContaining('10 times in a row') });
  });
});

describe('ACT', () => {
  const timed = (
    name: string,
    claim: Tool<{ path: string }>['claim'],
    log: string[] = [],
  ): Tool<{ path: string }> => ({
    name,
    description: name,
    input: z.object({ path: z.string() }),
    ...(claim ? { claim } : {}),
    execute: async ({ path }) => {
      log.push(`${name}:${path}`);
      await sleep(100);
      return { output: `${name} ${path}` };
    },
  });
  const overlap = (a: ToolInvocation, b: ToolInvocation) =>
    a.startedAt < b.endedAt && b.startedAt < a.endedAt;
  const run = async (calls: { name: string; args: unknown }[], extra: Partial<HarnessDeps> = {}) => {
    const tools = [
      timed('read', (args) => ({ kind: 'shared', keys: [args.path] })),
      timed('write', (args) => ({ kind: 'exclusive', keys: [args.path] })),
      timed('unclaimed', undefined),
    ];
    const provider = new ScriptedProvider([callTools(calls), stop()]);
    const result = await harness(provider, { tools, ...extra }).run({ prompt: 'x' });
    return { result, provider };
  };

  it('shared claims on one path and exclusive claims on different paths run concurrently', async () => {
    const { result } = await run([
      { name: 'read', args: { path: '/a' } },
      { name: 'read', args: { path: '/a ' } },
      { name: 'write', args: { path: '/b' } },
      { name: 'write', args: { path: '/c' } },
    ]);
    const [r1, r2, w1, w2] = result.toolTimeline as [
      ToolInvocation,
      ToolInvocation,
      ToolInvocation,
      ToolInvocation,
    ];
    expect(overlap(r1, r2)).toBe(true);
    expect(overlap(w1, w2)).toBe(true);
    expect(overlap(r1, w1)).toBe(true);
  });

  it('a write conflicts with a read of the same path, and runs after it; an unclaimed tool runs alone', async () => {
    const { result, provider } = await run([
      { name: 'read', args: { path: '/a' } },
      { name: 'write', args: { path: '/a' } },
      { name: 'unclaimed', args: { path: '/z' } },
    ]);
    const [read, write, unclaimed] = result.toolTimeline as [ToolInvocation, ToolInvocation, ToolInvocation];
    expect(overlap(read, write)).toBe(false);
    expect(write.startedAt).toBeGreaterThanOrEqual(read.endedAt);
    expect(overlap(unclaimed, read) || overlap(unclaimed, write)).toBe(false);
    // Results come back in the model's order.
    expect(provider.requests[1]!.messages.filter((m) => m.role === 'tool').map((m) => m.content)).toEqual([
      'read /a',
      'write /a',
      'unclaimed /z',
    ]);
  });

  it('a guardrail that rewrites any call → the whole batch runs serially', async () => {
    const { result } = await run(
      [
        { name: 'read', args: { path: '/a' } },
        { name: 'read', args: { path: '/secret' } },
      ],
      {
        guardrails: {
          toolArgs: (call) =>
            (call.args as { path: string }).path === '/secret' ? { path: '/***' } : call.args,
        },
      },
    );
    const [a, b] = result.toolTimeline as [ToolInvocation, ToolInvocation];
    expect(overlap(a, b)).toBe(false);
  });

  it('a duplicate read-only call reuses the first result within or across batches, until anything else runs', async () => {
    const ran: string[] = [];
    const read = {
      ...timed('read', (args) => ({ kind: 'shared', keys: [args.path] }), ran),
      kind: 'evidence' as const,
      readOnly: true,
    };
    const write = {
      ...timed('write', (args) => ({ kind: 'exclusive', keys: [args.path] }), ran),
      kind: 'mutation' as const,
    };
    // Evidence (like a shell command running the tests) but not read-only: never reused.
    const other = { ...timed('probe', () => ({ kind: 'none' }), ran), kind: 'evidence' as const };
    const provider = new ScriptedProvider([
      callTool('read', { path: '/a' }),
      callTool('read', { path: '/a' }), // reused across batches
      callTools([
        { name: 'read', args: { path: '/a' } }, // reused
        { name: 'probe', args: { path: '/p' } },
        { name: 'probe', args: { path: '/p' } }, // may have side effects: runs again
        { name: 'read', args: { path: '/a' } }, // a probe ran since: runs again
      ]),
      callTool('write', { path: '/a' }),
      callTool('read', { path: '/a' }), // a write ran since: runs again
      callTools([
        { name: 'read', args: { path: '/b' } },
        { name: 'write', args: { path: '/b' } },
        { name: 'read', args: { path: '/b' } }, // after the write in the same batch: runs again
      ]),
      callTool('read', { path: '/b' }), // the last batch wrote: runs again
      stop(),
    ]);
    const result = await harness(provider, { tools: [read, write, other] }).run({ prompt: 'x' });
    expect(ran).toEqual([
      'read:/a',
      'probe:/p',
      'probe:/p',
      'read:/a',
      'write:/a',
      'read:/a',
      'read:/b',
      'write:/b',
      'read:/b',
      'read:/b',
    ]);
    expect(result.toolTimeline.filter((call) => call.deduplicated).map((call) => call.ok)).toEqual([
      true,
      true,
    ]);
    // A reused result is the same text the model read the first time.
    const toolText = (index: number) => provider.requests[index]!.messages.at(-1)!.content;
    expect(toolText(2)).toBe('read /a');
  });

  it('a tool timeout becomes an error result the next Think reads', async () => {
    const hanging: Tool<object> = {
      name: 'hang',
      description: 'hangs',
      input: z.object({}),
      timeoutMs: 50,
      execute: () => new Promise(() => {}),
    };
    const provider = new ScriptedProvider([callTool('hang'), stop()]);
    const result = await harness(provider, { tools: [hanging] }).run({ prompt: 'x' });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(provider.requests[1]!.messages.at(-1)).toMatchObject({
      role: 'tool',
      content: 'tool hang timed out after 50 ms',
      isError: true,
    });
  });

  it('invalid args become an error result that names the field; an unknown tool too', async () => {
    const provider = new ScriptedProvider([
      callTools([
        { name: 'echo', args: { text: 5 } },
        { name: 'nope', args: {} },
      ]),
      stop(),
    ]);
    await harness(provider).run({ prompt: 'x' });
    const results = provider.requests[1]!.messages.filter((m) => m.role === 'tool');
    expect(results[0]).toMatchObject({
      isError: true,
      content: expect.stringMatching(/^invalid arguments for echo: text: /),
    });
    expect(results[1]).toMatchObject({ isError: true, content: 'unknown tool "nope"; available: echo' });
  });
});

describe('THINK', () => {
  it('holds the sleep guard from the top of Think until the turn returns, never between turns', async () => {
    const power = new RecordingPowerCapability();
    const heldDuringThink: number[] = [];
    const provider = new ScriptedProvider([
      () => (heldDuringThink.push(power.held), callTool('echo', { text: 'a' })),
      () => (heldDuringThink.push(power.held), stop()),
    ]);
    const observed: number[] = [];
    await harness(provider, { power }).run({ prompt: 'x' }, { onStep: () => observed.push(power.held) });
    expect(heldDuringThink).toEqual([1, 1]);
    expect(observed).toEqual([0, 0]); // released before each step is reported
    expect(power.events.map((event) => `${event.kind}:${event.reason}`)).toEqual([
      'acquire:Aleph agent loop',
      'release:Aleph agent loop',
      'acquire:Aleph agent loop',
      'release:Aleph agent loop',
    ]);
  });

  it('releases the guard when Think throws or stalls', async () => {
    const power = new RecordingPowerCapability();
    await harness(new ScriptedProvider([() => new Promise(() => {})]), { power, turnTimeoutMs: 50 }).run({
      prompt: 'x',
    });
    expect(power.held).toBe(0);
  });

  it('hands the provider the history itself: the same array each turn, only appended to (no copy a turn)', async () => {
    const seen: { messages: readonly Message[]; length: number }[] = [];
    const script = new ScriptedProvider([
      callTool('echo', { text: 'a' }),
      callTool('echo', { text: 'b' }),
      stop(),
    ]);
    const provider = {
      id: 'identity',
      think: (request: Parameters<ScriptedProvider['think']>[0], signal: AbortSignal) => {
        seen.push({ messages: request.messages, length: request.messages.length });
        return script.think(request, signal);
      },
    };
    await new AgentHarness({ provider, tools: [echoTool], sessions: new InMemorySessionStore() }).run({
      prompt: 'x',
    });
    expect(seen).toHaveLength(3);
    expect(seen[1]!.messages).toBe(seen[0]!.messages);
    expect(seen[2]!.messages).toBe(seen[0]!.messages);
    expect(seen.map((turn) => turn.length)).toEqual([1, 3, 5]);
    // The recorded requests are snapshots, as they were when sent.
    expect(script.requests.map((request) => request.messages.length)).toEqual([1, 3, 5]);
  });

  it('over budget: compacts (stubs old tool outputs), then truncates; each is logged', async () => {
    const big: Tool<object> = {
      name: 'big',
      description: 'big output',
      input: z.object({}),
      execute: () => Promise.resolve({ output: 'x'.repeat(4000) }),
    };
    const provider = new ScriptedProvider([
      callTool('big', { n: 1 }),
      callTool('big', { n: 2 }),
      callTool('big', { n: 3 }),
      stop(),
    ]);
    const store = new InMemorySessionStore();
    const result = await harness(provider, {
      tools: [big],
      sessions: store,
      contextBudget: { maxTokens: 1200 },
    }).run({ prompt: 'task: read big files' });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    const { events } = await store.load(result.sessionId);
    const compactions = events.filter((event) => event.type === 'compaction');
    expect(compactions.map((event) => (event as { mode: string }).mode)).toContain('compact');
    for (const request of provider.requests) {
      const chars = request.messages.reduce((sum, m) => sum + m.content.length, 0);
      expect(chars).toBeLessThan(1200 * 4);
    }
    // The stubs say what was elided.
    expect(provider.requests[2]!.messages.some((m) => m.content.startsWith('[output of big elided'))).toBe(
      true,
    );

    const tiny = new ScriptedProvider([callTool('big', { n: 1 }), callTool('big', { n: 2 }), stop()]);
    const truncatedStore = new InMemorySessionStore();
    const truncated = await harness(tiny, {
      tools: [big],
      sessions: truncatedStore,
      contextBudget: { maxTokens: 300 },
    }).run({ prompt: 'task '.repeat(400) });
    expect(truncated.terminateReason).toEqual({ kind: 'model_stop' });
    const modes = (await truncatedStore.load(truncated.sessionId)).events
      .filter((e) => e.type === 'compaction')
      .map((e) => (e as { mode: string }).mode);
    expect(modes).toContain('truncate');
  });
});

describe('sessions and sub-agents', () => {
  it('a run resumes a session from its log', async () => {
    const store = new InMemorySessionStore();
    const first = await harness(new ScriptedProvider([stop('first answer')]), { sessions: store }).run({
      prompt: 'first question',
    });
    const provider = new ScriptedProvider([stop('second answer')]);
    await harness(provider, { sessions: store }).run({
      prompt: 'second question',
      sessionId: first.sessionId,
    });
    expect(provider.requests[0]!.messages.map((m) => m.content)).toEqual([
      'first question',
      'first answer',
      'second question',
    ]);
  });

  it('resuming a log cut off mid-ACT answers the dangling tool calls as interrupted', async () => {
    const store = new InMemorySessionStore();
    const sessionId = await store.create();
    await store.append(sessionId, { type: 'user', content: 'task' });
    await store.append(sessionId, {
      type: 'assistant',
      content: '',
      toolCalls: [{ id: 'c1', name: 'echo', args: { text: 'x' } }],
    });
    const provider = new ScriptedProvider([stop()]);
    await harness(provider, { sessions: store }).run({ prompt: 'go on', sessionId });
    expect(provider.requests[0]!.messages).toEqual([
      { role: 'user', content: 'task' },
      { role: 'assistant', content: '', toolCalls: [{ id: 'c1', name: 'echo', args: { text: 'x' } }] },
      {
        role: 'tool',
        toolCallId: 'c1',
        toolName: 'echo',
        content: expect.stringContaining('interrupted'),
        isError: true,
      },
      { role: 'user', content: 'go on' },
    ]);
  });

  it('a sub-agent is dispatched as a child flow with its own session, reported as splitChild', async () => {
    const store = new InMemorySessionStore();
    const parentProvider = new ScriptedProvider([
      callTool('spawn_agent', { prompt: 'count the files' }),
      stop('parent done'),
    ]);
    const childProvider = new ScriptedProvider([stop('there are 3 files')]);
    const orchestrator: Orchestrator = new Orchestrator({
      depsFor: (flow) => ({
        provider: flow.parentSessionId ? childProvider : parentProvider,
        tools: [orchestrator.spawnAgentTool()],
        sessions: store,
      }),
    });
    const steps: { splitChild?: string }[] = [];
    const result = await orchestrator.dispatch(
      { prompt: 'delegate' },
      { onStep: (step) => steps.push(step) },
    );
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    const child = steps[0]?.splitChild;
    expect(child).toBeDefined();
    expect(child).not.toBe(result.sessionId);
    expect((await store.load(child!)).events[0]).toMatchObject({ type: 'user', content: 'count the files' });
    expect(parentProvider.requests[1]!.messages.at(-1)!.content).toContain('there are 3 files');
  });
});

describe('dependencies handed to tools', () => {
  it('HarnessDeps.sandbox reaches every tool as ToolContext.sandbox', async () => {
    const seen: unknown[] = [];
    const sandbox: CommandSandbox = {
      backend: 'none',
      wrap: (command) => ({ ...command, env: {} }),
    };
    const probe: Tool<object> = {
      name: 'probe',
      description: 'records its context',
      input: z.object({}),
      execute: (_args, ctx) => (seen.push(ctx.sandbox), Promise.resolve({ output: 'ok' })),
    };
    await harness(new ScriptedProvider([callTool('probe'), stop()]), { tools: [probe], sandbox }).run({
      prompt: 'x',
    });
    expect(seen).toEqual([sandbox]);
  });
});

describe('tool hooks (Pre/PostToolUse)', () => {
  const recording = (
    ran: { name: string; args: unknown; at: [number, number] }[],
  ): Tool<{ path: string }> => ({
    name: 'read',
    description: 'read',
    kind: 'evidence',
    input: z.object({ path: z.string() }),
    claim: ({ path }) => ({ kind: 'shared', keys: [path] }),
    execute: async (args) => {
      const start = Date.now();
      await sleep(80);
      ran.push({ name: 'read', args, at: [start, Date.now()] });
      return { output: `read ${args.path}` };
    },
  });

  it('deny: the call is not run and its result is the reason, as an error; the rest of the batch runs', async () => {
    const ran: { name: string; args: unknown; at: [number, number] }[] = [];
    const contexts: ToolHookContext[] = [];
    const toolHooks: ToolHooks = {
      before: (call, ctx) => {
        contexts.push(ctx);
        return Promise.resolve(
          (call.args as { path: string }).path === '/etc/shadow'
            ? { kind: 'deny', reason: 'blocked by policy: /etc/shadow' }
            : { kind: 'allow' },
        );
      },
    };
    const provider = new ScriptedProvider([
      callTools([
        { name: 'read', args: { path: '/etc/shadow' } },
        { name: 'read', args: { path: '/a' } },
      ]),
      stop(),
    ]);
    await harness(provider, { tools: [recording(ran)], toolHooks }).run({ prompt: 'x', cwd: '/work/p' });
    expect(ran.map((entry) => entry.args)).toEqual([{ path: '/a' }]);
    const results = provider.requests[1]!.messages.filter((m) => m.role === 'tool');
    expect(results).toMatchObject([
      { content: 'blocked by policy: /etc/shadow', isError: true },
      { content: 'read /a' },
    ]);
    expect(results[1]).not.toHaveProperty('isError');
    expect(contexts[0]).toMatchObject({ projectDir: '/work/p', permissionMode: 'bypassPermissions' });
  });

  it('rewrite: the tool runs with the new args, and the batch runs serially', async () => {
    const ran: { name: string; args: unknown; at: [number, number] }[] = [];
    const toolHooks: ToolHooks = {
      before: (call) =>
        Promise.resolve(
          (call.args as { path: string }).path === '/b'
            ? { kind: 'rewrite', args: { path: '/b-safe' } }
            : { kind: 'allow' },
        ),
    };
    const provider = new ScriptedProvider([
      callTools([
        { name: 'read', args: { path: '/a' } },
        { name: 'read', args: { path: '/b' } },
      ]),
      stop(),
    ]);
    await harness(provider, { tools: [recording(ran)], toolHooks }).run({ prompt: 'x' });
    expect(ran.map((entry) => entry.args)).toEqual([{ path: '/a' }, { path: '/b-safe' }]);
    const [a, b] = ran as [(typeof ran)[0], (typeof ran)[0]];
    expect(b.at[0]).toBeGreaterThanOrEqual(a.at[1]); // no overlap: serial
  });

  it("before's stop: no call of the batch runs, the results say so, the run ends halted, no further Think", async () => {
    const ran: { name: string; args: unknown; at: [number, number] }[] = [];
    const events: SessionEvent[] = [];
    const toolHooks: ToolHooks = {
      before: (call) => {
        const path = (call.args as { path: string }).path;
        if (path === '/budget') return Promise.resolve({ kind: 'stop', reason: 'Budget exceeded' });
        if (path === '/etc/shadow') return Promise.resolve({ kind: 'deny', reason: 'blocked: /etc/shadow' });
        return Promise.resolve({ kind: 'allow' });
      },
      after: () => Promise.reject(new Error('after must not run: nothing ran')),
    };
    const provider = new ScriptedProvider([
      callTool('read', { path: '/a' }),
      callTools([
        { name: 'read', args: { path: '/etc/shadow' } },
        { name: 'read', args: { path: '/budget' } },
        { name: 'read', args: { path: '/b' } },
      ]),
      stop(),
    ]);
    const result = await harness(provider, { tools: [recording(ran)], toolHooks }).run(
      { prompt: 'x' },
      { onEvent: (event) => events.push(event) },
    );
    expect(result.terminateReason).toEqual({
      kind: 'halted',
      by: 'PreToolUse hook',
      reason: 'Budget exceeded',
    });
    expect(provider.requests).toHaveLength(2);
    expect(ran.map((entry) => entry.args)).toEqual([{ path: '/a' }]);
    const results = events.filter((event) => event.type === 'tool_result').slice(1);
    expect(results.map((event) => event.type === 'tool_result' && [event.output, event.isError])).toEqual([
      ['blocked: /etc/shadow', true],
      ['not run: a tool hook stopped the run', true],
      ['not run: a tool hook stopped the run', true],
    ]);
    expect(events.at(-1)).toMatchObject({ type: 'terminate', reason: result.terminateReason });
  });

  it("after's stop: the batch's other hooks still run, their feedback is logged, then the run ends halted", async () => {
    const ran: { name: string; args: unknown; at: [number, number] }[] = [];
    const seen: string[] = [];
    const events: SessionEvent[] = [];
    const toolHooks: ToolHooks = {
      after: (call) => {
        const path = (call.args as { path: string }).path;
        seen.push(path);
        return Promise.resolve(
          path === '/b'
            ? { stop: 'stop the session now', feedback: 'over budget' }
            : { feedback: `saw ${path}` },
        );
      },
    };
    const provider = new ScriptedProvider([
      callTools([
        { name: 'read', args: { path: '/a' } },
        { name: 'read', args: { path: '/b' } },
        { name: 'read', args: { path: '/c' } },
      ]),
      stop(),
    ]);
    const steps: TurnStep[] = [];
    const result = await harness(provider, { tools: [recording(ran)], toolHooks }).run(
      { prompt: 'x' },
      { onEvent: (event) => events.push(event), onStep: (step) => steps.push(step) },
    );
    expect(result.terminateReason).toEqual({
      kind: 'halted',
      by: 'PostToolUse hook',
      reason: 'stop the session now',
    });
    expect(provider.requests).toHaveLength(1);
    expect(seen.sort()).toEqual(['/a', '/b', '/c']);
    expect(steps).toEqual([expect.objectContaining({ state: 'done', executed: 3 })]);
    expect(events.find((event) => event.type === 'feedback')).toMatchObject({
      content: 'saw /a\n\nover budget\n\nsaw /c',
    });
  });

  it('a hook that throws denies its call; after-feedback is read before the next Think', async () => {
    const ran: { name: string; args: unknown; at: [number, number] }[] = [];
    const seen: string[] = [];
    const toolHooks: ToolHooks = {
      before: (call) =>
        (call.args as { path: string }).path === '/x'
          ? Promise.reject(new Error('hook crashed'))
          : Promise.resolve({ kind: 'allow' }),
      after: (call, result) => {
        seen.push(`${call.name}:${result.output}`);
        return Promise.resolve(
          result.isError ? undefined : { feedback: `lint: ${result.output} has 2 warnings` },
        );
      },
    };
    const provider = new ScriptedProvider([
      callTools([
        { name: 'read', args: { path: '/x' } },
        { name: 'read', args: { path: '/a' } },
      ]),
      stop(),
    ]);
    await harness(provider, { tools: [recording(ran)], toolHooks }).run({ prompt: 'x' });
    expect(ran.map((entry) => entry.args)).toEqual([{ path: '/a' }]);
    expect(seen).toEqual(['read:read /a']); // a denied call never ran: no PostToolUse
    const next = provider.requests[1]!.messages;
    expect(next.find((m) => m.role === 'tool')).toMatchObject({
      content: expect.stringContaining('hook crashed'),
      isError: true,
    });
    expect(next.at(-1)).toEqual({ role: 'user', content: 'lint: read /a has 2 warnings' });
  });
});
