import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  compactToFit,
  estimateTokens,
  fitToBudget,
  History,
  historyBudget,
  messageChars,
  toolSpecTokens,
  truncateToFit,
} from './context-budget.js';
import { AgentHarness, InMemorySessionStore, type Message, type Tool, type ToolCall } from './index.js';
import { callTools, ScriptedProvider, stop } from './testing.js';
import { ToolService } from './tool-service.js';

const text = fc.string({ unit: 'grapheme', maxLength: 300 });
const args = fc.option(fc.jsonValue({ maxDepth: 3 }), { nil: undefined });
const message: fc.Arbitrary<Message> = fc.oneof(
  fc.record({ role: fc.constant('user' as const), content: text }),
  fc.record(
    {
      role: fc.constant('assistant' as const),
      content: text,
      toolCalls: fc.array(fc.record({ id: fc.string(), name: fc.constantFrom('read', 'shell'), args })),
    },
    { requiredKeys: ['role', 'content'] },
  ),
  fc.record({
    role: fc.constant('tool' as const),
    toolCallId: fc.string(),
    toolName: fc.constantFrom('read', 'shell'),
    content: fc.string({ maxLength: 2000 }),
  }),
);

/** What a history rewrite can be: a compaction's or a truncation's result, or any other list. */
const operation = fc.oneof(
  { weight: 6, arbitrary: message.map((m) => ({ kind: 'push' as const, message: m })) },
  fc.record({ kind: fc.constant('compact' as const), maxTokens: fc.integer({ min: 0, max: 2000 }) }),
  fc.record({ kind: fc.constant('truncate' as const), maxTokens: fc.integer({ min: 20, max: 2000 }) }),
  fc.record({ kind: fc.constant('reset' as const), messages: fc.array(message, { maxLength: 10 }) }),
);

/**
 * truncateToFit as it was, recounting every candidate (quadratic), with the last resort cutting
 * tool-call arguments too: the linear one must agree.
 */
function truncateReference(messages: readonly Message[], maxTokens: number): Message[] {
  const all: Message[][] = [];
  for (const m of messages) {
    if (m.role === 'tool' && all.length > 0) all.at(-1)!.push(m);
    else all.push([m]);
  }
  const first = all[0] ?? [];
  const marker = (dropped: number): Message => ({
    role: 'user',
    content: `[${dropped} earlier message(s) truncated to fit the context]`,
  });
  const kept: Message[][] = [];
  for (let index = all.length - 1; index >= 1; index -= 1) {
    const unit = all[index] ?? [];
    if (estimateTokens([...first, marker(0), ...[unit, ...kept].flat()]) > maxTokens) break;
    kept.unshift(unit);
  }
  const dropped = all.slice(1, all.length - kept.length).flat().length;
  const original = [...first, ...(dropped > 0 ? [marker(dropped)] : []), ...kept.flat()];
  let result = original;
  for (
    let limit = Math.floor((maxTokens * 4) / Math.max(1, result.length));
    limit > 8;
    limit = Math.floor(limit / 2)
  ) {
    if (estimateTokens(result) <= maxTokens) break;
    result = original.map((m) => {
      const cut = m.content.length > limit ? { ...m, content: `${m.content.slice(0, limit)}…[cut]` } : m;
      if (cut.role !== 'assistant' || cut.toolCalls === undefined) return cut;
      const chars = (c: ToolCall) => JSON.stringify(c.args ?? {}).length;
      // Arguments are cut too once the calls' share passes the limit: each call's over it is elided.
      const share = cut.toolCalls.reduce((sum, c) => sum + chars(c) + c.name.length + 16, 0);
      if (share <= limit) return cut;
      const toolCalls = cut.toolCalls.map((c) =>
        chars(c) > limit
          ? {
              ...c,
              args: { elided: `[arguments of ${c.name} elided to fit the context: ${chars(c)} chars]` },
            }
          : c,
      );
      return { ...cut, toolCalls };
    });
  }
  return result;
}

describe('messageChars', () => {
  it('property: the remembered tool-call share gives what counting again gives, every time', () => {
    const plain = (m: Message) =>
      m.content.length +
      16 +
      (m.role === 'assistant'
        ? (m.toolCalls ?? []).reduce(
            (sum, c) => sum + JSON.stringify(c.args ?? {}).length + c.name.length + 16,
            0,
          )
        : 0);
    fc.assert(
      fc.property(message, (m) => {
        expect(messageChars(m)).toBe(plain(m));
        expect(messageChars(m)).toBe(plain(m));
      }),
    );
  });
});

