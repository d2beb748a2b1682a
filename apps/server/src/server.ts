// The composition root, like the seed's orchestrator_init: config → power, pty manager, session
// store, verifier chain, providers, tools, gateway, and agent.* beside pty.* on one socket.
import { existsSync, mkdirSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { delimiter, dirname, isAbsolute, join, resolve, sep } from 'node:path';
import { createGateway, type Gateway } from '@aleph/gateway';
import { createFileSessionStore, summarize, type SessionStore } from '@aleph/harness';
import { createPowerCapability, type PowerCapability } from '@aleph/power';
import {
  createSandbox,
  inSandboxOwnFilesystem,
  isWithin,
  PROTECTED_HOME_PATHS,
  SandboxError,
  type ConfiguredSandbox,
} from '@aleph/sandbox';
import { loadHooksFile } from '@aleph/verification';
import pino, { type Logger } from 'pino';
import { ServerPtys, shownCommand } from './agent-ptys.js';
import { AgentService } from './agent-service.js';
import { ConfinedWrites, distrustedConfig } from './confined-writes.js';
import { clusterLater } from './cluster-later.js';
import { startClusterMode, type ClusterMode } from './cluster-mode.js';
import { ConfigError, type Config } from './config.js';
import { createProvider, providerKeyVariable } from './providers.js';
import { makeStateDir, resolveToken, writeServerInfo } from './state.js';
import { startTelemetry } from './telemetry.js';

const CONSOLE_DIR = resolve(import.meta.dirname, '../../console/dist'); // the web console's build
export interface StartOptions {
  readonly config: Config;
  readonly stateDir: string;
  readonly env?: NodeJS.ProcessEnv;
  readonly logger?: Logger;
  /** The config file read (may hold `[gateway] token`): denied to the sandbox and the file tools. */
  readonly configPath?: string | undefined;
  /** The runs' windows (read from the state dir when not given). */
  readonly confinedWrites?: ConfinedWrites | undefined;
}

export interface RunningServer {
  readonly url: string;
  readonly token: string;
  readonly tokenGenerated: boolean;
  readonly consoleUrl: string | false; // false: not built. The #token= fragment is never in a request line
  readonly providerId: string | undefined;
  /** What confines the model's commands; `backend: 'none'` with `unconfinedReason` when nothing does. */
  readonly sandbox: ConfiguredSandbox;
  readonly gateway: Gateway;
  readonly agents: AgentService;
  /** Cluster mode's node (`[cluster]`), undefined when the server runs alone. */
  readonly cluster: ClusterMode | undefined;
  close(): Promise<void>;
}

function openSessionStore(dir: string): SessionStore {
  if (existsSync(dir) && !statSync(dir).isDirectory())
    throw new ConfigError(`[store].dir: ${dir} is not a directory`);
  try {
    return createFileSessionStore(dir);
  } catch (error) {
    throw new ConfigError(`[store].dir: cannot use ${dir}: ${(error as Error).message}`);
  }
}

/**
 * Holds the sleep inhibitor for a moment at start, so a backend that cannot work (no logind in a
 * container) is reported once now, not in the middle of the first run. Released as soon as it
 * has either failed or held for a second.
 */
function probeSleepInhibitor(power: PowerCapability): void {
  if (!power.status().enabled || power.status().degradedReason !== undefined) return;
  const guard = power.inhibitSleep('Aleph start-up check');
  const started = Date.now();
  const timer = setInterval(() => {
    if (power.status().degradedReason === undefined && Date.now() - started < 1000) return;
    clearInterval(timer);
    guard.release();
  }, 25);
  timer.unref();
}

export async function startServer(options: StartOptions): Promise<RunningServer> {
  const { config, stateDir } = options;
  // A snapshot: providers read their key from it after the secrets leave process.env below.
  const env = { ...(options.env ?? process.env) };
  const logger = options.logger ?? pino({ level: config.log.level }, pino.destination(2));
  // Fail at start, not at the first run: bad hook files and provider settings are config errors.
  for (const file of config.hooks.files) loadHooksFile(file);
  const confinedWrites = options.confinedWrites ?? new ConfinedWrites(stateDir);
  const cluster =
    config.cluster === undefined ? undefined : await openCluster(config, logger, confinedWrites);
  // The cluster knows the other nodes' runs: a config file one of them could have written is refused.
  const distrusted =
    cluster === undefined || options.configPath === undefined
      ? undefined
      : distrustedConfig(confinedWrites, options.configPath);
  if (distrusted !== undefined) {
    await cluster?.close();
    throw new ConfigError(distrusted);
  }
  const sessions = cluster?.sessions ?? openSessionStore(config.store.dir ?? join(stateDir, 'sessions'));
  const defaultProvider = createProvider(config.agent, env);
  const keyVariable = providerKeyVariable(config.agent);
  // Every child of this process (terminals, tools, hooks, gates) inherits process.env: the server's
  // secrets leave it before anything spawns.
  for (const name of ['ALEPH_TOKEN', ...(keyVariable === undefined ? [] : [keyVariable])])
    delete process.env[name];
  // A relative PATH entry (`.`, `node_modules/.bin`, `bin`) is looked up in each child's cwd: in a
  // run's folder, where the model writes, a hook's `jq` would be the model's program, run as you.
  if (process.env['PATH'] !== undefined)
    process.env['PATH'] = process.env['PATH'].split(delimiter).filter(isAbsolute).join(delimiter);
  const sandbox = buildSandbox(config, stateDir, keyVariable, env, options.configPath);
  if (sandbox.backend === 'none' && config.sandbox.mode === 'auto') {
    logger.warn(
      { component: 'sandbox' },
      `no sandbox: ${sandbox.unconfinedReason ?? 'no backend'}; the model's commands run unconfined (set [sandbox] mode = "required" to refuse to start instead)`,
    );
  } else if (sandbox.backend !== 'none' && sandbox.limits.note !== undefined) {
    logger.warn({ component: 'sandbox' }, `[sandbox] limits: ${sandbox.limits.note}`);
  }

  const telemetry = await startTelemetry(
    config.telemetry,
    (message) => logger.warn({ component: 'telemetry' }, message),
    cluster,
  );
  const power = createPowerCapability({
    enabled: config.power.inhibit_sleep,
    env,
    onWarning: (message) => logger.warn({ component: 'power' }, message),
  });
  probeSleepInhibitor(power);
  const ptyManager = new ServerPtys(
    {
      maxSessions: config.pty.max_sessions,
      idleTtlMs: config.pty.idle_ttl_secs * 1000,
      eviction: config.pty.eviction,
    },
    {
      maxSessions: config.pty.agent_max_sessions,
      nice: config.pty.agent_nice,
      ...(sandbox.cpuGroup === undefined ? {} : { cgroup: sandbox.cpuGroup }),
    },
  );
  const { token, generated } = resolveToken(stateDir, config.gateway.token);
  const consoleBuilt = existsSync(join(CONSOLE_DIR, 'index.html'));
  const gateway = await createGateway({
    host: config.gateway.host,
    port: config.gateway.port,
    token,
    ...(config.gateway.allowed_origins ? { allowedOrigins: config.gateway.allowed_origins } : {}),
    ptyManager,
    logger: logger.child({ component: 'gateway' }),
    ...(consoleBuilt ? { static: { root: CONSOLE_DIR } } : {}),
    coalesce: { 'agent.delta': mergeDeltas },
    commandOf: shownCommand,
    ...(cluster === undefined
      ? {}
      : {
          bus: cluster.gatewayBus,
          remote: cluster.remote,
          health: () => ({ cluster: { name: cluster.name, node: cluster.node, health: cluster.health() } }),
        }),
  });
  cluster?.attach(ptyManager, gateway); // this node's terminals, driven from any node
  const credentials = new Map(clusterCredentials(config).map(({ key, path }) => [realpathSync(path), key]));
  const agents = new AgentService({
    config,
    gateway,
    ptys: ptyManager,
    sessions,
    power,
    sandbox,
    denied: sandbox.deniedPaths.map(({ path, source }) => ({
      path,
      key: isWithin(path, realpathSync(stateDir))
        ? "the server's state dir"
        : path === realpathSync(config.store.dir ?? stateDir)
          ? '[store] dir (the session store)'
          : options.configPath !== undefined && path === realpathSync(options.configPath)
            ? "the server's config file"
            : credentials.has(path)
              ? `[cluster] ${credentials.get(path)} (the cluster's NATS credentials)`
              : source === 'deny_read'
                ? '[sandbox] deny_read'
                : `the sandbox (always denied: ${PROTECTED_HOME_PATHS.map((path) => `~/${path}`).join(', ')})`,
    })),
    // The sandbox's read-only paths: the [hooks] files entries first, then this server's own code.
    readOnly: sandbox.readOnlyPaths.map((path, index) => ({
      path,
      key:
        index < config.hooks.files.length
          ? 'kept read-only: a [hooks] files entry'
          : "kept read-only: this server's own code",
    })),
    logger: logger.child({ component: 'agent' }),
    configPath: options.configPath,
    confinedWrites,
    providerFor: (model) =>
      model === undefined ? defaultProvider : createProvider(config.agent, env, model),
    ...(cluster === undefined ? {} : { queue: cluster.queue }),
  });
  await agents.restore();
  agents.serveQueue();
  writeServerInfo(stateDir, { url: gateway.url, token, pid: process.pid });

  let closing: Promise<void> | undefined;
  return {
    url: gateway.url,
    token,
    tokenGenerated: generated,
    consoleUrl:
      consoleBuilt && `${gateway.url.replace(/^ws(.*)ws$/, 'http$1')}#token=${encodeURIComponent(token)}`,
    providerId: defaultProvider?.id,
    sandbox,
    gateway,
    agents,
    cluster,
    close() {
      closing ??= (async () => {
        await agents.handBack(); // cluster mode: the queue's runs go back to it, for another node
        await agents.shutdown(); // runs cancelled first: their tools' ptys go with the gateway next
        await gateway.close(); // every pty's process group ended (reason: shutdown)
        await sessions.close?.();
        await cluster?.close();
        await telemetry?.shutdown().catch(() => {}); // the last spans out
        logger.flush();
      })();
      return closing;
    },
  };
}

interface Delta {
  readonly runId: string;
  readonly turn: number;
  readonly seq: number;
  readonly kind: 'text' | 'replace' | 'tool_args';
  readonly callId?: string;
  readonly text: string;
}

/** A merged `agent.delta` grows to at most this many characters; the next one stays an event of its own. */
const MERGED_DELTA_CHARS = 64 * 1024;

/**
 * Two `agent.delta` of one turn, for a client that reads slowly, as one: a `replace` restates the
 * reply (the later wins); text after either adds to it; a tool call's argument pieces join those of
 * the same call. Deltas of other turns, other kinds, or past MERGED_DELTA_CHARS together stay apart.
 */
export function mergeDeltas(held: unknown, next: unknown): Delta | undefined {
  const [a, b] = [held as Delta, next as Delta];
  if (a.runId !== b.runId || a.turn !== b.turn) return undefined;
  if (b.kind === 'replace') return b;
  if ('cut' in a || 'cut' in b) return undefined; // an excerpt stays one event, its `cut` true of it alone
  const joins = b.kind === 'text' ? a.kind !== 'tool_args' : a.kind === 'tool_args' && a.callId === b.callId;
  if (!joins || a.text.length + b.text.length > MERGED_DELTA_CHARS) return undefined;
  return { ...a, seq: b.seq, text: a.text + b.text };
}

/** Cluster mode's errors (NATS unreachable, refused credentials, a live node of the same name, an incompatible stream) are config errors naming the servers. */
async function openCluster(
  config: Config,
  logger: Logger,
  confinedWrites: ConfinedWrites,
): Promise<ClusterMode | undefined> {
  const settings = config.cluster;
  if (settings === undefined) return undefined;
  // The nodes authenticate the calls they forward each other (a terminal's input, a kill) with the
  // shared gateway token: a generated one differs on each node, and none would let anything that
  // reaches NATS drive every terminal.
  const secret = config.gateway.token;
  if (secret === undefined)
    throw new ConfigError(
      '[cluster] needs [gateway] token (or ALEPH_TOKEN), the same on every node: the calls nodes forward each other are authenticated with it',
    );
  const join = () =>
    startClusterMode(settings, {
      logger: logger.child({ component: 'cluster' }),
      summarize,
      secret,
      confinedWrites,
    });
  try {
    const cluster = await join();
    logger.info({ component: 'cluster', node: cluster.node, cluster: cluster.name }, 'joined the cluster');
    return cluster;
  } catch (error) {
    if (settings.required || (error as { code?: string }).code !== 'unreachable')
      throw new ConfigError(`[cluster]: ${(error as Error).message}`, { cause: error });
    // required = false: start degraded, and join once NATS answers.
    const { resolveOptions } = await import('@aleph/cluster');
    const { name, node } = resolveOptions({
      servers: settings.servers,
      name: settings.name,
      ...(settings.node ? { node: settings.node } : {}),
    });
    logger.warn(
      { component: 'cluster', node, cluster: name },
      `[cluster]: ${(error as Error).message}; starting degraded (required = false): local terminals work, runs wait until this node joins`,
    );
    return clusterLater({ name, node, servers: settings.servers }, join, logger);
  }
}

/** `[cluster] creds_file` and `nkey_file`, as configured: the NATS credentials of the cluster. */
function clusterCredentials(config: Config): { key: 'creds_file' | 'nkey_file'; path: string }[] {
  const cluster = config.cluster;
  if (cluster === undefined) return [];
  return (['creds_file', 'nkey_file'] as const).flatMap((key) =>
    cluster[key] === undefined ? [] : [{ key, path: cluster[key] }],
  );
}

const mib = (value: number | undefined): number | undefined =>
  value === undefined ? undefined : value * 1024 ** 2;

/**
 * The sandbox of every run: the state dir and the session store are denied beside the configured
 * paths, and the provider key is never passed. A confined hook keeps Claude Code's variables (paths,
 * never secrets). A bad policy, or `required` without a working backend, is a config error naming the key.
 */
function buildSandbox(
  config: Config,
  stateDir: string,
  keyVariable: string | undefined,
  env: NodeJS.ProcessEnv,
  configPath: string | undefined,
): ConfiguredSandbox {
  const storeDir = config.store.dir ?? join(stateDir, 'sessions');
  makeStateDir(stateDir); // denied paths must exist
  mkdirSync(storeDir, { recursive: true, mode: 0o700 });
  try {
    return createSandbox(
      {
        network: config.sandbox.network,
        // The sandbox has a /dev and a /proc of its own: what the host keeps there is out of reach.
        denyRead: [
          ...[stateDir, storeDir].filter((path) => !inSandboxOwnFilesystem(path)),
          ...(configPath === undefined ? [] : [configPath]),
          // Whatever holds them could join the cluster: read its sessions, drive its terminals.
          ...clusterCredentials(config).map((file) => file.path),
          ...config.sandbox.deny_read,
        ],
        readOnly: config.hooks.files,
        readOnlyFolders: ownCodeFolders(),
        limits: {
          processes: config.sandbox.limits.processes,
          memoryBytes: mib(config.sandbox.limits.memory_mib),
          fileSizeBytes: mib(config.sandbox.limits.file_size_mib),
          cpuSeconds: config.sandbox.limits.cpu_secs,
          tmpBytes: mib(config.sandbox.limits.tmp_mib),
        },
        env: [
          'CLAUDE_PROJECT_DIR',
          'CLAUDE_PLUGIN_ROOT',
          'CLAUDECODE',
          'CLAUDE_CODE_SESSION_ID',
          ...config.sandbox.env,
        ],
        secretEnv: keyVariable === undefined ? [] : [keyVariable],
      },
      // Where the commands share a CPU group, it weighs as one task of the agents' niceness.
      { mode: config.sandbox.mode, env, nice: config.pty.agent_nice },
    );
  } catch (error) {
    if (!(error instanceof SandboxError)) throw error;
    const key = error.code.startsWith('backend_') ? ' mode = "required":' : '';
    throw new ConfigError(`[sandbox]${key} ${error.message}`, { cause: error });
  }
}

/**
 * The folders this server's code is loaded from: the `node_modules` it is installed in, or in a
 * workspace (a clone), the workspace's `node_modules` and each package's `dist` and `node_modules`.
 * Kept read-only to a run whose folder holds them: modules load at first use (a provider, the MCP
 * client), so a file the model changed there would run inside the server.
 */
export function ownCodeFolders(dist: string = import.meta.dirname): string[] {
  const server = dirname(dist);
  const parts = server.split(sep);
  const installedIn = parts.lastIndexOf('node_modules');
  if (installedIn > 0) return [parts.slice(0, installedIn + 1).join(sep)];
  let root: string | undefined;
  for (let dir = server; root === undefined && dirname(dir) !== dir; dir = dirname(dir))
    if (existsSync(join(dir, 'pnpm-workspace.yaml'))) root = dir;
  if (root === undefined) return [join(server, 'dist'), join(server, 'node_modules')];
  const folders = [join(root, 'node_modules')];
  for (const group of ['apps', 'packages', 'tools']) {
    let names: string[] = [];
    try {
      names = readdirSync(join(root, group));
    } catch {
      continue;
    }
    for (const name of names)
      folders.push(join(root, group, name, 'dist'), join(root, group, name, 'node_modules'));
  }
  return folders;
}
