// The gateway's front door: one http.Server that answers `/healthz` and the static folder, and
// upgrades `/ws` to a WebSocket only for a request that passes every check — the server not
// closing, a Host that names it, an allowed Origin, the token, the `aleph.v1` subprotocol. What fails
// a check is refused with a status that says which, before any WebSocket exists.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { PROTOCOL_VERSION, WEBSOCKET_PATH } from '../protocol.js';
import {
  hostAllowed,
  offeredProtocols,
  originAllowed,
  presentedToken,
  selectProtocol,
  tokensEqual,
} from './auth.js';
import { staticFiles } from './static-files.js';

export interface HttpFrontOptions {
  readonly host: string;
  readonly token: string;
  /** Host names a request may name beside loopback and the bound address. */
  readonly allowedHosts: readonly string[];
  readonly allowedOrigins: readonly string[] | undefined;
  readonly staticRoot: string | undefined;
  readonly maxPayloadBytes: number;
  readonly logger: { warn(object: object, message?: string): void };
  /** More fields for `/healthz`. */
  readonly health?: () => Record<string, unknown>;
  /** A socket that passed every check, and the connection it was upgraded from (ws writes to it). */
  readonly onSocket: (socket: WebSocket, wire: Duplex) => void;
}

function refuse(socket: Duplex, status: number, reason: string): void {
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: ${reason.length + 1}\r\n\r\n${reason}\n`,
  );
}

export class HttpFront {
  readonly server: Server;
  readonly #options: HttpFrontOptions;
  readonly #wss: WebSocketServer;
  readonly #serveStatic: ReturnType<typeof staticFiles> | undefined;
  #closing = false;

  constructor(options: HttpFrontOptions) {
    this.#options = options;
    this.#serveStatic = options.staticRoot === undefined ? undefined : staticFiles(options.staticRoot);
    this.server = createServer((request, response) => this.#request(request, response));
    this.#wss = new WebSocketServer({
      noServer: true,
      maxPayload: options.maxPayloadBytes,
      perMessageDeflate: false,
      // A text frame that is not UTF-8 gets a parse_error like any other bad frame (dispatch checks
      // it), instead of ws closing the connection with 1007.
      skipUTF8Validation: true,
      handleProtocols: selectProtocol,
    });
    this.server.on('upgrade', (request: IncomingMessage, socket: Duplex, head: Buffer) =>
      this.#upgrade(request, socket, head),
    );
  }

  #request(request: IncomingMessage, response: ServerResponse): void {
    const { host, allowedHosts, allowedOrigins } = this.#options;
    if (!hostAllowed(request, allowedHosts, host)) {
      response.writeHead(421, { 'content-type': 'text/plain' }).end('misdirected request: unknown host\n');
      return;
    }
    if (request.url === '/healthz') {
      const more = this.#options.health?.() ?? {};
      response
        .writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' })
        .end(JSON.stringify({ ...more, ok: true }));
      return;
    }
    const notFound = (): void =>
      void response.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
    if (this.#serveStatic === undefined) return notFound();
    // The same origin rules as the socket: a page elsewhere cannot load these.
    if (!originAllowed(request, allowedOrigins)) {
      response.writeHead(403, { 'content-type': 'text/plain' }).end('forbidden\n');
      return;
    }
    this.#serveStatic(request, response).then(
      (served) => served || notFound(),
      () => response.destroy(),
    );
  }

  #upgrade(request: IncomingMessage, socket: Duplex, head: Buffer): void {
    const { host, allowedHosts, allowedOrigins, token, logger } = this.#options;
    const path = (request.url ?? '').split('?')[0];
    if (this.#closing) return refuse(socket, 503, 'Service Unavailable');
    if (path !== WEBSOCKET_PATH) return refuse(socket, 404, 'Not Found');
    if (!hostAllowed(request, allowedHosts, host)) {
      logger.warn({ host: request.headers.host }, 'refused upgrade: host not allowed');
      return refuse(socket, 421, 'Misdirected Request');
    }
    if (!originAllowed(request, allowedOrigins)) {
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
    this.#wss.handleUpgrade(request, socket, head, (ws) => this.#options.onSocket(ws, socket));
  }

  /** Listens on the host; resolves with the address bound. */
  listen(port: number): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, this.#options.host, () => {
        this.server.off('error', reject);
        resolve(this.server.address() as AddressInfo);
      });
    });
  }

  /** From now on upgrades are refused (503). */
  stopAccepting(): void {
    this.#closing = true;
  }

  /** Closes the WebSocket server, then the HTTP server and every connection it still has. */
  close(): Promise<void> {
    this.#closing = true;
    return new Promise<void>((resolve) => {
      this.#wss.close(() => {
        this.server.close(() => resolve());
        this.server.closeAllConnections();
      });
    });
  }
}
