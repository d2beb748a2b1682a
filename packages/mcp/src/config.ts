// Which MCP servers a run gets: Claude Code's project file `.mcp.json` (`{"mcpServers": {name:
// {command, args, env} | {type: "http", url, headers}}}`) and `[[mcp_servers]]` entries of the same
// fields. Values are expanded as Claude Code expands them (`${VAR}`, `${VAR:-default}`). A bad entry
// never stops the others: it is a problem naming the file and the key, and that server is left out.
import { realpathSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { isWithin } from '@aleph/sandbox';
import { z } from 'zod';
import { readProjectFile } from './internal/project-file.js';

/** Claude Code's defaults: `MCP_TIMEOUT` (start) and `MCP_TOOL_TIMEOUT` (per call), in ms. */
export const DEFAULT_START_TIMEOUT_MS = 30_000;
export const DEFAULT_CALL_TIMEOUT_MS = 120_000;

interface Common {
  /** The name the model sees in `mcp__<name>__<tool>` (characters outside `[A-Za-z0-9_-]` as `_`). */
  readonly name: string;
  /** Where it was configured: the file, and the key inside it (`mcpServers.github`, `mcp_servers[0]`). */
  readonly source: string;
  readonly startTimeoutMs: number;
  readonly callTimeoutMs: number;
}

export type McpServerConfig =
  | (Common & {
      readonly transport: 'stdio';
      readonly command: string;
      readonly args: readonly string[];
      readonly env: Readonly<Record<string, string>>;
      readonly cwd?: string | undefined;
      /** Confine the server's process like the model's commands. */
      readonly sandbox: boolean;
      /**
       * Read from the project's `.mcp.json` (a file the model can write): confined, with the hub's
       * `cwd` as the sandbox's writable folder whatever `cwd` says (only where it starts, inside it).
       */
      readonly project?: true;
    })
  | (Common & {
      readonly transport: 'http' | 'sse';
      readonly url: string;
      readonly headers: Readonly<Record<string, string>>;
    });

/** A server left out, and why: `.mcp.json: mcpServers.x.command: is required`. */
export interface McpConfigProblem {
  readonly source: string;
  readonly message: string;
}

export interface McpServerList {
  readonly servers: readonly McpServerConfig[];
  readonly problems: readonly McpConfigProblem[];
}

const stringMap = z.record(z.string(), z.string({ error: 'must be a string' }), {
  error: 'must be a table of strings',
});
// Node's timers hold at most 2^31 - 1 ms; a longer one fires after 1 ms, so it is refused.
const seconds = z
  .number({ error: 'must be a positive number' })
  .positive({ error: 'must be a positive number' })
  .max(2_147_483, {
    error: 'must be at most 2147483 seconds (about 24.8 days, the longest timer Node.js can set)',
  });

/** One server's fields, in Claude Code's spelling, plus Aleph's own (`sandbox`, the two timeouts). */
const entrySchema = z.looseObject({
  type: z.string({ error: 'must be a string' }).optional(),
  command: z.string({ error: 'must be a string' }).min(1, { error: 'must not be empty' }).optional(),
  args: z.array(z.string({ error: 'must be a string' }), { error: 'must be an array of strings' }).optional(),
  env: stringMap.optional(),
  cwd: z.string({ error: 'must be a string' }).optional(),
  url: z.string({ error: 'must be a string' }).optional(),
  headers: stringMap.optional(),
  sandbox: z.boolean({ error: 'must be true or false' }).optional(),
  startup_timeout_secs: seconds.optional(),
  tool_timeout_secs: seconds.optional(),
});

const ENTRY_KEYS = Object.keys(entrySchema.shape);

const TRANSPORTS = ['stdio', 'http', 'streamable-http', 'sse'] as const;

/**
 * `${VAR}` and `${VAR:-default}` as Claude Code expands them: a variable that is set (even empty)
 * wins, else the default; one that is neither is collected as missing.
 */
export function expandVariables(
  text: string,
  env: Readonly<Record<string, string | undefined>>,
  missing: Set<string>,
): string {
  return text.replace(/\$\{([^}]+)\}/g, (whole, inner: string) => {
    const split = inner.indexOf(':-');
    const name = split === -1 ? inner : inner.slice(0, split);
    const value = env[name];
    if (value !== undefined) return value;
    if (split !== -1) return inner.slice(split + 2);
    missing.add(name);
    return whole;
  });
}

