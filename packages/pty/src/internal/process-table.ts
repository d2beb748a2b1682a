// Reading processes from /proc (Linux): one process's stat line, or every process. Elsewhere there
// is no table: see signal-guard.ts.
import { readdirSync, readFileSync } from 'node:fs';

export interface ProcessEntry {
  readonly pid: number;
  readonly parent: number;
  readonly group: number;
  readonly session: number;
  /** Clock ticks after boot (field 22 of /proc/PID/stat): with the pid, who this process is. */
  readonly startTime: number;
  /** Z or X: ended, not reaped yet (it can no longer act, but its pid is not free). */
  readonly zombie: boolean;
}

/** Parses one /proc/PID/stat line; the command name may hold spaces and ')'. */
export function parseStat(pid: number, stat: string): ProcessEntry | undefined {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const [state, parent, group, session] = [
    fields[0],
    Number(fields[1]),
    Number(fields[2]),
    Number(fields[3]),
  ];
  const startTime = Number(fields[19]);
  if (state === undefined || !Number.isInteger(startTime) || !Number.isInteger(parent)) return undefined;
  return { pid, parent, group, session, startTime, zombie: state === 'Z' || state === 'X' };
}

export function readProcess(pid: number): ProcessEntry | undefined {
  if (process.platform !== 'linux' || !Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    return parseStat(pid, readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined; // gone
  }
}

/** Every process, zombies included (Linux; elsewhere none). */
export function scanProcesses(): ProcessEntry[] {
  if (process.platform !== 'linux') return [];
  let names: string[];
  try {
    names = readdirSync('/proc');
  } catch {
    return [];
  }
  const table: ProcessEntry[] = [];
  for (const name of names) {
    const first = name.charCodeAt(0);
    if (first < 48 || first > 57) continue;
    const entry = readProcess(Number(name));
    if (entry !== undefined) table.push(entry);
  }
  return table;
}

/** This process's group, which nothing here may signal (Linux; elsewhere unknown: undefined). */
export function ownGroup(): number | undefined {
  return readProcess(process.pid)?.group;
}
