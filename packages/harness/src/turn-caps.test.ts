// What one reply may cost: its tool calls past the cap are answered without running (nor reaching a
// hook), and one turn's tool output is kept up to a budget, later results becoming a note — in the
// log and to the model alike.
import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentHarness,
  DEFAULT_MAX_TOOL_CALLS_PER_TURN,
  DEFAULT_MAX_TOOL_RESULT_CHARS_PER_TURN,
  InMemorySessionStore,
  type Tool,
  type ToolCall,
} from './index.js';
import { callTools, ScriptedProvider, stop } from './testing.js';

/** A tool that records what ran and answers `size` characters of `x`. */
const sized = (ran: string[]): Tool<{ id: string; size: number }> => ({
  name: 'sized',
  description: 'answers size characters',
  input: z.object({ id: z.string(), size: z.number() }),
  claim: () => ({ kind: 'none' }),
  execute: ({ id, size }) => {
    ran.push(id);
    return Promise.resolve({ output: 'x'.repeat(size) });
  },
});

const calls = (count: number, size = 1) =>
  Array.from({ length: count }, (_, index) => ({ name: 'sized', args: { id: `c${index}`, size } }));

describe('one turn, bounded', () => {
  it('defaults: 64 calls a reply, 1 MiB of output a turn', () => {
    expect(DEFAULT_MAX_TOOL_CALLS_PER_TURN).toBe(64);
    expect(DEFAULT_MAX_TOOL_RESULT_CHARS_PER_TURN).toBe(1024 * 1024);
  });

  it('calls past the cap are answered "not run", in order, and no hook is asked about them', async () => {
    const ran: string[] = [];
    const asked: ToolCall[] = [];
    const provider = new ScriptedProvider([callTools(calls(70)), stop()]);
    const result = await new AgentHarness({
      provider,
      tools: [sized(ran)],
      sessions: new InMemorySessionStore(),
      maxToolCallsPerTurn: 5,
      toolHooks: { before: (call) => (asked.push(call), Promise.resolve({ kind: 'allow' })) },
    }).run({ prompt: 'x' });
    expect(result.terminateReason.kind).toBe('model_stop');
    expect(ran.sort()).toEqual(['c0', 'c1', 'c2', 'c3', 'c4']);
    expect(asked).toHaveLength(5);
    const results = provider.requests[1]!.messages.filter((message) => message.role === 'tool');
    expect(results).toHaveLength(70);
    expect(results.slice(0, 5).every((message) => message.content === 'x')).toBe(true);
    for (const message of results.slice(5))
      expect(message.content).toBe(
        'not run: one reply may make at most 5 tool calls and this one made 70; make the rest in a later turn',
      );
  });

  it('output past the turn budget becomes a note, in the log as to the model', async () => {
    const ran: string[] = [];
    const sessions = new InMemorySessionStore();
    const provider = new ScriptedProvider([callTools(calls(4, 600)), callTools(calls(1, 600)), stop()]);
    const result = await new AgentHarness({
      provider,
      tools: [sized(ran)],
      sessions,
      maxToolResultCharsPerTurn: 1000,
    }).run({ prompt: 'x' });
    expect(ran).toHaveLength(5); // every call ran: only what is kept of their output is bounded
    const first = provider.requests[1]!.messages.filter((message) => message.role === 'tool');
    expect(first).toHaveLength(4);
    expect(first[0]!.content).toBe('x'.repeat(600));
    for (const message of first.slice(1))
      expect(message.content).toBe(
        "[600 characters of output not kept: this turn's tool results passed 1000 characters; ask for it again in a turn of its own]",
      );
    // The next turn has a budget of its own.
    expect(provider.requests[2]!.messages.at(-1)).toMatchObject({ role: 'tool', content: 'x'.repeat(600) });
    const logged = (await sessions.load(result.sessionId)).events.filter(
      (event) => event.type === 'tool_result',
    );
    expect(logged.map((event) => (event as { output: string }).output.length)).toEqual([
      600, 123, 123, 123, 600,
    ]);
  });
});

describe('a reply of many calls', () => {
  it('runs them at once without a listener warning on any signal', async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error): number => warnings.push(warning);
    process.on('warning', onWarning);
    try {
      const slow: Tool<{ id: string }> = {
        name: 'slow',
        description: 'waits a little',
        input: z.object({ id: z.string() }),
        claim: () => ({ kind: 'none' }),
        execute: () => new Promise((resolve) => setTimeout(() => resolve({ output: 'ok' }), 50)),
      };
      const many = Array.from({ length: 40 }, (_, index) => ({ name: 'slow', args: { id: `s${index}` } }));
      const result = await new AgentHarness({
        provider: new ScriptedProvider([callTools(many), stop()]),
        tools: [slow],
        sessions: new InMemorySessionStore(),
      }).run({ prompt: 'x' }, { signal: new AbortController().signal });
      expect(result.toolTimeline).toHaveLength(40);
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
      expect(warnings.filter((warning) => warning.name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
