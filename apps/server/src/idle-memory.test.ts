// What an idle server holds: the packages its configuration does not use yet are not loaded (the
// provider's AI SDK package until the first run, the MCP SDK while no run has an MCP server, the
// OpenTelemetry API while no telemetry endpoint is set, not even for a run's spans).
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { connectGateway } from '@aleph/gateway/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startFakeLlm, writeCatStop, type FakeLlm } from '../test/fake-llm.js';
import { startServerProcess } from '../test/server-process.js';

/**
 * `node --import <recorder>?out=<path>`: appends the URL of every module the process resolves to
 * <path>, one a line, before the module loads (through the module hooks, on their own thread).
 */
const RECORDER = `
import { register } from 'node:module';
const out = new URL(import.meta.url).searchParams.get('out');
const hooks = \`
import { appendFileSync } from 'node:fs';
let out;
export function initialize(data) { out = data.out; }
export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  appendFileSync(out, resolved.url + '\\\\n');
  return resolved;
}\`;
register('data:text/javascript,' + encodeURIComponent(hooks), import.meta.url, { data: { out } });
`;
const DEFERRED =
  /\/node_modules\/(@ai-sdk\/(?:openai-compatible|openai|anthropic|provider-utils)|@modelcontextprotocol\/sdk|@opentelemetry\/[^/]+)\//;

let llm: FakeLlm;
let work: string;
beforeAll(async () => {
  llm = await startFakeLlm(writeCatStop);
  work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-idle-')));
});
afterAll(async () => {
  await llm.close();
  rmSync(work, { recursive: true, force: true });
});

it('the provider package loads at the first run, the MCP SDK and OpenTelemetry not at all without their settings', async () => {
  const out = join(work, 'loaded.txt');
  const recorder = join(work, 'recorder.mjs');
  writeFileSync(out, '');
  writeFileSync(recorder, RECORDER);
  const server = await startServerProcess(
    `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake"\nbase_url = "${llm.baseUrl}"\n\n[sandbox]\nmode = "off"\n\n[power]\ninhibit_sleep = false\n`,
    { NODE_OPTIONS: `--import=${pathToFileURL(recorder).href}?out=${out}` },
  );
  const client = await connectGateway(server.url, { token: server.token });
  try {
    const deferred = (): string[] =>
      readFileSync(out, 'utf8')
        .split('\n')
        .flatMap((url) => DEFERRED.exec(url)?.[1] ?? []);
    expect(readFileSync(out, 'utf8')).toContain('/apps/server/dist/server.js');
    expect(deferred()).toEqual([]);

    await client.subscribe(['agent.done']);
    const done = new Promise<Record<string, unknown>>((resolve) =>
      client.onEvent((topic, params) => topic === 'agent.done' && resolve(params as Record<string, unknown>)),
    );
    await client.request('agent.run', { prompt: 'create the file idle.txt', cwd: work });
    expect((await done)['terminateReason']).toEqual({ kind: 'model_stop' });
    expect(new Set(deferred())).toEqual(new Set(['@ai-sdk/openai-compatible', '@ai-sdk/provider-utils']));
  } finally {
    await client.close();
    await server.stop();
    rmSync(server.stateDir, { recursive: true, force: true });
  }
});
