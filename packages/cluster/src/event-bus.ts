// The gateway's EventBus over JetStream, so a client on any node sees `pty.*` and `agent.*` events
// of every node. One subject per session (`<name>.ev.<session>`) in one stream; the topic and the
// session's sequence ride in headers. Invariants (the EventBus contract of @aleph/gateway):
// - a session's sequence is gap-free and totally ordered across nodes: each write names the
//   session's last message it knows (expected last subject sequence); one that loses a race
//   re-reads the session's tail and tries again, so two nodes never give out one number twice;
//   events a node publishes for a session while its previous write is under way, or within
//   `batchDelayMs` of the first (less when the node writes to NATS meanwhile: they go with that
//   write), go as one message (a batch: `Aleph-Batch` events from `Aleph-Seq` on), one fenced
//   write for all;
// - a subscription receives each matching event once, in stream order (hence in sequence order per
//   session), and a listener's promise holds its next event (a slow client slows only itself).
import { randomUUID } from 'node:crypto';
import { JetStreamApiError, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type { BusEvent, BusListener, EventBus, EventFilter, EventSubscription } from '@aleph/gateway';
import { ensureStream, type ClusterConnection } from './connection.js';
import { ClusterError } from './errors.js';
import { beforeWrite, linger } from './internal/linger.js';
import { StreamReader } from './internal/reader.js';
import { untilStored } from './internal/retry.js';
import { byteLengthOf, textOf, writeText } from './internal/text.js';

const WRONG_LAST_SEQUENCE = 10071;
const TOPIC_HEADER = 'Aleph-Topic';
const SEQ_HEADER = 'Aleph-Seq';
const SESSION_HEADER = 'Aleph-Session';
/**
 * A message holding several events of its session (JSON `[[topic, data], …]`), the first at
 * Aleph-Seq. This version writes one event a line (JSON text has no line break of its own), so a
 * reader parses each alone: a batch decoded as one string of more than 128 KiB would take V8 pages
 * of its own and a scavenge (several times what reading its bytes costs). Read either way.
 */
const BATCH_HEADER = 'Aleph-Batch';
/** A batch's JSON in bytes stays this far under the server's largest payload (headers go beside it). */
const PAYLOAD_HEADROOM = 64 * 1024;
const TOKEN = /^[A-Za-z0-9_-]{1,200}$/;

/** A session id as one subject token: itself when it is one, else hex (`''` is `_`). */
export function sessionToken(sessionId: string): string {
  if (sessionId === '') return '_';
  if (TOKEN.test(sessionId) && sessionId !== '_' && !sessionId.startsWith('~')) return sessionId;
  return `~${Buffer.from(sessionId, 'utf8').toString('hex')}`;
}

/** A message's payload: one event's data, or a batch's `[[topic,data],\n…]`; UTF-8, written once into it. */
function payloadOf(batch: readonly Queued[]): Buffer {
  const single = batch.length === 1 ? batch[0] : undefined;
  if (single !== undefined) {
    const data = Buffer.allocUnsafe(single.bytes);
    writeText(data, single.json, single.bytes, 0);
    return data;
  }
  let size = OPEN.length - BETWEEN.length + END.length;
  for (const queued of batch) size += BETWEEN.length + topicPrefix(queued.topic).length + queued.bytes;
  const body = Buffer.allocUnsafe(size);
  let at = 0;
  for (const queued of batch) {
    at += (at === 0 ? OPEN : BETWEEN).copy(body, at);
    at += topicPrefix(queued.topic).copy(body, at);
    at = writeText(body, queued.json, queued.bytes, at);
  }
  END.copy(body, at);
  return body;
}
const OPEN = Buffer.from('[');
const BETWEEN = Buffer.from('],\n');
const LINE_BREAK = 0x0a;
const END = Buffer.from(']]');
/** `["topic",` in UTF-8, per topic (a few dozen topics exist). */
const prefixes = new Map<string, Buffer>();
function topicPrefix(topic: string): Buffer {
  let prefix = prefixes.get(topic);
  if (prefix === undefined) {
    prefix = Buffer.from(`[${JSON.stringify(topic)},`);
    if (prefixes.size < 1024) prefixes.set(topic, prefix);
  }
  return prefix;
}

/** A batch's `[topic, data]` pairs: each line parsed alone, or the whole (one line: a batch of a version before). */
function batchEvents(data: Uint8Array): [string, unknown][] {
  const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (bytes.indexOf(LINE_BREAK) < 0) return JSON.parse(textOf(bytes)) as [string, unknown][];
  const events: [string, unknown][] = [];
  // `[[topic,data],` then `[topic,data],` lines, the last `[topic,data]]`: the pair without its
  // line's first `[` (the first line's) and last byte.
  for (let start = 0; start < bytes.length;) {
    const found = bytes.indexOf(LINE_BREAK, start);
    const end = found < 0 ? bytes.length : found;
    events.push(JSON.parse(textOf(bytes.subarray(start === 0 ? 1 : start, end - 1))) as [string, unknown]);
    start = end + 1;
  }
  return events;
}

function topicMatches(pattern: string, topic: string): boolean {
  if (pattern === '*' || pattern === topic) return true;
  return pattern.endsWith('.*') && topic.startsWith(pattern.slice(0, -1));
}

/** An event waiting for its session's write. */
interface Queued {
  readonly topic: string;
  /** Its data as JSON (a message's payload, in UTF-8, when it goes alone). */
  readonly json: string;
  /** The JSON's length in UTF-8. */
  readonly bytes: number;
  readonly resolve: (seq: number) => void;
  readonly reject: (error: unknown) => void;
}

interface Tail {
  /** The stream sequence of the session's last message (0: none); the next write expects it. */
  streamSeq: number;
  /** The session's last event sequence. */
  seq: number;
  /** Events published and not yet written, in order. */
  readonly queue: Queued[];
  writing: boolean;
}

export interface JetStreamEventBusOptions {
  /** How long events are kept (what a resume can reach back to); default 1 hour. */
  readonly maxAgeMs?: number;
  /** Bytes kept at most (the oldest go first); default 1 GiB. */
  readonly maxBytes?: number;
  /** A listener threw or rejected. Default: a process warning. */
  readonly onListenerError?: (error: unknown, event: BusEvent) => void;
  /**
   * How long a session's write waits at most, when none is under way, for more of its events to go
   * with the first; default 8 ms (0: at once). It goes sooner with the node's next write to NATS (a
   * session log's append, another session's batch). Events published while a write is under way go
   * with the next.
   */
  readonly batchDelayMs?: number;
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
  readonly #batchDelayMs: number;

  private constructor(connection: ClusterConnection, options: JetStreamEventBusOptions) {
    this.#batchDelayMs = options.batchDelayMs ?? 8;
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

  /** The most bytes of JSON one batch carries: the server's largest payload (at most 1 MiB), less headroom. */
  #maxBatchBytes(): number {
    return Math.min(this.#connection.nc.info?.max_payload ?? 1024 ** 2, 1024 ** 2) - PAYLOAD_HEADROOM;
  }

  #subject(sessionId: string): string {
    return `${this.#prefix}${sessionToken(sessionId)}`;
  }

  /** The session's last message as the stream has it now. */
  async #readTail(sessionId: string): Promise<{ streamSeq: number; seq: number }> {
    try {
      // A timeout on a loaded server is tried again (a guess would only lose the race below).
      const last = await untilStored(this.#connection, () =>
        this.#jsm.streams.getMessage(this.#stream, { last_by_subj: this.#subject(sessionId) }),
      );
      if (last === null) return { streamSeq: 0, seq: 0 };
      const first = Number(last.header.get(SEQ_HEADER)) || 0;
      return {
        streamSeq: last.seq,
        seq: first + Math.max(1, Number(last.header.get(BATCH_HEADER)) || 1) - 1,
      };
    } catch {
      return { streamSeq: 0, seq: 0 };
    }
  }

  publish(topic: string, sessionId: string, data: unknown): Promise<number> {
    if (topic === '' || /[\s*>]/.test(topic))
      return Promise.reject(new ClusterError('invalid_options', `invalid topic ${JSON.stringify(topic)}`));
    let tail = this.#tails.get(sessionId);
    if (tail === undefined) {
      // A session new to this node is taken to have no message yet (most are: a terminal, a run
      // started here); the first write is fenced on that, and one that finds otherwise reads the
      // tail and writes again. Saves a read of the stream per new session.
      tail = { streamSeq: 0, seq: 0, queue: [], writing: false };
      this.#tails.set(sessionId, tail);
    }
    const known = tail;
    return new Promise<number>((resolve, reject) => {
      // Encoded once, here, and written once, into its message.
      const json = JSON.stringify(data ?? null);
      known.queue.push({ topic, json, bytes: byteLengthOf(json), resolve, reject });
      if (!known.writing) {
        known.writing = true;
        // A write from idle waits a moment for what comes with it (a step's events come within a
        // few ms of each other): fewer messages, each a round trip and a delivery. It goes sooner
        // with the node's next write to NATS (a session log's append, another session's batch).
        const drain = (): void => void this.#drain(sessionId, known);
        if (this.#batchDelayMs > 0) linger(this.#connection, drain, this.#batchDelayMs);
        else drain();
      }
    });
  }

  /**
   * Writes a session's queued events, one write at a time: what was published while a write was
   * under way goes as one message (a batch, up to the server's largest payload), so a session's throughput is
   * not one round trip per event, and every write is still fenced on the session's last message.
   */
  async #drain(sessionId: string, tail: Tail): Promise<void> {
    try {
      while (tail.queue.length > 0) {
        const most = this.#maxBatchBytes();
        let bytes = 0;
        let count = 0;
        for (const queued of tail.queue) {
          // `[topic,data],\n` in a batch: the topic's JSON and five bytes beside the data.
          const size = queued.bytes + Buffer.byteLength(queued.topic) + 7;
          if (count > 0 && bytes + size > most) break;
          bytes += size;
          count += 1;
        }
        const batch = tail.queue.splice(0, count);
        try {
          const first = await this.#write(sessionId, tail, batch);
          batch.forEach((queued, index) => queued.resolve(first + index));
        } catch (error) {
          tail.streamSeq = -1; // read the tail again before the next write
          for (const queued of batch) queued.reject(error);
        }
      }
    } finally {
      tail.writing = false;
    }
  }

  /** One message with the batch's events; answers the first one's sequence. */
  async #write(sessionId: string, known: Tail, batch: readonly Queued[]): Promise<number> {
    const single = batch.length === 1 ? batch[0] : undefined;
    const body = payloadOf(batch);
    for (let attempt = 0; ; attempt++) {
      if (known.streamSeq < 0) Object.assign(known, await this.#readTail(sessionId));
      const headers = natsHeaders();
      if (single !== undefined) headers.set(TOPIC_HEADER, single.topic);
      else headers.set(BATCH_HEADER, String(batch.length));
      headers.set(SEQ_HEADER, String(known.seq + 1));
      headers.set(SESSION_HEADER, sessionId);
      try {
        const expected = known.streamSeq;
        beforeWrite(this.#connection); // what lingers goes in this socket write
        const ack = await untilStored(this.#connection, () =>
          this.#js.publish(this.#subject(sessionId), body, {
            headers,
            msgID: `${this.#writer}:${sessionId}:${known.seq + 1}:${expected}`,
            expect: { lastSubjectSequence: expected },
          }),
        );
        known.streamSeq = ack.seq;
        const first = known.seq + 1;
        known.seq += batch.length;
        return first;
      } catch (error) {
        const raced = error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE;
        if (!raced || attempt >= 20) throw error;
        known.streamSeq = -1; // another node published to this session: read its tail again
      }
    }
  }

  subscribe(filter: EventFilter, listener: BusListener): EventSubscription {
    const topics = [...filter.topics];
    const { sessionId, afterSeq } = filter;
    const replay = sessionId !== undefined && afterSeq !== undefined;
    // A consumer of its own, gone a few seconds after its node however that node ended, deleted as
    // the subscription ends; ready once it exists (what is published from then on reaches it).
    const reader = new StreamReader(this.#connection, {
      stream: this.#stream,
      filter: sessionId === undefined ? `${this.#prefix}>` : this.#subject(sessionId),
      start: replay ? 'all' : 'new',
      maxMessages: 256,
      prefix: 'bus',
    });
    void (async () => {
      for await (const message of reader) {
        const first = Number(message.headers?.get(SEQ_HEADER)) || 0;
        const count = Number(message.headers?.get(BATCH_HEADER)) || 0;
        const sessionOf = message.headers?.get(SESSION_HEADER) ?? '';
        if (replay && first + Math.max(count, 1) - 1 <= (afterSeq ?? 0)) continue;
        let events: [string, unknown][];
        try {
          events =
            count > 0
              ? batchEvents(message.data)
              : [[message.headers?.get(TOPIC_HEADER) ?? '', JSON.parse(textOf(message.data))]];
        } catch {
          continue; // not one of ours
        }
        for (const [index, [topic, data]] of events.entries()) {
          const seq = first + index;
          if (reader.closed || (replay && seq <= (afterSeq ?? 0))) continue;
          if (!topics.some((pattern) => topicMatches(pattern, topic))) continue;
          const event: BusEvent = { topic, sessionId: sessionOf, seq, data };
          try {
            const held = listener(event);
            if (held !== undefined) await held; // (a listener that returns nothing costs no turn)
          } catch (error) {
            this.#onError(error, event);
          }
        }
      }
    })().catch(() => undefined); // (the reader's ready says why)
    const unsubscribe = (): void => reader.close();
    return { ready: reader.ready, unsubscribe, [Symbol.dispose]: unsubscribe };
  }
}
