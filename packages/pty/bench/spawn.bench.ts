// pnpm bench: what a spawn costs a big server, with the fork-free spawn (Linux) against node-pty's
// forkpty, each in its own process with 200 MB of memory in use. Prints figures; asserts nothing.
// node-pty's fork leaves every page copy-on-write, so the server's next write to each one faults.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { PtySession } from '../src/index.js';

const MB = 200;
const ROUNDS = 5;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;

if (process.argv[2] === 'measure') {
  // The server stand-in: 200 MB written once, then a spawn, then the same memory written again.
  const memory = Array.from({ length: MB }, () => Buffer.alloc(1024 * 1024, 1));
  const write = () => {
    const start = performance.now();
    for (const block of memory)
      for (let at = 0; at < block.length; at += 4096) block[at] = (block[at] ?? 0) + 1;
    return performance.now() - start;
  };
  write();
  await PtySession.spawn({ command: '/bin/true', cols: 80, rows: 24 }).exited; // helper booted
  const result = { spawn: [] as number[], writeAfter: [] as number[], writeBefore: [] as number[] };
  for (let round = 0; round < ROUNDS; round += 1) {
    result.writeBefore.push(write());
    const start = performance.now();
    const session = PtySession.spawn({ command: '/bin/true', cols: 80, rows: 24 });
    result.spawn.push(performance.now() - start);
    result.writeAfter.push(write());
    await session.exited;
  }
  process.stdout.write(JSON.stringify(result));
} else {
  const measure = (fork: boolean) => {
    const run = spawnSync(
      process.execPath,
      [...process.execArgv, fileURLToPath(import.meta.url), 'measure'],
      {
        env: { ...process.env, ALEPH_PTY_FORK: fork ? '1' : '0' },
        encoding: 'utf8',
      },
    );
    return JSON.parse(run.stdout) as { spawn: number[]; writeAfter: number[]; writeBefore: number[] };
  };
  const ours = measure(false);
  const nodePty = measure(true);
  const f = (n: number) => n.toFixed(1);
  console.log(`# @aleph/pty (spawn in a process with ${MB} MB in use; medians of ${ROUNDS})`);
  console.log(
    `spawn blocks: ${f(median(ours.spawn))} ms, node-pty forkpty ${f(median(nodePty.spawn))} ms (ratio ${(median(ours.spawn) / median(nodePty.spawn)).toFixed(2)})`,
  );
  console.log(
    `writing the ${MB} MB after a spawn: ${f(median(ours.writeAfter))} ms, after a node-pty spawn ${f(median(nodePty.writeAfter))} ms (before any spawn: ${f(median(ours.writeBefore))} ms)`,
  );
}
