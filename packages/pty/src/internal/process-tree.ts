// Ending a terminal's whole process tree. node-pty makes the child a session leader (pid == sid);
// an interactive shell puts each job in its own process group, so killing one group is not enough:
// on Linux we signal every process of the session, elsewhere the leader's process group.
import { readdirSync, readFileSync } from 'node:fs';

/** Running — not merely a zombie waiting to be reaped (Linux `/proc`; elsewhere signal 0). */
export function processAlive(pid: number): boolean {
  if (process.platform !== 'linux') {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  }
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

interface ProcessEntry {
  readonly pid: number;
  readonly parent: number;
  readonly group: number;
  readonly session: number;
}

/** Every live (non-zombie) process, from /proc (Linux; elsewhere none). */
function processTable(): ProcessEntry[] {
  if (process.platform !== 'linux') return [];
  const table: ProcessEntry[] = [];
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  for (const entry of entries) {
    const first = entry.charCodeAt(0);
    if (first < 48 || first > 57) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone meanwhile
    }
    // Fields after the command name: state ppid pgrp session ...
    const [state, ...fields] = stat.slice(stat.lastIndexOf(')') + 2).split(' ', 4);
    if (state === 'Z' || state === 'X') continue;
    const [parent = 0, group = 0, session = 0] = fields.map(Number);
    table.push({ pid: Number(entry), parent, group, session });
  }
  return table;
}

/** Pids of live (non-zombie) processes whose session id is `sid`. */
export function sessionMembers(sid: number): number[] {
  return processTable()
    .filter(({ session }) => session === sid)
    .map(({ pid }) => pid);
}

/**
 * Live processes below `root` (by parent links) that are neither in nor below one of `sessions`
 * (running terminals, each led by the pid that is its session id): escapees `root` holds as their
 * subreaper. Each as its pid and, unless it is `root`'s own, its process group (negative).
 */
export function escapeesOf(root: number, sessions: ReadonlySet<number>): number[][] {
  const table = processTable();
  const byPid = new Map(table.map((entry) => [entry.pid, entry]));
  const rootGroup = byPid.get(root)?.group;
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
    .filter((entry) => entry.pid !== root && isHeld(entry))
    .map(({ pid, group }) => (group > 1 && group !== rootGroup ? [pid, -group] : [pid]));
}

export function signalTree(leader: number, signal: NodeJS.Signals): void {
  signalEach(new Set([-leader, ...sessionMembers(leader)]), signal);
}

/** Sends `signal` to each pid (a negative one: that process group). */
export function signalEach(targets: Iterable<number>, signal: NodeJS.Signals): void {
  for (const target of targets) {
    try {
      process.kill(target, signal);
    } catch {
      // ESRCH: already gone; EPERM: not ours to signal.
    }
  }
}

export function treeAlive(leader: number): boolean {
  if (process.platform === 'linux') return sessionMembers(leader).length > 0;
  try {
    process.kill(-leader, 0);
    return true;
  } catch {
    return false;
  }
}