export const toolSafeName = (name: string): string => name.replace(/[^A-Za-z0-9_-]/g, '_');

// `mcp__<server>__<tool>` reads one way only when the server's part holds no `__` and does not end
// in `_` (the first `__` after `mcp__` is then the separator, for hooks' and permissions' matchers).
function serverNameProblem(name: string): string | undefined {
  const safe = toolSafeName(name);
  if (safe === '') return 'must not be empty';
  if (!safe.includes('__') && !safe.endsWith('_')) return undefined;
  const shown = safe === name ? JSON.stringify(name) : `${JSON.stringify(name)} (as ${safe})`;
  return `${shown} may not contain "__" or end in "_": its tools' names mcp__${safe}__<tool> would read as another server's`;
}

// http(s), what the SDK's transports speak. `url` is `written` expanded, or undefined when the
// environment is not known yet (then only a literal scheme is checked). Shown as written: a
// variable may hold a token.
function urlProblem(url: string | undefined, written: string): string | undefined {
  const shown = `${JSON.stringify(written)}${url === undefined || url === written ? '' : ' (its variables expanded)'}`;
  const scheme = /^([A-Za-z][A-Za-z0-9+.-]*):/.exec(url ?? written)?.[1]?.toLowerCase();
  if (scheme !== undefined && scheme !== 'http' && scheme !== 'https')
    return `${shown} is not an http:// or https:// URL`;
  if (url === undefined && written.includes('${')) return undefined;
  if (!URL.canParse(url ?? written)) return `${shown} is not a URL`;
  return undefined;
}

interface ParseOptions {
  /** For `${VAR}` expansion (Claude Code expands from its own environment). */
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly startTimeoutMs?: number;
  readonly callTimeoutMs?: number;
  /**
   * The sandbox's network. `off`: the project's `.mcp.json` HTTP and SSE servers are left out, named
   * (this process would reach them for the model, its URL and headers carrying what it read).
   */
  readonly network?: 'off' | 'on' | undefined;
  /** Checking a file before any run: a `url` built from `${VAR}`s is checked up to its scheme. */
  readonly variablesUnknown?: boolean;
}

/**
 * The project's `.mcp.json` is a file the model can write: its stdio servers always run in the
 * sandbox, and its `${VAR}`s expand only from what a confined command sees anyway.
 */
const PROJECT_VARIABLES = /^(PATH|HOME|USER|LANG|TERM|SHELL|TZ|LC_[A-Z_]+)$/;
const projectOptions = (options: ParseOptions): ParseOptions & { readonly project: true } => ({
  ...options,
  env: Object.fromEntries(Object.entries(options.env).filter(([name]) => PROJECT_VARIABLES.test(name))),
  project: true,
});

