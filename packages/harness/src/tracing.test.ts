import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { context, SpanStatusCode, trace } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  InMemorySpanExporter,
  SimpleSpanProcessor,
  type ReadableSpan,
} from '@opentelemetry/sdk-trace-base';
import { ShellStopHook, StopHookVerifier, VerifierChain } from '@aleph/verification';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { z } from 'zod';
import { AgentHarness, InMemorySessionStore, Orchestrator, type SessionStore, type Tool } from './index.js';
import { callTool, callTools, ScriptedProvider, stop } from './testing.js';

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
const contextManager = new AsyncLocalStorageContextManager();
beforeAll(() => {
  context.setGlobalContextManager(contextManager.enable());
  trace.setGlobalTracerProvider(provider);
});
afterAll(async () => {
  await provider.shutdown();
  trace.disable();
  context.disable();
});
beforeEach(() => exporter.reset());

/** The finished spans as an indented tree of names: `run > turn > think`. */
function tree(spans: readonly ReadableSpan[]): string[] {
  const byId = new Map(spans.map((span) => [span.spanContext().spanId, span]));
  const children = (parentId: string | undefined) =>
    spans
      .filter((span) => {
        const parent = span.parentSpanContext?.spanId;
        return parentId === undefined ? parent === undefined || !byId.has(parent) : parent === parentId;
      })
      .sort((a, b) => a.startTime[0] - b.startTime[0] || a.startTime[1] - b.startTime[1]);
  const lines: string[] = [];
  const walk = (span: ReadableSpan, depth: number) => {
    lines.push(`${'  '.repeat(depth)}${span.name}`);
    for (const child of children(span.spanContext().spanId)) walk(child, depth + 1);
  };
  for (const root of children(undefined)) walk(root, 0);
  return lines;
}

const echo: Tool<{ text: string }> = {
  name: 'echo',
  description: 'echo',
  input: z.object({ text: z.string() }),
  claim: () => ({ kind: 'none' }),
  execute: ({ text }) => Promise.resolve({ output: text }),
};

it('a run is a tree of spans: run → turn → think / verify / act → tool, with model, tokens, tool, verdict, end', async () => {
  const chain = VerifierChain.builder()
    .with(new StopHookVerifier([new ShellStopHook({ name: 'ok', command: 'exit 0' })]))
    .build();
  const scripted = new ScriptedProvider([
    callTools([
      { name: 'echo', args: { text: 'a' } },
      { name: 'nope', args: {} },
    ]),
    stop(),
  ]);
  const harness = new AgentHarness({
    provider: scripted,
    tools: [echo],
    sessions: new InMemorySessionStore(),
    verifier: chain,
  });
  const result = await harness.run({ prompt: 'x', cwd: '/work/p' });
  const spans = exporter.getFinishedSpans();
  expect(tree(spans)).toEqual([
    'aleph.run',
    '  aleph.turn',
    '    aleph.think',
    '    aleph.verify',
    '    aleph.act',
    '      aleph.tool',
    '  aleph.turn',
    '    aleph.think',
    '    aleph.verify',
  ]);
  const named = (name: string) => spans.filter((span) => span.name === name);
  expect(named('aleph.run')[0]!.attributes).toMatchObject({
    'aleph.session.id': result.sessionId,
    'gen_ai.request.model': 'scripted',
    'aleph.cwd': '/work/p',
    'aleph.terminate.reason': 'model_stop',
    'aleph.iterations': 2,
    'gen_ai.usage.total_tokens': 30,
  });
  expect(named('aleph.think')[0]!.attributes).toMatchObject({
    'gen_ai.request.model': 'scripted',
    'gen_ai.usage.input_tokens': 10,
    'gen_ai.usage.output_tokens': 5,
    'gen_ai.response.finish_reasons': ['tool_use'],
  });
  expect(named('aleph.tool')[0]!.attributes).toMatchObject({
    'gen_ai.tool.name': 'echo',
    'aleph.tool.ok': true,
  });
  expect(named('aleph.verify').map((span) => span.attributes['aleph.verdict'])).toEqual([
    'continue',
    'continue',
  ]);
  expect(named('aleph.turn').map((span) => span.attributes['aleph.turn.state'])).toEqual([
    'continue',
    'done',
  ]);
});

it('failures are marked on the span that failed; a sub-agent run nests under its spawn_agent tool', async () => {
  const store = new InMemorySessionStore();
  const parent = new ScriptedProvider([
    callTool('spawn_agent', { prompt: 'sub' }),
    () => Promise.reject(new Error('503 upstream')),
    stop(),
  ]);
  const child = new ScriptedProvider([stop('child done')]);
  const orchestrator: Orchestrator = new Orchestrator({
    depsFor: (flow) => ({
      provider: flow.parentSessionId ? child : parent,
      tools: [orchestrator.spawnAgentTool()],
      sessions: store,
    }),
  });
  await orchestrator.dispatch({ prompt: 'delegate' });
  const spans = exporter.getFinishedSpans();
  expect(tree(spans)).toEqual([
    'aleph.run',
    '  aleph.turn',
    '    aleph.think',
    '    aleph.act',
    '      aleph.tool',
    '        aleph.run',
    '          aleph.turn',
    '            aleph.think',
    '  aleph.turn',
    '    aleph.think',
    '  aleph.turn',
    '    aleph.think',
  ]);
  const failed = spans
    .filter((span) => (span.status.code as number) === (SpanStatusCode.ERROR as number))
    .map((span) => [span.name, span.status.message]);
  expect(failed).toEqual([
    ['aleph.think', '503 upstream'],
    ['aleph.turn', '503 upstream'],
  ]);
});

it('a store that fails mid-turn still ends every span it started, marked failed', async () => {
  const store = new InMemorySessionStore();
  let appends = 0;
  const failing: SessionStore = {
    create: () => store.create(),
    append: (id, event) =>
      (appends += 1) === 3 ? Promise.reject(new Error('disk full')) : store.append(id, event),
    flush: () => store.flush(),
    load: (id) => store.load(id),
    list: () => store.list(),
  };
  const result = await new AgentHarness({
    provider: new ScriptedProvider([callTool('echo', { text: 'a' }), stop()]),
    tools: [echo],
    sessions: failing,
  }).run({ prompt: 'x' });
  expect(result.terminateReason).toMatchObject({ kind: 'error', error: { message: 'disk full' } });
  const spans = exporter.getFinishedSpans();
  expect(tree(spans).map((line) => line.trim())).toEqual(expect.arrayContaining(['aleph.run', 'aleph.turn']));
  expect(spans.find((span) => span.name === 'aleph.turn')?.status.message).toBe('disk full');
});
