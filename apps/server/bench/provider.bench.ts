// pnpm bench (apps/server): the agent loop on the path a user runs — the harness over the production
// adapter (aiSdkProvider) and an instant LanguageModelV3 — beside the AI SDK's own streamText loop (both stream)
// over the same model, the harness over a trivial provider (core only) and the pre-issue-18 adapter.
// N = 10, 100, 1000 steps × K = 1, 8 no-op tool calls a step; one process per system per round (it
// runs every configuration), the order rotated each round; medians of ROUNDS (default 5). Within a
// round a step's time is the median of REPEATS runs of the loop (loop.ts). Prints figures, ratios
// and each target next to its figure; the flatness targets also show each round's figure.
import { spawnSync } from 'node:child_process';
import { loadavg } from 'node:os';
import type { LoopFigures, System } from './loop.js';

const ROUNDS = Number(process.env['ROUNDS'] ?? 5);
const CONFIGS = [
  [10, 1],
  [10, 8],
  [100, 1],
  [100, 8],
  [1000, 1],
  [1000, 8],
] as const;
/**
 * The AI SDK loop at N = 1000, K = 8 holds ~2 GB and takes minutes a run (it grows quadratically),
 * and so does the pre-issue-18 adapter past N = 100, K = 1: those run only with FULL=1.
 */
const FULL = process.env['FULL'] === '1';
function systemsAt(steps: number, calls: number): System[] {
  const systems: System[] = ['production', 'core'];
  if (FULL || steps < 1000 || calls === 1) systems.push('sdk');
  if (FULL || steps <= 10 || (steps <= 100 && calls === 1)) systems.push('legacy');
  return systems;
}

/** One process runs every configuration of one system, in order, and prints a line for each. */
function runSystem(system: System, configs: readonly (readonly [number, number])[]): LoopFigures[] {
  const loop = new URL('./loop.ts', import.meta.url).pathname;
  const child = spawnSync(
    process.execPath,
    ['--expose-gc', '--import', 'tsx', loop, system, ...configs.map(([steps, calls]) => `${steps}x${calls}`)],
    { encoding: 'utf8', maxBuffer: 1 << 20 },
  );
  if (child.status !== 0) throw new Error(`${system} failed: ${child.stderr}`);
  return child.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as LoopFigures);
}

const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};

const load = () =>
  loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');
console.log(
  `# @aleph/server: the agent loop over the production adapter (${ROUNDS} rounds, ${process.env['REPEATS'] ?? 11} repeats; load ${load()})`,
);
const results = new Map<string, LoopFigures[]>();
const key = (system: System, steps: number, calls: number) => `${system} ${steps} ${calls}`;
const SYSTEMS: System[] = ['production', 'sdk', 'core', 'legacy'];
for (let round = 0; round < ROUNDS; round += 1) {
  for (let index = 0; index < SYSTEMS.length; index += 1) {
    const system = SYSTEMS[(index + round) % SYSTEMS.length]!;
    const configs = CONFIGS.filter(([steps, calls]) => systemsAt(steps, calls).includes(system));
    for (const figures of runSystem(system, configs)) {
      const at = key(system, figures.steps, figures.calls);
      results.set(at, [...(results.get(at) ?? []), figures]);
    }
  }
  process.stderr.write(`round ${round + 1}/${ROUNDS} done (load ${load()})\n`);
}

interface Summary {
  perStepUs: number;
  cpuPerStepUs: number;
  flat: number | undefined;
  cpuFlat: number | undefined;
  longRun: number | undefined;
  heapPerStepKb: number;
}
function summary(system: System, steps: number, calls: number): Summary | undefined {
  const runs = results.get(key(system, steps, calls));
  if (runs === undefined) return undefined;
  return {
    perStepUs: median(runs.map((run) => run.perStepUs)),
    cpuPerStepUs: median(runs.map((run) => run.cpuPerStepUs)),
    flat: steps === 100 ? median(runs.map((run) => run.lateUs! / run.earlyUs)) : undefined,
    cpuFlat: steps === 100 ? median(runs.map((run) => run.lateCpuUs! / run.earlyCpuUs)) : undefined,
    longRun: steps >= 1000 ? median(runs.map((run) => run.lastUs! / run.earlyUs)) : undefined,
    heapPerStepKb: median(runs.map((run) => run.heapPerStepKb)),
  };
}

const LABEL: Record<System, string> = {
  production: 'harness + production adapter',
  sdk: 'AI SDK streamText loop',
  core: 'harness core (trivial provider)',
  legacy: 'harness + pre-#18 adapter',
};
const pad = (text: string, width: number) => text.padEnd(width);
const number = (value: number | undefined, digits = 0) => (value === undefined ? '—' : value.toFixed(digits));
console.log(
  `${pad('system', 34)}${pad('N', 6)}${pad('K', 3)}${pad('µs/step', 10)}${pad('cpu µs/step', 13)}${pad('90–99 / 2–11', 14)}${pad('(cpu)', 8)}${pad('990–999 / 2–11', 16)}heap KB/step`,
);
for (const [steps, calls] of CONFIGS) {
  for (const system of systemsAt(steps, calls)) {
    const figures = summary(system, steps, calls)!;
    console.log(
      `${pad(LABEL[system], 34)}${pad(`${steps}`, 6)}${pad(`${calls}`, 3)}${pad(number(figures.perStepUs), 10)}${pad(number(figures.cpuPerStepUs), 13)}${pad(number(figures.flat, 2), 14)}${pad(number(figures.cpuFlat, 2), 8)}${pad(number(figures.longRun, 2), 16)}${number(figures.heapPerStepKb, 1)}`,
    );
  }
}

const verdict = (ok: boolean) => (ok ? 'ok' : 'MISSED');
for (const calls of [1, 8]) {
  const ours = summary('production', 100, calls)!;
  const theirs = summary('sdk', 100, calls)!;
  const ratio = ours.perStepUs / theirs.perStepUs;
  console.log(
    `target: production per step at N=100, K=${calls}: ${number(ours.perStepUs)} µs vs the SDK loop's ${number(theirs.perStepUs)} µs = ${ratio.toFixed(2)}× (target ≤ 0.5×) ${verdict(ratio <= 0.5)}`,
  );
}
for (const steps of [100]) {
  for (const calls of [1, 8]) {
    const figures = summary('production', steps, calls)!;
    const [flat, cpuFlat] = [figures.flat!, figures.cpuFlat!];
    const sdk = summary('sdk', steps, calls)?.flat;
    const rounds = results
      .get(key('production', steps, calls))!
      .map((run) => (run.lateUs! / run.earlyUs).toFixed(2))
      .join(' ');
    console.log(
      `target: production flat at N=${steps}, K=${calls}: steps 90–99 = ${flat.toFixed(2)}× steps 2–11 (rounds ${rounds}; in CPU time ${cpuFlat.toFixed(2)}×; SDK loop ${number(sdk, 2)}×) (target ≤ 1.5×) ${verdict(flat <= 1.5)}`,
    );
  }
}
for (const calls of [1, 8]) {
  const heap = summary('production', 1000, calls)!.heapPerStepKb;
  const sdk = summary('sdk', 1000, calls)?.heapPerStepKb;
  console.log(
    `target: production heap per step at N=1000, K=${calls}: ${heap.toFixed(1)} KB (SDK loop ${number(sdk, 1)} KB) (target ≤ 16 KB) ${verdict(heap <= 16)}`,
  );
}
console.log(`load at the end: ${load()}`);
