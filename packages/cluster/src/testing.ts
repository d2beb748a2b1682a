// @aleph/cluster/testing: starts a real nats-server with JetStream on a free loopback port and a
// temp store, for tests and benches. stop() ends it (and waits); restart() keeps the store and port.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer, connect as tcpConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface NatsServer {
  readonly url: string;
  readonly port: number;
  readonly storeDir: string;
  /** SIGKILL (crash) or SIGTERM, then wait until the process is gone. */
  stop(signal?: NodeJS.Signals): Promise<void>;
  /**
   * Stops it (`signal`, default SIGTERM; SIGKILL: a crash), waits `downMs` (default 0), and starts
   * it again with the same store and port.
   */
  restart(downMs?: number, signal?: NodeJS.Signals): Promise<void>;
  /** Removes the store too. */
  dispose(): Promise<void>;
}

/** The nats-server binary: `NATS_SERVER`, else Debian's; undefined when there is none. */
export function natsServerBinary(): string | undefined {
  for (const path of [
    process.env.NATS_SERVER,
    '/usr/sbin/nats-server',
    '/usr/bin/nats-server',
    '/usr/local/bin/nats-server',
  ])
    if (path !== undefined && path !== '' && existsSync(path)) return path;
  return undefined;
}

async function freePort(): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

async function waitForPort(port: number, child: ChildProcess, deadlineMs = 10_000): Promise<void> {
  const until = Date.now() + deadlineMs;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`nats-server exited with ${child.exitCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const socket = tcpConnect(port, '127.0.0.1');
      socket.once('connect', () => (socket.destroy(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`nats-server did not listen on ${port}`);
}

export async function startNatsServer(
  options: { binary?: string; extraArgs?: string[] } = {},
): Promise<NatsServer> {
  const binary = options.binary ?? natsServerBinary() ?? 'nats-server';
  const storeDir = mkdtempSync(join(tmpdir(), 'aleph-nats-'));
  const port = await freePort();
  let child: ChildProcess | undefined;
  const start = async (): Promise<void> => {
    child = spawn(
      binary,
      ['-a', '127.0.0.1', '-p', String(port), '-js', '-sd', storeDir, ...(options.extraArgs ?? [])],
      {
        stdio: 'ignore',
      },
    );
    await waitForPort(port, child);
  };
  const stop = async (signal: NodeJS.Signals = 'SIGTERM'): Promise<void> => {
    const running = child;
    child = undefined;
    if (running === undefined || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    running.kill(signal);
    const timer = setTimeout(() => running.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  };
  await start();
  return {
    url: `nats://127.0.0.1:${port}`,
    port,
    storeDir,
    stop,
    restart: async (downMs = 0, signal: NodeJS.Signals = 'SIGTERM') => {
      await stop(signal);
      if (downMs > 0) await new Promise((resolve) => setTimeout(resolve, downMs));
      await start();
    },
    dispose: async () => {
      await stop();
      rmSync(storeDir, { recursive: true, force: true });
    },
  };
}
