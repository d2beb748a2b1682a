// One program in one pseudo-terminal: raw bytes in and out (never decoded here), a scrollback ring
// addressed by byte offset, and a close that ends the whole process tree — HUP, then TERM, then
// KILL after a deadline. Exit is reported once, after the last output was delivered.
import { randomUUID } from 'node:crypto';
import { accessSync, closeSync, constants as fsConstants, openSync, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';
import { constants } from 'node:os';
import * as nodePty from 'node-pty';
import { PtyError } from './errors.js';
import { signalTree, treeAlive } from './internal/process-tree.js';
import { Scrollback, type ReplayChunk } from './scrollback.js';

export type ExitReason = 'exited' | 'closed' | 'evicted' | 'expired' | 'shutdown';

export interface ExitInfo {
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly reason: ExitReason;
}

export interface PtySpawnOptions {
  /** Defaults to `$SHELL`, else `/bin/bash` (`%COMSPEC%`, else `cmd.exe`, on Windows). */
  readonly command?: string | undefined;
  readonly args?: readonly string[] | undefined;
  readonly cwd?: string | undefined;
  /** Added to (and overriding) the server's environment. */
  readonly env?: Readonly<Record<string, string>> | undefined;
  readonly cols: number;
  readonly rows: number;
  /** Bytes of output kept for replay (default 1 MiB). */
  readonly scrollbackBytes?: number | undefined;
  /** How long each step of HUP → TERM → KILL waits on close (default 500 ms). */
  readonly killStepMs?: number | undefined;
}

export type DataListener = (chunk: Buffer, offset: number) => void;
export type ExitListener = (info: ExitInfo) => void;

const SIGNAL_NAMES = new Map<number, string>(
  Object.entries(constants.signals).map(([name, number]) => [number, name]),
);
const MAX_DIMENSION = 10_000;

export function defaultShell(env: NodeJS.ProcessEnv = process.env): string {
  if (process.platform === 'win32') return env['COMSPEC'] ?? 'cmd.exe';
  return env['SHELL'] || '/bin/bash';
}

function checkSize(cols: number, rows: number): void {
  for (const [name, value] of [
    ['cols', cols],
    ['rows', rows],
  ] as const) {
    if (!Number.isInteger(value) || value < 1 || value > MAX_DIMENSION) {
      throw new PtyError(
        'invalid_size',
        `${name} must be an integer from 1 to ${MAX_DIMENSION}, got ${value}`,
      );
    }
  }
}

/**
 * node-pty reports a missing program or working directory only as an exit with code 1 after the
 * fork; checking first turns both into a clear `spawn_failed` error for the caller.
 */
function checkSpawnable(command: string, cwd: string, env: NodeJS.ProcessEnv): void {
  try {
    if (!statSync(cwd).isDirectory()) throw new Error('not a directory');
  } catch {
    throw new PtyError('spawn_failed', `working directory ${cwd} does not exist or is not a directory`);
  }
  if (process.platform === 'win32') return;
  const candidates = command.includes('/')
    ? [command.startsWith('/') ? command : join(cwd, command)]
    : (env['PATH'] ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((dir) => join(dir, command));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, fsConstants.X_OK);
      if (statSync(candidate).isFile()) return;
    } catch {
      // try the next one
    }
  }
  throw new PtyError(
    'spawn_failed',
    `${command}: no such executable${command.includes('/') ? '' : ' on PATH'}`,
  );
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

export class PtySession {
  readonly id: string;
  readonly pid: number;
  readonly command: string;
  readonly args: readonly string[];
  readonly createdAt: number;
  readonly scrollback: Scrollback;
  /** Resolves once, after the last output was delivered. */
  readonly exited: Promise<ExitInfo>;
  #lastActivityAt: number;
  #cols: number;
  #rows: number;
  #exitInfo: ExitInfo | undefined;
  #closeReason: ExitReason | undefined;
  #closing: Promise<ExitInfo> | undefined;
  #paused = false;
  #pauseWatch: NodeJS.Timeout | undefined;
  /** Our own handle on the terminal's slave side; see the constructor. */
  #slaveFd: number | undefined;
  readonly #killStepMs: number;
  readonly #pty: nodePty.IPty;
  readonly #dataListeners = new Set<DataListener>();
  readonly #exitListeners = new Set<ExitListener>();

