// The server's side of the watchdog (watchdog.c, built into dist/native by the package's build):
// a tiny process that holds a pipe from this one and, when the pipe closes because this process is
// gone by any means (SIGKILL included), ends every terminal still registered with it. Every spawn
// registers its session here, on every platform and whichever way it was spawned; a session is
// forgotten once its processes have ended. If the watchdog dies, the next registration restarts it.
import { spawn, type ChildProcess } from 'node:child_process';
import { markUnusable, nativeHelper } from './native-helpers.js';
import { readProcess } from './process-table.js';
import { recordSpawned } from './signal-guard.js';

/** Registered session leaders: pid → start time (0 where unknown: not Linux). */
const watched = new Map<number, number>();
let watchdog: ChildProcess | undefined;
/** Restarts left: a watchdog that cannot stay up must not be restarted forever. */
let restarts = 10;

function start(): ChildProcess | undefined {
  if (process.platform === 'win32') return undefined; // no process groups: ConPTY ends with its console
  const binary = nativeHelper('watchdog'); // if unusable, the package's one warning said so
  if (binary.kind === 'unusable') return undefined;
  // Its own session, so a Ctrl-C or hangup meant for the server's process group does not reach it.
  const child = spawn(binary.path, [], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
  child.on('error', () => {});
  // No pid: it could not start (EAGAIN, EMFILE…). Not tracked; the next registration tries again.
  if (!recordSpawned(child.pid)) return undefined;
  child.stdin?.on('error', () => {}); // EPIPE if it died: 'exit' restarts it
  child.once('exit', (code) => {
    if (watchdog !== child) return;
    watchdog = undefined;
    // It ends by itself only when this process is gone (its pipe closed). An exit with a code while
    // this process runs says it cannot run here (a loader refusing it: exit 127), and it is not
    // started again; killed (a signal), it is.
    if (code !== null) {
      markUnusable('watchdog', `${binary.path} exited with code ${code} as soon as it started`);
      return;
    }
    // Killed while terminals run: a new one takes them over.
    if (watched.size > 0 && restarts > 0) {
      restarts -= 1;
      watchdog = start();
    }
  });
  // It must not keep this process alive; it goes when this process does (its stdin closes).
  child.unref();
  (child.stdin as unknown as { unref(): void } | null)?.unref();
  forgotten = ''; // a new watchdog never heard of them
  if (watched.size > 0)
    child.stdin?.write([...watched].map(([pid, started]) => `+${pid} ${started}\n`).join(''));
  return child;
}

/** Starts the watchdog now (a PtyManager does, when constructed), off the first spawn's path. */
export function prepareWatchdog(): void {
  watchdog ??= start();
}

/**
 * "-PID" lines not sent yet: each goes with the next registration's write (before it, so a pid
 * reused meanwhile is registered after it was forgotten), or within FORGET_MS. Until then the
 * watchdog still holds a session whose processes have all ended: harmless, as it signals nothing
 * of a session whose leader's pid now names another process (see watchdog.c).
 */
let forgotten = '';
let forgetTimer: NodeJS.Timeout | undefined;
const FORGET_MS = 1000;

function sendForgotten(): void {
  clearTimeout(forgetTimer);
  forgetTimer = undefined;
  const lines = forgotten;
  forgotten = '';
  if (lines !== '') send(lines);
}

/** One line to the watchdog; the lines of one event-loop turn (a burst of spawns) go in one write. */
function send(line: string): void {
  const stdin = watchdog?.stdin;
  if (!stdin) return;
  if (stdin.writableCorked === 0) {
    stdin.cork();
    process.nextTick(() => stdin.uncork());
  }
  stdin.write(line);
}

/**
 * From now on, if this process dies, the session led by `pid` is ended with it. `startTime`: read
 * already (else read here).
 */
export function watchSession(pid: number, startTime?: number): void {
  if (watched.has(pid) || !Number.isInteger(pid) || pid <= 1) return;
  // With its start time: the watchdog never takes a process that reused the pid for this session.
  const started = startTime ?? readProcess(pid)?.startTime ?? 0;
  watched.set(pid, started);
  if (watchdog === undefined)
    watchdog = start(); // writes every watched pid, this one included
  else {
    send(`${forgotten}+${pid} ${started}\n`);
    forgotten = '';
  }
}

/** The session's processes have all ended: its pid may be reused, so the watchdog must let go. */
export function unwatchSession(pid: number): void {
  if (!watched.delete(pid) || watchdog === undefined) return;
  forgotten += `-${pid}\n`;
  forgetTimer ??= setTimeout(sendForgotten, FORGET_MS).unref();
}
