import { mkdtempSync, readFileSync, realpathSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentHarness, InMemorySessionStore } from '@aleph/harness';
import { PtyManager } from '@aleph/pty';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, writeCatStop, type FakeLlm } from '../test/fake-llm.js';
import { configSchema } from './config.js';
import { createProvider, ProviderConfigError } from './providers.js';
import { builtinTools } from './tools.js';

let llm: FakeLlm;
let dir: string;
const ptys = new PtyManager();
beforeAll(async () => {
  llm = await startFakeLlm(writeCatStop);
  dir = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-providers-')));
});
afterAll(async () => {
  await llm.close();
  await ptys.closeAll();
  rmSync(dir, { recursive: true, force: true });
});

const agent = (provider: 'openai-compatible' | 'openai' | 'anthropic') =>
  configSchema.parse({
    agent: { provider, model: 'test-model', base_url: llm.baseUrl, api_key_env: 'FAKE_KEY' },
  }).agent;

describe.each(['openai-compatible', 'openai', 'anthropic'] as const)(
  '%s provider over its real wire format',
  (kind) => {
    it('runs a whole agent: write_file, shell cat, stop', async () => {
      const provider = createProvider(agent(kind), { FAKE_KEY: 'sk-test-123' })!;
      const file = `${kind}.txt`;
      const before = llm.requests.length;
      const harness = new AgentHarness({
        provider,
        tools: builtinTools({ cwd: dir, ptyManager: ptys, goals: new Map(), defaultShellTimeoutMs: 10_000 }),
        sessions: new InMemorySessionStore(),
      });
      const result = await harness.run({ prompt: `create the file ${file}` });
      expect(result.terminateReason).toEqual({ kind: 'model_stop' });
      expect(result.finalText).toContain('VERDICT: PASS');
      expect(result.totalTokens).toBe(3 * 19);
      expect(readFileSync(join(dir, file), 'utf8')).toBe(`hello from ${file}\n`);
      const sent = llm.requests.slice(before);
      expect(sent).toHaveLength(3);
      expect(
        sent.every((request) => request.format === (kind === 'anthropic' ? 'anthropic' : 'openai')),
      ).toBe(true);
      const last = sent[2]!;
      if (kind === 'anthropic') {
        expect(last.headers['x-api-key']).toBe('sk-test-123');
        const blocks = last.body.messages.flatMap((message: any) =>
          Array.isArray(message.content) ? message.content : [],
        );
        expect(
          blocks.find(
            (block: any) =>
              block.type === 'tool_result' &&
              String(JSON.stringify(block.content)).includes(`hello from ${file}`),
          ),
        ).toBeDefined();
        expect(last.body.tools.map((tool: any) => tool.name)).toContain('write_file');
      } else {
        expect(last.headers.authorization).toBe('Bearer sk-test-123');
        const toolMessages = last.body.messages.filter((message: any) => message.role === 'tool');
        expect(toolMessages.map((message: any) => message.tool_call_id)).toHaveLength(2);
        expect(toolMessages[1].content).toContain(`hello from ${file}`);
        expect(last.body.tools.map((tool: any) => tool.function.name)).toContain('shell');
      }
    });
  },
);

describe('provider configuration', () => {
  it('no provider → undefined (terminals still work)', () => {
    expect(createProvider(configSchema.parse({}).agent)).toBeUndefined();
  });

  it.each([
    [
      { provider: 'openai-compatible', model: 'm' },
      '[agent].base_url is required for provider "openai-compatible"',
    ],
    [{ provider: 'openai' }, '[agent] provider is set but [agent].model is missing'],
    [
      { provider: 'anthropic', model: 'm', api_key_env: 'NOPE_NOT_SET' },
      '[agent].api_key_env names NOPE_NOT_SET, which is not set in the environment',
    ],
  ])('%j → a clear error', (agentConfig, message) => {
    expect(() => createProvider(configSchema.parse({ agent: agentConfig }).agent, {})).toThrow(
      new ProviderConfigError(message),
    );
  });
});
