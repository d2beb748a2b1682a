// A gateway in its own process for the benchmarks (as a server runs it): prints its URL, and
// answers `bench.memory` with this process's memory usage, `bench.cpu` with its CPU time, and
// `bench.loop` with its event-loop delay and GC pauses since the last call (resetting them).
// The delay monitor and the GC observer run only between `bench.loop({ on: true })` and
// `bench.loop({ on: false })`: sampling the loop every millisecond costs the echo measured
// elsewhere ~20 µs of CPU and ~35 µs of latency per round trip here.
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
gateway.register('bench.cpu', z.object({}).optional(), () => process.cpuUsage());
const loop = monitorEventLoopDelay({ resolution: 1 });
const gc = { count: 0, totalMs: 0, maxMs: 0 };
const gcObserver = new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    gc.count += 1;
    gc.totalMs += entry.duration;
    gc.maxMs = Math.max(gc.maxMs, entry.duration);
  }
});
gateway.register('bench.loop', z.object({ on: z.boolean().optional() }).optional(), (params) => {
  if (params?.on === true) {
    loop.enable();
    gcObserver.observe({ entryTypes: ['gc'] });
  } else if (params?.on === false) {
    loop.disable();
    gcObserver.disconnect();
  }
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
