// The gateway's EventBus over JetStream, so a client on any node sees `pty.*` and `agent.*` events
// of every node. One subject per session (`<name>.ev.<session>`) in one stream; the topic and the
// session's sequence ride in headers. Invariants (the EventBus contract of @aleph/gateway):
// - a session's sequence is gap-free and totally ordered across nodes: each publish names the
//   session's last message it knows (expected last subject sequence); one that loses a race
//   re-reads the session's tail and tries again, so two nodes never give out one number twice;
// - a subscription receives each matching event once, in stream order (hence in sequence order per
//   session), and a listener's promise holds its next event (a slow client slows only itself).
import { randomUUID } from 'node:crypto';
import {
  DeliverPolicy,
  JetStreamApiError,
  type ConsumerMessages,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type { BusEvent, BusListener, EventBus, EventFilter, EventSubscription } from '@aleph/gateway';
import { ensureStream, type ClusterConnection } from './connection.js';
import { ClusterError } from './errors.js';
import { untilStored } from './internal/retry.js';

const WRONG_LAST_SEQUENCE = 10071;
const TOPIC_HEADER = 'Aleph-Topic';
const SEQ_HEADER = 'Aleph-Seq';
const SESSION_HEADER = 'Aleph-Session';
const TOKEN = /^[A-Za-z0-9_-]{1,200}$/;

/** A session id as one subject token: itself when it is one, else hex (`''` is `_`). */
export function sessionToken(sessionId: string): string {
  if (sessionId === '') return '_';
  if (TOKEN.test(sessionId) && sessionId !== '_' && !sessionId.startsWith('~')) return sessionId;
  return `~${Buffer.from(sessionId, 'utf8').toString('hex')}`;
}

function topicMatches(pattern: string, topic: string): boolean {
  if (pattern === '*' || pattern === topic) return true;
  return pattern.endsWith('.*') && topic.startsWith(pattern.slice(0, -1));
}

interface Tail {
  /** The stream sequence of the session's last message (0: none); the next publish expects it. */
  streamSeq: number;
  /** The session's last event sequence. */
  seq: number;
  chain: Promise<unknown>;
}

export interface JetStreamEventBusOptions {
  /** How long events are kept (what a resume can reach back to); default 1 hour. */
  readonly maxAgeMs?: number;
  /** Bytes kept at most (the oldest go first); default 1 GiB. */
  readonly maxBytes?: number;
  /** A listener threw or rejected. Default: a process warning. */
  readonly onListenerError?: (error: unknown, event: BusEvent) => void;
}

export class JetStreamEventBus implements EventBus {
  readonly #connection: ClusterConnection;
  readonly #js: JetStreamClient;
  readonly #jsm: JetStreamManager;
  readonly #stream: string;
  readonly #prefix: string;
  readonly #tails = new Map<string, Tail>();
  /** Names this bus's writes, so a retried write is a duplicate of its own and never of another node's. */
  readonly #writer = randomUUID();
  readonly #onError: (error: unknown, event: BusEvent) => void;

  private constructor(connection: ClusterConnection, options: JetStreamEventBusOptions) {
    this.#connection = connection;
    this.#js = connection.js;
    this.#jsm = connection.jsm;
    this.#stream = connection.names.eventsStream;
    this.#prefix = connection.names.eventsPrefix;
    this.#onError =
      options.onListenerError ??
      ((error, event) =>
        process.emitWarning(`an event listener failed on ${event.topic}: ${String(error)}`, 'AlephEventBus'));
  }

  static async open(
    connection: ClusterConnection,
    options: JetStreamEventBusOptions = {},
  ): Promise<JetStreamEventBus> {
    await ensureStream(connection.jsm, {
      name: connection.names.eventsStream,
      subjects: [connection.names.eventsAll],
      num_replicas: connection.options.replicas,
      max_age: (options.maxAgeMs ?? 3_600_000) * 1_000_000,
      max_bytes: options.maxBytes ?? 1024 ** 3,
    });
    return new JetStreamEventBus(connection, options);
  }

  #subject(sessionId: string): string {
    return `${this.#prefix}${sessionToken(sessionId)}`;
  }

  /** The session's last message as the stream has it now. */
  async #readTail(sessionId: string): Promise<{ streamSeq: number; seq: number }> {
    try {
      const last = await this.#jsm.streams.getMessage(this.#stream, {
        last_by_subj: this.#subject(sessionId),
      });
      if (last === null) return { streamSeq: 0, seq: 0 };
      return { streamSeq: last.seq, seq: Number(last.header.get(SEQ_HEADER)) || 0 };
    } catch {
      return { streamSeq: 0, seq: 0 };
    }
  }

  publish(topic: string, sessionId: string, data: unknown): Promise<number> {
    if (topic === '' || /[\s*>]/.test(topic))
      return Promise.reject(new ClusterError('invalid_options', `invalid topic ${JSON.stringify(topic)}`));
    let tail = this.#tails.get(sessionId);
    if (tail === undefined) {
      tail = { streamSeq: -1, seq: 0, chain: Promise.resolve() };
      this.#tails.set(sessionId, tail);
    }
    const known = tail;
    const write = known.chain.then(async () => {
      const body = new TextEncoder().encode(JSON.stringify(data ?? null));
      for (let attempt = 0; ; attempt++) {
        if (known.streamSeq < 0) Object.assign(known, await this.#readTail(sessionId));
        const headers = natsHeaders();
        headers.set(TOPIC_HEADER, topic);
        headers.set(SEQ_HEADER, String(known.seq + 1));
        headers.set(SESSION_HEADER, sessionId);
        try {
          const expected = known.streamSeq;
          const ack = await untilStored(this.#connection, () =>
            this.#js.publish(this.#subject(sessionId), body, {
              headers,
              msgID: `${this.#writer}:${sessionId}:${known.seq + 1}:${expected}`,
              expect: { lastSubjectSequence: expected },
            }),
          );
          known.streamSeq = ack.seq;
          known.seq += 1;
          return known.seq;
        } catch (error) {
          const raced = error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE;
          if (!raced || attempt >= 20) throw error;
          known.streamSeq = -1; // another node published to this session: read its tail again
        }
      }
    });
    known.chain = write.catch(() => {
      known.streamSeq = -1;
    });
    return write;
  }

  subscribe(filter: EventFilter, listener: BusListener): EventSubscription {
    const topics = [...filter.topics];
    const { sessionId, afterSeq } = filter;
    let messages: ConsumerMessages | undefined;
    let active = true;
    let markReady: () => void = () => undefined;
    let failReady: (error: unknown) => void = () => undefined;
    const ready = new Promise<void>((resolve, reject) => {
      markReady = resolve;
      failReady = reject;
    });
    void (async () => {
      const replay = sessionId !== undefined && afterSeq !== undefined;
      const consumer = await this.#js.consumers.get(this.#stream, {
        filter_subjects: sessionId === undefined ? `${this.#prefix}>` : this.#subject(sessionId),
        deliver_policy: replay ? DeliverPolicy.All : DeliverPolicy.New,
        inactive_threshold: 5_000, // gone a few seconds after its node, however that node ended
      });
      if (!active) return markReady();
      messages = await consumer.consume({ max_messages: 256 });
      markReady();
      for await (const message of messages) {
        if (!active) break;
        const topic = message.headers?.get(TOPIC_HEADER) ?? '';
        const seq = Number(message.headers?.get(SEQ_HEADER)) || 0;
        if (replay && seq <= (afterSeq ?? 0)) continue;
        if (!topics.some((pattern) => topicMatches(pattern, topic))) continue;
        let data: unknown;
        try {
          data = message.json();
        } catch {
          continue; // not one of ours
        }
        const event: BusEvent = { topic, sessionId: message.headers?.get(SESSION_HEADER) ?? '', seq, data };
        try {
          await listener(event);
        } catch (error) {
          this.#onError(error, event);
        }
      }
    })().catch((error: unknown) => {
      failReady(error);
    });
    const unsubscribe = (): void => {
      if (!active) return;
      active = false;
      void messages?.close();
    };
    return { ready, unsubscribe, [Symbol.dispose]: unsubscribe };
  }
}