describe('truncateToFit, linear', () => {
  it('property: gives exactly what the recounting version gave', () => {
    fc.assert(
      fc.property(
        fc.array(message, { maxLength: 40 }),
        fc.integer({ min: 20, max: 4000 }),
        (history, maxTokens) => {
          expect(truncateToFit(history, maxTokens)).toEqual(truncateReference(history, maxTokens));
        },
      ),
      { numRuns: 300 },
    );
  });
});

describe('the running token estimate', () => {
  it('property: after any appends and rewrites it equals a full recount, and fits the same', () => {
    fc.assert(
      fc.property(fc.array(operation, { maxLength: 60 }), (operations) => {
        const history = new History();
        const reference: Message[] = [];
        for (const op of operations) {
          if (op.kind === 'push') {
            history.push(op.message);
            reference.push(op.message);
          } else {
            const rewritten =
              op.kind === 'compact'
                ? compactToFit(reference, { maxTokens: op.maxTokens, compactor: (ms) => `${ms.length}` })
                : op.kind === 'truncate'
                  ? truncateToFit(reference, op.maxTokens)
                  : op.messages;
            history.reset(rewritten);
            reference.splice(0, reference.length, ...rewritten);
          }
          expect(history.messages).toEqual(reference);
          expect(history.tokens).toBe(estimateTokens(reference));
        }
        const options = { maxTokens: 500 };
        expect(fitToBudget(history.messages, options, history.tokens)).toEqual(
          fitToBudget(reference, options),
        );
      }),
    );
  });

  it('an elided output is the same stub object every turn, so a provider sees the compacted prefix unchanged', () => {
    const big = (id: string): Message => ({
      role: 'tool',
      toolCallId: id,
      toolName: 'read',
      content: 'x'.repeat(900),
    });
    const history: Message[] = [{ role: 'user', content: 'task' }];
    for (const id of ['a', 'b', 'c'])
      history.push({ role: 'assistant', content: '', toolCalls: [] }, big(id));
    const first = compactToFit(history, { maxTokens: 10 });
    const again = compactToFit([...history, { role: 'user', content: 'next' }], { maxTokens: 10 });
    expect(first[2]!.content).toMatch(/elided/);
    expect(again[2]).toBe(first[2]);
    expect(again[4]).toBe(first[4]);
  });

  it('property: in a run, a compaction is logged with the whole history estimate, and a turn without one is within budget', async () => {
    const echo: Tool<{ out: string; extra?: unknown }> = {
      name: 'echo',
      description: 'returns its `out`',
      input: z.object({ out: z.string(), extra: z.unknown().optional() }),
      claim: () => ({ kind: 'none' }),
      execute: (input) => Promise.resolve({ output: input.out }),
    };
    const call = fc.record({ out: fc.string({ maxLength: 1500 }), extra: args });
    const turn = fc.record({ text, calls: fc.array(call, { minLength: 1, maxLength: 4 }) });
    await fc.assert(
      fc.asyncProperty(
        fc.array(turn, { minLength: 1, maxLength: 10 }),
        fc.integer({ min: 40, max: 4000 }),
        fc.nat(10),
        fc.boolean(),
        async (turns, budget, resumeAt, summarise) => {
          // The history's share: what the echo tool's definition leaves.
          const maxTokens = historyBudget(
            { maxTokens: budget },
            toolSpecTokens(new ToolService([echo]).specs()),
          )!.maxTokens;
          const store = new InMemorySessionStore();
          const script = (part: typeof turns) => [
            ...part.map((t) =>
              callTools(
                t.calls.map((c) => ({ name: 'echo', args: c })),
                t.text,
              ),
            ),
            stop(),
          ];
          const harness = (part: typeof turns) =>
            new AgentHarness({
              provider: new ScriptedProvider(script(part)),
              tools: [echo],
              sessions: store,
              contextBudget: {
                maxTokens: budget,
                ...(summarise ? { compactor: (ms) => `${ms.length} msgs` } : {}),
              },
            });
          // A second run resumes the session: its history is folded from the log.
          const first = await harness(turns.slice(0, resumeAt)).run({ prompt: 'task' });
          await harness(turns.slice(resumeAt)).run({ prompt: 'go on', sessionId: first.sessionId });

          const history: Message[] = [];
          let compacted = false;
          for (const event of (await store.load(first.sessionId)).events) {
            if (event.type === 'user' || event.type === 'feedback')
              history.push({ role: 'user', content: event.content });
            if (event.type === 'compaction') {
              expect(event.fromTokens).toBe(estimateTokens(history));
              expect(event.fromTokens).toBeGreaterThan(maxTokens);
              compacted = true;
            }
            if (event.type === 'assistant') {
              if (!compacted) expect(estimateTokens(history)).toBeLessThanOrEqual(maxTokens);
              compacted = false;
              history.push({
                role: 'assistant',
                content: event.content,
                ...(event.toolCalls.length ? { toolCalls: event.toolCalls } : {}),
              });
            }
            if (event.type === 'tool_result')
              history.push({
                role: 'tool',
                toolCallId: event.callId,
                toolName: event.name,
                content: event.output,
              });
          }
        },
      ),
      { numRuns: 60 },
    );
  });
});

