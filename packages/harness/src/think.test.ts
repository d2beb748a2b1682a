import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  AgentHarness,
  HarnessError,
  InMemorySessionStore,
  createFileSessionStore,
  type ReplyDelta,
  type ReplyPart,
  type SessionEvent,
  type Tool,
  type TurnStep,
} from './index.js';
import { StreamingScriptedProvider, streamed } from './testing.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const echo: Tool<{ text: string }> = {
  name: 'echo',
  description: 'Echo text back',
  input: z.object({ text: z.string() }),
  claim: () => ({ kind: 'none' }),
  execute: ({ text }) => Promise.resolve({ output: text }),
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function harness(provider: StreamingScriptedProvider, extra: Record<string, unknown> = {}) {
  const sessions = new InMemorySessionStore();
  return { sessions, harness: new AgentHarness({ provider, tools: [echo], sessions, ...extra }) };
}

describe('THINK reads a reply stream', () => {
  it('hands on each text fragment in order, before the step; the deltas make up the final text', async () => {
    const provider = new StreamingScriptedProvider([
      streamed(['Hel', 'lo ', 'world.\nVERDICT: PASS'], { usage: { inputTokens: 7, outputTokens: 3 } }),
    ]);
    const seen: string[] = [];
    const deltas: ReplyDelta[] = [];
    const result = await harness(provider).harness.run(
      { prompt: 'hi' },
      {
        onDelta: (delta) => (deltas.push(delta), seen.push(`delta ${delta.seq}`)),
        onStep: () => seen.push('step'),
      },
    );
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(deltas.map((delta) => delta.kind)).toEqual(['text', 'text', 'text']);
    expect(seen).toEqual(['delta 0', 'delta 1', 'delta 2', 'step']);
    expect(deltas.map((delta) => (delta.kind === 'text' ? delta.text : '')).join('')).toBe(result.finalText);
    expect(deltas.every((delta) => delta.iteration === 1)).toBe(true);
    expect(result.usage).toEqual({ inputTokens: 7, outputTokens: 3, cachedInputTokens: 0 });
    expect(result.turns?.[0]?.firstTokenMs).toBeGreaterThanOrEqual(0);
  });

  it('tool calls streamed with argument fragments run as whole calls; tokens (cached too) sum per run', async () => {
    const call = { id: 'c1', name: 'echo', args: { text: 'x' } };
    const provider = new StreamingScriptedProvider([
      [
        { type: 'tool-call-delta', callId: 'c1', name: 'echo', text: '{"text":' },
        { type: 'tool-call-delta', callId: 'c1', name: 'echo', text: '"x"}' },
        { type: 'tool-call', call },
        { type: 'usage', usage: { inputTokens: 100, outputTokens: 10, cachedInputTokens: 80 } },
        { type: 'finish', stopReason: 'tool_use' },
      ],
      streamed(['done'], { usage: { inputTokens: 120, outputTokens: 5, cachedInputTokens: 100 } }),
    ]);
    const deltas: ReplyDelta[] = [];
    const steps: TurnStep[] = [];
    const result = await harness(provider).harness.run(
      { prompt: 'go' },
      { onDelta: (delta) => deltas.push(delta), onStep: (step) => steps.push(step) },
    );
    expect(result.terminateReason).toEqual({ kind: 'model_stop' });
    expect(result.toolTimeline.map((entry) => entry.name)).toEqual(['echo']);
    expect(deltas.filter((delta) => delta.kind === 'tool_args').map((delta) => delta.text)).toEqual([
      '{"text":',
      '"x"}',
    ]);
    expect(result.usage).toEqual({ inputTokens: 220, outputTokens: 15, cachedInputTokens: 180 });
    expect(result.totalTokens).toBe(235);
    expect(steps.map((step) => step.usage?.cachedInputTokens)).toEqual([80, 100]);
    expect(result.turns).toHaveLength(2);
  });

  it('a rewritten reply is sent as its final text (a replace delta), after the fragments', async () => {
    const provider = new StreamingScriptedProvider([streamed(['my key is ', 'sk-123'])]);
    const deltas: ReplyDelta[] = [];
    const result = await harness(provider, {
      guardrails: {
        output: (response: { text: string }) => ({
          ...response,
          text: response.text.replace('sk-123', '***'),
        }),
      },
    }).harness.run({ prompt: 'x' }, { onDelta: (delta) => deltas.push(delta) });
    expect(deltas.at(-1)).toEqual({ kind: 'replace', iteration: 1, seq: 2, text: 'my key is ***' });
    expect(result.finalText).toBe('my key is ***');
  });
});

