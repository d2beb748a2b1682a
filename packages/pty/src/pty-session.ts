// One program in one pseudo-terminal: raw bytes in and out (never decoded here), a scrollback ring
// addressed by byte offset, and a close that ends the whole process tree — HUP, then TERM, then
// KILL after a deadline. Exit is reported once, after the last output was delivered.
import { randomUUID } from 'node:crypto';
import {
  close,
  closeSync,
  existsSync,
  constants as fsConstants,
  openSync,
  readSync,
  statSync,
  writeSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { constants } from 'node:os';
import { isAbsolute, join } from 'node:path';
import type * as NodePty from 'node-pty';
import { PtyError } from './errors.js';
import { processAlive, signalTree, treeAlive, type Scope } from './internal/process-tree.js';
import { elfMismatch } from './internal/native-helpers.js';
import {
  internalsOf,
  whenProgramExits,
  writeQueueOf,
  type WriteTask,
} from './internal/node-pty-internals.js';
import { BULK_READ_BYTES, drainBuffer, readBuffer, readTurns } from './internal/read-turns.js';
import { forgetSpawned, recordSpawned } from './internal/signal-guard.js';
import {
  helperOf,
  locateExecutable,
  nodePtyWrapper,
  provenSpawnable,
  spawnWithoutFork,
  spawnWithoutForkLater,
  startTimeOf,
  type HelperExit,
  type HelperSpawnOptions,
} from './internal/spawner.js';
import { unwatchSession, watchSession } from './internal/watchdog.js';
import { Scrollback, type ReplayChunk } from './scrollback.js';

/**
 * node-pty, loaded so that its missing native module (its install script declined or failed) is
 * said with the way out, not as node-pty's own stack trace.
 */
const nodePty: typeof NodePty = (() => {
  try {
    return createRequire(import.meta.url)('node-pty') as typeof NodePty;
  } catch (error) {
    const why = ((error as Error).message ?? String(error)).split('\n')[0];
    throw new Error(
      `@aleph/pty: node-pty could not be loaded (${why}). Its native module is built by its install script, which did not run or failed: with npm, \`npm install-scripts approve node-pty\` then \`npm rebuild node-pty\`; with pnpm, \`pnpm approve-builds\` then \`pnpm rebuild node-pty\` (it needs python3, make and a C++ compiler)`,
      { cause: error },
    );
  }
})();

export type ExitReason = 'exited' | 'closed' | 'evicted' | 'expired' | 'shutdown';

export interface ExitInfo {
  /** Both null when the status is unknown (see `statusLost`). */
  readonly exitCode: number | null;
  readonly signal: string | null;
  readonly reason: ExitReason;
  /**
   * Set only when the exit status could not be learned: the spawn helper died before the program
   * ended, so nobody saw how it ended. Says so in words; `exitCode` and `signal` are then null.
   */
  readonly statusLost?: string;
}

export interface PtySpawnOptions {
  /** Defaults to `$SHELL`, else `/bin/bash` (`%COMSPEC%`, else `cmd.exe`, on Windows). */
  readonly command?: string | undefined;
  readonly args?: readonly string[] | undefined;
  readonly cwd?: string | undefined;
  /** Added to (and overriding) the server's environment; with `inheritEnv: false`, the whole of it. */
  readonly env?: Readonly<Record<string, string>> | undefined;
  /**
   * Default true: the program gets the server's environment (`process.env`), `TERM=xterm-256color`
   * and `env` over both. False: it gets `env` alone, with `TERM=xterm-256color` unless `env` sets
   * TERM (and `PWD`, the cwd, as a shell would set) — nothing of `process.env`. For a command that
   * must not see the server's secrets: a sandbox's wrapper (bwrap) given its allow-list, whose own
   * environment the sandboxed program can read at /proc/1/environ. Without PATH in `env`,
   * `command` must be a path.
   */
  readonly inheritEnv?: boolean | undefined;
  readonly cols: number;
  readonly rows: number;
  /** Bytes of output kept for replay (default 1 MiB). */
  readonly scrollbackBytes?: number | undefined;
  /** How long each step of HUP → TERM → KILL waits on close (default 500 ms). */
  readonly killStepMs?: number | undefined;
  /** Most bytes read in one event-loop turn (default 64 KiB); the rest waits for the next turn. */
  readonly readBudgetBytes?: number | undefined;
  /**
   * Added to the program's niceness before it runs, as `nice -n` would (0 to 19; default 0): with
   * more, it runs at a lower CPU priority than this process, and so does whatever it starts, so a
   * busy program does not take the CPU this process's event loop needs. Linux (elsewhere ignored).
   */
  readonly nice?: number | undefined;
  /**
   * A cgroup directory (absolute) the program joins as the very first thing after its fork, by
   * writing to the directory's `cgroup.procs`, e.g. a CPU group weighted below this process's: what
   * runs before the program could join one itself then weighs no more than it. If it cannot join,
   * it runs all the same. Linux (elsewhere ignored).
   */
  readonly cgroup?: string | undefined;
}

export type DataListener = (chunk: Buffer, offset: number) => void;
export type ExitListener = (info: ExitInfo) => void;

const SIGNAL_NAMES = new Map<number, string>(
  Object.entries(constants.signals).map(([name, number]) => [number, name]),
);
const MAX_DIMENSION = 10_000;
const STATUS_LOST = 'the spawn helper died before the program ended: its exit status is unknown';
const EMPTY = Buffer.alloc(0);
/** After the exit, background jobs may still write to the terminal: read at most this much. */
const MAX_EXIT_DRAIN_BYTES = 1024 * 1024;

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
  const found = locateExecutable(command, cwd, env);
  if (found === undefined) {
    const path = isAbsolute(command) ? command : join(cwd, command);
    const present = command.includes('/') && existsSync(path);
    throw new PtyError(
      'spawn_failed',
      present
        ? `${command}: not executable (no execute permission, or its file system is mounted noexec)`
        : `${command}: no such executable${command.includes('/') ? '' : ' on PATH'}`,
    );
  }
  if (found.proven) return; // checked before, unchanged since
  // A program built for another machine: exec would fail, or (execvp) run it as a shell script.
  const mismatch = process.platform === 'linux' ? programMismatch(found.path) : undefined;
  if (mismatch !== undefined) throw new PtyError('spawn_failed', `${command} ${mismatch}`);
  provenSpawnable(found);
}

