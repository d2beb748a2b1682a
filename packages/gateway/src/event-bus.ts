// The event bus: where `pty.*` and `agent.*` events go between the parts that make them (a session's
// end, an agent's step) and the parts that deliver them (the gateway's connections). A seam: the
// default is in this process (`InMemoryEventBus`); a cluster provides one over a shared log (NATS
// JetStream), and the gateway works the same over either.
//
// The contract every implementation keeps:
// - Each event belongs to one session (`sessionId`, '' for none) and gets the next sequence number
//   of that session, from 1, at publish: one session's events are totally ordered, with no gaps
//   while they are retained.
// - A subscription receives, in sequence order per session, every event published after it was
//   made whose topic matches one of its patterns (`*`: every topic; `agent.*`: every topic that
//   starts with `agent.`; anything else: that topic exactly). With `sessionId` and `afterSeq` it
//   first receives that session's retained events after `afterSeq`, then goes on live, each event
//   once. Events older than what is retained are skipped: the subscriber sees the jump in `seq`.
// - A listener that returns a promise holds its subscription's next event until it settles; a
//   listener that throws or rejects is reported (`onListenerError`) and does not stop delivery.
import { topicMatches } from './protocol.js';

export interface BusEvent<T = unknown> {
  readonly topic: string;
  /** The session the event belongs to (a pty session, an agent run's session); '' for none. */
  readonly sessionId: string;
  /** 1, 2, 3… per session, assigned by the bus at publish. */
  readonly seq: number;
  readonly data: T;
}

export interface EventFilter {
  /** Topic patterns: `*`, `prefix.*`, or an exact topic. */
  readonly topics: readonly string[];
  /** Only this session's events. */
  readonly sessionId?: string;
  /** With `sessionId`: first the retained events after this sequence (0: from the first), then live. */
  readonly afterSeq?: number;
}

export type BusListener = (event: BusEvent) => void | Promise<void>;

export interface EventSubscription extends Disposable {
  /** Settles once the subscription is in place (at once in process; after a round trip elsewhere). */
  readonly ready: Promise<void>;
  /** Stops delivery; idempotent. */
  unsubscribe(): void;
}

export interface EventBus {
  /** Publishes an event; resolves with the sequence number the session's event got. */
  publish(topic: string, sessionId: string, data: unknown): Promise<number>;
  subscribe(filter: EventFilter, listener: BusListener): EventSubscription;
}

export interface InMemoryEventBusOptions {
  /** Events kept per session for `afterSeq` subscribers. Default 256. */
  readonly retainPerSession?: number;
  /**
   * Sessions whose events are kept; past it, those of the session published to longest ago are
   * dropped (its sequence goes on: counters are kept for 16 times as many sessions). Default 256.
   */
  readonly retainSessions?: number;
  /** A listener threw or rejected. Default: a process warning. */
  readonly onListenerError?: (error: unknown, event: BusEvent) => void;
}

/** One subscriber: its filter, and the events waiting while its listener's promise is pending. */
class Delivery {
  readonly #filter: EventFilter;
  readonly #listener: BusListener;
  readonly #onError: (error: unknown, event: BusEvent) => void;
  readonly #queue: BusEvent[] = [];
  #busy = false;
  active = true;

  constructor(
    filter: EventFilter,
    listener: BusListener,
    onError: (error: unknown, event: BusEvent) => void,
  ) {
    this.#filter = filter;
    this.#listener = listener;
    this.#onError = onError;
  }

  wants(event: BusEvent): boolean {
    if (this.#filter.sessionId !== undefined && this.#filter.sessionId !== event.sessionId) return false;
    return this.#filter.topics.some((pattern) => topicMatches(pattern, event.topic));
  }

  /** Delivers at once when nothing is pending (a synchronous listener sees it inside `publish`). */
  push(event: BusEvent): void {
    if (!this.active || !this.wants(event)) return;
    this.#queue.push(event);
    if (!this.#busy) this.#drain();
  }

  #drain(): void {
    this.#busy = true;
    while (this.active && this.#queue.length > 0) {
      const event = this.#queue.shift() as BusEvent;
      let pending: void | Promise<void>;
      try {
        pending = this.#listener(event);
      } catch (error) {
        this.#onError(error, event);
        continue;
      }
      if (pending instanceof Promise) {
        pending.catch((error: unknown) => this.#onError(error, event)).finally(() => this.#drain());
        return; // still busy until it settles
      }
    }
    this.#busy = false;
  }
}

/** A map that keeps the `capacity` keys used most recently. */
class Recent<V> extends Map<string, V> {
  readonly #capacity: number;
  constructor(capacity: number) {
    super();
    this.#capacity = capacity;
  }
  touch(key: string, fresh: () => V): V {
    const value = this.get(key) ?? fresh();
    this.delete(key);
    this.set(key, value);
    if (this.size > this.#capacity) this.delete(this.keys().next().value as string);
    return value;
  }
}

/** The in-process default: delivery inside `publish`, a bounded history per session for `afterSeq`. */
export class InMemoryEventBus implements EventBus {
  /** Per session: the last sequence given. */
  readonly #sequences: Recent<number>;
  readonly #history: Recent<BusEvent[]>;
  readonly #deliveries = new Set<Delivery>();
  readonly #retainPerSession: number;
  readonly #onError: (error: unknown, event: BusEvent) => void;

  constructor(options: InMemoryEventBusOptions = {}) {
    this.#retainPerSession = options.retainPerSession ?? 256;
    const sessions = options.retainSessions ?? 256;
    this.#history = new Recent(sessions);
    this.#sequences = new Recent(16 * sessions);
    this.#onError =
      options.onListenerError ??
      ((error, event) =>
        process.emitWarning(`an event listener failed on ${event.topic}: ${String(error)}`, 'AlephEventBus'));
  }

  publish(topic: string, sessionId: string, data: unknown): Promise<number> {
    return Promise.resolve(this.publishNow(topic, sessionId, data).seq);
  }

  /** `publish`, answering the event at once: every subscriber with nothing pending has seen it. */
  publishNow(topic: string, sessionId: string, data: unknown): BusEvent {
    const seq = this.#sequences.touch(sessionId, () => 0) + 1;
    this.#sequences.set(sessionId, seq);
    const event: BusEvent = { topic, sessionId, seq, data };
    if (this.#retainPerSession > 0) {
      const history = this.#history.touch(sessionId, () => []);
      history.push(event);
      if (history.length > this.#retainPerSession) history.shift();
    }
    for (const delivery of this.#deliveries) delivery.push(event);
    return event;
  }

  subscribe(filter: EventFilter, listener: BusListener): EventSubscription {
    const delivery = new Delivery({ ...filter, topics: [...filter.topics] }, listener, this.#onError);
    const { sessionId, afterSeq } = filter;
    if (sessionId !== undefined && afterSeq !== undefined)
      for (const event of this.#history.get(sessionId) ?? []) if (event.seq > afterSeq) delivery.push(event);
    this.#deliveries.add(delivery);
    const unsubscribe = (): void => {
      delivery.active = false;
      this.#deliveries.delete(delivery);
    };
    return { ready: Promise.resolve(), unsubscribe, [Symbol.dispose]: unsubscribe };
  }
}
