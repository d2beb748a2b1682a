// The open client connections: each accepted socket becomes a Connection whose frames go to the
// method table, whose end is told to the sessions (once, in order: they let it go, then it is
// aborted), and which is pinged: one that has not answered the previous ping is terminated.
// Events from the bus go out here, one frame built per event for every connection subscribed.
import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import type { RawData, WebSocket } from 'ws';
import { GatewayError } from '../errors.js';
import type { BusEvent } from '../event-bus.js';
import { Connection, type Coalesce } from './connection.js';

export interface ConnectionsLogger {
  debug(object: object, message?: string): void;
  info(object: object, message?: string): void;
  warn(object: object, message?: string): void;
  error(object: object, message?: string): void;
}

export interface ConnectionsOptions {
  readonly outboundBudgetBytes: number;
  /** Per topic: how a slow client's held events of that topic merge (see Connection.sendEvent). */
  readonly coalesce: Readonly<Record<string, Coalesce>>;
  readonly pingIntervalMs: number;
  readonly logger: ConnectionsLogger;
  /** Handles one frame; never rejects for bad input. */
  readonly onFrame: (connection: Connection, raw: RawData, isBinary: boolean) => Promise<void> | undefined;
  /** The connection went, before it is aborted: its sessions let it go. */
  readonly onLeave: (connection: Connection) => void;
  /** The connection has gone (removed and aborted). */
  readonly onGone: (connection: Connection) => void;
}

export class Connections {
  readonly #open = new Map<string, Connection>();
  readonly #options: ConnectionsOptions;
  readonly #pinger: NodeJS.Timeout;

  constructor(options: ConnectionsOptions) {
    this.#options = options;
    this.#pinger = setInterval(() => this.#ping(), options.pingIntervalMs);
    this.#pinger.unref();
  }

  get size(): number {
    return this.#open.size;
  }

  values(): IterableIterator<Connection> {
    return this.#open.values();
  }

  /** `wire`, the connection under `socket`: small binary frames go out on it in one write. */
  accept(socket: WebSocket, wire?: Duplex): void {
    const { logger } = this.#options;
    const id = randomUUID();
    const connection = new Connection(
      id,
      socket,
      this.#options.outboundBudgetBytes,
      (bytes) =>
        logger.info(
          { connection: id, outboundBytes: bytes },
          'connection over its outbound budget: reading held',
        ),
      wire,
    );
    this.#open.set(id, connection);
    logger.debug({ connection: id }, 'client connected');
    const failed = (error: unknown): void => logger.error({ err: error }, 'dispatch failed');
    socket.on('message', (raw, isBinary) => {
      try {
        this.#options.onFrame(connection, raw, isBinary)?.catch(failed);
      } catch (error) {
        failed(error);
      }
    });
    socket.on('pong', () => (connection.awaitingPong = false));
    socket.on('error', (error) => logger.warn({ err: error, connection: id }, 'socket error'));
    socket.on('close', (code) => {
      this.#options.onLeave(connection);
      this.#open.delete(id);
      connection.dispose();
      connection.controller.abort(new GatewayError('internal_error', 'connection closed'));
      logger.debug({ connection: id, code }, 'client disconnected');
      this.#options.onGone(connection);
    });
  }

  /** An event of the bus to every connection subscribed to it (pty.* ones by session too). */
  deliver({ topic, sessionId, data }: BusEvent): void {
    let frame: string | undefined;
    const frameOnce = (): string =>
      (frame ??= JSON.stringify({ jsonrpc: '2.0', method: topic, params: data }));
    const coalesce = this.#options.coalesce[topic];
    const session = topic.startsWith('pty.') && sessionId !== '' ? sessionId : undefined;
    for (const connection of this.#open.values()) {
      if (!connection.wants(topic, session)) continue;
      connection.sendEvent(topic, data, frameOnce, coalesce);
    }
  }

  #ping(): void {
    for (const connection of this.#open.values()) {
      if (connection.awaitingPong) {
        this.#options.logger.info({ connection: connection.id }, 'no pong: closing dead connection');
        connection.socket.terminate();
        continue;
      }
      connection.awaitingPong = true;
      connection.socket.ping();
    }
  }

  /**
   * Says goodbye to every client (1001), and terminates those still there after `graceMs`;
   * answers what cancels the termination (once they are all gone).
   */
  closeAll(graceMs: number): () => void {
    clearInterval(this.#pinger);
    for (const connection of this.#open.values()) connection.socket.close(1001, 'server shutting down');
    const force = setTimeout(() => {
      for (const connection of this.#open.values()) connection.socket.terminate();
    }, graceMs);
    force.unref();
    return () => clearTimeout(force);
  }
}
