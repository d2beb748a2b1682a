// The typed client for @aleph/gateway (Node, over `ws`). Method params and results are inferred
// from the protocol's zod schemas; output arrives as raw bytes with its offset and is acknowledged
// automatically once your handler returns, which is what drives the server's flow control.
import { WebSocket } from 'ws';
import { GatewayError } from './errors.js';
import { binaryInputFrame, readBinaryFrame } from './internal/binary-frames.js';
import { ACK_AFTER_MS, ACK_EVERY_BYTES } from './internal/wire-constants.js';
import { rawBuffer, rawText, readOutputFrame } from './internal/frames.js';
import {
  ErrorCodes,
  PROTOCOL_VERSION,
  type ErrorCodeName,
  type MethodName,
  type MethodParams,
  type MethodResult,
  type PtyExitEvent,
  type RpcErrorObject,
} from './protocol.js';

export interface PtyOutput {
  readonly sessionId: string;
  readonly offset: number;
  readonly data: Buffer;
}

export interface ConnectOptions {
  readonly token: string;
  /** Acknowledge output automatically after `onOutput` handlers ran (default true). */
  readonly autoAck?: boolean;
  readonly headers?: Record<string, string>;
  /**
   * Ask the server for binary pty frames (`pty.binary`, default true): output and `type()`'s
   * keystrokes then go without JSON or base64. A server without it keeps the JSON frames.
   */
  readonly binary?: boolean;
}

type Pending = { resolve: (value: unknown) => void; reject: (error: Error) => void };

export class GatewayClient {
  readonly socket: WebSocket;
  readonly #pending = new Map<number, Pending>();
  readonly #outputListeners = new Set<(output: PtyOutput) => void>();
  readonly #exitListeners = new Set<(exit: PtyExitEvent) => void>();
  readonly #eventListeners = new Set<(topic: string, params: unknown) => void>();
  readonly #inputErrorListeners = new Set<(error: GatewayError) => void>();
  readonly #autoAck: boolean;
  /** Per session: the newest offset handled, and the last one acknowledged. */
  readonly #ackDue = new Map<string, number>();
  readonly #acked = new Map<string, number>();
  #ackNow: NodeJS.Immediate | undefined;
  #ackLater: NodeJS.Timeout | undefined;
  #nextId = 1;
  /** The server sends this connection's output, and takes its `type()` keystrokes, as binary frames. */
  #binary = false;
  readonly closed: Promise<{ code: number; reason: string }>;

