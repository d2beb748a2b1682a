// pnpm bench: what a spawn costs a big server, with the fork-free spawn (Linux) against node-pty's
// forkpty, each in its own process with 200 MB of memory in use. Prints figures; asserts nothing.
// node-pty's fork leaves every page copy-on-write, so the server's next write to each one faults.
// Also the resident memory of the package's helper processes (the spawn helper and the watchdog),
// beside an idle bare Node process measured in the same run (the spawn helper was one: 43 MB).
import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { PtyManager, PtySession } from '../src/index.js';

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
} else if (process.argv[2] === 'memory') {
  // Helpers' RSS with 0 and with 16 sessions running; then a bare idle Node process's.
  const children = () =>
    readdirSync('/proc')
      .filter((entry) => /^\d+$/.test(entry))
      .flatMap((entry) => {
        try {
          const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
          if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) !== process.pid) return [];
          return [{ pid: Number(entry), command: readFileSync(`/proc/${entry}/cmdline`, 'latin1') }];
        } catch {
          return [];
        }
      });
  const rss = (pid: number) =>
    Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;
  const helpers = () =>
    Object.fromEntries(
      children()
        .filter(({ command }) => /aleph-pty-(spawner|watchdog)/.test(command))
        .map(({ pid, command }) => [/aleph-pty-(\w+)/.exec(command)?.[1] ?? '?', rss(pid)]),
    );
  const manager = new PtyManager();
  await manager.spawn({ command: '/bin/true', cols: 80, rows: 24 }).exited;
  const idle = helpers();
  for (let count = 0; count < 16; count += 1) manager.spawn({ command: '/bin/cat', cols: 80, rows: 24 });
  const busy = helpers();
  await manager.closeAll();
  const bare = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)'], { stdio: 'ignore' });
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const node = rss(bare.pid ?? 0);
  bare.kill();
  process.stdout.write(JSON.stringify({ idle, busy, node }));
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
  const memory = JSON.parse(
    spawnSync(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), 'memory'], {
      encoding: 'utf8',
    }).stdout,
  ) as { idle: Record<string, number>; busy: Record<string, number>; node: number };
  const { idle, busy, node } = memory;
  const helper = idle['spawner'] ?? NaN;
  console.log(
    `spawn helper RSS: ${f(helper)} MB idle, ${f(busy['spawner'] ?? NaN)} MB with 16 sessions (target ≤ 12 MB: ${helper <= 12 ? 'met' : 'MISSED'}); the Node helper it replaces: 43 MB (issue 16); a bare idle Node process here: ${f(node)} MB (ratio ${(helper / node).toFixed(3)})`,
  );
  console.log(
    `watchdog RSS: ${f(idle['watchdog'] ?? NaN)} MB idle, ${f(busy['watchdog'] ?? NaN)} MB with 16 sessions`,
  );
}
