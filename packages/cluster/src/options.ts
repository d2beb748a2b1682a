// What a cluster node is configured with (the server maps `[cluster]` in aleph.toml onto this), and
// the names every stream, bucket and subject take from `name`.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import { ClusterError } from './errors.js';

export interface ClusterOptions {
  /** NATS server URLs, e.g. `nats://127.0.0.1:4222`. */
  readonly servers: readonly string[];
  /** Namespaces every subject, stream and bucket; default `aleph`. */
  readonly name?: string;
  /**
   * This node's name, unique among live nodes; default `<host name>-<pid>-<6 hex digits>`, the
   * digits chosen at random once per process (containers that share a host name each have pid 1).
   */
  readonly node?: string;
  /** Runs this node takes at once; default 4. */
  readonly maxRuns?: number;
  /** A node that stops renewing its lease loses it (and its runs) after this long; default 10. */
  readonly leaseTtlSecs?: number;
  /** Stream replicas (3 on a 3-node NATS cluster); default 1. */
  readonly replicas?: number;
  readonly token?: string;
  readonly credsFile?: string;
  readonly nkeyFile?: string;
  /** How long to wait for the first connection; default 5 s. */
  readonly connectTimeoutMs?: number;
}

export interface ResolvedOptions {
  readonly servers: readonly string[];
  readonly name: string;
  readonly node: string;
  readonly maxRuns: number;
  readonly leaseTtlMs: number;
  readonly replicas: number;
  readonly connectTimeoutMs: number;
}

const NAME = /^[A-Za-z0-9_-]{1,64}$/;

export function resolveOptions(options: ClusterOptions): ResolvedOptions {
  const name = options.name ?? 'aleph';
  const node = options.node ?? defaultNode();
  if (!NAME.test(name))
    throw new ClusterError(
      'invalid_options',
      `cluster name ${JSON.stringify(name)}: letters, digits, _ and - only (1-64)`,
    );
  if (!NAME.test(node))
    throw new ClusterError(
      'invalid_options',
      `node name ${JSON.stringify(node)}: letters, digits, _ and - only (1-64)`,
    );
  if (options.servers.length === 0)
    throw new ClusterError('invalid_options', 'cluster servers: at least one URL');
  for (const server of options.servers) {
    // As the NATS client reads them: a URL (nats://, tls://) or host:port.
    let host = '';
    try {
      host = new URL(server.includes('://') ? server : `nats://${server}`).hostname;
    } catch {
      // said below
    }
    if (host === '')
      throw new ClusterError('invalid_options', `cluster servers: ${JSON.stringify(server)} is not a URL`);
  }
  const maxRuns = options.maxRuns ?? 4;
  const leaseTtlSecs = options.leaseTtlSecs ?? 10;
  const replicas = options.replicas ?? 1;
  if (!Number.isInteger(maxRuns) || maxRuns < 1)
    throw new ClusterError('invalid_options', 'max_runs: an integer >= 1');
  if (!(leaseTtlSecs >= 1 && leaseTtlSecs <= 3600))
    throw new ClusterError('invalid_options', 'lease_ttl_secs: between 1 and 3600');
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > 5)
    throw new ClusterError('invalid_options', 'replicas: an integer from 1 to 5');
  return {
    servers: options.servers,
    name,
    node,
    maxRuns,
    leaseTtlMs: Math.round(leaseTtlSecs * 1000),
    replicas,
    connectTimeoutMs: options.connectTimeoutMs ?? 5_000,
  };
}

/** Chosen once: every default name this process resolves is the same one. */
const PROCESS_SUFFIX = randomBytes(3).toString('hex');

/** `<host name>-<pid>-<random>`, the host name shortened to fit 64 characters. */
function defaultNode(): string {
  const tail = `-${process.pid}-${PROCESS_SUFFIX}`;
  const host =
    hostname()
      .replace(/[^A-Za-z0-9_-]/g, '-')
      .slice(0, 64 - tail.length) || 'node';
  return `${host}${tail}`;
}

/** Every name the cluster uses, derived from `name` alone, so two clusters share a NATS server safely. */
export function clusterNames(name: string) {
  return {
    eventsStream: `${name}_events`,
    eventsAll: `${name}.ev.>`,
    eventsPrefix: `${name}.ev.`,
    sessionsStream: `${name}_sessions`,
    sessionSubject: (sessionId: string) => `${name}.session.${sessionId}`,
    runsStream: `${name}_runs`,
    runsSubject: `${name}.runs`,
    runsConsumer: `${name}_runners`,
    leasesBucket: `${name}_leases`,
    nodesBucket: `${name}_nodes`,
    nodeInbox: (node: string) => `${name}.node.${node}`,
  };
}
