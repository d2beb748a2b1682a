import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
  chmodSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, writeCatStop, type FakeLlm } from '../test/fake-llm.js';
import {
  alive,
  CLI,
  MAIN,
  runToExit,
  startServerProcess,
  type ServerProcess,
} from '../test/server-process.js';

let llm: FakeLlm;
let work: string;
const servers: ServerProcess[] = [];
const clients: GatewayClient[] = [];
beforeAll(async () => {
  llm = await startFakeLlm(writeCatStop);
  work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-e2e-')));
});
afterAll(async () => {
  await llm.close();
  rmSync(work, { recursive: true, force: true });
});
afterEach(async () => {
  await Promise.all(clients.splice(0).map((client) => client.close()));
  for (const server of servers.splice(0)) {
    await server.stop();
    rmSync(server.stateDir, { recursive: true, force: true });
  }
});

const agentConfig = (extra = '') => `
[gateway]
port = 0

[agent]
provider = "openai-compatible"
model = "fake-coder"
base_url = "${llm.baseUrl}"
max_iterations = 12

[power]
inhibit_sleep = false
${extra}`;

async function start(config: string): Promise<{ server: ServerProcess; client: GatewayClient }> {
  const server = await startServerProcess(config);
  servers.push(server);
  const client = await connectGateway(server.url, { token: server.token });
  clients.push(client);
  return { server, client };
}

function waitForDone(client: GatewayClient, runId: string): Promise<Record<string, any>> {
  return new Promise((resolve) => {
    client.onEvent((topic, params) => {
      const event = params as Record<string, any>;
      if (topic === 'agent.done' && event['runId'] === runId) resolve(event);
    });
  });
}

/** A model that makes these calls in order, one per turn, then stops. */
const callsInOrder =
  (calls: { name: string; args: unknown }[]) => (conversation: readonly { role: string }[]) => {
    const next = calls[conversation.filter((turn) => turn.role === 'tool').length];
    return next ? { call: next } : { text: 'done\nVERDICT: PASS' };
  };

