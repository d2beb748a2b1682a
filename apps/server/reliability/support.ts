// Shared parts of the reliability suite: a real server process per file, raw sockets for frames the
// typed client would never send, process counting by a marker in argv, and the suite's tally.
import { readdirSync, readFileSync } from 'node:fs';
import WebSocket from 'ws';
import { startServerProcess as start, type ServerProcess } from '../test/server-process.js';

export type { ServerProcess };

// A case that times out never reaches its `finally`: every server this file started is killed when
// the test worker exits, so a wedged server (the very fault under test) never outlives the suite.
const started = new Set<ServerProcess>();
process.once('exit', () => {
  for (const server of started) if (server.child.exitCode === null) server.child.kill('SIGKILL');
});

export async function startServerProcess(
  config: string,
  env: NodeJS.ProcessEnv = {},
): Promise<ServerProcess> {
  const server = await start(config, env);
  started.add(server);
  server.child.once('exit', () => started.delete(server));
  return server;
}

/** What the suite did, printed as one line when a file ends. */
export const tally = { cases: 0, faults: 0, bytesChecked: 0, processesLeft: 0 };

export function summary(file: string): string {
  return `[reliability] ${file}: ${tally.cases} cases, ${tally.faults} faults injected, ${tally.bytesChecked} bytes checked, ${tally.processesLeft} processes left`;
}

/** Pids of live processes whose command line contains `marker` (zombies do not count). */
export function processesWith(marker: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (!cmdline.includes(marker)) continue;
      const state = /^State:\s+(\S)/m.exec(readFileSync(`/proc/${entry}/status`, 'utf8'))?.[1];
      if (state !== 'Z') found.push(Number(entry));
    } catch {
      // The process ended while we looked.
    }
  }
  return found;
}

/** Waits until no process carries `marker`, up to `ms`; returns how many are left. */
export async function survivorsAfter(marker: string, ms: number): Promise<number[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = processesWith(marker);
    if (left.length === 0 || Date.now() >= deadline) return left;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export function killAll(pids: readonly number[]): void {
  for (const pid of pids) {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
}

/** The server's resident set, in bytes. */
export function rssOf(pid: number): number {
  const kib = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  return Number(kib ?? 0) * 1024;
}

/** The socket's URL from whatever the server printed (ws://host:port/ws or an http page URL). */
export function socketUrl(server: ServerProcess): string {
  const printed = new URL(server.url);
  return `ws://${printed.host}/ws`;
}

export interface RawSocket {
  readonly socket: WebSocket;
  /** Every frame received, parsed (or the raw text when it is not JSON). */
  readonly frames: unknown[];
  /** Resolves with the response whose id is `id`. */
  response(id: number | string, timeoutMs?: number): Promise<Record<string, any>>;
  send(frame: unknown): void;
  close(): Promise<void>;
}

export async function rawSocket(server: ServerProcess): Promise<RawSocket> {
  const socket = new WebSocket(socketUrl(server), 'aleph.v1', {
    headers: { authorization: `Bearer ${server.token}` },
  });
  const frames: unknown[] = [];
  const waiters = new Map<string, (frame: Record<string, any>) => void>();
  socket.on('message', (data: Buffer) => {
    let frame: unknown;
    try {
      frame = JSON.parse(data.toString());
    } catch {
      frame = data.toString();
    }
    frames.push(frame);
    const id = (frame as { id?: unknown } | null)?.id;
    if (id !== undefined && id !== null) waiters.get(String(id))?.(frame as Record<string, any>);
  });
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('error', reject);
  });
  return {
    socket,
    frames,
    response(id, timeoutMs = 5000) {
      const existing = frames.find((frame) => (frame as { id?: unknown } | null)?.id === id);
      if (existing) return Promise.resolve(existing as Record<string, any>);
      return new Promise((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`no response to ${String(id)} in ${timeoutMs} ms`)),
          timeoutMs,
        );
        waiters.set(String(id), (frame) => {
          clearTimeout(timer);
          resolve(frame);
        });
      });
    },
    send(frame) {
      socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame));
    },
    close() {
      if (socket.readyState === WebSocket.CLOSED) return Promise.resolve();
      return new Promise((resolve) => {
        socket.once('close', () => resolve());
        socket.terminate();
      });
    },
  };
}

/** `pty.list` must answer within 1 s: the server is not wedged. */
export async function assertAnswering(server: ServerProcess): Promise<void> {
  const socket = await rawSocket(server);
  try {
    socket.send({ jsonrpc: '2.0', id: 'alive', method: 'pty.list', params: {} });
    const reply = await socket.response('alive', 1000);
    if (!('result' in reply)) throw new Error(`pty.list failed: ${JSON.stringify(reply)}`);
  } finally {
    await socket.close();
  }
}
