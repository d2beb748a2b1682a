// The gateway: one http.Server, a WebSocket upgrade on its own port, JSON-RPC 2.0 dispatch with
// zod-validated params, an event bus of topics, and the pty.* methods. Bad input gets a JSON-RPC
// error with a stable code and the connection stays usable; nothing a client sends can crash it.
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { getPtyManager, PtyError, type PtyManager, type PtySession } from '@aleph/pty';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { ZodType } from 'zod';
import { GatewayError } from './errors.js';
import { InMemoryEventBus, type EventBus } from './event-bus.js';
import {
  hostAllowed,
  isLoopback,
  offeredProtocols,
  originAllowed,
  presentedToken,
  selectProtocol,
  tokensEqual,
} from './internal/auth.js';
import { Connection } from './internal/connection.js';
import { readBinaryFrame } from './internal/binary-frames.js';
import { rawBuffer, rawText } from './internal/frames.js';
import { staticFiles } from './internal/static-files.js';
import { ModeTracker } from './internal/modes.js';
import { SizeLog } from './internal/size-log.js';
import { OutputPump, type FlowLimits } from './internal/output-pump.js';
import { registerPtyMethods } from './pty-methods.js';
import {
  ErrorCodes,
  formatZodIssue,
  PROTOCOL_VERSION,
  requestSchema,
  WEBSOCKET_PATH,
  type RpcErrorObject,
} from './protocol.js';

export interface GatewayLogger {
  debug(object: object, message?: string): void;
  info(object: object, message?: string): void;
  warn(object: object, message?: string): void;
  error(object: object, message?: string): void;
}

const silent: GatewayLogger = { debug() {}, info() {}, warn() {}, error() {} };

export interface GatewayOptions {
  /** Default 127.0.0.1. */
  readonly host?: string;
  /** Default 0: any free port. */
  readonly port?: number;
  /** Required. Clients present it as `Authorization: Bearer <token>` or the token subprotocol. */
  readonly token: string;
  /**
   * A folder served at `/` (the web console's build), with cache headers and a CSP that allows no
   * inline script and no other origin; `/ws` and `/healthz` keep their meaning.
   */
  readonly static?: { readonly root: string };
  /** Origins a browser may connect from. Default: same-origin only. */
  readonly allowedOrigins?: readonly string[];
  /**
   * Host names or IPs (beside `localhost`, loopback IPs and the bound address) a request may be
   * addressed to, e.g. the machine's name when listening beyond loopback. Anything else is refused
   * (DNS rebinding). Bound to a wildcard (`0.0.0.0`, `::`), every IP literal is this server.
   */
  readonly allowedHosts?: readonly string[];
  readonly ptyManager?: PtyManager;
  /**
   * Where `publish` and the sessions' `pty.exit` go, and where the connections' events come from.
   * Default: a new `InMemoryEventBus`. The gateway does not close a bus it was given.
   */
  readonly bus?: EventBus;
  readonly logger?: GatewayLogger;
  /** Largest frame a client may send; a bigger one closes that connection with 1009. Default 1 MiB. */
  readonly maxPayloadBytes?: number;
  /** Input bytes a session may have waiting for its program before `pty.input` answers `busy`. */
  readonly inputQueueBytes?: number;
  readonly pingIntervalMs?: number;
  readonly flow?: Partial<FlowLimits>;
  /**
   * Outbound bytes a connection may have unread (replies, replay, events) before it reads no more
   * requests and answers `busy`; at four times this it is closed with 4008. Default 4 MiB.
   */
  readonly outboundBudgetBytes?: number;
}

/** Requests a connection may have running at once; past it, new ones are answered `busy`. */
const MAX_IN_FLIGHT = 256;
/** A reply this large waits for no one: over the budget it is answered `busy` instead. */
const LARGE_REPLY_CHARS = 64 * 1024;

export interface RequestContext {
  readonly connectionId: string;
  /** Aborted when the client disconnects. */
  readonly signal: AbortSignal;
  /** Only for the pty.ack bookkeeping and similar per-connection state. */
  readonly connection: Connection;
}

export type MethodHandler<P> = (params: P, context: RequestContext) => unknown;

