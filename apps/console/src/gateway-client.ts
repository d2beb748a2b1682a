// The console's side of the gateway protocol (PROTOCOL.md), over the browser's own WebSocket: the
// token travels as a subprotocol (never in the URL), output arrives as bytes decoded without a
// per-byte loop, and acks follow the protocol's policy once the caller says the bytes were handled.
// @aleph/gateway/client's browser entry gives the wire's constants and types, nothing of ws or zod.
import {
  ACK_AFTER_MS,
  ACK_EVERY_BYTES,
  PROTOCOL_VERSION,
  TOKEN_SUBPROTOCOL_PREFIX,
  WEBSOCKET_PATH,
  type ErrorCodeName,
  type MethodName,
  type MethodParams,
  type MethodResult,
  type PtyExitEvent,
} from '@aleph/gateway/client';

export type { MethodResult, PtyExitEvent };

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

/** How the link to the gateway stands: up, down and retrying at `retryAt`, or refused for good. */
export type LinkState =
  { kind: 'up' } | { kind: 'down'; code: number; attempt: number; retryAt: number } | { kind: 'refused' };

/** Reconnect backoff: 0.5 s doubling to 15 s, each delay drawn between half and all of it (jitter). */
const RETRY_FIRST_MS = 500;
const RETRY_MAX_MS = 15_000;
/** Refused upgrades in a row (the server up) before the page says its token is no longer taken. */
const REFUSALS_TO_SIGN_OUT = 3;
/** Nothing heard for this long: the page asks (pty.list); no answer within as long again: down. */
const SILENCE_MS = 10_000;

function retryDelay(attempt: number): number {
  const ceiling = Math.min(RETRY_MAX_MS, RETRY_FIRST_MS * 2 ** (attempt - 1));
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** Opens a socket; rejects with why it could not (a browser hides the upgrade's status). */
function openSocket(token: string, origin: string): Promise<WebSocket> {
  const url = origin.replace(/^http/, 'ws') + WEBSOCKET_PATH;
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, [PROTOCOL_VERSION, tokenSubprotocol(token)]);
    let opened = false;
    socket.addEventListener('open', () => {
      opened = true;
      resolve(socket);
    });
    socket.addEventListener('close', () => {
      if (opened) return;
      // A server that answers /healthz refused the token.
      fetch(new URL('/healthz', origin), { cache: 'no-store' }).then(
        (response) => reject(new ConnectError(response.ok ? 'refused' : 'unreachable')),
        () => reject(new ConnectError('unreachable')),
      );
    });
  });
}

/**
 * One logical connection to the gateway over successive sockets, as a terminal multiplexer's
 * client: a socket that drops (or goes silent) is replaced with backoff and jitter, and every
 * `onReopen` listener runs on the new one (resubscribe, resume from offsets) before the link says
 * `up`. A call made while down fails at once with `disconnected`; one in flight when the socket
 * dropped fails the same way: nothing waits forever on a socket that is gone.
 */
export class GatewayConnection {
  #socket: WebSocket;
  readonly #token: string;
  readonly #origin: string;
  readonly #pending = new Map<number, Pending>();
  readonly #eventListeners = new Set<(topic: string, params: unknown) => void>();
  readonly #outputListeners = new Set<(output: PtyOutput) => void>();
  readonly #stateListeners = new Set<(state: LinkState) => void>();
  readonly #reopenListeners: (() => Promise<unknown>)[] = [];
  /** Per session: the newest offset handled and the last one acked (per socket). */
  readonly #ackDue = new Map<string, number>();
  readonly #acked = new Map<string, number>();
  #ackTimer: ReturnType<typeof setTimeout> | undefined;
  #nextId = 1;
  #state: LinkState = { kind: 'up' };
  #retryTimer: ReturnType<typeof setTimeout> | undefined;
  #heardAt = performance.now();
  readonly #watchdog: ReturnType<typeof setInterval>;
  #closedByPage = false;
  /** Upgrades refused in a row while /healthz answered (see REFUSALS_TO_SIGN_OUT). */
  #refusals = 0;
  /** The onReopen listeners are running on a new socket: their calls go, the link is not up yet. */
  #resuming = false;

  private constructor(socket: WebSocket, token: string, origin: string) {
    this.#socket = socket;
    this.#token = token;
    this.#origin = origin;
    this.#adopt(socket);
    this.#watchdog = setInterval(() => this.#checkSilence(), SILENCE_MS / 2);
    window.addEventListener('online', () => this.retryNow());
  }

