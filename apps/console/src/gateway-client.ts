// The console's side of the gateway protocol (PROTOCOL.md), over the browser's own WebSocket: the
// token travels as a subprotocol (never in the URL), output arrives as bytes decoded without a
// per-byte loop, and acks follow the protocol's policy once the caller says the bytes were handled.
// Only types come from @aleph/gateway: its `./client` runs on Node (`ws`, Buffer), see the note.
import type {
  ErrorCodeName,
  MethodName,
  MethodParams,
  MethodResult,
  PtyExitEvent,
} from '@aleph/gateway/client';

export type { MethodResult, PtyExitEvent };

/** Copied from @aleph/gateway's protocol.ts (a value import would bundle `ws` and zod). */
const PROTOCOL_VERSION = 'aleph.v1';
const TOKEN_SUBPROTOCOL_PREFIX = 'aleph.token.';
const WEBSOCKET_PATH = '/ws';
/** The typed client's ack policy: once 128 KiB were handled since the last ack, else within 20 ms. */
const ACK_EVERY_BYTES = 128 * 1024;
const ACK_AFTER_MS = 20;

declare global {
  interface Uint8ArrayConstructor {
    fromBase64?(text: string): Uint8Array;
  }
  interface Uint8Array {
    toBase64?(): string;
  }
}

export interface PtyOutput {
  readonly sessionId: string;
  readonly offset: number;
  readonly data: Uint8Array;
}

/** Why the page could not connect: the server answered but refused the upgrade, or no server. */
export class ConnectError extends Error {
  constructor(readonly kind: 'refused' | 'unreachable') {
    super(kind === 'refused' ? 'the gateway refused the token' : 'the gateway is unreachable');
  }
}

export class RpcError extends Error {
  constructor(
    readonly code: ErrorCodeName | (string & {}),
    message: string,
  ) {
    super(message);
  }
}

export function decodeBase64(text: string): Uint8Array {
  if (Uint8Array.fromBase64 !== undefined) return Uint8Array.fromBase64(text);
  const binary = atob(text); // older browsers only: the loop the native decoder avoids
  const bytes = new Uint8Array(binary.length);
  for (let index = 0; index < binary.length; index += 1) bytes[index] = binary.charCodeAt(index);
  return bytes;
}

export function encodeBase64(bytes: Uint8Array): string {
  if (bytes.toBase64 !== undefined) return bytes.toBase64();
  let binary = '';
  for (let index = 0; index < bytes.length; index += 0x8000)
    binary += String.fromCharCode(...bytes.subarray(index, index + 0x8000));
  return btoa(binary);
}

/** base64url of the UTF-8 token, as the `aleph.token.` subprotocol wants it. */
export function tokenSubprotocol(token: string): string {
  const base64 = encodeBase64(new TextEncoder().encode(token));
  return TOKEN_SUBPROTOCOL_PREFIX + base64.replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void };

export class GatewayConnection {
  readonly #socket: WebSocket;
  readonly #pending = new Map<number, Pending>();
  readonly #eventListeners = new Set<(topic: string, params: unknown) => void>();
  readonly #outputListeners = new Set<(output: PtyOutput) => void>();
  /** Per session: the newest offset handled and the last one acked. */
  readonly #ackDue = new Map<string, number>();
  readonly #acked = new Map<string, number>();
  #ackTimer: ReturnType<typeof setTimeout> | undefined;
  #nextId = 1;
  readonly closed: Promise<CloseEvent>;

  private constructor(socket: WebSocket) {
    this.#socket = socket;
    socket.addEventListener('message', (event: MessageEvent<string>) => this.#onMessage(event.data));
    this.closed = new Promise((resolve) =>
      socket.addEventListener('close', (event) => {
        for (const pending of this.#pending.values())
          pending.reject(new RpcError('internal_error', `connection closed (${event.code})`));
        this.#pending.clear();
        resolve(event);
      }),
    );
  }

  /** Connects to `/ws` of `origin` (the page's own by default). */
  static connect(token: string, origin: string = location.origin): Promise<GatewayConnection> {
    const url = origin.replace(/^http/, 'ws') + WEBSOCKET_PATH;
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(url, [PROTOCOL_VERSION, tokenSubprotocol(token)]);
      let opened = false;
      socket.addEventListener('open', () => {
        opened = true;
        resolve(new GatewayConnection(socket));
      });
      socket.addEventListener('close', () => {
        if (opened) return;
        // A browser hides the upgrade's status: a server that answers /healthz refused the token.
        fetch(new URL('/healthz', origin), { cache: 'no-store' }).then(
          (response) => reject(new ConnectError(response.ok ? 'refused' : 'unreachable')),
          () => reject(new ConnectError('unreachable')),
        );
      });
    });
  }

  get open(): boolean {
    return this.#socket.readyState === WebSocket.OPEN;
  }

  /** Any method, `agent.*` included. */
  request<R = unknown>(method: string, params?: unknown): Promise<R> {
    if (!this.open) return Promise.reject(new RpcError('internal_error', 'connection is not open'));
    const id = this.#nextId++;
    return new Promise<R>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.#socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  call<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>> {
    return this.request<MethodResult<M>>(method, params);
  }

  onEvent(listener: (topic: string, params: unknown) => void): () => void {
    this.#eventListeners.add(listener);
    return () => this.#eventListeners.delete(listener);
  }

  onOutput(listener: (output: PtyOutput) => void): () => void {
    this.#outputListeners.add(listener);
    return () => this.#outputListeners.delete(listener);
  }

  /** Says the bytes of `sessionId` up to `offset` were handled (drawn); sent as the policy says. */
  handled(sessionId: string, offset: number): void {
    this.#ackDue.set(sessionId, Math.max(offset, this.#ackDue.get(sessionId) ?? 0));
    if (offset - (this.#acked.get(sessionId) ?? 0) >= ACK_EVERY_BYTES) this.#sendAcks();
    else this.#ackTimer ??= setTimeout(() => this.#sendAcks(), ACK_AFTER_MS);
  }

  close(): void {
    this.#socket.close(1000);
  }

  #sendAcks(): void {
    clearTimeout(this.#ackTimer);
    this.#ackTimer = undefined;
    for (const [sessionId, offset] of this.open ? this.#ackDue : []) {
      this.#socket.send(JSON.stringify({ jsonrpc: '2.0', method: 'pty.ack', params: { sessionId, offset } }));
      this.#acked.set(sessionId, offset);
    }
    this.#ackDue.clear();
  }

  #onMessage(text: string): void {
    let message: {
      id?: number;
      result?: unknown;
      error?: { message: string; data?: { code?: string } };
      method?: string;
      params?: unknown;
    };
    try {
      message = JSON.parse(text) as typeof message;
    } catch {
      return;
    }
    if (message.method === 'pty.output') {
      const event = message.params as { sessionId: string; offset: number; data: string };
      const output = { sessionId: event.sessionId, offset: event.offset, data: decodeBase64(event.data) };
      for (const listener of this.#outputListeners) listener(output);
      return;
    }
    if (message.method !== undefined) {
      if (message.method === 'pty.exit') {
        const { sessionId } = message.params as PtyExitEvent;
        this.#ackDue.delete(sessionId);
        this.#acked.delete(sessionId);
      }
      for (const listener of this.#eventListeners) listener(message.method, message.params);
      return;
    }
    const pending = message.id === undefined ? undefined : this.#pending.get(message.id);
    if (pending === undefined) return;
    this.#pending.delete(message.id!);
    if (message.error === undefined) pending.resolve(message.result);
    else pending.reject(new RpcError(message.error.data?.code ?? 'internal_error', message.error.message));
  }
}
