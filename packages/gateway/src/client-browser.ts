// @aleph/gateway/client in a browser (the "browser" export condition, which bundlers such as Vite
// use): the wire's constants and types, with no `ws`, zod or Node API in the bundle. The Node
// client (`GatewayClient`, `connectGateway`) is not here: a page speaks the protocol over its own
// WebSocket (PROTOCOL.md says how), with these values.
export {
  ACK_AFTER_MS,
  ACK_EVERY_BYTES,
  ErrorCodes,
  MAX_INPUT_BYTES,
  MAX_REPLAY_BYTES,
  MAX_SNAPSHOT_CELLS,
  PROTOCOL_VERSION,
  TERMINAL_ANSWERS,
  TOKEN_SUBPROTOCOL_PREFIX,
  WEBSOCKET_PATH,
  type ErrorCodeName,
} from './internal/wire-constants.js';
export { boundCounts, type CountedTerminal } from './internal/bounded-counts.js';
export type {
  ExitInfoWire,
  MethodName,
  MethodParams,
  MethodResult,
  PtyExitEvent,
  PtyOutputEvent,
  RpcErrorObject,
  RpcMessage,
} from './protocol.js';
