// The wire's constants as plain values — no zod, no ws, no Node API — so the browser entry
// (`@aleph/gateway/client` under the "browser" condition) can carry them without the rest.
// protocol.ts and client.ts re-export them: this is their one definition.

export const PROTOCOL_VERSION = 'aleph.v1';
/** Browsers cannot set headers: they offer this subprotocol prefix + base64url(token) instead. */
export const TOKEN_SUBPROTOCOL_PREFIX = 'aleph.token.';
export const WEBSOCKET_PATH = '/ws';
/** Largest decoded `pty.input` payload. */
export const MAX_INPUT_BYTES = 64 * 1024;
/** Most output bytes one `pty.replay` answer carries: ask again from where it ended for more. */
export const MAX_REPLAY_BYTES = 64 * 1024;
/**
 * Most cells (cols × rows) of a session `pty.snapshot` serves (e.g. 1000 × 500): its terminal costs
 * ~12 bytes a cell, and a 10000 × 10000 one over a gigabyte. A bigger session answers `screen_too_large`.
 */
export const MAX_SNAPSHOT_CELLS = 500_000;

/** Stable error codes: the number is JSON-RPC's, `data.code` the name clients match on. */
export const ErrorCodes = {
  parse_error: -32700,
  invalid_request: -32600,
  method_not_found: -32601,
  invalid_params: -32602,
  internal_error: -32603,
  unknown_session: -32001,
  frame_too_large: -32002,
  busy: -32003,
  session_limit: -32004,
  spawn_failed: -32005,
  session_closed: -32006,
  screen_too_large: -32008,
  unknown_run: -32007,
  no_provider: -32010,
  /** The client's connection was refused: the token (401) or the page's origin or host (403). */
  unauthorized: -32011,
  /** The client's connection was refused for another reason (a wrong path: 404); `data.status`. */
  upgrade_refused: -32012,
} as const;
export type ErrorCodeName = keyof typeof ErrorCodes;

/**
 * A terminal's answers to a program's queries — CPR and DECXCPR, DA1/DA2, DSR status, DECRQM,
 * window reports, OSC/DCS replies — as every viewer's terminal sends them. A program must get one
 * answer, not one per viewer: a viewer that is not the one used last drops input made only of these.
 */
export const TERMINAL_ANSWERS =
  // eslint-disable-next-line no-control-regex
  /\x1b\[(?:\??\d+(?:;\d+)*R|[?>][\d;]*c|\d*n|\??[\d;]*\$y|\d+(?:;\d+)*t)|\x1b[P\]][^\x07\x1b]*(?:\x07|\x1b\\)/g;

/**
 * Auto-acks go out once this much of a session's output was handled since its last ack (half the
 * server's default low-water mark), and otherwise at most ACK_AFTER_MS after the first output not
 * yet acked: flow control sees a client that keeps up as keeping up, with one ack per 128 KiB
 * instead of one per frame (each ack costs the server a wakeup and a parse).
 */
export const ACK_EVERY_BYTES = 128 * 1024;
export const ACK_AFTER_MS = 20;
