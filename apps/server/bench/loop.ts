// The measured runs of one system, in a process of its own (the parent alternates them): the harness
// over the production adapter, over the pre-issue-18 adapter, over a trivial provider (core only), or
// the AI SDK's own streamText loop; N steps of K no-op tool calls over the same instant model.
// Prints one JSON line: time per step, the mean of steps 2–11 and 90–99, heap held per step.
import { AgentHarness, InMemorySessionStore, type AiProvider, type Tool } from '@aleph/harness';
import { stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';
import { aiSdkProvider } from '../src/providers.js';
import { instantModel, instantThink } from './instant-model.js';
import { legacyProvider } from './legacy-adapter.js';

export type System = 'production' | 'legacy' | 'core' | 'sdk';

export interface LoopFigures {
  readonly system: System;
  readonly steps: number;
  readonly calls: number;
  readonly perStepUs: number;
  /** CPU time (user + system, all threads) per step: less sensitive to a loaded machine. */
  readonly cpuPerStepUs: number;
  /** Mean µs of steps 2–11, of steps 90–99 (N ≥ 100) and of steps N−10…N−1 (N = 1000), 1-based. */
  readonly earlyUs: number;
  readonly lateUs?: number;
  readonly lastUs?: number;
  /** The same means in CPU time. */
  readonly earlyCpuUs: number;
  readonly lateCpuUs?: number;
  /** Heap held at the last step (after a full GC), over the heap before the run, per step. */
  readonly heapPerStepKb: number;
}

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) throw new Error('run with --expose-gc');

const args = z.object({ n: z.number(), i: z.number() });
const noop: Tool<z.infer<typeof args>> = {
  name: 'noop',
  description: 'does nothing',
  input: args,
  claim: () => ({ kind: 'none' }),
  execute: () => Promise.resolve({ output: 'ok' }),
};

function provider(system: Exclude<System, 'sdk'>, steps: number, calls: number): AiProvider {
  switch (system) {
    case 'production':
      return aiSdkProvider('bench', instantModel(steps, calls));
    case 'legacy':
      return legacyProvider(instantModel(steps, calls));
    case 'core': {
      const think = instantThink(steps, calls);
      return { id: 'core', think: () => Promise.resolve(think()) };
    }
  }
}

/** Runs the loop; `onStep` is called at the end of every step with its 1-based number. */
async function run(
  system: System,
  steps: number,
  calls: number,
  onStep: (step: number) => void,
): Promise<void> {
  let step = 0;
  if (system === 'sdk') {
    // The AI SDK's own streaming loop (streamText), as the harness's path streams too.
    const result = streamText({
      model: instantModel(steps, calls),
      prompt: 'go',
      tools: {
        noop: tool({ description: 'does nothing', inputSchema: args, execute: () => Promise.resolve('ok') }),
      },
      stopWhen: stepCountIs(steps),
      onStepFinish: () => onStep((step += 1)),
    });
    await result.consumeStream();
    return;
  }
  const harness = new AgentHarness({
    provider: provider(system, steps, calls),
    tools: [noop],
    sessions: new InMemorySessionStore(),
    maxIterations: steps + 1,
  });
  const result = await harness.run({ prompt: 'go' }, { onStep: () => onStep((step += 1)) });
  if (result.terminateReason.kind !== 'model_stop' || result.iterations !== steps)
    throw new Error(`${system}: ${JSON.stringify(result.terminateReason)} after ${result.iterations} steps`);
}

const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
const median = (values: readonly number[]) => [...values].sort((x, y) => x - y)[values.length >> 1]!;

interface Once {
  /** µs of wall and of CPU time of each step. */
  readonly wall: number[];
  readonly cpu: number[];
  readonly heapPerStepKb: number;
}

/** CPU time so far, µs: user + system, all threads (Node 20 has no per-thread clock). */
const cpuNow = (): number => {
  const used = process.cpuUsage();
  return used.user + used.system;
};

async function once(system: System, steps: number, calls: number): Promise<Once> {
  gc!();
  const heapBefore = process.memoryUsage().heapUsed;
  let heapAtEnd = 0;
  const wall: number[] = [];
  const cpu: number[] = [];
  let lastWall = performance.now();
  let lastCpu = cpuNow();
  await run(system, steps, calls, (step) => {
    const now = performance.now();
    const used = cpuNow();
    wall.push((now - lastWall) * 1000);
    cpu.push(used - lastCpu);
    if (step === steps) {
      gc!();
      heapAtEnd = process.memoryUsage().heapUsed;
    }
    // The bookkeeping above is outside the next step's figures.
    lastCpu = cpuNow();
    lastWall = performance.now();
  });
  return { wall, cpu, heapPerStepKb: (heapAtEnd - heapBefore) / 1024 / steps };
}

/**
 * Up to 100 steps the run is repeated REPEATS times (default 11) in the process and each step's
 * time is the median of its repeats: on a shared machine a preemption lands on a given step in a
 * few repeats, not in most, while a cost the step really has (its GC, its history) is in every one.
 * N = 1000 is repeated 3 times; the AI SDK loop there and the pre-issue-18 adapter (seconds a
 * run) run once.
 */
const REPEATS = Number(process.env['REPEATS'] ?? 11);
function repeatsOf(system: System, steps: number): number {
  if (system === 'legacy') return 1;
  if (steps <= 100) return REPEATS;
  return system === 'sdk' ? 1 : 3;
}

export async function measure(system: System, steps: number, calls: number): Promise<LoopFigures> {
  await run(system, Math.min(steps, 30), calls, () => {}); // warm-up: the same code paths, JIT-compiled
  const repeats = repeatsOf(system, steps);
  const runs: Once[] = [];
  for (let index = 0; index < repeats; index += 1) runs.push(await once(system, steps, calls));
  const perStep = (pick: (run: Once) => number[]) =>
    Array.from({ length: steps }, (_, step) => median(runs.map((run) => pick(run)[step]!)));
  const wall = perStep((run) => run.wall);
  const cpu = perStep((run) => run.cpu);
  const window = (values: number[], from: number) => mean(values.slice(from - 1, from + 9));
  return {
    system,
    steps,
    calls,
    perStepUs: median(runs.map((run) => mean(run.wall))),
    cpuPerStepUs: median(runs.map((run) => mean(run.cpu))),
    earlyUs: window(wall, 2),
    earlyCpuUs: window(cpu, 2),
    ...(steps >= 100 ? { lateUs: window(wall, 90), lateCpuUs: window(cpu, 90) } : {}),
    ...(steps >= 1000 ? { lastUs: window(wall, steps - 10) } : {}),
    heapPerStepKb: median(runs.map((run) => run.heapPerStepKb)),
  };
}

// `loop.ts SYSTEM N×K N×K …`: one JSON line per configuration, in this one process.
if (process.argv[1] === import.meta.filename) {
  const [system, ...configs] = process.argv.slice(2);
  for (const config of configs) {
    const [steps, calls] = config.split('x').map(Number);
    const figures = await measure(system as System, steps!, calls!);
    process.stdout.write(`${JSON.stringify(figures)}\n`);
  }
}
