// The terminals of the server: the user's (the gateway's pty.spawn: a cap with eviction and an idle
// TTL) and, beside them, a pool for the agents' `shell` commands with a cap of its own, no eviction
// and no idle expiry — an agent never evicts a user's terminal or another agent's running command,
// and a quiet build a tool call is waiting on is never swept. One manager answers for both, so the
// gateway lists, replays and closes an agent's command like any terminal (to watch it live). An
// agent's commands run at a lower CPU priority than the server (`nice`, default AGENT_NICE) and,
// where the sandbox weighs them in a CPU group, join it as soon as they are forked (`cgroup`): on a
// machine they keep busy, the event loop still gets the CPU it needs, and users' terminals do not
// lose theirs (they run at the server's).
import { EventEmitter, once } from 'node:events';
import {
  PtyError,
  PtyManager,
  type ExitInfo,
  type PtyManagerOptions,
  type PtySession,
  type PtySpawnOptions,
} from '@aleph/pty';

/** Added to the niceness of the agents' commands unless told otherwise (`[pty] agent_nice`). */
export const AGENT_NICE = 5;

export class ServerPtys extends PtyManager {
  /** The agents' pool: spawn through `spawnWhenFree`, which waits for a free slot. */
  readonly agents: PtyManager;

  constructor(
    user: PtyManagerOptions,
    agent: { maxSessions: number; killStepMs?: number; nice?: number; cgroup?: string },
  ) {
    super(user);
    this.agents = new PtyManager({
      maxSessions: agent.maxSessions,
      eviction: 'reject',
      idleTtlMs: Number.POSITIVE_INFINITY, // the tool call's own timeout bounds a command
      nice: agent.nice ?? AGENT_NICE,
      ...(agent.cgroup === undefined ? {} : { cgroup: agent.cgroup }),
      ...(agent.killStepMs === undefined ? {} : { killStepMs: agent.killStepMs }),
    });
    this.agents.setMaxListeners(0); // each run waiting for a free slot listens for an exit
    this.agents.on('spawn', (session) => this.emit('spawn', session));
    this.agents.on('exit', (sessionId, info) => this.emit('exit', sessionId, info));
    this.agents.on('forget', (sessionId) => this.emit('forget', sessionId));
  }

  override get(id: string): PtySession | undefined {
    return super.get(id) ?? this.agents.get(id);
  }

  override require(id: string): PtySession {
    const session = this.get(id);
    if (session === undefined) throw new PtyError('unknown_session', `unknown session ${id}`);
    return session;
  }

  override list(): PtySession[] {
    return [...super.list(), ...this.agents.list()];
  }

  override listEnded(): PtySession[] {
    return [...super.listEnded(), ...this.agents.listEnded()];
  }

  override forget(id: string): boolean {
    return super.forget(id) || this.agents.forget(id);
  }

  override close(id: string): Promise<ExitInfo> {
    return this.agents.get(id) === undefined ? super.close(id) : this.agents.close(id);
  }

  override async closeAll(): Promise<void> {
    await Promise.all([super.closeAll(), this.agents.closeAll()]);
  }
}

/** What pty.list shows for a session, when not its program and arguments (a sandbox's wrapper). */
const shown = new WeakMap<PtySession, string>();

/** The command pty.list shows for `session`, if it was started with one (`spawnWhenFree`'s `shownAs`). */
export const shownCommand = (session: PtySession): string | undefined => shown.get(session);

/** One run's share of the agents' pool: at most `max` of its terminals (sub-agents' too) at once. */
export class TerminalShare extends EventEmitter {
  held = 0;
  constructor(readonly max: number) {
    super();
  }
}

/**
 * Spawns in `manager`, waiting (until `signal` aborts, or `timeoutMs` from now: a TimeoutError)
 * while all its slots are busy, or `share` holds its most. `shownAs`: the command pty.list shows
 * for it (see shownCommand).
 */
export async function spawnWhenFree(
  manager: PtyManager,
  options: PtySpawnOptions,
  signal: AbortSignal,
  shownAs?: string,
  timeoutMs?: number,
  share?: TerminalShare,
): Promise<PtySession> {
  const deadline = Date.now() + (timeoutMs ?? 0);
  let waiting: AbortSignal | undefined; // made once a wait begins (a timer and a signal cost the GC)
  const wait = (): AbortSignal => {
    const left = Math.max(0, deadline - Date.now());
    return (waiting ??=
      timeoutMs === undefined ? signal : AbortSignal.any([signal, AbortSignal.timeout(left)]));
  };
  for (;;) {
    (waiting ?? signal).throwIfAborted();
    if (share !== undefined && share.held >= share.max) {
      await once(share, 'free', { signal: wait() });
      continue;
    }
    try {
      const session = await manager.start(options); // the event loop never waits for the program
      if (shownAs !== undefined) shown.set(session, shownAs);
      if (share !== undefined) {
        share.held += 1;
        session.onExit(() => {
          share.held -= 1;
          share.emit('free');
        });
      }
      return session;
    } catch (error) {
      if (!(error instanceof PtyError) || error.code !== 'session_limit') throw error;
    }
    await once(manager, 'exit', { signal: wait() });
  }
}
