// The MCP servers of one run, through the official SDK client: each is started (bounded by its start
// timeout), its tools listed and checked, and its calls bounded by its call timeout. Failure policy:
// a server that does not start, or lists nothing usable, is reported and left out; one that crashes
// or hangs during a call gives that call an error naming it and is restarted once; the next time it
// is marked failed and its tools answer with an error saying so. No failure ever ends the run.
// Invariant: close() resolves only after every server's process group was ended.
import type { McpServerConfig } from './config.js';
import {
  MAX_TOOLS,
  MAX_TOOLS_CHARS,
  type McpHubOptions,
  type McpServerStatus,
  type McpTool,
} from './hub-types.js';
import type { McpConnection } from './internal/connection.js';

export type { McpCommandWrapper, McpHubOptions, McpServerStatus, McpTool } from './hub-types.js';

/** Starts every server at once; `tools` are those of the servers that started. */
export class McpHub implements AsyncDisposable {
  readonly #connections: McpConnection[];
  #closed = false;

  private constructor(connections: McpConnection[]) {
    this.#connections = connections;
  }

  static async start(servers: readonly McpServerConfig[], options: McpHubOptions): Promise<McpHub> {
    if (servers.length === 0) return new McpHub([]);
    const { McpConnection } = await import('./internal/connection.js');
    const connections = servers.map((server) => new McpConnection(server, options));
    await Promise.all(connections.map((connection) => connection.start()));
    // All servers' tools within MAX_TOOLS and MAX_TOOLS_CHARS, in configuration order: a project
    // `.mcp.json` (listed after `[[mcp_servers]]`) cannot crowd out the user's own servers.
    let share = { tools: MAX_TOOLS, chars: MAX_TOOLS_CHARS };
    for (const connection of connections) {
      if (connection.failure !== undefined) continue;
      connection.allot(share);
      const chars = connection.tools.reduce((sum, tool) => sum + tool.definitionChars, 0);
      share = { tools: share.tools - connection.tools.length, chars: share.chars - chars };
    }
    return new McpHub(connections);
  }

  get tools(): McpTool[] {
    if (this.#closed) return [];
    return this.#connections.flatMap((connection) =>
      connection.failure === undefined ? connection.tools : [],
    );
  }

  get statuses(): McpServerStatus[] {
    return this.#connections.map(({ config, failure, tools, pid }) => ({
      name: config.name,
      ...(pid === undefined || this.#closed ? {} : { pid }),
      transport: config.transport,
      source: config.source,
      state: this.#closed ? 'closed' : failure === undefined ? 'ready' : 'failed',
      tools: failure === undefined && !this.#closed ? tools.map((tool) => tool.name) : [],
      ...(failure === undefined ? {} : { error: failure }),
    }));
  }

  /** Ends every server (a stdio server's process group with it); the hub offers no tool after. */
  async close(): Promise<void> {
    this.#closed = true;
    await Promise.all(this.#connections.map((connection) => connection.close()));
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
