import { readFileSync } from 'node:fs';

// How the tool-call bench runs a level of concurrency: `level` runs at once, and at least
// MIN_RUNS runs in all (one after another when the level is below it), so one run's figures are
// not a single sample.
export const MIN_RUNS = 5;

export async function runPool<T>(level: number, run: () => Promise<T>): Promise<T[]> {
  const total = Math.max(level, MIN_RUNS);
  const results: T[] = [];
  let started = 0;
  const lane = async (): Promise<void> => {
    while (started < total) {
      started += 1;
      results.push(await run());
    }
  };
  await Promise.all(Array.from({ length: Math.min(level, total) }, lane));
  return results;
}

/**
 * A process's CPU in ms: its own (utime + stime) and that of the children it reaped (cutime +
 * cstime: a spawn helper's commands, with bubblewrap and what they ran). Zeros once it is gone.
 */
export function cpuOf(pid: number | 'self'): { own: number; reaped: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat
      .slice(stat.lastIndexOf(')') + 2)
      .split(' ')
      .map(Number);
    const tick = 10; // ms: CLK_TCK is 100 on Linux
    return { own: (fields[11]! + fields[12]!) * tick, reaped: (fields[13]! + fields[14]!) * tick };
  } catch {
    return { own: 0, reaped: 0 };
  }
}

/** All of `pids`' CPU, their reaped children's included, in ms. */
export const allCpuOf = (pids: readonly (number | 'self')[]): number =>
  pids.reduce<number>((sum, pid) => {
    const { own, reaped } = cpuOf(pid);
    return sum + own + reaped;
  }, 0);
