import { spawn, type ChildProcess } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve, sep } from 'node:path';
import { createSandbox } from '@aleph/sandbox';
import { afterEach, describe, expect, it } from 'vitest';
import { loadMcpServers, parseMcpJson, type McpServerConfig } from './config.js';
import { MAX_TOOLS, MAX_TOOLS_CHARS, MAX_TOOLS_PER_SERVER } from './hub-types.js';
import { McpHub } from './mcp-hub.js';

const PACKAGE = resolve(import.meta.dirname, '..');
const FILESYSTEM = join(PACKAGE, 'node_modules/@modelcontextprotocol/server-filesystem/dist/index.js');
const EVERYTHING = join(PACKAGE, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js');
const HOSTILE = join(PACKAGE, 'fixtures/hostile-server.mjs');

const hubs: McpHub[] = [];
const children: ChildProcess[] = [];
const dirs: string[] = [];
afterEach(async () => {
  await Promise.all(hubs.splice(0).map((hub) => hub.close()));
  for (const child of children.splice(0)) child.kill('SIGKILL');
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const tempDir = (): string => {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-mcp-')));
  dirs.push(dir);
  return dir;
};

/** Servers from a `.mcp.json` text, as a run reads them. */
function servers(json: object, env: Record<string, string> = {}): McpServerConfig[] {
  const list = parseMcpJson(JSON.stringify(json), '/p/.mcp.json', {
    env,
    startTimeoutMs: 20_000,
    callTimeoutMs: 20_000,
  });
  expect(list.problems).toEqual([]);
  return [...list.servers];
}

async function start(list: McpServerConfig[], cwd = tempDir()) {
  const notices: string[] = [];
  const hub = await McpHub.start(list, {
    env: { ...process.env, ALEPH_TOKEN: 'secret-token' },
    stripEnv: ['ALEPH_TOKEN'],
    cwd,
    onNotice: ({ server, message }) => notices.push(`${server}: ${message}`),
  });
  hubs.push(hub);
  return { hub, notices };
}

const call = (hub: McpHub, name: string, args: unknown = {}) => {
  const tool = hub.tools.find((candidate) => candidate.name === name);
  if (tool === undefined) throw new Error(`no tool ${name} in ${hub.tools.map((t) => t.name).join(', ')}`);
  return tool.call(args, new AbortController().signal);
};

describe('real servers from npm', () => {
  it('server-filesystem over stdio: read_text_file returns the file', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'notes.txt'), 'the quick brown fox\n');
    const { hub } = await start(
      servers({ mcpServers: { filesystem: { command: process.execPath, args: [FILESYSTEM, dir] } } }),
    );
    expect(hub.statuses[0]).toMatchObject({ name: 'filesystem', state: 'ready', transport: 'stdio' });
    const read = hub.tools.find((tool) => tool.name === 'mcp__filesystem__read_text_file');
    expect(read).toMatchObject({ readOnly: true, kind: 'evidence' });
    expect(hub.tools.find((tool) => tool.name === 'mcp__filesystem__write_file')?.kind).toBe('mutation');
    expect(read?.inputSchema).toMatchObject({ type: 'object', properties: { path: { type: 'string' } } });
    expect(await call(hub, 'mcp__filesystem__read_text_file', { path: join(dir, 'notes.txt') })).toEqual({
      output: 'the quick brown fox\n',
      isError: false,
    });
    const outside = await call(hub, 'mcp__filesystem__read_text_file', { path: '/etc/hostname' });
    expect(outside.isError).toBe(true);
    expect(outside.output).toMatch(/denied|outside/i);
    await hub.close();
    expect(hub.statuses).toEqual([
      { name: 'filesystem', transport: 'stdio', source: hub.statuses[0]?.source, state: 'closed', tools: [] },
    ]);
    expect(hub.tools).toEqual([]);
  });

  it('server-everything over stdio: echo, an image as a placeholder, the environment without the secrets', async () => {
    const { hub } = await start(
      servers({
        mcpServers: {
          everything: {
            command: process.execPath,
            args: [EVERYTHING, 'stdio'],
            env: { GREETING: '${WHO:-world}' },
          },
        },
      }),
    );
    expect(await call(hub, 'mcp__everything__echo', { message: 'hello' })).toEqual({
      output: 'Echo: hello',
      isError: false,
    });
    const image = await call(hub, 'mcp__everything__get-tiny-image');
    expect(image.output).toMatch(/\[image: image\/png, \d+ bytes, not shown\]/);
    const env = await call(hub, 'mcp__everything__get-env');
    expect(env.output).toContain('"GREETING": "world"');
    expect(env.output).not.toContain('secret-token');
    expect(env.output).toContain(`"PATH"`);
  });

  it('server-everything over Streamable HTTP', async () => {
    const port = await freePort();
    const child = spawn(process.execPath, [EVERYTHING, 'streamableHttp'], {
      env: { ...process.env, PORT: String(port) },
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    children.push(child);
    await new Promise<void>((ready, fail) => {
      child.stderr?.on('data', (chunk: Buffer) => {
        if (chunk.toString().includes('listening')) ready();
      });
      child.once('exit', (code) => fail(new Error(`server-everything exited ${code}`)));
    });
    const { hub } = await start(
      servers({ mcpServers: { remote: { type: 'http', url: `http://127.0.0.1:${port}/mcp` } } }),
    );
    expect(hub.statuses[0]).toMatchObject({ state: 'ready', transport: 'http' });
    expect(await call(hub, 'mcp__remote__echo', { message: 'over http' })).toEqual({
      output: 'Echo: over http',
      isError: false,
    });
    expect((await call(hub, 'mcp__remote__get-sum', { a: 2, b: 3 })).output).toContain('5');
  });

  it('a killed server: an error naming it, one restart, then marked failed', async () => {
    const { hub, notices } = await start(
      servers({ mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] } } }),
    );
    const echo = hub.tools.find((tool) => tool.name === 'mcp__everything__echo')!; // the model keeps its tools
    const first = hub.statuses[0]?.pid;
    expect(first).toBeTypeOf('number');
    process.kill(first!, 'SIGKILL');
    await waitFor(() => hub.statuses[0]?.pid !== undefined && hub.statuses[0]?.pid !== first, notices);
    // Restarted once: it answers again.
    expect(await call(hub, 'mcp__everything__echo', { message: 'again' })).toEqual({
      output: 'Echo: again',
      isError: false,
    });
    const second = hub.statuses[0]?.pid;
    expect(second).not.toBe(first);
    process.kill(second!, 'SIGKILL');
    await waitFor(() => hub.statuses[0]?.state === 'failed');
    const after = await echo.call({ message: 'x' }, new AbortController().signal);
    expect(after.isError).toBe(true);
    expect(after.output).toMatch(/^MCP server everything failed: .*after one restart/);
    expect(notices.join('\n')).toMatch(/everything: the connection closed.*restarting it/);
  });
});

