// Every terminal of the process: a cap (64 by default) with FIFO eviction of the oldest or
// rejection, an idle TTL, and one place that ends them all on shutdown. Every end says why, and an
// ended session stays readable (exit info, scrollback) for a grace period, then is forgotten.
import { EventEmitter } from 'node:events';
import { PtyError } from './errors.js';
import { endEscapees, prepareSpawner } from './internal/spawner.js';
import { prepareWatchdog } from './internal/watchdog.js';
import { checkCgroup, PtySession, type ExitInfo, type PtySpawnOptions } from './pty-session.js';

export type EvictionPolicy = 'evict-oldest' | 'reject';

export interface PtyManagerOptions {
  readonly maxSessions?: number;
  /**
   * Inactivity (no input, no output) after which a session is closed as `expired`; a watched
   * session (`PtySession.watch()`: open in a viewer) is never idle, and its TTL counts from when
   * its last watcher left.
   */
  readonly idleTtlMs?: number;
  readonly eviction?: EvictionPolicy;
  /** How often idle sessions are looked for (default: a tenth of the TTL, at most 30 s). */
  readonly sweepIntervalMs?: number;
  /** Defaults for every spawn. */
  readonly scrollbackBytes?: number;
  readonly killStepMs?: number;
  /** See PtySpawnOptions.nice: e.g. a pool of programs that must not slow this process down. */
  readonly nice?: number;
  /** See PtySpawnOptions.cgroup: e.g. the CPU group of a pool of programs that must not slow this process down. */
  readonly cgroup?: string;
  /**
   * How long an ended session stays in `get`/`require`/`listEnded` with its exit info and
   * scrollback (default 60 s; 0: forgotten at once), so a client that comes back sees the tail.
   */
  readonly endedRetentionMs?: number;
  /** At most this many ended sessions are kept (default: `maxSessions`); the oldest goes first. */
  readonly maxEndedSessions?: number;
}

export interface PtyManagerEvents {
  spawn: [session: PtySession];
  exit: [sessionId: string, info: ExitInfo];
  /** An ended session's grace period is over (or it was pushed out, or `forget`): it is gone. */
  forget: [sessionId: string];
}

export const DEFAULT_MAX_SESSIONS = 64;
export const DEFAULT_IDLE_TTL_MS = 600_000;
export const DEFAULT_ENDED_RETENTION_MS = 60_000;

export class PtyManager extends EventEmitter<PtyManagerEvents> {
  readonly maxSessions: number;
  readonly idleTtlMs: number;
  readonly eviction: EvictionPolicy;
  readonly endedRetentionMs: number;
  readonly maxEndedSessions: number;
  /** Insertion order is spawn order: the first entry is the oldest. */
  readonly #sessions = new Map<string, PtySession>();
  /** Closed or evicted (out of the cap) but not ended yet: still found by id. */
  readonly #closing = new Map<string, PtySession>();
  /** Ended, in order of their end, each with the timer that forgets it. */
  readonly #ended = new Map<string, { session: PtySession; timer: NodeJS.Timeout }>();
  readonly #defaults: Pick<PtySpawnOptions, 'scrollbackBytes' | 'killStepMs' | 'nice' | 'cgroup'>;
  readonly #sweeper: NodeJS.Timeout;
  #shutDown = false;
  /** Starts under way (see start()), oldest first: each holds a slot until evicted. */
  readonly #starting = new Set<{ evicted: boolean }>();

