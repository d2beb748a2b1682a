// Ending a terminal's whole process tree. The program is a session leader (pid == sid); an
// interactive shell puts each job in its own process group, so killing one group is not enough:
// on Linux we signal every process of the session, elsewhere the leader's process group. Every
// signal goes through signal-guard.ts, which sends it only to processes proven ours.
import {
  processesBelow,
  readProcess,
  scanProcesses,
  sessionBelow,
  type ProcessEntry,
} from './process-table.js';
import { ownedProcesses, signalOwned } from './signal-guard.js';

/** Running — not merely a zombie waiting to be reaped (Linux `/proc`; elsewhere signal 0). */
export function processAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (process.platform !== 'linux') {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
  const entry = readProcess(pid);
  return entry !== undefined && !entry.zombie;
}

/** Live processes of the session led by `leader` that are proven ours, in `table`. */
function ownedMembers(leader: number, table: readonly ProcessEntry[]): ProcessEntry[] {
  return [...ownedProcesses(table).values()].filter((entry) => entry.session === leader && !entry.zombie);
}

/**
 * Where a session's processes are: below its spawn helper (`scope`), which is their subreaper, while
 * the helper runs — a walk of what the package started; else (node-pty) every process.
 */
export function tableFor(scope: number | undefined): ProcessEntry[] {
  return (scope === undefined ? undefined : processesBelow(scope)) ?? scanProcesses();
}

/** The spawn helper that started a session, its processes' subreaper, and the terminals it runs now. */
export interface Scope {
  readonly helper: number;
  /** The leaders of the helper's running terminals (each its own session). */
  readonly leaders: { has(pid: number): boolean };
  /**
   * The session of each other child of the helper, as last read (orphans it holds, such as a
   * sandbox's init still tearing down after its terminal ended): not read again at every end.
   */
  readonly sessions?: Map<number, number>;
}

/**
 * Where the session led by `leader` is: below its helper, that session alone (see sessionBelow),
 * while the helper runs; else (node-pty, or the helper gone) every process.
 */
function sessionTable(leader: number, scope: Scope | undefined): ProcessEntry[] {
  return (
    (scope === undefined ? undefined : sessionBelow(scope.helper, leader, scope.leaders, scope.sessions)) ??
    scanProcesses()
  );
}

export function signalTree(leader: number, signal: NodeJS.Signals, scope?: Scope): void {
  const table = sessionTable(leader, scope);
  signalOwned([-leader, ...ownedMembers(leader, table).map(({ pid }) => pid)], signal, table);
}

export function treeAlive(leader: number, scope?: Scope): boolean {
  if (process.platform === 'linux') return ownedMembers(leader, sessionTable(leader, scope)).length > 0;
  try {
    process.kill(-leader, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Live processes below `root` (by parent links) that are neither in nor below one of `sessions`
 * (running terminals, each led by the pid that is its session id): escapees `root` holds as their
 * subreaper. Each as its pid and, unless it is `root`'s own, its process group (negative). A root
 * that is not a real process (0, 1, below) holds nothing.
 */
export function escapeesOf(
  root: number,
  sessions: ReadonlySet<number>,
  table: readonly ProcessEntry[],
): number[][] {
  if (!Number.isInteger(root) || root <= 1) return [];
  const byPid = new Map(table.map((entry) => [entry.pid, entry]));
  const rootEntry = byPid.get(root);
  if (rootEntry === undefined) return [];
  const held = new Map<number, boolean>();
  const isHeld = (entry: ProcessEntry | undefined): boolean => {
    if (entry === undefined || sessions.has(entry.pid) || sessions.has(entry.session)) return false;
    if (!held.has(entry.pid)) {
      held.set(entry.pid, false); // first: a pid reused mid-scan must not make a loop
      held.set(entry.pid, entry.parent === root || isHeld(byPid.get(entry.parent)));
    }
    return held.get(entry.pid) === true;
  };
  return table
    .filter((entry) => entry.pid !== root && !entry.zombie && isHeld(entry))
    .map(({ pid, group }) => (group > 1 && group !== rootEntry.group ? [pid, -group] : [pid]));
}
