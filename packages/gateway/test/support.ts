// Test helpers: a gateway on loopback with its own PtyManager, clients that get cleaned up, and
// process checks that ignore zombies.
import { PtyManager } from '@aleph/pty';
import { waitUntil as until } from '@aleph/pty/testing';
import { connectGateway, type GatewayClient, type PtyOutput } from '../src/client.js';
import { createGateway, type Gateway, type GatewayOptions } from '../src/index.js';

export const TOKEN = 'test-token-0123456789';

export interface Harness {
  gateway: Gateway;
  manager: PtyManager;
  connect(options?: { autoAck?: boolean; binary?: boolean }): Promise<GatewayClient>;
  dispose(): Promise<void>;
}

export async function startGateway(
  options: Partial<GatewayOptions> & { maxSessions?: number } = {},
): Promise<Harness> {
  const manager = new PtyManager({ killStepMs: 200, maxSessions: options.maxSessions ?? 64 });
  const gateway = await createGateway({ token: TOKEN, ptyManager: manager, ...options });
  const clients: GatewayClient[] = [];
  return {
    gateway,
    manager,
    async connect(connectOptions = {}) {
      const client = await connectGateway(gateway.url, { token: TOKEN, ...connectOptions });
      record(client);
      clients.push(client);
      return client;
    },
    async dispose() {
      await Promise.all(clients.map((client) => client.close()));
      await gateway.close();
    },
  };
}

export { processAlive as alive, waitUntil as until } from '@aleph/pty/testing';

// Output can arrive in the same socket read as the spawn result, before code awaiting that result
// runs: so each client records every session's output from the start, and outputOf reads that.
const recorded = new WeakMap<GatewayClient, Map<string, PtyOutput[]>>();
function record(client: GatewayClient): Map<string, PtyOutput[]> {
  let sessions = recorded.get(client);
  if (sessions === undefined) {
    const map = new Map<string, PtyOutput[]>();
    client.onOutput((output) => {
      const chunks = map.get(output.sessionId) ?? [];
      chunks.push(output);
      map.set(output.sessionId, chunks);
    });
    recorded.set(client, (sessions = map));
  }
  return sessions;
}

/** One session's output bytes, as they arrived over the socket (from the start, for harness clients). */
export function outputOf(client: GatewayClient, sessionId: string) {
  const sessions = record(client);
  const chunks = sessions.get(sessionId) ?? [];
  sessions.set(sessionId, chunks);
  const bytes = () => Buffer.concat(chunks.map((chunk) => chunk.data));
  return {
    chunks,
    bytes,
    text: () => bytes().toString('utf8'),
    waitFor: (pattern: RegExp, ms?: number) =>
      until(() => pattern.test(bytes().toString('utf8')), String(pattern), ms),
  };
}

/**
 * A WebSocket client written by hand over a TCP socket, for clients `ws` will not imitate: one that
 * sends frames and never reads what comes back (its socket is paused after the handshake).
 */
export async function silentClient(
  url: string,
  options: { token: string; headers?: Record<string, string> },
): Promise<{ send(text: string): void; read(onText: (text: string) => void): void; destroy(): void }> {
  const { hostname, port, pathname } = new URL(url);
  const { connect } = await import('node:net');
  const { randomBytes } = await import('node:crypto');
  const socket = connect({ host: hostname, port: Number(port) });
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const headers = {
    host: `${hostname}:${port}`,
    upgrade: 'websocket',
    connection: 'Upgrade',
    'sec-websocket-key': randomBytes(16).toString('base64'),
    'sec-websocket-version': '13',
    'sec-websocket-protocol': 'aleph.v1',
    authorization: `Bearer ${options.token}`,
    ...options.headers,
  };
  socket.write(
    `GET ${pathname} HTTP/1.1\r\n${Object.entries(headers)
      .map(([name, value]) => `${name}: ${value}\r\n`)
      .join('')}\r\n`,
  );
  let pending = Buffer.alloc(0);
  const head = await new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      const end = pending.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      socket.pause();
      const text = pending.toString('latin1', 0, end);
      pending = pending.subarray(end + 4);
      resolve(text);
    };
    socket.on('data', onData).once('error', reject);
  });
  if (!head.startsWith('HTTP/1.1 101')) throw new Error(`upgrade refused: ${head.split('\r\n')[0]}`);
  return {
    send(text) {
      const payload = Buffer.from(text, 'utf8');
      const mask = randomBytes(4);
      const length =
        payload.length < 126
          ? Buffer.from([0x81, 0x80 | payload.length])
          : Buffer.from([0x81, 0x80 | 126, payload.length >> 8, payload.length & 0xff]);
      const masked = Buffer.from(payload.map((byte, index) => byte ^ mask[index % 4]!));
      socket.write(Buffer.concat([length, mask, masked]));
    },
    /** Starts reading: every text frame the server sent (it never masks, never fragments here). */
    read(onText) {
      const parse = () => {
        for (;;) {
          if (pending.length < 2) return;
          let length = pending[1]! & 0x7f;
          let at = 2;
          if (length === 126) {
            if (pending.length < 4) return;
            length = pending.readUInt16BE(2);
            at = 4;
          } else if (length === 127) {
            if (pending.length < 10) return;
            length = Number(pending.readBigUInt64BE(2));
            at = 10;
          }
          if (pending.length < at + length) return;
          if ((pending[0]! & 0x0f) === 1) onText(pending.toString('utf8', at, at + length));
          pending = pending.subarray(at + length);
        }
      };
      socket.on('data', (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk]);
        parse();
      });
      socket.resume();
      parse();
    },
    destroy: () => socket.destroy(),
  };
}

/** Keystrokes that exercise a terminal's input path: UTF-8, an escape sequence, DEL, a long run. */
export const KEYS = [...'héllo ✓ 😀 \t', '\x1b[A', '\x7f', 'x'.repeat(3000), ...'end'];

/**
 * What a program in raw mode reads of `keys` sent one by one with `send`, as an `od` hex dump: the
 * bytes themselves, whatever way they were sent.
 */
export async function keystrokeDump(
  client: GatewayClient,
  keys: readonly string[],
  send: (sessionId: string, key: string) => Promise<unknown> | void,
): Promise<string> {
  const total = Buffer.byteLength(keys.join(''));
  const { sessionId } = await client.spawn({
    command: '/bin/sh',
    args: ['-c', `stty raw -echo; printf READY; head -c ${total} | od -An -tx1 -v; printf DONE`],
    cols: 80,
    rows: 24,
  });
  const output = outputOf(client, sessionId);
  await output.waitFor(/READY/); // raw mode is on
  for (const key of keys) await send(sessionId, key);
  await output.waitFor(/DONE/);
  return output.text().replace(/\s+/g, ' ');
}
