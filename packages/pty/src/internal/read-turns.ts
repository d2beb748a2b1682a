// One budget of output per event-loop turn, shared by every session in the process. Past it, a
// session still flooding is paused and queued, and each turn resumes the longest-waiting few: so
// however many programs flood, a turn reads about this much and stays short, the floods take
// turns, and output that is not a flood (an echo, a prompt) is never held back. After input is
// written to any session, floods yield for a few turns, so the echo comes back at once. Only floods
// make turns: an echo or a keystroke with no flood about schedules nothing (no event-loop work).

// 8 KiB, 2 resumed a turn: with 63 sessions flooding and one echoing (pnpm bench, 6 runs paired
// with 16 KiB), echo p50 1.4–2.6 ms against 2.0–3.4, p99 lower in every pair (6.4–14.2 against
// 8.3–15.4), the floods' share ~10% less (10.5–17.6 MB/s). With no queue, p99 was 37–63 ms.
const TURN_READ_BYTES = 8 * 1024;
const RESUMED_PER_TURN = 2;
// After input, floods yield for this many turns (a few ms under load): isolation p99 9.4–10.0 ms
// against 12.0 without, the floods' share unchanged (18–20 MB/s).
const QUIET_TURNS = 10;
/** A read this large is a flood's (reads from a pty come in up to ~4 KiB). */
export const BULK_READ_BYTES = 1024;

/**
 * The one buffer the spawn helper's terminals read into (the event loop is one thread: a read is
 * handled before the next one lands), and the drain's, when a session's budget is larger.
 */
export const readBuffer = Buffer.allocUnsafe(64 * 1024);
let larger = Buffer.alloc(0);
export const drainBuffer = (bytes: number): Buffer =>
  bytes <= readBuffer.length
    ? readBuffer
    : larger.length >= bytes
      ? larger
      : (larger = Buffer.allocUnsafe(bytes));

export class ReadTurns {
  /** Floods that read in this turn, and what they read in it. */
  #readers = 0;
  #read = 0;
  /** Turns ended so far, until which one floods yield to input just written, and the last with a flood. */
  #count = 0;
  #quietUntil = 0;
  #floodedAt = -2;
  #end: NodeJS.Immediate | undefined;
  /** Paused floods, longest-waiting first, each with what resumes it. */
  readonly #waiting = new Set<() => void>();

  /**
   * How much a session may read now, out of its own `budget`: all of it when it is the turn's first
   * flood and none waits, else what the turn has left.
   */
  allowance(budget: number): number {
    return this.#readers === 0 && this.#waiting.size === 0
      ? budget
      : Math.max(0, TURN_READ_BYTES - this.#read);
  }

  /** Counts a flood's `bytes` read in this turn; true when that flood must now wait its turn. */
  took(bytes: number): boolean {
    if (bytes < BULK_READ_BYTES) return false; // not a flood: not counted, never held back
    this.#schedule();
    this.#read += bytes;
    this.#readers += 1;
    this.#floodedAt = this.#count;
    // A lone flood is never held back: only floods competing in one turn take turns.
    return (this.#read >= TURN_READ_BYTES && this.#readers > 1) || this.#count < this.#quietUntil;
  }

  /** `resume` is called when the queue lets this flood read again. */
  wait(resume: () => void): void {
    this.#waiting.add(resume);
  }

  /** No longer waiting (it ended, or was resumed otherwise). */
  leave(resume: () => void): void {
    this.#waiting.delete(resume);
  }

  /** Someone is typing: for the next turns, floods yield so the echo comes back at once. */
  inputWritten(): void {
    // No flood in this turn or the last, none waiting: nothing to quiet (a flood that starts later
    // has the next keystroke to quiet it).
    if (this.#end === undefined && this.#waiting.size === 0 && this.#count > this.#floodedAt + 1) return;
    this.#quietUntil = this.#count + QUIET_TURNS;
    this.#schedule();
  }

  /** Schedules this turn's end (which resets the budget and advances the count). */
  #schedule(): void {
    if (this.#end === undefined) this.#end = setImmediate(this.#endTurn);
  }

  readonly #endTurn = (): void => {
    this.#end = undefined;
    this.#read = 0;
    this.#readers = 0;
    this.#count += 1;
    let resumed = 0;
    for (const resume of this.#waiting) {
      if (resumed++ === RESUMED_PER_TURN) break;
      this.#waiting.delete(resume);
      resume();
    }
    if (this.#waiting.size > 0) this.#end = setImmediate(this.#endTurn);
  };
}

/** The process's one schedule: every session shares its budget. */
export const readTurns = new ReadTurns();