describe('hostile servers are reported and skipped, never a hang', () => {
  const hostile = (mode: string, timeouts: { start?: number; call?: number } = {}) =>
    servers({
      mcpServers: {
        [mode]: {
          command: process.execPath,
          args: [HOSTILE, mode],
          startup_timeout_secs: timeouts.start ?? 20,
          tool_timeout_secs: timeouts.call ?? 20,
        },
      },
    });

  it('garbage on stdout is reported; the valid answers still count', async () => {
    const { hub, notices } = await start(hostile('garbage'));
    expect(await call(hub, 'mcp__garbage__ping')).toEqual({ output: 'pong', isError: false });
    expect(
      notices.some((notice) =>
        /garbage: wrote a line on stdout that is not JSON-RPC: "this is not json"/.test(notice),
      ),
    ).toBe(true);
  });

  it('an HTTP server that refuses the connection or answers 401: the cause and the status are said', async () => {
    const closed = createServer();
    await new Promise<void>((ready) => closed.listen(0, '127.0.0.1', ready));
    const closedPort = (closed.address() as { port: number }).port;
    await new Promise((done) => closed.close(done)); // nothing listens there now
    const refusing = createHttpServer((_request, response) => {
      response.writeHead(401, { 'content-type': 'application/json' }).end('{"error":"invalid token"}');
    });
    await new Promise<void>((ready) => refusing.listen(0, '127.0.0.1', ready));
    const port = (refusing.address() as { port: number }).port;
    try {
      const { hub } = await start(
        servers({
          mcpServers: {
            gone: { type: 'http', url: `http://127.0.0.1:${closedPort}/mcp` },
            locked: { type: 'http', url: `http://127.0.0.1:${port}/mcp` },
          },
        }),
      );
      expect(hub.statuses[0]).toMatchObject({ state: 'failed' });
      expect(hub.statuses[0]?.error).toMatch(
        /^not started: fetch failed \(connect ECONNREFUSED 127\.0\.0\.1:\d+\)$/,
      );
      expect(hub.statuses[1]).toMatchObject({ state: 'failed' });
      expect(hub.statuses[1]?.error).toMatch(/^not started: HTTP 401: .*invalid token/);
    } finally {
      refusing.closeAllConnections();
      await new Promise((done) => refusing.close(done));
    }
  });

  it('a project .mcp.json server in a hub given no sandbox is left out, saying it runs only confined', async () => {
    const project = tempDir();
    writeFileSync(join(project, '.mcp.json'), JSON.stringify({ mcpServers: { p: { command: 'true' } } }));
    const list = loadMcpServers({ env: {}, projectDir: project, startTimeoutMs: 20_000 });
    expect(list.problems).toEqual([]);
    const { hub } = await start([...list.servers]);
    expect(hub.statuses[0]).toMatchObject({ state: 'failed' });
    expect(hub.statuses[0]?.error).toBe(
      "not started: a project .mcp.json server runs only confined, and this hub was given no sandbox (McpHubOptions' wrap)",
    );
  });

  it('never answering initialize: a start timeout, the server left out', async () => {
    const { hub } = await start(hostile('silent', { start: 1 }));
    expect(hub.statuses[0]).toMatchObject({ state: 'failed', tools: [] });
    expect(hub.statuses[0]?.error).toContain('did not answer initialize/tools/list within 1 s');
    expect(hub.tools).toEqual([]);
  });

  it('an invalid schema: that tool is left out and said, the others kept', async () => {
    const { hub, notices } = await start(hostile('bad-schema'));
    expect(hub.tools.map((tool) => tool.name)).toEqual(['mcp__bad-schema__ping']);
    expect(notices.join('\n')).toMatch(/bad-schema: tool broken left out: invalid inputSchema\.type/);
  });

  it('tools whose names meet once made safe: the first is kept, each other left out and said', async () => {
    const { hub, notices } = await start(hostile('same-names'));
    expect(hub.tools.map((tool) => [tool.name, tool.tool])).toEqual([
      ['mcp__same-names__ping', 'ping'],
      ['mcp__same-names__a_b', 'a.b'],
    ]);
    const said = notices.join('\n');
    expect(said).toContain('tool "a_b" left out: its name mcp__same-names__a_b is taken by "a.b"');
    expect(said).toContain('tool "a b" left out: its name mcp__same-names__a_b is taken by "a.b"');
  });

  it('a description or a schema over its limit: that tool is left out and said, the others kept', async () => {
    const { hub, notices } = await start(hostile('big-definitions'));
    expect(hub.tools.map((tool) => tool.name)).toEqual(['mcp__big-definitions__ping']);
    const said = notices.join('\n');
    expect(said).toContain(
      'big-definitions: tool "wordy" left out: its description is 20,001 characters, over the limit of 20,000',
    );
    expect(said).toMatch(
      /big-definitions: tool "schematic" left out: its inputSchema is 100,\d{3} characters of JSON, over the limit of 100,000/,
    );
  });

  const many = (name: string, ...args: number[]) => ({
    [name]: { command: process.execPath, args: [HOSTILE, 'many', ...args.map(String)] },
  });
  const definitions = (hub: McpHub) =>
    JSON.stringify(
      hub.tools.map(({ name, description, inputSchema }) => ({ name, description, inputSchema })),
    ).length;

  it('100 tools with 100 KB descriptions add nothing to each request: left out, the first ten named, the rest counted', async () => {
    const { hub, notices } = await start(servers({ mcpServers: many('docs', 100, 100_000) }));
    expect(hub.tools).toEqual([]);
    // The first ten named, the rest counted: a hostile server cannot flood the run with notices.
    expect(notices.filter((notice) => /over the limit of 20,000$/.test(notice))).toHaveLength(10);
    expect(notices.at(-1)).toBe('docs: 90 more tools left out, not named one by one');
    expect(notices[0]).toBe(
      'docs: tool "t0" left out: its description is 100,000 characters, over the limit of 20,000',
    );
  });

  it('20,000 tools over 20 pages: the first 256 kept, the rest said once', async () => {
    const { hub, notices } = await start(servers({ mcpServers: many('lots', 20_000, 1_000, 1_000) }));
    expect(hub.tools).toHaveLength(MAX_TOOLS_PER_SERVER);
    expect(hub.tools.at(-1)?.tool).toBe('t255');
    expect(notices).toEqual([
      'lots: tool "t256" and any after it left out: more than 256 tools listed, the limit for one server',
    ]);
  });

  it("one server's definitions past 1,000,000 characters: the tools that fit kept, the first left out named", async () => {
    const { hub, notices } = await start(servers({ mcpServers: many('wordy', 100, 19_000) }));
    expect(hub.tools).toHaveLength(52);
    expect(definitions(hub)).toBeLessThan(MAX_TOOLS_CHARS + 10_000);
    expect(notices).toEqual([
      'wordy: tool "t52" and any after it left out: over the limit of 1,000,000 characters of tool definitions',
    ]);
  });

  it('all servers together: 512 tools, in configuration order; the first server past it says what it left out', async () => {
    const { hub, notices } = await start(
      servers({ mcpServers: { ...many('a', 256, 10), ...many('b', 200, 10), ...many('c', 100, 10) } }),
    );
    expect(hub.tools).toHaveLength(MAX_TOOLS);
    expect(hub.statuses.map((status) => status.tools.length)).toEqual([256, 200, 56]);
    expect(notices).toEqual([
      'c: tool "t56" and the 43 after it left out: over the limit of 512 tools of all servers together',
    ]);
  });

  it('a schema nesting deeper than 100 levels: that tool is left out and said, the others kept', async () => {
    const deep = (name: string, levels: number) => ({
      [name]: { command: process.execPath, args: [HOSTILE, 'deep', String(levels)] },
    });
    const { hub, notices } = await start(
      servers({ mcpServers: { ...deep('a', 100), ...deep('b', 101), ...deep('c', 5_000) } }),
    );
    expect(hub.statuses.map((status) => status.state)).toEqual(['ready', 'ready', 'ready']);
    expect(hub.tools.map((tool) => tool.name)).toEqual([
      'mcp__a__ping',
      'mcp__a__deep',
      'mcp__a__pong',
      'mcp__b__ping',
      'mcp__b__pong',
      'mcp__c__ping',
      'mcp__c__pong',
    ]);
    // The servers start at once: their notices come in any order.
    expect(notices.toSorted()).toEqual([
      'b: tool "deep" left out: its inputSchema nests deeper than 100 levels',
      'c: tool "deep" left out: its inputSchema nests deeper than 100 levels',
    ]);
  });

  it('one tool a page: up to 256 tools; past them, or past 257 pages, what is left out is said', async () => {
    const { hub, notices } = await start(
      servers({
        mcpServers: {
          ...many('paged', 150, 10, 1),
          ...many('over', 300, 10, 1),
          endless: { command: process.execPath, args: [HOSTILE, 'endless'] },
        },
      }),
    );
    expect(hub.statuses.map((status) => status.tools.length)).toEqual([150, MAX_TOOLS_PER_SERVER, 1]);
    expect(notices.toSorted()).toEqual([
      'endless: more than 257 tools/list pages, the limit for one server: the 1 tool of the first 257 kept, any on later pages left out',
      'over: tool "t256" and any after it left out: more than 256 tools listed, the limit for one server',
    ]);
  });

  it('errors the client reports (messages it cannot place): the first 10 said in excerpts, then only counted, the whole run', async () => {
    const { hub, notices } = await start(
      servers({
        mcpServers: { stray: { command: process.execPath, args: [HOSTILE, 'stray', '600', '10000'] } },
      }),
    );
    expect(hub.tools.map((tool) => tool.name)).toEqual(['mcp__stray__ping']);
    await waitFor(() => notices.length >= 12, notices);
    expect(notices).toHaveLength(12);
    for (const notice of notices.slice(0, 10)) {
      expect(notice).toMatch(
        /^stray: Received a (response for an unknown message ID|progress notification for an unknown token): \{/,
      );
      expect(notice.length).toBeLessThan(600);
    }
    // A response's whole text is cut (the SDK keeps no padding of a progress notification).
    expect(
      notices.filter((notice) => /^stray: Received a response.*… \(10,\d{3} characters\)$/.test(notice)),
    ).not.toHaveLength(0);
    expect(notices.slice(10)).toEqual([
      'stray: more than 10 errors: the rest are counted, not reported one by one',
      'stray: 100 errors so far, the first 10 reported',
    ]);
    expect(await call(hub, 'mcp__stray__ping')).toEqual({ output: 'pong', isError: false });
    await waitFor(() => notices.length > 12, notices);
    expect(notices.slice(12)).toEqual(['stray: 1,000 errors so far, the first 10 reported']);
  });

  it('names of a million characters: each notice says an excerpt and the length, a few KB at most', async () => {
    const { hub, notices } = await start(
      servers({
        mcpServers: { long: { command: process.execPath, args: [HOSTILE, 'long-names', '1000000'] } },
      }),
    );
    expect(hub.tools).toHaveLength(254);
    expect(notices).toHaveLength(3);
    expect(notices[0]).toBe(
      `long: tool ${'L'.repeat(100)}… (1,000,000 characters) left out: mcp__long__${'L'.repeat(89)}… (1,000,011 characters) is longer than 64 characters`,
    );
    expect(notices[1]).toMatch(
      /^long: tool I{100}… \(1,000,000 characters\) left out: invalid inputSchema\.type/,
    );
    expect(notices[2]).toBe(
      `long: tool "${'M'.repeat(100)}"… (1,000,000 characters) and any after it left out: more than 256 tools listed, the limit for one server`,
    );
    for (const notice of notices) expect(notice.length).toBeLessThan(2_100);
  });

  it('a 50 MB result is capped, the cut said', async () => {
    const { hub } = await start(hostile('huge'));
    const result = await call(hub, 'mcp__huge__ping');
    expect(result.output.length).toBeLessThan(101_000);
    expect(result.output).toContain(`[${50 * 1024 * 1024 - 100_000} of ${50 * 1024 * 1024} characters cut]`);
  });

  it('a call that hangs: a timeout error naming the server, then a restart', async () => {
    const { hub, notices } = await start(hostile('hang', { call: 1 }));
    const result = await call(hub, 'mcp__hang__ping');
    expect(result).toEqual({
      output: 'MCP server hang did not answer ping within 1 s (restarted once; it may be called again)',
      isError: true,
    });
    await waitFor(() => notices.some((notice) => notice.includes('restarting it')));
    expect(hub.statuses[0]?.state).toBe('ready');
  });

  it('a crash during a call: an error naming the server and its exit', async () => {
    const { hub } = await start(hostile('crash'));
    const result = await call(hub, 'mcp__crash__ping');
    expect(result.isError).toBe(true);
    expect(result.output).toMatch(/^MCP server crash crashed during ping/);
    const again = await call(hub, 'mcp__crash__ping');
    expect(again.output).toMatch(/^MCP server crash (crashed during ping|failed)/);
    await waitFor(() => hub.statuses[0]?.state === 'failed');
  });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  const { port } = server.address() as { port: number };
  await new Promise((closed) => server.close(closed));
  return port;
}

async function waitFor(condition: () => boolean, notices: string[] = [], ms = 15_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`condition not met in time; notices: ${notices.join(' | ')}`);
    await new Promise((tick) => setTimeout(tick, 25));
  }
}

