// The harness's SessionStore over JetStream: one subject per session in one stream, so every node
// reads every session's log. Invariant: an append lands only when the log's last message is the
// one this store last saw for that session (JetStream's expected-last-subject-sequence), so once
// another node has loaded the log and appended — it resumed the run — a node that was stopped or
// cut off can never append to it again: its append is refused as `fenced`.
import { randomUUID } from 'node:crypto';
import {
  DeliverPolicy,
  JetStreamApiError,
  type JetStreamClient,
  type JetStreamManager,
} from '@nats-io/jetstream';
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
import { untilStored } from './internal/retry.js';

const SESSION_ID = /^[A-Za-z0-9_-]{1,128}$/;
const WRONG_LAST_SEQUENCE = 10071;

interface Tail {
  /** Stream sequence of the session's last message this store knows of (0: none). */
  lastStreamSeq: number;
  /** The next event's `seq` (events stored, and those waiting in `pending`). */
  count: number;
  /** Events appended but not written yet (write-behind): they go with the next write, or at flush. */
  pending: { event: SessionEvent; json: string }[];
  /** Writes of one session are chained so they land in order. */
  chain: Promise<unknown>;
  /** This node lost the run (its lease): every further append is refused here, before NATS. */
  relinquished?: boolean;
  /** A write failed: the log's tail here is no longer known, and every further append says why. */
  failed?: Error;
}

/**
 * Events written behind: a tool's result and the turn's end go with the next event that is
 * written at once, or at the turn's flush, in one message. Whatever must be durable before it acts —
 * the model's reply naming the tool calls, a take-over's claim, the end — is written at once (a
 * result not yet written when its node dies is a call in flight: the next node reports it so).
 */
const WRITE_BEHIND = new Set<string>(['tool_result', 'turn_step']);
/** Most characters of events in one message (NATS's default payload limit is 1 MiB). */
const MAX_MESSAGE_CHARS = 256 * 1024;

