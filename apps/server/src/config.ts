// aleph.toml: found by --config, else ./aleph.toml (both from the directory the user ran the
// command in), else built-in defaults; relative paths inside it are from the file's folder.
// Parsed with smol-toml, validated with zod; an unknown key or a bad value is an error naming the
// key and, where it can be found, its line. Environment variables override the common keys.
import { closeSync, constants, existsSync, fstatSync, openSync, readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { parseMcpServerEntries } from '@aleph/mcp';
import { stopHookEntrySchema } from '@aleph/verification';
import { parse as parseToml, TomlError } from 'smol-toml';
import { z } from 'zod';
import { clusterConfigSchema } from './cluster-mode.js';

const positiveInt = z
  .int({ error: 'must be a positive integer' })
  .positive({ error: 'must be a positive integer' });
const positive = z
  .number({ error: 'must be a positive number' })
  .positive({ error: 'must be a positive number' });

/** Node's timers hold at most 2^31 - 1 ms; a longer one fires after 1 ms, so it is refused here. */
export const MAX_DURATION_SECS = 2_147_483;
const TOO_LONG = `must be at most ${MAX_DURATION_SECS} seconds (about 24.8 days, the longest timer Node.js can set)`;
const duration = positive.max(MAX_DURATION_SECS, { error: TOO_LONG });

export const configSchema = z.strictObject({
  gateway: z
    .strictObject({
      host: z.string().min(1).default('127.0.0.1'),
      port: z.int({ error: 'must be an integer from 0 to 65535' }).min(0).max(65535).default(7681),
      token: z.string().min(16, { error: 'must be at least 16 characters' }).optional(),
      allowed_origins: z.array(z.string()).optional(),
    })
    .prefault({}),
  pty: z
    .strictObject({
      max_sessions: positiveInt.default(64),
      idle_ttl_secs: duration.default(600),
      eviction: z
        .enum(['evict-oldest', 'reject'], { error: 'must be "evict-oldest" or "reject"' })
        .default('evict-oldest'),
      /** The agents' `shell` commands: a pool of their own (no eviction, no idle expiry). */
      agent_max_sessions: positiveInt.default(16),
      /**
       * The most of that pool one agent run holds at once, its sub-agents' commands included
       * (default: half the pool, rounded up): one run cannot take every terminal from the others.
       */
      agent_max_sessions_per_run: positiveInt.optional(),
      /**
       * Added to the niceness of the agents' commands (0 to 19; 0: the server's priority), so a
       * build the model runs does not take the CPU the server's event loop needs. User terminals: 0.
       * Where the sandbox weighs the confined commands in one CPU group (root, cgroup v1), the group
       * weighs as one task of this niceness: together they then get a tenth of a busy nice-0
       * program's share at 10, also against the machine's other programs.
       */
      agent_nice: z.int({ error: 'must be an integer from 0 to 19' }).min(0).max(19).default(5),
    })
    .prefault({}),
  // `sandbox = true` confines a hook like the model's commands; unconfined by default (it is the user's).
  stop_hooks: z
    .array(
      stopHookEntrySchema.refine((entry) => (entry.timeout_secs ?? 0) <= MAX_DURATION_SECS, {
        path: ['timeout_secs'],
        error: TOO_LONG,
      }),
    )
    .default([]),
  hooks: z
    .strictObject({
      files: z.array(z.string()).default([]),
      // Every Claude Code hook in the sandbox: a hook's program resolved from the project
      // (`npx prettier` → node_modules/.bin) is the model's to write.
      sandbox: z.boolean().default(false),
    })
    .prefault({}),
  // Claude Code's `.mcp.json` fields, a `name` each (checked by @aleph/mcp; `${VAR}`s expand per run).
  mcp_servers: z
    .array(z.record(z.string(), z.unknown()), { error: 'must be an array of tables ([[mcp_servers]])' })
    .default([])
    .superRefine((entries, ctx) => {
      const anyVariable = new Proxy({}, { get: () => '' });
      for (const problem of parseMcpServerEntries(entries, '', {
        env: anyVariable,
        variablesUnknown: true,
      }).problems) {
        const [, index, rest] = /mcp_servers\[(\d+)\]\.?(.*)$/.exec(problem.message) ?? [];
        ctx.addIssue({ code: 'custom', path: [Number(index)], message: rest ?? problem.message });
      }
    }),
  agent: z
    .strictObject({
      provider: z
        .enum(['openai-compatible', 'openai', 'anthropic'], {
          error: 'must be "openai-compatible", "openai" or "anthropic"',
        })
        .optional(),
      model: z.string().min(1).optional(),
      base_url: z.url({ error: 'must be a URL' }).optional(),
      api_key_env: z.string().min(1).optional(),
      max_iterations: positiveInt.default(50),
      turn_timeout_secs: duration.default(300),
      /** From a turn's request to the reply's first part; past it the turn fails (the watchdog counts it). */
      first_token_timeout_secs: duration.default(180),
      /** Between two parts of a streamed reply; past it the turn fails (the watchdog counts it). */
      stream_idle_timeout_secs: duration.default(120),
      /** Anthropic prompt caching: cache breakpoints on the system prompt and the conversation's tail. */
      prompt_caching: z.boolean({ error: 'must be true or false' }).default(true),
      tool_timeout_secs: duration.default(120),
      /** Tool calls one reply may make: the rest are answered with an error the model reads, not run. */
      max_tool_calls_per_turn: positiveInt.default(64),
      /** Tool output one turn keeps (KiB of characters): past it a result is replaced by a note. */
      max_tool_results_kib_per_turn: positiveInt.default(1024),
      /**
       * One model reply's text and tool-call arguments (KiB of characters): past it the reply is cut
       * off where it arrives and the run ends with an error; nothing of it runs.
       */
      max_reply_kib: positiveInt.default(4096),
      /** A sub-agent runs a whole loop of its own: its own bound, not tool_timeout_secs. */
      spawn_agent_timeout_secs: duration.default(3600),
      /** Sub-agents one session may have running at once: the excess of one reply is refused. */
      spawn_agent_max_parallel: positiveInt.default(4),
      /** Sub-agents one run may start in all (every depth counted). */
      spawn_agent_max_per_run: positiveInt.default(32),
      /** Estimated tokens of history sent per turn; over it the harness compacts, then truncates. */
      max_context_tokens: positiveInt.default(100_000),
      /** A command every run must pass before it may claim completion (fail-closed, shell-safe only). */
      gate_command: z.string().min(1).optional(),
      workdir: z.string().min(1).optional(),
      /**
       * A run in your home folder, or in a folder that holds it: refused unless true (the model could
       * make the home's absent dot files, `~/.profile` or `~/.ssh/authorized_keys`, which run as you).
       */
      allow_home_cwd: z.boolean({ error: 'must be true or false' }).default(false),
    })
    .prefault({}),
  sandbox: z
    .strictObject({
      mode: z
        .enum(['auto', 'required', 'off'], { error: 'must be "auto", "required" or "off"' })
        .default('auto'),
      network: z.enum(['off', 'on'], { error: 'must be "off" or "on"' }).default('off'),
      deny_read: z.array(z.string().min(1), { error: 'must be an array of paths' }).default([]),
      env: z.array(z.string().min(1), { error: 'must be an array of variable names' }).default([]),
      /** Per command; unset keys keep the sandbox's defaults (1024 tasks, 8 GiB, 64 GiB, 24 h, 1 GiB). */
      limits: z
        .strictObject({
          processes: positiveInt.optional(),
          memory_mib: positiveInt.optional(),
          file_size_mib: positiveInt.optional(),
          cpu_secs: positiveInt.optional(),
          tmp_mib: positiveInt.optional(),
        })
        .prefault({}),
    })
    .prefault({}),
  power: z
    .strictObject({ inhibit_sleep: z.boolean({ error: 'must be true or false' }).default(true) })
    .prefault({}),
  store: z.strictObject({ dir: z.string().min(1).optional() }).prefault({}),
  /** USD per million tokens, by model name: a run's cost is reported when its model has a price. */
  prices: z
    .record(
      z.string().min(1),
      z.strictObject({
        input: z.number({ error: 'must be a number' }).nonnegative({ error: 'must be 0 or more' }),
        output: z.number({ error: 'must be a number' }).nonnegative({ error: 'must be 0 or more' }),
        /** Input read from the prompt cache; the input price when absent. */
        cached_input: z
          .number({ error: 'must be a number' })
          .nonnegative({ error: 'must be 0 or more' })
          .optional(),
      }),
    )
    .default({}),
  telemetry: z
    .strictObject({
      /** An OTLP/HTTP traces URL (`http://localhost:4318/v1/traces`): spans are exported when set. */
      endpoint: z.url({ error: 'must be a URL' }).optional(),
      service_name: z.string().min(1).default('aleph'),
      headers: z.record(z.string(), z.string()).optional(),
    })
    .prefault({}),
  /** Cluster mode on NATS JetStream; absent: one process, files on disk. */
  cluster: clusterConfigSchema.optional(),
  log: z
    .strictObject({
      level: z.enum(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']).default('info'),
    })
    .prefault({}),
});

export type Config = z.infer<typeof configSchema>;

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

/**
 * The line of `key =` inside `[section]` (or `[[section]]` number `index`), when it can be found;
 * for a key that is not written (a missing one), the section's header line.
 */
function lineOf(text: string, path: readonly PropertyKey[]): number | undefined {
  const lines = text.split('\n');
  const [section, second, third] = path;
  let inSection = path.length === 1;
  let arrayIndex = -1;
  const key = typeof second === 'number' ? third : second;
  let headerLine: number | undefined;
  for (const [index, raw] of lines.entries()) {
    const line = raw.trim();
    const header = /^\[\[?\s*([^\]\s]+)\s*\]\]?/.exec(line);
    if (header) {
      if (header[1] === section) {
        arrayIndex += 1;
        inSection = typeof second !== 'number' || arrayIndex === second;
        if (inSection && key === undefined) return index + 1;
        if (inSection) headerLine = index + 1;
      } else inSection = false;
      continue;
    }
    const target = path.length === 1 ? section : key;
    if (
      inSection &&
      typeof target === 'string' &&
      new RegExp(`^["']?${target.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}["']?\\s*=`).test(line)
    ) {
      return index + 1;
    }
  }
  return headerLine;
}

/**
 * zod's own wording ("Invalid input: expected array, received object") said as the other messages
 * are: what the key must be. A schema's own message goes first.
 */
const configErrors: z.core.$ZodErrorMap = (issue) => {
  if (issue.code === 'invalid_type') {
    if (issue.input === undefined) return 'is missing';
    const [key, ...rest] = issue.path ?? [];
    if (issue.expected === 'array' && rest.length === 0 && typeof issue.input === 'object') {
      return `must be an array of tables: write [[${String(key)}]] for each`;
    }
    return `must be ${/^[aeiou]/.test(issue.expected) ? 'an' : 'a'} ${issue.expected}`;
  }
  if (issue.code === 'invalid_value') {
    return `must be one of ${issue.values.map((value) => JSON.stringify(value)).join(', ')}`;
  }
  return undefined;
};

/**
 * A path with its nested tables joined as their header names them: `[sandbox.limits].tmp_mib`,
 * not `[sandbox].limits.tmp_mib` (an array's index stays: `[stop_hooks][0].command`).
 */
function asWritten(table: unknown, path: readonly PropertyKey[]): PropertyKey[] {
  const [first, ...rest] = path;
  if (first === undefined) return [];
  let header = String(first);
  let value = (table as Record<string, unknown> | undefined)?.[header];
  while (rest.length > 1 && typeof rest[0] === 'string') {
    const next = (value as Record<string, unknown> | undefined)?.[rest[0]];
    if (typeof next !== 'object' || next === null || Array.isArray(next)) break;
    header += `.${rest.shift() as string}`;
    value = next;
  }
  return [header, ...rest];
}

function describePath(path: readonly PropertyKey[]): string {
  if (path.length === 0) return '(top level)';
  const [section, ...rest] = path;
  let out = `[${String(section)}]`;
  for (const part of rest) out += typeof part === 'number' ? `[${part}]` : `.${String(part)}`;
  return out;
}

export function parseConfig(text: string, source = 'aleph.toml'): Config {
  let table: unknown;
  try {
    table = parseToml(text);
  } catch (error) {
    const where = error instanceof TomlError ? ` (line ${error.line}, column ${error.column})` : '';
    throw new ConfigError(
      `${source}: invalid TOML${where}: ${(error as Error).message.split('\n')[0] ?? ''}`,
    );
  }
  const parsed = configSchema.safeParse(table, { error: configErrors });
  if (parsed.success) return parsed.data;
  const messages = parsed.error.issues.map((raw) => {
    const issue = { ...raw, path: asWritten(table, raw.path) };
    if (issue.code === 'unrecognized_keys') {
      return issue.keys.map((key) => {
        const path = asWritten(table, [...raw.path, key]);
        const line = lineOf(text, path);
        return `${source}: unknown key ${describePath(path)}${line ? ` (line ${line})` : ''}`;
      });
    }
    const line = lineOf(text, issue.path);
    return [`${source}: ${describePath(issue.path)} ${issue.message}${line ? ` (line ${line})` : ''}`];
  });
  throw new ConfigError(messages.flat().join('\n'));
}

/** Each variable, the key it sets, and how. */
const ENV_OVERRIDES: readonly [string, string, (config: Config, value: string) => void][] = [
  ['ALEPH_HOST', 'gateway.host', (c, v) => (c.gateway.host = v)],
  ['ALEPH_PORT', 'gateway.port', (c, v) => (c.gateway.port = Number(v))],
  ['ALEPH_TOKEN', 'gateway.token', (c, v) => (c.gateway.token = v)],
  ['ALEPH_PROVIDER', 'agent.provider', (c, v) => (c.agent.provider = v as Config['agent']['provider'])],
  ['ALEPH_MODEL', 'agent.model', (c, v) => (c.agent.model = v)],
  ['ALEPH_BASE_URL', 'agent.base_url', (c, v) => (c.agent.base_url = v)],
  ['ALEPH_STORE_DIR', 'store.dir', (c, v) => (c.store.dir = v)],
  ['ALEPH_LOG_LEVEL', 'log.level', (c, v) => (c.log.level = v as Config['log']['level'])],
  ['ALEPH_SANDBOX', 'sandbox.mode', (c, v) => (c.sandbox.mode = v as Config['sandbox']['mode'])],
];

export interface LoadedConfig {
  readonly config: Config;
  /** The file read, or undefined for built-in defaults. */
  readonly path: string | undefined;
}

/**
 * The file's text, read without blocking (a FIFO would hold the start for good) and only from a
 * regular file.
 */
function readConfigText(path: string): string {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  } catch (error) {
    throw new ConfigError(
      `config file ${path} cannot be read: ${(error as NodeJS.ErrnoException).code ?? String(error)}`,
    );
  }
  try {
    const stat = fstatSync(fd, { bigint: true });
    if (stat.isDirectory()) throw new ConfigError(`config file ${path} is a directory, not a file`);
    if (!stat.isFile()) throw new ConfigError(`config file ${path} is not a regular file`);
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}

export function loadConfig(
  options: {
    path?: string;
    cwd?: string;
    env?: NodeJS.ProcessEnv;
    /** Refuses a file the model may have written: the reason, or undefined to read it. */
    distrust?: (path: string) => string | undefined;
  } = {},
): LoadedConfig {
  const env = options.env ?? process.env;
  const cwd = options.cwd ?? process.cwd();
  let path: string | undefined;
  if (options.path !== undefined) {
    path = resolve(cwd, options.path);
    if (!existsSync(path)) throw new ConfigError(`config file not found: ${path}`);
  } else if (existsSync(resolve(cwd, 'aleph.toml'))) {
    path = resolve(cwd, 'aleph.toml');
  }
  const distrusted = path === undefined ? undefined : options.distrust?.(path);
  if (distrusted !== undefined) throw new ConfigError(distrusted);
  const config = parseConfig(path === undefined ? '' : readConfigText(path), path ?? 'defaults');
  // Paths in the file mean what they say from the file's folder, wherever the server was started.
  const base = path === undefined ? cwd : dirname(path);
  config.hooks.files = config.hooks.files.map((file) => resolve(base, file));
  if (config.store.dir !== undefined) config.store.dir = resolve(base, config.store.dir);
  if (config.agent.workdir !== undefined) config.agent.workdir = resolve(base, config.agent.workdir);
  const cluster = config.cluster;
  if (cluster?.creds_file !== undefined) cluster.creds_file = resolve(base, cluster.creds_file);
  if (cluster?.nkey_file !== undefined) cluster.nkey_file = resolve(base, cluster.nkey_file);
  const applied = new Map<string, string>();
  for (const [name, key, apply] of ENV_OVERRIDES) {
    const value = env[name];
    if (value === undefined || value === '') continue;
    apply(config, value);
    applied.set(key, `${name}=${JSON.stringify(value)}`);
  }
  if (env['ALEPH_STORE_DIR']) config.store.dir = resolve(cwd, env['ALEPH_STORE_DIR']);
  // Re-validate after the environment had its say, so ALEPH_PORT=abc is as clear as a bad file.
  const checked = configSchema.safeParse(config, { error: configErrors });
  if (!checked.success) {
    const issue = checked.error.issues[0];
    const variable = applied.get((issue?.path ?? []).join('.')) ?? 'environment override';
    throw new ConfigError(
      `${variable}: ${describePath(issue?.path ?? [])} ${issue?.message ?? 'is invalid'}`,
    );
  }
  return { config: checked.data, path };
}
