// Resource limits of one confined command. rlimits are set inside the sandbox, by `prlimit` run as
// the command's first process: memory (RLIMIT_DATA) and CPU time per process, file size, and the
// number of tasks (RLIMIT_NPROC, counted per user namespace since Linux 5.14: the sandbox's own
// tasks only). RLIMIT_NPROC never applies to uid 0, so as root the task count is bounded by a
// pids cgroup of its own per command when one can be made (cgroup v1 `pids`, or v2 with `pids`
// delegated); otherwise it is not bounded, and `describe` says so. As root the other limits are set
// by the wrapper's `ulimit` builtins instead (bubblewrapCommand): no prlimit process.
//
// As root with cgroup v1's `cpu` controller, every confined command of this process also runs in one
// CPU group of its own, weighted as one task of the niceness asked for (`nice`, 10: a tenth of a
// nice-0 task's): with the kernel's autogroups, each command (a session of its own) would weigh as
// much as the process that starts them, so 50 commands at once left that process (its event loop) a
// fiftieth of the CPU; at the weight of one nice-0 task together, still half of it.
import {
  existsSync,
  mkdirSync,
  readFile,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmdirSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

export interface SandboxLimits {
  /** Tasks (processes and threads) at once. Default 1024. */
  readonly processes?: number | undefined;
  /** Writable memory per process, bytes (RLIMIT_DATA: malloc, brk, private mappings). Default 8 GiB. */
  readonly memoryBytes?: number | undefined;
  /** Largest file a process may write, bytes. Default 64 GiB. */
  readonly fileSizeBytes?: number | undefined;
  /** CPU time per process, seconds. Default 24 hours. */
  readonly cpuSeconds?: number | undefined;
  /**
   * Size of the command's private `/tmp`, and of its `/dev/shm`, bytes (each a tmpfs: what is
   * written there is memory until the command ends). A write past it fails with `ENOSPC`. Default 1 GiB.
   */
  readonly tmpBytes?: number | undefined;
}

export interface ResolvedLimits {
  readonly processes: number;
  readonly memoryBytes: number;
  readonly fileSizeBytes: number;
  readonly cpuSeconds: number;
  readonly tmpBytes: number;
}

export const DEFAULT_LIMITS: ResolvedLimits = {
  processes: 1024,
  memoryBytes: 8 * 1024 ** 3,
  fileSizeBytes: 64 * 1024 ** 3,
  cpuSeconds: 24 * 3600,
  tmpBytes: 1024 ** 3,
};

export const resolveLimits = (limits: SandboxLimits | undefined): ResolvedLimits => ({
  processes: limits?.processes ?? DEFAULT_LIMITS.processes,
  memoryBytes: limits?.memoryBytes ?? DEFAULT_LIMITS.memoryBytes,
  fileSizeBytes: limits?.fileSizeBytes ?? DEFAULT_LIMITS.fileSizeBytes,
  cpuSeconds: limits?.cpuSeconds ?? DEFAULT_LIMITS.cpuSeconds,
  tmpBytes: limits?.tmpBytes ?? DEFAULT_LIMITS.tmpBytes,
});

/** Which limit is not a positive integer; undefined when all are. */
export function badLimit(limits: ResolvedLimits): keyof ResolvedLimits | undefined {
  return (Object.keys(limits) as (keyof ResolvedLimits)[]).find(
    (key) => !Number.isSafeInteger(limits[key]) || limits[key] <= 0,
  );
}

/** The `prlimit` arguments that go before the command, inside the sandbox. */
export function prlimitArgs(prlimit: string, limits: ResolvedLimits): string[] {
  return [
    prlimit,
    `--nproc=${limits.processes}`,
    `--data=${limits.memoryBytes}`,
    `--fsize=${limits.fileSizeBytes}`,
    // soft < hard: SIGXCPU at the soft limit (a clear end), SIGKILL only a second later
    `--cpu=${limits.cpuSeconds}:${limits.cpuSeconds + 1}`,
    '--',
  ];
}

/** Where this process may make a pids cgroup per command (as root): the parent dir, and its version. */
export interface PidsCgroup {
  readonly dir: string;
  readonly version: 1 | 2;
}

const CGROUP_ROOT = '/sys/fs/cgroup';

function ownCgroupLines(): string[] | undefined {
  try {
    return readFileSync('/proc/self/cgroup', 'utf8').split('\n');
  } catch {
    return undefined;
  }
}

/** The cgroup v1 line of `controller` (its controllers' names, its path), if the process has one. */
const v1Controller = (lines: string[], controller: string): RegExpExecArray | null | undefined =>
  lines.map((line) => /^\d+:([^:]*):(.*)$/.exec(line)).find((m) => m?.[1]?.split(',').includes(controller));

/** The pids cgroup dir this process is in, if it may make children there with their own `pids.max`. */
export function findPidsCgroup(root: string = CGROUP_ROOT): PidsCgroup | undefined {
  const lines = ownCgroupLines();
  if (lines === undefined) return undefined;
  const v1 = v1Controller(lines, 'pids');
  const candidates: PidsCgroup[] = [];
  if (v1 !== undefined && v1 !== null) candidates.push({ dir: join(root, 'pids', v1[2] ?? ''), version: 1 });
  const v2 = lines.map((line) => /^0::(.*)$/.exec(line)).find((m) => m !== null);
  if (v2 !== undefined && v2 !== null) candidates.push({ dir: join(root, v2[1] ?? ''), version: 2 });
  const found = candidates.find(usable);
  if (found !== undefined) sweepOrphans(found);
  return found;
}

/** Cgroups of commands whose server died before releasing them: removed once their tasks are gone. */
function sweepOrphans(parent: PidsCgroup): void {
  let names: string[];
  try {
    names = readdirSync(parent.dir);
  } catch {
    return;
  }
  for (const name of names) if (orphaned(name)) removeCgroup(join(parent.dir, name));
}

/**
 * Cgroups are named by their process's PID namespace and pid: a process in another PID namespace
 * (a container, a test's own namespace) sharing the hierarchy cannot see that pid, so its cgroups
 * are never taken for a dead process's (removing a live command's cgroup made it fail to start).
 */
const OWNER = `${pidNamespace()}-${process.pid}`;

function pidNamespace(): string {
  try {
    return /\[(\d+)\]/.exec(readlinkSync('/proc/self/ns/pid'))?.[1] ?? '0';
  } catch {
    return '0';
  }
}

/** A cgroup of a dead process of this PID namespace (never another namespace's, nor this process's). */
function orphaned(name: string): boolean {
  const [, namespace, pid] = /^aleph-sandbox-(\d+)-(\d+)-(?:\d+|cpu\d*)$/.exec(name) ?? [];
  if (pid === undefined || `${namespace}-${pid}` === OWNER || namespace !== OWNER.split('-')[0]) return false;
  return !alive(Number(pid));
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

let sequence = 0;

function usable(cgroup: PidsCgroup): boolean {
  const probe = join(cgroup.dir, `aleph-sandbox-probe-${OWNER}-${(sequence += 1)}`);
  try {
    if (cgroup.version === 2) {
      const control = readFileSync(join(cgroup.dir, 'cgroup.subtree_control'), 'utf8');
      if (!control.split(/\s+/).includes('pids')) return false;
    }
    mkdirSync(probe);
  } catch {
    return false;
  }
  try {
    writeFileSync(join(probe, 'pids.max'), '1');
    return true;
  } catch {
    return false;
  } finally {
    removeCgroup(probe);
  }
}

/**
 * The pids cgroup of one command: only its name. The command's wrapper `sh` makes it (unless it is
 * there), sets its `pids.max` and joins it before bwrap starts (see bubblewrapCommand), so that a
 * cgroup's creation (the kernel's cgroup lock, contended while many sandboxes start) never holds up
 * this process. A cgroup whose command was released, and whose tasks are all gone, is taken again by
 * a later command instead of being removed and made anew: making and removing one each take the
 * cgroup lock, which a command joining its cgroup holds through an RCU grace period (measured:
 * release()'s removal blocked the event loop for up to 2.9 s with 50 commands at once). They are
 * removed when this process exits; those of a process that died are removed by the next one.
 */
export function commandCgroup(parent: PidsCgroup): string {
  const free = idle.pop(); // the last one found free
  if (free !== undefined) return free;
  const dir = join(parent.dir, `aleph-sandbox-${OWNER}-${(sequence += 1)}`);
  if (made.size === 0) process.once('exit', removeCommandCgroups);
  made.add(dir);
  return dir;
}

/** Every command cgroup this process named; those free for the next command; those being checked. */
const made = new Set<string>();
const idle: string[] = [];
const checking = new Set<string>();

/** The command cgroups free for the next command (for tests). */
export const freeCommandCgroups = (): readonly string[] => idle;

/**
 * The command of `dir` ended (or never started): the cgroup is free once its tasks are gone. Read on
 * the thread pool (a read of a cgroup file can wait on the kernel's locks for tens of ms under load),
 * again every 100 ms while tasks of a killed command are still exiting, for at most 5 s (then it is
 * not used again, and goes at exit).
 */
export function releaseCommandCgroup(dir: string): void {
  if (!made.has(dir) || checking.has(dir) || idle.includes(dir)) return;
  checking.add(dir);
  const check = (tries: number): void =>
    readFile(join(dir, 'pids.current'), 'utf8', (error, text) => {
      // empty, or gone (its wrapper makes it again)
      if (error !== null || Number(text) === 0) idle.push(dir);
      else if (tries > 0) return void setTimeout(() => check(tries - 1), 100).unref();
      checking.delete(dir);
    });
  check(50);
}

function removeCommandCgroups(): void {
  for (const dir of made) removeCgroup(dir);
}

/** The scheduler's weight of a task of each niceness, 0 to 19 (the kernel's sched_prio_to_weight). */
const NICE_WEIGHTS = [
  1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
];

/** This process's CPU groups for its commands, one per niceness: made at the first call, removed at exit; undefined when none can be. */
const cpuGroups = new Map<number, string | null>();

export function commandsCpuGroup(nice = 0, root: string = CGROUP_ROOT): string | undefined {
  if (!cpuGroups.has(nice)) cpuGroups.set(nice, makeCpuGroup(root, nice) ?? null);
  return cpuGroups.get(nice) ?? undefined;
}

function makeCpuGroup(root: string, nice: number): string | undefined {
  if (process.getuid?.() !== 0) return undefined;
  const lines = ownCgroupLines();
  if (lines === undefined) return undefined;
  const v1 = v1Controller(lines, 'cpu');
  if (v1 === undefined || v1 === null) return undefined;
  // Mounted under its controllers' names (`cpu,cpuacct`), usually with a `cpu` link to it.
  const mount = [v1[1] ?? '', 'cpu'].find((name) => existsSync(join(root, name))) ?? 'cpu';
  const parent = join(root, mount, v1[2] ?? '');
  const dir = join(parent, `aleph-sandbox-${OWNER}-cpu${nice === 0 ? '' : nice}`);
  try {
    for (const name of readdirSync(parent)) if (orphaned(name)) removeCgroup(join(parent, name));
    if (!existsSync(dir)) mkdirSync(dir); // one of a process that had this pid before: taken over
    writeFileSync(join(dir, 'cpu.shares'), String(NICE_WEIGHTS[nice] ?? 1024));
  } catch {
    removeCgroup(dir);
    return undefined;
  }
  process.once('exit', () => removeCgroup(dir));
  return dir;
}

/** Removes a cgroup if it is empty (a probe's, a group left by a process that died, ours at exit). */
export function removeCgroup(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    // still has tasks, or gone: one left behind is removed by the next process (sweepOrphans)
  }
}
