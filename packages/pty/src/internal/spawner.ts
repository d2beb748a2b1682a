// Spawning without forking this process (Linux). node-pty starts each program with forkpty(3): a
// fork of the whole server, whose pages are then copy-on-write, so after every spawn the server's
// first write to each page faults (on this VM ~16 µs a page: 64 MB written after a spawn took
// 1.6 s instead of 3 ms), and the spawn itself blocks for 10–30 ms. So here the server opens the
// terminal itself (openpty: no fork) and a small helper process, started once, runs each program
// on it, under `setsid -c` so that the terminal is the program's controlling tty, as with forkpty.
// The helper answers on a FIFO that the server reads synchronously, so spawn() and its pid stay
// synchronous; exits come back as lines on the helper's stdout. The result mimics the parts of
// node-pty's UnixTerminal that PtySession uses. Wherever any of this is missing, node-pty spawns.
import { execFileSync, spawn as spawnProcess, type ChildProcess } from 'node:child_process';
import {
  accessSync,
  closeSync,
  constants,
  mkdtempSync,
  openSync,
  readSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { constants as osConstants, tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import { ReadStream } from 'node:tty';
import type { IPty } from 'node-pty';
import { processAlive } from './process-tree.js';

/** The helper: one JSON request a line; answers each on the reply FIFO; reports exits on stdout. */
const HELPER = `
const fs = require('node:fs');
const { spawn } = require('node:child_process');
const [requestPath, replyPath] = process.argv.slice(1);
// Read-write, so neither open waits for the server's end: if the server is already gone, the
// helper must still reach its event loop, see stdin close, and exit.
const [request, reply] = [requestPath, replyPath].map((path) => fs.openSync(path, fs.constants.O_RDWR));
const report = (line) => process.stdout.write(JSON.stringify(line) + '\\n');
const nap = new Int32Array(new SharedArrayBuffer(4));
// Answer once setsid has made the program a session leader with the terminal as its controlling
// tty (or it ended): from then on, signals to its session reach it, as right after forkpty.
const settle = (pid) => {
  for (const deadline = Date.now() + 1000; Date.now() < deadline; Atomics.wait(nap, 0, 0, 0.2)) {
    let stat;
    try {
      stat = fs.readFileSync('/proc/' + pid + '/stat', 'utf8');
    } catch {
      return;
    }
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    if (fields[0] === 'Z' || (Number(fields[3]) === pid && fields[4] !== '0')) return;
  }
};
let pending = '';
// A socket over the FIFO (epoll), not a file stream: a thread-pool read blocked on a FIFO would
// keep process.exit() from ever returning.
new (require('node:net').Socket)({ fd: request, writable: false }).on('data', (data) => {
  pending += data;
  for (let at; (at = pending.indexOf('\\n')) >= 0; pending = pending.slice(at + 1)) {
    const { file, args, cwd, env, tty } = JSON.parse(pending.slice(0, at));
    let answer;
    try {
      const fd = fs.openSync(tty, 'r+');
      try {
        const child = spawn('setsid', ['-c', '--', file, ...args], { stdio: [fd, fd, fd], cwd, env });
        child.on('error', () => {});
        if (child.pid === undefined) throw new Error('setsid did not start');
        child.on('exit', (code, signal) => report({ exit: child.pid, code, signal }));
        settle(child.pid);
        answer = { pid: child.pid };
      } finally {
        fs.closeSync(fd);
      }
    } catch (error) {
      answer = { error: String(error && error.message) };
    }
    fs.writeSync(reply, JSON.stringify(answer) + '\\n');
  }
});
// Ctrl-C in the server's terminal, or a hangup, reaches the helper too (same process group): it
// stays until the server has closed its sessions, and goes when the server does (stdin closes).
for (const signal of ['SIGINT', 'SIGHUP', 'SIGTERM']) process.on(signal, () => {});
process.stdin.on('end', () => {
  fs.rmSync(require('node:path').dirname(requestPath), { recursive: true, force: true });
  process.exit(0);
}).resume();
`;
/** How long a spawn waits for the helper's answer before giving up on it (its first start included). */
const ANSWER_TIMEOUT_MS = 5000;
/** Like node-pty: after the program exits, how long its output may take to drain before exit is reported. */
const CLOSE_TIMEOUT_MS = 200;

interface Native {
  open(cols: number, rows: number): { master: number; slave: number; pty: string };
  resize(fd: number, cols: number, rows: number): void;
}

interface Helper {
  readonly process: ChildProcess;
  readonly stdout: { ref(): void; unref(): void };
  readonly request: number;
  readonly reply: number;
  readonly native: Native;
  /** Running programs by pid, until the helper reports their exit. */
  readonly terminals: Map<number, HelperTerminal>;
}

let helper: Helper | null | undefined; // null: not available here (or no longer); do not retry

/** Where `command` runs from: itself if it has a slash (relative to `cwd`), else the first on PATH. */
export function findExecutable(command: string, cwd: string, env: NodeJS.ProcessEnv): string | undefined {
  const candidates = command.includes('/')
    ? [isAbsolute(command) ? command : join(cwd, command)]
    : (env['PATH'] ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((dir) => join(dir, command));
  return candidates.find((candidate) => {
    try {
      accessSync(candidate, constants.X_OK);
      return statSync(candidate).isFile();
    } catch {
      return false;
    }
  });
}

function startHelper(): Helper | null {
  if (process.platform !== 'linux' || process.env['ALEPH_PTY_FORK'] === '1') return null;
  for (const tool of ['setsid', 'mkfifo']) if (!findExecutable(tool, '/', process.env)) return null;
  try {
    // node-pty 1.1.0 (pinned) exposes openpty and the window-size ioctl in its native module.
    const utils = createRequire(import.meta.url)('node-pty/lib/utils') as {
      loadNativeModule(name: string): { module: Native };
    };
    const native = utils.loadNativeModule('pty').module;
    const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-'));
    const [requestPath, replyPath] = [join(dir, 'request'), join(dir, 'reply')];
    execFileSync('mkfifo', ['-m', '600', requestPath, replyPath]);
    // Both opened read-write, so no open blocks before the helper opens its ends, and a read
    // finds EAGAIN, not EOF, until an answer is there: replies are polled, with a deadline.
    const request = openSync(requestPath, constants.O_RDWR);
    const reply = openSync(replyPath, constants.O_RDWR | constants.O_NONBLOCK);
    const child = spawnProcess(process.execPath, ['-e', HELPER, requestPath, replyPath], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    const stdout = child.stdout as unknown as NodeJS.ReadableStream & { ref(): void; unref(): void };
    const started: Helper = { process: child, stdout, request, reply, native, terminals: new Map() };
    let lines = '';
    stdout.setEncoding('utf8').on('data', (data: string) => {
      lines += data;
      for (let at; (at = lines.indexOf('\n')) >= 0; lines = lines.slice(at + 1)) {
        const exit = JSON.parse(lines.slice(0, at)) as {
          exit: number;
          code: number | null;
          signal: string | null;
        };
        started.terminals.get(exit.exit)?.programExited(exit.code, exit.signal);
        started.terminals.delete(exit.exit);
        if (started.terminals.size === 0) started.stdout.unref();
      }
    });
    child.once('exit', () => {
      helper = null;
      for (const fd of [request, reply]) closeQuietly(fd);
      rmSync(dir, { recursive: true, force: true });
    });
    // Once its last report is read, nobody reports these programs' exits any more: watch here.
    child.once('close', () => {
      for (const terminal of started.terminals.values()) terminal.watchLeader();
    });
    // The helper must not keep this process alive, and goes when its stdin closes (we exited).
    child.unref();
    (child.stdin as unknown as { unref(): void }).unref();
    stdout.unref();
    return started;
  } catch {
    return null;
  }
}

function ask(started: Helper, request: object): { pid?: number; error?: string } | undefined {
  writeSync(started.request, `${JSON.stringify(request)}\n`);
  const buffer = Buffer.alloc(256);
  const nap = new Int32Array(new SharedArrayBuffer(4));
  const deadline = Date.now() + ANSWER_TIMEOUT_MS;
  let text = '';
  for (let tries = 1; !text.endsWith('\n'); tries += 1) {
    try {
      text += buffer.toString('utf8', 0, readSync(started.reply, buffer, 0, buffer.length, null));
    } catch {
      // EAGAIN: not answered yet. The event loop is not running, so look at the helper directly.
      if (Date.now() > deadline || (tries % 50 === 0 && !processAlive(started.process.pid ?? 0)))
        return undefined;
      Atomics.wait(nap, 0, 0, 0.2);
    }
  }
  return JSON.parse(text) as { pid?: number; error?: string };
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}

export interface HelperSpawnOptions {
  readonly cols: number;
  readonly rows: number;
  readonly cwd: string;
  readonly env: Readonly<Record<string, string | undefined>>;
}

/**
 * Starts the helper now, in the background (a PtyManager does, when constructed), so that the first
 * spawn does not wait ~150 ms for it to boot. Idempotent.
 */
export function prepareSpawner(): void {
  if (helper === undefined) helper = startHelper();
}

/** `file` on a terminal of our own, run by the helper; undefined where that is not possible. */
export function spawnWithoutFork(
  file: string,
  args: readonly string[],
  options: HelperSpawnOptions,
): IPty | undefined {
  prepareSpawner();
  if (!helper) return undefined;
  const started = helper;
  const term = started.native.open(options.cols, options.rows);
  const env = { ...options.env, PWD: options.cwd };
  const answer = ask(started, { file, args, cwd: options.cwd, env, tty: term.pty });
  // The program holds its side of the terminal now (PtySession holds another, by path).
  closeQuietly(term.slave);
  if (answer?.pid === undefined) {
    closeQuietly(term.master);
    if (answer === undefined) {
      helper = null; // silent or gone: node-pty spawns from now on
      started.process.kill('SIGKILL'); // it ignores the others (see HELPER)
    }
    return undefined;
  }
  const terminal = new HelperTerminal(answer.pid, term.master, term.pty, started.native);
  started.terminals.set(answer.pid, terminal);
  started.stdout.ref(); // until the helper reports this exit, as node-pty's exit watch would
  return terminal as unknown as IPty;
}

type Listener<T> = (value: T) => void;
/** node-pty's exit event, and `lost`: the helper died first, so the status is unknown (not 0). */
export interface HelperExit {
  readonly exitCode: number;
  readonly signal?: number;
  readonly lost?: boolean;
}
const disposable = <T>(set: Set<Listener<T>>, listener: Listener<T>) => {
  set.add(listener);
  return { dispose: () => void set.delete(listener) };
};

/** The members of node-pty's UnixTerminal that PtySession relies on, over our own terminal. */
class HelperTerminal {
  readonly pid: number;
  readonly _fd: number;
  readonly _pty: string;
  readonly _socket: ReadStream;
  readonly _writeStream = { _writeQueue: [] as { buffer: Buffer; offset: number }[] };
  /** Set once the program has exited (PtySession watches it to drain what is left). */
  _boundClose = false;
  readonly #native: Native;
  readonly #dataListeners = new Set<Listener<Buffer>>();
  readonly #exitListeners = new Set<Listener<HelperExit>>();
  #exit: HelperExit | undefined;
  #closed = false;
  #writeRetry: NodeJS.Timeout | undefined;
  #watch: NodeJS.Timeout | undefined;

  constructor(pid: number, master: number, slavePath: string, native: Native) {
    this.pid = pid;
    this._fd = master;
    this._pty = slavePath;
    this.#native = native;
    this._socket = new ReadStream(master);
    this._socket.on('data', (data: Buffer) => {
      for (const listener of this.#dataListeners) listener(data);
    });
    // EIO: every slave side is closed (the program and whatever it left are gone).
    this._socket.on('error', () => this._socket.destroy());
    this._socket.on('close', () => {
      this.#closed = true;
      this.#finish();
    });
  }

  onData(listener: Listener<Buffer>) {
    return disposable(this.#dataListeners, listener);
  }

  onExit(listener: Listener<HelperExit>) {
    return disposable(this.#exitListeners, listener);
  }

  /** Reported by the helper (or, neither known, by watchLeader): the output may still be draining. */
  programExited(code: number | null, signal: string | null): void {
    if (this.#exit !== undefined) return;
    const signalNumber = signal === null ? 0 : (osConstants.signals[signal as NodeJS.Signals] ?? 0);
    this.#exit = { exitCode: code ?? 0, signal: signalNumber, lost: code === null && signal === null };
    this._boundClose = true;
    // A job the program left behind may hold the terminal open: do not wait for it for long.
    setTimeout(() => this._socket.destroy(), CLOSE_TIMEOUT_MS).unref();
    this.#finish();
  }

  #finish(): void {
    if (!this.#closed || this.#exit === undefined) return;
    if (this.#writeRetry !== undefined) clearTimeout(this.#writeRetry);
    if (this.#watch !== undefined) clearInterval(this.#watch);
    this._writeStream._writeQueue.length = 0;
    const exit = this.#exit;
    for (const listener of this.#exitListeners) listener(exit);
    this.#exitListeners.clear();
    this.#dataListeners.clear();
  }

  /** The helper is gone: poll for the program's end (its exit status is then unknown). */
  watchLeader(): void {
    this.#watch = setInterval(() => {
      if (!processAlive(this.pid)) this.programExited(null, null);
    }, 100);
  }

  write(data: string | Buffer): void {
    const buffer = Buffer.from(data);
    if (buffer.length === 0 || this.#closed) return;
    this._writeStream._writeQueue.push({ buffer, offset: 0 });
    if (this._writeStream._writeQueue.length === 1) this.#flushWrites();
  }

  readonly #flushWrites = (): void => {
    this.#writeRetry = undefined;
    const queue = this._writeStream._writeQueue;
    for (let task = queue[0]; task !== undefined; task = queue[0]) {
      try {
        task.offset += writeSync(this._fd, task.buffer, task.offset);
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') return void (queue.length = 0);
      }
      if (task.offset < task.buffer.length) {
        this.#writeRetry = setTimeout(this.#flushWrites, 5); // the program is not reading
        return;
      }
      queue.shift();
    }
  };

  resize(cols: number, rows: number): void {
    this.#native.resize(this._fd, cols, rows);
  }

  pause(): void {
    this._socket.pause();
  }

  resume(): void {
    this._socket.resume();
  }
}
