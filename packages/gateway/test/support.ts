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
  connect(options?: { autoAck?: boolean }): Promise<GatewayClient>;
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
