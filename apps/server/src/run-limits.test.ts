// What a hostile model cannot make a run do, through the real server process: start sub-agents
// without bound (one reply of 300 spawn_agent calls), work in `/` or a system folder, or fill the
// server's memory with one huge reply.
import { existsSync, mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type FakeLlm, type Turn } from '../test/fake-llm.js';
import { startHugeReplyLlm } from '../test/huge-reply-llm.js';
import { startServerProcess, type ServerProcess } from '../test/server-process.js';

let work: string;
const servers: ServerProcess[] = [];
const clients: GatewayClient[] = [];
const models: Pick<FakeLlm, 'close'>[] = [];
beforeAll(() => {
  work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-limits-')));
});
afterAll(() => rmSync(work, { recursive: true, force: true }));
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  for (const server of servers.splice(0)) {
    await server.stop();
    rmSync(server.stateDir, { recursive: true, force: true });
  }
  await Promise.all(models.splice(0).map((model) => model.close()));
});

async function start(model: Pick<FakeLlm, 'baseUrl'>, agentExtra = ''): Promise<GatewayClient> {
  const server = await startServerProcess(`
[gateway]
port = 0

[agent]
provider = "openai-compatible"
model = "fake-coder"
base_url = "${model.baseUrl}"
max_iterations = 6
${agentExtra}

[power]
inhibit_sleep = false
`);
  servers.push(server);
  const client = await connectGateway(server.url, { token: server.token });
  clients.push(client);
  return client;
}

/** The server's peak resident memory so far (VmHWM), in MiB. */
function peakMib(server: ServerProcess): number {
  const status = readFileSync(`/proc/${server.child.pid}/status`, 'utf8');
  return Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1]) / 1024;
}

function done(client: GatewayClient, runId: string): Promise<Record<string, unknown>> {
  return new Promise((resolve) =>
    client.onEvent((topic, params) => {
      const event = params as Record<string, unknown>;
      if (topic === 'agent.done' && event['runId'] === runId) resolve(event);
    }),
  );
}

describe('spawn_agent is bounded in breadth and in total per run', () => {
  it('300 calls in one reply start 4; the rest, and those past the run total, are refused to the model', async () => {
    const parentResults: Turn[][] = [];
    const model = await startFakeLlm((conversation) => {
      const task = conversation.find((turn) => turn.role === 'user')?.text ?? '';
      if (task.startsWith('CHILD')) return { text: 'child done\nVERDICT: PASS' };
      const results = conversation.filter((turn) => turn.role === 'tool');
      parentResults.push(results);
      const spawn = (count: number, from: number) =>
        Array.from({ length: count }, (_, index) => ({
          name: 'spawn_agent',
          args: { prompt: `CHILD ${from + index}` },
        }));
      if (results.length === 0) return { calls: spawn(300, 0) };
      if (results.length === 300) return { calls: spawn(5, 300) };
      return { text: 'parent done\nVERDICT: PASS' };
    });
    models.push(model);
    // The reply's own cap (max_tool_calls_per_turn, 64 by default) raised: the sub-agent bounds are what is tested.
    const client = await start(model, 'spawn_agent_max_per_run = 6\nmax_tool_calls_per_turn = 1000');
    await client.subscribe(['agent.*']);
    const { runId } = await client.request<{ runId: string }>('agent.run', { prompt: 'fan out', cwd: work });
    expect((await done(client, runId))['terminateReason']).toEqual({ kind: 'model_stop' });

    const [first, second] = [parentResults[1]!, parentResults[2]!.slice(300)];
    const ran = (turns: Turn[]) => turns.filter((turn) => /^sub-agent \S+ ended/.test(turn.text)).length;
    const refusedWith = (turns: Turn[], text: string) =>
      turns.filter((turn) => turn.text.startsWith('refused: ') && turn.text.includes(text)).length;
    expect(first).toHaveLength(300);
    expect(ran(first)).toBe(4);
    expect(refusedWith(first, 'at most 4 sub-agents may run at once')).toBe(296);
    expect(second).toHaveLength(5);
    expect(ran(second)).toBe(2); // 6 in all per run
    expect(refusedWith(second, 'this run has started its 6 sub-agents')).toBe(3);
    // Only the children that ran asked the model anything.
    const childTasks = model.requests
      .map((request) =>
        String(request.body.messages?.find((m: { role: string }) => m.role === 'user')?.content),
      )
      .filter((task) => task.startsWith('CHILD'));
    expect(new Set(childTasks).size).toBe(6);
  });

  it('a bad limit is a config error naming the key', async () => {
    const model = await startFakeLlm(() => ({ text: 'x' }));
    models.push(model);
    await expect(start(model, 'spawn_agent_max_parallel = 0')).rejects.toThrow(
      '[agent].spawn_agent_max_parallel must be a positive integer',
    );
  });
});