  static spawn(options: PtySpawnOptions): PtySession {
    return new PtySession(options);
  }

  private constructor(options: PtySpawnOptions) {
    checkSize(options.cols, options.rows);
    this.id = randomUUID();
    this.command = options.command ?? defaultShell();
    this.args = [...(options.args ?? [])];
    this.#cols = options.cols;
    this.#rows = options.rows;
    this.#killStepMs = options.killStepMs ?? 500;
    this.scrollback = new Scrollback(options.scrollbackBytes);
    const cwd = options.cwd ?? process.cwd();
    const env = { ...process.env, TERM: 'xterm-256color', ...options.env };
    checkSpawnable(this.command, cwd, env);
    try {
      this.#pty = nodePty.spawn(this.command, [...this.args], {
        name: 'xterm-256color',
        cols: options.cols,
        rows: options.rows,
        cwd,
        env,
        encoding: null, // raw bytes: no decoding on the server, so UTF-8 is never split or mangled
      });
    } catch (error) {
      throw new PtyError('spawn_failed', `could not start ${this.command}: ${(error as Error).message}`, {
        cause: error,
      });
    }
    this.pid = this.#pty.pid;
    // Lost-output fix: when the program exits, Linux may report EOF on the master while its last
    // bytes are still in flight, and node-pty then drops them. Holding the slave side open
    // ourselves means the master never sees EOF; node-pty drains for 200 ms after the exit instead.
    const slavePath = (this.#pty as unknown as { _pty?: unknown })._pty;
    if (process.platform !== 'win32' && typeof slavePath === 'string') {
      try {
        this.#slaveFd = openSync(slavePath, fsConstants.O_RDWR | fsConstants.O_NOCTTY);
      } catch {
        this.#slaveFd = undefined; // best effort: without it we are only as good as node-pty
      }
    }
    this.createdAt = Date.now();
    this.#lastActivityAt = this.createdAt;

    this.#pty.onData((data: string | Buffer) => {
      const chunk = typeof data === 'string' ? Buffer.from(data) : data;
      const offset = this.scrollback.end;
      this.scrollback.append(chunk);
      this.#lastActivityAt = Date.now();
      for (const listener of this.#dataListeners) listener(chunk, offset);
    });
    let resolveExit!: (info: ExitInfo) => void;
    this.exited = new Promise((resolve) => (resolveExit = resolve));
    this.#pty.onExit(({ exitCode, signal }) => {
      const signalName = signal ? (SIGNAL_NAMES.get(signal) ?? String(signal)) : null;
      const info: ExitInfo = {
        exitCode: signalName === null ? exitCode : null,
        signal: signalName,
        reason: this.#closeReason ?? 'exited',
      };
      this.#exitInfo = info;
      this.#stopPauseWatch();
      if (this.#slaveFd !== undefined) {
        closeSync(this.#slaveFd);
        this.#slaveFd = undefined;
      }
      // Whatever the program left running in its session (a `sleep 1000 &`) goes with it.
      if (treeAlive(this.pid)) void this.#endTree();
      for (const listener of this.#exitListeners) listener(info);
      this.#dataListeners.clear();
      this.#exitListeners.clear();
      resolveExit(info);
    });
  }

  get cols(): number {
    return this.#cols;
  }

  get rows(): number {
    return this.#rows;
  }

  get lastActivityAt(): number {
    return this.#lastActivityAt;
  }

  get exitInfo(): ExitInfo | undefined {
    return this.#exitInfo;
  }

  get paused(): boolean {
    return this.#paused;
  }

  /** Bytes handed to the terminal that the kernel has not taken yet (the program is not reading). */
  get pendingInputBytes(): number {
    const queue = this.#writeQueue();
    if (queue === undefined) return 0;
    let pending = 0;
    for (const task of queue) pending += task.buffer.byteLength - task.offset;
    return pending;
  }

  /** node-pty 1.1.0 (pinned) keeps its EAGAIN retry queue here; nothing public exposes it. */
  #writeQueue(): { buffer: Buffer; offset: number }[] | undefined {
    const queue = (this.#pty as unknown as { _writeStream?: { _writeQueue?: unknown } })._writeStream
      ?._writeQueue;
    return Array.isArray(queue) ? (queue as { buffer: Buffer; offset: number }[]) : undefined;
  }

  write(data: Uint8Array | string): void {
    if (this.#exitInfo !== undefined || this.#closeReason !== undefined) {
      throw new PtyError('session_closed', `session ${this.id} has ended`);
    }
    this.#lastActivityAt = Date.now();
    this.#pty.write(
      typeof data === 'string' ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength),
    );
  }

  resize(cols: number, rows: number): void {
    checkSize(cols, rows);
    if (this.#exitInfo !== undefined) throw new PtyError('session_closed', `session ${this.id} has ended`);
    this.#pty.resize(cols, rows);
    this.#cols = cols;
    this.#rows = rows;
  }

  /** Stops reading output; the program blocks once the kernel buffer fills. */
  pause(): void {
    if (this.#paused || this.#exitInfo !== undefined) return;
    this.#paused = true;
    this.#pty.pause();
    // node-pty drains for only 200 ms after the program exits; a paused reader would lose the
    // tail. While paused, watch for the exit and resume so the tail reaches the scrollback.
    this.#pauseWatch = setInterval(() => {
      if (!this.#leaderAlive()) this.resume();
    }, 50);
    this.#pauseWatch.unref();
  }

  resume(): void {
    this.#stopPauseWatch();
    if (!this.#paused) return;
    this.#paused = false;
    this.#pty.resume();
  }

  #stopPauseWatch(): void {
    if (this.#pauseWatch !== undefined) clearInterval(this.#pauseWatch);
    this.#pauseWatch = undefined;
  }

  #leaderAlive(): boolean {
    try {
      process.kill(this.pid, 0);
      return true;
    } catch {
      return false;
    }
  }

  replay(fromOffset: number): ReplayChunk {
    return this.scrollback.read(fromOffset);
  }

  onData(listener: DataListener): Disposable & { dispose(): void } {
    this.#dataListeners.add(listener);
    const dispose = (): void => void this.#dataListeners.delete(listener);
    return { dispose, [Symbol.dispose]: dispose };
  }

  onExit(listener: ExitListener): Disposable & { dispose(): void } {
    if (this.#exitInfo !== undefined) {
      const info = this.#exitInfo;
      queueMicrotask(() => listener(info));
      return { dispose: () => {}, [Symbol.dispose]: () => {} };
    }
    this.#exitListeners.add(listener);
    const dispose = (): void => void this.#exitListeners.delete(listener);
    return { dispose, [Symbol.dispose]: dispose };
  }

  /** Ends the program and everything it started. Idempotent; the first reason given wins. */
  close(reason: ExitReason = 'closed'): Promise<ExitInfo> {
    if (this.#exitInfo !== undefined) return Promise.resolve(this.#exitInfo);
    this.#closeReason ??= reason;
    this.#closing ??= this.#endTree().then(() => this.exited);
    return this.#closing;
  }

  async #endTree(): Promise<void> {
    // A paused reader would hold the exit back: let the last output drain. Input nobody will
    // read is dropped, so node-pty does not retry it against a closed descriptor.
    this.resume();
    const queue = this.#writeQueue();
    if (queue !== undefined) queue.length = 0;
    for (const signal of ['SIGHUP', 'SIGTERM', 'SIGKILL'] as const) {
      if (!treeAlive(this.pid) && this.#exitInfo !== undefined) return;
      signalTree(this.pid, signal);
      const deadline = Date.now() + this.#killStepMs;
      while (Date.now() < deadline) {
        await delay(Math.min(20, this.#killStepMs));
        if (!treeAlive(this.pid)) return;
      }
    }
  }
}