describe('a reply that cannot be read whole fails the turn, naming why (never a stop, never a hang)', () => {
  const brokenEveryTime = (make: () => StreamStepFn) =>
    new StreamingScriptedProvider([make(), make(), make()]);
  type StreamStepFn = (signal: AbortSignal) => AsyncIterable<ReplyPart>;

  const cases: [string, StreamStepFn, Record<string, unknown>, RegExp][] = [
    [
      'a stream that ends before its finish',
      async function* () {
        yield await Promise.resolve({ type: 'text', text: 'All done.\nVERDICT: PASS' } as const);
      },
      {},
      /ended before its finish/,
    ],
    [
      'a stream cut mid-reply',
      async function* () {
        yield await Promise.resolve({ type: 'text', text: 'half a rep' } as const);
        throw new Error('socket hang up (ECONNRESET)');
      },
      {},
      /ECONNRESET/,
    ],
    [
      'no first part within the first-token timeout',
      async function* (signal) {
        await new Promise((resolve) => signal.addEventListener('abort', resolve));
        yield { type: 'text', text: 'late' };
      },
      { firstTokenTimeoutMs: 50 },
      /first-token timeout/,
    ],
    [
      'a stream that stalls between parts past the idle timeout',
      async function* (signal) {
        yield { type: 'text', text: 'Working on it' };
        await new Promise((resolve) => signal.addEventListener('abort', resolve));
      },
      { idleTimeoutMs: 50 },
      /idle timeout/,
    ],
  ];

  for (const [name, step, extra, cause] of cases) {
    it(name, async () => {
      const { harness: run, sessions } = harness(
        brokenEveryTime(() => step),
        extra,
      );
      const steps: TurnStep[] = [];
      const result = await run.run({ prompt: 'x' }, { onStep: (turn) => steps.push(turn) });
      expect(result.terminateReason).toMatchObject({ kind: 'consecutive_failures', count: 3 });
      expect((result.terminateReason as { lastError: string }).lastError).toMatch(cause);
      expect(steps.map((turn) => turn.error)).toEqual([
        expect.stringMatching(cause),
        expect.stringMatching(cause),
        expect.stringMatching(cause),
      ]);
      // The half reply is never taken: no assistant event in the log.
      const { events } = await sessions.load(result.sessionId);
      expect(events.filter((event) => event.type === 'assistant')).toEqual([]);
    });
  }

  it('the turn timeout still bounds THINK: a stream that never ends stalls the run', async () => {
    const provider = new StreamingScriptedProvider([
      async function* (signal) {
        yield { type: 'text', text: 'a' };
        await new Promise((resolve) => signal.addEventListener('abort', resolve));
      },
    ]);
    const result = await harness(provider, { turnTimeoutMs: 80 }).harness.run({ prompt: 'x' });
    expect(result.terminateReason).toMatchObject({ kind: 'error', error: { kind: 'stalled_turn' } });
  });

  it('cancel mid-stream aborts the request at once and ends the run cancelled', async () => {
    let abortedAt: number | undefined;
    const provider = new StreamingScriptedProvider([
      async function* (signal) {
        signal.addEventListener('abort', () => (abortedAt = performance.now()));
        for (;;) {
          yield { type: 'text', text: 'tick ' };
          await sleep(20);
        }
      },
    ]);
    const controller = new AbortController();
    let cancelledAt = 0;
    const result = await harness(provider).harness.run(
      { prompt: 'x' },
      {
        signal: controller.signal,
        onDelta: (delta) => {
          if (delta.seq === 2) {
            cancelledAt = performance.now();
            controller.abort();
          }
        },
      },
    );
    const returnedAt = performance.now();
    expect(result.terminateReason).toEqual({ kind: 'cancelled' });
    // The request was aborted by the cancel itself, before the run returned (not by a later timeout).
    expect(abortedAt).toBeGreaterThanOrEqual(cancelledAt);
    expect(abortedAt).toBeLessThanOrEqual(returnedAt);
  });
});

describe('SessionStore: fenced appends, reads by sequence', () => {
  const dir = mkdtempSync(join(tmpdir(), 'aleph-fence-'));
  const stores = [
    ['in memory', () => new InMemorySessionStore()],
    ['files', () => createFileSessionStore(dir)],
  ] as const;
  for (const [name, make] of stores) {
    it(`${name}: an append naming a stale last sequence is refused; load reads from a sequence`, async () => {
      const store = make();
      const id = await store.create();
      const first = await store.append(id, { type: 'user', content: 'a' }, { after: -1 });
      expect(first.seq).toBe(0);
      await store.append(id, { type: 'feedback', content: 'b' }, { after: 0 });
      const stale = store.append(id, { type: 'feedback', content: 'c' }, { after: 0 });
      await expect(stale).rejects.toBeInstanceOf(HarnessError);
      await expect(stale).rejects.toMatchObject({ code: 'conflict' });
      await store.append(id, { type: 'feedback', content: 'd' }); // unfenced: appended
      await store.flush(id);
      const tail = await store.load(id, { from: 1 });
      expect(tail.events.map((event: SessionEvent) => [event.seq, event.type])).toEqual([
        [1, 'feedback'],
        [2, 'feedback'],
      ]);
      await store.end?.(id);
      if (name === 'files') rmSync(dir, { recursive: true, force: true });
    });
  }

  it('two runs on one session: the second writer is refused, the log is not interleaved', async () => {
    const sessions = new InMemorySessionStore();
    const id = await sessions.create();
    await sessions.append(id, { type: 'user', content: 'first' });
    const provider = new StreamingScriptedProvider([
      async function* () {
        // Another writer appends while this run thinks.
        await sessions.append(id, { type: 'feedback', content: 'someone else' });
        yield* streamed(['done']);
      },
    ]);
    const result = await new AgentHarness({ provider, tools: [echo], sessions }).run({
      prompt: 'again',
      sessionId: id,
    });
    expect(result.terminateReason).toMatchObject({ kind: 'error', error: { kind: 'session' } });
    expect(JSON.stringify(result.terminateReason)).toMatch(/moved on/);
    const { events } = await sessions.load(id);
    expect(events.map((event) => event.type)).toEqual(['user', 'user', 'feedback']);
  });
});