describe('tool definitions count in the budget', () => {
  const manual = 'Read the manual first. '.repeat(350); // 8,050 characters: about 2,000 tokens
  const lookup: Tool<{ topic: string }> = {
    name: 'lookup',
    description: manual,
    input: z.object({ topic: z.string() }),
    claim: () => ({ kind: 'none' }),
    execute: () => Promise.resolve({ output: 'o'.repeat(2_000) }),
  };

  it('a run whose tools take 2,000 of 3,000 tokens: the history is fitted to what they leave, each request within the budget', async () => {
    const provider = new ScriptedProvider([
      callTools([{ name: 'lookup', args: { topic: 'a' } }]),
      callTools([{ name: 'lookup', args: { topic: 'b' } }]),
      callTools([{ name: 'lookup', args: { topic: 'c' } }]),
      stop(),
    ]);
    const store = new InMemorySessionStore();
    const result = await new AgentHarness({
      provider,
      tools: [lookup],
      sessions: store,
      contextBudget: { maxTokens: 3_000 },
    }).run({ prompt: 'task' });
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    const { events } = await store.load(result.sessionId);
    expect(events.some((event) => event.type === 'compaction')).toBe(true);
    for (const request of provider.requests)
      expect(estimateTokens(request.messages) + toolSpecTokens(request.tools)).toBeLessThanOrEqual(3_000);
  });

  it('tools larger than the budget leave the history a quarter of it, not nothing', () => {
    expect(historyBudget({ maxTokens: 1_000 }, 300)?.maxTokens).toBe(700);
    expect(historyBudget({ maxTokens: 1_000 }, 5_000)?.maxTokens).toBe(250);
    expect(historyBudget({ maxTokens: 1_000 }, 0)?.maxTokens).toBe(1_000);
    expect(historyBudget(undefined, 5_000)).toBeUndefined();
  });
});

describe('large tool-call arguments', () => {
  const task: Message = { role: 'user', content: 'write the files' };
  const big = 'x'.repeat(3_000_000);
  const turn = (index: number, content: string): Message[] => [
    {
      role: 'assistant',
      content: `step ${index}`,
      toolCalls: [{ id: `c${index}`, name: 'write_file', args: { path: `f${index}.txt`, content } }],
    },
    { role: 'tool', toolCallId: `c${index}`, toolName: 'write_file', content: `wrote f${index}.txt` },
  ];

  it('an old 3 MB write_file call is elided, not everything before it: the history stays', () => {
    const history = [task, ...turn(1, 'a'), ...turn(2, big), ...turn(3, 'b'), ...turn(4, 'c')];
    const fit = fitToBudget(history, { maxTokens: 20_000 });
    expect(fit.mode).toBe('compact');
    expect(fit.messages).toHaveLength(history.length);
    const elided = fit.messages[3] as Extract<Message, { role: 'assistant' }>;
    expect(elided.toolCalls?.[0]?.args).toEqual({
      elided: expect.stringMatching(
        /^\[arguments of write_file elided to fit the context: 30000\d\d chars\]$/,
      ),
    });
    expect(fit.messages[1]).toBe(history[1]); // small calls are kept as they are
    // The same stub object next turn: a provider's prompt cache sees the prefix unchanged.
    expect(fitToBudget([...history, ...turn(5, 'd')], { maxTokens: 20_000 }).messages[3]).toBe(elided);
  });

  it('the newest call, 3 MB itself, loses its arguments too, and keeps its result; nothing is dropped', () => {
    const history = [task, ...turn(1, 'a'), ...turn(2, big)];
    const fit = fitToBudget(history, { maxTokens: 20_000 });
    expect(fit.mode).toBe('compact');
    expect(fit.messages).toHaveLength(history.length);
    expect(JSON.stringify(fit.messages[3])).toMatch(/arguments of write_file elided/);
    expect(fit.messages[4]).toBe(history[4]);
  });
});
