// Runs one hook command in its own process group with a deadline and an abort signal. The rule it
// keeps: the verdict is returned only after the whole group is gone — on timeout or cancel the
// group gets TERM, then KILL after a grace, and we wait for it to be empty (a TERM-ignoring
// grandchild too, and even when the `sh -c` wrapper exited first). Output is kept whole up to a
// memory bound, so a caller can parse it before capping what it shows.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/**
 * What is fed to the model (a block or deny reason, stderr, feedback) is cut to this many bytes —
 * head and tail — so it fits one turn: a bigger one would be dropped whole by the context budget.
 */
export const OUTPUT_CAP_BYTES = 24 * 1024;
/** What is read per stream at all: beyond it output is drained and dropped. */
export const OUTPUT_READ_LIMIT_BYTES = 16 * 1024 * 1024;
export const KILL_GRACE_MS = 500;
/** After the hook exits, how long to wait for its pipes to drain before closing them. */
const DRAIN_AFTER_EXIT_MS = 100;
/** KILL cannot be ignored; this only bounds a wait on a kernel that is slow to reap. */
const KILL_WAIT_MS = 5_000;
/** The longest delay setTimeout honours (2^31-1 ms). */
const MAX_TIMER_MS = 2_147_483_647;
const POLL_MS = 20;

export type ProcessOutcome =
  | { kind: 'exited'; code: number; stdout: string; stderr: string }
  | { kind: 'signaled'; signal: string; stdout: string; stderr: string }
  | { kind: 'timed_out' }
  | { kind: 'aborted' }
  | { kind: 'spawn_failed'; message: string };

/** The command about to run, the shape a sandbox's `wrap` takes (`Sandbox.wrap` of @aleph/sandbox). */
export interface CommandToRun {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Files the command must be able to read inside a sandbox (the hook's transcripts). */
  readonly readable?: readonly string[];
}

/** What a sandbox's `wrap` returns. */
export interface WrappedCommandToRun {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Record<string, string>;
  /** Called once the whole group is gone (the sandbox removes what it made for the command). */
  release?(): void;
}

export type CommandWrapper = (command: CommandToRun) => WrappedCommandToRun;

export interface RunProcessOptions {
  readonly command: CommandToRun;
  readonly stdin: string;
  readonly timeoutMs: number;
  readonly signal: AbortSignal;
  readonly wrap?: CommandWrapper | undefined;
}

class BoundedBuffer {
  readonly #chunks: Buffer[] = [];
  #size = 0;
  push(chunk: Buffer): void {
    const room = OUTPUT_READ_LIMIT_BYTES - this.#size;
    if (room <= 0) return; // keep draining so the child never blocks, but discard
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.#chunks.push(kept);
    this.#size += kept.length;
  }
  text(): string {
    return Buffer.concat(this.#chunks).toString('utf8');
  }
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

/**
 * True while a live (not zombie) process is in group `pgid`. On Linux /proc is read, because a
 * zombie nobody reaps (PID 1 in some containers does not) still answers `kill(-pgid, 0)`.
 */
export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
  } catch {
    return false; // ESRCH: no member at all, not even a zombie (the common case, and cheap)
  }
  if (process.platform !== 'linux') return true;
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // exited while we looked
    }
    // "pid (comm) state ppid pgrp …": comm may hold spaces and parentheses, so split after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (Number(fields[2]) === pgid && fields[0] !== 'Z' && fields[0] !== 'X') return true;
  }
  return false;
}

async function waitGone(pgid: number, withinMs: number): Promise<boolean> {
  const deadline = Date.now() + withinMs;
  while (groupAlive(pgid)) {
    if (Date.now() >= deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
  return true;
}

/** TERM, a grace, then KILL; resolves once no process of the group is left. */
export async function endGroup(pgid: number): Promise<void> {
  if (!groupAlive(pgid)) return;
  killGroup(pgid, 'SIGTERM');
  if (await waitGone(pgid, KILL_GRACE_MS)) return;
  killGroup(pgid, 'SIGKILL');
  await waitGone(pgid, KILL_WAIT_MS);
}

export function runProcess(options: RunProcessOptions): Promise<ProcessOutcome> {
  if (options.signal.aborted) return Promise.resolve({ kind: 'aborted' });
  const command: CommandToRun | WrappedCommandToRun = options.wrap
    ? options.wrap(options.command)
    : options.command;
  const release = (): void => ('release' in command ? command.release?.() : undefined);
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(command.env)) if (value !== undefined) env[key] = value;
  return new Promise((resolve) => {
    let ending = false;
    const stdout = new BoundedBuffer();
    const stderr = new BoundedBuffer();
    const child = spawn(command.file, [...command.args], {
      cwd: command.cwd,
      env,
      detached: true, // its own process group, so the whole tree can be killed at once
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const pid = child.pid;
    const timers: NodeJS.Timeout[] = [];

    const closePipes = (): void => {
      child.stdin.destroy();
      child.stdout.destroy();
      child.stderr.destroy();
    };
    /** Settles once: the pipes closed, the group ended (awaited), then the verdict. */
    const finish = (outcome: () => ProcessOutcome): void => {
      if (ending) return;
      ending = true;
      for (const timer of timers) clearTimeout(timer);
      options.signal.removeEventListener('abort', onAbort);
      const result = outcome(); // read the buffers before the pipes go
      closePipes();
      // Leave nothing behind: whatever the hook backgrounded goes with it, before we answer.
      void (pid === undefined ? Promise.resolve() : endGroup(pid)).then(() => {
        release();
        resolve(result);
      });
    };
    const onAbort = (): void => finish(() => ({ kind: 'aborted' }));

    child.on('error', (error) => finish(() => ({ kind: 'spawn_failed', message: error.message })));
    child.stdin.on('error', () => {}); // a hook that never reads its stdin is fine (EPIPE)
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    child.on('exit', (code, signal) => {
      if (ending) return;
      const outcome = (): ProcessOutcome =>
        signal !== null
          ? { kind: 'signaled', signal, stdout: stdout.text(), stderr: stderr.text() }
          : { kind: 'exited', code: code ?? -1, stdout: stdout.text(), stderr: stderr.text() };
      // Wait briefly for the pipes to drain; a grandchild holding them open does not hold us.
      child.once('close', () => finish(outcome));
      timers.push(setTimeout(() => finish(outcome), DRAIN_AFTER_EXIT_MS));
    });
    options.signal.addEventListener('abort', onAbort, { once: true });
    // Past 2^31-1 ms Node fires a timer after 1 ms: a "forever" timeout must not become "at once".
    const timeoutMs = Math.min(options.timeoutMs, MAX_TIMER_MS);
    timers.push(setTimeout(() => finish(() => ({ kind: 'timed_out' })), timeoutMs));
    child.stdin.end(options.stdin);
  });
}
