// The server's side of the watchdog (watchdog.c, built into dist/native by the package's build):
// a tiny process that holds a pipe from this one and, when the pipe closes because this process is
// gone by any means (SIGKILL included), ends every terminal still registered with it. Every spawn
// registers its session here, on every platform and whichever way it was spawned; a session is
// forgotten once its processes have ended. If the watchdog dies, the next registration restarts it.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

/** From src/internal (tests) and dist/internal alike, this is the package's dist/native. */
export const NATIVE_DIR = fileURLToPath(new URL('../../dist/native/', import.meta.url));
const BINARY = `${NATIVE_DIR}aleph-pty-watchdog`;

const watched = new Set<number>();
let watchdog: ChildProcess | undefined;
let missingWarned = false;
/** Restarts left: a watchdog that cannot stay up must not be restarted forever. */
let restarts = 10;

function start(): ChildProcess | undefined {
  if (process.platform === 'win32') return undefined; // no process groups: ConPTY ends with its console
  if (!existsSync(BINARY)) {
    if (!missingWarned) {
      missingWarned = true;
      process.emitWarning(
        `@aleph/pty: ${BINARY} is missing (build the package): a killed server would leave its terminals running`,
      );
    }
    return undefined;
  }
  // Its own session, so a Ctrl-C or hangup meant for the server's process group does not reach it.
  const child = spawn(BINARY, [], { stdio: ['pipe', 'ignore', 'ignore'], detached: true });
  child.on('error', () => {});
  child.stdin?.on('error', () => {}); // EPIPE if it died: 'exit' restarts it
  child.once('exit', () => {
    if (watchdog !== child) return;
    watchdog = undefined;
    // Killed while terminals run: a new one takes them over.
    if (watched.size > 0 && restarts > 0) {
      restarts -= 1;
      watchdog = start();
    }
  });
  // It must not keep this process alive; it goes when this process does (its stdin closes).
  child.unref();
  (child.stdin as unknown as { unref(): void } | null)?.unref();
  if (watched.size > 0) child.stdin?.write([...watched].map((pid) => `+${pid}\n`).join(''));
  return child;
}

/** Starts the watchdog now (a PtyManager does, when constructed), off the first spawn's path. */
export function prepareWatchdog(): void {
  watchdog ??= start();
}

/** From now on, if this process dies, the session led by `pid` is ended with it. */
export function watchSession(pid: number): void {
  if (watched.has(pid)) return;
  watched.add(pid);
  if (watchdog === undefined)
    watchdog = start(); // writes every watched pid, this one included
  else watchdog.stdin?.write(`+${pid}\n`);
}

/** The session's processes have all ended: its pid may be reused, so the watchdog must let go. */
export function unwatchSession(pid: number): void {
  if (watched.delete(pid)) watchdog?.stdin?.write(`-${pid}\n`);
}
