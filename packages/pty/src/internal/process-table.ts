// Reading processes from /proc (Linux): one process's stat line, every process, or only those below
// a spawn helper (its children lists), so that ending a session costs what the package started,
// not what the machine runs. Elsewhere there is no table: see signal-guard.ts.
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

/**
 * The children of `pid` (of each of its threads), from /proc/PID/task/TID/children; of its main
 * thread only with `oneThread` (a spawn helper has no other: one read, no listing of its threads).
 */
function childrenOf(pid: number, oneThread = false): number[] | undefined {
  try {
    if (oneThread) return numbers(readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8'));
    return readdirSync(`/proc/${pid}/task`).flatMap((thread) =>
      readFileSync(`/proc/${pid}/task/${thread}/children`, 'utf8').split(' ').filter(Boolean).map(Number),
    );
  } catch {
    return undefined; // gone, or a kernel without children lists
  }
}

const numbers = (text: string): number[] => text.split(' ').filter(Boolean).map(Number);

/**
 * `root` and every process below it, found by walking down the children lists: the cost grows with
 * what it started, not with the machine. Undefined if `root` is gone or a zombie (what it held went
 * elsewhere), or the kernel keeps no children lists: scan everything then.
 */
export function processesBelow(root: number): ProcessEntry[] | undefined {
  const top = readProcess(root);
  if (top === undefined || top.zombie) return undefined;
  const found = new Map<number, ProcessEntry>([[root, top]]);
  const queue = childrenOf(root);
  if (queue === undefined) return undefined;
  for (let pid = queue.pop(); pid !== undefined; pid = queue.pop()) {
    const entry = found.has(pid) ? undefined : readProcess(pid);
    if (entry === undefined) continue; // seen, or gone meanwhile
    found.set(pid, entry);
    queue.push(...(childrenOf(pid) ?? []));
  }
  return [...found.values()];
}

/**
 * The processes of the terminal session led by `leader`, which spawn helper `root` started and is
 * the subreaper of: what is below the leader (while it runs), and what `root` adopted from that
 * session, with what is below those. Other terminals (`others`: their leaders, running) are not
 * entered, so the cost grows with this session and the helper's orphans, not with every terminal.
 * Undefined where processesBelow is (scan everything then).
 */
export function sessionBelow(
  root: number,
  leader: number,
  others: { has(pid: number): boolean },
  known?: Map<number, number>,
): ProcessEntry[] | undefined {
  const children = childrenOf(root, true);
  if (children === undefined) return undefined;
  if (known !== undefined) {
    // A pid no longer below `root` was reaped: what was read of it is of another process now.
    const below = new Set(children);
    for (const pid of known.keys()) if (!below.has(pid)) known.delete(pid);
  }
  // Another terminal's leader is a session of its own: not entered. Nor is a child read before in
  // another session (`known`): a process can only leave its session for one it leads (setsid), so
  // it never joins this one.
  const candidates = children.filter(
    (child) => child === leader || (!others.has(child) && (known?.get(child) ?? leader) === leader),
  );
  // Children, none of them this session's: nothing of it below `root`, which is alive (a zombie has
  // no children). Read nothing more: this is every session's end while other terminals run.
  if (children.length > 0 && candidates.length === 0) return [];
  const top = readProcess(root);
  if (top === undefined || top.zombie) return undefined;
  const found = new Map<number, ProcessEntry>([[root, top]]);
  for (const child of candidates) {
    const entry = readProcess(child);
    if (entry !== undefined && child !== leader) known?.set(child, entry.session);
    if (entry === undefined || (child !== leader && entry.session !== leader)) continue;
    for (const below of processesBelow(child) ?? []) found.set(below.pid, below);
  }
  return [...found.values()];
}

let group: number | undefined;

/**
 * This process's group, which nothing here may signal (Linux; elsewhere unknown: undefined). Read
 * once: Node has no call that moves its own process to another group.
 */
export function ownGroup(): number | undefined {
  group ??= readProcess(process.pid)?.group;
  return group;
}
