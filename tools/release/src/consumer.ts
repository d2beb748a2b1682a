// The clean consumer project of the release test: an npm project (not pnpm), TypeScript strict with
// `module: nodenext` and `skipLibCheck: false`, that installs `@aleph/*` from a registry by name and
// version, type-checks a file importing every public entry point and sub-path, and runs one smoke
// program per package, the way a team that consumes the packages would.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { PublicPackage } from './public-packages.js';

export interface ConsumedPackage {
  readonly name: string;
  readonly version: string;
  /** Sub-paths of the `exports` map that are modules (`.`, `./testing`, …). */
  readonly entries: readonly string[];
}

const SMOKES: Readonly<Record<string, string>> = {
  '@aleph/power': `
import { createPowerCapability } from '@aleph/power';
const warnings: string[] = [];
const power = createPowerCapability({ onWarning: (message) => warnings.push(message) });
{
  using guard = power.inhibitSleep('release smoke');
  if (power.status().guardsHeld !== 1 || guard.released) throw new Error('the guard is not held');
}
if (power.status().guardsHeld !== 0) throw new Error('the guard was not released');
console.log('ok @aleph/power', power.status().backend);
`,
  '@aleph/pty': `
import { PtySession } from '@aleph/pty';
const session = PtySession.spawn({ command: '/bin/echo', args: ['hello from a pty'], cols: 80, rows: 24 });
let output = '';
session.onData((bytes) => (output += Buffer.from(bytes).toString('utf8')));
const exit = await new Promise((resolve) => session.onExit(resolve));
if (!output.includes('hello from a pty')) throw new Error('no echo: ' + JSON.stringify(output));
console.log('ok @aleph/pty', JSON.stringify(exit));
`,
  '@aleph/verification': `
import { ShellStopHook, StopHookVerifier, VerifierChain } from '@aleph/verification';
const chain = VerifierChain.builder()
  .with(new StopHookVerifier([new ShellStopHook({ name: 'tests', command: 'echo not yet >&2; exit 2' })]))
  .build();
const verdict = await chain.run(
  { iterations: 1, toolCallsMade: 0, finalText: 'done', recentToolCalls: [], stopReason: 'end_turn', projectDir: process.cwd() },
  new AbortController().signal,
);
if (verdict.kind !== 'veto' || !verdict.reason.includes('not yet')) throw new Error(JSON.stringify(verdict));
console.log('ok @aleph/verification', verdict.kind);
`,
  '@aleph/gateway': `
import { createGateway } from '@aleph/gateway';
import { connectGateway } from '@aleph/gateway/client';
const gateway = await createGateway({ token: 'release-smoke', port: 0 });
const client = await connectGateway(gateway.url, { token: 'release-smoke' });
await client.subscribe(['pty.*']);
let output = '';
client.onOutput(({ data }) => (output += Buffer.from(data).toString('utf8')));
const exited = new Promise((resolve) => client.onExit(resolve));
await client.spawn({ command: '/bin/echo', args: ['round trip'], cols: 80, rows: 24 });
await exited;
const deadline = Date.now() + 5000;
while (!output.includes('round trip') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
await client.close();
await gateway.close();
if (!output.includes('round trip')) throw new Error('no output: ' + JSON.stringify(output));
console.log('ok @aleph/gateway');
`,
  '@aleph/harness': `
import { AgentHarness, InMemorySessionStore, type Tool } from '@aleph/harness';
import { callTool, ScriptedProvider, stop } from '@aleph/harness/testing';
import { z } from 'zod';
const echo: Tool<{ text: string }> = {
  name: 'echo',
  description: 'Echo text back',
  input: z.object({ text: z.string() }),
  claim: () => ({ kind: 'none' }),
  execute: ({ text }) => Promise.resolve({ output: text }),
};
const provider = new ScriptedProvider([callTool('echo', { text: 'hi' }), stop()]);
const harness = new AgentHarness({ provider, tools: [echo], sessions: new InMemorySessionStore() });
const result = await harness.run({ prompt: 'say hi' });
if (result.terminateReason.kind !== 'model_stop' || provider.requests.length !== 2) {
  throw new Error(JSON.stringify(result.terminateReason));
}
console.log('ok @aleph/harness', result.terminateReason.kind);
`,
  '@aleph/sandbox': `
import { spawnSync } from 'node:child_process';
import { createSandbox } from '@aleph/sandbox';
const sandbox = createSandbox({ network: 'off', env: [] }, { mode: 'auto' });
const wrapped = sandbox.wrap({ file: 'true', args: [], cwd: process.cwd(), env: process.env });
const result = spawnSync(wrapped.file, wrapped.args, { cwd: wrapped.cwd, env: wrapped.env });
wrapped.release();
if (result.status !== 0) throw new Error('sandboxed true failed: ' + String(result.stderr));
console.log('ok @aleph/sandbox', sandbox.backend);
`,
  '@aleph/mcp': `
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { McpHub, parseMcpJson } from '@aleph/mcp';
// A stdio MCP server speaking newline-delimited JSON-RPC, with one tool: echo.
const server = [
  "import { createInterface } from 'node:readline';",
  'const send = (message) => process.stdout.write(JSON.stringify(message) + String.fromCharCode(10));',
  "createInterface({ input: process.stdin }).on('line', (line) => {",
  '  const request = JSON.parse(line);',
  '  if (request.id === undefined) return;',
  "  if (request.method === 'initialize') send({ jsonrpc: '2.0', id: request.id, result: { protocolVersion: request.params.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'echo', version: '1.0.0' } } });",
  "  else if (request.method === 'tools/list') send({ jsonrpc: '2.0', id: request.id, result: { tools: [{ name: 'echo', description: 'echoes text', inputSchema: { type: 'object', properties: { text: { type: 'string' } } } }] } });",
  "  else if (request.method === 'tools/call') send({ jsonrpc: '2.0', id: request.id, result: { content: [{ type: 'text', text: 'echo: ' + request.params.arguments.text }] } });",
  "  else send({ jsonrpc: '2.0', id: request.id, error: { code: -32601, message: 'method not found' } });",
  '});',
].join('\\n');
const dir = mkdtempSync(join(tmpdir(), 'aleph-mcp-smoke-'));
try {
  writeFileSync(join(dir, 'server.mjs'), server);
  // Unconfined servers start in the home folder unless they name their own cwd.
  const json = JSON.stringify({ mcpServers: { smoke: { command: process.execPath, args: ['server.mjs'], cwd: dir } } });
  const { servers, problems } = parseMcpJson(json, '.mcp.json', { env: process.env });
  if (problems.length > 0 || servers.length !== 1) throw new Error(JSON.stringify(problems));
  const hub = await McpHub.start(servers, { env: process.env, cwd: dir });
  try {
    const tool = hub.tools.find((candidate) => candidate.name === 'mcp__smoke__echo');
    if (tool === undefined) throw new Error('no tool: ' + JSON.stringify(hub.statuses));
    const result = await tool.call({ text: 'hi' }, new AbortController().signal);
    if (result.isError || !result.output.includes('echo: hi')) throw new Error(JSON.stringify(result));
  } finally {
    await hub.close();
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
console.log('ok @aleph/mcp');
`,
  '@aleph/cluster': `
import { connectCluster, resolveOptions } from '@aleph/cluster';
import { natsServerBinary, startNatsServer } from '@aleph/cluster/testing';
if (resolveOptions({ servers: ['nats://127.0.0.1:4222'], node: 'a' }).node !== 'a') throw new Error('options');
if (natsServerBinary() === undefined) {
  console.log('ok @aleph/cluster (no nats-server here: options only)');
} else {
  const nats = await startNatsServer();
  try {
    const cluster = await connectCluster({ servers: [nats.url], node: 'release-smoke' });
    try {
      const nodes = await cluster.nodes();
      if (!nodes.includes('release-smoke')) throw new Error('not registered: ' + JSON.stringify(nodes));
    } finally {
      await cluster.close();
    }
  } finally {
    await nats.dispose();
  }
  console.log('ok @aleph/cluster');
}
`,
};

