// The RPC method table and the dispatch of one frame: untrusted input is parsed here, once (UTF-8,
// JSON, the JSON-RPC envelope, the method's zod params), and every request gets exactly one answer —
// a result, or an error with a stable code — unless it is a notification. A handler's failure
// never closes the connection; a connection that does not read its answers gets `busy`.
import { PtyError } from '@aleph/pty';
import type { RawData } from 'ws';
import type { ZodType } from 'zod';
import { GatewayError } from '../errors.js';
import { ErrorCodes, formatZodIssue, requestSchema, type RpcErrorObject } from '../protocol.js';
import type { Connection } from './connection.js';
import { rawBuffer, rawText } from './frames.js';

export interface RequestContext {
  readonly connectionId: string;
  /** Aborted when the client disconnects. */
  readonly signal: AbortSignal;
  /** Only for the pty.ack bookkeeping and similar per-connection state. */
  readonly connection: Connection;
}

export type MethodHandler<P> = (params: P, context: RequestContext) => unknown;

export interface RpcLogger {
  error(object: object, message?: string): void;
}

/** Requests a connection may have running at once; past it, new ones are answered `busy`. */
export const MAX_IN_FLIGHT = 256;
/** A reply this large waits for no one: over the budget it is answered `busy` instead. */
export const LARGE_REPLY_CHARS = 64 * 1024;

type Id = string | number | null;

/** The error a client gets for what a handler threw; undefined for a bug (an internal error). */
export function rpcErrorFor(error: unknown): RpcErrorObject | undefined {
  if (error instanceof GatewayError) return error.toRpcError();
  if (error instanceof PtyError) {
    const code = error.code === 'invalid_size' ? 'invalid_params' : error.code;
    return { code: ErrorCodes[code], message: error.message, data: { code } };
  }
  return undefined;
}

function reply(
  connection: Connection,
  id: Id | undefined,
  body: { result: unknown } | { error: RpcErrorObject },
): void {
  if (id === undefined) return; // a notification gets no answer
  const frame = JSON.stringify({ jsonrpc: '2.0', id, ...body });
  if (frame.length > LARGE_REPLY_CHARS && connection.overBudget) {
    busy(connection, id);
    return;
  }
  connection.send(frame);
}

function busy(connection: Connection, id: Id): undefined {
  connection.send(
    JSON.stringify({
      jsonrpc: '2.0',
      id,
      error: {
        code: ErrorCodes.busy,
        message: `this connection has ${connection.outboundBytes} bytes sent and not read: read them, then retry`,
        data: { code: 'busy', outboundBytes: connection.outboundBytes },
      },
    }),
  );
  return undefined;
}

/** Answers an error (id null when the request had none); undefined, for `return fail(…)` where a value is due. */
function fail(
  connection: Connection,
  id: Id | undefined,
  code: keyof typeof ErrorCodes,
  message: string,
): undefined {
  reply(connection, id === undefined ? null : id, {
    error: { code: ErrorCodes[code], message, data: { code } },
  });
  return undefined;
}

/** Keystrokes sent without an id (a notification, a binary frame) hear of a failure: id null, the session named. */
function keystrokesRefused(connection: Connection, error: RpcErrorObject, sessionId: string): void {
  reply(connection, null, { error: { ...error, data: { ...error.data!, sessionId } } });
}

/** A frame's request, parsed: or the error it gets instead (already sent). */
type Parsed = { readonly id: Id | undefined; readonly method: string; readonly params: unknown } | undefined;

export class MethodTable {
  readonly #handlers = new Map<string, { params: ZodType; handler: MethodHandler<unknown> }>();
  readonly #logger: RpcLogger;
  /** Writes a binary input frame's keystrokes (what `pty.input` does). */
  readonly #writeInput: (sessionId: string, bytes: Buffer) => unknown;

  constructor(logger: RpcLogger, writeInput: (sessionId: string, bytes: Buffer) => unknown) {
    this.#logger = logger;
    this.#writeInput = writeInput;
  }