const tailOf = (lastStreamSeq: number, count: number): Tail => ({
  lastStreamSeq,
  count,
  pending: [],
  chain: Promise.resolve(),
});

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
    this.#tails.set(id, tailOf(0, 0));
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
    this.#check(sessionId, tail);
    const event = { ...body, seq: tail.count, at: Date.now() } as SessionEvent;
    tail.count += 1;
    tail.pending.push({ event, json: JSON.stringify(event) });
    if (WRITE_BEHIND.has(body.type)) return event;
    const written = await this.#drain(sessionId, tail);
    return written.get(event) ?? event;
  }

  #check(sessionId: string, tail: Tail): void {
    if (tail.relinquished === true)
      throw new ClusterError('fenced', `session ${sessionId} is held by another node now; this node lost it`);
    if (tail.failed !== undefined) throw tail.failed;
  }

  /**
   * Writes every pending event, in messages of up to MAX_MESSAGE_CHARS (an array of events when
   * more than one), each fenced on the session's last message. Answers the events as written (a
   * take-over's claim may move to after what the lost node still wrote).
   */
  #drain(sessionId: string, tail: Tail): Promise<Map<SessionEvent, SessionEvent>> {
    const written = new Map<SessionEvent, SessionEvent>();
    const write = tail.chain.then(async () => {
      while (tail.pending.length > 0) {
        this.#check(sessionId, tail);
        let chars = 0;
        let count = 0;
        for (const { json } of tail.pending) {
          if (count > 0 && chars + json.length > MAX_MESSAGE_CHARS) break;
          chars += json.length;
          count += 1;
        }
        const batch = tail.pending.slice(0, count);
        try {
          await this.#write(sessionId, tail, batch, written);
        } catch (error) {
          tail.pending.length = 0;
          tail.failed = error instanceof Error ? error : new Error(String(error));
          throw error;
        }
        tail.pending.splice(0, count);
      }
    });
    tail.chain = write.catch(() => undefined);
    return write.then(() => written);
  }

  async #write(
    sessionId: string,
    tail: Tail,
    batch: { event: SessionEvent; json: string }[],
    written: Map<SessionEvent, SessionEvent>,
  ): Promise<void> {
    const first = batch[0]!.event;
    const payload = batch.length === 1 ? batch[0]!.json : `[${batch.map(({ json }) => json).join(',')}]`;
    try {
      const ack = await untilStored(this.#connection, () =>
        this.#js.publish(this.#subject(sessionId), payload, {
          msgID: `${this.#writer}:${sessionId}:${first.seq}`,
          expect: { lastSubjectSequence: tail.lastStreamSeq },
        }),
      );
      tail.lastStreamSeq = ack.seq;
      for (const { event } of batch) written.set(event, event);
    } catch (error) {
      if (
        error instanceof JetStreamApiError &&
        error.code === WRONG_LAST_SEQUENCE &&
        batch.length === 1 &&
        first.type === 'resumed'
      ) {
        // A take-over claims the log whatever the node that lost it still wrote: read the tail
        // again and claim after it (that node's next append is refused).
        const { last, load } = await this.#read(sessionId);
        tail.lastStreamSeq = last;
        const again = { ...first, seq: load.events.length };
        const ack = await this.#js.publish(this.#subject(sessionId), JSON.stringify(again), {
          msgID: `${this.#writer}:${sessionId}:${again.seq}`,
          expect: { lastSubjectSequence: tail.lastStreamSeq },
        });
        tail.lastStreamSeq = ack.seq;
        tail.count = again.seq + 1;
        written.set(first, again);
        return;
      }
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
   * This node lost the session's run (its lease expired or was taken): nothing more of it is
   * appended from here, not even its end, so the node that takes it over finds the log open.
   */
  relinquish(sessionId: string): void {
    const tail = this.#tails.get(sessionId);
    if (tail !== undefined) tail.relinquished = true;
  }

  /** Writes what was written behind; everything appended so far is durable once it resolves. */
  async flush(sessionId: string): Promise<void> {
    const tail = this.#tails.get(sessionId);
    if (tail === undefined || (tail.pending.length === 0 && tail.failed === undefined)) {
      await tail?.chain;
      return;
    }
    this.#check(sessionId, tail);
    await this.#drain(sessionId, tail);
  }

  /**
   * Reads the log. The first read of a session on this store also takes its tail (what the next
   * append must follow); a store that already holds a tail keeps it, so a stale holder stays fenced.
   */
  async load(sessionId: string): Promise<SessionLoad> {
    const { load, last } = await this.#read(sessionId);
    if (!this.#tails.has(sessionId)) this.#tails.set(sessionId, tailOf(last, load.events.length));
    return load;
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
      const messages = await untilStored(this.#connection, async () => {
        const consumer = await this.#js.consumers.get(this.#stream, {
          filter_subjects: subject,
          deliver_policy: DeliverPolicy.All,
          inactive_threshold: 5_000,
        });
        return await consumer.consume();
      });
      for await (const message of messages) {
        try {
          // One event, or several written together (an array).
          const stored = message.json<SessionEvent | SessionEvent[]>();
          if (Array.isArray(stored)) events.push(...stored);
          else events.push(stored);
        } catch {
          corruptLines.push(events.length + corruptLines.length + 1);
        }
        if (message.seq >= last) break;
      }
      await messages.close();
    }
    return { load: { events, tornTail: false, corruptLines }, last };
  }

  async list(): Promise<string[]> {
    const prefix = this.#subject('');
    const info = await this.#jsm.streams.info(this.#stream, { subjects_filter: this.#subject('>') });
    return Object.keys(info.state.subjects ?? {}).map((subject) => subject.slice(prefix.length));
  }

  async end(sessionId: string): Promise<void> {
    const tail = this.#tails.get(sessionId);
    try {
      if (tail !== undefined && tail.relinquished !== true && tail.failed === undefined)
        await this.flush(sessionId);
    } finally {
      this.#tails.delete(sessionId);
    }
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
