// Durable runs: `submit` puts a run on a JetStream work queue; each node takes runs while it has
// room (`maxRuns`) and holds each by a lease — a KV entry with the bucket's TTL, created only when
// absent and renewed by revision, while the queue message is kept in progress. A node that dies or
// stops stops renewing: its lease expires and the message comes back, and another node takes it.
// Invariant: a node runs a ticket only while it holds the lease; when a renewal finds the lease
// someone else's, the handler's signal is aborted at once (the session store's fenced
// appends keep anything it still tries from landing). A run and a cancel are taken only when a node
// of the cluster sent them (a MAC under the cluster's secret): one that is not is dropped and said.
import { AckPolicy, DeliverPolicy, RetentionPolicy, type Consumer, type JsMsg } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import type { Subscription } from '@nats-io/transport-node';
import { ensureStream, type ClusterConnection } from './connection.js';
import { ClusterError } from './errors.js';
import { describeRefusal, ForwardAuth } from './internal/forward-auth.js';

export interface RunTicket {
  readonly runId: string;
  readonly sessionId: string;
  /** What the server needs to start the run (its request as JSON); never a secret. */
  readonly request: unknown;
}

export interface RunLease {
  /** Aborted when the lease is lost (the run moved to another node) or the run was cancelled. */
  readonly signal: AbortSignal;
  /** The ticket was delivered before (its run may have a log to resume from). */
  readonly redelivered: boolean;
  readonly node: string;
  /**
   * This node's last take or renewal of the lease was sent within the lease TTL: no other node can
   * hold the run now (its entry cannot have expired yet).
   */
  readonly current: boolean;
  /**
   * Resolves true once this node's hold is confirmed (at once while `current`, else by the next
   * renewal), false once the run is known to have moved to another node. Pending while NATS is away.
   */
  held(): Promise<boolean>;
}

export type RunHandler = (ticket: RunTicket, lease: RunLease) => Promise<void>;

export interface RunHolder {
  readonly node: string;
  readonly since: number;
}

export interface JetStreamRunQueueOptions {
  /**
   * The cluster's shared secret (as `ClusterTerminals`'), the same on every node, at least 16
   * characters: runs are submitted and cancelled with a MAC under a key derived from it, and a run
   * or cancel without a valid one is dropped. It is never sent.
   */
  readonly secret: string;
  /** Told of each run or cancel dropped for want of a valid MAC; default: a process warning. */
  readonly onError?: (error: unknown, what: string) => void;
}

const NS_PER_MS = 1_000_000;

export class JetStreamRunQueue {
  readonly #connection: ClusterConnection;
  readonly #consumer: Consumer;
  readonly #leases: KV;
  readonly #running: Map<string, AbortController>;
  /** The latest delivery of each run held here. */
  readonly #deliveries = new Map<string, { message: JsMsg }>();
  readonly #cancels: Subscription;
  readonly #auth: ForwardAuth;
  readonly #onError: (error: unknown, what: string) => void;
  #closed = false;
  /** The reason `close()` aborts the handlers with: a run stopped by it is handed back, not acknowledged. */
  readonly #closing = new ClusterError('closed', 'the node is closing');
  /** Every delivery being taken or run: `close()` resolves once they are all done. */
  readonly #takes = new Set<Promise<void>>();
  #loop: Promise<void> | undefined;
  #wake: (() => void) | undefined;

  private constructor(
    connection: ClusterConnection,
    parts: { consumer: Consumer; leases: KV; cancels: Subscription; auth: ForwardAuth },
    running: Map<string, AbortController>,
    onError: (error: unknown, what: string) => void,
  ) {
    const { consumer, leases, cancels, auth } = parts;
    this.#auth = auth;
    this.#onError = onError;
    this.#running = running;
    this.#connection = connection;
    this.#consumer = consumer;
    this.#leases = leases;
    this.#cancels = cancels;
  }

