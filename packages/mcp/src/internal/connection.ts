// One MCP server of a run through the official SDK client (see ../mcp-hub.ts for the failure
// policy). Loaded by McpHub.start only when a run has servers: the SDK, its schemas and its
// validators are not in the memory of a process that configures none.
import { homedir } from 'node:os';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import {
  StreamableHTTPClientTransport,
  StreamableHTTPError,
} from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { CallToolResultSchema, ErrorCode, McpError, ToolSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import type { McpServerConfig } from '../config.js';
import {
  MAX_DESCRIPTION_CHARS,
  MAX_SCHEMA_CHARS,
  MAX_SCHEMA_DEPTH,
  MAX_TOOLS,
  MAX_TOOLS_CHARS,
  MAX_TOOLS_PER_SERVER,
  type McpHubOptions,
  type McpTool,
} from '../hub-types.js';
import { toolOutput, type McpToolOutput } from '../tool-result.js';
import { StdioTransport } from './stdio-transport.js';

const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;
const listSchema = z.looseObject({ tools: z.array(z.unknown()), nextCursor: z.string().optional() });
/**
 * tools/list pages read from one server: one tool a page still reaches MAX_TOOLS_PER_SERVER and its
 * notice; past them, a server paging without end is stopped, said.
 */
const MAX_PAGES = MAX_TOOLS_PER_SERVER + 1;
/** Tools left out that are named one by one in a listing; the rest are counted in one notice. */
const NAMED_LEFT_OUT = 10;
const count = (n: number): string => n.toLocaleString('en-US');
/**
 * Errors the client reports for one server (a line that is not JSON-RPC, a response to no request)
 * said one by one, each an excerpt of ERROR_EXCERPT characters, for the whole run; the rest are
 * counted, the count said at 100, 1,000, 10,000 … (a server may send thousands).
 */
const REPORTED_ERRORS = 10;
const ERROR_EXCERPT = 500;

/** `text` whole when short, else its first `max` characters and its length. */
const excerpt = (text: string, max: number): string =>
  text.length <= max ? text : `${text.slice(0, max)}… (${count(text.length)} characters)`;
/** Characters of any one notice (and of a failure's reason): a server's names and errors are cut. */
const MAX_NOTICE_CHARS = 2_000;
/** Characters of a name said in a notice; past them its length is said. */
const NAME_EXCERPT = 100;

const nameOf = (raw: unknown): unknown => (raw as { name?: unknown } | null)?.name;
/** A name (anything a server sent as one) as a notice says it: quoted, or not, and cut. */
const said = (name: unknown, quote = true): string => {
  if (typeof name !== 'string') return '(unnamed)';
  const shown = quote ? JSON.stringify(name.slice(0, NAME_EXCERPT)) : name.slice(0, NAME_EXCERPT);
  return name.length <= NAME_EXCERPT ? shown : `${shown}… (${count(name.length)} characters)`;
};

/** What a server may keep of its tools: all of them up to the limits, or the hub's share for it. */
type Share = { readonly tools: number; readonly chars: number };

/**
 * An error as the user reads it: a transport's HTTP status (`HTTP 401`) and the cause fetch hides
 * behind "fetch failed" (`connect ECONNREFUSED 127.0.0.1:1`, a TLS error) are said too.
 */
const errorText = (error: unknown): string => {
  let message = (error instanceof Error ? error.message : String(error)).replace(/^MCP error -?\d+: /, '');
  if (error instanceof StreamableHTTPError && error.code !== undefined && error.code >= 100)
    message = `HTTP ${error.code}: ${message}`;
  const cause = error instanceof Error ? (error.cause as { message?: unknown } | undefined) : undefined;
  if (typeof cause?.message === 'string' && cause.message !== '' && !message.includes(cause.message))
    message += ` (${cause.message})`;
  return message;
};

/** Whether `value` nests deeper than `limit` levels of objects and arrays, walked without recursion. */
function nestsDeeper(value: unknown, limit: number): boolean {
  const pending: [unknown, number][] = [[value, 0]];
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [item, depth] = next;
    if (item === null || typeof item !== 'object') continue;
    if (depth >= limit) return true;
    for (const child of Object.values(item)) pending.push([child, depth + 1]);
  }
  return false;
}

class Deadline extends Error {}

/** `work` bounded by `ms`: past it, Deadline (whatever `work` was waiting on). */
async function within<T>(ms: number, work: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      work,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Deadline()), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

type Live = { readonly client: Client; readonly transport: Transport; crashed?: string };

export class McpConnection {
  readonly config: McpServerConfig;
  readonly #options: McpHubOptions;
  #live: Live | undefined;
  #starting: Promise<void> | undefined;
  #restarts = 0;
  #failed: string | undefined;
  #closed = false;
  tools: McpTool[] = [];
  #errors = 0;
  #share: Share | undefined;
  #leftOut = 0;

