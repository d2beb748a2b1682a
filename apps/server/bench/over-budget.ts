// `pnpm --filter @aleph/server exec tsx bench/over-budget.ts`: a diagnostic beside the bench, not a
// target. The loop with what the server adds per turn: the file session store (a fsync a turn), the
// structural verifiers and a context budget small enough that every late turn compacts (and
// truncates). N = 1000 steps of K = 8 no-op calls over the instant model; prints the median step of
// each tenth of the run, and the last tenth over the second: what still grows with the history.
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentHarness, createFileSessionStore, type Tool } from '@aleph/harness';
import {
  MutationEvidenceVerifier,
  ScratchpadGoalVerifier,
  ToolLoopVerifier,
  VerifierChain,
} from '@aleph/verification';
import { z } from 'zod';
import { aiSdkProvider } from '../src/providers.js';
import { instantModel } from './instant-model.js';

const STEPS = 1000;
const CALLS = 8;
const BUDGETS = [100_000, 20_000]; // the server's default, and one that compacts from step ~180

const args = z.object({ n: z.number(), i: z.number() });
const noop: Tool<z.infer<typeof args>> = {
  name: 'noop',
  description: 'does nothing',
  input: args,
  claim: () => ({ kind: 'none' }),
  execute: () => Promise.resolve({ output: 'ok' }),
};
const median = (values: readonly number[]) => [...values].sort((a, b) => a - b)[values.length >> 1]!;

const dir = mkdtempSync(join(tmpdir(), 'aleph-over-budget-'));
try {
  console.log(
    `# over budget: N=${STEPS}, K=${CALLS}, file store + verifiers (load ${loadavg()[0]!.toFixed(2)})`,
  );
  for (const maxTokens of BUDGETS) {
    const verifier = VerifierChain.builder()
      .with(new ToolLoopVerifier())
      .with(new ScratchpadGoalVerifier())
      .with(new MutationEvidenceVerifier())
      .build();
    const harness = new AgentHarness({
      provider: aiSdkProvider('bench', instantModel(STEPS, CALLS)),
      tools: [noop],
      sessions: createFileSessionStore(dir),
      verifier,
      contextBudget: { maxTokens },
      maxIterations: STEPS + 1,
    });
    const wall: number[] = [];
    let compactions = 0;
    let last = performance.now();
    await harness.run(
      { prompt: 'go' },
      {
        onStep: () => {
          const now = performance.now();
          wall.push((now - last) * 1000);
          last = now;
        },
        onEvent: (event) => void (event.type === 'compaction' && (compactions += 1)),
      },
    );
    const tenth = STEPS / 10;
    const tenths = Array.from({ length: 10 }, (_, index) =>
      median(wall.slice(index * tenth, (index + 1) * tenth)),
    );
    console.log(
      `budget ${maxTokens} tokens: ${compactions} turns compacted; median µs/step by tenth: ${tenths.map((value) => value.toFixed(0)).join(' ')}; last tenth / second: ${(tenths[9]! / tenths[1]!).toFixed(2)}×`,
    );
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