describe('where a stdio server starts', () => {
  it('an unconfined server starts in the home folder, not the project: what the project holds is not run', async () => {
    const project = tempDir();
    const home = tempDir();
    // What a model could plant in the project: npx would run it first.
    mkdirSync(join(project, 'node_modules', '.bin'), { recursive: true });
    writeFileSync(
      join(project, 'node_modules', '.bin', 'planted'),
      `#!/bin/sh\ntouch ${join(project, 'PLANTED-RAN')}\n`,
      { mode: 0o755 },
    );
    // The server records its cwd, then runs the real filesystem server over the project.
    const list = servers({
      mcpServers: {
        fs: {
          command: '/bin/sh',
          args: [
            '-c',
            `pwd > ${join(project, 'cwd.txt')}; ./node_modules/.bin/planted; exec "$0" "$@"`,
            process.execPath,
            FILESYSTEM,
            project,
          ],
        },
      },
    });
    const hub = await McpHub.start(list, { env: process.env, cwd: project, unconfinedCwd: home });
    hubs.push(hub);
    expect(hub.statuses[0]?.state).toBe('ready');
    expect(readFileSync(join(project, 'cwd.txt'), 'utf8').trim()).toBe(home);
    expect(existsSync(join(project, 'PLANTED-RAN'))).toBe(false);
  });
});

