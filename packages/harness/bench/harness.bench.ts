// pnpm bench: the loop's own overhead per turn against the AI SDK's loop (generateText with a mock
// model and stopWhen) for the same number of steps; eight independent 100 ms tools in one turn
// against one; the file session store's append rate; and how flat a turn's cost stays over a long
// run (steps 90–99 and 990–999 against steps 2–11). Prints figures and ratios only.
import { mkdtempSync, rmSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateText, stepCountIs, tool as aiTool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { AgentHarness, createFileSessionStore, InMemorySessionStore, type Tool } from '../src/index.js';
import { callTool, callTools, ScriptedProvider, stop } from '../src/testing.js';

const STEPS = 20;
const noop: Tool<{ n: number }> = {
  name: 'noop',
  description: 'does nothing',
  input: z.object({ n: z.number() }),
  claim: () => ({ kind: 'none' }),
  execute: () => Promise.resolve({ output: 'ok' }),
};

async function harnessRun(): Promise<number> {
  let n = 0;
  const provider = new ScriptedProvider([() => ((n += 1) < STEPS ? callTool('noop', { n }) : stop())], {
    repeatLast: true,
  });
  const harness = new AgentHarness({
    provider,
    tools: [noop],
    sessions: new InMemorySessionStore(),
    maxIterations: STEPS + 1,
  });
  const start = performance.now();
  await harness.run({ prompt: 'go' });
  return (performance.now() - start) / STEPS;
}

async function aiSdkRun(): Promise<number> {
  let n = 0;
  const usage = {
    inputTokens: { total: 10, noCache: 10, cacheRead: 0, cacheWrite: 0 },
    outputTokens: { total: 5, text: 5, reasoning: 0 },
  };
  const model = new MockLanguageModelV3({
    doGenerate: () => {
      n += 1;
      return Promise.resolve(
        n < STEPS
          ? {
              content: [
                { type: 'tool-call', toolCallId: `c${n}`, toolName: 'noop', input: JSON.stringify({ n }) },
              ],
              finishReason: { unified: 'tool-calls', raw: 'tool_calls' },
              usage,
              warnings: [],
            }
          : {
              content: [{ type: 'text', text: 'done' }],
              finishReason: { unified: 'stop', raw: 'stop' },
              usage,
              warnings: [],
            },
      );
    },
  });
  const start = performance.now();
  await generateText({
    model,
    prompt: 'go',
    tools: {
      noop: aiTool({
        description: 'does nothing',
        inputSchema: z.object({ n: z.number() }),
        execute: () => Promise.resolve('ok'),
      }),
    },
    stopWhen: stepCountIs(STEPS),
  });
  return (performance.now() - start) / STEPS;
}

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

async function loopOverhead(): Promise<void> {
  for (let i = 0; i < 30; i += 1) {
    await harnessRun();
    await aiSdkRun();
  }
  const ours: number[] = [];
  const theirs: number[] = [];
  for (let i = 0; i < 200; i += 1) {
    ours.push(await harnessRun());
    theirs.push(await aiSdkRun());
  }
  const a = median(ours) * 1000;
  const b = median(theirs) * 1000;
  console.log(
    `loop overhead per turn (${STEPS} steps, instant provider, no-op tool): harness ${a.toFixed(1)} µs, AI SDK generateText ${b.toFixed(1)} µs, ratio ${(a / b).toFixed(2)} (target ≤ 1.0)`,
  );
}

async function parallelTools(): Promise<void> {
  const slow: Tool<{ i: number }> = {
    name: 'slow',
    description: 'sleeps 100 ms',
    input: z.object({ i: z.number() }),
    claim: () => ({ kind: 'none' }),
    execute: () => new Promise((resolve) => setTimeout(() => resolve({ output: 'ok' }), 100)),
  };
  const time = async (count: number) => {
    const provider = new ScriptedProvider([
      callTools(Array.from({ length: count }, (_, i) => ({ name: 'slow', args: { i } }))),
      stop(),
    ]);
    const start = performance.now();
    await new AgentHarness({ provider, tools: [slow], sessions: new InMemorySessionStore() }).run({
      prompt: 'go',
    });
    return performance.now() - start;
  };
  const one = median(await Promise.all([0, 1, 2, 3, 4].map(() => time(1))));
  const eight = median(await Promise.all([0, 1, 2, 3, 4].map(() => time(8))));
  console.log(
    `eight independent 100 ms tools in one turn: ${eight.toFixed(1)} ms vs one: ${one.toFixed(1)} ms, ratio ${(eight / one).toFixed(2)} (target ≤ 1.3)`,
  );
}

async function storeRate(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'aleph-store-bench-'));
  try {
    const store = createFileSessionStore(dir);
    const id = await store.create();
    const count = 20_000;
    const start = performance.now();
    for (let i = 0; i < count; i += 1) {
      await store.append(id, {
        type: 'tool_result',
        callId: `c${i}`,
        name: 'read_file',
        output: 'x'.repeat(200),
        isError: false,
      });
      if (i % 10 === 9) await store.flush(id); // a turn boundary every 10 events
    }
    await store.flush(id);
    const seconds = (performance.now() - start) / 1000;
    await store.close?.();
    // Baseline: the same lines appended to one file by hand, fsynced as often (no transcript).
    const handle = await open(join(dir, 'baseline.jsonl'), 'a');
    const baselineStart = performance.now();
    for (let i = 0; i < count; i += 1) {
      const event = { type: 'tool_result', callId: `c${i}`, name: 'read_file', output: 'x'.repeat(200) };
      await handle.write(`${JSON.stringify({ ...event, isError: false, seq: i, at: Date.now() })}\n`);
      if (i % 10 === 9) await handle.sync();
    }
    await handle.sync();
    const baseline = (performance.now() - baselineStart) / 1000;
    await handle.close();
    console.log(
      `file session store: ${(count / seconds).toFixed(0)} events/s with its transcript vs ${(count / baseline).toFixed(0)} for bare appends, ratio ${(baseline / seconds).toFixed(2)} (200-byte tool results, fsync every 10 events)`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * A turn's own cost must not grow with the history: N = 1000 turns of K no-op calls (a context
 * budget set but never reached, so PREPARE runs its check every turn), CPU µs per turn in windows.
 */
async function flatness(calls: number): Promise<void> {
  const steps = 1000;
  const run = async (onStep: () => void) => {
    let n = 0;
    // Not ScriptedProvider: it keeps every request, and so a copy of the history per turn.
    const provider = {
      id: 'bench',
      think: () =>
        Promise.resolve(
          (n += 1) < steps
            ? callTools(Array.from({ length: calls }, (_, i) => ({ name: 'noop', args: { n: n * 10 + i } })))
            : stop(),
        ),
    };
    const harness = new AgentHarness({
      provider,
      tools: [noop],
      sessions: new InMemorySessionStore(),
      maxIterations: steps + 1,
      contextBudget: { maxTokens: 1e9 },
    });
    await harness.run({ prompt: 'go' }, { onStep });
  };
  await run(() => {}); // warm-up: the same code paths, JIT-compiled
  const cpu: number[] = [];
  let last = process.cpuUsage();
  await run(() => {
    const used = process.cpuUsage(last);
    cpu.push(used.user + used.system);
    last = process.cpuUsage();
  });
  // Each window's median: one scheduler hiccup on a shared machine must not decide it.
  const at = (from: number) => median(cpu.slice(from - 1, from + 9));
  const early = at(2);
  console.log(
    `turn cost over a long run (N = ${steps}, K = ${calls}, CPU µs, median of each 10): steps 2–11 ${early.toFixed(0)}, 90–99 ${at(90).toFixed(0)} (${(at(90) / early).toFixed(2)}×), 990–999 ${at(990).toFixed(0)} (${(at(990) / early).toFixed(2)}×) (target ≤ 1.5×)`,
  );
}

console.log('# @aleph/harness');
await flatness(1);
await flatness(8);
await loopOverhead();
await parallelTools();
await storeRate();