function parseEntry(
  name: string,
  raw: unknown,
  source: string,
  options: ParseOptions & { readonly project?: true },
): McpServerConfig | McpConfigProblem {
  const parsed = entrySchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const key = issue?.path.length ? `.${issue.path.join('.')}` : '';
    return { source, message: `${source}${key}: ${issue?.message ?? 'is invalid'}` };
  }
  const entry = parsed.data;
  const type = entry.type ?? (entry.url !== undefined && entry.command === undefined ? 'http' : 'stdio');
  if (!(TRANSPORTS as readonly string[]).includes(type))
    return {
      source,
      message: `${source}.type: unknown transport ${JSON.stringify(type)} (expected "stdio", "http" or "sse")`,
    };
  const missing = new Set<string>();
  const expand = (text: string): string => expandVariables(text, options.env, missing);
  const expandMap = (map: Record<string, string> | undefined): Record<string, string> =>
    Object.fromEntries(Object.entries(map ?? {}).map(([key, value]) => [key, expand(value)]));
  const common = {
    name: toolSafeName(name),
    source,
    startTimeoutMs:
      entry.startup_timeout_secs !== undefined
        ? entry.startup_timeout_secs * 1000
        : (options.startTimeoutMs ?? DEFAULT_START_TIMEOUT_MS),
    callTimeoutMs:
      entry.tool_timeout_secs !== undefined
        ? entry.tool_timeout_secs * 1000
        : (options.callTimeoutMs ?? DEFAULT_CALL_TIMEOUT_MS),
  };
  let server: McpServerConfig;
  if (type === 'stdio') {
    if (entry.command === undefined)
      return { source, message: `${source}.command: is required for a stdio server` };
    server = {
      ...common,
      transport: 'stdio',
      command: expand(entry.command),
      args: (entry.args ?? []).map(expand),
      env: expandMap(entry.env),
      cwd: entry.cwd === undefined ? undefined : expand(entry.cwd),
      sandbox: options.project === true || (entry.sandbox ?? false),
      ...(options.project === true ? { project: true as const } : {}),
    };
  } else {
    if (entry.url === undefined)
      return { source, message: `${source}.url: is required for a ${type} server` };
    if (options.project === true && options.network === 'off')
      return {
        source,
        message: `${source}: an ${type} server of the project's .mcp.json is not reached with the sandbox's network off (the server's process would reach it for the model); left out: a server you trust goes in [[mcp_servers]]`,
      };
    const url = expand(entry.url);
    const badUrl =
      missing.size > 0
        ? undefined
        : urlProblem(options.variablesUnknown === true ? undefined : url, entry.url);
    if (badUrl !== undefined) return { source, message: `${source}.url: ${badUrl}` };
    server = {
      ...common,
      transport: type === 'sse' ? 'sse' : 'http',
      url,
      headers: expandMap(entry.headers),
    };
  }
  if (missing.size > 0)
    return { source, message: `${source}: missing environment variables: ${[...missing].join(', ')}` };
  return server;
}

function collect(
  entries: Iterable<readonly [string, unknown, string]>,
  options: ParseOptions,
  into: { servers: McpServerConfig[]; problems: McpConfigProblem[] },
): void {
  for (const [name, raw, source] of entries) {
    const result = parseEntry(name, raw, source, options);
    if ('transport' in result) into.servers.push(result);
    else into.problems.push(result);
  }
}

const realOr = (path: string): string => {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
};

/**
 * The project's stdio servers with their `cwd` resolved (relative to the project, links followed):
 * each runs in the project's sandbox, its `cwd` only where it starts, so one naming a folder outside
 * the project (or none that exists) is left out, a problem naming it and the folder.
 */
function placeProjectServers(list: McpServerList, projectDir: string): McpServerList {
  const project = realOr(projectDir);
  const problems: McpConfigProblem[] = [];
  const servers = list.servers.flatMap((server): McpServerConfig[] => {
    if (server.transport !== 'stdio' || server.cwd === undefined) return [server];
    const written = resolve(project, server.cwd);
    const refuse = (folder: string, why: string): [] => {
      const shown = `${JSON.stringify(server.cwd)}${folder === server.cwd ? '' : ` (${folder})`}`;
      problems.push({ source: server.source, message: `${server.source}.cwd: ${shown} ${why}; left out` });
      return [];
    };
    let real: string;
    try {
      real = realpathSync(written);
      if (!statSync(real).isDirectory()) return refuse(real, 'is not a folder');
    } catch (error) {
      return refuse(written, `is not a folder (${(error as NodeJS.ErrnoException).code ?? 'unreadable'})`);
    }
    if (!isWithin(real, project))
      return refuse(
        real,
        `lies outside the project ${project}: a server of the project's .mcp.json runs in the project's sandbox, and starts only in a folder inside it`,
      );
    return [{ ...server, cwd: real }];
  });
  return { servers, problems: [...list.problems, ...problems] };
}

