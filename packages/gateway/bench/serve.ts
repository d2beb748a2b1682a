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
process.on('SIGTERM', () => void gateway.close().then(() => process.exit(0)));
