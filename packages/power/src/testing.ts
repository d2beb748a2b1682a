// Test doubles for consumers of @aleph/power: a capability that records acquire/release in order.
import type { PowerCapability, PowerStatus } from './power-capability.js';
import { createGuard, type SleepGuard } from './sleep-guard.js';

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
    return createGuard(reason, () => {
      this.#held -= 1;
      this.events.push({ kind: 'release', reason, at: performance.now() });
    });
  }

  status(): PowerStatus {
    return { backend: 'noop', enabled: true, guardsHeld: this.#held, asserting: this.#held > 0 };
  }
}
