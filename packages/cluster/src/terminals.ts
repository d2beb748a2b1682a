// Terminals across nodes. A terminal (a pty) stays on the node that forked it — its owner — and is
// driven from any node:
// - a terminal costs the cluster nothing until another node wants it: its owner publishes it — lists
//   it in the `<name>_terminals` bucket and appends its output to the `<name>_pty` stream (one
//   subject per session, the offset of each message's first byte in a header, an end marker after
//   the last byte), its scrollback first, so a viewer that comes late still reads from the oldest
//   byte kept — once another node asks for it (a call, a follow, a lookup), and every terminal while
//   another node has a client that wants every terminal's output (announced on
//   `<name>.pty.interest`); once published it stays so until it is forgotten;
// - a session method (`pty.input`, `resize`, `close`/`kill`, `snapshot`, `replay`) on another node
//   goes to the owner by NATS request/reply and is answered as the owner answers its own clients
//   (the call and its answer each authenticated, see ForwardAuth);
//   `pty.spawn` with `node` forks on that node the same way (the new terminal is published at once);
// - a client of another node follows the output from the stream (a consumer of its own from the
//   message holding its offset), paced by that client's own backlog: a slow client stops the
//   consumer's pulls, and its node reports the client's acknowledged offset to the owner, which
//   holds the pty while every remote viewer is more than `windowBytes` behind (a client that went
//   is kept as a viewer, at its last acknowledged offset, for the detach grace period, so a client
//   that comes back through another node resumes without a loss);
// - every node watches the others' registrations: a node not seen for the lease TTL is lost, and its
//   sessions end for every client with `pty.exit` reason `node_lost` (one node claims each, by
//   revision, so it is said once).
import { type JetStreamClient, type JetStreamManager, type PubAck } from '@nats-io/jetstream';
import type { KV } from '@nats-io/kv';
import {
  headers as natsHeaders,
  RequestError,
  TimeoutError,
  type Msg,
  type Subscription,
} from '@nats-io/transport-node';
import type {
  BusEvent,
  BusListener,
  ErrorCodeName,
  EventBus,
  ForwardedMethod,
  MethodParams,
  MethodResult,
  RemoteTerminals,
  RemoteViewer,
} from '@aleph/gateway';
import { ensureStream, type ClusterConnection } from './connection.js';
import { sessionToken } from './event-bus.js';
import { ClusterError } from './errors.js';
import { describeRefusal, ForwardAuth } from './internal/forward-auth.js';
import { StreamReader } from './internal/reader.js';

const OFFSET_HEADER = 'Aleph-Offset';
const EXIT_HEADER = 'Aleph-Exit';
const FORWARDED = new Set<string>([
  'pty.input',
  'pty.resize',
  'pty.close',
  'pty.kill',
  'pty.snapshot',
  'pty.replay',
]);
/** Most bytes in one stream message (fewer, larger messages: fewer acknowledgements per MiB). */
const MAX_MESSAGE_BYTES = 256 * 1024;
/** Most bytes sent to a client in one piece (a client's frame carries at most this much). */
const MAX_FRAME_BYTES = 64 * 1024;
/** How often a follower tells the owner how far its client is, while nothing changes. */
const REPORT_EVERY_MS = 500;
/** A viewer not reported for this long has gone (its node died or it left): it is kept as detached. */
const VIEWER_STALE_MS = 3 * REPORT_EVERY_MS;
/** Acks are reported at most this often (the latest one always)… */
const ACK_REPORT_MS = 50;
/** …or as soon as the client has read this much more since the last report. */
const ACK_REPORT_BYTES = 1024 * 1024;
/** How long a lookup waits for a node's answer to "is this session yours?". */
const WHERE_TIMEOUT_MS = 2_000;

type ExitInfo = { exitCode: number | null; signal: string | null; reason: string };
type ListItem = MethodResult<'pty.list'>[number];

/** One of this node's own terminals, as the gateway's pty manager has it (a PtySession). */
export interface HostSession {
  readonly id: string;
  readonly pid: number;
  readonly command: string;
  readonly args: readonly string[];
  readonly cols: number;
  readonly rows: number;
  readonly createdAt: number;
  /** Its recent output: offsets `start` to `end`; `read` answers the bytes from an offset on. */
  readonly scrollback: {
    readonly start: number;
    readonly end: number;
    read(fromOffset?: number): { readonly offset: number; readonly data: Buffer };
  };
  readonly exitInfo: ExitInfo | undefined;
  /** `chunk` is the listener's to keep (the pty session copies each read for its listeners). */
  onData(listener: (chunk: Buffer, offset: number) => void): Disposable;
  onExit(listener: (info: ExitInfo) => void): Disposable;
  hold(): Disposable;
  watch(): Disposable;
}

/** This node's terminals: the pty manager (a PtyManager) and the gateway that serves them. */
export interface TerminalHost {
  on(event: 'spawn', listener: (session: HostSession) => void): unknown;
  on(event: 'forget', listener: (sessionId: string) => void): unknown;
  off(event: 'spawn', listener: (session: HostSession) => void): unknown;
  off(event: 'forget', listener: (sessionId: string) => void): unknown;
  get(sessionId: string): HostSession | undefined;
  list(): HostSession[];
  /** Runs a session method (or `pty.list`, `pty.spawn`) on this node's sessions (Gateway.callLocal). */
  callLocal(method: ForwardedMethod | 'pty.list' | 'pty.spawn', params: unknown): Promise<unknown>;
}

export interface ClusterTerminalsOptions {
  /**
   * The cluster's shared secret (the server passes its gateway token), the same on every node, at
   * least 16 characters: every call, report and announcement a node sends another is authenticated
   * with a key derived from it, and one without a valid MAC is refused. It is never sent.
   */
  readonly secret: string;
  /**
   * Remote viewers this far behind (all of them) hold the owner's pty; default 16 MiB (what they have
   * not read waits in the stream, not in the owner: a window wider than a moment's lag at full
   * speed keeps a fast viewer from holding the pty).
   */
  readonly windowBytes?: number;
  /** Bytes a node publishes without an answer from the stream before it holds the pty; default 16 MiB. */
  readonly publishWindowBytes?: number;
  /** How long a viewer that went is waited for; default 60 s (the gateway's detach grace). */
  readonly detachGraceMs?: number;
  /** How long the output stream keeps a session's output; default 1 hour. */
  readonly maxAgeMs?: number;
  /** Bytes the output stream keeps at most (the oldest go first); default 1 GiB. */
  readonly maxBytes?: number;
  /** How long a forwarded call waits for its owner; default 10 s. */
  readonly requestTimeoutMs?: number;
  readonly onError?: (error: unknown, what: string) => void;
  /**
   * Makes the error a client gets (the server passes the gateway's `GatewayError`); default: an
   * Error with `code` and `data`.
   */
  readonly makeError?: (code: ErrorCodeName, message: string, data?: Record<string, unknown>) => Error;
}