/**
 * Servers one `.mcp.json` may name: each is a process (or a connection) at every run's start, and
 * the file may be the model's; past it none of them is started, and a problem says why.
 */
export const MAX_PROJECT_SERVERS = 64;

/** The `mcpServers` of a `.mcp.json` text; `file` names it in every problem. */
export function parseMcpJson(text: string, file: string, options: ParseOptions): McpServerList {
  const into = { servers: [] as McpServerConfig[], problems: [] as McpConfigProblem[] };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    into.problems.push({ source: file, message: `${file}: invalid JSON: ${(error as Error).message}` });
    return into;
  }
  const servers = (json as { mcpServers?: unknown } | null)?.mcpServers;
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    into.problems.push({ source: file, message: `${file}: must be a JSON object with "mcpServers"` });
  } else if (
    servers !== undefined &&
    (servers === null || typeof servers !== 'object' || Array.isArray(servers))
  ) {
    into.problems.push({
      source: file,
      message: `${file}: mcpServers: must be an object of servers by name`,
    });
  } else if (Object.keys(servers ?? {}).length > MAX_PROJECT_SERVERS) {
    const count = Object.keys(servers ?? {}).length;
    into.problems.push({
      source: file,
      message: `${file}: mcpServers: ${count} servers, over the limit of ${MAX_PROJECT_SERVERS}; none of them is started`,
    });
  } else {
    const entries = Object.entries((servers ?? {}) as Record<string, unknown>);
    const named = entries.filter(([name]) => {
      const problem = serverNameProblem(name);
      const source = `${file}: mcpServers.${name}`;
      if (problem !== undefined) into.problems.push({ source, message: `${source}: the name ${problem}` });
      return problem === undefined;
    });
    collect(
      named.map(([name, raw]) => [name, raw, `${file}: mcpServers.${name}`] as const),
      options,
      into,
    );
  }
  return into;
}

/** `[[mcp_servers]]` entries (a `name` each, then the fields of `.mcp.json`); `file` names them. */
export function parseMcpServerEntries(
  entries: readonly unknown[],
  file: string,
  options: ParseOptions,
): McpServerList {
  const into = { servers: [] as McpServerConfig[], problems: [] as McpConfigProblem[] };
  entries.forEach((raw, index) => {
    const source = `${file}: mcp_servers[${index}]`;
    const name = (raw as { name?: unknown } | null)?.name;
    if (typeof name !== 'string' || name === '') {
      into.problems.push({ source, message: `${source}.name: is required (a string)` });
      return;
    }
    const nameProblem = serverNameProblem(name);
    if (nameProblem !== undefined) {
      into.problems.push({ source, message: `${source}.name: ${nameProblem}` });
      return;
    }
    const { name: _name, ...fields } = raw as Record<string, unknown>;
    // Your own configuration: a misspelt key (`sanbox = true`) is an error, not a server run as you.
    const unknown = Object.keys(fields).find((key) => !ENTRY_KEYS.includes(key));
    if (unknown !== undefined)
      into.problems.push({
        source,
        message: `${source}.${unknown}: unknown key (known: name, ${ENTRY_KEYS.join(', ')})`,
      });
    else if (fields['command'] !== undefined && fields['url'] !== undefined)
      into.problems.push({
        source,
        message: `${source}.url: give command (a stdio server) or url (http, sse), not both`,
      });
    else collect([[name, fields, source]], options, into);
  });
  return into;
}

/**
 * The servers of a run: `[[mcp_servers]]` first, then the project's `.mcp.json` (read from
 * `projectDir` when it exists). A name given twice keeps the first and says so.
 */