describe('a run never works in /, a system folder or a shared temporary folder', () => {
  it('refuses /, /usr, /etc, /proc, /usr/local/bin and a link to /etc, each with a clear error', async () => {
    const model = await startFakeLlm(() => ({ text: 'x' }));
    models.push(model);
    const client = await start(model);
    symlinkSync('/etc', join(work, 'etc-link'));
    for (const [cwd, shown] of [
      ['/', 'the root folder'],
      ['/usr', 'a system folder (/usr)'],
      ['/etc', 'a system folder (/etc)'],
      ['/proc', 'a system folder (/proc)'],
      ['/usr/local/bin', 'a system folder (/usr)'],
      ['/home', 'a system folder (/home)'],
      [join(work, 'etc-link'), 'a system folder (/etc)'],
    ] as const) {
      await expect(client.request('agent.run', { prompt: 'x', cwd })).rejects.toMatchObject({
        code: 'invalid_params',
        message: `params.cwd: ${cwd} is ${shown}: a run makes its cwd writable; choose a project directory`,
      });
    }
    for (const cwd of ['/tmp', '/var/tmp', tmpdir()]) {
      await expect(client.request('agent.run', { prompt: 'x', cwd })).rejects.toMatchObject({
        code: 'invalid_params',
        message: `params.cwd: ${cwd} is a temporary folder all programs share: a run makes its cwd writable, other programs' files and sockets included; choose a project directory (a folder inside it will do)`,
      });
    }
    await expect(client.request('agent.run', { prompt: 'x', cwd: work })).resolves.toMatchObject({
      runId: expect.any(String),
    });
  });
});

describe('one huge reply cannot fill the server', () => {
  it.each([
    ['in 64 KiB events', 65_536],
    ['in one event', 1 << 30],
  ] as const)(
    'a 50 MB write_file %s: the run ends with the bound’s error, nothing is written, the server stays small',
    async (_, piece) => {
      const size = 50_000_000;
      const path = `huge-${piece}.txt`;
      const model = await startHugeReplyLlm({ size, piece, path });
      models.push(model);
      const client = await start(model); // max_reply_kib: its default, 4096
      await client.subscribe(['agent.*']);
      const { runId } = await client.request<{ runId: string }>('agent.run', { prompt: 'go', cwd: work });
      const event = await done(client, runId);
      expect(event['terminateReason']).toEqual({
        kind: 'error',
        error: {
          kind: 'llm',
          message: expect.stringContaining(
            "the model's reply is larger than 4096 KiB of text and tool-call arguments ([agent].max_reply_kib): it was cut off, and nothing of it was run",
          ),
        },
      });
      expect(existsSync(join(work, path))).toBe(false);
      expect(model.written).toHaveLength(1);
      expect(model.written[0]).toBeLessThan(size / 2);
      // Bounded: about 90-100 MiB; unbounded, a 100 MB reply took the server to about 1 GB.
      expect(peakMib(servers[0]!)).toBeLessThan(200);
    },
  );
});