  /** Connects to `/ws` of `origin` (the page's own by default). */
  static async connect(token: string, origin: string = location.origin): Promise<GatewayConnection> {
    return new GatewayConnection(await openSocket(token, origin), token, origin);
  }

  get open(): boolean {
    return this.#state.kind === 'up' && this.#socket.readyState === WebSocket.OPEN;
  }

  get state(): LinkState {
    return this.#state;
  }

  onState(listener: (state: LinkState) => void): () => void {
    this.#stateListeners.add(listener);
    return () => this.#stateListeners.delete(listener);
  }

  /** Runs on each new socket, in the order added, before the link is `up` again. */
  onReopen(listener: () => Promise<unknown>): void {
    this.#reopenListeners.push(listener);
  }

  /** Any method, `agent.*` included. */
  request<R = unknown>(method: string, params?: unknown): Promise<R> {
    if (this.#socket.readyState !== WebSocket.OPEN || (this.#state.kind !== 'up' && !this.#resuming))
      return Promise.reject(new RpcError('disconnected', 'not connected to the server'));
    return this.#send<R>(method, params);
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

  /** Tries to reconnect now rather than at the next retry (a button, the browser back online). */
  retryNow(): void {
    if (this.#state.kind !== 'down' || this.#retryTimer === undefined) return;
    clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    void this.#reconnect(this.#state.attempt, this.#state.code);
  }

  close(): void {
    this.#closedByPage = true;
    clearInterval(this.#watchdog);
    clearTimeout(this.#retryTimer);
    this.#socket.close(1000);
  }

  #send<R>(method: string, params?: unknown): Promise<R> {
    const id = this.#nextId++;
    return new Promise<R>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.#socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  #adopt(socket: WebSocket): void {
    this.#heardAt = performance.now();
    socket.addEventListener('message', (event: MessageEvent<string>) => {
      if (socket !== this.#socket) return;
      this.#heardAt = performance.now();
      this.#onMessage(event.data);
    });
    socket.addEventListener('close', (event) => {
      if (socket === this.#socket) this.#dropped(event.code);
    });
  }

  /** The socket is gone (closed, or silent too long): fail what waits on it, and retry. */
  #dropped(code: number): void {
    for (const pending of this.#pending.values())
      pending.reject(new RpcError('disconnected', `the connection dropped (${code})`));
    this.#pending.clear();
    this.#ackDue.clear();
    this.#acked.clear();
    if (this.#closedByPage || this.#state.kind !== 'up') return;
    this.#schedule(1, code);
  }

  #schedule(attempt: number, code: number): void {
    const delay = retryDelay(attempt);
    this.#setState({ kind: 'down', code, attempt, retryAt: Date.now() + delay });
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      void this.#reconnect(attempt, code);
    }, delay);
  }

  async #reconnect(attempt: number, code: number): Promise<void> {
    let socket: WebSocket;
    try {
      socket = await openSocket(this.#token, this.#origin);
    } catch (error) {
      // A server coming back answers /healthz a moment after it failed an upgrade: only refusals
      // in a row mean the token is no longer taken.
      const refused = error instanceof ConnectError && error.kind === 'refused';
      this.#refusals = refused ? this.#refusals + 1 : 0;
      if (this.#refusals >= REFUSALS_TO_SIGN_OUT) this.#setState({ kind: 'refused' });
      else this.#schedule(attempt + 1, code);
      return;
    }
    this.#refusals = 0;
    this.#socket = socket;
    this.#adopt(socket);
    this.#resuming = true;
    try {
      // Resumed on the new socket before the page may send keys: `open` still says no.
      for (const listener of this.#reopenListeners) await listener().catch(() => {});
    } finally {
      this.#resuming = false;
    }
    if (socket === this.#socket && socket.readyState === WebSocket.OPEN) this.#setState({ kind: 'up' });
    else this.#schedule(attempt + 1, code); // dropped again while resuming
  }

  #setState(state: LinkState): void {
    this.#state = state;
    for (const listener of this.#stateListeners) listener(state);
  }

  /** A socket can die without a close (a laptop asleep, a proxy that stops forwarding): ask, then drop. */
  #checkSilence(): void {
    if (this.#state.kind !== 'up' || this.#socket.readyState !== WebSocket.OPEN) return;
    const silent = performance.now() - this.#heardAt;
    if (silent >= 2 * SILENCE_MS) {
      this.#dropped(4000);
      this.#socket.close();
    } else if (silent >= SILENCE_MS) void this.#send('pty.list', {}).catch(() => {});
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
