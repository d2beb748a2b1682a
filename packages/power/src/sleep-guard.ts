// A SleepGuard: one hold on the sleep inhibitor, whose release runs `onRelease` exactly once,
// however often it is released (by `release()` or by `using`).

export interface SleepGuard extends Disposable {
  readonly reason: string;
  readonly released: boolean;
  /** Idempotent. */
  release(): void;
}

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
