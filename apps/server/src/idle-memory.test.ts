// What an idle server holds: the packages its configuration does not use yet are not loaded (the
// provider's AI SDK package until the first run, the MCP SDK while no run has an MCP server, the
// OpenTelemetry API while no telemetry endpoint is set, not even for a run's spans); V8's optimizing
// compiler compiles nothing until the server is idle; the C heap's free pages are given back then.
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { connectGateway } from '@aleph/gateway/client';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startFakeLlm, writeCatStop, type FakeLlm } from '../test/fake-llm.js';
import { MAIN, runToExit, startServerProcess } from '../test/server-process.js';

const IDLE_MEMORY = pathToFileURL(resolve(import.meta.dirname, '../dist/idle-memory.js')).href;
/** Whether a process has the native module that trims the C heap (dist/native) mapped. */
const trimLoaded = (pid: number): boolean =>
  readFileSync(`/proc/${pid}/maps`, 'utf8').includes('release-memory.node');

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
    await expect.poll(() => trimLoaded(server.child.pid!), { timeout: 30_000 }).toBe(true);

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

it('V8 optimizes nothing with TurboFan until the server is idle, then as usual; the C heap is trimmed then', async () => {
  const probe = `
import v8 from 'node:v8';
import { readFileSync } from 'node:fs';
const idle = await import(${JSON.stringify(IDLE_MEMORY)});
const mapped = () => readFileSync('/proc/self/maps', 'utf8').includes('release-memory.node');
const before = v8.cachedDataVersionTag();
idle.deferOptimization();
const during = v8.cachedDataVersionTag();
const deferred = idle.optimizationIsDeferred();
const trimmedEarly = mapped();
await idle.releaseStartupMemory();
console.log(JSON.stringify({ before, during, deferred, after: v8.cachedDataVersionTag(), again: idle.optimizationIsDeferred(), trimmedEarly, trimmed: mapped() }));
`;
  const plain = await runToExit(['--input-type=module', '-e', probe]);
  expect(plain.stdout, plain.stderr).toMatch(/^\{/);
  const seen = JSON.parse(plain.stdout) as Record<string, unknown>;
  // The flags' hash (part of the tag) changes while TurboFan is off and is the same again after.
  expect(seen).toMatchObject({ deferred: true, again: false, trimmedEarly: false, trimmed: true });
  expect(seen['during']).not.toBe(seen['before']);
  expect(seen['after']).toBe(seen['before']);

  // A node option that chooses V8's tiers is the user's: left as given, before and after.
  const chosen = await runToExit(['--no-opt', '--input-type=module', '-e', probe]);
  expect(chosen.stdout, chosen.stderr).toMatch(/^\{/);
  const kept = JSON.parse(chosen.stdout) as Record<string, unknown>;
  expect(kept).toMatchObject({ deferred: false, again: false, trimmed: true });
  expect(kept['during']).toBe(kept['before']);
  expect(kept['after']).toBe(kept['before']);
});

// Every module of main.js's static graph is resolved before main() holds TurboFan back, and resolving
// a module URL runs the loader's path functions once per character: a big static graph, or the same
// graph under a long checkout path, had V8 optimize them at start. Only builtins and three small
// modules are static; the rest is imported by main() after deferOptimization.
it("main.js's static import graph is node builtins and three small modules", () => {
  const dist = resolve(import.meta.dirname, '../dist');
  const seen = new Set<string>();
  const visit = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    const source = readFileSync(join(dist, file), 'utf8');
    for (const [, specifier] of source.matchAll(/^(?:import|export)\b[^;]*?\bfrom '([^']+)'/gms)) {
      if (specifier!.startsWith('node:')) continue;
      expect(specifier, `${file} imports ${specifier} statically`).toMatch(/^\.\/[\w-]+\.js$/);
      visit(specifier!.slice(2));
    }
  };
  visit('main.js');
  expect([...seen].sort()).toEqual(['idle-memory.js', 'main.js', 'state.js', 'user-environment.js']);
});

