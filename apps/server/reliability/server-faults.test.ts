// The server process under faults: SIGTERM and SIGKILL with HUP-ignoring children and background
// grandchildren (count the survivors), tool calls aimed at FIFOs, devices and huge files, and
// symlink escapes (dangling, nested, racing) — each through a real agent run on a fake provider.
import { spawn } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import {
  assertAnswering,
  killAll,
  rssOf,
  socketUrl,
  startServerProcess,
  summary,
  survivorsAfter,
  tally,
  type ServerProcess,
} from './support.js';

let root: string;
beforeAll(() => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-reliability-')));
});
afterAll(() => {
  // A write the server was finishing as the racer died may still land: retried, not a failure.
  rmSync(root, { recursive: true, force: true, maxRetries: 5, retryDelay: 200 });
  console.log(summary('server-faults'));
});

async function connect(server: ServerProcess): Promise<GatewayClient> {
  return connectGateway(socketUrl(server), { token: server.token });
}

describe('the server goes away', () => {
  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`${signal}: no program it started survives it (HUP ignored, grandchildren in the background)`, async () => {
      const marker = signal === 'SIGTERM' ? '7311' : '7312';
      const server = await startServerProcess('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
      try {
        const gateway = await connect(server);
        for (let i = 0; i < 3; i++) {
          await gateway.spawn({
            command: '/bin/bash',
            args: [
              '-c',
              `trap '' HUP TERM; sleep ${marker}.${i} & (sleep ${marker}.${i}${i} &) ; sleep ${marker}.9${i}`,
            ],
            cols: 80,
            rows: 24,
          });
        }
        await new Promise((resolve) => setTimeout(resolve, 300));
        await gateway.close();
        tally.faults += 1;
        await server.stop(signal);
        const left = await survivorsAfter(`sleep ${marker}`, 2000);
        tally.processesLeft += left.length;
        killAll(left);
        tally.cases += 1;
        expect(left).toEqual([]);
      } finally {
        await server.stop('SIGKILL');
        rmSync(server.stateDir, { recursive: true, force: true });
      }
    });
  }
});

const OK_CALL = { name: 'list_files', args: {} };

/** Each faulty call followed by one that succeeds, so the consecutive-failure watchdog never ends the run. */
function interleave(calls: readonly { name: string; args: unknown }[]): { name: string; args: unknown }[] {
  return calls.flatMap((call) => [call, OK_CALL]);
}

/** A brain that makes the given calls in order, one per turn, then stops. */
function script(calls: readonly { name: string; args: unknown }[]): Brain {
  return (conversation) => {
    const done = conversation.filter((turn) => turn.role === 'tool').length;
    const call = calls[done];
    return call ? { call } : { text: 'All calls made.\nVERDICT: PASS' };
  };
}

interface Run {
  readonly tools: { name: string; output: string; isError: boolean }[];
  readonly done: Record<string, any>;
}

async function agentRun(
  calls: readonly { name: string; args: unknown }[],
  workdir: string,
  check: (server: ServerProcess) => void = () => undefined,
): Promise<Run> {
  const llm: FakeLlm = await startFakeLlm(script(calls));
  const server = await startServerProcess(`
[gateway]
port = 0
[agent]
provider = "openai-compatible"
model = "fake"
base_url = "${llm.baseUrl}"
max_iterations = ${calls.length + 3}
tool_timeout_secs = 5
[power]
inhibit_sleep = false
`);
  try {
    const client = await connect(server);
    await client.subscribe(['agent.*']);
    const tools: Run['tools'] = [];
    let runId = '';
    const early: Record<string, any>[] = [];
    const done = new Promise<Record<string, any>>((resolve) => {
      client.onEvent((topic, params) => {
        const event = params as Record<string, any>;
        if (topic === 'agent.done') {
          if (event['runId'] === runId) resolve(event);
          else early.push(event);
        }
      });
    });
    const history = await client.request<{ runId: string; sessionId: string }>('agent.run', {
      prompt: 'make the calls',
      cwd: workdir,
    });
    runId = history.runId;
    const finished = await Promise.race([
      done,
      new Promise<Record<string, any>>((resolve) => {
        const poll = setInterval(() => {
          const hit = early.find((event) => event['runId'] === runId);
          if (hit) {
            clearInterval(poll);
            resolve(hit);
          }
        }, 20);
      }),
    ]);
    // Every page of the log (a page holds about 1 MiB of events)
    const events: Record<string, any>[] = [];
    for (let from: number | undefined = 0; from !== undefined;) {
      const page: { events: Record<string, any>[]; next?: number } = await client.request('agent.history', {
        sessionId: history.sessionId,
        from,
      });
      events.push(...page.events);
      from = page.next;
    }
    for (const event of events) {
      if (event['type'] === 'tool_result')
        tools.push({ name: event['name'], output: event['output'], isError: event['isError'] });
    }
    check(server);
    await client.close();
    await assertAnswering(server);
    const code = await server.stop('SIGTERM');
    expect(code).not.toBeNull();
    return { tools, done: finished };
  } finally {
    await server.stop('SIGKILL');
    rmSync(server.stateDir, { recursive: true, force: true });
    await llm.close();
  }
}

