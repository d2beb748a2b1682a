// Test helpers: a gateway on loopback with its own PtyManager, clients that get cleaned up, and
// process checks that ignore zombies.
import { readFileSync } from 'node:fs';
import { PtyManager } from '@aleph/pty';
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
      clients.push(client);
      return client;
    },
    async dispose() {
      await Promise.all(clients.map((client) => client.close()));
      await gateway.close();
    },
  };
}

export function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

export async function until(predicate: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Collects one session's output bytes as they arrive over the socket. */
export function outputOf(client: GatewayClient, sessionId: string) {
  const chunks: PtyOutput[] = [];
  client.onOutput((output) => {
    if (output.sessionId === sessionId) chunks.push(output);
  });
  const bytes = () => Buffer.concat(chunks.map((chunk) => chunk.data));
  return {
    chunks,
    bytes,
    text: () => bytes().toString('utf8'),
    waitFor: (pattern: RegExp, ms?: number) =>
      until(() => pattern.test(bytes().toString('utf8')), String(pattern), ms),
  };
}
