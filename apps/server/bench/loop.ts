// One measured run of one system, in a process of its own (the parent alternates them): the harness
// over the production adapter, over the pre-issue-18 adapter, over a trivial provider (core only), or
// the AI SDK's own generateText loop; N steps of K no-op tool calls over the same instant model.
// Prints one JSON line: time per step, the mean of steps 2–11 and 90–99, heap held per step.
import { AgentHarness, InMemorySessionStore, type AiProvider, type Tool } from '@aleph/harness';
import { generateText, stepCountIs, tool } from 'ai';
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
  /** Mean of steps 2–11 and of steps 90–99 (1-based), µs; undefined below 99 steps. */
  readonly earlyUs: number;
  readonly lateUs: number | undefined;
  /** The same two means in CPU time. */
  readonly earlyCpuUs: number;
  readonly lateCpuUs: number | undefined;
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
    await generateText({
      model: instantModel(steps, calls),
      prompt: 'go',
      tools: {
        noop: tool({ description: 'does nothing', inputSchema: args, execute: () => Promise.resolve('ok') }),
      },
      stopWhen: stepCountIs(steps),
      onStepFinish: () => onStep((step += 1)),
    });
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

export async function measure(system: System, steps: number, calls: number): Promise<LoopFigures> {
  await run(system, Math.min(steps, 30), calls, () => {}); // warm-up: the same code paths, JIT-compiled
  gc!();
  const heapBefore = process.memoryUsage().heapUsed;
  let heapAtEnd = 0;
  const ends: number[] = [];
  const cpuEnds: number[] = [];
  const cpuStart = process.cpuUsage();
  let cpu = { user: 0, system: 0 };
  const start = performance.now();
  await run(system, steps, calls, (step) => {
    ends.push(performance.now());
    const used = process.cpuUsage(cpuStart);
    cpuEnds.push(used.user + used.system);
    if (step !== steps) return;
    cpu = process.cpuUsage(cpuStart);
    gc!();
    heapAtEnd = process.memoryUsage().heapUsed;
  });
  const totalMs = ends.at(-1)! - start;
  const durations = ends.map((end, index) => end - (index === 0 ? start : ends[index - 1]!));
  const cpuDurations = cpuEnds.map((end, index) => end - (index === 0 ? 0 : cpuEnds[index - 1]!));
  return {
    system,
    steps,
    calls,
    perStepUs: (totalMs * 1000) / steps,
    cpuPerStepUs: (cpu.user + cpu.system) / steps,
    earlyUs: mean(durations.slice(1, 11)) * 1000,
    lateUs: steps >= 99 ? mean(durations.slice(89, 99)) * 1000 : undefined,
    earlyCpuUs: mean(cpuDurations.slice(1, 11)),
    lateCpuUs: steps >= 99 ? mean(cpuDurations.slice(89, 99)) : undefined,
    heapPerStepKb: (heapAtEnd - heapBefore) / 1024 / steps,
  };
}

if (process.argv[1] === import.meta.filename) {
  const [system, steps, calls] = process.argv.slice(2);
  const figures = await measure(system as System, Number(steps), Number(calls));
  process.stdout.write(`${JSON.stringify(figures)}\n`);
}
