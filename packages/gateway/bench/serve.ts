// A gateway in its own process for the benchmarks (as a server runs it): prints its URL, and
// answers `bench.memory` with this process's memory usage.
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
process.stdout.write(`${gateway.url}\n`);
const stop = (): void => void gateway.close().then(() => process.exit(0));
process.on('SIGTERM', stop);
// Our stdin is a pipe from the benchmark: when it closes (the benchmark ended or was killed), stop.
process.stdin.on('end', stop).resume();