/** A terminal as the cluster knows it: what its node's session says of it, and that node. */
interface Registration extends Pick<HostSession, 'pid' | 'command' | 'args' | 'cols' | 'rows' | 'createdAt'> {
  readonly node: string;
  /** Set once it ended (on its node), or once its node was lost. */
  readonly exit?: ExitInfo;
  readonly endedAt?: number;
}

interface Known {
  readonly registration: Registration;
  readonly revision: number;
}

interface ViewerReport {
  acked: number;
  at: number;
  left: boolean;
}

/** One of this node's sessions: its output log in the stream, and who follows it from elsewhere. */
class Published {
  readonly session: HostSession;
  /** (offset, stream sequence) of each message the stream acknowledged, oldest first. */
  readonly index: { offset: number; seq: number }[] = [];
  readonly viewers = new Map<string, ViewerReport>();
  /** The next message's chunks so far (`pendingBytes` in all), joined as it goes. */
  readonly pending: Buffer[] = [];
  pendingBytes = 0;
  firstOffset = 0;
  /** The offset after the last byte taken for the stream (what is below it was appended). */
  nextOffset = 0;
  inFlightBytes = 0;
  scheduled = false;
  chain: Promise<unknown> = Promise.resolve();
  flowHold: Disposable | undefined;
  publishHold: Disposable | undefined;
  watch: Disposable | undefined;
  ended = false;
  /** The cluster declared it lost (this node was stopped or cut off past the TTL): it is being closed. */
  closing = false;
  readonly disposables: Disposable[] = [];

  constructor(session: HostSession) {
    this.session = session;
  }
}

/** A connection of this node following another node's session. */
class Feed {
  readonly viewer: RemoteViewer;
  readonly sessionId: string;
  readonly owner: string;
  next: number;
  readonly start: number;
  stopped = false;
  /** Set when the end marker was read: the output is complete. */
  exit: ExitInfo | undefined;
  reader: StreamReader | undefined;
  wake: (() => void) | undefined;
  lastReport = 0;
  /** The acknowledged offset last reported. */
  lastReported = 0;
  reportTimer: NodeJS.Timeout | undefined;
  ackTimer: NodeJS.Timeout | undefined;
  readonly done: Promise<void>;
  finish: () => void = () => undefined;
  idleSince = Date.now();

  constructor(viewer: RemoteViewer, sessionId: string, owner: string, from: number) {
    this.viewer = viewer;
    this.sessionId = sessionId;
    this.owner = owner;
    this.next = from;
    this.start = from;
    this.done = new Promise((resolve) => (this.finish = resolve));
  }
}

type Reply = { r: unknown } | { e: { code: string; message: string; data?: unknown } };

export class ClusterTerminals implements RemoteTerminals {
  readonly #connection: ClusterConnection;
  readonly #js: JetStreamClient;
  readonly #jsm: JetStreamManager;
  readonly #terminals: KV;
  readonly #bus: EventBus;
  readonly #options: Required<Omit<ClusterTerminalsOptions, 'secret'>>;
  readonly #auth: ForwardAuth;
  /** Refused messages not logged yet (one line a second at most, however many come). */
  #refused = { count: 0, loggedAt: 0 };
  readonly #stream: string;
  readonly #prefix: string;
  readonly #node: string;
  /** Every session of the cluster this node knows of, by id (from the bucket's watch). */
  readonly #known = new Map<string, Known>();
  /** Each node's last registration renewal seen (this node's clock). */
  readonly #seen = new Map<string, number>();
  /** Nodes that left (their registration deleted). */
  readonly #departed = new Set<string>();
  readonly #published = new Map<string, Published>();
  /** Nodes that have a client wanting every terminal's output, and when they last said so. */
  readonly #wantAll = new Map<string, number>();
  readonly #feeds = new Map<RemoteViewer, Map<string, Feed>>();
  /** Open connections that want every session's output (no `sessions` named): new sessions reach them. */
  readonly #broad = new Set<RemoteViewer>();
  readonly #inputChains = new Map<string, Promise<unknown>>();
  readonly #subscriptions: Subscription[] = [];
  readonly #timers: NodeJS.Timeout[] = [];
  readonly #watches: { stop(): void }[] = [];
  #host: TerminalHost | undefined;
  #okSince = Date.now();
  #lastSweep = Date.now();
  #closed = false;
  readonly #onSpawn = (session: HostSession): void => {
    if (this.#othersWantAll()) this.#publishSession(session);
  };
  readonly #onForget = (sessionId: string): void => this.#forget(sessionId);

