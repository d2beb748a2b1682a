// Cluster mode on NATS JetStream: the seams the server composes — an event bus, a session store
// and a run queue with leases — implemented over one NATS deployment shared by every node.
export { connectCluster, ensureStream, type ClusterConnection, type ClusterHealth } from './connection.js';
export { ClusterError, type ClusterErrorCode } from './errors.js';
export { JetStreamEventBus, sessionToken, type JetStreamEventBusOptions } from './event-bus.js';
export { clusterNames, resolveOptions, type ClusterOptions, type ResolvedOptions } from './options.js';
export {
  JetStreamRunQueue,
  type JetStreamRunQueueOptions,
  type RunHandler,
  type RunHolder,
  type RunLease,
  type RunTicket,
} from './run-queue.js';
export {
  JetStreamSessionStore,
  type JetStreamSessionStoreOptions,
  type SessionClaim,
} from './session-store.js';
export {
  ClusterTerminals,
  type ClusterTerminalsOptions,
  type HostSession,
  type TerminalHost,
} from './terminals.js';
