// The one place that reads node-pty's private fields. node-pty 1.1.0 (pinned) keeps on its
// UnixTerminal what PtySession needs and nothing public exposes: the master's descriptor (`_fd`,
// to read a flood in bulk and write without a thread hop), its read stream (`_socket`), the slave's
// path (`_pty`, held open so the tail is not lost), the write queue it retries on EAGAIN
// (`_writeStream._writeQueue`), and `_boundClose`, set when it learns the program exited. The spawn
// helper's terminal (spawner.ts) offers the same members. `missingInternals` names what is not
// where it was: node-pty-internals.test.ts fails on an upgrade that moves any of them.
import type { IPty } from 'node-pty';

export interface WriteTask {
  buffer: Buffer;
  offset: number;
}

export interface TerminalInternals {
  /** The master side, read and written directly. */
  readonly fd: number;
  /** node-pty's stream on it: bytes it holds, and whether it closed (the fd may be reused then). */
  readonly socket: { readonly readableLength: number; readonly destroyed: boolean } | undefined;
  /** The slave side's path. */
  readonly slavePath: string | undefined;
  /** A descriptor of the slave side already open, to hold instead of opening the path (the spawn helper's terminal). */
  readonly slaveFd?: number | undefined;
}

interface Private {
  _fd?: unknown;
  _socket?: unknown;
  _pty?: unknown;
  _slaveFd?: unknown;
  _writeStream?: { _writeQueue?: unknown };
}

/** The master descriptor, its stream and the slave's path; undefined where they are not (Windows). */
export function internalsOf(pty: IPty): TerminalInternals | undefined {
  const fields = pty as unknown as Private;
  if (process.platform === 'win32' || typeof fields._fd !== 'number') return undefined;
  const socket = fields._socket as TerminalInternals['socket'];
  return {
    fd: fields._fd,
    socket: typeof socket?.destroyed === 'boolean' ? socket : undefined,
    slavePath: typeof fields._pty === 'string' ? fields._pty : undefined,
    ...(typeof fields._slaveFd === 'number' ? { slaveFd: fields._slaveFd } : {}),
  };
}

/** node-pty's EAGAIN retry queue (oldest first), if it has one where expected. */
export function writeQueueOf(pty: IPty): WriteTask[] | undefined {
  const queue = (pty as unknown as Private)._writeStream?._writeQueue;
  return Array.isArray(queue) ? (queue as WriteTask[]) : undefined;
}

/**
 * Calls `onExit` when node-pty learns the program exited (it sets `_boundClose` to true, then
 * waits up to 200 ms for the master to close): the moment to read what is left.
 */
export function whenProgramExits(pty: IPty, onExit: () => void): void {
  let boundClose: unknown = (pty as unknown as { _boundClose?: unknown })._boundClose;
  // Learned before the caller asked (the spawn helper can report an exit with its answer).
  if (boundClose === true) queueMicrotask(onExit);
  Object.defineProperty(pty, '_boundClose', {
    configurable: true,
    get: () => boundClose,
    set: (value: unknown) => {
      boundClose = value;
      if (value === true) onExit();
    },
  });
}

/** What this adapter expects and does not find on a running UnixTerminal: [] when all is there. */
export function missingInternals(pty: IPty): string[] {
  const fields = pty as unknown as Private & { _boundClose?: unknown };
  const internals = internalsOf(pty);
  return [
    ...(internals === undefined ? ['_fd'] : []),
    ...(internals?.socket === undefined ? ['_socket'] : []),
    ...(internals?.slavePath === undefined ? ['_pty'] : []),
    ...(writeQueueOf(pty) === undefined ? ['_writeStream._writeQueue'] : []),
    ...('_boundClose' in fields ? [] : ['_boundClose']),
  ];
}