  static async open(
    connection: ClusterConnection,
    queueOptions: JetStreamRunQueueOptions,
  ): Promise<JetStreamRunQueue> {
    const { names, options, jsm, js, nc } = connection;
    if (typeof queueOptions?.secret !== 'string' || queueOptions.secret.length < 16)
      throw new ClusterError(
        'invalid_options',
        'run queue: secret (the cluster’s shared secret, at least 16 characters) is required: runs and cancels between nodes are authenticated with it',
      );
    const auth = new ForwardAuth(queueOptions.secret, options.name);
    const onError =
      queueOptions.onError ??
      ((error: unknown, what: string) => process.emitWarning(`${what}: ${String(error)}`, 'AlephRunQueue'));
    await ensureStream(jsm, {
      name: names.runsStream,
      subjects: [names.runsSubject],
      retention: RetentionPolicy.Workqueue,
      num_replicas: options.replicas,
    });
    const ackWait = options.leaseTtlMs * NS_PER_MS;
    let info;
    try {
      info = await jsm.consumers.info(names.runsStream, names.runsConsumer);
    } catch {
      info = undefined;
    }
    if (info === undefined) {
      await jsm.consumers.add(names.runsStream, {
        durable_name: names.runsConsumer,
        ack_policy: AckPolicy.Explicit,
        deliver_policy: DeliverPolicy.All,
        ack_wait: ackWait,
        max_deliver: -1,
        filter_subject: names.runsSubject,
      });
    } else if (info.config.ack_wait !== ackWait || info.config.ack_policy !== AckPolicy.Explicit) {
      throw new ClusterError(
        'incompatible',
        `consumer ${names.runsConsumer} exists with ack_wait ${(info.config.ack_wait ?? 0) / NS_PER_MS} ms, this node needs ${options.leaseTtlMs} ms (lease_ttl_secs must be the same on every node); it was left as it is`,
      );
    }
    const consumer = await js.consumers.get(names.runsStream, names.runsConsumer);
    const leases = await connection.kv(names.leasesBucket, options.leaseTtlMs);
    const running = new Map<string, AbortController>();
    const cancels = nc.subscribe(`${names.runsSubject}.cancel`, {
      callback: (_error, message) => {
        const verdict = auth.verify(message.subject, message.data, message.headers);
        if (verdict.kind === 'refused') {
          onError(
            new Error(`refused a run cancel: ${describeRefusal(verdict.reason)}`),
            'authenticating a cancel',
          );
          return;
        }
        const runId = message.string();
        running.get(runId)?.abort(new ClusterError('closed', `run ${runId} was cancelled`));
      },
    });
    return new JetStreamRunQueue(connection, { consumer, leases, cancels, auth }, running, onError);
  }

