// A gateway in its own process for the benchmarks (as a server runs it): prints its URL, and
// answers `bench.memory` with this process's memory usage and `bench.loop` with its event-loop
// delay and GC pauses since the last call (resetting them), and its CPU time.
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { PtyManager } from '@aleph/pty';
import { z } from 'zod';
import { createGateway } from '../src/index.js';

const gateway = await createGateway({
  token: process.env['BENCH_TOKEN'] ?? 'bench',
  ptyManager: new PtyManager({ killStepMs: 100 }),
});
gateway.register('bench.memory', z.object({}).optional(), () => {
  global.gc?.();
  return process.memoryUsage();
});
const loop = monitorEventLoopDelay({ resolution: 1 });
loop.enable();
const gc = { count: 0, totalMs: 0, maxMs: 0 };
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    gc.count += 1;
    gc.totalMs += entry.duration;
    gc.maxMs = Math.max(gc.maxMs, entry.duration);
  }
}).observe({ entryTypes: ['gc'] });
gateway.register('bench.loop', z.object({}).optional(), () => {
  const ms = (ns: number) => ns / 1e6;
  const result = {
    p50: ms(loop.percentile(50)),
    p99: ms(loop.percentile(99)),
    max: ms(loop.max),
    cpu: process.cpuUsage(),
    gc: { ...gc },
  };
  loop.reset();
  Object.assign(gc, { count: 0, totalMs: 0, maxMs: 0 });
  return result;
});
process.stdout.write(`${gateway.url}\n`);
const stop = (): void => void gateway.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
// Our stdin is a pipe from the benchmark: when it closes (the benchmark ended or was killed), stop.
process.stdin.on('end', stop).resume();
