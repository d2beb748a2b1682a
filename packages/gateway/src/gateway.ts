// The gateway: pseudo-terminals over one WebSocket, composed of named parts —
// - the HTTP front (internal/http-front.ts): `/healthz`, the static folder, and the checked upgrade;
// - the connections (internal/connections.ts): each client socket, its pings, its end;
// - the session registry (internal/session-registry.ts): one record per session (pump, modes,
//   sizes, watch, screen), ended in one place;
// - the event bus (event-bus.ts): where events go and where connections' events come from;
// - the method table (internal/rpc.ts), with pty.* and events.* (pty-methods.ts) and what the
//   server registers beside them.
// Bad input gets a JSON-RPC error with a stable code and the connection stays usable; nothing a
// client sends can crash it.
import type { Server } from 'node:http';
import { getPtyManager, type PtyManager, type PtySession } from '@aleph/pty';
import type { ZodType } from 'zod';
import { GatewayError } from './errors.js';
import { InMemoryEventBus, type EventBus, type EventSubscription } from './event-bus.js';
import { isLoopback } from './internal/auth.js';
import { Connections } from './internal/connections.js';
import { HttpFront } from './internal/http-front.js';
import type { FlowLimits } from './internal/output-pump.js';
import { MethodTable, type MethodHandler } from './internal/rpc.js';
import { SessionRegistry } from './internal/session-registry.js';
import { WEBSOCKET_PATH } from './protocol.js';
import { formatZodIssue, methods, type MethodParams } from './protocol.js';
import { localList, registerPtyMethods, sessionMethods, type SessionMethods } from './pty-methods.js';
import type { ForwardedMethod, RemoteTerminals } from './remote.js';
import { remoteViewer } from './internal/remote-viewer.js';

export type { MethodHandler, RequestContext } from './internal/rpc.js';

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
   * requests and answers `busy`; with four times this waiting behind the frame it is reading (one
   * frame, however large, is not held against a client that reads it) it is closed with 4008.
   * Default 4 MiB.
   */
  readonly outboundBudgetBytes?: number;
  /**
   * More of the server's state for `/healthz`, beside `"ok": true` (e.g. a cluster node's health).
   * Called per request; it must be cheap and never throw. `ok` stays true: the gateway answers.
   */
  readonly health?: () => Record<string, unknown>;
  /**
   * Per event topic, how two of its events merge into one for a client that reads slowly: while a
   * client has a quarter of its outbound budget unread, its events wait (in order) and one of such
   * a topic merges into the one held before it when this answers a value (undefined: keep both).
   */
  readonly coalesce?: Readonly<Record<string, (held: unknown, next: unknown) => unknown>>;
  /**
   * What `pty.list` shows as a session's `command`; undefined (or no function): its program and
   * arguments joined by spaces. For a server whose programs run wrapped (a sandbox's long command
   * line around them): the short form a person reads, which also keeps the answer small.
   */
  readonly commandOf?: (session: PtySession) => string | undefined;
  /**
   * The terminals of other nodes (cluster mode): a session method on a session this node does not
   * have goes there, `pty.list` adds theirs, and a connection follows theirs as its own.
   */
  readonly remote?: RemoteTerminals;
}

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
  /**
   * Runs a session method (or `pty.list`, or `pty.spawn` here) on this node's own sessions, for
   * another node (cluster mode): params are checked as a client's are; the errors are the ones a
   * client would get.
   */
  callLocal(method: ForwardedMethod | 'pty.list' | 'pty.spawn', params: unknown): Promise<unknown>;
  close(): Promise<void>;
}

/** Defaults of GatewayOptions PROTOCOL.md states. */
export const DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024;
export const DEFAULT_OUTBOUND_BUDGET_BYTES = 4 * 1024 * 1024;
export const DEFAULT_PING_INTERVAL_MS = 30_000;
export const DEFAULT_INPUT_QUEUE_BYTES = 256 * 1024;

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

/** The parts of a running gateway, made by createGateway. */
interface Parts {
  readonly host: string;
  readonly ptyManager: PtyManager;
  readonly bus: EventBus;
  readonly front: HttpFront;
  readonly connections: Connections;
  readonly registry: SessionRegistry;
  readonly table: MethodTable;
  readonly delivery: EventSubscription;
  readonly logger: GatewayLogger;
  readonly local: SessionMethods;
  readonly commandOf: GatewayOptions['commandOf'];
}

class RunningGateway implements Gateway {
  readonly url: string;
  readonly port: number;
  readonly #parts: Parts;
  #closed: Promise<void> | undefined;

  constructor(parts: Parts, port: number, url: string) {
    this.#parts = parts;
    this.port = port;
    this.url = url;
  }

  get host(): string {
    return this.#parts.host;
  }
  get httpServer(): Server {
    return this.#parts.front.server;
  }
  get ptyManager(): PtyManager {
    return this.#parts.ptyManager;
  }
  get bus(): EventBus {
    return this.#parts.bus;
  }
  get connectionCount(): number {
    return this.#parts.connections.size;
  }

  register<P>(method: string, params: ZodType<P>, handler: MethodHandler<P>): void {
    this.#parts.table.register(method, params, handler);
  }

