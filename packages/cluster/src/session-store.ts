// The harness's SessionStore over JetStream: one subject per session in one stream, so every node
// reads every session's log. Invariant: an append lands only when the log's last message is the
// one this store last saw for that session (JetStream's expected-last-subject-sequence), so once
// another node has loaded the log and appended — it resumed the run — a node that was stopped or
// cut off can never append to it again: its append is refused as `fenced`. A node that takes a run
// over claims the log (`claim`) before it reads it to plan from, so what it plans from is the whole
// log: a refused claim reads the log again, never places a stale plan after what it did not read.
// Writes of a session go one at a time, in order; what is appended while one is under way goes as
// one message (`Aleph-Batch` events, a JSON array), one fenced write for all. A tool's result and a
// turn's end resolve once queued (the run acts on nothing outside the log before its next append or
// flush, which wait for them and fail if they were refused); every other append resolves once stored.
import { randomUUID } from 'node:crypto';
import { JetStreamApiError, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/transport-node';
import type {
  SessionEvent,
  SessionEventBody,
  SessionLoad,
  SessionStore,
  SessionSummary,
} from '@aleph/harness';
import type { ClusterConnection } from './connection.js';
import { ensureStream } from './connection.js';
import { ClusterError } from './errors.js';
import { beforeWrite } from './internal/linger.js';
import { StreamReader } from './internal/reader.js';
import { untilStored } from './internal/retry.js';
import { textOf } from './internal/text.js';

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;
const WRONG_LAST_SEQUENCE = 10071;
/** A message holding several events of the session (a JSON array), in order. */
const BATCH_HEADER = 'Aleph-Batch';
/** A batch's JSON in bytes stays this far under the server's largest payload (headers go beside it). */
const PAYLOAD_HEADROOM = 64 * 1024;
/**
 * Appends after which a run acts on nothing outside the log until it appends again or flushes: they
 * resolve once queued, so a step's result and its end go in one write, and that write overlaps
 * whatever the run does next in its own process (the next reply is read; acting on it appends first).
 */
const QUEUED_TYPES = new Set<SessionEventBody['type']>(['tool_result', 'turn_step']);

/** An event waiting for its write. */
interface Pending {
  readonly event: SessionEvent;
  readonly json: string;
  /** Resolved once queued: its failure is said by the next append or flush. */
  readonly queued: boolean;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

interface Tail {
  /** Stream sequence of the session's last message this store knows of (0: none). */
  lastStreamSeq: number;
  /** Events stored in the log. */
  count: number;
  /** Events appended here (stored or queued): the next event's `seq`. */
  next: number;
  /** Events appended and not written yet, in order. */
  readonly queue: Pending[];
  /** The writes under way and queued: settles (never rejects) once the queue is written. */
  chain: Promise<unknown>;
  writing: boolean;
  /** A queued append was refused or failed: the next append or flush says so (`fenced` stays). */
  failure?: Error | undefined;
  /** This node lost the run (its lease): every further append is refused here, before NATS. */
  relinquished?: boolean;
  /** The `resumed` this store's claim appended, while nothing followed it: the run's own `resumed` is it. */
  claimed?: SessionEvent | undefined;
}

const newTail = (lastStreamSeq: number, count: number): Tail => ({
  lastStreamSeq,
  count,
  next: count,
  queue: [],
  chain: Promise.resolve(),
  writing: false,
});

/** A take-over's claim: made (the log read after it, the claim last), or not, the log having ended. */
export type SessionClaim =
  | { readonly kind: 'claimed'; readonly load: SessionLoad }
  | { readonly kind: 'ended'; readonly load: SessionLoad };

/** Claims refused in a row (each one an append of the node that lost the run) before giving up. */
const MAX_CLAIM_ATTEMPTS = 100;

export interface JetStreamSessionStoreOptions {
  /** The harness's `summarize` (a list of runs reads each log); injected so this package imports types only. */
  readonly summarize?: (sessionId: string, load: SessionLoad, live: boolean) => SessionSummary;
  /** Whether a run holds the session now (anywhere in the cluster): its lease is alive. */
  readonly isLive?: (sessionId: string) => boolean | Promise<boolean>;
}

function checkId(sessionId: string): void {
  if (!SESSION_ID.test(sessionId))
    throw new ClusterError('invalid_options', `invalid session id ${JSON.stringify(sessionId)}`);
}

export class JetStreamSessionStore implements SessionStore {
  readonly #connection: ClusterConnection;
  readonly #js: JetStreamClient;
  readonly #jsm: JetStreamManager;
  readonly #stream: string;
  readonly #subject: (sessionId: string) => string;
  readonly #options: JetStreamSessionStoreOptions;
  readonly #tails = new Map<string, Tail>();
  /** Sessions whose log refused this store's append (another node wrote it): kept past the run's `end`. */
  readonly #refused = new Set<string>();
  /** Names this store's writes, so a retried write is a duplicate of its own and never of another node's. */
  readonly #writer = randomUUID();

  private constructor(connection: ClusterConnection, options: JetStreamSessionStoreOptions) {
    this.#connection = connection;
    this.#js = connection.js;
    this.#jsm = connection.jsm;
    this.#stream = connection.names.sessionsStream;
    this.#subject = connection.names.sessionSubject;
    this.#options = options;
  }

  static async open(
    connection: ClusterConnection,
    options: JetStreamSessionStoreOptions = {},
  ): Promise<JetStreamSessionStore> {
    await ensureStream(connection.jsm, {
      name: connection.names.sessionsStream,
      subjects: [connection.names.sessionSubject('>')],
      num_replicas: connection.options.replicas,
    });
    return new JetStreamSessionStore(connection, options);
  }

  create(): Promise<string> {
    const id = randomUUID();
    this.#setTail(id, newTail(0, 0));
    return Promise.resolve(id);
  }

  async #tail(sessionId: string): Promise<Tail> {
    checkId(sessionId);
    let tail = this.#tails.get(sessionId);
    if (tail === undefined) {
      await this.load(sessionId);
      tail = this.#tails.get(sessionId);
    }
    return tail as Tail;
  }

  async append(sessionId: string, body: SessionEventBody): Promise<SessionEvent> {
    const tail = await this.#tail(sessionId);
    this.#throwFailure(tail);
    if (tail.relinquished === true) {
      this.#refused.add(sessionId);
      throw new ClusterError('fenced', `session ${sessionId} is held by another node now; this node lost it`);
    }
    const claimed = tail.claimed;
    tail.claimed = undefined;
    if (claimed !== undefined && body.type === 'resumed') return claimed; // the claim said it
    const event = { ...body, seq: tail.next, at: Date.now() } as SessionEvent;
    tail.next += 1;
    const queued = QUEUED_TYPES.has(body.type);
    const stored = new Promise<void>((resolve, reject) =>
      tail.queue.push({ event, json: JSON.stringify(event), queued, resolve, reject }),
    );
    if (queued) {
      stored.catch(() => undefined); // (said by the next append or flush)
      // Begun after what the run appends next in this turn of the event loop: one write for all.
      if (!tail.writing) {
        tail.writing = true;
        tail.chain = new Promise<void>((resolve) => setImmediate(resolve)).then(() =>
          this.#drain(sessionId, tail),
        );
      }
      return event;
    }
    if (!tail.writing) {
      tail.writing = true;
      tail.chain = this.#drain(sessionId, tail);
    }
    await stored;
    return event;
  }

  /** A queued append's failure, said once (a refusal stays: this node no longer holds the log). */
  #throwFailure(tail: Tail): void {
    const failure = tail.failure;
    if (failure === undefined) return;
    if (!(failure instanceof ClusterError && failure.code === 'fenced')) tail.failure = undefined;
    throw failure;
  }

  /** Writes the session's queue, one fenced write at a time, each taking all that is queued (within a payload). */
  async #drain(sessionId: string, tail: Tail): Promise<void> {
    try {
      while (tail.queue.length > 0) {
        const most =
          Math.min(this.#connection.nc.info?.max_payload ?? 1024 ** 2, 1024 ** 2) - PAYLOAD_HEADROOM;
        let bytes = 0;
        let count = 0;
        for (const pending of tail.queue) {
          bytes += Buffer.byteLength(pending.json) + 1;
          if (count > 0 && bytes > most) break;
          count += 1;
        }
        const batch = tail.queue.splice(0, count);
        try {
          await this.#write(sessionId, tail, batch);
          tail.count += batch.length;
          for (const pending of batch) pending.resolve();
        } catch (error) {
          // Nothing after a failed write is written: the log stays gap-free.
          const failed = [...batch, ...tail.queue.splice(0)];
          tail.next = tail.count;
          const fenced = error instanceof ClusterError && error.code === 'fenced';
          if (fenced) this.#refused.add(sessionId);
          if (fenced || failed.some((pending) => pending.queued))
            tail.failure = error instanceof Error ? error : new Error(String(error));
          for (const pending of failed) pending.reject(error);
        }
      }
    } finally {
      tail.writing = false;
    }
  }

  async #write(sessionId: string, tail: Tail, batch: readonly Pending[]): Promise<void> {
    const first = batch[0] as Pending;
    const headers = natsHeaders();
    if (batch.length > 1) headers.set(BATCH_HEADER, String(batch.length));
    const body = batch.length === 1 ? first.json : `[${batch.map((pending) => pending.json).join(',')}]`;
    try {
      const stored = untilStored(this.#connection, () =>
        this.#js.publish(this.#subject(sessionId), body, {
          headers,
          msgID: `${this.#writer}:${sessionId}:${first.event.seq}`,
          expect: { lastSubjectSequence: tail.lastStreamSeq },
        }),
      );
      // The node's lingering event batches go in this socket write, after it: stored after it.
      beforeWrite(this.#connection);
      const ack = await stored;
      tail.lastStreamSeq = ack.seq;
    } catch (error) {
      if (error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE)
        throw new ClusterError(
          'fenced',
          `session ${sessionId} was appended to by another node; this node no longer holds it`,
          { cause: error },
        );
      throw error;
    }
  }

  /**
   * A take-over's first write, before it reads the log to plan from: appends `resumed` after the
   * log's last message as read, which fences the node that lost the run (its next append is
   * refused). Refused — that node appended meanwhile — it reads the log again and claims after
   * that, so the log returned (the claim last) is all there is, and only this store appends to it
   * from now on. A log whose last event is `terminate` (the run ended meanwhile) is not claimed.
   */
  async claim(sessionId: string): Promise<SessionClaim> {
    checkId(sessionId);
    for (let attempt = 1; ; attempt++) {
      const { load, last } = await this.#read(sessionId);
      if (load.events.at(-1)?.type === 'terminate') return { kind: 'ended', load };
      const event: SessionEvent = { type: 'resumed', seq: load.events.length, at: Date.now() };
      try {
        const ack = await untilStored(this.#connection, () =>
          this.#js.publish(this.#subject(sessionId), JSON.stringify(event), {
            msgID: `${this.#writer}:${sessionId}:${event.seq}`,
            expect: { lastSubjectSequence: last },
          }),
        );
        this.#setTail(sessionId, { ...newTail(ack.seq, event.seq + 1), claimed: event });
        return { kind: 'claimed', load: { ...load, events: [...load.events, event] } };
      } catch (error) {
        const refused = error instanceof JetStreamApiError && error.code === WRONG_LAST_SEQUENCE;
        if (!refused) throw error;
        if (attempt >= MAX_CLAIM_ATTEMPTS)
          throw new ClusterError(
            'fenced',
            `session ${sessionId}: ${attempt} claims in a row were refused (another node keeps appending to it)`,
            { cause: error },
          );
      }
    }
  }

  /**
   * This node lost the session's run (its lease expired or was taken): nothing more of it is
   * appended from here, not even its end, so the node that takes it over finds the log open.
   */
  relinquish(sessionId: string): void {
    const tail = this.#tails.get(sessionId);
    if (tail !== undefined) tail.relinquished = true;
  }

  /** Resolves once every append so far is stored (JetStream acknowledged it); fails if one was refused. */
  async flush(sessionId: string): Promise<void> {
    const tail = this.#tails.get(sessionId);
    if (tail === undefined) return;
    await tail.chain;
    this.#throwFailure(tail);
  }

  /**
   * Reads the log. The first read of a session on this store also takes its tail (what the next
   * append must follow); a store that already holds a tail keeps it, so a stale holder stays fenced.
   */
  async load(sessionId: string): Promise<SessionLoad> {
    await this.#tails.get(sessionId)?.chain; // what this store queued is read back
    const { load, last } = await this.#read(sessionId);
    if (!this.#tails.has(sessionId)) this.#tails.set(sessionId, newTail(last, load.events.length));
    return load;
  }

  /** A tail of a session made or claimed here: nothing refused yet (a read's tail keeps what was). */
  #setTail(sessionId: string, tail: Tail): void {
    this.#tails.set(sessionId, tail);
    this.#refused.delete(sessionId);
  }

  /**
   * Whether the session's log refused an append of this store since its tail was taken (another
   * node wrote to it: it took the run over), or would refuse one (`relinquish`); known after `end`.
   */
  fenced(sessionId: string): boolean {
    return this.#refused.has(sessionId) || this.#tails.get(sessionId)?.relinquished === true;
  }

  async #read(sessionId: string): Promise<{ load: SessionLoad; last: number }> {
    checkId(sessionId);
    const subject = this.#subject(sessionId);
    let last: number;
    try {
      // A timeout on a loaded server is tried again: it must never read as an empty log.
      const message = await untilStored(this.#connection, () =>
        this.#jsm.streams.getMessage(this.#stream, { last_by_subj: subject }),
      );
      last = message?.seq ?? 0;
    } catch (error) {
      if (!(error instanceof JetStreamApiError)) throw error;
      last = 0; // the stream's answer: no message on this subject
    }
    const events: SessionEvent[] = [];
    const corruptLines: number[] = [];
    if (last > 0) {
      // A consumer of its own, deleted once the log is read (a NATS outage past 2 minutes fails the read).
      const reader = new StreamReader(this.#connection, {
        stream: this.#stream,
        filter: subject,
        start: 'all',
        maxMessages: 256,
        prefix: 'log',
        giveUpAfterMs: 120_000,
      });
      try {
        for await (const message of reader) {
          try {
            const parsed = JSON.parse(textOf(message.data)) as SessionEvent | SessionEvent[];
            if (message.headers?.has(BATCH_HEADER) === true && Array.isArray(parsed)) events.push(...parsed);
            else events.push(parsed as SessionEvent);
          } catch {
            corruptLines.push(events.length + corruptLines.length + 1);
          }
          if (message.seq >= last) break;
        }
      } finally {
        reader.close();
      }
    }
    return { load: { events, tornTail: false, corruptLines }, last };
  }

  async list(): Promise<string[]> {
    const prefix = this.#subject('');
    const info = await this.#jsm.streams.info(this.#stream, { subjects_filter: this.#subject('>') });
    return Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
  }

  async end(sessionId: string): Promise<void> {
    await this.#tails.get(sessionId)?.chain; // queued appends are written first
    this.#tails.delete(sessionId);
  }

  async summaries(): Promise<SessionSummary[]> {
    const summarize = this.#options.summarize;
    if (summarize === undefined) return [];
    const out: SessionSummary[] = [];
    for (const id of await this.list()) {
      const live = (await this.#options.isLive?.(id)) ?? false;
      const { load } = await this.#read(id);
      out.push(summarize(id, load, live));
    }
    return out;
  }
}