describe('the server process', () => {
  it('starts with no provider: terminals work and agent.run answers no_provider', async () => {
    const { server, client } = await start('[gateway]\nport = 0\n');
    expect(server.stdout()).toContain('no LLM provider configured');
    await client.subscribe(['pty.*']);
    // Listen before spawning: the output can arrive in the same socket read as the spawn's result.
    const outputs = new Map<string, string>();
    client.onOutput((output) =>
      outputs.set(output.sessionId, (outputs.get(output.sessionId) ?? '') + output.data.toString()),
    );
    const { sessionId } = await client.spawn({
      command: '/bin/sh',
      args: ['-c', 'echo from-the-pty; sleep 5'],
      cols: 80,
      rows: 24,
    });
    const seen = () => outputs.get(sessionId) ?? '';
    await expect.poll(seen, { timeout: 10_000 }).toContain('from-the-pty');
    await expect(client.request('agent.run', { prompt: 'hi' })).rejects.toMatchObject({
      code: 'no_provider',
      message: expect.stringContaining('[agent]'),
    });
    // The start-up's memory is released once listening, with nothing said on stderr about how.
    expect(server.stderr()).not.toMatch(/ExperimentalWarning/);
  });

  it('runs an agent: write_file, shell cat, a stop hook that blocks the first stop → model_stop after two stops', async () => {
    const marker = join(work, 'hook-blocked-once');
    const hook = join(work, 'block-once.sh');
    writeFileSync(
      hook,
      `#!/bin/sh\nif [ -f ${marker} ]; then exit 0; fi\ntouch ${marker}\necho "show me the file contents first" >&2\nexit 2\n`,
    );
    chmodSync(hook, 0o755);
    const { client } = await start(
      agentConfig(`\n[[stop_hooks]]\nname = "block-once"\ncommand = "${hook}"\ntimeout_secs = 10\n`),
    );
    await client.subscribe(['agent.*']);
    const verdicts: unknown[] = [];
    client.onEvent((topic, params) => topic === 'agent.verdict' && verdicts.push(params));
    const { runId, sessionId } = await client.request<{ runId: string; sessionId: string }>('agent.run', {
      prompt: 'create the file e2e.txt',
      cwd: work,
    });
    const done = await waitForDone(client, runId);
    expect(done['terminateReason']).toEqual({ kind: 'model_stop' });
    expect(done['selfVerdict']).toBe('PASS');
    expect(readFileSync(join(work, 'e2e.txt'), 'utf8')).toBe('hello from e2e.txt\n');
    expect(verdicts).toEqual([
      expect.objectContaining({
        verdict: expect.objectContaining({
          kind: 'veto',
          feedback: 'show me the file contents first',
          source: 'stop_hooks',
        }),
      }),
    ]);
    const history = await client.request<{ events: { type: string; toolCalls?: unknown[] }[] }>(
      'agent.history',
      { sessionId },
    );
    const stops = history.events.filter(
      (event) => event.type === 'assistant' && event.toolCalls?.length === 0,
    );
    expect(stops).toHaveLength(2);
    const list = await client.request<{ runId: string; state: string }[]>('agent.list', {});
    expect(list).toEqual([expect.objectContaining({ runId, state: 'done' })]);
  });

  it('refuses a goal whose gate command contains ";" (an error, never an allow)', async () => {
    const { client } = await start(agentConfig());
    await client.subscribe(['agent.*']);
    const tools: Record<string, any>[] = [];
    client.onEvent((topic, params) => topic === 'agent.tool' && tools.push(params as Record<string, any>));
    const { runId } = await client.request<{ runId: string }>('agent.run', {
      prompt: 'GOAL-TEST',
      cwd: work,
    });
    await waitForDone(client, runId);
    expect(tools).toEqual([
      expect.objectContaining({
        name: 'goal',
        ok: false,
        output: expect.stringContaining(
          'refused: gate_command: the command contains the shell metacharacter ";"',
        ),
      }),
    ]);
    expect(existsSync(join(work, 'pwned'))).toBe(false);
  });

  it('a failing gate_command keeps the run from claiming completion (fail-closed) until it halts', async () => {
    const { client } = await start(
      agentConfig('').replace(
        'max_iterations = 12',
        'max_iterations = 12\ngate_command = "test -f gate-passed"',
      ),
    );
    await client.subscribe(['agent.*']);
    const verdicts: Record<string, any>[] = [];
    client.onEvent(
      (topic, params) => topic === 'agent.verdict' && verdicts.push(params as Record<string, any>),
    );
    const { runId } = await client.request<{ runId: string }>('agent.run', {
      prompt: 'create the file gated.txt',
      cwd: work,
    });
    const done = await waitForDone(client, runId);
    expect(done['terminateReason']).toMatchObject({
      kind: 'halted',
      by: 'goal_gate',
      reason: expect.stringContaining('completion cannot be verified'),
    });
    expect(verdicts.map((event) => event['verdict'].kind)).toEqual(['veto', 'veto', 'halt']);
  });

  it('runs two agents at once in different directories', async () => {
    const { client } = await start(agentConfig());
    await client.subscribe(['agent.*']);
    const dirs = [join(work, 'a'), join(work, 'b')];
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
    for (const dir of dirs) mkdirSync(dir);
    const runs = await Promise.all(
      dirs.map((cwd, i) =>
        client.request<{ runId: string }>('agent.run', { prompt: `create the file run${i}.txt`, cwd }),
      ),
    );
    const results = await Promise.all(runs.map(({ runId }) => waitForDone(client, runId)));
    expect(results.map((result) => result['terminateReason'].kind)).toEqual(['model_stop', 'model_stop']);
    expect(readFileSync(join(dirs[0]!, 'run0.txt'), 'utf8')).toBe('hello from run0.txt\n');
    expect(readFileSync(join(dirs[1]!, 'run1.txt'), 'utf8')).toBe('hello from run1.txt\n');
    expect(existsSync(join(dirs[0]!, 'run1.txt'))).toBe(false);
  });

  it('agent.cancel ends a running run as cancelled; bad agent.* input gets stable errors', async () => {
    const slow = await startFakeLlm((conversation) =>
      conversation.at(-1)?.role === 'tool'
        ? { text: 'done' }
        : { call: { name: 'shell', args: { command: 'sleep 30' } } },
    );
    try {
      const { client } = await start(agentConfig().replace(llm.baseUrl, slow.baseUrl));
      await client.subscribe(['agent.*']);
      const shells: string[] = [];
      client.onEvent(
        (topic, params) =>
          topic === 'agent.shell' && shells.push((params as { ptySessionId: string }).ptySessionId),
      );
      const { runId } = await client.request<{ runId: string }>('agent.run', { prompt: 'sleep', cwd: work });
      await expect.poll(() => shells.length, { timeout: 10_000 }).toBe(1);
      const done = waitForDone(client, runId);
      expect(await client.request('agent.cancel', { runId })).toEqual({ cancelled: true });
      expect((await done)['terminateReason']).toEqual({ kind: 'cancelled' });
      await expect
        .poll(
          async () =>
            (await client.list())
              .filter((session) => session.exit === null)
              .map((session) => session.sessionId),
          { timeout: 10_000 },
        )
        .not.toContain(shells[0]);

      await expect(client.request('agent.cancel', { runId: 'nope' })).rejects.toMatchObject({
        code: 'unknown_run',
        message: 'unknown run nope',
      });
      await expect(client.request('agent.history', { sessionId: 'nope' })).rejects.toMatchObject({
        code: 'unknown_session',
      });
      await expect(
        client.request('agent.run', { prompt: 'x', cwd: join(work, 'does-not-exist') }),
      ).rejects.toMatchObject({
        code: 'invalid_params',
        message: expect.stringContaining('is not a directory'),
      });
      for (const prompt of ['', ' \n\t '])
        await expect(client.request('agent.run', { prompt, cwd: work })).rejects.toMatchObject({
          code: 'invalid_params',
          message: 'params.prompt: must not be empty or blank',
        });
    } finally {
      await slow.close();
    }
  });

  it('SIGTERM ends every terminal, a background job included, and exits 0 with no child left', async () => {
    const { server, client } = await start('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
    await client.subscribe(['pty.*']);
    const { sessionId, pid } = await client.spawn({
      command: '/bin/bash',
      args: ['--norc', '--noprofile'],
      cols: 80,
      rows: 24,
    });
    let seen = '';
    client.onOutput((output) => output.sessionId === sessionId && (seen += output.data.toString()));
    await client.input(sessionId, 'sleep 1000 & echo "bg=$!"\r');
    await expect.poll(() => seen, { timeout: 10_000 }).toMatch(/bg=\d+/);
    const background = Number(/bg=(\d+)/.exec(seen)![1]);
    const other = await client.spawn({ command: '/bin/sleep', args: ['1000'], cols: 80, rows: 24 });
    const started = Date.now();
    expect(await server.stop('SIGTERM')).toBe(0);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect([pid, background, other.pid].filter(alive)).toEqual([]);
    expect(server.stdout()).toContain('SIGTERM: shutting down');
  });

  it('SIGHUP (its terminal closed) shuts down as SIGTERM does: every terminal ended, exit 0', async () => {
    const { server, client } = await start('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
    const { pid } = await client.spawn({ command: '/bin/sleep', args: ['1000'], cols: 80, rows: 24 });
    expect(await server.stop('SIGHUP')).toBe(0);
    expect([pid].filter(alive)).toEqual([]);
    expect(server.stdout()).toContain('SIGHUP: shutting down');
  });

  it('a bad config prints the key (and line) and exits non-zero', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-badconfig-'));
    const file = join(dir, 'aleph.toml');
    writeFileSync(file, '[gateway]\nport = 0\n\n[pty]\nmax_sesions = 3\n');
    let result = await runToExit([MAIN, '--config', file], { ALEPH_STATE_DIR: dir });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('unknown key [pty].max_sesions (line 5)');
    writeFileSync(file, '[agent]\nmax_iterations = -1\n');
    result = await runToExit([MAIN, '--config', file], { ALEPH_STATE_DIR: dir });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain('[agent].max_iterations must be a positive integer (line 2)');
    writeFileSync(file, '[agent\nmodel = "x"\n');
    result = await runToExit([MAIN, '--config', file], { ALEPH_STATE_DIR: dir });
    expect(result.code).toBe(2);
    expect(result.stderr).toMatch(/invalid TOML \(line 1/);
    rmSync(dir, { recursive: true, force: true });
  });

  it('a port already in use is a clear error and a non-zero exit', async () => {
    const { server } = await start('[gateway]\nport = 0\n[power]\ninhibit_sleep = false\n');
    const port = new URL(server.url).port;
    const dir = mkdtempSync(join(tmpdir(), 'aleph-port-'));
    writeFileSync(join(dir, 'aleph.toml'), `[gateway]\nport = ${port}\n`);
    const result = await runToExit([MAIN, '--config', join(dir, 'aleph.toml')], { ALEPH_STATE_DIR: dir });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(`port ${port} is in use: set [gateway].port or ALEPH_PORT`);
    rmSync(dir, { recursive: true, force: true });
  });

  it('`aleph run` streams a run and exits 0; `aleph sessions` lists it', async () => {
    const { server } = await start(agentConfig());
    const env = { ALEPH_URL: server.url, ALEPH_TOKEN: server.token };
    const result = await runToExit([CLI, 'run', 'create the file cli.txt', '--cwd', work], env);
    expect(result.code).toBe(0);
    expect(result.stdout).toMatch(/✓ write_file → wrote \d+ bytes to cli\.txt/);
    expect(result.stdout).toMatch(/\$ cat cli\.txt/);
    expect(result.stdout).toMatch(
      /done: the model stopped \(3 turns, [\d.]+ s, 57 tokens\) · the model's verdict PASS/,
    );
    const listed = await runToExit([CLI, 'sessions'], env);
    expect(listed.stdout).toMatch(/agent runs \(1\)\n {2}\S+ {2}done \(model_stop\)/);
  });

  it('FIFOs in the workdir: read_file refuses them, the server keeps answering, SIGTERM stops it', async () => {
    const fifos = join(work, 'fifos');
    mkdirSync(fifos);
    for (const name of ['f1', 'f2', 'f3', 'f4', 'f5']) execFileSync('mkfifo', [join(fifos, name)]);
    // One turn reads all five at once: more than libuv's four workers.
    const model = await startFakeLlm((conversation) =>
      conversation.at(-1)?.role === 'tool'
        ? { text: 'done\nVERDICT: PASS' }
        : { calls: ['f1', 'f2', 'f3', 'f4', 'f5'].map((path) => ({ name: 'read_file', args: { path } })) },
    );
    try {
      const { server, client } = await start(
        agentConfig()
          .replace(llm.baseUrl, model.baseUrl)
          .replace('max_iterations = 12', 'tool_timeout_secs = 5'),
      );
      await client.subscribe(['agent.*']);
      const tools: Record<string, any>[] = [];
      client.onEvent((topic, params) => topic === 'agent.tool' && tools.push(params as Record<string, any>));
      const { runId, sessionId } = await client.request<{ runId: string; sessionId: string }>('agent.run', {
        prompt: 'read the pipes',
        cwd: fifos,
      });
      expect((await waitForDone(client, runId))['terminateReason']).toEqual({ kind: 'model_stop' });
      expect(tools.map((tool) => [tool['ok'], tool['output']])).toEqual(
        ['f1', 'f2', 'f3', 'f4', 'f5'].map((name) => [
          false,
          `refused: ${name} is a FIFO (named pipe), not a regular file`,
        ]),
      );
      // Every libuv worker is still free: a read of the session log answers.
      const history = await client.request<{ events: unknown[] }>('agent.history', { sessionId });
      expect(history.events.length).toBeGreaterThan(0);
      expect(await server.stop('SIGTERM')).toBe(0);
    } finally {
      await model.close();
    }
  });

  it("an agent's command never evicts a user's terminal and is never idle-expired while it runs", async () => {
    const model = await startFakeLlm(
      callsInOrder([{ name: 'shell', args: { command: 'sleep 2.5; echo finished' } }]),
    );
    try {
      const { client } = await start(
        agentConfig().replace(llm.baseUrl, model.baseUrl) + '\n[pty]\nmax_sessions = 1\nidle_ttl_secs = 1\n',
      );
      const user = await client.spawn({
        command: '/bin/sh',
        args: ['-c', 'while :; do echo tick; sleep 0.2; done'],
        cols: 80,
        rows: 24,
      });
      await client.subscribe(['agent.*']);
      const tools: Record<string, any>[] = [];
      client.onEvent((topic, params) => topic === 'agent.tool' && tools.push(params as Record<string, any>));
      const { runId } = await client.request<{ runId: string }>('agent.run', { prompt: 'build', cwd: work });
      await waitForDone(client, runId);
      expect(tools).toEqual([
        expect.objectContaining({ name: 'shell', ok: true, output: 'finished\n\n[exit code 0]' }),
      ]);
      // Not evicted by the agent's command (its own idle TTL may end it on a loaded machine: allowed).
      const mine = (await client.list()).find((session) => session.sessionId === user.sessionId);
      expect(mine?.exit?.reason ?? 'live').not.toBe('evicted');
    } finally {
      await model.close();
    }
  });

  it('a store.dir that is a file, a host that cannot be listened on, an unknown flag: one line, no stack', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-start-errors-'));
    const file = join(dir, 'aleph.toml');
    writeFileSync(join(dir, 'not-a-dir'), '');
    const cases: [string[], string, RegExp][] = [
      [
        ['--config', file],
        `[store]\ndir = "${join(dir, 'not-a-dir')}"\n`,
        /\[store\]\.dir: \S+not-a-dir is not a directory/,
      ],
      [
        ['--config', file],
        '[gateway]\nhost = "999.1.1.1"\nport = 0\n',
        /cannot listen on 999\.1\.1\.1:0 .*ENOTFOUND/,
      ],
      [['--bogus'], '', /Unknown option '--bogus'\nusage: aleph-server/],
    ];
    for (const [args, config, expected] of cases) {
      writeFileSync(file, `${config}[power]\ninhibit_sleep = false\n`);
      const result = await runToExit([MAIN, ...args], { ALEPH_STATE_DIR: dir });
      expect(result.code).toBe(2);
      expect(result.stderr).toMatch(expected);
      expect(result.stderr).not.toMatch(/\n\s+at /); // no stack trace
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('spawn_agent has its own timeout: a sub-agent may run longer than tool_timeout_secs', async () => {
    const model = await startFakeLlm((conversation) => {
      const task = conversation.find((turn) => turn.role === 'user')?.text ?? '';
      const results = conversation.filter((turn) => turn.role === 'tool');
      if (task.includes('CHILD')) {
        // Two commands of 0.7 s each (different: no result reuse): each within the 1 s tool timeout, the whole not.
        return results.length < 2
          ? { call: { name: 'shell', args: { command: `sleep 0.7; echo step ${results.length}` } } }
          : { text: 'child finished\nVERDICT: PASS' };
      }
      return results.length === 0
        ? { call: { name: 'spawn_agent', args: { prompt: 'CHILD: sleep twice' } } }
        : { text: `parent saw: ${results[0]!.text}\nVERDICT: PASS` };
    });
    try {
      const { client } = await start(
        agentConfig()
          .replace(llm.baseUrl, model.baseUrl)
          .replace('max_iterations = 12', 'tool_timeout_secs = 1\nspawn_agent_timeout_secs = 60'),
      );
      await client.subscribe(['agent.*']);
      const { runId } = await client.request<{ runId: string }>('agent.run', {
        prompt: 'delegate',
        cwd: work,
      });
      const done = await waitForDone(client, runId);
      expect(done['terminateReason']).toEqual({ kind: 'model_stop' });
      expect(done['finalText']).toMatch(/parent saw: sub-agent \S+ ended \(model_stop\)/);
    } finally {
      await model.close();
    }
  });

  it('after a SIGKILL, a new server lists the earlier runs from the store; the unfinished one as interrupted, and it can be continued', async () => {
    const store = mkdtempSync(join(tmpdir(), 'aleph-store-'));
    let continued: readonly { role: string; text: string }[] | undefined;
    const model = await startFakeLlm((conversation) => {
      const task = conversation.find((turn) => turn.role === 'user')?.text ?? '';
      if (conversation.at(-1)?.text === 'go on') {
        continued = conversation;
        return { text: 'continued\nVERDICT: PASS' };
      }
      if (task.includes('quick')) return { text: 'quick answer\nVERDICT: PASS' };
      return conversation.at(-1)?.role === 'tool'
        ? { text: 'done' }
        : { call: { name: 'shell', args: { command: 'sleep 30' } } };
    });
    try {
      const config = `${agentConfig().replace(llm.baseUrl, model.baseUrl)}\n[store]\ndir = "${store}"\n`;
      const first = await start(config);
      await first.client.subscribe(['agent.*']);
      const quick = await first.client.request<{ runId: string; sessionId: string }>('agent.run', {
        prompt: 'a quick one',
        cwd: work,
      });
      await waitForDone(first.client, quick.runId);
      const shells: unknown[] = [];
      first.client.onEvent((topic, params) => topic === 'agent.shell' && shells.push(params));
      const slow = await first.client.request<{ sessionId: string }>('agent.run', {
        prompt: 'a slow one',
        cwd: work,
      });
      await expect.poll(() => shells.length, { timeout: 10_000 }).toBe(1);
      await first.server.stop('SIGKILL');

      const second = await start(config);
      const listed = await second.client.request<
        { sessionId: string; state: string; terminateReason?: unknown }[]
      >('agent.list', {});
      expect(listed).toEqual([
        expect.objectContaining({
          sessionId: quick.sessionId,
          state: 'done',
          terminateReason: { kind: 'model_stop' },
        }),
        expect.objectContaining({
          sessionId: slow.sessionId,
          state: 'done',
          terminateReason: { kind: 'interrupted' },
        }),
      ]);
      const cli = await runToExit([CLI, 'sessions'], {
        ALEPH_URL: second.server.url,
        ALEPH_TOKEN: second.server.token,
      });
      expect(cli.stdout).toMatch(/agent runs \(2\)\n.*\(model_stop\).*\n.*\(interrupted\).*a slow one/);
      // Continued like a finished run: the model gets what the log holds, then the follow-up.
      await second.client.subscribe(['agent.*']);
      const again = await second.client.request<{ runId: string; sessionId: string }>('agent.run', {
        prompt: 'go on',
        sessionId: slow.sessionId,
        cwd: work,
      });
      expect(again.sessionId).toBe(slow.sessionId);
      const done = await waitForDone(second.client, again.runId);
      expect((done['terminateReason'] as { kind: string }).kind).toBe('model_stop');
      const users = (continued ?? []).filter((turn) => turn.role === 'user').map((turn) => turn.text);
      expect(users).toEqual(['a slow one', 'go on']);
      expect(continued?.some((turn) => turn.role === 'tool')).toBe(true); // the interrupted call, answered
    } finally {
      await model.close();
      rmSync(store, { recursive: true, force: true });
    }
  });

  it('a sleep inhibitor that cannot work is said once, at start, not during the runs', async () => {
    const { server, client } = await start(
      agentConfig().replace('inhibit_sleep = false', 'inhibit_sleep = true'),
    );
    const noop = () => server.stderr().split('sleep inhibitor is a no-op').length - 1;
    if (!existsSync('/usr/bin/systemd-inhibit') || existsSync('/run/systemd/system')) return; // needs a failing backend
    await expect.poll(noop, { timeout: 30_000 }).toBe(1); // before any run
    await client.subscribe(['agent.*']);
    for (const name of ['one', 'two']) {
      const { runId } = await client.request<{ runId: string }>('agent.run', {
        prompt: `create the file sleep-${name}.txt`,
        cwd: work,
      });
      await waitForDone(client, runId);
    }
    expect(noop()).toBe(1);
  });

  it("[telemetry] endpoint: the run's spans reach an OTLP/HTTP collector, as a tree", async () => {
    const bodies: any[] = [];
    const collector = createServer((request, response) => {
      let raw = '';
      request.on('data', (chunk) => (raw += chunk));
      request.on('end', () => {
        if (request.url === '/v1/traces') bodies.push(JSON.parse(raw));
        response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
      });
    });
    await new Promise<void>((resolve) => collector.listen(0, '127.0.0.1', resolve));
    const { port } = collector.address() as AddressInfo;
    try {
      const { server, client } = await start(
        agentConfig(
          `\n[telemetry]\nendpoint = "http://127.0.0.1:${port}/v1/traces"\nservice_name = "aleph-test"\n`,
        ),
      );
      await client.subscribe(['agent.*']);
      const { runId } = await client.request<{ runId: string }>('agent.run', {
        prompt: 'create the file traced.txt',
        cwd: work,
      });
      await waitForDone(client, runId);
      expect(await server.stop('SIGTERM')).toBe(0); // shutdown sends what is buffered
      const spans = bodies.flatMap((body) =>
        body.resourceSpans.flatMap((resource: any) => {
          const service = resource.resource.attributes.find((a: any) => a.key === 'service.name');
          return resource.scopeSpans.flatMap((scope: any) =>
            scope.spans.map((span: any) => ({ ...span, service: service?.value.stringValue })),
          );
        }),
      );
      const names = spans.map((span: any) => span.name);
      expect(names).toEqual(expect.arrayContaining(['aleph.run', 'aleph.turn', 'aleph.act']));
      expect(spans.every((span: any) => span.service === 'aleph-test')).toBe(true);
      const run = spans.find((span: any) => span.name === 'aleph.run');
      const turns = spans.filter((span: any) => span.name === 'aleph.turn');
      expect(turns.length).toBeGreaterThanOrEqual(3);
      expect(turns.every((turn: any) => turn.parentSpanId === run.spanId)).toBe(true);
    } finally {
      await new Promise((resolve) => collector.close(resolve));
    }
  });
});
