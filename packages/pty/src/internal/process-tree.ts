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

/** Pids of live (non-zombie) processes whose session id is `sid`. */
export function sessionMembers(sid: number): number[] {
  if (process.platform !== 'linux') return [];
  const members: number[] = [];
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
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z' || fields[0] === 'X') continue;
    if (Number(fields[3]) === sid) members.push(Number(entry));
  }
  return members;
}

export function signalTree(leader: number, signal: NodeJS.Signals): void {
  const targets = new Set([-leader, ...sessionMembers(leader)]);
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