  private constructor(
    connection: ClusterConnection,
    terminals: KV,
    bus: EventBus,
    options: ClusterTerminalsOptions,
  ) {
    this.#connection = connection;
    this.#js = connection.js;
    this.#jsm = connection.jsm;
    this.#terminals = terminals;
    this.#bus = bus;
    this.#node = connection.options.node;
    this.#stream = `${connection.options.name}_pty`;
    this.#prefix = `${connection.options.name}.pty.`;
    this.#auth = new ForwardAuth(options.secret, connection.options.name);
    this.#options = {
      windowBytes: options.windowBytes ?? 16 * 1024 * 1024,
      publishWindowBytes: options.publishWindowBytes ?? 16 * 1024 * 1024,
      detachGraceMs: options.detachGraceMs ?? 60_000,
      maxAgeMs: options.maxAgeMs ?? 3_600_000,
      maxBytes: options.maxBytes ?? 1024 ** 3,
      requestTimeoutMs: options.requestTimeoutMs ?? 10_000,
      makeError:
        options.makeError ?? ((code, message, data) => Object.assign(new Error(message), { code, data })),
      onError:
        options.onError ??
        ((error, what) => process.emitWarning(`${what}: ${String(error)}`, 'AlephClusterTerminals')),
    };
  }

  /** Opens the output stream and the terminals bucket, and starts watching the cluster's nodes. */
  static async open(
    connection: ClusterConnection,
    bus: EventBus,
    options: ClusterTerminalsOptions,
  ): Promise<ClusterTerminals> {
    const { name, replicas, leaseTtlMs } = connection.options;
    // Without it any publisher on the cluster's subjects could type into every terminal.
    if (typeof options?.secret !== 'string' || options.secret.length < 16)
      throw new ClusterError(
        'invalid_options',
        'terminals: secret (the cluster’s shared secret, at least 16 characters) is required: calls between nodes are authenticated with it',
      );
    await ensureStream(connection.jsm, {
      name: `${name}_pty`,
      subjects: [`${name}.pty.>`],
      num_replicas: replicas,
      max_age: (options.maxAgeMs ?? 3_600_000) * 1_000_000,
      max_bytes: options.maxBytes ?? 1024 ** 3,
    });
    const terminals = await connection.kv(`${name}_terminals`);
    await connection.kv(connection.names.nodesBucket, leaseTtlMs); // exists: the connection made it
    const self = new ClusterTerminals(connection, terminals, bus, options);
    await self.#start();
    return self;
  }

  get #ttl(): number {
    return this.#connection.options.leaseTtlMs;
  }

  #subject(sessionId: string): string {
    return `${this.#prefix}${sessionToken(sessionId)}`;
  }

  #inbox(node: string, what: 'pty' | 'flow'): string {
    return `${this.#connection.names.nodeInbox(node)}.${what}`;
  }

  async #start(): Promise<void> {
    const { nc } = this.#connection;
    this.#subscriptions.push(
      nc.subscribe(this.#inbox(this.#node, 'pty'), { callback: (_e, message) => void this.#serve(message) }),
      nc.subscribe(this.#inbox(this.#node, 'flow'), { callback: (_e, message) => this.#onReport(message) }),
      nc.subscribe(this.#interestSubject, { callback: (_e, message) => this.#onInterest(message) }),
    );
    await this.#watch(`${this.#connection.options.name}_terminals`, (key, value, revision) =>
      this.#onTerminal(key, value, revision),
    );
    await this.#watch(this.#connection.names.nodesBucket, (key, value) => {
      if (value !== undefined) this.#seen.set(key, Date.now());
      else if (this.#seen.delete(key)) this.#departed.add(key);
    });
    this.#connection.onHealth((health) => {
      if (health !== 'ok') return;
      // Back: what was not seen meanwhile says nothing; every node gets a full TTL again.
      this.#okSince = Date.now();
      for (const node of this.#seen.keys()) this.#seen.set(node, Date.now());
    });
    const sweep = setInterval(() => void this.#sweep(), Math.max(100, Math.min(1_000, this.#ttl / 8)));
    sweep.unref();
    // While a client here wants every terminal's output, the other nodes are reminded of it.
    const interest = setInterval(
      () => {
        if (this.#broad.size > 0) this.#announce(true);
      },
      Math.max(100, Math.floor(this.#ttl / 3)),
    );
    interest.unref();
    this.#timers.push(sweep, interest);
  }

  get #interestSubject(): string {
    return `${this.#connection.options.name}.pty.interest`;
  }

  /** Publishes to other nodes, authenticated (see ForwardAuth). */
  #send(subject: string, body: string): void {
    const data = Buffer.from(body);
    this.#connection.nc.publish(subject, data, { headers: this.#auth.sign(subject, data) });
  }

  /**
   * Whether a message is from a node of this cluster; one that is not is logged (a line a second at
   * most, counting the others) and its refusal returned.
   */
  #refusal(message: Msg, what: string): { reason: string; why: string } | undefined {
    const verdict = this.#auth.verify(message.subject, message.data, message.headers);
    if (verdict.kind === 'accepted') return undefined;
    const why = describeRefusal(verdict.reason);
    this.#refused.count += 1;
    const now = Date.now();
    if (now - this.#refused.loggedAt >= 1_000) {
      const more =
        this.#refused.count > 1 ? ` (${this.#refused.count - 1} more refused since the last line)` : '';
      this.#options.onError(
        new Error(`refused ${what} on ${message.subject}: ${why}${more}`),
        'authenticating a message from another node',
      );
      this.#refused = { count: 0, loggedAt: now };
    }
    return { reason: verdict.reason, why };
  }

  #announce(on: boolean): void {
    try {
      this.#send(this.#interestSubject, JSON.stringify({ node: this.#node, on }));
    } catch {
      /* NATS away: the next reminder tells */
    }
  }

  /** Another node has (or no longer has) a client that wants every terminal's output. */
  #onInterest(message: Msg): void {
    let interest: { node?: unknown; on?: unknown };
    if (this.#refusal(message, 'an interest announcement') !== undefined) return;
    try {
      interest = message.json();
    } catch {
      return;
    }
    if (typeof interest.node !== 'string' || interest.node === this.#node) return;
    if (interest.on !== true) {
      this.#wantAll.delete(interest.node);
      return;
    }
    const before = this.#othersWantAll();
    this.#wantAll.set(interest.node, Date.now());
    if (!before && this.#host !== undefined)
      for (const session of this.#host.list()) this.#publishSession(session);
  }

  /** Whether a live node other than this one wants every terminal's output now. */
  #othersWantAll(): boolean {
    const now = Date.now();
    for (const [node, at] of this.#wantAll) {
      if (now - at <= this.#ttl) return true;
      this.#wantAll.delete(node);
    }
    return false;
  }

  /**
   * Follows a bucket: its entries now, then each change (`value` undefined: deleted), through a
   * consumer of this node's own (gone a few seconds after this node, however it ended).
   */
  async #watch(
    bucket: string,
    onEntry: (key: string, value: string | undefined, revision: number) => void,
  ): Promise<void> {
    const prefix = `$KV.${bucket}.`;
    const reader = new StreamReader(this.#connection, {
      stream: `KV_${bucket}`,
      filter: `${prefix}>`,
      start: 'last_per_subject',
      maxMessages: 256,
      prefix: 'watch',
      // Read anew from where it was: what it missed meanwhile says nothing yet (a full TTL again).
      onRestart: () => (this.#okSince = Date.now()),
    });
    this.#watches.push({ stop: () => reader.close() });
    void (async () => {
      for await (const message of reader) {
        const operation = message.headers?.get('KV-Operation') ?? '';
        const key = message.subject.slice(prefix.length);
        onEntry(
          key,
          operation === 'DEL' || operation === 'PURGE' ? undefined : message.string(),
          message.seq,
        );
      }
    })().catch((error: unknown) => this.#options.onError(error, `watching ${bucket}`));
    await reader.ready;
  }

  /** Starts serving this node's own terminals to the cluster (once the gateway exists). */
  attach(host: TerminalHost): void {
    this.#host = host;
    host.on('spawn', this.#onSpawn);
    host.on('forget', this.#onForget);
    if (this.#othersWantAll()) for (const session of host.list()) this.#publishSession(session);
  }

  // ---- the owner's side ------------------------------------------------------------------------

  #publishSession(session: HostSession): void {
    if (this.#published.has(session.id) || this.#closed) return;
    const published = new Published(session);
    this.#published.set(session.id, published);
    const exit = session.exitInfo;
    const registration = this.#registration(session);
    this.#known.set(session.id, { registration, revision: 0 });
    this.#terminals
      .put(sessionToken(session.id), JSON.stringify({ ...registration, id: session.id }))
      .catch((error: unknown) => this.#options.onError(error, `registering terminal ${session.id}`));
    // What it wrote so far (as far as its scrollback reaches back), then what it writes from now on:
    // read and listened to in one turn, so no byte comes twice or not at all.
    const { offset, data } = session.scrollback.read(0);
    published.nextOffset = offset;
    if (data.length > 0) this.#onOutput(published, data, offset);
    if (exit !== undefined) {
      this.#ended(published, exit, false);
      return;
    }
    published.disposables.push(
      session.onData((chunk, at) => this.#onOutput(published, chunk, at)),
      session.onExit((info) => this.#onEnded(published, info)),
    );
  }

  #registration(session: HostSession): Registration {
    const exit = session.exitInfo;
    return {
      node: this.#node,
      pid: session.pid,
      command: session.command,
      args: session.args,
      cols: session.cols,
      rows: session.rows,
      createdAt: session.createdAt,
      ...(exit === undefined ? {} : { exit, endedAt: Date.now() }),
    };
  }

  #onOutput(published: Published, chunk: Buffer, offset: number): void {
    // Bytes below nextOffset were taken already (from the scrollback).
    const skip = Math.max(0, Math.min(chunk.length, published.nextOffset - offset));
    let rest = skip === 0 ? chunk : chunk.subarray(skip);
    let at = offset + skip;
    if (rest.length === 0) return;
    published.nextOffset = at + rest.length;
    while (published.pendingBytes + rest.length >= MAX_MESSAGE_BYTES) {
      const room = MAX_MESSAGE_BYTES - published.pendingBytes;
      this.#push(published, rest.subarray(0, room), at);
      this.#flush(published);
      rest = rest.subarray(room);
      at += room;
    }
    if (rest.length > 0) this.#push(published, rest, at);
    if (!published.scheduled && published.pendingBytes > 0) {
      published.scheduled = true;
      setImmediate(() => this.#flush(published));
    }
  }

  #push(published: Published, chunk: Buffer, offset: number): void {
    // A listener's chunk is its own (the pty session copies each read once for its listeners): kept
    // as it is until the message is made, its bytes copied once, into the message.
    if (published.pendingBytes === 0) published.firstOffset = offset;
    published.pending.push(chunk);
    published.pendingBytes += chunk.length;
  }

  /** Appends what is pending as one message; publishes are pipelined, in order, within a window. */
  #flush(published: Published): void {
    published.scheduled = false;
    if (published.pendingBytes === 0) return;
    const chunks = published.pending.splice(0);
    const data = chunks.length === 1 ? (chunks[0] as Buffer) : Buffer.concat(chunks, published.pendingBytes);
    const offset = published.firstOffset;
    published.pendingBytes = 0;
    if (this.#connection.health !== 'ok') return; // NATS away: remote viewers see a gap; the pty goes on
    this.#append(published, data, offset);
    if (published.viewers.size > 0) this.#checkFlow(published);
  }

  #append(published: Published, data: Buffer, offset: number, exit?: ExitInfo): void {
    const headers = natsHeaders();
    headers.set(OFFSET_HEADER, String(offset));
    if (exit !== undefined) headers.set(EXIT_HEADER, JSON.stringify(exit));
    published.inFlightBytes += data.length;
    const entry = { offset, seq: 0 };
    published.index.push(entry);
    if (published.index.length > 20_000) published.index.splice(0, 10_000);
    const ack: Promise<PubAck> = this.#js.publish(this.#subject(published.session.id), data, { headers });
    this.#checkPublishWindow(published);
    published.chain = ack.then(
      (answer) => {
        entry.seq = answer.seq;
        published.inFlightBytes -= data.length;
        this.#checkPublishWindow(published);
      },
      (error: unknown) => {
        published.inFlightBytes -= data.length;
        this.#checkPublishWindow(published);
        this.#options.onError(error, `appending output of ${published.session.id}`);
      },
    );
  }

  #checkPublishWindow(published: Published): void {
    const over = published.inFlightBytes > this.#options.publishWindowBytes;
    if (over && published.publishHold === undefined) published.publishHold = published.session.hold();
    else if (!over && published.inFlightBytes <= this.#options.publishWindowBytes / 2) {
      published.publishHold?.[Symbol.dispose]();
      published.publishHold = undefined;
    }
  }

  #onEnded(published: Published, info: ExitInfo): void {
    this.#ended(published, info, true);
  }

  /** Its output is complete: the end marker after the last byte, and (`register`) the registration says so. */
  #ended(published: Published, info: ExitInfo, register: boolean): void {
    this.#flush(published);
    published.ended = true;
    if (this.#connection.health === 'ok')
      this.#append(published, Buffer.alloc(0), published.session.scrollback.end, info);
    published.flowHold?.[Symbol.dispose]();
    published.flowHold = undefined;
    published.watch?.[Symbol.dispose]();
    published.watch = undefined;
    const key = sessionToken(published.session.id);
    const known = this.#known.get(published.session.id);
    // Declared lost while this node was away: the registration keeps saying so.
    if (!register || published.closing || known?.registration.exit?.reason === 'node_lost') return;
    const registration = { ...(known?.registration ?? {}), exit: info, endedAt: Date.now() };
    this.#terminals
      .put(key, JSON.stringify({ ...registration, id: published.session.id }))
      .catch((error: unknown) => this.#options.onError(error, `ending terminal ${published.session.id}`));
  }

  #forget(sessionId: string): void {
    const published = this.#published.get(sessionId);
    if (published === undefined) return;
    this.#published.delete(sessionId);
    for (const disposable of published.disposables) disposable[Symbol.dispose]();
    published.flowHold?.[Symbol.dispose]();
    published.publishHold?.[Symbol.dispose]();
    published.watch?.[Symbol.dispose]();
    void this.#drop(sessionId);
  }

  /** Removes a session from the cluster: its registration and its output. */
  async #drop(sessionId: string, revision?: number): Promise<void> {
    try {
      await this.#terminals.delete(
        sessionToken(sessionId),
        revision === undefined ? undefined : { previousSeq: revision },
      );
    } catch {
      return; // another node did it, or changed it meanwhile
    }
    await this.#jsm.streams
      .purge(this.#stream, { filter: this.#subject(sessionId) })
      .catch((error: unknown) => this.#options.onError(error, `purging output of ${sessionId}`));
  }

  /** A follower's report: how far its client has acknowledged (or that it left). */
  #onReport(message: Msg): void {
    let report: { sessionId: string; viewer: string; acked: number; left?: boolean };
    if (this.#refusal(message, "a follower's report") !== undefined) return;
    try {
      report = message.json();
    } catch {
      return;
    }
    const published = this.#published.get(report.sessionId);
    if (published === undefined || typeof report.acked !== 'number') return;
    published.viewers.set(report.viewer, { acked: report.acked, at: Date.now(), left: report.left === true });
    this.#checkFlow(published);
  }

  /**
   * The pty is held while every remote viewer (those that went included, for the grace period) is
   * more than the window behind; it is watched (never idle-expired) while any follows it.
   */
  #checkFlow(published: Published): void {
    const now = Date.now();
    const end = published.session.scrollback.end;
    let lagging = 0;
    for (const [key, viewer] of published.viewers) {
      const gone = viewer.left || now - viewer.at > VIEWER_STALE_MS;
      if (gone && now - viewer.at > this.#options.detachGraceMs) {
        published.viewers.delete(key);
        continue;
      }
      if (end - viewer.acked > this.#options.windowBytes) lagging += 1;
    }
    const viewers = published.viewers.size;
    const hold = !published.ended && viewers > 0 && lagging === viewers;
    if (hold && published.flowHold === undefined) published.flowHold = published.session.hold();
    if (!hold && published.flowHold !== undefined) {
      published.flowHold[Symbol.dispose]();
      published.flowHold = undefined;
    }
    const watched = !published.ended && viewers > 0;
    if (watched && published.watch === undefined) published.watch = published.session.watch();
    if (!watched && published.watch !== undefined) {
      published.watch[Symbol.dispose]();
      published.watch = undefined;
    }
  }

  /** A forwarded call from another node, run here as this node's own client's would be. */
  async #serve(message: Msg): Promise<void> {
    let reply: Reply;
    const refusal = this.#refusal(message, 'a forwarded call');
    if (refusal !== undefined) {
      const error = {
        code: 'invalid_request',
        message: `node ${this.#node} refused the forwarded call: ${refusal.why}`,
        data: { reason: refusal.reason },
      };
      this.#respond(message, { e: error });
      return;
    }
    try {
      const { m: method, p: params } = message.json<{ m: string; p: { sessionId?: unknown } }>();
      reply = { r: await this.#local(method, params) };
    } catch (error) {
      // A GatewayError or a PtyError: its code, as the owner's own client would get it.
      const { code, data } = error as { code?: unknown; data?: unknown };
      reply =
        error instanceof Error && typeof code === 'string'
          ? { e: { code: ptyCode(code), message: error.message, data } }
          : { e: { code: 'internal_error', message: String((error as Error).message ?? error) } };
    }
    this.#respond(message, reply);
  }

  /** Answers a forwarded call, authenticated like the call (bound to its reply subject, unique per call). */
  #respond(message: Msg, reply: Reply): void {
    if (message.reply === undefined || message.reply === '') return;
    const data = Buffer.from(JSON.stringify(reply));
    message.respond(data, { headers: this.#auth.sign(message.reply, data) });
  }

  async #local(method: string, params: { sessionId?: unknown }): Promise<unknown> {
    const host = this.#host;
    if (host === undefined) throw this.#options.makeError('busy', `node ${this.#node} is starting: retry`);
    if (method === 'pty.list') return host.callLocal('pty.list', {});
    if (method === 'pty.spawn') return this.#spawnHere(host, params);
    const sessionId = typeof params?.sessionId === 'string' ? params.sessionId : '';
    if (method !== 'pty.where' && method !== 'pty.follow' && !FORWARDED.has(method))
      throw this.#options.makeError('method_not_found', `unknown method "${method}"`);
    // Another node wants this session: from now on the cluster knows it and has its output.
    const session = host.get(sessionId);
    if (session !== undefined) this.#publishSession(session);
    if (method === 'pty.where') return session === undefined ? null : this.#registration(session);
    if (method === 'pty.follow')
      return this.#followInfo(host, sessionId, (params as { fromOffset?: unknown }).fromOffset);
    return host.callLocal(method as ForwardedMethod, params);
  }

  /** Forks a terminal here for a client of another node: published at once (that client will want it). */
  async #spawnHere(host: TerminalHost, params: unknown): Promise<unknown> {
    const result = (await host.callLocal('pty.spawn', params)) as MethodResult<'pty.spawn'>;
    const session = host.get(result.sessionId);
    if (session !== undefined) this.#publishSession(session);
    return result;
  }

  /** Where a follower of this node's session starts: the offset it gets, and the message holding it. */
  #followInfo(
    host: TerminalHost,
    sessionId: string,
    fromOffset: unknown,
  ): { offset: number; end: number; exit: ExitInfo | null; seq: number } {
    const session = host.get(sessionId);
    const published = this.#published.get(sessionId);
    if (session === undefined || published === undefined)
      throw this.#options.makeError('unknown_session', `unknown session ${sessionId}`);
    const end = session.scrollback.end;
    const first = published.index[0]?.offset ?? end;
    const offset = Math.min(Math.max(Number(fromOffset) || 0, first), end);
    // The last message the stream holds that starts at or before the offset (earlier is harmless:
    // the follower skips what it has); none yet, the subject's first.
    let seq = 1;
    for (let i = published.index.length - 1; i >= 0; i--) {
      const entry = published.index[i]!;
      if (entry.seq > 0 && entry.offset <= offset) {
        seq = entry.seq;
        break;
      }
    }
    return { offset, end, exit: session.exitInfo ?? null, seq };
  }

  // ---- any node's side: the cluster's sessions ---------------------------------------------

  #onTerminal(key: string, value: string | undefined, revision: number): void {
    const sessionId = sessionOfKey(key);
    if (sessionId === undefined) return;
    if (value === undefined) {
      this.#known.delete(sessionId);
      return;
    }
    try {
      const registration = JSON.parse(value) as Registration;
      this.#known.set(sessionId, { registration, revision });
      if (registration.exit === undefined && registration.node !== this.#node)
        for (const viewer of this.#broad) this.sync(viewer); // a new session: broad viewers follow it
    } catch {
      /* not one of ours */
    }
  }

  async #locate(sessionId: string): Promise<Known | undefined> {
    return (await this.#lookup(sessionId)) ?? (await this.#where(sessionId));
  }

  /**
   * Asks every other live node whether the session is its own (a terminal nobody outside its node
   * wanted so far is in no bucket); the node that has it publishes it as it answers.
   */
  async #where(sessionId: string): Promise<Known | undefined> {
    const nodes = [...this.#seen.keys()].filter((node) => node !== this.#node && this.#alive(node));
    const answers = await Promise.all(
      nodes.map((node) =>
        this.#request(node, sessionId, 'pty.where', { sessionId }, WHERE_TIMEOUT_MS).then(
          (answer) => answer as Registration | null,
          () => null, // a node that cannot answer now: asked again next time
        ),
      ),
    );
    const registration = answers.find((answer) => answer !== null && typeof answer === 'object');
    return registration === undefined ? undefined : { registration, revision: -1 };
  }

  async #lookup(sessionId: string): Promise<Known | undefined> {
    const known = this.#known.get(sessionId);
    if (known !== undefined) return known;
    const entry = await this.#terminals.get(sessionToken(sessionId)).catch(() => null);
    if (entry === null || entry.operation !== 'PUT') return undefined;
    try {
      return { registration: entry.json<Registration>(), revision: entry.revision };
    } catch {
      return undefined;
    }
  }

  #alive(node: string): boolean {
    if (node === this.#node) return true;
    const seen = this.#seen.get(node);
    return seen !== undefined && Date.now() - seen <= this.#ttl;
  }

  /** Nodes not seen for the lease TTL are lost: their sessions end with `node_lost`, said once. */
  async #sweep(): Promise<void> {
    // Viewers that went stop counting once their grace is over (and release a pty they held).
    for (const published of this.#published.values())
      if (published.viewers.size > 0 || published.flowHold !== undefined) this.#checkFlow(published);
    const now = Date.now();
    // Long overdue: this node was stopped or starved, its reading of the renewals too; what it has
    // not read yet says nothing yet, and every node gets a full TTL again.
    if (now - this.#lastSweep > this.#ttl / 2) this.#okSince = now;
    this.#lastSweep = now;
    if (this.#closed || this.#connection.health !== 'ok') return;
    this.#closeDeclaredLost();
    const judging = now - this.#okSince > this.#ttl;
    for (const [sessionId, { registration, revision }] of this.#known) {
      if (registration.node === this.#node) {
        if (this.#published.has(sessionId) || this.#host === undefined) continue;
        // Ours, from before this node's restart (or forgotten while NATS was away).
        if (registration.exit === undefined) await this.#lose(sessionId, registration, revision);
        else await this.#drop(sessionId, revision);
        continue;
      }
      if (!judging || this.#alive(registration.node)) continue;
      if (registration.exit === undefined) await this.#lose(sessionId, registration, revision);
      else if (now - (registration.endedAt ?? 0) > this.#options.detachGraceMs)
        await this.#drop(sessionId, revision);
    }
  }

  /**
   * This node was declared lost while it was stopped or cut off past the lease TTL, and is back: the
   * terminals the cluster said ended (`node_lost`, told to every client) are closed here too, so none
   * goes on that its viewers were told had ended, and their end is not said a second time. A
   * terminal no other node knew of goes on.
   */
  #closeDeclaredLost(): void {
    const host = this.#host;
    if (host === undefined) return;
    for (const [sessionId, published] of this.#published) {
      if (published.ended || published.closing) continue;
      const known = this.#known.get(sessionId);
      // Gone from the bucket: the other nodes dropped it after its grace (declared lost before).
      if (known !== undefined && known.registration.exit?.reason !== 'node_lost') continue;
      published.closing = true;
      this.#options.onError(
        new Error(`the cluster declared terminal ${sessionId} lost while this node was away: closing it`),
        'reconciling terminals',
      );
      host.callLocal('pty.close', { sessionId }).catch((error: unknown) => {
        published.closing = false; // tried again at the next sweep
        this.#options.onError(error, `closing terminal ${sessionId}`);
      });
    }
  }

  async #lose(sessionId: string, registration: Registration, revision: number): Promise<void> {
    const exit: ExitInfo = { exitCode: null, signal: null, reason: 'node_lost' };
    try {
      await this.#terminals.update(
        sessionToken(sessionId),
        JSON.stringify({ ...registration, id: sessionId, exit, endedAt: Date.now() }),
        revision,
      );
    } catch {
      return; // another node claimed it first
    }
    for (const feeds of this.#feeds.values()) feeds.get(sessionId)?.reader?.close();
    await this.#bus
      .publish('pty.exit', sessionId, { sessionId, ...exit })
      .catch((error: unknown) => this.#options.onError(error, `announcing the loss of ${sessionId}`));
  }

  // ---- RemoteTerminals: what this node's gateway asks ---------------------------------------

  #lost(sessionId: string, node: string): Error {
    return this.#options.makeError(
      'session_closed',
      `session ${sessionId} ended: its node ${node} was lost (node_lost)`,
      { reason: 'node_lost', node },
    );
  }

  async has(sessionId: string): Promise<boolean> {
    return (await this.#locate(sessionId)) !== undefined;
  }

  /** The owner of a session, for a call on it; the error a client gets when there is none. */
  async #owner(sessionId: string): Promise<string> {
    const known = await this.#locate(sessionId);
    if (known === undefined) throw this.#options.makeError('unknown_session', `unknown session ${sessionId}`);
    const { node, exit } = known.registration;
    if (exit?.reason === 'node_lost') throw this.#lost(sessionId, node);
    return node; // a node that is gone answers nobody: the request says so
  }

  async #request(
    node: string,
    sessionId: string,
    method: string,
    params: unknown,
    timeout = this.#options.requestTimeoutMs,
  ): Promise<unknown> {
    let answer: Msg;
    try {
      const subject = this.#inbox(node, 'pty');
      const body = Buffer.from(JSON.stringify({ m: method, p: params }));
      answer = await this.#connection.nc.request(subject, body, {
        timeout,
        headers: this.#auth.sign(subject, body),
      });
    } catch (error) {
      if (error instanceof RequestError && error.isNoResponders()) throw this.#lost(sessionId, node);
      if (error instanceof TimeoutError || (error as Error).name === 'TimeoutError')
        throw this.#options.makeError(
          'busy',
          `node ${node}${sessionId === '' ? '' : ` (which has session ${sessionId})`} did not answer within ${timeout} ms: retry`,
          { node },
        );
      throw this.#options.makeError('busy', `cannot reach node ${node}: ${(error as Error).message}`, {
        node,
      });
    }
    // Anything on NATS can answer first: an answer counts only when a node of the cluster signed it.
    const refused = this.#refusal(answer, `node ${node}'s answer to ${method}`);
    if (refused !== undefined)
      throw this.#options.makeError(
        'invalid_request',
        `the answer to ${method} from node ${node} was refused: ${refused.why}`,
        { reason: refused.reason, node },
      );
    const reply = answer.json<Reply>();
    if ('e' in reply) {
      const code = (reply.e.code in ERROR_NAMES ? reply.e.code : 'internal_error') as ErrorCodeName;
      throw this.#options.makeError(
        code,
        reply.e.message,
        reply.e.data as Record<string, unknown> | undefined,
      );
    }
    return reply.r;
  }

  call(method: ForwardedMethod, params: { readonly sessionId: string }): Promise<unknown> {
    const run = async (): Promise<unknown> =>
      this.#request(await this.#owner(params.sessionId), params.sessionId, method, params);
    if (method !== 'pty.input') return run();
    // Keystrokes reach the owner in the order they were typed.
    const previous = this.#inputChains.get(params.sessionId) ?? Promise.resolve();
    const result = previous.then(run, run);
    const tail = result.catch(() => undefined);
    this.#inputChains.set(params.sessionId, tail);
    void tail.then(() => {
      if (this.#inputChains.get(params.sessionId) === tail) this.#inputChains.delete(params.sessionId);
    });
    return result;
  }

  async spawn(node: string, params: MethodParams<'pty.spawn'>): Promise<MethodResult<'pty.spawn'>> {
    const host = this.#host;
    if (node === this.#node) {
      if (host === undefined) throw this.#options.makeError('busy', `node ${this.#node} is starting: retry`);
      return (await host.callLocal('pty.spawn', params)) as MethodResult<'pty.spawn'>;
    }
    if (this.#alive(node))
      try {
        return (await this.#request(node, '', 'pty.spawn', params)) as MethodResult<'pty.spawn'>;
      } catch (error) {
        // No responders: it went between the check and the call.
        if ((error as { data?: { reason?: unknown } }).data?.reason !== 'node_lost') throw error;
      }
    const live = [...new Set([this.#node, ...this.#seen.keys()])]
      .filter((other) => this.#alive(other))
      .sort();
    const lost = this.#seen.has(node) || this.#departed.has(node);
    throw this.#options.makeError(
      'invalid_params',
      `params.node: ${lost ? `node ${node} is gone (lost or left the cluster)` : `unknown node ${JSON.stringify(node)}`}; the cluster's live nodes are ${live.join(', ')}`,
      { node, reason: lost ? 'node_lost' : 'unknown_node', nodes: live },
    );
  }

  async list(): Promise<MethodResult<'pty.list'>> {
    const nodes = [...this.#seen.keys()].filter((node) => node !== this.#node && this.#alive(node));
    const answers = await Promise.all(
      [...nodes].map(async (node) => {
        try {
          return (await this.#request(node, '', 'pty.list', {}, 2_000)) as ListItem[];
        } catch {
          return []; // a node that cannot answer now: its sessions are listed again next time
        }
      }),
    );
    const items = answers.flat();
    // Sessions whose node was lost stay listed, ended, for the grace period.
    const listed = new Set(items.map((item) => item.sessionId));
    for (const [sessionId, { registration }] of this.#known) {
      if (listed.has(sessionId) || registration.exit?.reason !== 'node_lost') continue;
      items.push({
        sessionId,
        pid: registration.pid,
        command: [registration.command, ...registration.args].join(' '),
        cols: registration.cols,
        rows: registration.rows,
        createdAt: registration.createdAt,
        lastActivityAt: registration.endedAt ?? registration.createdAt,
        outputOffset: 0,
        exit: registration.exit as ListItem['exit'],
        idleExpiresAt: null,
      });
    }
    return items;
  }

  async follow(
    viewer: RemoteViewer,
    sessionId: string,
    fromOffset: number,
  ): Promise<MethodResult<'pty.follow'>> {
    const node = await this.#owner(sessionId);
    const info = (await this.#request(node, sessionId, 'pty.follow', { sessionId, fromOffset })) as {
      offset: number;
      end: number;
      exit: ExitInfo | null;
      seq: number;
    };
    this.#startFeed(viewer, sessionId, node, info.offset, info.seq);
    return { offset: info.offset, end: info.end, exit: info.exit as MethodResult<'pty.follow'>['exit'] };
  }

  ack(viewer: RemoteViewer, sessionId: string, _offset: number): void {
    const feed = this.#feeds.get(viewer)?.get(sessionId);
    if (feed === undefined) return;
    feed.wake?.();
    // At most one report per 50 ms unless the client read a MiB since the last (a fast client must
    // not wait on the owner's window), and the last ack always reported (the owner paces on it).
    const wait = feed.lastReport + ACK_REPORT_MS - Date.now();
    const read = (feed.viewer.acked(sessionId) ?? feed.start) - feed.lastReported;
    if (wait <= 0 || read >= ACK_REPORT_BYTES) this.#report(feed);
    else
      feed.ackTimer ??= setTimeout(() => {
        feed.ackTimer = undefined;
        if (!feed.stopped) this.#report(feed);
      }, wait);
  }

  sync(viewer: RemoteViewer): void {
    const feeds = this.#feeds.get(viewer);
    if (!viewer.open) {
      if (feeds !== undefined) for (const feed of feeds.values()) this.#stopFeed(feed);
      this.#feeds.delete(viewer);
      this.#broad.delete(viewer);
      return;
    }
    const wantedAll = this.#broad.size > 0;
    if (viewer.sessions === undefined) this.#broad.add(viewer);
    else this.#broad.delete(viewer);
    // The other nodes publish every terminal while a client here wants them all.
    if (wantedAll !== this.#broad.size > 0) this.#announce(!wantedAll);
    if (feeds !== undefined)
      for (const feed of feeds.values()) if (!viewer.wants(feed.sessionId)) this.#stopFeed(feed);
    // Live output of the other nodes' sessions it wants (named, or every one), from now on.
    const wanted =
      viewer.sessions !== undefined
        ? [...viewer.sessions]
        : [...this.#known.keys()].filter((id) => this.#known.get(id)?.registration.node !== this.#node);
    for (const sessionId of wanted) {
      if (!viewer.wants(sessionId) || this.#feeds.get(viewer)?.has(sessionId)) continue;
      if (this.#host?.get(sessionId) !== undefined) continue; // this node's own
      const known = this.#known.get(sessionId);
      if (
        known !== undefined &&
        (known.registration.node === this.#node || known.registration.exit !== undefined)
      )
        continue;
      // Placeholder, so a second sync does not start a second feed meanwhile.
      const placeholder = new Feed(
        viewer,
        sessionId,
        known?.registration.node ?? '',
        Number.MAX_SAFE_INTEGER,
      );
      this.#feedsOf(viewer).set(sessionId, placeholder);
      const current = (): boolean => this.#feeds.get(viewer)?.get(sessionId) === placeholder;
      void (async () => {
        // A named session nobody here knew of: its node is asked (and publishes it).
        const found = known ?? (await this.#locate(sessionId));
        if (
          found === undefined ||
          found.registration.node === this.#node ||
          found.registration.exit !== undefined
        )
          throw new Error('not followable');
        const node = found.registration.node;
        const info = (await this.#request(node, sessionId, 'pty.follow', {
          sessionId,
          fromOffset: Number.MAX_SAFE_INTEGER,
        })) as { offset: number; seq: number };
        if (!current()) return; // followed meanwhile
        this.#feeds.get(viewer)?.delete(sessionId);
        if (viewer.open && viewer.wants(sessionId))
          this.#startFeed(viewer, sessionId, node, info.offset, info.seq);
      })().catch(() => {
        if (current()) this.#feeds.get(viewer)?.delete(sessionId);
      });
    }
  }

  #feedsOf(viewer: RemoteViewer): Map<string, Feed> {
    let feeds = this.#feeds.get(viewer);
    if (feeds === undefined) {
      feeds = new Map();
      this.#feeds.set(viewer, feeds);
    }
    return feeds;
  }

  #startFeed(viewer: RemoteViewer, sessionId: string, node: string, from: number, seq: number): void {
    const feeds = this.#feedsOf(viewer);
    const previous = feeds.get(sessionId);
    if (previous !== undefined) this.#stopFeed(previous, false);
    const feed = new Feed(viewer, sessionId, node, from);
    feeds.set(sessionId, feed);
    this.#report(feed);
    feed.reportTimer = setInterval(() => this.#report(feed), REPORT_EVERY_MS);
    feed.reportTimer.unref();
    // After the answer to the follow has gone out: the frames come after it.
    setImmediate(() => {
      this.#runFeed(feed, seq)
        .catch((error: unknown) => {
          if (!feed.stopped) this.#options.onError(error, `following ${sessionId} from ${node}`);
        })
        .finally(() => {
          feed.finish();
          clearInterval(feed.reportTimer);
        });
    });
  }

  /**
   * Follows the session's output from stream sequence `seq` until done, through consumers of this
   * feed's own (a new one from the first message not sent whenever the last may be gone). At most
   * 16 messages (≤ 4 MiB) wait here for a slow client; the rest stay in the stream.
   */
  async #runFeed(feed: Feed, seq: number): Promise<void> {
    const reader = new StreamReader(this.#connection, {
      stream: this.#stream,
      filter: this.#subject(feed.sessionId),
      start: Math.max(1, seq),
      maxMessages: 16,
      prefix: 'feed',
    });
    feed.reader = reader;
    if (feed.stopped) reader.close();
    try {
      await this.#deliver(feed, reader);
    } finally {
      reader.close();
    }
  }

  /** Sends the stream's messages to the client as its backlog allows. */
  async #deliver(feed: Feed, reader: StreamReader): Promise<void> {
    const high = 1024 * 1024;
    const low = 256 * 1024;
    for await (const message of reader) {
      if (feed.stopped) break;
      const offset = Number(message.headers?.get(OFFSET_HEADER));
      const exit = message.headers?.get(EXIT_HEADER);
      if (!Number.isFinite(offset)) continue;
      if (exit !== undefined && exit !== '') {
        try {
          feed.exit = JSON.parse(exit) as ExitInfo;
        } catch {
          feed.exit = { exitCode: null, signal: null, reason: 'exited' };
        }
        break;
      }
      const { buffer, byteOffset, byteLength } = message.data; // (its own memory: no copy needed)
      const data = Buffer.from(buffer, byteOffset, byteLength);
      const end = offset + data.length;
      if (end <= feed.next) continue;
      // A gap (output the stream no longer keeps, or lost while NATS was away) shows in the offsets.
      const from = Math.max(offset, feed.next);
      // Paced by the client: past the high-water mark, wait until it has read down to the low one.
      if (feed.viewer.backlog(feed.sessionId) > high) {
        while (!feed.stopped && feed.viewer.open && feed.viewer.backlog(feed.sessionId) > low)
          await new Promise<void>((resolve) => {
            feed.wake = resolve;
            setTimeout(resolve, 20);
          });
        feed.wake = undefined;
      }
      if (feed.stopped || !feed.viewer.open) break;
      for (let at = from; at < end; at += MAX_FRAME_BYTES)
        feed.viewer.sendOutput(
          feed.sessionId,
          at,
          data.subarray(at - offset, Math.min(end, at + MAX_FRAME_BYTES) - offset),
        );
      feed.next = end;
      feed.idleSince = Date.now();
    }
  }

  #report(feed: Feed, left = false): void {
    if (feed.start === Number.MAX_SAFE_INTEGER) return;
    feed.lastReport = Date.now();
    const acked = Math.max(feed.viewer.acked(feed.sessionId) ?? feed.start, feed.start);
    feed.lastReported = acked;
    try {
      this.#send(
        this.#inbox(feed.owner, 'flow'),
        JSON.stringify({ sessionId: feed.sessionId, viewer: `${this.#node}:${feed.viewer.id}`, acked, left }),
      );
    } catch {
      /* NATS away: the next report tells */
    }
  }

  #stopFeed(feed: Feed, remove = true): void {
    if (feed.stopped) return;
    feed.stopped = true;
    feed.wake?.();
    clearInterval(feed.reportTimer);
    clearTimeout(feed.ackTimer);
    this.#report(feed, true);
    feed.reader?.close();
    if (remove) {
      const feeds = this.#feeds.get(feed.viewer);
      if (feeds?.get(feed.sessionId) === feed) feeds.delete(feed.sessionId);
    }
  }

  /**
   * The bus as this node's gateway should see it: a `pty.exit` of another node's session reaches a
   * client after the output its feed still had to send (the end marker read, or the feed idle).
   */
  gatewayBus(): EventBus {
    const bus = this.#bus;
    return {
      // A terminal closed because the cluster declared it lost: its end was said already (node_lost).
      publish: (topic, sessionId, data) =>
        topic === 'pty.exit' && this.#published.get(sessionId)?.closing === true
          ? Promise.resolve(0)
          : bus.publish(topic, sessionId, data),
      subscribe: (filter, listener: BusListener) =>
        bus.subscribe(filter, (event: BusEvent) => {
          if (event.topic !== 'pty.exit') return listener(event);
          const feeds = [...this.#feeds.values()]
            .map((feeds) => feeds.get(event.sessionId))
            .filter((feed): feed is Feed => feed !== undefined && !feed.stopped);
          if (feeds.length === 0) return listener(event);
          void Promise.all(feeds.map((feed) => this.#drained(feed))).then(() => listener(event));
          return undefined;
        }),
    };
  }

  /** Resolves once the feed has sent all there is (its end marker), or sent nothing for a while. */
  async #drained(feed: Feed): Promise<void> {
    const until = Date.now() + 30_000;
    while (!feed.stopped && feed.exit === undefined && Date.now() < until) {
      if (Date.now() - feed.idleSince > 1_000 && feed.viewer.backlog(feed.sessionId) === 0) break;
      await Promise.race([feed.done, new Promise((resolve) => setTimeout(resolve, 50))]);
    }
    this.#stopFeed(feed);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    for (const timer of this.#timers) clearInterval(timer);
    if (this.#host !== undefined) {
      this.#host.off('spawn', this.#onSpawn);
      this.#host.off('forget', this.#onForget);
    }
    for (const feeds of this.#feeds.values()) for (const feed of feeds.values()) this.#stopFeed(feed);
    this.#feeds.clear();
    if (this.#broad.size > 0) this.#announce(false);
    this.#broad.clear();
    await Promise.all([...this.#published.values()].map((published) => published.chain));
    // This node's sessions leave the cluster with it (they ended with it).
    await Promise.all(
      [...this.#published.keys()].map((sessionId) => this.#drop(sessionId).catch(() => undefined)),
    );
    for (const published of this.#published.values())
      for (const disposable of published.disposables) disposable[Symbol.dispose]();
    this.#published.clear();
    for (const subscription of this.#subscriptions) subscription.unsubscribe();
    for (const watch of this.#watches) watch.stop();
  }
}

/** A PtyError's code as a client gets it (the gateway's mapping). */
function ptyCode(code: string): string {
  return code === 'invalid_size' ? 'invalid_params' : code;
}

/** A session id from its key in the terminals bucket (see sessionToken). */
function sessionOfKey(key: string): string | undefined {
  if (!key.startsWith('~')) return key;
  const hex = key.slice(1);
  return /^(?:[0-9a-f]{2})+$/.test(hex) ? Buffer.from(hex, 'hex').toString('utf8') : undefined;
}

/** The gateway's error names (a reply naming another is an internal error). */
const ERROR_NAMES: Record<ErrorCodeName, true> = {
  parse_error: true,
  invalid_request: true,
  method_not_found: true,
  invalid_params: true,
  internal_error: true,
  unknown_session: true,
  frame_too_large: true,
  busy: true,
  session_limit: true,
  spawn_failed: true,
  session_closed: true,
  screen_too_large: true,
  unknown_run: true,
  no_provider: true,
  unauthorized: true,
  upgrade_refused: true,
};
