// A run whose folder holds this server's installation cannot change the server's code: modules load
// at first use, so a file the model changed under dist or node_modules would run inside the server.
// A real server from this workspace, real bubblewrap, a fake model speaking OpenAI's wire, the run's
// folder the workspace itself. Every attempt leaves the workspace as it was even where it got
// through (an append of nothing, a rename undone at once, a new file removed after), so a failure
// here never breaks the checkout the rest of the suite runs from.
import { existsSync, readFileSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { connectGateway } from '@aleph/gateway/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import { startServerProcess } from '../test/server-process.js';
import { ownCodeFolders } from './server.js';

const WORKSPACE = resolve(import.meta.dirname, '../../..');
const TARGETS = ['packages/mcp/dist/index.js', 'apps/server/dist/providers.js'];
/** New files the file tools are asked to write there (removed after the test, should one be made). */
const PROBES = ['packages/mcp/dist/aleph-probe.js', 'node_modules/aleph-probe.js'];

describe('ownCodeFolders', () => {
  it("a workspace's node_modules and each package's dist and node_modules; an installed server's node_modules", () => {
    expect(ownCodeFolders(join(WORKSPACE, 'apps', 'server', 'dist'))).toEqual(
      expect.arrayContaining([
        join(WORKSPACE, 'node_modules'),
        join(WORKSPACE, 'apps', 'server', 'dist'),
        join(WORKSPACE, 'packages', 'mcp', 'dist'),
        join(WORKSPACE, 'packages', 'mcp', 'node_modules'),
      ]),
    );
    expect(ownCodeFolders('/srv/app/node_modules/@aleph/server/dist')).toEqual(['/srv/app/node_modules']);
  });
});

describe.skipIf(process.platform !== 'linux')("a run in the folder that holds the server's code", () => {
  let llm: FakeLlm;
  const steps: Brain = (conversation) => {
    const plan = JSON.parse(conversation.find((turn) => turn.role === 'user')?.text ?? '[]') as string[];
    const next = plan[conversation.filter((turn) => turn.role === 'tool').length];
    if (next === undefined) return { text: 'done' };
    if (next.startsWith('write:'))
      return { call: { name: 'write_file', args: { path: next.slice(6), content: '// changed\n' } } };
    return { call: { name: 'shell', args: { command: next } } };
  };
  beforeAll(async () => {
    llm = await startFakeLlm(steps);
  });
  afterAll(async () => {
    await llm.close();
  });

  it('cannot change it through the shell or the file tools', { timeout: 120_000 }, async () => {
    const before = TARGETS.map((target) => readFileSync(join(WORKSPACE, target), 'utf8'));
    let made: string[] = [];
    const server = await startServerProcess(
      `[gateway]\nport = 0\n[agent]\nprovider = "openai-compatible"\nmodel = "fake"\nbase_url = "${llm.baseUrl}"\napi_key_env = "FAKE_PROVIDER_KEY"\n[power]\ninhibit_sleep = false\n[sandbox]\nmode = "required"\n`,
      { FAKE_PROVIDER_KEY: 'k' },
    );
    try {
      const client = await connectGateway(server.url, { token: server.token });
      await client.subscribe(['agent.*']);
      const outputs: string[] = [];
      const done = new Promise<void>((resolveDone) =>
        client.onEvent((topic, params) => {
          if (topic === 'agent.tool') outputs.push(String((params as { output: unknown }).output));
          if (topic === 'agent.done') resolveDone();
        }),
      );
      const plan = [
        ...TARGETS.map((target) => `( : >> ${target} ) 2>&1; echo "append=$?"`),
        `mv packages/mcp/dist packages/mcp/dist-probe 2>&1; echo "move=$?"; mv packages/mcp/dist-probe packages/mcp/dist 2>/dev/null; true`,
        `mv packages packages-probe 2>&1; echo "move-up=$?"; mv packages-probe packages 2>/dev/null; true`,
        ...PROBES.map((probe) => `write:${probe}`),
      ];
      await client.request('agent.run', { prompt: JSON.stringify(plan), cwd: WORKSPACE });
      await done;
      await client.close();
      expect(
        outputs.slice(0, 2).every((output) => /append=[1-9]/.test(output)),
        outputs.join('\n'),
      ).toBe(true);
      expect(outputs[2]).toMatch(/move=[1-9]/);
      expect(outputs[3]).toMatch(/move-up=[1-9]/);
      for (const output of outputs.slice(4)) expect(output).toMatch(/this server's own code/);
    } finally {
      await server.stop();
      made = PROBES.filter((probe) => existsSync(join(WORKSPACE, probe)));
      for (const probe of made) rmSync(join(WORKSPACE, probe));
    }
    expect(made).toEqual([]);
    expect(TARGETS.map((target) => readFileSync(join(WORKSPACE, target), 'utf8'))).toEqual(before);
  });
});