  constructor(options: PtyManagerOptions = {}) {
    super();
    this.maxSessions = options.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.idleTtlMs = options.idleTtlMs ?? DEFAULT_IDLE_TTL_MS;
    this.eviction = options.eviction ?? 'evict-oldest';
    this.endedRetentionMs = options.endedRetentionMs ?? DEFAULT_ENDED_RETENTION_MS;
    this.maxEndedSessions = options.maxEndedSessions ?? this.maxSessions;
    if (!Number.isInteger(this.maxSessions) || this.maxSessions < 1)
      throw new RangeError('maxSessions must be ≥ 1');
    if (!(this.endedRetentionMs >= 0 && this.endedRetentionMs <= 2 ** 31 - 1))
      throw new RangeError('endedRetentionMs must be from 0 to 2147483647');
    if (!Number.isInteger(this.maxEndedSessions) || this.maxEndedSessions < 0)
      throw new RangeError('maxEndedSessions must be ≥ 0');
    if (
      options.nice !== undefined &&
      !(Number.isInteger(options.nice) && options.nice >= 0 && options.nice <= 19)
    )
      throw new RangeError('nice must be an integer from 0 to 19');
    checkCgroup(options.cgroup);
    this.#defaults = {
      scrollbackBytes: options.scrollbackBytes,
      killStepMs: options.killStepMs,
      nice: options.nice,
      cgroup: options.cgroup,
    };
    const interval =
      options.sweepIntervalMs ?? Math.min(30_000, Math.max(10, Math.floor(this.idleTtlMs / 10)));
    this.#sweeper = setInterval(() => this.#expireIdle(), interval);
    this.#sweeper.unref();
    prepareWatchdog();
    prepareSpawner();
  }

  /** Live sessions: the ones the cap counts. */
  get size(): number {
    return this.#sessions.size;
  }

  /**
   * Synchronous, so concurrent spawns can never leave more than `maxSessions` alive. On Linux the
   * event loop waits (a few ms) for the spawn helper's answer: `start` does not.
   */
  spawn(options: PtySpawnOptions): PtySession {
    this.#makeRoom();
    return this.#adopt(PtySession.spawn({ ...this.#defaults, ...options }));
  }

  /**
   * Like `spawn`, but the event loop never waits for the program to start: the session comes once
   * it runs. Its slot is taken at once (a start under way counts against `maxSessions`), so a burst
   * of starts never leaves more than the cap either.
   */
  async start(options: PtySpawnOptions): Promise<PtySession> {
    this.#makeRoom();
    const slot = { evicted: false };
    this.#starting.add(slot);
    let session: PtySession;
    try {
      session = await PtySession.start({ ...this.#defaults, ...options });
    } finally {
      this.#starting.delete(slot);
    }
    if (this.#shutDown) {
      await session.close('shutdown');
      throw new PtyError('session_closed', 'the pty manager has shut down');
    }
    this.#adopt(session);
    // Evicted while it started (later starts overflowed the cap): it ends at once, as the oldest.
    if (slot.evicted) void this.#retire(session, 'evicted');
    return session;
  }

  /** Throws if no slot can be had; else, all being taken, evicts the oldest session or start. */
  #makeRoom(): void {
    if (this.#shutDown) throw new PtyError('session_closed', 'the pty manager has shut down');
    const starting = [...this.#starting].filter((slot) => !slot.evicted);
    if (this.#sessions.size + starting.length < this.maxSessions) return;
    if (this.eviction === 'reject') {
      throw new PtyError('session_limit', `session limit reached: ${this.maxSessions} sessions are open`);
    }
    const oldest = this.#sessions.values().next().value;
    if (oldest !== undefined) void this.#retire(oldest, 'evicted');
    else if (starting[0] !== undefined) starting[0].evicted = true;
  }

  #adopt(session: PtySession): PtySession {
    this.#sessions.set(session.id, session);
    session.onExit((info) => {
      this.#sessions.delete(session.id);
      this.#closing.delete(session.id);
      const kept = this.endedRetentionMs > 0 && this.maxEndedSessions > 0;
      if (kept) this.#keepEnded(session);
      this.emit('exit', session.id, info);
      if (!kept) this.emit('forget', session.id);
      // Past the bound, the oldest ended sessions go (their scrollback is what costs).
      for (const id of this.#ended.keys()) {
        if (this.#ended.size <= this.maxEndedSessions) break;
        this.forget(id);
      }
    });
    this.emit('spawn', session);
    return session;
  }

  /**
   * A live session, one being closed, or one that ended less than `endedRetentionMs` ago: its
   * `exitInfo` is then set, `replay` still works, and `write`/`resize` throw `session_closed`.
   */
  get(id: string): PtySession | undefined {
    return this.#sessions.get(id) ?? this.#closing.get(id) ?? this.#ended.get(id)?.session;
  }

  /** Like `get`, but an unknown (or forgotten) id is a `PtyError('unknown_session')`. */
  require(id: string): PtySession {
    const session = this.get(id);
    if (session === undefined) throw new PtyError('unknown_session', `unknown session ${id}`);
    return session;
  }

  /** Live sessions, oldest first. */
  list(): PtySession[] {
    return [...this.#sessions.values()];
  }

  /** Ended sessions still kept (each with `exitInfo` and its scrollback), in order of their end. */
  listEnded(): PtySession[] {
    return [...this.#ended.values()].map(({ session }) => session);
  }

  /**
   * When the idle TTL would end this running session as `expired` if nothing happens from now
   * (epoch ms; the sweep that ends it comes at most a sweep interval later). Null while the
   * session is watched, without a TTL (infinite), once it is closing or ended, and for an id that
   * is not one of this manager's running sessions.
   */
  idleExpiresAt(id: string): number | null {
    const since = this.#sessions.get(id)?.idleSince;
    return since === undefined || !Number.isFinite(this.idleTtlMs) ? null : since + this.idleTtlMs;
  }

  /** Drops an ended session now (say, once a client has read its tail). False if none such. */
  forget(id: string): boolean {
    const ended = this.#ended.get(id);
    if (ended === undefined) return false;
    clearTimeout(ended.timer);
    this.#ended.delete(id);
    this.emit('forget', id);
    return true;
  }

  #keepEnded(session: PtySession): void {
    const timer = setTimeout(() => this.forget(session.id), this.endedRetentionMs);
    timer.unref();
    this.#ended.set(session.id, { session, timer });
  }

  async close(id: string): Promise<ExitInfo> {
    return this.#retire(this.require(id), 'closed');
  }

  async closeAll(): Promise<void> {
    this.#shutDown = true;
    clearInterval(this.#sweeper);
    await Promise.all([...this.#sessions.values()].map((session) => this.#retire(session, 'shutdown')));
    // What left its terminal's session (setsid) and is held by the spawn helper goes too.
    await endEscapees(this.#defaults.killStepMs ?? 500);
  }

  /** Out of the cap at once (the slot is free now); its process tree ends in the background. */
  #retire(session: PtySession, reason: ExitInfo['reason']): Promise<ExitInfo> {
    if (this.#sessions.delete(session.id) && session.exitInfo === undefined)
      this.#closing.set(session.id, session);
    return session.close(reason);
  }

  #expireIdle(): void {
    const now = Date.now();
    for (const session of this.#sessions.values()) {
      const since = session.idleSince; // undefined while watched
      if (since !== undefined && now - since >= this.idleTtlMs) void this.#retire(session, 'expired');
    }
  }
}

let globalManager: PtyManager | undefined;

/** The process-global manager (created on first use). Tests construct their own. */
export function getPtyManager(): PtyManager {
  globalManager ??= new PtyManager();
  return globalManager;
}
