// A node's default name: readable (host name, pid) and unique even where processes share a host
// name and a pid (containers each running their server as pid 1).
import { execFileSync } from 'node:child_process';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from './options.js';

/** Runs `unshare --pid --fork` when this process may (root on Linux); undefined otherwise. */
function inOwnPidNamespace(script: string): string | undefined {
  try {
    return execFileSync(
      'unshare',
      ['--pid', '--fork', process.execPath, '--import', 'tsx', '--input-type=module', '-e', script],
      { timeout: 60_000, encoding: 'utf8', cwd: join(import.meta.dirname, '..') }, // tsx starts slowly under load
    ).trim();
  } catch (error) {
    if ((error as { status?: number }).status === 1 && /unshare/.test(String((error as Error).message)))
      return undefined;
    throw error;
  }
}

describe("a node's default name", () => {
  it('is the host name, the pid and a random suffix, the same for every default resolved in one process', () => {
    const host = hostname().replace(/[^A-Za-z0-9_-]/g, '-');
    const { node } = resolveOptions({ servers: ['nats://127.0.0.1:4222'] });
    expect(node).toMatch(new RegExp(`^${host.slice(0, 40)}.*-${process.pid}-[0-9a-f]{6}$`));
    expect(resolveOptions({ servers: ['nats://127.0.0.1:4222'] }).node).toBe(node);
    expect(resolveOptions({ servers: ['nats://127.0.0.1:4222'], node: 'node-a' }).node).toBe('node-a');
  });

  it.skipIf(process.platform !== 'linux' || process.getuid?.() !== 0)(
    'differs between two processes of one host name that both have pid 1',
    () => {
      const script = `import { resolveOptions } from ${JSON.stringify(join(import.meta.dirname, 'options.ts'))};
        console.log(JSON.stringify([process.pid, resolveOptions({ servers: ['nats://127.0.0.1:4222'] }).node]));`;
      const first = inOwnPidNamespace(script);
      const second = inOwnPidNamespace(script);
      if (first === undefined || second === undefined) return; // no PID namespaces here
      const [pid1, node1] = JSON.parse(first) as [number, string];
      const [pid2, node2] = JSON.parse(second) as [number, string];
      expect([pid1, pid2]).toEqual([1, 1]);
      expect(node1).toMatch(/-1-[0-9a-f]{6}$/);
      expect(node1).not.toBe(node2);
    },
  );
});

describe('bad options', () => {
  it('a server that is not a URL is refused as invalid, naming it', () => {
    for (const server of ['not a url', 'nats://', '']) {
      expect(() => resolveOptions({ servers: [server] })).toThrow(
        `cluster servers: ${JSON.stringify(server)} is not a URL`,
      );
    }
    for (const server of ['nats://127.0.0.1:4222', '127.0.0.1:4222', 'tls://nats.example:4443', 'localhost'])
      expect(resolveOptions({ servers: [server] }).servers).toEqual([server]);
  });
});
