// A log every node appends small records to and every node reads whole, in order: what one node
// must know of what the others did (the server's windows of agent runs, in which a file changed may
// be the model's). One stream (`<name>_records`), a subject per node; the oldest records go past
// `maxRecords`. A node reads what the stream holds before it goes on (`follow` settles once it has
// caught up), then each record as it comes; its own are left out (it knows them already).
import { RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { ensureStream, type ClusterConnection } from './connection.js';
import { StreamReader } from './internal/reader.js';

export interface JetStreamRecordLogOptions {
  /** The most records kept (the oldest go); default 100,000. */
  readonly maxRecords?: number;
  /** A record that could not be appended (NATS away longer than the client waits), for the caller's log. */
  readonly onError?: (error: unknown) => void;
}

export class JetStreamRecordLog {
  readonly #connection: ClusterConnection;
  readonly #options: JetStreamRecordLogOptions;
  readonly #stream: string;
  readonly #prefix: string;
  readonly #readers = new Set<StreamReader>();

  private constructor(connection: ClusterConnection, options: JetStreamRecordLogOptions) {
    this.#connection = connection;
    this.#options = options;
    this.#stream = `${connection.options.name}_records`;
    this.#prefix = `${connection.options.name}.records.`;
  }

  /** Makes the stream if absent; one made with another retention, storage or subjects is refused. */
  static async open(
    connection: ClusterConnection,
    options: JetStreamRecordLogOptions = {},
  ): Promise<JetStreamRecordLog> {
    const log = new JetStreamRecordLog(connection, options);
    await ensureStream(connection.jsm, {
      name: log.#stream,
      subjects: [`${log.#prefix}>`],
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: connection.options.replicas,
      max_msgs: options.maxRecords ?? 100_000,
    });
    return log;
  }

  /** Appends `record` (JSON) as this node's; settles once JetStream stored it, or reports why not. */
  async append(record: object): Promise<void> {
    try {
      await this.#connection.js.publish(
        `${this.#prefix}${this.#connection.options.node}`,
        JSON.stringify(record),
      );
    } catch (error) {
      this.#options.onError?.(error);
    }
  }

  /**
   * Hands every other node's record to `onRecord`, in the stream's order: settles once those the
   * stream held at the call are handed over, then goes on with each new one until `close`.
   */
  async follow(onRecord: (record: unknown, node: string) => void): Promise<void> {
    const info = await this.#connection.jsm.streams.info(this.#stream);
    const last = info.state.last_seq;
    let caughtUp: () => void = () => undefined;
    const settled = new Promise<void>((resolve) => (caughtUp = resolve));
    if (info.state.messages === 0) caughtUp();
    const reader = new StreamReader(this.#connection, {
      stream: this.#stream,
      filter: `${this.#prefix}>`,
      start: 'all',
      maxMessages: 256,
      prefix: 'records',
    });
    this.#readers.add(reader);
    const own = `${this.#prefix}${this.#connection.options.node}`;
    void (async () => {
      for await (const message of reader) {
        if (message.subject !== own) {
          try {
            onRecord(message.json(), message.subject.slice(this.#prefix.length));
          } catch {
            // not JSON: not a record of this log
          }
        }
        if (message.seq >= last) caughtUp();
      }
    })().catch((error: unknown) => this.#options.onError?.(error));
    await Promise.race([settled, reader.ready.then(() => settled)]);
  }

  /** Ends every `follow`. */
  close(): void {
    for (const reader of this.#readers) reader.close();
    this.#readers.clear();
  }
}
