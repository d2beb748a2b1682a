// pnpm bench: the added cost of a sandboxed `sh -c true` over the bare one, median of 200 each,
// interleaved so machine noise lands on both sides alike. Prints figures and the ratio; asserts
// nothing (target: ≤ 5 ms added on a 2-core VM).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { loadavg } from 'node:os';
import { createSandbox, type WrappedCommand } from '../src/index.js';

const ROUNDS = 200;

function run(command: WrappedCommand): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command.file, command.args, { cwd: command.cwd, env: command.env, stdio: 'ignore' });
    child.on('error', reject).on('close', () => resolve());
  });
}

const median = (samples: number[]): number => {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
};

async function main(): Promise<void> {
  const cwd = mkdtempSync('/var/tmp/aleph-sandbox-bench-');
  try {
    for (const network of ['off', 'on'] as const) {
      const sandbox = createSandbox({ network }, { mode: 'required' });
      const command = { file: '/bin/sh', args: ['-c', 'true'], cwd, env: process.env };
      const bare: WrappedCommand = {
        ...command,
        env: { PATH: process.env['PATH'] ?? '' },
        release: () => {},
      };
      const sandboxed = sandbox.wrap(command);
      for (let i = 0; i < 20; i += 1) {
        await run(bare);
        await run(sandboxed);
      }
      const bareMs: number[] = [];
      const sandboxedMs: number[] = [];
      for (let i = 0; i < ROUNDS; i += 1) {
        let start = performance.now();
        await run(bare);
        bareMs.push(performance.now() - start);
        start = performance.now();
        await run(sandboxed);
        sandboxedMs.push(performance.now() - start);
      }
      sandboxed.release();
      const [b, s] = [median(bareMs), median(sandboxedMs)];
      console.log(
        `${sandbox.backend} network=${network}: sh -c true bare ${b.toFixed(2)} ms, sandboxed ${s.toFixed(2)} ms (median of ${ROUNDS}): +${(s - b).toFixed(2)} ms, ×${(s / b).toFixed(2)} (target ≤ 5 ms added)`,
      );
    }
    console.log(
      `load average while measuring: ${loadavg()
        .map((n) => n.toFixed(2))
        .join(' ')}`,
    );
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
}

await main();
