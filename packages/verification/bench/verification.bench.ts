// pnpm bench: per-turn cost of the structural verifier chain, and a `true` ShellStopHook against a
// raw `sh -c true` spawn measured in the same run. Prints figures and ratios; asserts nothing.
import { spawn } from 'node:child_process';
import {
  hashToolArgs,
  MutationEvidenceVerifier,
  ScratchpadGoalVerifier,
  ShellStopHook,
  ToolLoopVerifier,
  TOOL_HISTORY_WINDOW,
  VerifierChain,
  ExtensionStopHookVerifier,
  type TurnVerifyContext,
} from '../src/index.js';

const percentile = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] ?? NaN;
const summary = (samples: number[]) => {
  const sorted = [...samples].sort((a, b) => a - b);
  return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99) };
};

async function chainCost(): Promise<void> {
  const chain = VerifierChain.builder()
    .with(new ExtensionStopHookVerifier())
    .with(new ToolLoopVerifier())
    .with(new ScratchpadGoalVerifier())
    .with(new MutationEvidenceVerifier())
    .build();
  const recentToolCalls = Array.from({ length: TOOL_HISTORY_WINDOW }, (_, i) => ({
    name: i % 2 ? 'read_file' : 'shell',
    argsHash: hashToolArgs({ path: `src/file-${i}.ts`, line: i }),
    ok: true,
    kind: i === TOOL_HISTORY_WINDOW - 1 ? ('evidence' as const) : ('other' as const),
  }));
  const ctx: TurnVerifyContext = {
    iterations: 12,
    toolCallsMade: 40,
    finalText: 'VERDICT: PASS',
    recentToolCalls,
    stopReason: 'end_turn',
    sessionId: 'bench',
    scratchpad: Array.from({ length: 10 }, (_, i) => ({ text: `row ${i}`, status: 'done' as const })),
  };
  const signal = new AbortController().signal;
  for (let i = 0; i < 5000; i += 1) await chain.run(ctx, signal);
  const samples: number[] = [];
  for (let i = 0; i < 50_000; i += 1) {
    const start = process.hrtime.bigint();
    await chain.run(ctx, signal);
    samples.push(Number(process.hrtime.bigint() - start) / 1000);
  }
  const { p50, p99 } = summary(samples);
  console.log(
    `chain of 4 structural verifiers, full window of ${TOOL_HISTORY_WINDOW}: p50 ${p50.toFixed(2)} µs, p99 ${p99.toFixed(2)} µs (target p50 ≤ 20 µs)`,
  );
}

function rawSpawn(): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', 'true']);
    child.on('error', reject).on('close', () => resolve());
  });
}

async function hookVersusRaw(): Promise<void> {
  const hook = new ShellStopHook({ name: 'true', command: 'true' });
  const ctx = { finalText: 'done', iterations: 1, toolCallsMade: 0, stopReason: 'end_turn' };
  const signal = new AbortController().signal;
  const rounds = 200;
  const raw: number[] = [];
  const viaHook: number[] = [];
  for (let i = 0; i < 20; i += 1) {
    await rawSpawn();
    await hook.evaluate(ctx, signal);
  }
  // Interleaved so machine noise lands on both sides alike.
  for (let i = 0; i < rounds; i += 1) {
    let start = performance.now();
    await rawSpawn();
    raw.push(performance.now() - start);
    start = performance.now();
    await hook.evaluate(ctx, signal);
    viaHook.push(performance.now() - start);
  }
  const r = summary(raw);
  const h = summary(viaHook);
  console.log(`raw spawn('sh', ['-c', 'true']):   p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms`);
  console.log(`ShellStopHook 'true':               p50 ${h.p50.toFixed(2)} ms, p99 ${h.p99.toFixed(2)} ms`);
  console.log(`ratio hook/raw p50: ${(h.p50 / r.p50).toFixed(2)} (target ≤ 1.3)`);
}

console.log('# @aleph/verification');
await chainCost();
await hookVersusRaw();