function programMismatch(path: string): string | undefined {
  try {
    const fd = openSync(path, fsConstants.O_RDONLY);
    const header = Buffer.alloc(20);
    const length = readSync(fd, header, 0, 20, 0);
    closeSync(fd);
    return length === 20 && header.readUInt32BE(0) === 0x7f454c46 ? elfMismatch(header) : undefined;
  } catch {
    return undefined; // unreadable but executable: let exec decide
  }
}

const delay = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** What to run, where, with what environment: checked before anything is started. */
interface SpawnPlan extends HelperSpawnOptions {
  readonly command: string;
  readonly args: readonly string[];
  readonly env: Record<string, string | undefined>;
}

function checkNice(nice: number | undefined): void {
  if (nice !== undefined && !(Number.isInteger(nice) && nice >= 0 && nice <= 19))
    throw new RangeError(`nice must be an integer from 0 to 19, got ${nice}`);
}

export function checkCgroup(cgroup: string | undefined): void {
  if (cgroup !== undefined && !(cgroup.startsWith('/') && !cgroup.includes('\0')))
    throw new RangeError(`cgroup must be an absolute path, got ${JSON.stringify(cgroup)}`);
}

function planSpawn(options: PtySpawnOptions): SpawnPlan {
  checkSize(options.cols, options.rows);
  checkNice(options.nice);
  checkCgroup(options.cgroup);
  const command = options.command ?? defaultShell();
  const cwd = options.cwd ?? process.cwd();
  const env =
    options.inheritEnv === false
      ? { TERM: 'xterm-256color', ...options.env }
      : { ...process.env, TERM: 'xterm-256color', ...options.env };
  checkSpawnable(command, cwd, env);
  const { cols, rows, nice = 0, cgroup } = options;
  return { command, args: [...(options.args ?? [])], cwd, env, cols, rows, nice, cgroup };
}

/** Linux: without forking this process (see internal/spawner.ts); undefined: node-pty must. */
const spawnNow = (plan: SpawnPlan) => spawnWithoutFork(plan.command, plan.args, plan);
const spawnLater = (plan: SpawnPlan) => spawnWithoutForkLater(plan.command, plan.args, plan);

