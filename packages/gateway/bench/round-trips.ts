// Timing round trips, for the raw baseline and the gateway alike: `send` starts one, and the
// caller's output listener calls `arrived` when its answer is in.
export function roundTrips(send: () => void): {
  arrived: () => void;
  /** `warmUp` round trips, unmeasured, then `rounds` timed ones (ms). */
  time: (warmUp: number, rounds: number) => Promise<number[]>;
} {
  let waiting: (() => void) | undefined;
  return {
    arrived: () => waiting?.(),
    async time(warmUp, rounds) {
      const samples: number[] = [];
      for (let i = 0; i < warmUp + rounds; i += 1) {
        const start = performance.now();
        await new Promise<void>((resolve) => {
          waiting = resolve;
          send();
        });
        if (i >= warmUp) samples.push(performance.now() - start);
      }
      waiting = undefined;
      return samples;
    },
  };
}