// The sandbox has a /tmp of its own: a checkout under the temporary folder (a CI's clone) has no
// server for it to run there.
const underTmp = realpathSync(EVERYTHING).startsWith(`${realpathSync(tmpdir())}${sep}`);
describe.skipIf(process.platform !== 'linux' || underTmp)(
  'a confined server gives back what its sandbox made',
  () => {
    it("the sandbox's stand-ins (an absent .git, .claude) are gone once the hub closed, a restart's too", async () => {
      const project = realpathSync(mkdtempSync('/var/tmp/aleph-mcp-release-'));
      dirs.push(project);
      const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(project, 'no-home') });
      const list = servers({
        mcpServers: { everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] } },
      });
      const hub = await McpHub.start(
        list.map((server) => ({ ...server, sandbox: true })),
        { env: process.env, cwd: project, wrap: (command) => box.wrap(command) },
      );
      hubs.push(hub);
      expect(hub.statuses[0]?.state).toBe('ready');
      expect(readdirSync(project)).toContain('.git'); // the stand-in while the server runs
      const first = hub.statuses[0]!.pid!;
      process.kill(-first, 'SIGKILL'); // its whole group: the sandbox goes with it
      await waitFor(() => hub.statuses[0]?.pid !== undefined && hub.statuses[0]?.pid !== first);
      expect(await call(hub, 'mcp__everything__echo', { message: 'again' })).toMatchObject({
        isError: false,
      });
      await hub.close();
      expect(readdirSync(project).filter((name) => name !== 'no-home')).toEqual([]);
    });

    it("a project server's sandbox is the hub's cwd, whatever its own cwd names: it starts there, and writes only what the project's sandbox lets it", async () => {
      const project = realpathSync(mkdtempSync('/var/tmp/aleph-mcp-cwd-'));
      const outside = realpathSync(mkdtempSync('/var/tmp/aleph-mcp-outside-'));
      dirs.push(project, outside);
      mkdirSync(join(project, '.git', 'hooks'), { recursive: true });
      const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(project, 'no-home') });
      // As a caller that skipped loadMcpServers' check would have it: a cwd outside the project.
      const [server] = servers({
        mcpServers: {
          x: {
            command: '/bin/sh',
            args: [
              '-c',
              `pwd > ${join(project, 'where.txt')}; echo x > ${join(outside, 'planted')}; echo x > ${join(project, '.git/hooks/pre-commit')}; exit 1`,
            ],
            cwd: outside,
          },
        },
      });
      if (server?.transport !== 'stdio') throw new Error('a stdio server');
      const hub = await McpHub.start([{ ...server, sandbox: true, project: true }], {
        env: process.env,
        cwd: project,
        wrap: (command) => box.wrap(command),
      });
      hubs.push(hub);
      expect(readFileSync(join(project, 'where.txt'), 'utf8').trim()).toBe(outside);
      expect(readdirSync(outside)).toEqual([]);
      expect(readdirSync(join(project, '.git', 'hooks'))).toEqual([]);
    });

    it("a project server's env reaches only its own process: the sandbox's wrapper never runs a program from the PATH it names", async () => {
      const project = realpathSync(mkdtempSync('/var/tmp/aleph-mcp-path-'));
      dirs.push(project);
      const box = createSandbox({ network: 'off' }, { mode: 'required', home: join(project, 'no-home') });
      // Programs the wrapper runs before bwrap (as root, `mkdir` for the limits' cgroup), planted.
      mkdirSync(join(project, 'bin'));
      for (const name of ['mkdir', 'cat', 'prlimit', 'bwrap'])
        writeFileSync(
          join(project, 'bin', name),
          `#!/bin/sh\necho "$(id -u)" >> ${join(project, 'PLANTED-RAN')}\nexec /usr/bin/${name} "$@"\n`,
          { mode: 0o755 },
        );
      const entry = {
        command: '/bin/sh',
        args: ['-c', 'echo "$PATH" > path.txt; exit 1'],
        env: { PATH: `${join(project, 'bin')}:/usr/bin:/bin` },
      };
      // Several at once: each but a first needs a cgroup of its own, made then.
      writeFileSync(
        join(project, '.mcp.json'),
        JSON.stringify({ mcpServers: { a: entry, b: entry, c: entry, d: entry } }),
      );
      const loaded = loadMcpServers({ env: {}, projectDir: project, startTimeoutMs: 20_000 });
      expect(loaded.problems).toEqual([]);
      const hub = await McpHub.start(loaded.servers, {
        env: process.env,
        cwd: project,
        wrap: (command) => box.wrap(command),
      });
      hubs.push(hub);
      expect(hub.statuses.map((status) => status.state)).toEqual(['failed', 'failed', 'failed', 'failed']);
      // The server saw its PATH; nothing on it ran outside the sandbox.
      expect(readFileSync(join(project, 'path.txt'), 'utf8').trim()).toBe(entry.env.PATH);
      expect(existsSync(join(project, 'PLANTED-RAN'))).toBe(false);
    });
  },
);
