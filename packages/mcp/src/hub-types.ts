// What the MCP hub takes and gives, apart from the hub itself (the hub's connections use these too).
import type { McpServerConfig } from './config.js';
import type { McpToolOutput } from './tool-result.js';

// What one run's tool definitions may add to every model request (each is sent with every turn).
// A tool over a limit is left out and said; the others are kept.
/** Tools one server may list (invalid ones count): the largest servers in use list about a hundred. */
export const MAX_TOOLS_PER_SERVER = 256;
/** Tools of all servers together, kept in configuration order (`[[mcp_servers]]` first). */
export const MAX_TOOLS = 512;
/** Characters of one tool's description: a fifth of the 25,000 tokens Claude Code lets an MCP result take. */
export const MAX_DESCRIPTION_CHARS = 20_000;
/** Characters of one tool's `inputSchema` as JSON: the 25,000 tokens Claude Code lets an MCP result take. */
export const MAX_SCHEMA_CHARS = 100_000;
/**
 * Levels of objects and arrays one tool's `inputSchema` may nest, as many as Aleph's server lets a
 * model's tool-call arguments nest: what sends, logs and checks a schema walks it recursively.
 */
export const MAX_SCHEMA_DEPTH = 100;
/** Characters of all tools' definitions together (name, description, schema): about 250,000 tokens. */
export const MAX_TOOLS_CHARS = 1_000_000;

/**
 * Runs a command confined by a policy (the shape of @aleph/sandbox's `wrap`). `release`, when
 * given, is called once the server's process is gone, however it ended (or when it never started):
 * the sandbox then removes what it made for the command (an absent `.git`'s empty stand-in).
 */
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
  release?(): void;
};

export interface McpHubOptions {
  /** The environment stdio servers start from (the user's); the server's own `env` goes over it. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** Names no server's environment gets (the gateway token, the provider's key). */
  readonly stripEnv?: readonly string[];
  /**
   * Where confined stdio servers run (the project root), unless a server names its own `cwd`; a
   * project server's sandbox is always this folder, its own `cwd` only where it starts.
   */
  readonly cwd: string;
  /**
   * Where unconfined stdio servers run unless they name a `cwd` (default: the home folder): not
   * the project, where `npx`, `node`, `python -m` find the model's files first (a planted
   * `node_modules/.bin/…` ran as the user).
   */
  readonly unconfinedCwd?: string;
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
  /** What its definition adds to every model request, in characters: name, description, schema. */
  readonly definitionChars: number;
  /** The longest a call may take: a restart's start, then the call's own timeout. */
  readonly timeoutMs: number;
  call(args: unknown, signal: AbortSignal): Promise<McpToolOutput>;
}

export interface McpServerStatus {
  readonly name: string;
  readonly transport: McpServerConfig['transport'];
  readonly source: string;
  /** `closed`: the hub was closed (its servers ended, no tools offered). */
  readonly state: 'ready' | 'failed' | 'closed';
  /** The model's names of its tools. */
  readonly tools: readonly string[];
  readonly error?: string;
  /** A running stdio server's process id (its process group's). */
  readonly pid?: number;
}
