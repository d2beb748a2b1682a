// A cluster run's agent.* events leave this node only while it holds the run, behind the same
// fence as the run's log: at once while the run's lease was renewed within its TTL (no other node
// can have taken it); otherwise held, in order, until a renewal confirms the hold, or until the
// run's end says whether the log took the run to its end (what was held is sent) or refused this
// node, another node having written it (what was held is dropped, and anything later).
// Invariant: events go out in the order given, and none after the run was judged lost here.

/** What the gate reads of the run's lease. */
export interface LeaseView {
  /** Renewed within the TTL: no other node can hold the run now. */
  readonly current: boolean;
  /** True once the hold is confirmed, false once the run moved (pending while NATS is away). */
  held(): Promise<boolean>;
}

export class RunEventGate {
  readonly #lease: LeaseView;
  #held: (() => void)[] = [];
  #waiting = false;
  #settled: 'kept' | 'lost' | undefined;

  constructor(lease: LeaseView) {
    this.#lease = lease;
  }

  /** Sends an event (`go` publishes it) now, later in order, or never (the run was lost here). */
  send(go: () => void): void {
    if (this.#settled === 'lost') return;
    if (this.#held.length === 0 && (this.#settled === 'kept' || this.#lease.current)) {
      go();
      return;
    }
    this.#held.push(go);
    if (!this.#waiting) void this.#wait();
  }

  async #wait(): Promise<void> {
    this.#waiting = true;
    try {
      while (this.#held.length > 0 && this.#settled === undefined) {
        // Lost: the run is being ended; its end says whether the log took what was held.
        if (!(await this.#lease.held())) return;
        if (this.#settled === undefined) this.#release();
      }
    } finally {
      this.#waiting = false;
    }
  }

  #release(): void {
    for (const go of this.#held.splice(0)) go();
  }

  /** The run ended here: `kept` when its log took it to its end (held events go now), else lost. */
  settle(kept: boolean): void {
    if (this.#settled !== undefined) return;
    this.#settled = kept ? 'kept' : 'lost';
    if (kept) this.#release();
    else this.#held = [];
  }
}
