// Runs one hook command in its own process group with bounded output, a deadline and an abort
// signal. On timeout or abort the whole group is killed (TERM, then KILL after a grace) and the
// pipes are destroyed, so a grandchild holding stdout cannot wedge the caller.
import { spawn } from 'node:child_process';

export const OUTPUT_CAP_BYTES = 1024 * 1024;
export const KILL_GRACE_MS = 500;
/** After the hook exits, how long to wait for its pipes to drain before closing them. */
const DRAIN_AFTER_EXIT_MS = 100;

export type ProcessOutcome =
  | { kind: 'exited'; code: number; stdout: string; stderr: string }
  | { kind: 'signaled'; signal: string; stdout: string; stderr: string }
  | { kind: 'timed_out' }
  | { kind: 'aborted' }
  | { kind: 'spawn_failed'; message: string };

export interface RunProcessOptions {
  readonly command: string;
  readonly stdin: string;
  readonly timeoutMs: number;
  readonly signal: AbortSignal;
  readonly cwd?: string | undefined;
  readonly env?: Record<string, string> | undefined;
}

class CappedBuffer {
  readonly #chunks: Buffer[] = [];
  #size = 0;
  push(chunk: Buffer): void {
    const room = OUTPUT_CAP_BYTES - this.#size;
    if (room <= 0) return; // keep draining so the child never blocks, but discard
    const kept = chunk.length > room ? chunk.subarray(0, room) : chunk;
    this.#chunks.push(kept);
    this.#size += kept.length;
  }
  text(): string {
    return Buffer.concat(this.#chunks).toString('utf8');
  }
}

function killGroup(pid: number | undefined, signal: NodeJS.Signals): void {
  if (pid === undefined) return;
  try {
    process.kill(-pid, signal);
  } catch {
    // ESRCH: the group is already gone.
  }
}

export function runProcess(options: RunProcessOptions): Promise<ProcessOutcome> {
  if (options.signal.aborted) return Promise.resolve({ kind: 'aborted' });
  return new Promise((resolve) => {
    let settled = false;
    const stdout = new CappedBuffer();
    const stderr = new CappedBuffer();
    const child = spawn('sh', ['-c', options.command], {
      cwd: options.cwd,
      env: options.env ? { ...process.env, ...options.env } : process.env,
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
    const finish = (outcome: ProcessOutcome): void => {
      if (settled) return;
      settled = true;
      for (const timer of timers) clearTimeout(timer);
      options.signal.removeEventListener('abort', onAbort);
      closePipes();
      // Leave nothing behind: whatever the hook backgrounded goes with it.
      killGroup(pid, 'SIGTERM');
      setTimeout(() => killGroup(pid, 'SIGKILL'), KILL_GRACE_MS).unref();
      resolve(outcome);
    };
    const terminate = (outcome: ProcessOutcome): void => {
      killGroup(pid, 'SIGTERM');
      closePipes();
      // Settle once the hook is dead, or after the grace with a KILL, whichever comes first.
      child.once('exit', () => finish(outcome));
      timers.push(
        setTimeout(() => {
          killGroup(pid, 'SIGKILL');
          finish(outcome);
        }, KILL_GRACE_MS),
      );
    };
    const onAbort = (): void => terminate({ kind: 'aborted' });

    child.on('error', (error) => finish({ kind: 'spawn_failed', message: error.message }));
    child.stdin.on('error', () => {}); // a hook that never reads its stdin is fine (EPIPE)
    child.stdout.on('data', (chunk: Buffer) => stdout.push(chunk));
    child.stderr.on('data', (chunk: Buffer) => stderr.push(chunk));
    child.on('exit', (code, signal) => {
      if (settled) return;
      const outcome = (): ProcessOutcome =>
        signal !== null
          ? { kind: 'signaled', signal, stdout: stdout.text(), stderr: stderr.text() }
          : { kind: 'exited', code: code ?? -1, stdout: stdout.text(), stderr: stderr.text() };
      // Wait briefly for the pipes to drain; a grandchild holding them open does not hold us.
      child.once('close', () => finish(outcome()));
      timers.push(setTimeout(() => finish(outcome()), DRAIN_AFTER_EXIT_MS));
    });
    options.signal.addEventListener('abort', onAbort, { once: true });
    timers.push(setTimeout(() => terminate({ kind: 'timed_out' }), options.timeoutMs));
    child.stdin.end(options.stdin);
  });
}