export function loadMcpServers(
  options: ParseOptions & {
    readonly projectDir?: string | undefined;
    readonly entries?: readonly unknown[];
    readonly entriesFile?: string;
    /**
     * Real paths the project's `.mcp.json` may not lead into (the sandbox's denied paths). It is
     * read only when its real path lies inside `projectDir`, it is a regular file of at most 1 MiB.
     */
    readonly deniedPaths?: readonly string[] | undefined;
    /**
     * Why the project's http and sse servers are not started, when they are not: they are reached
     * from this process, not from the sandbox, so they carry what the model put in their URL and
     * headers wherever that leads. Each is a problem naming it and the reason.
     */
    readonly projectRemoteRefused?: string | undefined;
  },
): McpServerList {
  const fromConfig = parseMcpServerEntries(
    options.entries ?? [],
    options.entriesFile ?? 'aleph.toml',
    options,
  );
  let fromProject: McpServerList = { servers: [], problems: [] };
  if (options.projectDir !== undefined) {
    const file = join(options.projectDir, '.mcp.json');
    const read = readProjectFile(file, options.projectDir, options.deniedPaths);
    if (typeof read === 'string')
      fromProject = placeProjectServers(
        parseMcpJson(read, file, projectOptions(options)),
        options.projectDir,
      );
    else if (read !== undefined)
      fromProject = { servers: [], problems: [{ source: file, message: read.problem }] };
    const refused = options.projectRemoteRefused;
    if (refused !== undefined)
      fromProject = {
        servers: fromProject.servers.filter((server) => server.transport === 'stdio'),
        problems: [
          ...fromProject.problems,
          ...fromProject.servers
            .filter((server) => server.transport !== 'stdio')
            .map((server) => ({
              source: server.source,
              message: `${server.source}: ${server.transport} server not started: ${refused}; a server you trust goes in [[mcp_servers]]`,
            })),
        ],
      };
  }
  const servers: McpServerConfig[] = [];
  const problems = [...fromConfig.problems, ...fromProject.problems];
  for (const server of [...fromConfig.servers, ...fromProject.servers]) {
    const first = servers.find((kept) => kept.name === server.name);
    if (first === undefined) servers.push(server);
    else
      problems.push({
        source: server.source,
        message: `${server.source}: the name ${server.name} is taken by ${first.source}; left out`,
      });
  }
  return { servers, problems };
}

/** A word as a POSIX shell reads it back: as is when plain, else single-quoted. */
const shellWord = (word: string): string =>
  /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;

/** What a stdio server runs, as one shell command line: `cd <cwd> && VAR=value command args…`. */
export function stdioCommandLine(server: McpServerConfig & { readonly transport: 'stdio' }): string {
  const assignments = Object.entries(server.env).map(([name, value]) => `${name}=${shellWord(value)} `);
  const line = `${assignments.join('')}${[server.command, ...server.args].map(shellWord).join(' ')}`;
  return server.cwd === undefined ? line : `cd ${shellWord(server.cwd)} && ${line}`;
}

/**
 * The stdio servers of `projectDir`'s `.mcp.json` (a file the model can write), each judged before
 * it starts as the shell command it runs (stdioCommandLine) by `judge`, which answers why it may
 * not run (the user's guard for shell commands said no) or undefined. A denied server is left out,
 * a problem naming it and the reason; the rest of the list is as it was.
 */
export async function judgeProjectServers(
  list: McpServerList,
  projectDir: string,
  judge: (commandLine: string, server: McpServerConfig) => Promise<string | undefined>,
): Promise<McpServerList> {
  const file = `${join(projectDir, '.mcp.json')}: `;
  const verdicts = await Promise.all(
    list.servers.map((server) =>
      server.transport === 'stdio' && server.source.startsWith(file)
        ? judge(stdioCommandLine(server), server)
        : Promise.resolve(undefined),
    ),
  );
  return {
    servers: list.servers.filter((_, index) => verdicts[index] === undefined),
    problems: [
      ...list.problems,
      ...list.servers.flatMap((server, index) => {
        const reason = verdicts[index];
        return reason === undefined
          ? []
          : [{ source: server.source, message: `${server.source}: not started: ${reason}` }];
      }),
    ],
  };
}