  register<P>(method: string, params: ZodType<P>, handler: MethodHandler<P>): void {
    if (this.#handlers.has(method)) throw new Error(`method ${method} is already registered`);
    this.#handlers.set(method, { params, handler: handler as MethodHandler<unknown> });
  }

  /**
   * Handles one frame of `connection`: answers it (unless a notification), never throws for bad
   * input. Keystrokes in a binary frame are written at once (no promise: a keystroke allocates as
   * little as it can); a request's promise settles once it has been answered.
   */
  dispatch(connection: Connection, raw: RawData, isBinary: boolean): Promise<void> | undefined {
    if (!isBinary) return this.#request(connection, raw);
    this.#binaryInput(connection, raw);
    return undefined;
  }

  async #request(connection: Connection, raw: RawData): Promise<void> {
    const request = this.#parse(connection, raw);
    if (request === undefined) return;
    const entry = this.#handlers.get(request.method);
    if (entry === undefined)
      return fail(connection, request.id, 'method_not_found', `unknown method "${request.method}"`);
    const params = entry.params.safeParse(request.params);
    if (!params.success) {
      const issue = params.error.issues[0];
      return fail(connection, request.id, 'invalid_params', issue ? formatZodIssue(issue) : 'invalid params');
    }
    connection.inFlight += 1;
    try {
      const context = { connectionId: connection.id, signal: connection.controller.signal, connection };
      const pending = entry.handler(params.data, context);
      // A synchronous handler's answer goes out at once, before the next frame of the same socket
      // read is handled: what that frame causes (an ack's catch-up frames) must follow the answer.
      const result: unknown = pending instanceof Promise ? await pending : pending;
      reply(connection, request.id, { result: result ?? {} });
    } catch (error) {
      this.#failed(connection, request, params.data, error);
    } finally {
      connection.inFlight -= 1;
    }
  }

  /** UTF-8, JSON, one JSON-RPC 2.0 request, and room for it on this connection. */
  #parse(connection: Connection, raw: RawData): Parsed {
    const text = rawText(raw);
    if (text === undefined)
      return fail(connection, null, 'parse_error', 'not UTF-8: a text frame must be UTF-8 JSON');
    let message: unknown;
    try {
      message = JSON.parse(text);
    } catch (error) {
      return fail(connection, null, 'parse_error', `not JSON: ${(error as Error).message}`);
    }
    if (Array.isArray(message))
      return fail(connection, null, 'invalid_request', 'batch requests are not supported');
    const rawId = (message as { id?: unknown } | null)?.id;
    const request = requestSchema.safeParse(message);
    if (!request.success) {
      const issue = request.error.issues[0];
      const id = typeof rawId === 'string' || typeof rawId === 'number' ? rawId : null;
      const why = issue ? formatZodIssue(issue, 'request') : 'invalid';
      return fail(connection, id, 'invalid_request', `not a JSON-RPC 2.0 request: ${why}`);
    }
    const { id, method, params } = request.data;
    // A client that does not read its answers gets no more work done for it (notifications, such
    // as acks, still count: they only relieve the server).
    if (id !== undefined && (connection.overBudget || connection.inFlight >= MAX_IN_FLIGHT))
      return busy(connection, id);
    return { id, method, params };
  }

  #failed(connection: Connection, request: NonNullable<Parsed>, params: unknown, error: unknown): void {
    const rpcError = rpcErrorFor(error);
    if (rpcError !== undefined) {
      if (request.id === undefined && request.method === 'pty.input')
        return keystrokesRefused(connection, rpcError, (params as { sessionId: string }).sessionId);
      return reply(connection, request.id, { error: rpcError });
    }
    this.#logger.error({ err: error, method: request.method }, 'handler failed');
    const message = `internal error in ${request.method}: ${(error as Error).message ?? String(error)}`;
    fail(connection, request.id, 'internal_error', message);
  }

  /** Keystrokes in a binary frame: a `pty.input` notification (PROTOCOL.md, "Binary frames"). */
  #binaryInput(connection: Connection, raw: RawData): void {
    if (!connection.binary)
      return fail(
        connection,
        null,
        'invalid_request',
        'binary frames are not supported before pty.binary: send JSON-RPC as text frames',
      );
    const frame = connection.input.read(rawBuffer(raw));
    if (typeof frame === 'string') return fail(connection, null, 'invalid_request', frame);
    const refused = (error: unknown): void => {
      const rpcError = rpcErrorFor(error);
      if (rpcError === undefined) throw error;
      keystrokesRefused(connection, rpcError, frame.sessionId);
    };
    try {
      const written = this.#writeInput(frame.sessionId, frame.data);
      // Another node's session (cluster mode): its answer comes later.
      if (written instanceof Promise)
        written.catch((error: unknown) => {
          try {
            refused(error);
          } catch (bug) {
            this.#logger.error({ err: bug }, 'forwarded input failed');
          }
        });
    } catch (error) {
      refused(error);
    }
  }
}
