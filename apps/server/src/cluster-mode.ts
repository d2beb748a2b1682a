// Cluster mode: with `[cluster]` in aleph.toml the server's seams are NATS JetStream's — the event
// bus (every node's clients see every node's events), the session store (every node reads every
// run's log; a node that lost a run is fenced from it) and the run queue (a run waits in a work
// queue, a node holds it by a lease, another node resumes it from its log when the holder dies).
// Without `[cluster]` none of this is loaded and nothing changes.
import { GatewayError, type EventBus, type Gateway, type RemoteTerminals } from '@aleph/gateway';
import type { PtyManager } from '@aleph/pty';
import type { TerminalHost } from '@aleph/cluster';
import type { SessionLoad, SessionStore, SessionSummary } from '@aleph/harness';
import type { Logger } from 'pino';
import type { ConfinedWrites } from './confined-writes.js';
import { z } from 'zod';

const name = z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, { error: 'must be 1-64 letters, digits, _ or -' });

export const clusterConfigSchema = z.strictObject({
  servers: z
    .array(z.string().regex(/^(nats|tls|ws|wss):\/\/\S+$/, { error: 'must be nats:// URLs' }))
    .min(1, {
      error: 'must name at least one NATS server',
    }),
  name: name.default('aleph'),
  node: name.optional(),
  max_runs: z
    .int({ error: 'must be a positive integer' })
    .positive({ error: 'must be a positive integer' })
    .default(4),
  lease_ttl_secs: z.number({ error: 'must be a number of seconds' }).min(1).max(3600).default(10),
  replicas: z.int({ error: 'must be an integer from 1 to 5' }).min(1).max(5).default(1),
  token: z.string().min(1).optional(),
  creds_file: z.string().min(1).optional(),
  nkey_file: z.string().min(1).optional(),
  /** false: start degraded (local terminals only, runs wait) when NATS is unreachable at start. */
  required: z.boolean({ error: 'must be true or false' }).default(true),
});

export type ClusterConfig = z.infer<typeof clusterConfigSchema>;

export interface ClusterRunQueue {
  submit(ticket: { runId: string; sessionId: string; request: unknown }): Promise<void>;
  serve(
    handler: (
      ticket: { runId: string; sessionId: string; request: unknown },
      lease: {
        signal: AbortSignal;
        redelivered: boolean;
        node: string;
        /** Renewed within the TTL: no other node can hold the run now. */
        readonly current: boolean;
        /** True once the hold is confirmed (at once while current), false once the run moved. */
        held(): Promise<boolean>;
      },
    ) => Promise<void>,
  ): void;
  cancel(runId: string): void;
  holder(runId: string): Promise<{ node: string } | undefined>;
  /** This node lost the run's lease: its session log takes nothing more from here. */
  relinquish(sessionId: string): void;
  /** The run's log refused this node's append (another node wrote it), or would (`relinquish`). */
  fenced(sessionId: string): boolean;
  /**
   * A take-over's claim on the run's log, before the run reads it to plan from: the node that lost
   * the run appends nothing after it. `ended`: that node ended the run meanwhile.
   */
  claim(sessionId: string): Promise<'claimed' | 'ended'>;
  close(): Promise<void>;
}

export interface ClusterMode {
  readonly node: string;
  readonly name: string;
  readonly bus: EventBus;
  /** The bus the gateway takes: a pty.exit of another node's terminal follows that terminal's output. */
  readonly gatewayBus: EventBus;
  /** Other nodes' terminals, for the gateway: their calls are forwarded, their output followed. */
  readonly remote: RemoteTerminals;
  /** Serves this node's own terminals to the cluster, once the gateway exists. */
  attach(ptys: PtyManager, gateway: Gateway): void;
  readonly sessions: SessionStore;
  readonly queue: ClusterRunQueue;
  health(): 'ok' | 'degraded' | 'closed';
  nodes(): Promise<string[]>;
  close(): Promise<void>;
}

/**
 * Connects this node to the cluster. Loaded only when `[cluster]` is configured (the NATS clients
 * are not imported otherwise). Errors are the cluster's own (unreachable, auth, duplicate node,
 * incompatible stream), for the caller to report as configuration errors. `secret` (the gateway
 * token, the same on every node) authenticates the calls nodes forward each other, runs and cancels.
 */
