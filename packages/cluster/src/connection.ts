// One node's connection to the cluster: NATS with JetStream, the node's name registered in the
// cluster (refused when a node of that name is alive), and its health: `ok` while connected,
// `degraded` while NATS is unreachable (the client reconnects forever; nothing local stops).
// Invariant: a stream, consumer or bucket that exists with another configuration is never
// recreated or changed — the node refuses to start and names it, and the data is kept.
import { readFile } from 'node:fs/promises';
import {
  connect,
  credsAuthenticator,
  nkeyAuthenticator,
  type Authenticator,
  type NatsConnection,
} from '@nats-io/transport-node';
import {
  jetstream,
  jetstreamManager,
  type JetStreamClient,
  type JetStreamManager,
  type StreamConfig,
} from '@nats-io/jetstream';
import { Kvm, type KV } from '@nats-io/kv';
import { ClusterError } from './errors.js';
import { clusterNames, resolveOptions, type ClusterOptions, type ResolvedOptions } from './options.js';

export type ClusterHealth = 'ok' | 'degraded' | 'closed';

export interface ClusterConnection {
  readonly options: ResolvedOptions;
  readonly names: ReturnType<typeof clusterNames>;
  readonly nc: NatsConnection;
  readonly js: JetStreamClient;
  readonly jsm: JetStreamManager;
  readonly health: ClusterHealth;
  /** Called on every change of health. Returns an unsubscribe. */
  onHealth(listener: (health: ClusterHealth) => void): () => void;
  /** The live nodes' names (their registrations not yet expired). */
  nodes(): Promise<string[]>;
  /** Resolves when NATS is reachable again (at once when it is). */
  whenConnected(signal?: AbortSignal): Promise<void>;
  kv(bucket: string, ttlMs?: number): Promise<KV>;
  close(): Promise<void>;
}

