// Reading a stream with consumers of this node's own, never the client library's ordered consumer:
// that one, once it recreates itself (a missed heartbeat, a node stopped for a few seconds, a slow
// reader), comes back as a consumer the server keeps for five minutes after its node is gone, and
// it is never deleted as it closes. A reader's consumer is created by name (ack none, in memory,
// removed by the server 5 s after its node stops pulling) and deleted as the reader ends; whenever
// it may be gone or reports trouble, a new one starts from the first message not yet handed out.
// Invariants: messages come in stream order, each once (a gap in the consumer's own delivery
// sequence, a message the server dropped on its way, also takes a new consumer from there).
import { randomBytes } from 'node:crypto';
import {
  AckPolicy,
  DeliverPolicy,
  type ConsumerConfig,
  type ConsumerMessages,
  type JsMsg,
} from '@nats-io/jetstream';
import { nanos } from '@nats-io/transport-node';
import type { ClusterConnection } from '../connection.js';
import { whileWanted } from './retry.js';

/** A consumer nobody pulls from is removed by the server after this long. */
export const INACTIVE_MS = 5_000;
/** How long one pull waits for messages, and the heartbeats the server sends meanwhile. */
const PULL_EXPIRES_MS = 10_000;
const HEARTBEAT_MS = 2_000;
/** What a consumer reports when it cannot go on as it is: a new one is taken. */
const TROUBLE = new Set(['heartbeats_missed', 'consumer_not_found', 'consumer_deleted', 'no_responders']);

export interface ReaderOptions {
  readonly stream: string;
  readonly filter: string;
  /** Where the first consumer starts: a stream sequence, or a deliver policy. */
  readonly start: number | 'all' | 'new' | 'last_per_subject';
  /** Messages pulled ahead of the reader (at most this many wait in memory). */
  readonly maxMessages: number;
  /** Names the consumers (`<prefix>_<random>`), for whoever lists them. */
  readonly prefix: string;
  /** Called as a consumer after the first is made (the reader goes on from where it was). */
  readonly onRestart?: () => void;
  /** A consumer that cannot be made for this long (NATS away, timeouts) fails the reader; default never. */
  readonly giveUpAfterMs?: number;
}

const POLICIES = {
  all: DeliverPolicy.All,
  new: DeliverPolicy.New,
  last_per_subject: DeliverPolicy.LastPerSubject,
} as const;

/** A stream's messages in order, as long as it is iterated and not closed. */
export class StreamReader implements AsyncIterable<JsMsg> {
  readonly #connection: ClusterConnection;
  readonly #options: ReaderOptions;
  #closed = false;
  /** A consumer was made before (the next is a restart). */
  #opened = false;
  #markReady: () => void = () => undefined;
  #failReady: (error: unknown) => void = () => undefined;
  /** Settles once the first consumer exists (messages from then on are read), or the reader failed. */
  readonly ready = new Promise<void>((resolve, reject) => {
    this.#markReady = resolve;
    this.#failReady = reject;
  });
  #current: { name: string; messages: ConsumerMessages } | undefined;
  /** The stream sequence to go on from (undefined: the first consumer's policy again). */
  #next: number | undefined;

  constructor(connection: ClusterConnection, options: ReaderOptions) {
    this.#connection = connection;
    this.#options = options;
    this.#next = typeof options.start === 'number' ? Math.max(1, options.start) : undefined;
    this.ready.catch(() => undefined); // a reader whose readiness nobody awaits fails its iteration only
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Ends the iteration (after the message in hand) and deletes the consumer. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#markReady();
    this.#end();
  }

  /** Takes a new consumer from the first message not handed out yet (e.g. its node was lost). */
  restart(): void {
    this.#end();
  }

  #end(): void {
    const current = this.#current;
    this.#current = undefined;
    if (current === undefined) return;
    void current.messages.close().catch(() => undefined); // (settles only once iterated: not awaited)
    this.#connection.jsm.consumers.delete(this.#options.stream, current.name).catch(() => undefined); // gone already
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<JsMsg, void, undefined> {
    try {
      while (!this.#closed) {
        const opened = await this.#open();
        if (opened === undefined) return;
        const { messages } = opened;
        let lastPull = Date.now();
        let trouble = false;
        void (async () => {
          for await (const status of messages.status()) {
            if (status.type === 'next') lastPull = Date.now();
            else if (TROUBLE.has(status.type)) {
              trouble = true;
              if (this.#current === opened) this.#end();
            }
          }
        })().catch(() => undefined);
        let delivered = 0;
        const began = Date.now();
        try {
          for await (const message of messages) {
            if (this.#closed || this.#current !== opened) break;
            if (message.info.deliverySequence !== delivered + 1) break; // one was lost on its way
            delivered += 1;
            this.#next = message.seq + 1;
            const handed = Date.now();
            yield message;
            // The library asks for more only as messages are taken: after a long wait here, none may
            // have been asked for long enough that the server removed the consumer.
            if (trouble || (Date.now() - handed > HEARTBEAT_MS && Date.now() - lastPull > INACTIVE_MS / 2))
              break;
          }
        } catch {
          if (this.#closed) return;
        }
        if (this.#current === opened) this.#end();
        // A consumer that ended at once, giving nothing: a pause before the next.
        if (!this.#closed && delivered === 0 && Date.now() - began < 1_000)
          await new Promise((resolve) => setTimeout(resolve, 500));
      }
    } catch (error) {
      this.#failReady(error);
      throw error;
    } finally {
      this.#end();
    }
  }

  async #open(): Promise<{ name: string; messages: ConsumerMessages } | undefined> {
    const { stream, filter, start, maxMessages, prefix } = this.#options;
    const name = `${prefix}_${randomBytes(8).toString('hex')}`;
    const from = this.#next;
    const config: Partial<ConsumerConfig> = {
      name,
      filter_subject: filter,
      ack_policy: AckPolicy.None,
      inactive_threshold: nanos(INACTIVE_MS),
      num_replicas: 1,
      mem_storage: true,
      ...(from !== undefined
        ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from }
        : { deliver_policy: POLICIES[start as keyof typeof POLICIES] }),
    };
    const { js, jsm } = this.#connection;
    const until = Date.now() + (this.#options.giveUpAfterMs ?? Infinity);
    const opened = await whileWanted(
      this.#connection,
      async () => {
        const info = await jsm.consumers.add(stream, config);
        const messages = await js.consumers
          .getConsumerFromInfo(info)
          .consume({ max_messages: maxMessages, idle_heartbeat: HEARTBEAT_MS, expires: PULL_EXPIRES_MS });
        // Only new messages: a new consumer later goes on after what the stream held at this one's start.
        if (from === undefined && start === 'new') this.#next = info.delivered.stream_seq + 1;
        return { name, messages };
      },
      () => !this.#closed && Date.now() < until,
    );
    if (opened === undefined && !this.#closed)
      throw new Error(`no consumer of stream ${stream} could be made for ${this.#options.giveUpAfterMs} ms`);
    if (opened === undefined) return undefined;
    if (this.#closed) {
      void opened.messages.close().catch(() => undefined);
      jsm.consumers.delete(stream, name).catch(() => undefined);
      return undefined;
    }
    if (this.#opened) this.#options.onRestart?.();
    this.#opened = true;
    this.#current = opened;
    this.#markReady();
    return opened;
  }
}
