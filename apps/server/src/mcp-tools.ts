// A run's MCP servers as harness tools: `[[mcp_servers]]` and the project's `.mcp.json` are read
// for the run's cwd, started once per run (its sub-agents share them) and closed when it ends. A
// server that is misconfigured or does not start is reported and left out; the run goes on.
import type { AnyTool } from '@aleph/harness';
import {
  judgeProjectServers,
  loadMcpServers,
  McpHub,
  type McpCommandWrapper,
  type McpServerStatus,
  type McpTool,
} from '@aleph/mcp';
import { z } from 'zod';
import type { Config } from './config.js';

export interface RunMcp {
  readonly hub: McpHub;
  readonly tools: readonly AnyTool[];
  /** What `agent.run` answers and `aleph run` prints: each server's state and tools, or why not. */
  readonly servers: readonly McpServerStatus[];
  /** Servers left out by their configuration (the file and key said), and those whose tools are large. */
  readonly problems: readonly string[];
}

/**
 * Characters of one server's tool definitions past which the run's setup names it and their size:
 * about 10,000 tokens, a tenth of the default `max_context_tokens`, sent again with every request.
 */
export const MCP_TOOLS_NOTICE_CHARS = 40_000;

/** The servers whose tools add more than MCP_TOOLS_NOTICE_CHARS to every request, each with the figure. */
export function largeToolSets(tools: readonly McpTool[]): string[] {
  const sizes = new Map<string, { tools: number; chars: number }>();
  for (const tool of tools) {
    const size = sizes.get(tool.server) ?? { tools: 0, chars: 0 };
    sizes.set(tool.server, { tools: size.tools + 1, chars: size.chars + tool.definitionChars });
  }
  const count = (n: number): string => n.toLocaleString('en-US');
  return [...sizes]
    .filter(([, size]) => size.chars > MCP_TOOLS_NOTICE_CHARS)
    .map(
      ([server, size]) =>
        `MCP server ${server}: its ${size.tools} tools add ${count(size.chars)} characters (about ${count(Math.ceil(size.chars / 4))} tokens) to every model request`,
    );
}

/** An MCP tool as the harness runs it: its schema shown as the server sent it, validated by the server. */
export function harnessTool(tool: McpTool): AnyTool {
  const key = `mcp:${tool.server}`;
  return {
    name: tool.name,
    description: tool.description,
    input: z.record(z.string(), z.unknown()),
    inputSchema: tool.inputSchema,
    timeoutMs: tool.timeoutMs,
    kind: tool.kind,
    readOnly: tool.readOnly,
    // Calls to one server: reads together, anything else alone.
    claim: () => (tool.readOnly ? { kind: 'shared', keys: [key] } : { kind: 'exclusive', keys: [key] }),
    execute: (args: Record<string, unknown>, ctx) => tool.call(args, ctx.signal),
  };
}

/**
 * The server's start lines about MCP: the `[[mcp_servers]]` entries (and the `.mcp.json` of
 * `[agent] workdir`, when set); every run reads the `.mcp.json` of its own cwd too. `confined`:
 * the model's commands run in the sandbox (its network setting then applies).
 */
export function mcpStartLines(config: Config, configPath: string | undefined, confined = false): string[] {
  const list = loadMcpServers({
    env: process.env,
    projectDir: config.agent.workdir,
    network: confined ? config.sandbox.network : 'on',
    entries: config.mcp_servers,
    entriesFile: configPath ?? 'aleph.toml',
  });
  const named = list.servers.map(
    (server) =>
      `${server.name} (${server.transport}${server.transport === 'stdio' && server.sandbox ? ', sandboxed' : ''})`,
  );
  return [
    `mcp: ${named.length === 0 ? 'no servers configured' : named.join(', ')}; each run also reads .mcp.json in its cwd`,
    ...list.problems.map((problem) => `mcp: ${problem.message}`),
  ];
}

export async function startRunMcp(options: {
  readonly cwd: string;
  readonly entries: readonly unknown[];
  readonly configPath: string | undefined;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly stripEnv: readonly string[];
  readonly wrap: McpCommandWrapper;
  readonly onNotice: (notice: { server: string; message: string }) => void;
  /** The sandbox's denied paths: the cwd's `.mcp.json` may not lead into one. */
  readonly deniedPaths?: readonly string[] | undefined;
  /** The confined commands' network: `off` leaves out the `.mcp.json` HTTP servers. */
  readonly network?: 'off' | 'on' | undefined;
  /** Why the `.mcp.json`'s http and sse servers are not started, when they are not. */
  readonly projectRemoteRefused?: string | undefined;
  /**
   * Why a `.mcp.json` stdio server's command line may not run, or undefined: the user's PreToolUse
   * hooks judge it as the shell call it is (the file is the model's to write).
   */
  readonly judgeProjectCommand?: ((commandLine: string) => Promise<string | undefined>) | undefined;
}): Promise<RunMcp> {
  const loaded = loadMcpServers({
    env: options.env,
    projectDir: options.cwd,
    deniedPaths: options.deniedPaths,
    network: options.network,
    projectRemoteRefused: options.projectRemoteRefused,
    entries: options.entries,
    entriesFile: options.configPath ?? 'aleph.toml',
  });
  const judge = options.judgeProjectCommand;
  const list = judge === undefined ? loaded : await judgeProjectServers(loaded, options.cwd, judge);
  const hub = await McpHub.start(list.servers, {
    env: options.env,
    stripEnv: options.stripEnv,
    cwd: options.cwd,
    wrap: options.wrap,
    onNotice: options.onNotice,
  });
  return {
    hub,
    tools: hub.tools.map(harnessTool),
    servers: hub.statuses,
    problems: [...list.problems.map((problem) => problem.message), ...largeToolSets(hub.tools)],
  };
}