/** What the consumer installs of each package: its version and the module entries of its `exports`. */
export function consumedPackages(packages: readonly PublicPackage[]): ConsumedPackage[] {
  return packages.map((pkg) => {
    const manifest = JSON.parse(readFileSync(join(pkg.dir, 'package.json'), 'utf8')) as {
      exports: Record<string, unknown>;
    };
    return {
      name: pkg.name,
      version: pkg.version,
      entries: Object.keys(manifest.exports).filter((entry) => !entry.endsWith('.json')),
    };
  });
}

/** Packages whose smoke program the consumer runs (others are type-checked and imported only). */
export const SMOKED = Object.keys(SMOKES);

const moduleName = (name: string, entry: string): string =>
  entry === '.' ? name : `${name}${entry.slice(1)}`;
const identifier = (name: string, entry: string): string =>
  moduleName(name, entry)
    .replace(/^@aleph\//, '')
    .replace(/[^a-zA-Z0-9]+(.)/g, (_match, next: string) => next.toUpperCase());

/** Writes the project; `npm install` and `tsc` are the caller's. */
export function writeConsumer(dir: string, packages: readonly ConsumedPackage[]): void {
  mkdirSync(join(dir, 'src'), { recursive: true });
  const manifest = {
    name: 'aleph-consumer',
    private: true,
    type: 'module',
    dependencies: {
      ...Object.fromEntries(packages.map((pkg) => [pkg.name, pkg.version])),
      zod: '^4.1.0',
    },
    devDependencies: { typescript: '~5.9.3', '@types/node': '^20.19.0' },
    // npm's install-script policy: node-pty (under @aleph/pty) builds its addon when it installs.
    allowScripts: { 'node-pty': true },
  };
  writeFileSync(join(dir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  const tsconfig = {
    compilerOptions: {
      target: 'ES2022',
      lib: ['ES2023', 'ESNext.Disposable'],
      module: 'nodenext',
      moduleResolution: 'nodenext',
      strict: true,
      skipLibCheck: false,
      types: ['node'],
      outDir: 'dist',
      rootDir: 'src',
    },
    include: ['src'],
  };
  writeFileSync(join(dir, 'tsconfig.json'), `${JSON.stringify(tsconfig, null, 2)}\n`);
  const imports = packages.flatMap((pkg) =>
    pkg.entries.map(
      (entry) => `import * as ${identifier(pkg.name, entry)} from '${moduleName(pkg.name, entry)}';`,
    ),
  );
  const names = packages.flatMap((pkg) => pkg.entries.map((entry) => identifier(pkg.name, entry)));
  writeFileSync(
    join(dir, 'src/every-entry.ts'),
    `// Every public entry point and sub-path of every published package.\n${imports.join('\n')}\n\n` +
      `export const modules = [${names.join(', ')}];\n` +
      `for (const module of modules) if (Object.keys(module).length === 0) throw new Error('an empty entry point');\n` +
      `console.log('ok every entry point', modules.length);\n`,
  );
  for (const [name, source] of Object.entries(SMOKES)) {
    if (!packages.some((pkg) => pkg.name === name)) continue;
    writeFileSync(join(dir, `src/smoke-${name.replace('@aleph/', '')}.ts`), `${source.trim()}\nexport {};\n`);
  }
}
