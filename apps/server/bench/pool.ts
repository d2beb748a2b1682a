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
