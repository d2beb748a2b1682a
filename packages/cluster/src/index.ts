// Cluster mode on NATS JetStream: the seams the server composes — an event bus, a session store,
// a run queue with leases and a log of records every node reads — implemented over one NATS deployment shared by every node.
export { connectCluster, ensureStream, type ClusterConnection, type ClusterHealth } from './connection.js';
export { ClusterError, type ClusterErrorCode } from './errors.js';
export { JetStreamEventBus, sessionToken, type JetStreamEventBusOptions } from './event-bus.js';
export { clusterNames, resolveOptions, type ClusterOptions, type ResolvedOptions } from './options.js';
export { JetStreamRecordLog, type JetStreamRecordLogOptions } from './record-log.js';
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