  publish(topic: string, data: unknown): void {
    publishOn(this.#parts, topic, data);
  }

  async callLocal(method: ForwardedMethod | 'pty.list' | 'pty.spawn', params: unknown): Promise<unknown> {
    const checked = methods[method].params.safeParse(params);
    if (!checked.success) {
      const issue = checked.error.issues[0];
      throw new GatewayError('invalid_params', issue ? formatZodIssue(issue) : 'invalid params');
    }
    if (method === 'pty.list') return localList(this.#parts.ptyManager, this.#parts.commandOf);
    if (method === 'pty.spawn') {
      const { node: _node, ...spawn } = checked.data as MethodParams<'pty.spawn'>;
      const session = await this.#parts.ptyManager.start(spawn);
      return { sessionId: session.id, pid: session.pid };
    }
    const run = this.#parts.local[method] as (params: unknown) => unknown;
    return await run(checked.data);
  }

  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async #close(): Promise<void> {
    const { front, delivery, registry, ptyManager, connections } = this.#parts;
    front.stopAccepting();
    registry.close();
    await ptyManager.closeAll(); // their exits still reach the clients
    delivery.unsubscribe();
    const cancel = connections.closeAll(1000);
    await front.close();
    cancel();
  }
}

function publishOn({ bus, logger }: Pick<Parts, 'bus' | 'logger'>, topic: string, data: unknown): void {
  const sessionId = (data as { sessionId?: unknown } | null)?.sessionId;
  bus
    .publish(topic, typeof sessionId === 'string' ? sessionId : '', data)
    .catch((error: unknown) => logger.error({ err: error, topic }, 'publish failed'));
}

/** The token, checked before anything is made: none means no listening at all. */
function requireToken(options: GatewayOptions, host: string): string {
  if (typeof options.token === 'string' && options.token.length > 0) return options.token;
  throw new GatewayError(
    'invalid_params',
    isLoopback(host)
      ? 'a token is required'
      : `refusing to listen on non-loopback address ${host} without a token`,
  );
}

/** Makes the parts and wires them; the sessions' events go to the bus, the bus's to the connections. */
function makeParts(options: GatewayOptions, host: string, token: string): Parts {
  const logger = options.logger ?? silent;
  const ptyManager = options.ptyManager ?? getPtyManager();
  const bus = options.bus ?? new InMemoryEventBus();
  // Each part is handed what it calls later (the parts it refers to exist before any socket does).
  const connections: Connections = new Connections({
    outboundBudgetBytes: options.outboundBudgetBytes ?? DEFAULT_OUTBOUND_BUDGET_BYTES,
    coalesce: options.coalesce ?? {},
    pingIntervalMs: options.pingIntervalMs ?? DEFAULT_PING_INTERVAL_MS,
    logger,
    onFrame: (connection, raw, isBinary) => table.dispatch(connection, raw, isBinary),
    onLeave: (connection) => {
      registry.left(connection);
      options.remote?.sync(remoteViewer(connection));
    },
    onGone: () => registry.checkFlow(),
  });
  const registry = new SessionRegistry({
    ptyManager,
    connections: () => connections.values(),
    flow: { ...DEFAULT_FLOW, ...options.flow },
    inputQueueBytes: options.inputQueueBytes ?? DEFAULT_INPUT_QUEUE_BYTES,
    onExit: (session, info) => publishOn({ bus, logger }, 'pty.exit', { sessionId: session.id, ...info }),
  });
  const { remote, commandOf } = options;
  const table = new MethodTable(logger, (sessionId, bytes) =>
    remote === undefined || ptyManager.get(sessionId) !== undefined
      ? registry.write(sessionId, bytes)
      : remote.call('pty.input', { sessionId, data: bytes.toString('base64') }),
  );
  registerPtyMethods(table, ptyManager, registry, { commandOf, remote });
  const front = new HttpFront({
    host,
    token,
    allowedHosts: [...(options.allowedHosts ?? []), host], // the bound name, if a name
    allowedOrigins: options.allowedOrigins,
    staticRoot: options.static?.root,
    maxPayloadBytes: options.maxPayloadBytes ?? DEFAULT_MAX_PAYLOAD_BYTES,
    logger,
    ...(options.health === undefined ? {} : { health: options.health }),
    onSocket: (socket, wire) => connections.accept(socket, wire),
  });
  const delivery = bus.subscribe({ topics: ['*'] }, (event) => connections.deliver(event));
  const local = sessionMethods(ptyManager, registry);
  return { host, ptyManager, bus, front, connections, registry, table, delivery, logger, local, commandOf };
}

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const host = options.host ?? '127.0.0.1';
  const token = requireToken(options, host);
  const parts = makeParts(options, host, token);
  let address;
  try {
    address = await parts.front.listen(options.port ?? 0);
  } catch (error) {
    parts.delivery.unsubscribe();
    parts.registry.close();
    parts.connections.closeAll(0)();
    throw error;
  }
  const urlHost = address.family === 'IPv6' ? `[${address.address}]` : address.address;
  const gateway = new RunningGateway(parts, address.port, `ws://${urlHost}:${address.port}${WEBSOCKET_PATH}`);
  parts.logger.info({ url: gateway.url }, 'gateway listening');
  return gateway;
}