export interface Gateway {
  /** The ws:// URL clients connect to. */
  readonly url: string;
  readonly port: number;
  readonly host: string;
  readonly httpServer: Server;
  readonly ptyManager: PtyManager;
  readonly bus: EventBus;
  register<P>(method: string, params: ZodType<P>, handler: MethodHandler<P>): void;
  /** Publishes on the bus, for the session `data.sessionId` names (if a string; else ''). */
  publish(topic: string, data: unknown): void;
  /** Number of open client connections. */
  readonly connectionCount: number;
  close(): Promise<void>;
}

export const DEFAULT_FLOW: FlowLimits = {
  batchMs: 4,
  // V8 allocates strings over 128 KiB in its large-object space, 20–30× slower to create and
  // parse (measured here: base64 of 96 KiB, 116 MB/s; of 64 KiB, 3000 MB/s): 64 KiB of output
  // is 87 KiB of base64, so neither the server's frame nor the client's JSON.parse crosses it.
  maxBatchBytes: 64 * 1024,
  highWaterBytes: 1024 * 1024,
  lowWaterBytes: 256 * 1024,
  detachGraceMs: 60_000,
};

function rpcErrorFor(error: unknown): RpcErrorObject | undefined {
  if (error instanceof GatewayError) return error.toRpcError();
  if (error instanceof PtyError) {
    const code = error.code === 'invalid_size' ? 'invalid_params' : error.code;
    return { code: ErrorCodes[code], message: error.message, data: { code } };
  }
  return undefined;
}

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const host = options.host ?? '127.0.0.1';
  if (typeof options.token !== 'string' || options.token.length === 0) {
    throw new GatewayError(
      'invalid_params',
      isLoopback(host)
        ? 'a token is required'
        : `refusing to listen on non-loopback address ${host} without a token`,
    );
  }
  const token = options.token;
  const allowedHosts = [...(options.allowedHosts ?? []), host]; // the bound name, if a name
  const logger = options.logger ?? silent;
  const ptyManager = options.ptyManager ?? getPtyManager();
  const bus = options.bus ?? new InMemoryEventBus();
  const flow: FlowLimits = { ...DEFAULT_FLOW, ...options.flow };
  const connections = new Map<string, Connection>();
  const handlers = new Map<string, { params: ZodType; handler: MethodHandler<unknown> }>();
  const pumps = new Map<string, OutputPump>();
  const modes = new Map<string, ModeTracker>();
  const sizes = new Map<string, SizeLog>();
  /** A session any open connection is subscribed to the output of is watched: never idle (TTL). */
  const watches = new Map<string, Disposable>();
  let closing = false;

  const serveStatic = options.static === undefined ? undefined : staticFiles(options.static.root);
  const httpServer = createServer((request, response) => {
    if (!hostAllowed(request, allowedHosts, host)) {
      response.writeHead(421, { 'content-type': 'text/plain' }).end('misdirected request: unknown host\n');
      return;
    }
    if (request.url === '/healthz') {
      response.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}');
      return;
    }
    const notFound = (): void =>
      void response.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    if (serveStatic === undefined) return notFound();
    // The same origin rules as the socket: a page elsewhere cannot load these.
    if (!originAllowed(request, options.allowedOrigins)) {
      response.writeHead(403, { 'content-type': 'text/plain' }).end('forbidden\n');
      return;
    }
    serveStatic(request, response).then(
      (served) => served || notFound(),
      () => response.destroy(),
    );
  });
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload: options.maxPayloadBytes ?? 1024 * 1024,
    perMessageDeflate: false,
    // A text frame that is not UTF-8 gets a parse_error like any other bad frame (dispatch checks
    // it), instead of ws closing the connection with 1007.
    skipUTF8Validation: true,
    handleProtocols: selectProtocol,
  });

  const refuse = (socket: Duplex, status: number, reason: string): void => {
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${reason.length + 1}\r\n\r\n${reason}\n`,
    );
  };

  httpServer.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) => {
    const path = (request.url ?? '').split('?')[0];
    if (closing) return refuse(socket, 503, 'Service Unavailable');
    if (path !== WEBSOCKET_PATH) return refuse(socket, 404, 'Not Found');
    if (!hostAllowed(request, allowedHosts, host)) {
      logger.warn({ host: request.headers.host }, 'refused upgrade: host not allowed');
      return refuse(socket, 421, 'Misdirected Request');
    }
    if (!originAllowed(request, options.allowedOrigins)) {
      logger.warn({ origin: request.headers.origin }, 'refused upgrade: origin not allowed');
      return refuse(socket, 403, 'Forbidden');
    }
    const presented = presentedToken(request);
    if (presented === undefined || !tokensEqual(presented, token)) {
      logger.warn({ remote: request.socket.remoteAddress }, 'refused upgrade: missing or wrong token');
      return refuse(socket, 401, 'Unauthorized');
    }
    // Without a subprotocol the client could not tell this is aleph.v1 (ws clients then fail
    // "Server sent no subprotocol" after the upgrade): refuse it up front, saying what to offer.
    if (!offeredProtocols(request).includes(PROTOCOL_VERSION))
      return refuse(socket, 400, `Bad Request: offer the ${PROTOCOL_VERSION} subprotocol`);
    wss.handleUpgrade(request, socket, head, (ws) => accept(ws));
  });

  /** Takes or lets go of each session's watch, after a subscription or a connection changed. */
  const syncWatches = (): void => {
    for (const id of pumps.keys()) {
      const session = ptyManager.get(id);
      const viewed =
        session?.exitInfo === undefined &&
        [...connections.values()].some((connection) => connection.open && connection.wants('pty.output', id));
      const watch = watches.get(id);
      if (viewed && watch === undefined && session !== undefined) watches.set(id, session.watch());
      if (!viewed && watch !== undefined) {
        watch[Symbol.dispose]();
        watches.delete(id);
      }
    }
  };

  const attach = (session: PtySession): void => {
    if (pumps.has(session.id)) return;
    const pump = new OutputPump(session, () => connections.values(), flow);
    pumps.set(session.id, pump);
    // Every session's modes from its first byte (a session found at start: from where it is now).
    const tracker = new ModeTracker(session.scrollback.end);
    modes.set(session.id, tracker);
    const read = (from: number, to: number): Uint8Array => {
      const { offset, data } = session.replay(from);
      return Buffer.from(data.subarray(0, Math.max(0, to - offset)));
    };
    const sizeLog = new SizeLog(session.cols, session.rows, session.scrollback.end);
    sizes.set(session.id, sizeLog);
    session.onData((chunk, offset) => {
      sizeLog.observe(session.cols, session.rows, offset, session.scrollback.start);
      tracker.feed(chunk, session.scrollback.start, read);
    });
    syncWatches(); // a connection subscribed to every session's output watches this one too
    session.onExit((info) => {
      pump.ended(); // the last output goes out before the exit event
      gateway.publish('pty.exit', { sessionId: session.id, ...info });
    });
  };
  // An ended session is kept a while (its tail, its exit): its pump serves pty.follow until then.
  let dropScreens: (sessionId?: string) => void = () => {};
  let writeInput: (sessionId: string, bytes: Buffer) => number = () => 0;
  const forget = (sessionId: string): void => {
    watches.get(sessionId)?.[Symbol.dispose]();
    watches.delete(sessionId);
    pumps.get(sessionId)?.dispose();
    pumps.delete(sessionId);
    modes.delete(sessionId);
    sizes.delete(sessionId);
    dropScreens(sessionId);
  };
  ptyManager.on('spawn', attach);
  ptyManager.on('forget', forget);
  for (const session of ptyManager.list()) attach(session);

  const reply = (
    connection: Connection,
    id: string | number | null | undefined,
    body: { result: unknown } | { error: RpcErrorObject },
  ): void => {
    if (id === undefined) return; // a notification gets no answer
    const frame = JSON.stringify({ jsonrpc: '2.0', id, ...body });
    if (frame.length > LARGE_REPLY_CHARS && connection.overBudget) return busy(connection, id);
    connection.send(frame);
  };
  const busy = (connection: Connection, id: string | number | null): void =>
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
  const fail = (
    connection: Connection,
    id: string | number | null | undefined,
    code: keyof typeof ErrorCodes,
    message: string,
  ): void =>
    reply(connection, id === undefined ? null : id, {
      error: { code: ErrorCodes[code], message, data: { code } },
    });

  /** Keystrokes sent without an id (a notification, a binary frame) hear of a failure: id null, the session named. */
  const keystrokesRefused = (connection: Connection, error: RpcErrorObject, sessionId: string): void =>
    reply(connection, null, { error: { ...error, data: { ...error.data!, sessionId } } });

  /** Keystrokes in a binary frame: a `pty.input` notification (PROTOCOL.md, "Binary frames"). */
  function binaryInput(connection: Connection, raw: RawData): void {
    if (!connection.binary)
      return fail(
        connection,
        null,
        'invalid_request',
        'binary frames are not supported before pty.binary: send JSON-RPC as text frames',
      );
    const frame = readBinaryFrame(rawBuffer(raw));
    if (typeof frame === 'string') return fail(connection, null, 'invalid_request', frame);
    if (frame.kind !== 'input')
      return fail(connection, null, 'invalid_request', 'a client sends input frames (kind 2) only');
    try {
      writeInput(frame.sessionId, frame.data);
    } catch (error) {
      const rpcError = rpcErrorFor(error);
      if (rpcError === undefined) throw error;
      keystrokesRefused(connection, rpcError, frame.sessionId);
    }
  }

  async function dispatch(connection: Connection, raw: RawData, isBinary: boolean): Promise<void> {
    if (isBinary) return binaryInput(connection, raw);
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
    const id = typeof rawId === 'string' || typeof rawId === 'number' ? rawId : null;
    const request = requestSchema.safeParse(message);
    if (!request.success) {
      const issue = request.error.issues[0];
      return fail(
        connection,
        id,
        'invalid_request',
        `not a JSON-RPC 2.0 request: ${issue ? formatZodIssue(issue, 'request') : 'invalid'}`,
      );
    }
    const { method } = request.data;
    // A client that does not read its answers gets no more work done for it (notifications, such
    // as acks, still count: they only relieve the server).
    if (request.data.id !== undefined && (connection.overBudget || connection.inFlight >= MAX_IN_FLIGHT))
      return busy(connection, request.data.id);
    const entry = handlers.get(method);
    if (entry === undefined)
      return fail(connection, request.data.id, 'method_not_found', `unknown method "${method}"`);
    const params = entry.params.safeParse(request.data.params);
    if (!params.success) {
      const issue = params.error.issues[0];
      return fail(
        connection,
        request.data.id,
        'invalid_params',
        issue ? formatZodIssue(issue) : 'invalid params',
      );
    }
    connection.inFlight += 1;
    try {
      const pending = entry.handler(params.data, {
        connectionId: connection.id,
        signal: connection.controller.signal,
        connection,
      });
      // A synchronous handler's answer goes out at once, before the next frame of the same socket
      // read is handled: what that frame causes (an ack's catch-up frames) must follow the answer.
      const result: unknown = pending instanceof Promise ? await pending : pending;
      reply(connection, request.data.id, { result: result ?? {} });
    } catch (error) {
      const rpcError = rpcErrorFor(error);
      if (rpcError !== undefined) {
        if (request.data.id === undefined && method === 'pty.input')
          return keystrokesRefused(connection, rpcError, (params.data as { sessionId: string }).sessionId);
        return reply(connection, request.data.id, { error: rpcError });
      }
      logger.error({ err: error, method }, 'handler failed');
      fail(
        connection,
        request.data.id,
        'internal_error',
        `internal error in ${method}: ${(error as Error).message ?? String(error)}`,
      );
    } finally {
      connection.inFlight -= 1;
    }
  }

  function accept(ws: WebSocket): void {
    const id = randomUUID();
    const connection = new Connection(id, ws, options.outboundBudgetBytes ?? 4 * 1024 * 1024, (bytes) =>
      logger.info(
        { connection: id, outboundBytes: bytes },
        'connection over its outbound budget: reading held',
      ),
    );
    connections.set(connection.id, connection);
    logger.debug({ connection: connection.id }, 'client connected');
    ws.on('message', (raw, isBinary) => {
      dispatch(connection, raw, isBinary).catch((error: unknown) =>
        logger.error({ err: error }, 'dispatch failed'),
      );
    });
    ws.on('pong', () => (connection.awaitingPong = false));
    ws.on('error', (error) => logger.warn({ err: error, connection: connection.id }, 'socket error'));
    ws.on('close', (code) => {
      for (const pump of pumps.values()) pump.leave(connection);
      connections.delete(connection.id);
      connection.dispose();
      connection.controller.abort(new GatewayError('internal_error', 'connection closed'));
      logger.debug({ connection: connection.id, code }, 'client disconnected');
      for (const pump of pumps.values()) pump.checkFlow();
      syncWatches(); // its sessions' idle TTL runs again from now, unless another viewer is there
    });
  }

  const pinger = setInterval(() => {
    for (const connection of connections.values()) {
      if (connection.awaitingPong) {
        logger.info({ connection: connection.id }, 'no pong: closing dead connection');
        connection.socket.terminate();
        continue;
      }
      connection.awaitingPong = true;
      connection.socket.ping();
    }
  }, options.pingIntervalMs ?? 30_000);
  pinger.unref();

  /** Every event of the bus to the connections subscribed to it (pty.* ones by session too). */
  const delivery = bus.subscribe({ topics: ['*'] }, ({ topic, sessionId, data }) => {
    let frame: string | undefined;
    const session = topic.startsWith('pty.') && sessionId !== '' ? sessionId : undefined;
    for (const connection of connections.values()) {
      if (!connection.wants(topic, session)) continue;
      frame ??= JSON.stringify({ jsonrpc: '2.0', method: topic, params: data });
      connection.send(frame);
    }
  });

  const gateway: Gateway = {
    url: '',
    port: 0,
    host,
    httpServer,
    ptyManager,
    bus,
    get connectionCount() {
      return connections.size;
    },
    register<P>(method: string, params: ZodType<P>, handler: MethodHandler<P>): void {
      if (handlers.has(method)) throw new Error(`method ${method} is already registered`);
      handlers.set(method, { params, handler: handler as MethodHandler<unknown> });
    },
    publish(topic: string, data: unknown): void {
      const sessionId = (data as { sessionId?: unknown } | null)?.sessionId;
      bus
        .publish(topic, typeof sessionId === 'string' ? sessionId : '', data)
        .catch((error: unknown) => logger.error({ err: error, topic }, 'publish failed'));
    },
    async close(): Promise<void> {
      if (closing) return;
      closing = true;
      clearInterval(pinger);
      delivery.unsubscribe();
      ptyManager.off('spawn', attach);
      ptyManager.off('forget', forget);
      for (const pump of pumps.values()) pump.dispose();
      dropScreens();
      await ptyManager.closeAll();
      for (const connection of connections.values()) connection.socket.close(1001, 'server shutting down');
      await new Promise<void>((resolve) => {
        const force = setTimeout(() => {
          for (const connection of connections.values()) connection.socket.terminate();
        }, 1000);
        force.unref();
        wss.close(() => {
          httpServer.close(() => {
            clearTimeout(force);
            resolve();
          });
          httpServer.closeAllConnections();
        });
      });
    },
  };

  ({ dropScreens, writeInput } = registerPtyMethods(gateway, {
    ptyManager,
    inputQueueBytes: options.inputQueueBytes ?? 256 * 1024,
    pumpFor: (sessionId) => pumps.get(sessionId),
    modesFor: (sessionId) => modes.get(sessionId),
    sizesFor: (sessionId) => sizes.get(sessionId),
    subscriptionsChanged: syncWatches,
  }));

  await new Promise<void>((resolve, reject) => {
    httpServer.once('error', reject);
    httpServer.listen(options.port ?? 0, host, () => {
      httpServer.off('error', reject);
      resolve();
    });
  });
  const address = httpServer.address() as AddressInfo;
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  Object.assign(gateway, { port: address.port, url: `ws://${urlHost}:${address.port}${WEBSOCKET_PATH}` });
  logger.info({ url: gateway.url }, 'gateway listening');
  return gateway;
}