  constructor(config: McpServerConfig, options: McpHubOptions) {
    this.config = config;
    this.#options = options;
  }

  get failure(): string | undefined {
    return this.#failed;
  }

  get pid(): number | undefined {
    const transport = this.#live?.transport;
    return transport instanceof StdioTransport ? transport.pid : undefined;
  }

  #notice(message: string): void {
    this.#options.onNotice?.({ server: this.config.name, message: excerpt(message, MAX_NOTICE_CHARS) });
  }

  /** A tool left out: named for the first few of a listing, then only counted (a server may list hundreds). */
  #leftOutNotice(message: string): void {
    if ((this.#leftOut += 1) <= NAMED_LEFT_OUT) this.#notice(message);
  }

  #error(message: string): void {
    const n = (this.#errors += 1);
    if (n <= REPORTED_ERRORS) this.#notice(excerpt(message, ERROR_EXCERPT));
    else if (n === REPORTED_ERRORS + 1)
      this.#notice(`more than ${REPORTED_ERRORS} errors: the rest are counted, not reported one by one`);
    else if (/^10+$/.test(String(n)))
      this.#notice(`${count(n)} errors so far, the first ${REPORTED_ERRORS} reported`);
  }

  #transport(): Transport {
    const { config } = this;
    if (config.transport !== 'stdio') {
      const init = { requestInit: { headers: { ...config.headers } } };
      const url = new URL(config.url);
      return config.transport === 'sse'
        ? new SSEClientTransport(url, init)
        : new StreamableHTTPClientTransport(url, init);
    }
    const strip = new Set(this.#options.stripEnv ?? []);
    const envOf = (...sources: Readonly<Record<string, string | undefined>>[]): Record<string, string> => {
      const env: Record<string, string> = {};
      for (const [key, value] of Object.entries(Object.assign({}, ...sources) as Record<string, string>))
        if (value !== undefined && !strip.has(key)) env[key] = value;
      return env;
    };
    if (!config.sandbox) {
      const cwd = config.cwd ?? this.#options.unconfinedCwd ?? homedir();
      return new StdioTransport({
        file: config.command,
        args: config.args,
        cwd,
        env: envOf(this.#options.env, config.env),
      });
    }
    if (this.#options.wrap === undefined)
      throw new Error(
        config.project === true
          ? "a project .mcp.json server runs only confined, and this hub was given no sandbox (McpHubOptions' wrap)"
          : "sandbox = true, but this hub was given no sandbox (McpHubOptions' wrap)",
      );
    // The sandbox gets the hub's environment only: what runs before its confinement (the wrapper
    // that joins the limits' cgroup) finds its programs on that PATH, never on one a server names.
    // The server's own `env` goes in by `env(1)`, inside.
    const own = Object.entries(config.env).map(([key, value]) => `${key}=${value}`);
    let argv =
      own.length === 0
        ? [config.command, ...config.args]
        : ['/usr/bin/env', ...own, config.command, ...config.args];
    // A project server's sandbox is the hub's cwd (the project's protected paths kept read-only),
    // whatever its `cwd` names: that is only where it starts, inside the sandbox.
    const cwd = config.project === true ? this.#options.cwd : (config.cwd ?? this.#options.cwd);
    if (config.project === true && config.cwd !== undefined)
      argv = ['/bin/sh', '-c', 'cd -- "$1" || exit 126; shift; exec "$@"', 'sh', config.cwd, ...argv];
    const [file = config.command, ...args] = argv;
    return new StdioTransport(this.#options.wrap({ file, args, cwd, env: envOf(this.#options.env) }));
  }

  /** Connects and lists the tools; on any failure the server is marked failed, saying why. */
  async start(): Promise<void> {
    const { config } = this;
    let transport: Transport;
    try {
      transport = this.#transport();
    } catch (error) {
      this.#fail(`not started: ${errorText(error)}`);
      return;
    }
    const client = new Client({ name: 'aleph', version: '0.1.0' }, { capabilities: {} });
    const live: Live = { client, transport };
    client.onerror = (error) => {
      if (this.#live === live || this.#live === undefined) this.#error(errorText(error));
    };
    client.onclose = () => {
      if (this.#live === live && !this.#closed) {
        live.crashed = this.#stderr(transport);
        this.#crashed(`the connection closed${live.crashed}`);
      }
    };
    try {
      await within(config.startTimeoutMs, client.connect(transport, { timeout: config.startTimeoutMs }));
      this.#leftOut = 0;
      const listed = await within(config.startTimeoutMs, this.#listTools(client));
      if (this.#leftOut > NAMED_LEFT_OUT)
        this.#notice(`${this.#leftOut - NAMED_LEFT_OUT} more tools left out, not named one by one`);
      this.tools = this.#share === undefined ? listed : this.#within(listed, this.#share);
      this.#live = live;
    } catch (error) {
      await client.close().catch(() => undefined);
      await transport.close().catch(() => undefined);
      const why =
        error instanceof Deadline ||
        (error instanceof McpError && error.code === (ErrorCode.RequestTimeout as number))
          ? `did not answer initialize/tools/list within ${config.startTimeoutMs / 1000} s`
          : errorText(error);
      this.#fail(`not started: ${why}${this.#stderr(transport)}`);
    }
  }

  #stderr(transport: Transport): string {
    const tail =
      transport instanceof StdioTransport ? transport.stderrTail.trim().split('\n').at(-1) : undefined;
    return tail ? ` (stderr: ${tail.slice(0, 300)})` : '';
  }

  /**
   * Keeps the tools the hub gives this server room for (all servers' limits, in configuration
   * order), now and after a restart; the first one left out is named.
   */
  allot(share: Share): void {
    this.#share = share;
    this.tools = this.#within(this.tools, share);
  }

  #within(tools: McpTool[], share: Share): McpTool[] {
    let chars = 0;
    for (const [index, tool] of tools.entries()) {
      chars += tool.definitionChars;
      const over =
        index >= share.tools
          ? `over the limit of ${MAX_TOOLS} tools of all servers together`
          : chars > share.chars
            ? `over the limit of ${count(MAX_TOOLS_CHARS)} characters of all servers' tool definitions together`
            : undefined;
      if (over === undefined) continue;
      this.#notice(`tool ${said(tool.tool)} and the ${tools.length - index - 1} after it left out: ${over}`);
      return tools.slice(0, index);
    }
    return tools;
  }

  /**
   * The server's tools, page by page; what it can make this process hold is bounded: past
   * MAX_TOOLS_PER_SERVER listed (invalid ones too), MAX_TOOLS_CHARS kept or MAX_PAGES read, no
   * more is read, said.
   */
  async #listTools(client: Client): Promise<McpTool[]> {
    const tools: McpTool[] = [];
    const byName = new Map<string, McpTool>();
    let cursor: string | undefined;
    let listed = 0;
    let chars = 0;
    const stop = (raw: unknown, why: string): McpTool[] => {
      this.#notice(`tool ${said(nameOf(raw))} and any after it left out: ${why}`);
      return tools;
    };
    for (let page = 1; ; page += 1) {
      const list = await client.request(
        { method: 'tools/list', params: cursor === undefined ? {} : { cursor } },
        listSchema,
        { timeout: this.config.startTimeoutMs },
      );
      for (const raw of list.tools) {
        if ((listed += 1) > MAX_TOOLS_PER_SERVER)
          return stop(raw, `more than ${MAX_TOOLS_PER_SERVER} tools listed, the limit for one server`);
        let tool: McpTool | undefined;
        try {
          tool = this.#tool(raw);
        } catch (error) {
          // Whatever one tool's checks meet (a RangeError), only that tool is left out.
          this.#leftOutNotice(
            `tool ${said(nameOf(raw))} left out: its definition could not be checked: ${errorText(error)}`,
          );
          continue;
        }
        if (tool === undefined) continue;
        // Names that differ only in characters outside [A-Za-z0-9_-] meet as one: the first is kept.
        const first = byName.get(tool.name);
        if (first !== undefined) {
          this.#leftOutNotice(
            `tool ${said(tool.tool)} left out: its name ${tool.name} is taken by ${said(first.tool)}`,
          );
          continue;
        }
        if ((chars += tool.definitionChars) > MAX_TOOLS_CHARS)
          return stop(raw, `over the limit of ${count(MAX_TOOLS_CHARS)} characters of tool definitions`);
        byName.set(tool.name, tool);
        tools.push(tool);
      }
      cursor = list.nextCursor;
      if (cursor === undefined) return tools;
      if (page === MAX_PAGES) {
        const kept = tools.length === 1 ? '1 tool' : `${count(tools.length)} tools`;
        this.#notice(
          `more than ${MAX_PAGES} tools/list pages, the limit for one server: the ${kept} of the first ${MAX_PAGES} kept, any on later pages left out`,
        );
        return tools;
      }
    }
  }

  #tool(raw: unknown): McpTool | undefined {
    const parsed = ToolSchema.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      this.#leftOutNotice(
        `tool ${said(nameOf(raw), false)} left out: invalid ${issue?.path.join('.') || 'definition'}: ${issue?.message ?? ''}`,
      );
      return undefined;
    }
    const tool = parsed.data;
    const name = `mcp__${this.config.name}__${tool.name.replace(/[^A-Za-z0-9_-]/g, '_')}`;
    if (!TOOL_NAME.test(name)) {
      this.#leftOutNotice(
        `tool ${said(tool.name, false)} left out: ${said(name, false)} is longer than 64 characters`,
      );
      return undefined;
    }
    const { config } = this;
    // Sent with every model request: one over a limit is left out, not cut (a cut schema is wrong).
    const description = tool.description ?? tool.title ?? `${tool.name} (MCP server ${config.name})`;
    // Checked before JSON.stringify, which a schema nested some thousands deep overflows.
    const deep = nestsDeeper(tool.inputSchema, MAX_SCHEMA_DEPTH);
    const schemaChars = deep ? 0 : JSON.stringify(tool.inputSchema).length;
    const over = deep
      ? `its inputSchema nests deeper than ${MAX_SCHEMA_DEPTH} levels`
      : description.length > MAX_DESCRIPTION_CHARS
        ? `its description is ${count(description.length)} characters, over the limit of ${count(MAX_DESCRIPTION_CHARS)}`
        : schemaChars > MAX_SCHEMA_CHARS
          ? `its inputSchema is ${count(schemaChars)} characters of JSON, over the limit of ${count(MAX_SCHEMA_CHARS)}`
          : undefined;
    if (over !== undefined) {
      this.#leftOutNotice(`tool ${said(tool.name)} left out: ${over}`);
      return undefined;
    }
    return {
      name,
      server: config.name,
      tool: tool.name,
      description,
      inputSchema: tool.inputSchema,
      definitionChars: name.length + description.length + schemaChars,
      readOnly: tool.annotations?.readOnlyHint === true,
      kind:
        tool.annotations?.readOnlyHint === true
          ? 'evidence'
          : tool.annotations?.readOnlyHint === false || tool.annotations?.destructiveHint === true
            ? 'mutation'
            : 'other',
      timeoutMs: config.startTimeoutMs + config.callTimeoutMs + 5_000,
      call: (args, signal) => this.call(tool.name, args, signal),
    };
  }

  #fail(reason: string): void {
    this.#failed = excerpt(reason, MAX_NOTICE_CHARS);
    this.#notice(this.#failed);
  }

  /** A crash or a hang: the first one restarts the server, the second marks it failed. */
  #crashed(why: string): void {
    const live = this.#live;
    this.#live = undefined;
    if (live !== undefined) void live.client.close().catch(() => undefined);
    if (this.#closed || this.#failed !== undefined) return;
    if (this.#restarts >= 1) {
      this.#fail(`failed: ${why}, after one restart; its tools are unavailable for the rest of the run`);
      return;
    }
    this.#restarts += 1;
    this.#notice(`${why}: restarting it`);
    this.#starting = this.start().finally(() => {
      this.#starting = undefined;
    });
  }

  async call(tool: string, args: unknown, signal: AbortSignal): Promise<McpToolOutput> {
    const server = this.config.name;
    const error = (output: string): McpToolOutput => ({ output, isError: true });
    if (this.#starting !== undefined) await this.#starting;
    const live = this.#live;
    if (this.#failed !== undefined || live === undefined)
      return error(`MCP server ${server} ${this.#failed ?? 'is not running'}`);
    try {
      const result = await live.client.callTool(
        { name: tool, arguments: (args ?? {}) as Record<string, unknown> },
        CallToolResultSchema,
        { timeout: this.config.callTimeoutMs, signal },
      );
      return toolOutput(result);
    } catch (failure) {
      if (signal.aborted) return error(`cancelled: MCP server ${server}, tool ${tool}`);
      const code = failure instanceof McpError ? failure.code : undefined;
      if (code === (ErrorCode.RequestTimeout as number)) {
        this.#crashed(`did not answer ${tool} within ${this.config.callTimeoutMs / 1000} s`);
        return error(
          `MCP server ${server} did not answer ${tool} within ${this.config.callTimeoutMs / 1000} s (${this.#after()})`,
        );
      }
      if (
        code === (ErrorCode.ConnectionClosed as number) ||
        live.crashed !== undefined ||
        this.#live !== live
      ) {
        if (this.#live === live) this.#crashed(`the connection closed during ${tool}`);
        return error(`MCP server ${server} crashed during ${tool}${live.crashed ?? ''} (${this.#after()})`);
      }
      return error(`MCP server ${server}, tool ${tool}: ${errorText(failure)}`);
    }
  }

  #after(): string {
    return this.#failed === undefined
      ? 'restarted once; it may be called again'
      : 'marked failed: not restarted again';
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#starting?.catch(() => undefined);
    const live = this.#live;
    this.#live = undefined;
    if (live === undefined) return;
    await live.client.close().catch(() => undefined);
    await live.transport.close().catch(() => undefined);
  }
}
