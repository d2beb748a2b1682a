// @aleph/gateway: pseudo-terminals over one WebSocket, with auth, flow control and replay.
export {
  createGateway,
  DEFAULT_FLOW,
  type Gateway,
  type GatewayLogger,
  type GatewayOptions,
  type MethodHandler,
  type RequestContext,
} from './gateway.js';
export { GatewayError } from './errors.js';
export {
  InMemoryEventBus,
  type BusEvent,
  type BusListener,
  type EventBus,
  type EventFilter,
  type EventSubscription,
  type InMemoryEventBusOptions,
} from './event-bus.js';
export { tokenSubprotocol } from './internal/auth.js';
export { SLOW_CONSUMER_CLOSE_CODE } from './internal/connection.js';
export { type FlowLimits } from './internal/output-pump.js';
export type { ForwardedMethod, RemoteTerminals, RemoteViewer } from './remote.js';
export * from './protocol.js';
