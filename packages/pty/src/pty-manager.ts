// Every terminal of the process: a cap (64 by default) with FIFO eviction of the oldest or
// rejection, an idle TTL, and one place that ends them all on shutdown. Every end says why.
import { EventEmitter } from 'node:events';
import { PtyError } from './errors.js';
import { prepareSpawner } from './internal/spawner.js';
import { prepareWatchdog } from './internal/watchdog.js';
import { PtySession, type ExitInfo, type PtySpawnOptions } from './pty-session.js';

export type EvictionPolicy = 'evict-oldest' | 'reject';

export interface PtyManagerOptions {
  readonly maxSessions?: number;
  /** Inactivity (no input, no output) after which a session is closed as `expired`. */
  readonly idleTtlMs?: number;
  readonly eviction?: EvictionPolicy;
  /** How often idle sessions are looked for (default: a tenth of the TTL, at most 30 s). */
  readonly sweepIntervalMs?: number;
  /** Defaults for every spawn. */
  readonly scrollbackBytes?: number;
  readonly killStepMs?: number;
}

export interface PtyManagerEvents {
  spawn: [session: PtySession];
  exit: [sessionId: string, info: ExitInfo];
}

export const DEFAULT_MAX_SESSIONS = 64;
export const DEFAULT_IDLE_TTL_MS = 600_000;

export class PtyManager extends EventEmitter<PtyManagerEvents> {
  readonly maxSessions: number;
  readonly idleTtlMs: number;
  readonly eviction: EvictionPolicy;
  /** Insertion order is spawn order: the first entry is the oldest. */
  readonly #sessions = new Map<string, PtySession>();
  readonly #defaults: Pick<PtySpawnOptions, 'scrollbackBytes' | 'killStepMs'>;
  readonly #sweeper: NodeJS.Timeout;
  #shutDown = false;

  constructor(options: PtyManagerOptions = {}) {
    super();
    this.maxSessions = options.maxSessions ?? DEFAULT_MAX_SESSIONS;
    this.idleTtlMs = options.idleTtlMs ?? DEFAULT_IDLE_TTL_MS;
    this.eviction = options.eviction ?? 'evict-oldest';
    if (!Number.isInteger(this.maxSessions) || this.maxSessions < 1)
      throw new RangeError('maxSessions must be ≥ 1');
    this.#defaults = { scrollbackBytes: options.scrollbackBytes, killStepMs: options.killStepMs };
    const interval =
      options.sweepIntervalMs ?? Math.min(30_000, Math.max(10, Math.floor(this.idleTtlMs / 10)));
    this.#sweeper = setInterval(() => this.#expireIdle(), interval);
    this.#sweeper.unref();
    prepareWatchdog();
    prepareSpawner();
  }

  get size(): number {
    return this.#sessions.size;
  }

  /** Synchronous, so concurrent spawns can never leave more than `maxSessions` alive. */
  spawn(options: PtySpawnOptions): PtySession {
    if (this.#shutDown) throw new PtyError('session_closed', 'the pty manager has shut down');
    if (this.#sessions.size >= this.maxSessions) {
      if (this.eviction === 'reject') {
        throw new PtyError('session_limit', `session limit reached: ${this.maxSessions} sessions are open`);
      }
      const oldest = this.#sessions.values().next().value;
      if (oldest !== undefined) void this.#retire(oldest, 'evicted');
    }
    const session = PtySession.spawn({ ...this.#defaults, ...options });
    this.#sessions.set(session.id, session);
    session.onExit((info) => {
      this.#sessions.delete(session.id);
      this.emit('exit', session.id, info);
    });
    this.emit('spawn', session);
    return session;
  }

  get(id: string): PtySession | undefined {
    return this.#sessions.get(id);
  }

  /** Like `get`, but an unknown id is a `PtyError('unknown_session')`. */
  require(id: string): PtySession {
    const session = this.#sessions.get(id);
    if (session === undefined) throw new PtyError('unknown_session', `unknown session ${id}`);
    return session;
  }

  list(): PtySession[] {
    return [...this.#sessions.values()];
  }

  async close(id: string): Promise<ExitInfo> {
    return this.#retire(this.require(id), 'closed');
  }

  async closeAll(): Promise<void> {
    this.#shutDown = true;
    clearInterval(this.#sweeper);
    await Promise.all([...this.#sessions.values()].map((session) => this.#retire(session, 'shutdown')));
  }

  /** Removed from the table at once (the slot is free now); its process tree ends in the background. */
  #retire(session: PtySession, reason: ExitInfo['reason']): Promise<ExitInfo> {
    this.#sessions.delete(session.id);
    return session.close(reason);
  }

  #expireIdle(): void {
    const now = Date.now();
    for (const session of this.#sessions.values()) {
      if (now - session.lastActivityAt >= this.idleTtlMs) void this.#retire(session, 'expired');
    }
  }
}

let globalManager: PtyManager | undefined;

/** The process-global manager (created on first use). Tests construct their own. */
export function getPtyManager(): PtyManager {
  globalManager ??= new PtyManager();
  return globalManager;
}
