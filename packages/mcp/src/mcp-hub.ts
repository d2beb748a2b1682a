// The MCP servers of one run, through the official SDK client: each is started (bounded by its start
// timeout), its tools listed and checked, and its calls bounded by its call timeout. Failure policy:
// a server that does not start, or lists nothing usable, is reported and left out; one that crashes
// or hangs during a call gives that call an error naming it and is restarted once; the next time it
// is marked failed and its tools answer with an error saying so. No failure ever ends the run.
// Invariant: close() resolves only after every server's process group was ended.
import type { McpServerConfig } from './config.js';
import type { McpConnection } from './internal/connection.js';
import type { McpToolOutput } from './tool-result.js';

/** Runs a command confined by a policy (the shape of @aleph/sandbox's `wrap`). */
export type McpCommandWrapper = (command: {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Readonly<Record<string, string | undefined>>;
}) => {
  readonly file: string;
  readonly args: readonly string[];
  readonly cwd: string;
  readonly env: Record<string, string>;
};

export interface McpHubOptions {
  /** The environment stdio servers start from (the user's); the server's own `env` goes over it. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Names no server's environment gets (the gateway token, the provider's key). */
  readonly stripEnv?: readonly string[];
  /** Where stdio servers run (the project root), unless a server names its own `cwd`. */
  readonly cwd: string;
  /** Confines a server configured with `sandbox = true`; without it such a server is not started. */
  readonly wrap?: McpCommandWrapper;
  /** Something worth telling the user: a start failure, a crash, a restart, a skipped tool. */
  readonly onNotice?: (notice: { readonly server: string; readonly message: string }) => void;
}

export interface McpTool {
  /** `mcp__<server>__<tool>`, as Claude Code names it. */
  readonly name: string;
  readonly server: string;
  /** The tool's own name on its server. */
  readonly tool: string;
  readonly description: string;
  /** The tool's `inputSchema`, as the server sent it. */
  readonly inputSchema: Record<string, unknown>;
  /** The server's `readOnlyHint`. */
  readonly readOnly: boolean;
  /**
   * From its annotations: `evidence` when read-only (a read-back), `mutation` when it says it is not
   * (`readOnlyHint: false`) or is destructive, else `other`.
   */
  readonly kind: 'evidence' | 'mutation' | 'other';
  /** The longest a call may take: a restart's start, then the call's own timeout. */
  readonly timeoutMs: number;
  call(args: unknown, signal: AbortSignal): Promise<McpToolOutput>;
}

export interface McpServerStatus {
  readonly name: string;
  readonly transport: McpServerConfig['transport'];
  readonly source: string;
  readonly state: 'ready' | 'failed';
  /** The model's names of its tools. */
  readonly tools: readonly string[];
  readonly error?: string;
  /** A running stdio server's process id (its process group's). */
  readonly pid?: number;
}

/** Starts every server at once; `tools` are those of the servers that started. */
export class McpHub implements AsyncDisposable {
  readonly #connections: McpConnection[];

  private constructor(connections: McpConnection[]) {
    this.#connections = connections;
  }

  static async start(servers: readonly McpServerConfig[], options: McpHubOptions): Promise<McpHub> {
    if (servers.length === 0) return new McpHub([]);
    const { McpConnection } = await import('./internal/connection.js');
    const connections = servers.map((server) => new McpConnection(server, options));
    await Promise.all(connections.map((connection) => connection.start()));
    return new McpHub(connections);
  }

  get tools(): McpTool[] {
    return this.#connections.flatMap((connection) =>
      connection.failure === undefined ? connection.tools : [],
    );
  }

  get statuses(): McpServerStatus[] {
    return this.#connections.map(({ config, failure, tools, pid }) => ({
      name: config.name,
      ...(pid === undefined ? {} : { pid }),
      transport: config.transport,
      source: config.source,
      state: failure === undefined ? 'ready' : 'failed',
      tools: failure === undefined ? tools.map((tool) => tool.name) : [],
      ...(failure === undefined ? {} : { error: failure }),
    }));
  }

  async close(): Promise<void> {
    await Promise.all(this.#connections.map((connection) => connection.close()));
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