it('the server starts with no TurboFan compilation, and trims its C heap once idle', async () => {
  const config = join(work, 'trace.toml');
  writeFileSync(config, '[gateway]\nport = 0\n\n[sandbox]\nmode = "off"\n\n[power]\ninhibit_sleep = false\n');
  const state = mkdtempSync(join(tmpdir(), 'aleph-idle-state-'));
  const child = spawn(process.execPath, ['--trace-opt', MAIN, '--config', config], {
    env: { ...process.env, ALEPH_STATE_DIR: state, ALEPH_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise((done) => child.once('exit', done));
  try {
    await expect
      .poll(() => (child.exitCode === null ? stdout : `exited: ${stderr}`), { timeout: 60_000 })
      .toMatch(/^no LLM provider|exited/m);
    const start = stdout.slice(0, stdout.search(/^no LLM provider/m));
    expect(start).toMatch(/^Aleph listening on /m);
    // --trace-opt prints a line for every function sent to TurboFan.
    expect(start).not.toMatch(/TURBOFAN/);
    await expect.poll(() => trimLoaded(child.pid!), { timeout: 30_000 }).toBe(true);
  } finally {
    child.kill('SIGTERM');
    await exited;
    rmSync(state, { recursive: true, force: true });
  }
});

// One module more at start (the providers' transport) had V8 optimize a function once the server was
// idle, paging in TurboFan's code: +3.5 MiB resident for good.
it('a server with a provider and the sandbox stays without TurboFan once idle', async () => {
  const config = join(work, 'idle-provider.toml');
  writeFileSync(
    config,
    `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake"\nbase_url = "${llm.baseUrl}"\n\n[sandbox]\nmode = "required"\n\n[power]\ninhibit_sleep = false\n`,
  );
  const state = mkdtempSync(join(tmpdir(), 'aleph-idle-state-'));
  const child = spawn(process.execPath, ['--trace-opt', MAIN, '--config', config], {
    env: { ...process.env, ALEPH_STATE_DIR: state, ALEPH_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const exited = new Promise((done) => child.once('exit', done));
  try {
    await expect
      .poll(() => (child.exitCode === null ? stdout : `exited: ${stderr}`), { timeout: 60_000 })
      .toMatch(/^provider: |exited/m);
    await expect.poll(() => trimLoaded(child.pid!), { timeout: 30_000 }).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(stdout).toMatch(/^provider: openai-compatible/m);
    expect(stdout).not.toMatch(/TURBOFAN/);
  } finally {
    child.kill('SIGTERM');
    await exited;
    rmSync(state, { recursive: true, force: true });
  }
});

it('after work, once the event loop has been quiet for a while, the release runs again: once, and never without work', async () => {
  const probe = `
import { readFileSync } from 'node:fs';
const idle = await import(${JSON.stringify(IDLE_MEMORY)});
const mapped = () => readFileSync('/proc/self/maps', 'utf8').includes('release-memory.node');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let releases = 0;
const stop = idle.releaseAfterWork({ everyMs: 400, quietSamples: 2, busy: 0.2, onRelease: () => (releases += 1) });
await sleep(2000);
const whileIdle = { releases, mapped: mapped() };
const end = performance.now() + 1000;
while (performance.now() < end); // work: the loop busy for whole samples
for (let waited = 0; waited < 30000 && releases === 0; waited += 100) await sleep(100);
const afterWork = releases;
await sleep(4000);
stop();
console.log(JSON.stringify({ whileIdle, afterWork, total: releases, mapped: mapped() }));
`;
  const { stdout, stderr } = await runToExit(['--input-type=module', '-e', probe]);
  expect(stdout, stderr).toMatch(/^\{/);
  expect(JSON.parse(stdout)).toEqual({
    whileIdle: { releases: 0, mapped: false },
    afterWork: 1,
    total: 1,
    mapped: true,
  });
});
