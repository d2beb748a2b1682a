// The one place this package sends a signal from. Every kill path (a session's close or end,
// eviction, expiry, closeAll, the escapee sweep, a late or hung spawn helper) asks here, and only a
// process proven to be ours is signalled: one this package started (recorded with its start time,
// so a pid reused by another program is never taken for ours) or one below it. Never pid 0 or 1
// (or a negative of them: every process, or our own group), never this process or its group.
// The C helpers apply the same rules to their own kill paths (spawner.c, watchdog.c).
import { ownGroup, readProcess, scanProcesses, type ProcessEntry } from './process-table.js';

/** pid → start time, of processes proven ours. */
export type Identities = ReadonlyMap<number, number>;

export interface Protected {
  /** This process: never signalled, nor its process group. */
  readonly self: number;
  readonly selfGroup: number | undefined;
}

/** Longest parent chain followed (a table read mid-change might hold a loop). */
const MAX_DEPTH = 4096;

/**
 * Which processes of `table` are proven ours: each whose chain of parents reaches a known identity
 * (pid and start time both match) with every parent older than its child (a parent always is, so a
 * pid reused between two reads of the table breaks the chain instead of extending it); or, for a
 * terminal's session (a leader in `leaders`), each member started after its leader while the
 * leader's pid is not held by another process (a job whose shell exited: its parent is init then).
 * Pure, for the property tests: the table is a snapshot and nothing is read here.
 */
export function provenOwned(
  table: readonly ProcessEntry[],
  known: Identities,
  leaders: ReadonlySet<number>,
  guard: Protected,
): Map<number, ProcessEntry> {
  const byPid = new Map(table.map((entry) => [entry.pid, entry]));
  const verdicts = new Map<number, boolean>();
  const bySession = (entry: ProcessEntry): boolean => {
    const started = known.get(entry.session);
    if (started === undefined || !leaders.has(entry.session) || entry.startTime < started) return false;
    const leader = byPid.get(entry.session);
    return leader === undefined || leader.startTime === started;
  };
  const owned = (entry: ProcessEntry): boolean => {
    const chain: number[] = [];
    let verdict = false;
    for (let at: ProcessEntry | undefined = entry; at !== undefined && chain.length < MAX_DEPTH;) {
      const settled = verdicts.get(at.pid);
      if (settled !== undefined) {
        verdict = settled;
        break;
      }
      chain.push(at.pid);
      if (known.get(at.pid) === at.startTime || bySession(at)) {
        verdict = true;
        break;
      }
      const parent = byPid.get(at.parent);
      at =
        parent !== undefined && parent.startTime <= at.startTime && !chain.includes(parent.pid)
          ? parent
          : undefined;
    }
    for (const pid of chain) verdicts.set(pid, verdict);
    return verdict;
  };
  const proven = new Map<number, ProcessEntry>();
  for (const entry of table) {
    if (entry.pid <= 1 || entry.pid === guard.self || entry.group === guard.selfGroup) continue;
    if (owned(entry)) proven.set(entry.pid, entry);
  }
  return proven;
}

/**
 * Of `targets` (a pid, or a negative number: that process group), those that may be signalled:
 * a live process proven ours; a group above 1, not ours, whose every live member is proven ours.
 */
export function allowedTargets(
  targets: Iterable<number>,
  table: readonly ProcessEntry[],
  proven: ReadonlyMap<number, ProcessEntry>,
  guard: Protected,
): number[] {
  const allowed = new Set<number>();
  for (const target of targets) {
    if (!Number.isInteger(target)) continue;
    if (target > 0) {
      if (proven.get(target)?.zombie === false) allowed.add(target);
      continue;
    }
    const group = -target;
    if (group <= 1 || group === guard.self || group === guard.selfGroup) continue;
    const members = table.filter((entry) => entry.group === group && !entry.zombie);
    if (members.length > 0 && members.every((entry) => proven.has(entry.pid))) allowed.add(target);
  }
  return [...allowed];
}

/** Processes this package started and what it proved to be below them: pid → start time. */
const known = new Map<number, number>();
/** Of those, the leaders of terminals' sessions (a member of one is ours: see provenOwned). */
const leaders = new Set<number>();
/** Learned identities kept at most (a bound on memory; roots are never dropped by it). */
const MAX_LEARNED = 1 << 16;
let learned = 0;

/**
 * Records a process this package just started (its pid and start time), so that it and what it
 * starts may be signalled later. A missing pid (the process never started) records nothing: false.
 * `startTime`: read already, by whoever started it before it could be reaped (else read here).
 */
export function recordSpawned(
  pid: number | undefined,
  options: { leader?: boolean; startTime?: number | undefined } = {},
): boolean {
  if (pid === undefined || !Number.isInteger(pid) || pid <= 1 || pid === process.pid) return false;
  if (process.platform === 'linux') {
    const startTime = options.startTime ?? readProcess(pid)?.startTime;
    if (startTime === undefined) return false; // gone already (or never ours to see)
    known.set(pid, startTime);
  } else known.set(pid, 0); // no start times to compare: see signalOwned
  if (options.leader === true) leaders.add(pid);
  return true;
}

/** The process and what it left have ended: its pid may be reused by anyone now. */
export function forgetSpawned(pid: number): void {
  known.delete(pid);
  leaders.delete(pid);
}

export function isRecorded(pid: number): boolean {
  return known.has(pid);
}

function guard(): Protected {
  return { self: process.pid, selfGroup: ownGroup() };
}

/**
 * Of `table` (default: every process), the processes proven ours; what is proven is remembered
 * (pid and start time), so a job still proven after its terminal's leader is gone stays proven.
 */
export function ownedProcesses(table: readonly ProcessEntry[] = scanProcesses()): Map<number, ProcessEntry> {
  const proven = provenOwned(table, known, leaders, guard());
  for (const [pid, entry] of proven) {
    if (known.get(pid) === entry.startTime) continue;
    if (learned >= MAX_LEARNED) {
      for (const [oldPid] of known) if (!leaders.has(oldPid)) known.delete(oldPid);
      learned = 0;
    }
    known.set(pid, entry.startTime);
    learned += 1;
  }
  return proven;
}

/**
 * Sends `signal` to those of `targets` (pids; a negative one: that process group) that are proven
 * ours in `table` (default: every process); the rest is refused silently. Returns what was sent to.
 * Elsewhere than Linux there is no process table: only recorded processes (and their groups) are
 * signalled, without a start time to tell a reused pid from ours.
 */
export function signalOwned(
  targets: Iterable<number>,
  signal: NodeJS.Signals | 0,
  table?: readonly ProcessEntry[],
): number[] {
  let allowed: number[];
  if (process.platform === 'linux') {
    const snapshot = table ?? scanProcesses();
    allowed = allowedTargets(targets, snapshot, ownedProcesses(snapshot), guard());
  } else {
    allowed = [...targets].filter(
      (target) => Math.abs(target) > 1 && Math.abs(target) !== process.pid && known.has(Math.abs(target)),
    );
  }
  const sent: number[] = [];
  for (const target of allowed) {
    try {
      process.kill(target, signal);
      sent.push(target);
    } catch {
      // ESRCH: gone meanwhile; EPERM: not ours to signal.
    }
  }
  return sent;
}