  async submit(ticket: RunTicket): Promise<void> {
    const subject = this.#connection.names.runsSubject;
    const body = Buffer.from(JSON.stringify(ticket));
    await this.#connection.js.publish(subject, body, {
      msgID: ticket.runId,
      headers: this.#auth.sign(subject, body),
    });
  }

  /** Cancels a run wherever it is held (a run still waiting is dropped when it is taken). */
  cancel(runId: string): void {
    const subject = `${this.#connection.names.runsSubject}.cancel`;
    const body = Buffer.from(runId);
    this.#connection.nc.publish(subject, body, { headers: this.#auth.sign(subject, body) });
  }

  /** The node holding a run now, if any. */
  async holder(runId: string): Promise<RunHolder | undefined> {
    const entry = await this.#leases.get(runId);
    if (entry === null || entry.operation !== 'PUT') return undefined;
    return entry.json<RunHolder>();
  }

  /** Runs held by this node now. */
  get running(): number {
    return this.#running.size;
  }

  /** Starts taking runs; at most `maxRuns` at once. */
  serve(handler: RunHandler): void {
    if (this.#loop !== undefined) throw new ClusterError('invalid_options', 'serve() was already called');
    this.#loop = this.#serve(handler);
  }

  async #serve(handler: RunHandler): Promise<void> {
    const { maxRuns } = this.#connection.options;
    while (!this.#closed) {
      const room = maxRuns - this.#running.size;
      if (room <= 0 || this.#connection.health !== 'ok') {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
          setTimeout(resolve, 500).unref();
        });
        continue;
      }
      try {
        const batch = await this.#consumer.fetch({ max_messages: room, expires: 1_000 });
        for await (const message of batch) {
          // Closing: what the open fetch still brings goes back at once, for another node.
          if (this.#closed) {
            message.nak();
            continue;
          }
          const take = this.#take(message, handler);
          this.#takes.add(take);
          void take.finally(() => this.#takes.delete(take));
        }
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 250).unref());
      }
    }
  }

  async #take(delivered: JsMsg, handler: RunHandler): Promise<void> {
    const verdict = this.#auth.signed(delivered.subject, delivered.data, delivered.headers);
    if (verdict.kind === 'refused') {
      // Not from a node of this cluster: never run, never delivered again.
      delivered.term();
      this.#onError(
        new Error(
          `refused a queued run (stream sequence ${delivered.seq}): ${describeRefusal(verdict.reason)}`,
        ),
        'authenticating a run',
      );
      return;
    }
    const ticket = delivered.json<RunTicket>();
    const node = this.#connection.options.node;
    const held = this.#deliveries.get(ticket.runId);
    if (held !== undefined) {
      // Redelivered to the node that runs it (its renewals could not reach NATS for a while): the
      // run goes on as it is, never a second time here; the newest delivery is the one kept in
      // progress and acknowledged at its end.
      held.message = delivered;
      delivered.working();
      return;
    }
    const current = { message: delivered };
    const message = (): JsMsg => current.message;
    const holder = JSON.stringify({ node, since: Date.now() } satisfies RunHolder);
    const ttl = this.#connection.options.leaseTtlMs;
    let revision: number;
    /** When the last take or renewal that succeeded was sent (its entry expires a TTL after it at the earliest). */
    let confirmedAt = Date.now();
    try {
      revision = await this.#leases.create(ticket.runId, holder);
    } catch {
      // Still held (its node may be alive and slow, or dead with the lease not yet expired).
      delivered.nak(Math.max(100, Math.floor(this.#connection.options.leaseTtlMs / 10)));
      return;
    }
    if (this.#closed) {
      // Closed while the lease was being taken: let it go and hand the run back.
      await this.#leases.delete(ticket.runId, { previousSeq: revision }).catch(() => undefined);
      delivered.nak();
      return;
    }
    const controller = new AbortController();
    this.#running.set(ticket.runId, controller);
    this.#deliveries.set(ticket.runId, current);
    // Told of the next renewal that succeeds (true) or of the fence (false).
    const waiting: ((held: boolean) => void)[] = [];
    const confirmed = (sent: number): void => {
      confirmedAt = sent;
      for (const resolve of waiting.splice(0)) resolve(true);
    };
    const fence = (why: string): void => {
      controller.abort(
        new ClusterError('fenced', `run ${ticket.runId} is no longer held by ${node} (${why})`),
      );
      for (const resolve of waiting.splice(0)) resolve(false);
    };
    const fenced = (): boolean =>
      controller.signal.reason instanceof ClusterError && controller.signal.reason.code === 'fenced';
    // Fenced only on proof: the lease is someone else's, or another node held it and let it go. A
    // renewal that fails for any other reason (NATS away, a reply lost, an entry expired during an
    // outage) is tried again at the next beat.
    const renewOnce = async (): Promise<void> => {
      const sent = Date.now();
      try {
        revision = await this.#leases.update(ticket.runId, holder, revision);
        message().working();
        confirmed(sent);
        return;
      } catch {
        // not by this revision: read what the lease is now
      }
      const entry = await this.#leases.get(ticket.runId);
      if (entry !== null && entry.operation !== 'PUT') {
        // Deleted: only a holder deletes its lease, at its run's end or as it hands the run back.
        fence('another node held it and let it go');
        return;
      }
      if (entry === null) {
        // Gone: expired during an outage while nobody took it, or taken, finished and forgotten
        // since (the run's queue message then is acknowledged, hence gone).
        if (!(await this.#queued(message().seq))) {
          fence('another node finished it');
          return;
        }
        revision = await this.#leases.create(ticket.runId, holder);
      } else if (entry.string() === holder) {
        revision = entry.revision; // our own renewal, whose answer was lost
      } else {
        fence(`held by ${entry.json<RunHolder>().node}`);
        return;
      }
      message().working();
      confirmed(sent);
    };
    let renewing = false;
    // Renewed until the handler returns, a cancelled run too (its end is still this node's to log).
    const renew = async (): Promise<void> => {
      if (renewing || fenced()) return;
      renewing = true;
      // NATS unreachable, or another node created the lease meanwhile: the next beat reads it again.
      await renewOnce().catch(() => undefined);
      renewing = false;
    };
    const isCurrent = (): boolean => !fenced() && Date.now() - confirmedAt < ttl;
    const beat = setInterval(
      () => void renew(),
      Math.max(100, Math.floor(this.#connection.options.leaseTtlMs / 3)),
    );
    // Back from an outage: the lease may have lapsed meanwhile; take it again now, not a beat later.
    const unwatch = this.#connection.onHealth((health) => void (health === 'ok' && renew()));
    try {
      await handler(ticket, {
        signal: controller.signal,
        redelivered: delivered.info.deliveryCount > 1,
        node,
        get current() {
          return isCurrent();
        },
        held: async () => {
          if (fenced()) return false;
          if (isCurrent()) return true;
          const answer = new Promise<boolean>((resolve) => waiting.push(resolve));
          void renew(); // now, not a beat later
          return await answer;
        },
      });
    } catch {
      /* the handler records its own failures in the run's log */
    } finally {
      clearInterval(beat);
      unwatch();
      for (const resolve of waiting.splice(0)) resolve(false); // (the handler waits for none of them)
      this.#running.delete(ticket.runId);
      this.#deliveries.delete(ticket.runId);
      const reason: unknown = controller.signal.reason;
      const fenced = reason instanceof ClusterError && reason.code === 'fenced';
      if (!fenced) {
        // A run the node's close stopped goes back (another node resumes it from its log); one
        // whose handler returned on its own is done, closing or not.
        if (reason === this.#closing) message().nak();
        else message().ack();
        await this.#leases.delete(ticket.runId, { previousSeq: revision }).catch(() => undefined);
      }
      this.#wake?.();
    }
  }

  /** Whether the run's queue message (stream sequence `seq`) is still in the queue: no node acknowledged it. */
  async #queued(seq: number): Promise<boolean> {
    const { jsm, names } = this.#connection;
    return (await jsm.streams.getMessage(names.runsStream, { seq })) !== null;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#wake?.();
    this.#cancels.unsubscribe();
    for (const controller of this.#running.values()) controller.abort(this.#closing);
    await this.#loop;
    // The takes under way: a handler stopped above returns, a take that was still getting its
    // lease hands the run back.
    while (this.#takes.size > 0) await Promise.allSettled([...this.#takes]);
  }
}