  constructor(socket: WebSocket, options: { autoAck?: boolean } = {}) {
    this.socket = socket;
    this.#autoAck = options.autoAck ?? true;
    socket.on('message', (raw, isBinary) => {
      if (isBinary) return this.#onBinary(raw);
      // Output, nearly all the traffic, is read without JSON.parse; anything else parses as JSON.
      const frame = Buffer.isBuffer(raw) ? readOutputFrame(raw) : undefined;
      if (frame === undefined) return this.#onMessage(rawText(raw) ?? '');
      const { bytes, ...params } = frame;
      this.#onNotification('pty.output', params, bytes);
    });
    this.closed = new Promise((resolve) => {
      socket.on('close', (code, reason) => {
        const error = new GatewayError('internal_error', `connection closed (${code})`);
        for (const pending of this.#pending.values()) pending.reject(error);
        this.#pending.clear();
        resolve({ code, reason: reason.toString() });
      });
    });
  }

  /** Calls any method — including ones a server registered beside pty.* — and resolves its result. */
  request<R = unknown>(method: string, params?: unknown): Promise<R> {
    return this.#request(method, params);
  }

  /** `onAnswer` runs as the answer is read, before any frame that came after it. */
  #request<R>(method: string, params: unknown, onAnswer?: (result: R) => void): Promise<R> {
    if (this.socket.readyState !== WebSocket.OPEN) {
      return Promise.reject(new GatewayError('internal_error', 'connection is not open'));
    }
    const id = this.#nextId++;
    return new Promise<R>((resolve, reject) => {
      const answered = (value: unknown): void => {
        onAnswer?.(value as R);
        resolve(value as R);
      };
      this.#pending.set(id, { resolve: answered, reject });
      this.socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  call<M extends MethodName>(method: M, params: MethodParams<M>): Promise<MethodResult<M>> {
    return this.request<MethodResult<M>>(method, params);
  }

  spawn(params: MethodParams<'pty.spawn'>): Promise<MethodResult<'pty.spawn'>> {
    return this.call('pty.spawn', params);
  }

  input(sessionId: string, data: string | Uint8Array): Promise<MethodResult<'pty.input'>> {
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    return this.call('pty.input', { sessionId, data: bytes.toString('base64') });
  }

  /**
   * Sends keystrokes without asking for an answer (a `pty.input` notification): the server writes
   * them and sends nothing back, one frame less per key; a failure (`busy`, an ended session)
   * comes to `onInputError`. What reaches the program is the same as with `input`.
   */
  type(sessionId: string, data: string | Uint8Array): void {
    if (this.socket.readyState !== WebSocket.OPEN)
      throw new GatewayError('internal_error', 'connection is not open');
    const bytes = typeof data === 'string' ? Buffer.from(data, 'utf8') : Buffer.from(data);
    // An id a binary frame cannot carry (empty, over 255 bytes) goes as JSON, refused alike.
    const idLength = Buffer.byteLength(sessionId);
    if (this.#binary && idLength > 0 && idLength <= 255)
      return this.socket.send(binaryInputFrame(sessionId, bytes));
    this.socket.send(
      JSON.stringify({
        jsonrpc: '2.0',
        method: 'pty.input',
        params: { sessionId, data: bytes.toString('base64') },
      }),
    );
  }

  /** Failures of keystrokes sent with `type` (an error with `data.sessionId`). */
  onInputError(listener: (error: GatewayError) => void): () => void {
    this.#inputErrorListeners.add(listener);
    return () => this.#inputErrorListeners.delete(listener);
  }

  resize(sessionId: string, cols: number, rows: number): Promise<MethodResult<'pty.resize'>> {
    return this.call('pty.resize', { sessionId, cols, rows });
  }

  closeSession(sessionId: string): Promise<MethodResult<'pty.close'>> {
    return this.call('pty.close', { sessionId });
  }

  /**
   * The sessions, or those `query` asks for: `state` (running or ended), and a page of at most
   * `limit` in `sessionId` order after `cursor` (the last `sessionId` of the page before).
   */
  list(query: MethodParams<'pty.list'> = {}): Promise<MethodResult<'pty.list'>> {
    return this.call('pty.list', query);
  }

  /** One answer's worth (at most MAX_REPLAY_BYTES) from `fromOffset`; `end` says how far there is. */
  async replay(
    sessionId: string,
    fromOffset: number,
  ): Promise<{ offset: number; data: Buffer; end: number }> {
    const result = await this.call('pty.replay', { sessionId, fromOffset });
    return { offset: result.offset, data: Buffer.from(result.data, 'base64'), end: result.end };
  }

  ack(sessionId: string, offset: number): Promise<MethodResult<'pty.ack'>> {
    return this.call('pty.ack', { sessionId, offset });
  }

  subscribe(topics: string[], sessions?: string[]): Promise<MethodResult<'events.subscribe'>> {
    return this.call('events.subscribe', sessions === undefined ? { topics } : { topics, sessions });
  }

  unsubscribe(topics: string[]): Promise<MethodResult<'events.unsubscribe'>> {
    return this.call('events.unsubscribe', { topics });
  }

  onOutput(listener: (output: PtyOutput) => void): () => void {
    this.#outputListeners.add(listener);
    return () => this.#outputListeners.delete(listener);
  }

  onExit(listener: (exit: PtyExitEvent) => void): () => void {
    this.#exitListeners.add(listener);
    return () => this.#exitListeners.delete(listener);
  }

  /** Every notification, by topic (agent.* events included). */
  onEvent(listener: (topic: string, params: unknown) => void): () => void {
    this.#eventListeners.add(listener);
    return () => this.#eventListeners.delete(listener);
  }

  /**
   * Follows one session from `fromOffset`: the server sends what its scrollback still holds from
   * there, then live output, as pty.output (`pty.follow`); each byte reaches `onData` once, in order.
   * Subscribe to `pty.*` (or `pty.output`) before calling. Resolves with the offset output resumes
   * from (above `fromOffset` when older bytes were no longer kept), the end of the output now, and
   * the session's exit if it has already ended (its tail still follows, up to `end`).
   */
  async follow(
    sessionId: string,
    fromOffset: number,
    onData: (data: Buffer, offset: number) => void,
  ): Promise<MethodResult<'pty.follow'> & { stop: () => void }> {
    let next: number | undefined; // unset until the server's answer: frames before it are the old stream
    const off = this.onOutput((output) => {
      if (output.sessionId !== sessionId || next === undefined) return;
      const end = output.offset + output.data.length;
      if (end <= next) return;
      onData(
        output.offset < next ? output.data.subarray(next - output.offset) : output.data,
        Math.max(output.offset, next),
      );
      next = end;
    });
    try {
      const answer = await this.#request<MethodResult<'pty.follow'>>(
        'pty.follow',
        { sessionId, fromOffset },
        (result) => (next = result.offset),
      );
      return { ...answer, stop: off };
    } catch (error) {
      off();
      throw error;
    }
  }

  close(): Promise<void> {
    if (this.socket.readyState === WebSocket.CLOSED) return Promise.resolve();
    this.socket.close(1000);
    return this.closed.then(() => undefined);
  }

  #onMessage(text: string): void {
    let message: {
      id?: number | null;
      result?: unknown;
      error?: RpcErrorObject;
      method?: string;
      params?: unknown;
    };
    try {
      message = JSON.parse(text) as typeof message;
    } catch {
      return;
    }
    if (message.method !== undefined) {
      this.#onNotification(message.method, message.params);
      return;
    }
    const error =
      message.error === undefined
        ? undefined
        : new GatewayError(
            ((message.error.data?.code ?? '') in ErrorCodes
              ? message.error.data?.code
              : 'internal_error') as ErrorCodeName,
            message.error.message,
            { data: message.error.data },
          );
    if (
      message.id === null &&
      error !== undefined &&
      typeof message.error?.data?.['sessionId'] === 'string'
    ) {
      for (const listener of this.#inputErrorListeners) listener(error);
      return;
    }
    if (typeof message.id !== 'number') return;
    const pending = this.#pending.get(message.id);
    if (pending === undefined) return;
    this.#pending.delete(message.id);
    if (error !== undefined) {
      pending.reject(error);
    } else {
      pending.resolve(message.result);
    }
  }

  /** Turns on binary pty frames (see ConnectOptions.binary); false when the server has none. */
  async useBinaryFrames(): Promise<boolean> {
    try {
      await this.call('pty.binary', {});
      this.#binary = true;
    } catch (error) {
      if (!(error instanceof GatewayError && error.code === 'method_not_found')) throw error;
    }
    return this.#binary;
  }

  #onBinary(raw: WebSocket.RawData): void {
    const frame = readBinaryFrame(rawBuffer(raw));
    if (typeof frame === 'string' || frame.kind !== 'output') return;
    const { sessionId, offset, data } = frame;
    // Event listeners see the notification's params as JSON would carry them.
    const params =
      this.#eventListeners.size > 0
        ? { sessionId, offset, data: data.toString('base64') }
        : { sessionId, offset };
    this.#onNotification('pty.output', params, data);
  }

  /** `bytes`: the output already decoded, when the frame was read without JSON.parse. */
  #onNotification(topic: string, params: unknown, bytes?: Buffer): void {
    for (const listener of this.#eventListeners) listener(topic, params);
    if (topic === 'pty.output') {
      const event = params as { sessionId: string; offset: number; data: string };
      const output: PtyOutput = {
        sessionId: event.sessionId,
        offset: event.offset,
        data: bytes ?? Buffer.from(event.data, 'base64'),
      };
      for (const listener of this.#outputListeners) listener(output);
      if (this.#autoAck) this.#scheduleAck(output.sessionId, output.offset + output.data.length);
    } else if (topic === 'pty.exit') {
      const exit = params as PtyExitEvent;
      this.#ackDue.delete(exit.sessionId);
      this.#acked.delete(exit.sessionId);
      for (const listener of this.#exitListeners) listener(exit);
    }
  }

  /** At most one ack per session per tick, for the newest offset handled (see ACK_EVERY_BYTES). */
  #scheduleAck(sessionId: string, offset: number): void {
    this.#ackDue.set(sessionId, Math.max(offset, this.#ackDue.get(sessionId) ?? 0));
    if (offset - (this.#acked.get(sessionId) ?? 0) >= ACK_EVERY_BYTES) {
      this.#ackNow ??= setImmediate(() => this.#sendAcks());
    } else if (this.#ackLater === undefined) {
      this.#ackLater = setTimeout(() => this.#sendAcks(), ACK_AFTER_MS);
      this.#ackLater.unref();
    }
  }

  #sendAcks(): void {
    if (this.#ackNow !== undefined) clearImmediate(this.#ackNow);
    if (this.#ackLater !== undefined) clearTimeout(this.#ackLater);
    this.#ackNow = this.#ackLater = undefined;
    if (this.socket.readyState !== WebSocket.OPEN) return this.#ackDue.clear();
    for (const [sessionId, offset] of this.#ackDue) {
      this.socket.send(JSON.stringify({ jsonrpc: '2.0', method: 'pty.ack', params: { sessionId, offset } }));
      this.#acked.set(sessionId, offset);
    }
    this.#ackDue.clear();
  }
}

export function connectGateway(url: string, options: ConnectOptions): Promise<GatewayClient> {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url, [PROTOCOL_VERSION], {
      headers: { ...options.headers, authorization: `Bearer ${options.token}` },
      perMessageDeflate: false,
    });
    const onError = (error: Error): void => reject(error);
    socket.once('unexpected-response', (_request, response) => {
      socket.off('error', onError);
      const status = response.statusCode ?? 0;
      const answer = `${status} ${response.statusMessage ?? ''}`.trim();
      reject(
        status === 401 || status === 403
          ? new GatewayError(
              'unauthorized',
              status === 401
                ? `the gateway refused the token (${answer})`
                : `the gateway refused this connection's origin or host (${answer})`,
              { data: { status } },
            )
          : new GatewayError('upgrade_refused', `the gateway refused the connection (${answer})`, {
              data: { status },
            }),
      );
      response.resume();
    });
    socket.once('error', onError);
    socket.once('open', () => {
      socket.off('error', onError);
      socket.on('error', () => {}); // surfaced through `closed`
      const client = new GatewayClient(socket, { autoAck: options.autoAck ?? true });
      if (options.binary === false) return resolve(client);
      client.useBinaryFrames().then(
        () => resolve(client),
        (error: Error) => (socket.terminate(), reject(error)),
      );
    });
  });
}

export { GatewayError } from './errors.js';
export * from './protocol.js';
export { ACK_AFTER_MS, ACK_EVERY_BYTES, TERMINAL_ANSWERS } from './internal/wire-constants.js';
export { boundCounts, type CountedTerminal } from './internal/bounded-counts.js';