describe('tool targets that are not regular files', () => {
  it('FIFOs, a device and a 300 MB file: each call answers, the server stays responsive and bounded, SIGTERM still works', async () => {
    const work = join(root, 'targets');
    mkdirSync(work);
    for (const name of ['f1', 'f2', 'f3', 'f4', 'f5']) execFileSync('mkfifo', [join(work, name)]);
    let device = false;
    try {
      execFileSync('mknod', [join(work, 'zero'), 'c', '1', '5']);
      device = true;
    } catch {
      // Not root: the device case is left to the FIFOs.
    }
    execFileSync('truncate', ['-s', '300M', join(work, 'huge')]);
    const calls = [
      ...['f1', 'f2', 'f3', 'f4'].map((path) => ({ name: 'read_file', args: { path } })),
      { name: 'write_file', args: { path: 'f5', content: 'x' } },
      { name: 'edit_file', args: { path: 'f1', old_string: 'a', new_string: 'b' } },
      ...(device ? [{ name: 'read_file', args: { path: 'zero' } }] : []),
      { name: 'read_file', args: { path: 'huge' } },
      { name: 'read_file', args: { path: 'huge' } },
    ];
    tally.faults += calls.length;
    let rss = 0;
    const run = await agentRun(interleave(calls), work, (server) => {
      rss = rssOf(server.child.pid!);
    });
    const faulty = run.tools.filter((_, index) => index % 2 === 0);
    expect(faulty.map((tool) => tool.name)).toEqual(calls.map((call) => call.name));
    for (const tool of faulty.slice(0, calls.length - 2)) expect(tool.isError, tool.output).toBe(true);
    for (const tool of faulty.slice(calls.length - 2)) expect(tool.output.length).toBeLessThan(300 * 1024);
    expect(rss).toBeLessThan(400 * 1024 * 1024);
    tally.cases += 1;
  });
});

describe('symlink escapes', () => {
  it('dangling, nested and racing links never let a write out of the working directory', async () => {
    const work = join(root, 'links');
    const outside = join(root, 'outside');
    mkdirSync(work);
    mkdirSync(outside);
    symlinkSync(join(outside, 'dangling-target'), join(work, 'dangling'));
    symlinkSync(outside, join(work, 'dir-link'));
    mkdirSync(join(work, 'a'));
    symlinkSync('../dir-link', join(work, 'a', 'nested'));
    // A racer flips `race` between a real directory and a link to the outside while the writes run.
    // One process with no children: once it is reaped, nothing of it can still make an entry (a
    // shell's `ln` in flight as the shell died once made `race/outside` during the cleanup).
    const flip = `const fs = require('fs'); const race = ${JSON.stringify(join(work, 'race'))};
      for (;;) for (const step of [() => fs.mkdirSync(race), () => fs.rmdirSync(race),
        () => fs.symlinkSync(${JSON.stringify(outside)}, race), () => fs.unlinkSync(race)])
        try { step(); } catch {}`;
    const racer = spawn(process.execPath, ['-e', flip], { stdio: 'ignore' });
    const calls = [
      { name: 'write_file', args: { path: 'dangling', content: 'escaped' } },
      { name: 'write_file', args: { path: 'dir-link/x', content: 'escaped' } },
      { name: 'write_file', args: { path: 'a/nested/y', content: 'escaped' } },
      { name: 'edit_file', args: { path: 'dangling', old_string: 'a', new_string: 'escaped' } },
      ...Array.from({ length: 12 }, (_, i) => ({
        name: 'write_file',
        args: { path: `race/r${i}`, content: 'escaped' },
      })),
    ];
    tally.faults += calls.length;
    try {
      const run = await agentRun(interleave(calls), work);
      const faulty = run.tools.filter((_, index) => index % 2 === 0);
      expect(faulty.length).toBe(calls.length);
      for (const tool of faulty.slice(0, 4)) expect(tool.isError, tool.output).toBe(true);
    } finally {
      if (racer.exitCode === null && racer.signalCode === null) {
        const exited = new Promise((resolve) => racer.once('exit', resolve));
        racer.kill('SIGKILL');
        await exited;
      }
    }
    expect(existsSync(join(outside, 'dangling-target'))).toBe(false);
    expect(existsSync(join(outside, 'x'))).toBe(false);
    expect(existsSync(join(outside, 'y'))).toBe(false);
    for (let i = 0; i < 12; i++) expect(existsSync(join(outside, `r${i}`))).toBe(false);
    writeFileSync(join(root, 'ok'), '');
    tally.cases += 1;
  });
});