function spawnWithNodePty(plan: SpawnPlan): NodePty.IPty {
  const wrapper = nodePtyWrapper(); // for node-pty: no inherited descriptor reaches the program
  return nodePty.spawn(
    wrapper ?? plan.command,
    wrapper
      ? [
          ...(plan.cgroup ? ['--cgroup', plan.cgroup] : []),
          ...(plan.nice ? ['--nice', String(plan.nice)] : []),
          '--exec',
          plan.command,
          ...plan.args,
        ]
      : [...plan.args],
    {
      name: plan.env['TERM'] ?? 'xterm-256color', // node-pty sets TERM to it
      cols: plan.cols,
      rows: plan.rows,
      cwd: plan.cwd,
      env: plan.env,
      encoding: null, // raw bytes: no decoding on the server, so UTF-8 is never split or mangled
    },
  );
}

const spawnFailed = (plan: SpawnPlan, error: unknown): PtyError =>
  new PtyError('spawn_failed', `could not start ${plan.command}: ${(error as Error).message}`, {
    cause: error,
  });

/** `attempt()`, its failure as `spawn_failed` naming the program. */
function spawnFailure<T>(plan: SpawnPlan, attempt: () => T): T {
  try {
    return attempt();
  } catch (error) {
    throw spawnFailed(plan, error);
  }
}

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
  /** Watchers now (see watch()), and when the last one left. */
  #watchers = 0;
  #unwatchedAt = 0;
  #cols: number;
  #rows: number;
  #exitInfo: ExitInfo | undefined;
  #closeReason: ExitReason | undefined;
  #closing: Promise<ExitInfo> | undefined;
  /** Paused by pause() (one owner: flow control), by holds (any number of owners), by the turn queue. */
  #paused = false;
  #holds = 0;
  /** Paused by the turn queue (a flood among floods), apart from pause() by the caller. */
  #throttled = false;
  /** Ending (the program exited, or close()): read to the end whatever the owners asked. */
  #draining = false;
  /** Whether node-pty's stream flows now: what #flow() last decided. */
  #reading = true;
  #pauseWatch: NodeJS.Timeout | undefined;
  /** The terminal's master side, which #onReadable reads from directly, and node-pty's stream on it. */
  readonly #fd: number | undefined;
  readonly #socket: { readableLength: number; destroyed: boolean } | undefined;
  /** Our own handle on the slave side while the program runs; see #holdSlave. */
  #slaveFd: number | undefined;
  readonly #readBudget: number;
  readonly #killStepMs: number;
  readonly #pty: NodePty.IPty;
  /** The spawn helper below which this session's processes are (undefined: node-pty spawned it). */
  readonly #scope: Scope | undefined;
  /** Each listener, and whether it takes a view of the read buffer (onDataView) or a copy. */
  readonly #dataListeners = new Map<DataListener, boolean>();
  readonly #exitListeners = new Set<ExitListener>();

  /**
   * Starts the program now. On Linux the spawn helper's answer is waited for with the event loop
   * blocked (a few ms; at most 250 ms, then node-pty): `start` does not block.
   */
  static spawn(options: PtySpawnOptions): PtySession {
    const plan = planSpawn(options);
    return new PtySession(
      options,
      plan,
      spawnFailure(plan, () => spawnNow(plan) ?? spawnWithNodePty(plan)),
    );
  }

  /**
   * Like `spawn`, without blocking the event loop while the spawn helper starts the program: the
   * session comes once it runs. Rejects with the same `PtyError`s.
   */
  static async start(options: PtySpawnOptions): Promise<PtySession> {
    const plan = planSpawn(options);
    let pty: NodePty.IPty | undefined;
    try {
      pty = await spawnLater(plan);
    } catch (error) {
      throw spawnFailed(plan, error);
    }
    return new PtySession(options, plan, pty ?? spawnFailure(plan, () => spawnWithNodePty(plan)));
  }

  private constructor(options: PtySpawnOptions, plan: SpawnPlan, pty: NodePty.IPty) {
    this.id = randomUUID();
    this.command = plan.command;
    this.args = plan.args;
    this.#cols = options.cols;
    this.#rows = options.rows;
    this.#killStepMs = options.killStepMs ?? 500;
    this.#readBudget = options.readBudgetBytes ?? 64 * 1024;
    this.scrollback = new Scrollback(options.scrollbackBytes);
    this.#pty = pty;
    this.pid = this.#pty.pid;
    this.#scope = helperOf(this.#pty);
    const startTime = startTimeOf(this.#pty); // the helper read it: no /proc read here
    recordSpawned(this.pid, { leader: true, startTime }); // what close() may signal: this session, nothing else
    watchSession(this.pid, startTime); // if this process dies, even by SIGKILL, the session goes with it
    const internals = internalsOf(this.#pty); // the master's descriptor, its stream, the slave's path
    if (internals !== undefined) {
      this.#fd = internals.fd;
      this.#socket = internals.socket;
      this.#holdSlave(internals.slavePath, internals.slaveFd);
    }
    this.createdAt = Date.now();
    this.#lastActivityAt = this.createdAt;

    this.#pty.onData((data: string | Buffer) =>
      this.#onReadable(typeof data === 'string' ? Buffer.from(data) : data),
    );
    let resolveExit!: (info: ExitInfo) => void;
    this.exited = new Promise((resolve) => (resolveExit = resolve));
    this.#pty.onExit((event: HelperExit) => {
      const { exitCode, signal } = event;
      const signalName = signal ? (SIGNAL_NAMES.get(signal) ?? String(signal)) : null;
      const reason = this.#closeReason ?? 'exited';
      const info: ExitInfo = event.lost
        ? { exitCode: null, signal: null, reason, statusLost: STATUS_LOST }
        : { exitCode: signalName === null ? exitCode : null, signal: signalName, reason };
      this.#exitInfo = info;
      this.#stopPauseWatch();
      readTurns.leave(this.#unthrottle);
      this.#releaseSlave();
      // Whatever the program left running in its session (a `sleep 1000 &`) goes with it.
      const forget = (): void => {
        unwatchSession(this.pid);
        forgetSpawned(this.pid);
      };
      // The helper saw nothing of the session left when it reaped the program: nothing to read.
      if (event.sessionGone === true || !treeAlive(this.pid, this.#scope)) forget();
      else void this.#endTree().then(() => treeAlive(this.pid, this.#scope) || forget());
      for (const listener of this.#exitListeners) listener(info);
      this.#dataListeners.clear();
      this.#exitListeners.clear();
      resolveExit(info);
    });
  }

  /**
   * node-pty hands over one read (at most ~4 KiB from a pty) per event-loop turn: while a program
   * floods, a wakeup and a trip through a stream per 4 KiB. So on each event we read on from the
   * master ourselves, synchronously, until the kernel has nothing ready (EAGAIN), this session's
   * budget is spent, or the turn's (see read-turns.ts); the rest comes with the next event. Unless
   * node-pty's stream still holds older bytes (it buffers one read while paused): those go first.
   * Paused, a read that comes late is delivered, not drained on. The spawn helper's terminal reads
   * into the shared read buffer (`first` is a view of it), and so does the drain: onData's
   * listeners get a copy, onDataView's the view.
   */
  #onReadable(first: Buffer): void {
    // With no floods waiting their turn, the turn's first may drain a whole session budget;
    // otherwise each reads only what the turn has left. A short read (an echo, a prompt) found the
    // buffer nearly empty: no drain, whose read would only fail with EAGAIN (an exception, in Node).
    const left = readTurns.allowance(this.#readBudget);
    const drain =
      this.#reading &&
      this.#fd !== undefined &&
      first.length >= BULK_READ_BYTES &&
      !this.#socket?.readableLength;
    const chunk = drain ? this.#drain(first, Math.min(left, this.#readBudget) - first.length) : first;
    // node-pty hands over a buffer of its own; the helper's terminal, a view of the read buffer.
    this.#deliver(chunk, !drain && first.buffer !== readBuffer.buffer);
    if (readTurns.took(chunk.length)) this.#throttle(); // a flood among floods waits its turn
  }

  /** Paused until the turn queue lets this session read again (see read-turns.ts). */
  #throttle(): void {
    if (this.#throttled || this.#exitInfo !== undefined) return;
    this.#throttled = true;
    this.#flow();
    readTurns.wait(this.#unthrottle);
  }

  readonly #unthrottle = (): void => {
    readTurns.leave(this.#unthrottle);
    if (!this.#throttled) return;
    this.#throttled = false;
    this.#flow();
  };

  /** The one place that pauses or resumes node-pty's stream: it reads unless someone holds it. */
  #flow(): void {
    const read = this.#draining || (!this.#paused && this.#holds === 0 && !this.#throttled);
    if (read === this.#reading) return;
    this.#reading = read;
    if (read) {
      this.#stopPauseWatch();
      this.#pty.resume();
      return;
    }
    this.#pty.pause();
    // A paused reader would lose the tail: the exit hook (#holdSlave) drains it; Windows polls.
    if (this.#fd !== undefined || this.#pauseWatch !== undefined) return;
    this.#pauseWatch = setInterval(() => {
      if (processAlive(this.pid)) return;
      this.#draining = true;
      this.#flow();
    }, 50);
    this.#pauseWatch.unref();
  }

  /**
   * Lost-output fix: when the program exits, the master may report EOF (EIO) while its last bytes
   * are still in flight, and node-pty then drops them (measured: 28 of 30 runs of `cat` on a 4 MB
   * file lost 4–12 KiB). So we hold the slave side open ourselves: the master never sees EOF while
   * the program runs. When node-pty learns the program exited (it sets `_boundClose` and waits up
   * to 200 ms for the master to close), we read what is left, then let go of the slave, and the
   * master closes at once: the exit is reported right after the last output.
   */
  #holdSlave(slavePath: string | undefined, open?: number): void {
    if (open !== undefined) this.#slaveFd = open;
    else if (slavePath !== undefined) {
      try {
        this.#slaveFd = openSync(slavePath, fsConstants.O_RDWR | fsConstants.O_NOCTTY);
      } catch {
        // best effort: without it we are only as good as node-pty at the tail (the hook still serves)
      }
    }
    whenProgramExits(this.#pty, () => this.#onProgramExit());
  }

  #onProgramExit(): void {
    // A paused stream may hold one older read: let it flow first, then take the rest.
    this.#draining = true;
    this.#unthrottle();
    this.#flow();
    setImmediate(() => {
      for (let total = 0; total < MAX_EXIT_DRAIN_BYTES;) {
        const rest = this.#drain(EMPTY, this.#readBudget);
        if (rest.length === 0) break;
        this.#deliver(rest, false);
        total += rest.length;
      }
      this.#releaseSlave();
    });
  }

  /**
   * On the thread pool: the last close of a terminal's side waits for the kernel's pending work on
   * it (a flush by a kernel worker), which under load blocked the event loop for milliseconds.
   */
  #releaseSlave(): void {
    if (this.#slaveFd === undefined) return;
    close(this.#slaveFd, () => {});
    this.#slaveFd = undefined;
  }

  /** `first` and up to `limit` more bytes read straight from the master: a view of the read buffer. */
  #drain(first: Buffer, limit: number): Buffer {
    // Once node-pty destroyed its stream the descriptor is closed, and its number may be reused.
    if (this.#socket?.destroyed !== false) return first;
    const end = first.length + Math.max(0, limit);
    const buffer = drainBuffer(end);
    // Read on right after `first`: in place when it is the start of the read buffer.
    if (first.buffer !== buffer.buffer || first.byteOffset !== buffer.byteOffset) first.copy(buffer);
    let filled = first.length;
    while (filled < end) {
      let read: number;
      try {
        read = readSync(this.#fd as number, buffer, filled, end - filled, null);
      } catch {
        break; // EAGAIN: nothing ready (what arrives later raises the next event)
      }
      if (read <= 0) break;
      filled += read;
    }
    return buffer.subarray(0, filled);
  }

  /**
   * Into the scrollback, then to each listener: a view for onDataView's, a copy (made once, unless
   * `owned`: the chunk is already nobody else's) for onData's.
   */
  #deliver(chunk: Buffer, owned: boolean): void {
    const offset = this.scrollback.end;
    this.scrollback.append(chunk);
    this.#lastActivityAt = Date.now();
    let copy = owned ? chunk : undefined;
    for (const [listener, view] of this.#dataListeners)
      listener(view ? chunk : (copy ??= Buffer.from(chunk)), offset);
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

  /**
   * Since when nothing happened: the last input or output, or the moment the last watcher left,
   * whichever is later. Undefined while watched: a session someone is looking at is never idle.
   */
  get idleSince(): number | undefined {
    return this.#watchers > 0 ? undefined : Math.max(this.#lastActivityAt, this.#unwatchedAt);
  }

  get watched(): boolean {
    return this.#watchers > 0;
  }

  /**
   * Marks the session as watched (say, open in a viewer: a vim left idle while the user reads it)
   * until disposed: a PtyManager's idle TTL never expires a watched session, and counts from when
   * its last watcher left. Any number of watchers; disposing is idempotent.
   */
  watch(): Disposable & { dispose(): void } {
    this.#watchers += 1;
    let watching = true;
    const dispose = (): void => {
      if (!watching) return;
      watching = false;
      this.#watchers -= 1;
      if (this.#watchers === 0) this.#unwatchedAt = Date.now();
    };
    return { dispose, [Symbol.dispose]: dispose };
  }

  get exitInfo(): ExitInfo | undefined {
    return this.#exitInfo;
  }

  /** Not reading output now, because of pause() or a hold() (until the program ends). */
  get paused(): boolean {
    return !this.#draining && (this.#paused || this.#holds > 0);
  }

  /** Bytes handed to the terminal that the kernel has not taken yet (the program is not reading). */
  get pendingInputBytes(): number {
    const queue = this.#writeQueue();
    if (queue === undefined) return 0;
    let pending = 0;
    for (const task of queue) pending += task.buffer.byteLength - task.offset;
    return pending;
  }

  #writeQueue(): WriteTask[] | undefined {
    return writeQueueOf(this.#pty);
  }

  write(data: Uint8Array | string): void {
    if (this.#exitInfo !== undefined || this.#closeReason !== undefined) {
      throw new PtyError('session_closed', `session ${this.id} has ended`);
    }
    this.#lastActivityAt = Date.now();
    readTurns.inputWritten(); // floods yield for a few turns: the echo comes back at once
    let bytes = typeof data === 'string' ? Buffer.from(data) : data;
    // node-pty writes through the thread pool, a thread hop and a wakeup per keystroke. When
    // nothing is queued before it, write straight to the master: the kernel takes it at once,
    // or as much as it has room for, and node-pty's queue retries the rest (on EAGAIN) in order.
    if (this.#fd !== undefined && this.#writeQueue()?.length === 0) {
      try {
        bytes = bytes.subarray(writeSync(this.#fd, bytes));
      } catch {
        // EAGAIN (the program is not reading) and the like: node-pty's queue takes it all
      }
    }
    if (bytes.byteLength > 0) {
      this.#pty.write(Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    }
  }

  resize(cols: number, rows: number): void {
    checkSize(cols, rows);
    if (this.#exitInfo !== undefined) throw new PtyError('session_closed', `session ${this.id} has ended`);
    this.#pty.resize(cols, rows);
    this.#cols = cols;
    this.#rows = rows;
  }

  /**
   * Stops reading output; the program blocks once the kernel buffer fills. A switch for one owner
   * (the gateway's flow control); other owners take a hold(). The program's end still drains.
   */
  pause(): void {
    if (this.#exitInfo !== undefined) return;
    this.#paused = true;
    this.#flow();
  }

  resume(): void {
    this.#paused = false;
    this.#flow();
  }

  /**
   * Output is not read while any hold is held (and pause() is off for its own owner): e.g. the
   * gateway holds a session nobody views, so what it prints waits in the kernel instead of pushing
   * older output out of the scrollback. Disposing is idempotent. The program's end still drains.
   */
  hold(): Disposable & { dispose(): void } {
    this.#holds += 1;
    this.#flow();
    let held = true;
    const dispose = (): void => {
      if (!held) return;
      held = false;
      this.#holds -= 1;
      this.#flow();
    };
    return { dispose, [Symbol.dispose]: dispose };
  }

  #stopPauseWatch(): void {
    if (this.#pauseWatch !== undefined) clearInterval(this.#pauseWatch);
    this.#pauseWatch = undefined;
  }

  replay(fromOffset: number): ReplayChunk {
    return this.scrollback.read(fromOffset);
  }

  /** `chunk` is the listener's to keep. */
  onData(listener: DataListener): Disposable & { dispose(): void } {
    return this.#listen(listener, false);
  }

  /**
   * Like onData, without the copy: `chunk` is a view of a buffer the next read reuses, valid only
   * until the listener returns, so copy what you keep. For a consumer that handles output at once
   * (frames it, parses it), it saves an allocation and a copy of every read.
   */
  onDataView(listener: DataListener): Disposable & { dispose(): void } {
    return this.#listen(listener, true);
  }

  #listen(listener: DataListener, view: boolean): Disposable & { dispose(): void } {
    this.#dataListeners.set(listener, view);
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
    this.#draining = true;
    this.#flow();
    const queue = this.#writeQueue();
    if (queue !== undefined) queue.length = 0;
    for (const signal of ['SIGHUP', 'SIGTERM', 'SIGKILL'] as const) {
      if (!treeAlive(this.pid, this.#scope) && this.#exitInfo !== undefined) return;
      signalTree(this.pid, signal, this.#scope);
      const deadline = Date.now() + this.#killStepMs;
      while (Date.now() < deadline) {
        await delay(Math.min(20, this.#killStepMs));
        if (!treeAlive(this.pid, this.#scope)) return;
      }
    }
  }
}
