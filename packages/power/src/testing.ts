// Test doubles for consumers of @aleph/power: a capability that records acquire/release in order.
import type { PowerCapability, PowerStatus, SleepGuard } from './power-capability.js';

export interface PowerEvent {
  readonly kind: 'acquire' | 'release';
  readonly reason: string;
  readonly at: number;
}

export class RecordingPowerCapability implements PowerCapability {
  readonly events: PowerEvent[] = [];
  #held = 0;

  get held(): number {
    return this.#held;
  }

  inhibitSleep(reason: string): SleepGuard {
    this.#held += 1;
    this.events.push({ kind: 'acquire', reason, at: performance.now() });
    let released = false;
    const release = (): void => {
      if (released) return;
      released = true;
      this.#held -= 1;
      this.events.push({ kind: 'release', reason, at: performance.now() });
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

  status(): PowerStatus {
    return { backend: 'noop', enabled: true, guardsHeld: this.#held, asserting: this.#held > 0 };
  }
}
