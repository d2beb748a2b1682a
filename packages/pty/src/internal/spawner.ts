// Spawning without forking this process (Linux). node-pty starts each program with forkpty(3): a
// fork of the whole server, whose pages are then copy-on-write, so after every spawn the server's
// first write to each page faults (on this VM ~16 µs a page: 64 MB written after a spawn took
// 1.6 s instead of 3 ms), and the spawn itself blocks for 10–30 ms. So here the server opens the
// terminal itself (openpty: no fork) and a small native helper (spawner.c, 1.5 MB resident), started
// once, forks and runs each program on it as a session leader with the terminal as its controlling
// tty, as forkpty would. Requests go to the helper through a FIFO, in order, each whole: written as
// the pipe drains (start: the event loop never waits for the helper), or at once by spawn(). It
// answers on another FIFO, read as a stream, or synchronously by spawn(), whose pid stays
// synchronous, within ANSWER_TIMEOUT_MS; exits come back as lines on the helper's stdout. The result mimics the parts of node-pty's UnixTerminal that PtySession uses.
// Wherever any of this is missing, node-pty spawns. The helper is its programs' subreaper: what
// leaves a terminal's session and loses its parent comes to it (see spawner.c and endEscapees).
import { execFileSync, spawn as spawnProcess, type ChildProcess } from 'node:child_process';
import {
  accessSync,
  closeSync,
  constants,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  statSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { delimiter, isAbsolute, join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { Socket } from 'node:net';
import { ReadStream } from 'node:tty';
import type { IPty } from 'node-pty';
import { escapeesOf, processAlive, tableFor, type Scope } from './process-tree.js';
import { readProcess } from './process-table.js';
import { forgetSpawned, recordSpawned, signalOwned } from './signal-guard.js';
import { markUnusable, nativeHelper } from './native-helpers.js';
import { readBuffer } from './read-turns.js';
/**
 * How long a spawn waits for the helper's answer (the event loop is blocked meanwhile). It answers
 * once the program has exec'd: measured 3.8 ms median, 20 ms p99, 30 ms max over 300 spawns at a
 * load average of 18 on 2 cores. Past it, this spawn goes to node-pty and the late answer's program
 * is killed; a helper that misses STRIKES answers in a row, or is stopped or gone, is given up for
 * good. The first answer may wait for the helper to boot too (a spawn right after PtyManager()).
 */
const ANSWER_TIMEOUT_MS = 250;
const FIRST_ANSWER_TIMEOUT_MS = 1000;
const STRIKES = 3;
/**
 * Spawns that do not block are answered one after another: the helper is given up on (each of them
 * goes to node-pty) only if it answers none for this long. A stopped or gone helper is seen sooner.
 */
const LATER_ANSWER_TIMEOUT_MS = 10_000;
const WATCH_MS = 100;
/** Like node-pty: after the program exits, how long its output may take to drain before exit is reported. */
const CLOSE_TIMEOUT_MS = 200;

interface Native {
  open(cols: number, rows: number): { master: number; slave: number; pty: string };
  resize(fd: number, cols: number, rows: number): void;
}

interface Helper {
  readonly process: ChildProcess;
  /** Set: a helper without a pid never started, and is never tracked. */
  readonly pid: number;
  readonly path: string;
  readonly stdout: { ref(): void; unref(): void };
  /** The request FIFO (non-blocking), and a stream on it: requests queued in order, written as it drains. */
  readonly request: number;
  readonly requests: Socket;
  readonly reply: number;
  readonly native: Native;
  /** Running programs by pid, until the helper reports their exit. */
  readonly terminals: Map<number, HelperTerminal>;
  /** Its other children's sessions, as last read (see sessionBelow). */
  readonly sessions: Map<number, number>;
  /** The last request's id; replies come in order, so one with a smaller id is a late one. */
  lastId: number;
  /** Answers in a row that came too late. */
  strikes: number;
  /** Whether it ever answered: one that dies before its first answer is a broken binary. */
  answered: boolean;
  /** Reply text read but not yet a whole line. */
  replies: string;
  /** The reply FIFO as a stream, for spawns that wait without blocking; and those spawns, by id. */
  readonly replyStream: Socket;
  readonly waiting: Map<number, (answer: Answer) => void>;
  watch: NodeJS.Timeout | undefined;
  /** Armed while spawns wait, reset by each answer: see LATER_ANSWER_TIMEOUT_MS. */
  quiet: NodeJS.Timeout | undefined;
}

let helper: Helper | null | undefined; // undefined: start one; null: not available here, or no longer
/** Every helper still running, retired ones included: each holds its programs' escapees. */
const running = new Set<Helper>();
/** A helper that died or was given up is replaced on the next spawn, this many times at most. */
let replacements = 3;

/** This helper is done for: the next spawn starts another one (or, past the budget, node-pty spawns). */
function retire(started: Helper): void {
  if (helper !== started) return;
  helper = replacements > 0 ? undefined : null;
  replacements -= 1;
}

/**
 * Programs that passed every check before a spawn (see provenSpawnable), by path, with what they were
 * then: device, inode, mode, owner, ctime (which any chmod, chown or write moves) and size. Until one
 * of these changes, locateExecutable takes the program with one stat, and its checks are not redone.
 */
const proven = new Map<string, string>();
const MAX_PROVEN = 1024;
const identityOf = (stats: Stats): string =>
  `${stats.dev}:${stats.ino}:${stats.mode}:${stats.uid}:${stats.gid}:${stats.ctimeMs}:${stats.size}`;

/** A program found, what it was when found, and whether it passed every check before as that. */
export interface Located {
  readonly path: string;
  readonly identity: string;
  readonly proven: boolean;
}

/** Where `command` runs from: itself if it has a slash (relative to `cwd`), else the first on PATH. */
export function locateExecutable(command: string, cwd: string, env: NodeJS.ProcessEnv): Located | undefined {
  const candidates = command.includes('/')
    ? [isAbsolute(command) ? command : join(cwd, command)]
    : (env['PATH'] ?? '')
        .split(delimiter)
        .filter(Boolean)
        .map((dir) => join(dir, command));
  for (const path of candidates) {
    try {
      const stats = statSync(path);
      if (!stats.isFile()) continue;
      const identity = identityOf(stats);
      if (proven.get(path) === identity) return { path, identity, proven: true };
      accessSync(path, constants.X_OK);
      return { path, identity, proven: false };
    } catch {
      // missing, out of reach, or not executable by us (mode, ACL, a noexec mount): the next one
    }
  }
  return undefined;
}

/**
 * `found` passed every check: until it changes from what it was when found (a change after that
 * is a change too), locateExecutable says so with one stat.
 */
export function provenSpawnable(found: Located): void {
  if (proven.size >= MAX_PROVEN) proven.clear();
  proven.set(found.path, found.identity);
}

function startHelper(): Helper | null {
  if (process.platform !== 'linux' || process.env['ALEPH_PTY_FORK'] === '1') return null;
  const binary = nativeHelper('spawner');
  if (binary.kind === 'unusable' || !locateExecutable('mkfifo', '/', process.env)) return null;
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
    // finds EAGAIN, not EOF, until an answer is there: replies are polled, with a deadline. Neither
    // blocks: a full request pipe (the helper busy) is written as it drains, never waited for.
    const request = openSync(requestPath, constants.O_RDWR | constants.O_NONBLOCK);
    const reply = openSync(replyPath, constants.O_RDWR | constants.O_NONBLOCK);
    // Its own process group, so a SIGKILL of the server's whole group leaves it to end the escapees.
    const child = spawnProcess(binary.path, [requestPath, replyPath], {
      stdio: ['pipe', 'pipe', 'inherit'],
      detached: true,
    });
    child.on('error', () => {});
    // No pid: it never started (EAGAIN, EMFILE, no exec bit…). Never tracked, never signalled.
    if (!recordSpawned(child.pid)) {
      for (const fd of [request, reply]) closeQuietly(fd);
      rmSync(dir, { recursive: true, force: true });
      return null;
    }
    const stdout = child.stdout as unknown as NodeJS.ReadableStream & { ref(): void; unref(): void };
    // Answers read as they come (the loop runs), or by a blocked spawn's own reads (it does not).
    const replyStream = new Socket({ fd: reply, readable: true, writable: false });
    replyStream.on('error', () => {});
    replyStream.unref();
    // Requests queued in order, each written whole (a partial write's rest goes first) as the pipe
    // drains. We hold the FIFO's read end too, so a write never fails for want of a reader.
    const requests = new Socket({ fd: request, readable: false, writable: true });
    requests.on('error', () => {});
    requests.unref();
    const started: Helper = {
      process: child,
      pid: child.pid as number,
      path: binary.path,
      stdout,
      request,
      requests,
      reply,
      native,
      terminals: new Map(),
      sessions: new Map(),
      lastId: 0,
      strikes: 0,
      answered: false,
      replyStream,
      waiting: new Map(),
      watch: undefined,
      quiet: undefined,
      replies: '',
    };
    let lines = '';
    stdout.setEncoding('utf8').on('data', (data: string) => {
      lines += data;
      for (let at; (at = lines.indexOf('\n')) >= 0; lines = lines.slice(at + 1)) {
        // "<pid> c <code> <left>" or "<pid> s <signal number> <left>" (see spawner.c)
        const [pidText = '', kind, numberText = '', left] = lines.slice(0, at).split(' ');
        const [pid, number] = [Number(pidText), Number(numberText)];
        // The helper answers a spawn before it can report that program's exit, but the two come on
        // different pipes: an exit may be read first. Its answer is in the reply FIFO then; take it.
        if (!started.terminals.has(pid) && started.waiting.size > 0) readReplies(started);
        started.terminals
          .get(pid)
          ?.programExited(kind === 'c' ? number : null, kind === 's' ? number : null, left === '0');
        started.terminals.delete(pid);
        if (started.terminals.size === 0) started.stdout.unref();
      }
    });
    replyStream.setEncoding('utf8').on('data', (text: string) => {
      started.replies += text;
      dispatch(started);
    });
    running.add(started);
    child.once('exit', () => {
      running.delete(started);
      forgetSpawned(started.pid);
      retire(started);
      readReplies(started); // what it answered before it died
      // The rest, sent or still queued, is never answered: each of those starts fails.
      for (const waiting of [...started.waiting.values()]) waiting({ kind: 'lost' });
      requests.destroy(); // drops what was queued, closes the request FIFO
      replyStream.destroy(); // closes the reply FIFO
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

/** Stopped (SIGSTOP, a debugger) or gone (dead, its exit not seen yet): it will not answer. */
function helperState(started: Helper): 'stopped' | 'gone' | 'running' {
  try {
    const state = /^\d+ \(.*\) (.)/.exec(readFileSync(`/proc/${started.pid}/stat`, 'utf8'))?.[1] ?? '';
    return 'Tt'.includes(state) ? 'stopped' : 'ZX'.includes(state) ? 'gone' : 'running';
  } catch {
    return 'gone';
  }
}

const helperStuck = (started: Helper): boolean => helperState(started) !== 'running';

/** The request's fields, NUL-terminated, after their length: see spawner.c. */
function encodeRequest(
  id: number,
  tty: string,
  cwd: string,
  priority: { nice: number; cgroup: string },
  argv: readonly string[],
  env: string[],
): Buffer {
  const fields = [
    String(id),
    tty,
    cwd,
    String(priority.nice),
    priority.cgroup,
    argv[0] ?? '',
    String(argv.length),
    ...argv,
    String(env.length),
    ...env,
  ];
  const body = Buffer.from(fields.map((field) => `${field}\0`).join(''));
  return Buffer.concat([Buffer.from(`${body.length}\n`), body]);
}

/** `late`: not answered in time (node-pty spawns instead); `lost`: the helper died before answering. */
type Answer =
  | { kind: 'ran'; pid: number; startTime: number | undefined }
  | { kind: 'failed'; why: string }
  | { kind: 'late' }
  | { kind: 'lost' };

/**
 * Hands out the whole answers read so far: to `waiting` (a blocked spawn's id: returned), to a
 * spawn waiting without blocking, or, if nobody waits for it any more (it came too late and that
 * spawn went to node-pty), its program is killed.
 */
function dispatch(started: Helper, waiting?: number): Answer | undefined {
  for (let at; (at = started.replies.indexOf('\n')) >= 0;) {
    const [answerId, pid, ...why] = started.replies.slice(0, at).split(' ');
    started.replies = started.replies.slice(at + 1);
    started.answered = true;
    if (started.waiting.size > 0) awaitProgress(started);
    // A program's start time (its pid's identity) comes with it: 0 or none, unknown (read /proc then).
    const answer: Answer =
      pid === 'E'
        ? { kind: 'failed', why: why.join(' ') }
        : { kind: 'ran', pid: Number(pid), startTime: Number(why[0]) || undefined };
    if (Number(answerId) === waiting) return answer;
    const later = started.waiting.get(Number(answerId));
    if (later !== undefined) later(answer);
    else if (answer.kind === 'ran') killLate(answer.pid);
  }
  return undefined;
}

/** (Re)arms the deadline of the spawns waiting without blocking: see LATER_ANSWER_TIMEOUT_MS. */
function awaitProgress(started: Helper): void {
  clearTimeout(started.quiet);
  started.quiet = setTimeout(() => {
    for (const waiting of [...started.waiting.values()]) waiting({ kind: 'late' });
  }, LATER_ANSWER_TIMEOUT_MS);
}

/** Reads the answers already in the reply FIFO, without waiting, and hands them out (see dispatch). */
function readReplies(started: Helper): void {
  const buffer = Buffer.alloc(512);
  for (;;) {
    try {
      const read = readSync(started.reply, buffer, 0, buffer.length, null);
      if (read <= 0) break;
      started.replies += buffer.toString('utf8', 0, read);
    } catch {
      break; // EAGAIN: none left
    }
  }
  dispatch(started);
}

const nap = new Int32Array(new SharedArrayBuffer(4));

/**
 * Writes `request` now (the queue being empty), retrying while the pipe is full until `deadline`.
 * False if it could not be written in time: what part was written has its rest queued, so the
 * helper never reads half a request (its answer then finds nobody waiting: see dispatch).
 */
function sendNow(started: Helper, request: Buffer, deadline: number): boolean {
  for (let offset = 0; ;) {
    try {
      offset += writeSync(started.request, request, offset);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') return false;
    }
    if (offset === request.length) return true;
    if (performance.now() > deadline) {
      if (offset > 0) started.requests.write(request.subarray(offset));
      return false;
    }
    Atomics.wait(nap, 0, 0, 0.05);
  }
}

function ask(started: Helper, request: Buffer, id: number): Answer {
  const buffer = Buffer.alloc(512);
  const deadline = performance.now() + (id === 1 ? FIRST_ANSWER_TIMEOUT_MS : ANSWER_TIMEOUT_MS);
  if (!sendNow(started, request, deadline)) return { kind: 'late' };
  for (let tries = 1; ; tries += 1) {
    const answer = dispatch(started, id);
    if (answer !== undefined) return answer;
    try {
      started.replies += buffer.toString('utf8', 0, readSync(started.reply, buffer, 0, buffer.length, null));
      continue;
    } catch {
      // EAGAIN: not answered yet. The event loop is not running, so look at the helper directly.
    }
    if (performance.now() > deadline || (tries % 64 === 0 && helperStuck(started))) return { kind: 'late' };
    Atomics.wait(nap, 0, 0, 0.05);
  }
}

/**
 * Asks without blocking: the request is queued (written as the pipe drains), the answer comes
 * through the reply stream, or late (see LATER_ANSWER_TIMEOUT_MS). It is settled (`settleAnswer`:
 * the terminal registered) the moment it is read, so that an exit read right after it finds its
 * terminal.
 */
function askLater<T>(
  started: Helper,
  request: Buffer,
  id: number,
  settleAnswer: (answer: Answer) => T,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const done = (answer: Answer): void => {
      started.waiting.delete(id);
      if (started.waiting.size === 0) {
        clearInterval(started.watch);
        clearTimeout(started.quiet);
        started.replyStream.unref();
      }
      try {
        resolve(settleAnswer(answer));
      } catch (error) {
        reject(error instanceof Error ? error : new Error(String(error)));
      }
    };
    started.waiting.set(id, done);
    if (started.waiting.size === 1) {
      started.replyStream.ref();
      awaitProgress(started);
      // Stopped or gone, it will not answer: noticed within WATCH_MS, not at the deadline.
      started.watch = setInterval(() => {
        const state = helperState(started);
        if (state === 'running') return;
        readReplies(started); // what it answered before it stopped or died
        const answer = state === 'gone' ? ({ kind: 'lost' } as const) : ({ kind: 'late' } as const);
        for (const waiting of [...started.waiting.values()]) waiting(answer);
      }, WATCH_MS);
    }
    // A burst's requests go in one write (each write wakes the helper; under load that costs).
    if (started.requests.writableCorked === 0) {
      started.requests.cork();
      process.nextTick(() => started.requests.uncork());
    }
    started.requests.write(request);
  });
}

/** A program the helper ran for a spawn that went to node-pty meanwhile: a child of the helper. */
function killLate(pid: number): void {
  signalOwned([-pid, pid], 'SIGKILL');
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    // already closed
  }
}

/**
 * Ends what the helpers hold for no running terminal: processes that left their terminal's session
 * (setsid, a daemon's double fork) and, their parent gone, were re-parented to a helper. Once there
 * they cannot be told apart by terminal or manager, so all of them go (PtyManager.closeAll). HUP,
 * CONT and TERM; after `stepMs`, KILL again until none is left (one may fork meanwhile), bounded.
 */
export async function endEscapees(stepMs: number): Promise<void> {
  const signal = (name: NodeJS.Signals | 0): number => {
    if (running.size === 0) return 0;
    const table = [...running].flatMap((started) => tableFor(started.pid));
    const found = [...running].flatMap((started) =>
      escapeesOf(started.pid, new Set(started.terminals.keys()), table),
    );
    if (name !== 0) signalOwned(found.flat(), name, table);
    return found.length;
  };
  if (signal('SIGHUP') === 0) return;
  signal('SIGCONT'); // a stopped job would not act on TERM
  signal('SIGTERM');
  for (const deadline = Date.now() + stepMs; Date.now() < deadline;) {
    await delay(20);
    if (signal(0) === 0) return;
  }
  for (let round = 0; round < 100 && signal('SIGKILL') > 0; round++) await delay(10);
}

/**
 * What node-pty should run instead of a program, on Linux (its forkpty child closes no descriptor):
 * the helper's binary, which with `--exec FILE ARG…` closes every descriptor from 3 up and execs
 * FILE in place (same pid). Undefined elsewhere (macOS's posix_spawn closes them) or if not built.
 */
export function nodePtyWrapper(): string | undefined {
  const binary = process.platform === 'linux' ? nativeHelper('spawner') : undefined;
  return binary?.kind === 'usable' ? binary.path : undefined;
}

export interface HelperSpawnOptions {
  readonly cols: number;
  readonly rows: number;
  readonly cwd: string;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Added to the program's niceness before it runs (0: none): see PtySpawnOptions.nice. */
  readonly nice?: number | undefined;
  /** A cgroup the program joins first: see PtySpawnOptions.cgroup. */
  readonly cgroup?: string | undefined;
}

/**
 * Starts the helper now, in the background (a PtyManager does, when constructed), so that the first
 * spawn does not wait for it to boot. Idempotent.
 */
export function prepareSpawner(): void {
  if (helper === undefined) helper = startHelper();
}

interface Pending {
  readonly started: Helper;
  readonly term: { master: number; slave: number; pty: string };
  readonly id: number;
  readonly request: Buffer;
}

/** Opens the program's terminal and numbers its request, if a helper can be used here. */
function prepareRequest(
  file: string,
  args: readonly string[],
  options: HelperSpawnOptions,
): Pending | undefined {
  prepareSpawner();
  if (!helper) return undefined;
  const started = helper;
  const term = started.native.open(options.cols, options.rows);
  const env = Object.entries({ ...options.env, PWD: options.cwd })
    .filter((entry): entry is [string, string] => entry[1] !== undefined)
    .map(([name, value]) => `${name}=${value}`);
  const id = (started.lastId += 1);
  const priority = { nice: options.nice ?? 0, cgroup: options.cgroup ?? '' };
  const request = encodeRequest(id, term.pty, options.cwd, priority, [file, ...args], env);
  return { started, term, id, request };
}

/** The terminal the helper's answer gives, or undefined (node-pty spawns); throws if the program cannot start. */
function settle({ started, term }: Pending, answer: Answer): IPty | undefined {
  if (answer.kind !== 'ran') {
    closeQuietly(term.slave);
    closeQuietly(term.master); // hangs up its terminal: a program it may have started gets SIGHUP
    // The program itself cannot start (exec or chdir failed): node-pty would fail the same way.
    if (answer.kind === 'failed') throw new Error(answer.why);
    // A working helper died with this request sent or queued: whether the program ran is unknown,
    // so it is not started again (it must never run twice).
    if (answer.kind === 'lost' && started.answered)
      throw new Error('the spawn helper exited before answering; the program was not started again');
    if (!started.answered && readProcess(started.pid)?.zombie !== false) {
      // Gone before its first answer: the binary does not work here (nor as node-pty's wrapper).
      helper = null;
      markUnusable('spawner', `${started.path} exited before answering its first spawn`);
    }
    if ((started.strikes += 1) >= STRIKES || helperStuck(started)) {
      retire(started); // this spawn goes to node-pty; the next one starts a new helper
      signalOwned([started.pid], 'SIGKILL'); // it ignores the others
    }
    return undefined;
  }
  started.strikes = 0;
  // The program holds its side of the terminal now; ours goes to the PtySession (internalsOf's
  // slaveFd), which holds it until the program's output is all read.
  const terminal = new HelperTerminal(answer.pid, answer.startTime, term, started);
  started.terminals.set(answer.pid, terminal);
  started.stdout.ref(); // until the helper reports this exit, as node-pty's exit watch would
  return terminal as unknown as IPty;
}

/**
 * `file` on a terminal of our own, run by the helper, waiting for its answer with the event loop
 * blocked (see ANSWER_TIMEOUT_MS); undefined where the helper cannot be used or answered late
 * (node-pty spawns then). Throws, with the helper's reason, if the program cannot be started.
 */
export function spawnWithoutFork(
  file: string,
  args: readonly string[],
  options: HelperSpawnOptions,
): IPty | undefined {
  prepareSpawner();
  // Requests are queued (a burst of start()): this one cannot go first, nor wait here for them.
  if (helper && helper.requests.writableLength > 0) return undefined;
  const pending = prepareRequest(file, args, options);
  return pending && settle(pending, ask(pending.started, pending.request, pending.id));
}

/** The same without blocking: the answer is read when it comes (see LATER_ANSWER_TIMEOUT_MS). */
export async function spawnWithoutForkLater(
  file: string,
  args: readonly string[],
  options: HelperSpawnOptions,
): Promise<IPty | undefined> {
  const pending = prepareRequest(file, args, options);
  return (
    pending && askLater(pending.started, pending.request, pending.id, (answer) => settle(pending, answer))
  );
}

/** The spawn helper below which `pty`'s processes are, and its terminals, if a helper spawned it. */
export function helperOf(pty: IPty): Scope | undefined {
  return pty instanceof HelperTerminal ? pty.scope : undefined;
}

/** The program's start time as the helper read it when it answered (undefined: read /proc). */
export function startTimeOf(pty: IPty): number | undefined {
  return pty instanceof HelperTerminal ? pty.startTime : undefined;
}

type Listener<T> = (value: T) => void;
/**
 * node-pty's exit event, and `lost`: the helper died first, so the status is unknown (not 0);
 * `sessionGone`: when the helper reaped the program, nothing of its session was left below it.
 */
export interface HelperExit {
  readonly exitCode: number;
  readonly signal?: number;
  readonly lost?: boolean;
  readonly sessionGone?: boolean;
}
const disposable = <T>(set: Set<Listener<T>>, listener: Listener<T>) => {
  set.add(listener);
  return { dispose: () => void set.delete(listener) };
};

/** The members of node-pty's UnixTerminal that PtySession relies on, over our own terminal. */
class HelperTerminal {
  readonly pid: number;
  /** Its start time (clock ticks after boot), as the helper read it before it could be reaped. */
  readonly startTime: number | undefined;
  /** The helper that runs it: its processes are below that one (see sessionBelow). */
  readonly helper: number;
  readonly scope: Scope;
  readonly _fd: number;
  readonly _pty: string;
  /** Our descriptor of the slave side, for the PtySession to hold (see internalsOf). */
  readonly _slaveFd: number;
  readonly _socket: ReadStream;
  readonly _writeStream = { _writeQueue: [] as { buffer: Buffer; offset: number }[] };
  /** Set once the program has exited (PtySession watches it to drain what is left). */
  _boundClose = false;
  readonly #native: Native;
  readonly #dataListeners = new Set<Listener<Buffer>>();
  readonly #exitListeners = new Set<Listener<HelperExit>>();
  #exit: HelperExit | undefined;
  #closed = false;
  #paused = false;
  #writeRetry: NodeJS.Timeout | undefined;
  #watch: NodeJS.Timeout | undefined;

  constructor(
    pid: number,
    startTime: number | undefined,
    { master, slave, pty }: Pending['term'],
    started: Helper,
  ) {
    this.pid = pid;
    this.startTime = startTime;
    this.helper = started.pid;
    this.scope = { helper: started.pid, leaders: started.terminals, sessions: started.sessions };
    this._fd = master;
    this._pty = pty;
    this._slaveFd = slave;
    this.#native = started.native;
    // Each read lands in the shared read buffer (no allocation, no stream in between); listeners
    // get a view of it and copy what they keep before returning (PtySession does). Paused, the
    // next read is the last until resume (answering false stops the socket's reads).
    const onread = {
      buffer: readBuffer,
      callback: (read: number, buffer: Uint8Array): boolean => {
        const data = Buffer.from(buffer.buffer, buffer.byteOffset, read);
        for (const listener of this.#dataListeners) listener(data);
        return !this.#paused;
      },
    };
    this._socket = new ReadStream(master, { onread } as ConstructorParameters<typeof ReadStream>[1]);
    this._socket.resume();
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
  programExited(code: number | null, signal: number | null, sessionGone = false): void {
    if (this.#exit !== undefined) return;
    const lost = code === null && signal === null;
    this.#exit = { exitCode: code ?? 0, signal: signal ?? 0, lost, sessionGone: sessionGone && !lost };
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

  /** Stops reading after the next read (if one comes): like node-pty's stream, one read late. */
  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this._socket.resume();
  }
}