export async function startClusterMode(
  config: ClusterConfig,
  options: {
    readonly logger: Logger;
    readonly summarize: (sessionId: string, load: SessionLoad, live: boolean) => SessionSummary;
    readonly secret: string;
    /** This node's windows of agent runs: shared with every node, and every node's read into it. */
    readonly confinedWrites?: ConfinedWrites | undefined;
  },
): Promise<ClusterMode> {
  const { logger, summarize, secret, confinedWrites } = options;
  const cluster = await import('@aleph/cluster');
  const connection = await cluster.connectCluster({
    servers: config.servers,
    name: config.name,
    ...(config.node !== undefined ? { node: config.node } : {}),
    maxRuns: config.max_runs,
    leaseTtlSecs: config.lease_ttl_secs,
    replicas: config.replicas,
    ...(config.token !== undefined ? { token: config.token } : {}),
    ...(config.creds_file !== undefined ? { credsFile: config.creds_file } : {}),
    ...(config.nkey_file !== undefined ? { nkeyFile: config.nkey_file } : {}),
  });
  try {
    const queue = await cluster.JetStreamRunQueue.open(connection, {
      secret,
      onError: (error, what) => logger.warn({ component: 'cluster', err: error }, what),
    });
    const sessions = await cluster.JetStreamSessionStore.open(connection, {
      summarize,
      isLive: async (sessionId) => (await queue.holder(sessionId)) !== undefined,
    });
    const bus = await cluster.JetStreamEventBus.open(connection);
    // The nodes share the projects' files: a file a run changed on one node is distrusted on every
    // node. Read whole before this node runs anything; its own entries go to the others.
    const records = await cluster.JetStreamRecordLog.open(connection, {
      onError: (error) => logger.warn({ component: 'cluster', err: error }, 'a run window was not shared'),
    });
    if (confinedWrites !== undefined) {
      await records.follow((record, node) => confinedWrites.absorb(record, node));
      confinedWrites.share((entry) => void records.append(entry));
    }
    const terminals = await cluster.ClusterTerminals.open(connection, bus, {
      secret,
      onError: (error, what) => logger.warn({ component: 'cluster', err: error }, what),
      makeError: (code, message, data) => new GatewayError(code, message, { data }),
    });
    connection.onHealth((health) =>
      logger[health === 'ok' ? 'info' : 'warn'](
        { component: 'cluster', node: connection.options.node },
        health === 'degraded'
          ? `NATS unreachable (${config.servers.join(', ')}): degraded — local terminals go on, runs wait`
          : `cluster ${health}`,
      ),
    );
    return {
      node: connection.options.node,
      name: connection.options.name,
      bus,
      gatewayBus: terminals.gatewayBus(),
      remote: terminals,
      attach: (ptys, gateway) => terminals.attach(terminalHost(ptys, gateway)),
      sessions,
      queue: {
        submit: (ticket) => queue.submit(ticket),
        serve: (handler) => queue.serve(handler),
        cancel: (runId) => queue.cancel(runId),
        holder: (runId) => queue.holder(runId),
        relinquish: (sessionId) => sessions.relinquish(sessionId),
        fenced: (sessionId) => sessions.fenced(sessionId),
        claim: async (sessionId) => (await sessions.claim(sessionId)).kind,
        close: () => queue.close(),
      },
      health: () => connection.health,
      nodes: () => connection.nodes(),
      async close() {
        records.close();
        await terminals.close();
        await queue.close();
        await connection.close();
      },
    };
  } catch (error) {
    await connection.close();
    throw error;
  }
}

/**
 * The start line of a node in cluster mode: the cluster, this node's name and the NATS servers
 * (any user and password in a URL left out), and whether it has joined.
 */
export function clusterStartLine(
  config: ClusterConfig,
  mode: Pick<ClusterMode, 'name' | 'node' | 'health'>,
): string {
  const servers = config.servers.map((url) => url.replace(/\/\/[^/@]*@/, '//'));
  const health = mode.health();
  return `cluster: ${mode.name}, node ${mode.node}, NATS ${servers.join(', ')}${
    health === 'ok' ? '' : ` (${health}: not joined yet; local terminals work, runs wait)`
  }`;
}

/** This node's terminals as the cluster serves them: the pty manager's sessions, run by the gateway. */
function terminalHost(ptys: PtyManager, gateway: Gateway): TerminalHost {
  // A PtyManager emits 'spawn' (a PtySession, which is a HostSession) and 'forget' (an id).
  const events = ptys as unknown as Pick<TerminalHost, 'on' | 'off'>;
  return {
    on: events.on.bind(ptys),
    off: events.off.bind(ptys),
    get: (sessionId) => ptys.get(sessionId),
    list: () => ptys.list(),
    callLocal: (method, params) => gateway.callLocal(method, params),
  };
}
