// `[cluster] required = false` with NATS unreachable at start: the node starts degraded and joins
// once NATS answers. Until then its own terminals work and their events reach its own clients (an
// in-process bus); what needs the cluster (a run, a run's log) answers `busy` saying why; the
// health is `degraded`. On joining, every subscription moves to the cluster's bus, the run queue
// starts serving, and the node behaves as if it had joined at start.
import {
  GatewayError,
  InMemoryEventBus,
  type EventBus,
  type EventSubscription,
  type Gateway,
  type RemoteTerminals,
} from '@aleph/gateway';
import type { PtyManager } from '@aleph/pty';
import type { SessionStore } from '@aleph/harness';
import type { Logger } from 'pino';
import type { ClusterMode, ClusterRunQueue } from './cluster-mode.js';

const FIRST_RETRY_MS = 500;
const MAX_RETRY_MS = 5_000;

type Join = () => Promise<ClusterMode>;
type Handler = Parameters<ClusterRunQueue['serve']>[0];

export function clusterLater(
  names: { name: string; node: string; servers: readonly string[] },
  join: Join,
  logger: Logger,
): ClusterMode {
  const unavailable = (): GatewayError =>
    new GatewayError(
      'busy',
      `this node has not joined its cluster yet (NATS unreachable at ${names.servers.join(', ')}); runs and their logs are served once it has`,
    );
  const local = new InMemoryEventBus();
  let joined: ClusterMode | undefined;
  let closed = false;
  let handler: Handler | undefined;
  const moves = new Set<(bus: EventBus) => void>();

  const bus: EventBus = {
    publish: (topic, sessionId, data) => (joined?.bus ?? local).publish(topic, sessionId, data),
    subscribe(filter, listener): EventSubscription {
      let inner = (joined?.bus ?? local).subscribe(filter, listener);
      const move = (to: EventBus): void => {
        inner.unsubscribe();
        inner = to.subscribe(filter, listener);
      };
      if (joined === undefined) moves.add(move);
      const unsubscribe = (): void => {
        moves.delete(move);
        inner.unsubscribe();
      };
      return {
        get ready() {
          return inner.ready;
        },
        unsubscribe,
        [Symbol.dispose]: unsubscribe,
      };
    },
  };

  const store = (): SessionStore => {
    if (joined === undefined) throw unavailable();
    return joined.sessions;
  };
  const sessions: SessionStore = {
    create: async (options) => store().create(options),
    append: async (sessionId, event, options) => store().append(sessionId, event, options),
    flush: async (sessionId) => store().flush(sessionId),
    load: async (sessionId, options) => store().load(sessionId, options),
    // Nothing is known of the cluster's runs yet: none are listed (the health says why).
    list: async () => (joined === undefined ? [] : joined.sessions.list()),
    end: async (sessionId) => store().end?.(sessionId),
    summaries: async () => (joined === undefined ? [] : ((await joined.sessions.summaries?.()) ?? [])),
    transcriptPath: (sessionId) => joined?.sessions.transcriptPath?.(sessionId),
    close: () => Promise.resolve(), // the joined store is closed with the cluster
  };

  const queue: ClusterRunQueue = {
    submit: async (ticket) => {
      if (joined === undefined) throw unavailable();
      await joined.queue.submit(ticket);
    },
    serve: (serve) => {
      handler = serve;
      joined?.queue.serve(serve);
    },
    cancel: (runId) => joined?.queue.cancel(runId),
    holder: async (runId) => (joined === undefined ? undefined : joined.queue.holder(runId)),
    relinquish: (sessionId) => joined?.queue.relinquish(sessionId),
    fenced: (sessionId) => joined?.queue.fenced(sessionId) ?? false,
    claim: async (sessionId) => {
      if (joined === undefined) throw unavailable();
      return joined.queue.claim(sessionId);
    },
    close: async () => joined?.queue.close(),
  };

  // Other nodes' terminals are known once joined; until then only this node's exist.
  let host: [PtyManager, Gateway] | undefined;
  const unknown = (sessionId: string): GatewayError =>
    new GatewayError('unknown_session', `unknown session ${sessionId}`);
  const remote: RemoteTerminals = {
    has: async (sessionId) => (joined === undefined ? false : joined.remote.has(sessionId)),
    call: async (method, params) => {
      if (joined === undefined) throw unknown(params.sessionId);
      return joined.remote.call(method, params);
    },
    spawn: async (node, params) => {
      if (joined?.remote.spawn !== undefined) return joined.remote.spawn(node, params);
      if (host === undefined || node !== names.node)
        throw new GatewayError(
          'busy',
          `this node has not joined its cluster yet (NATS unreachable at ${names.servers.join(', ')}); it forks terminals only here (node ${names.node}) until it has`,
        );
      return (await host[1].callLocal('pty.spawn', params)) as { sessionId: string; pid: number };
    },
    list: async () => (joined === undefined ? [] : joined.remote.list()),
    follow: async (viewer, sessionId, fromOffset) => {
      if (joined === undefined) throw unknown(sessionId);
      return joined.remote.follow(viewer, sessionId, fromOffset);
    },
    ack: (viewer, sessionId, offset) => joined?.remote.ack(viewer, sessionId, offset),
    sync: (viewer) => joined?.remote.sync(viewer),
  };

  let retry: NodeJS.Timeout | undefined;
  let trying: Promise<void> | undefined;
  let wait = FIRST_RETRY_MS;
  let lastProblem = '';
  const attempt = async (): Promise<void> => {
    retry = undefined;
    try {
      const mode = await join();
      if (closed) return void (await mode.close());
      joined = mode;
      for (const move of moves) move(mode.gatewayBus);
      if (host !== undefined) mode.attach(...host);
      moves.clear();
      if (handler !== undefined) mode.queue.serve(handler);
      logger.info({ component: 'cluster', node: mode.node, cluster: mode.name }, 'joined the cluster');
    } catch (error) {
      const problem = (error as Error).message;
      if (problem !== lastProblem)
        logger.warn({ component: 'cluster', node: names.node }, `${problem}: trying again`);
      lastProblem = problem;
      wait = Math.min(wait * 2, MAX_RETRY_MS);
      if (!closed)
        retry = setTimeout(() => {
          trying = attempt();
        }, wait);
    }
  };
  retry = setTimeout(() => {
    trying = attempt();
  }, FIRST_RETRY_MS);

  return {
    name: names.name,
    node: names.node,
    bus,
    gatewayBus: bus,
    remote,
    attach: (ptys, gateway) => {
      host = [ptys, gateway];
      joined?.attach(ptys, gateway);
    },
    sessions,
    queue,
    health: () => joined?.health() ?? (closed ? 'closed' : 'degraded'),
    nodes: async () => (joined === undefined ? [names.node] : joined.nodes()),
    async close() {
      closed = true;
      if (retry !== undefined) clearTimeout(retry);
      await trying; // a join under way ends (and closes what it opened) first
      await joined?.close();
    },
  };
}