/** A credentials file's bytes, or a ClusterError naming the option and why it cannot be read. */
async function credentials(option: string, path: string): Promise<Uint8Array> {
  try {
    return await readFile(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? String(error);
    throw new ClusterError('invalid_options', `cluster ${option} ${path}: cannot read it (${code})`, {
      cause: error,
    });
  }
}

async function authenticatorOf(options: ClusterOptions): Promise<Authenticator | undefined> {
  if (options.credsFile !== undefined)
    return credsAuthenticator(await credentials('creds_file', options.credsFile));
  if (options.nkeyFile !== undefined) {
    const seed = new TextDecoder().decode(await credentials('nkey_file', options.nkeyFile)).trim();
    return nkeyAuthenticator(new TextEncoder().encode(seed));
  }
  return undefined;
}

function isAuthError(error: unknown): boolean {
  const text = String((error as { message?: unknown } | undefined)?.message ?? error).toLowerCase();
  return text.includes('authorization') || text.includes('authentication');
}

/** Checks an existing stream against what this version needs; never changes it. */
export async function ensureStream(
  jsm: JetStreamManager,
  wanted: Partial<StreamConfig> & { name: string },
): Promise<void> {
  let existing: StreamConfig | undefined;
  try {
    existing = (await jsm.streams.info(wanted.name)).config;
  } catch (error) {
    if ((error as { code?: unknown }).code !== 404 && !/stream not found/i.test(String(error))) throw error;
  }
  if (existing === undefined) {
    await jsm.streams.add(wanted);
    return;
  }
  const differences: string[] = [];
  for (const key of ['retention', 'storage', 'num_replicas'] as const)
    if (wanted[key] !== undefined && existing[key] !== wanted[key])
      differences.push(`${key} is ${String(existing[key])}, needs ${String(wanted[key])}`);
  const subjects = new Set(existing.subjects);
  for (const subject of wanted.subjects ?? [])
    if (!subjects.has(subject)) differences.push(`subjects lack ${subject}`);
  if (differences.length > 0)
    throw new ClusterError(
      'incompatible',
      `stream ${wanted.name} exists with another configuration (${differences.join('; ')}); it was left as it is — remove it or use another [cluster] name`,
    );
}

export async function connectCluster(input: ClusterOptions): Promise<ClusterConnection> {
  const options = resolveOptions(input);
  const names = clusterNames(options.name);
  const authenticator = await authenticatorOf(input);
  let nc: NatsConnection;
  try {
    nc = await connect({
      servers: [...options.servers],
      name: `aleph:${options.name}:${options.node}`,
      timeout: options.connectTimeoutMs,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      pingInterval: 5_000,
      // No stack trace captured for every request (two Errors each): a cost on every append.
      noAsyncTraces: true,
      ...(input.token !== undefined ? { token: input.token } : {}),
      ...(authenticator !== undefined ? { authenticator } : {}),
    });
  } catch (error) {
    if (isAuthError(error))
      throw new ClusterError('auth', `NATS at ${options.servers.join(', ')} refused the credentials`, {
        cause: error,
      });
    throw new ClusterError('unreachable', `no NATS server answered at ${options.servers.join(', ')}`, {
      cause: error,
    });
  }
  let jsm: JetStreamManager;
  try {
    jsm = await jetstreamManager(nc, { timeout: options.connectTimeoutMs });
  } catch (error) {
    await nc.close();
    throw new ClusterError(
      'unreachable',
      `NATS at ${options.servers.join(', ')} has no JetStream (start it with -js)`,
      {
        cause: error,
      },
    );
  }
  const js = jetstream(nc);
  const kvm = new Kvm(js);
  const buckets = new Map<string, KV>();
  const kv = async (bucket: string, ttlMs?: number): Promise<KV> => {
    const known = buckets.get(bucket);
    if (known) return known;
    const opened = await kvm.create(bucket, {
      history: 1,
      replicas: options.replicas,
      ...(ttlMs !== undefined ? { ttl: ttlMs } : {}),
    });
    const status = await opened.status();
    if (ttlMs !== undefined && status.ttl !== ttlMs) {
      throw new ClusterError(
        'incompatible',
        `bucket ${bucket} exists with a TTL of ${status.ttl} ms, this node needs ${ttlMs} ms (lease_ttl_secs must be the same on every node); it was left as it is`,
      );
    }
    buckets.set(bucket, opened);
    return opened;
  };

  // The node's registration: created (refused while another of that name lives), then renewed.
  let nodesKv: KV;
  try {
    nodesKv = await kv(names.nodesBucket, options.leaseTtlMs);
  } catch (error) {
    await nc.close(); // refused (a bucket of another TTL) or failed: nothing stays connected
    throw error;
  }
  const registration = JSON.stringify({ node: options.node, pid: process.pid, since: Date.now() });
  let revision: number;
  try {
    revision = await nodesKv.create(options.node, registration);
  } catch (error) {
    await nc.close();
    throw new ClusterError(
      'duplicate_node',
      `a node named ${options.node} is alive in cluster ${options.name}; give this one another [cluster] node`,
      { cause: error },
    );
  }

  let health: ClusterHealth = 'ok';
  const listeners = new Set<(health: ClusterHealth) => void>();
  const waiters = new Set<() => void>();
  const setHealth = (next: ClusterHealth): void => {
    if (next === health) return;
    health = next;
    for (const listener of listeners) listener(next);
    if (next !== 'degraded') for (const waiter of [...waiters]) waiter();
  };
  void (async () => {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect') setHealth('degraded');
      else if (status.type === 'reconnect') setHealth('ok');
    }
  })().catch(() => undefined);
  void nc.closed().then(() => setHealth('closed'));

  const renew = async (): Promise<void> => {
    if (health !== 'ok') return;
    try {
      revision = await nodesKv.update(options.node, registration, revision);
    } catch {
      // Lost (expired while this node was stopped or cut off): take it again if nobody else has.
      try {
        revision = await nodesKv.put(options.node, registration);
      } catch {
        /* next beat */
      }
    }
  };
  const beat = setInterval(() => void renew(), Math.max(200, Math.floor(options.leaseTtlMs / 3)));
  beat.unref();

  return {
    options,
    names,
    nc,
    js,
    jsm,
    get health() {
      return health;
    },
    onHealth(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async nodes() {
      const keys: string[] = [];
      for await (const key of await nodesKv.keys()) keys.push(key);
      return keys.sort();
    },
    whenConnected(signal) {
      if (health !== 'degraded') return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const done = (): void => {
          waiters.delete(done);
          signal?.removeEventListener('abort', abort);
          resolve();
        };
        const abort = (): void => {
          waiters.delete(done);
          reject(signal?.reason as Error);
        };
        waiters.add(done);
        signal?.addEventListener('abort', abort, { once: true });
      });
    },
    kv,
    async close() {
      clearInterval(beat);
      if (nc.isClosed()) return;
      try {
        await nodesKv.delete(options.node);
      } catch {
        /* closing anyway */
      }
      await nc.drain().catch(() => nc.close());
    },
  };
}
