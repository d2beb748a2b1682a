// A SleepGuard whose release runs `onRelease` exactly once, however often it is released.
import type { SleepGuard } from '../power-capability.js';

export function createGuard(reason: string, onRelease: () => void): SleepGuard {
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    onRelease();
  };
  return {
    reason,
    get released() {
      return released;
    },
    release,
    [Symbol.dispose]: release,
  };
}
