// The seams over a real nats-server with JetStream: connection faults, fenced session appends,
// cluster-wide ordered events with resume, and runs that move when their node dies.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AckPolicy, jetstream, RetentionPolicy } from '@nats-io/jetstream';
import { connect, headers as natsHeaders, type Msg, type MsgHdrs } from '@nats-io/transport-node';
import type { BusEvent, RemoteViewer } from '@aleph/gateway';
import { eventBusContract } from '@aleph/gateway/testing';
import type { SessionEventBody } from '@aleph/harness';
import { ForwardAuth } from './internal/forward-auth.js';
import { natsServerBinary, startNatsServer, type NatsServer } from './testing.js';
import {
  ClusterTerminals,
  type HostSession,
  type TerminalHost,
  ClusterError,
  connectCluster,
  JetStreamEventBus,
  JetStreamRunQueue,
  JetStreamSessionStore,
  type ClusterConnection,
  type RunTicket,
} from './index.js';

const binary = natsServerBinary();
if (binary === undefined && process.env.CI)
  throw new Error('nats-server is missing (Debian package nats-server)');

const QUARTER_MIB = 256 * 1024;
/** The cluster's shared secret, the same on every node of a test cluster. */
const SECRET = 'test-cluster-secret-0123456789';
const user = (content: string): SessionEventBody => ({ type: 'user', content });

describe.skipIf(binary === undefined)('cluster over nats-server', () => {
  let nats: NatsServer;
  const open: ClusterConnection[] = [];
  let clusterName = 0;
  const name = (): string => `t${process.pid}_${++clusterName}`;
  const node = async (cluster: string, nodeName: string, leaseTtlSecs = 2): Promise<ClusterConnection> => {
    const connection = await connectCluster({
      servers: [nats.url],
      name: cluster,
      node: nodeName,
      leaseTtlSecs,
    });
    open.push(connection);
    return connection;
  };

  beforeAll(async () => {
    nats = await startNatsServer();
  });
  afterEach(async () => {
    await Promise.all(open.splice(0).map((connection) => connection.close().catch(() => undefined)));
  });
  afterAll(async () => {
    await nats?.dispose();
  });

  it('refuses an unreachable server, naming it', async () => {
    const error = await connectCluster({ servers: ['nats://127.0.0.1:1'], connectTimeoutMs: 1_000 }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(ClusterError);
    expect((error as ClusterError).code).toBe('unreachable');
    expect((error as ClusterError).message).toContain('nats://127.0.0.1:1');
  });

  it('refuses wrong or missing credentials with a clear error naming the servers', async () => {
    const guarded = await startNatsServer({ extraArgs: ['--auth', 'right-token-0123'] });
    try {
      for (const token of ['wrong-token', undefined]) {
        const error = await connectCluster({
          servers: [guarded.url],
          name: name(),
          node: 'a',
          connectTimeoutMs: 5_000,
          ...(token === undefined ? {} : { token }),
        }).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(ClusterError);
        expect((error as ClusterError).code).toBe('auth');
        expect((error as ClusterError).message).toBe(`NATS at ${guarded.url} refused the credentials`);
      }
      const right = await connectCluster({
        servers: [guarded.url],
        name: name(),
        node: 'a',
        token: 'right-token-0123',
      });
      expect(right.health).toBe('ok');
      await right.close();
    } finally {
      await guarded.dispose();
    }
  });

  it('a credentials file that cannot be read is an invalid option, naming it', async () => {
    for (const [option, key] of [
      ['credsFile', 'creds_file'],
      ['nkeyFile', 'nkey_file'],
    ] as const) {
      const error = await connectCluster({ servers: [nats.url], [option]: '/nonexistent.creds' }).catch(
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(ClusterError);
      expect((error as ClusterError).code).toBe('invalid_options');
      expect((error as ClusterError).message).toBe(
        `cluster ${key} /nonexistent.creds: cannot read it (ENOENT)`,
      );
    }
  });

  it('refuses a second node with the name of a live one', async () => {
    const cluster = name();
    await node(cluster, 'a');
    const error = await node(cluster, 'a').catch((e: unknown) => e);
    expect((error as ClusterError).code).toBe('duplicate_node');
    expect(await open[0]?.nodes()).toEqual(['a']);
  });

  it('refuses an existing stream of another configuration and keeps its data', async () => {
    const cluster = name();
    const a = await node(cluster, 'a');
    await a.jsm.streams.add({ name: `${cluster}_sessions`, subjects: ['elsewhere.>'] });
    await a.js.publish('elsewhere.x', 'kept');
    const error = await JetStreamSessionStore.open(a).catch((e: unknown) => e);
    expect((error as ClusterError).code).toBe('incompatible');
    expect((error as ClusterError).message).toContain(`${cluster}_sessions`);
    expect((await a.jsm.streams.info(`${cluster}_sessions`)).state.messages).toBe(1);
  });

  it('refuses an existing run consumer or bucket of another configuration, and keeps them and the runs', async () => {
    const cluster = name();
    const a = await node(cluster, 'a', 2);
    // The run queue's consumer made by something else, with another ack wait; a run waits in it.
    await a.jsm.streams.add({
      name: `${cluster}_runs`,
      subjects: [`${cluster}.runs`],
      retention: RetentionPolicy.Workqueue,
    });
    await a.jsm.consumers.add(`${cluster}_runs`, {
      durable_name: `${cluster}_runners`,
      ack_policy: AckPolicy.Explicit,
      ack_wait: 7_000 * 1_000_000,
      filter_subject: `${cluster}.runs`,
    });
    await a.js.publish(`${cluster}.runs`, JSON.stringify({ runId: 'kept', sessionId: 's', request: {} }));
    const error = await JetStreamRunQueue.open(a, { secret: SECRET }).catch((e: unknown) => e);
    expect((error as ClusterError).code).toBe('incompatible');
    expect((error as ClusterError).message).toContain(
      `consumer ${cluster}_runners exists with ack_wait 7000 ms, this node needs 2000 ms`,
    );
    expect((await a.jsm.consumers.info(`${cluster}_runs`, `${cluster}_runners`)).config.ack_wait).toBe(
      7_000 * 1_000_000,
    );
    expect((await a.jsm.streams.info(`${cluster}_runs`)).state.messages).toBe(1);
    // A node with another lease TTL: the nodes bucket disagrees; refused at start, the bucket kept,
    // and the refused node's connection closed (not left reconnecting).
    const sockets = (): number =>
      process.getActiveResourcesInfo().filter((kind) => kind === 'TCPSocketWrap').length;
    const before = sockets();
    const other = await node(cluster, 'b', 5).catch((e: unknown) => e);
    expect((other as ClusterError).code).toBe('incompatible');
    expect((other as ClusterError).message).toContain(`bucket ${cluster}_nodes exists with a TTL of 2000 ms`);
    expect(await a.nodes()).toEqual(['a']);
    await expect.poll(sockets).toBe(before);
  });

  it('fences a node whose session was taken over by another', async () => {
    const cluster = name();
    const a = await JetStreamSessionStore.open(await node(cluster, 'a'));
    const b = await JetStreamSessionStore.open(await node(cluster, 'b'));
    const id = await a.create();
    await a.append(id, user('one'));
    await a.append(id, user('two'));
    const seen = await b.load(id);
    expect(seen.events.map((event) => (event as { content?: string }).content)).toEqual(['one', 'two']);
    expect(seen.events.map((event) => event.seq)).toEqual([0, 1]);
    await b.append(id, user('three (b)'));
    const error = await a.append(id, user('stale (a)')).catch((e: unknown) => e);
    expect((error as ClusterError).code).toBe('fenced');
    // A list of runs on the stale node reads the log but does not un-fence it.
    await a.summaries();
    await a.load(id);
    expect(((await a.append(id, user('still stale')).catch((e: unknown) => e)) as ClusterError).code).toBe(
      'fenced',
    );
    const final = await b.load(id);
    expect(final.events.map((event) => (event as { content?: string }).content)).toEqual([
      'one',
      'two',
      'three (b)',
    ]);
    expect(await b.list()).toContain(id);
  });

  it('a take-over claims the log before it plans: what the node that lost it appended meanwhile is read, and that node is fenced after', async () => {
    const cluster = name();
    const a = await JetStreamSessionStore.open(await node(cluster, 'a'));
    const b = await JetStreamSessionStore.open(await node(cluster, 'b'));
    const id = await a.create();
    await a.append(id, user('go'));
    await a.append(id, user('step-1 (a)'));
    // b takes the run over and reads the log; a, stopped and continued, appends its next step.
    expect((await b.load(id)).events).toHaveLength(2);
    await a.append(id, user('step-2 (a)'));
    // A resume planned from what b read is refused, not placed after a step it never saw.
    const stale = await b.append(id, { type: 'resumed' }).catch((caught: unknown) => caught);
    expect((stale as ClusterError).code).toBe('fenced');
    // The claim reads the log again: a's step is in what b plans from, the claim last.
    const claim = await b.claim(id);
    expect(claim.kind).toBe('claimed');
    expect(claim.load.events.map((event) => (event as { content?: string }).content ?? event.type)).toEqual([
      'go',
      'step-1 (a)',
      'step-2 (a)',
      'resumed',
    ]);
    expect(((await a.append(id, user('step-3 (a)')).catch((e: unknown) => e)) as ClusterError).code).toBe(
      'fenced',
    );
    // The run's own `resumed` is the claim; b goes on after it.
    expect(await b.append(id, { type: 'resumed' })).toMatchObject({ type: 'resumed', seq: 3 });
    await b.append(id, user('step-3 (b)'));
    expect((await b.load(id)).events.map((event) => event.seq)).toEqual([0, 1, 2, 3, 4]);
    // A log that ended meanwhile is not claimed.
    const ended = await a.create();
    await a.append(ended, user('go'));
    await a.append(ended, { type: 'terminate', reason: { kind: 'model_stop' } });
    const late = await b.claim(ended);
    expect(late.kind).toBe('ended');
    expect(late.load.events).toHaveLength(2);
  });

  it("writes a step's tool results and its end as one message, stored before the turn's flush resolves; a refused one fails the flush", async () => {
    const cluster = name();
    const connection = await node(cluster, 'a');
    const a = await JetStreamSessionStore.open(connection);
    const b = await JetStreamSessionStore.open(await node(cluster, 'b'));
    const id = await a.create();
    const result = (callId: string): SessionEventBody => ({
      type: 'tool_result',
      callId,
      name: 'shell',
      output: 'ok',
      isError: false,
    });
    const stepEnd: SessionEventBody = {
      type: 'turn_step',
      step: { state: 'continue', executed: 2, vetoed: false, iteration: 1 },
    };
    const messages = async (): Promise<number> =>
      (await connection.jsm.streams.info(`${cluster}_sessions`)).state.messages;
    await a.append(id, user('go'));
    await a.append(id, { type: 'assistant', content: '', toolCalls: [] });
    expect(await messages()).toBe(2);
    // As a turn ends: two results and the step's end, then the flush.
    expect((await a.append(id, result('c1'))).seq).toBe(2);
    expect((await a.append(id, result('c2'))).seq).toBe(3);
    expect((await a.append(id, stepEnd)).seq).toBe(4);
    await a.flush(id);
    expect(await messages()).toBe(3);
    const read = await b.load(id);
    expect(read.events.map((event) => [event.seq, event.type])).toEqual([
      [0, 'user'],
      [1, 'assistant'],
      [2, 'tool_result'],
      [3, 'tool_result'],
      [4, 'turn_step'],
    ]);
    expect(read.corruptLines).toEqual([]);
    // b took the log over: a's next step is refused, said by its flush; nothing of it is stored.
    await b.append(id, { type: 'resumed' });
    await a.append(id, result('c3'));
    await a.append(id, stepEnd);
    expect(((await a.flush(id).catch((e: unknown) => e)) as ClusterError).code).toBe('fenced');
    expect(((await a.append(id, user('stale')).catch((e: unknown) => e)) as ClusterError).code).toBe(
      'fenced',
    );
    expect((await b.load(id)).events.map((event) => event.type)).toEqual([
      'user',
      'assistant',
      'tool_result',
      'tool_result',
      'turn_step',
      'resumed',
    ]);
  });

  describe('the EventBus contract of @aleph/gateway', () => {
    for (const { name: caseName, run } of eventBusContract)
      it(caseName, async () => {
        const connection = await node(name(), 'a');
        await run(() => JetStreamEventBus.open(connection));
      });
  });

  it("a session's first event on a node reads nothing from the stream; one another node wrote to continues its numbers", async () => {
    const cluster = name();
    const connectionA = await node(cluster, 'a');
    const a = await JetStreamEventBus.open(connectionA);
    const b = await JetStreamEventBus.open(await node(cluster, 'b'));
    let reads = 0;
    const spy = connectionA.nc.subscribe(`$JS.API.STREAM.MSG.GET.${cluster}_events`, {
      callback: () => {
        reads += 1;
      },
    });
    // New sessions (a terminal's, a run's): numbered from 1, with no read of the stream's tail.
    expect(await a.publish('pty.exit', 'fresh-1', { n: 1 })).toBe(1);
    expect(await a.publish('pty.exit', 'fresh-2', { n: 1 })).toBe(1);
    expect(await a.publish('agent.step', 'fresh-1', { n: 2 })).toBe(2);
    // A session another node wrote to: its first write here is refused by the fence, reads the
    // tail, and goes on after it.
    expect(await b.publish('agent.step', 'fresh-1', { n: 3 })).toBe(3);
    expect(await b.publish('agent.step', 'fresh-1', { n: 4 })).toBe(4);
    expect(await a.publish('agent.step', 'fresh-1', { n: 5 })).toBe(5);
    await connectionA.nc.flush();
    spy.unsubscribe();
    // Two reads in all (the spy sees every node's): b's at its first write, a's after b wrote.
    expect(reads).toBe(2);
  });

  it('gives one session gap-free sequences across nodes, and a client resumes on another node', async () => {
    const cluster = name();
    const a = await JetStreamEventBus.open(await node(cluster, 'a'));
    const b = await JetStreamEventBus.open(await node(cluster, 'b'));
    const c = await JetStreamEventBus.open(await node(cluster, 'c'));
    const got: BusEvent[] = [];
    const live = c.subscribe({ topics: ['agent.*'] }, (event) => void got.push(event));
    await live.ready;
    // Two nodes publish to one session at once: every number is given once, none skipped.
    const seqs = await Promise.all(
      Array.from({ length: 60 }, (_, index) =>
        (index % 2 === 0 ? a : b).publish('agent.step', 'run-x', { index }),
      ),
    );
    expect([...seqs].sort((x, y) => x - y)).toEqual(Array.from({ length: 60 }, (_, index) => index + 1));
    await expect.poll(() => got.length, { timeout: 10_000 }).toBe(60);
    expect(got.map((event) => event.seq)).toEqual(Array.from({ length: 60 }, (_, index) => index + 1));
    // Each node's events keep its publish order; published at once, they went as a few batches.
    for (const parity of [0, 1]) {
      const mine = got
        .map((event) => (event.data as { index: number }).index)
        .filter((i) => i % 2 === parity);
      expect(mine).toEqual([...mine].sort((x, y) => x - y));
    }
    expect((await open[0]!.jsm.streams.info(`${cluster}_events`)).state.messages).toBeLessThan(30);
    live.unsubscribe();
    // A client that saw up to 41 reconnects to node b and resumes: 42..60, each once.
    const resumed: BusEvent[] = [];
    const again = b.subscribe(
      { topics: ['*'], sessionId: 'run-x', afterSeq: 41 },
      (event) => void resumed.push(event),
    );
    await again.ready;
    await expect.poll(() => resumed.length, { timeout: 10_000 }).toBe(19);
    expect(resumed.map((event) => event.seq)).toEqual(Array.from({ length: 19 }, (_, index) => index + 42));
    again.unsubscribe();
    // Session ids that are not one subject token still work.
    expect(await a.publish('pty.exit', 'a.b c', { ok: true })).toBe(1);
    expect(await a.publish('pty.exit', '', { ok: true })).toBe(1);
    await expect(a.publish('pty out', 's', {})).rejects.toThrow(ClusterError);
  });

  it("batches a session's events up to the server's largest payload in bytes, text of any script intact, read by either version", async () => {
    const cluster = name();
    const connection = await node(cluster, 'a');
    const bus = await JetStreamEventBus.open(connection);
    const got: BusEvent[] = [];
    const live = bus.subscribe({ topics: ['agent.*'] }, (event) => void got.push(event));
    await live.ready;
    // 40 events of 200 KB of UTF-8 each: four to a batch, where one counted in characters would take
    // more (two of three are 100,000 two-byte characters). ASCII beside characters whose low byte is
    // ASCII (Ł is U+0141), a four-byte one and escapes (a line break among them), in the same batches.
    const texts = ['é'.repeat(100_000), `${'Ł'.repeat(99_990)}A🙂\u0000"\n`, 'plain text '.repeat(18_200)];
    const seqs = await Promise.all(
      Array.from({ length: 40 }, (_, index) =>
        bus.publish('agent.delta', 'run-utf8', { index, text: texts[index % 3] }),
      ),
    );
    expect(seqs).toEqual(Array.from({ length: 40 }, (_, index) => index + 1));
    await expect.poll(() => got.length, { timeout: 10_000 }).toBe(40);
    expect(got.map((event) => event.data)).toEqual(
      Array.from({ length: 40 }, (_, index) => ({ index, text: texts[index % 3] })),
    );
    const stored = (await connection.jsm.streams.info(`${cluster}_events`)).state.messages;
    expect(stored).toBeLessThan(40);
    expect(stored).toBeGreaterThanOrEqual(9);
    // A batch is one JSON array, as a node of the version before reads it.
    const first = await connection.jsm.streams.getMessage(`${cluster}_events`, { seq: 1 });
    const pairs = JSON.parse(Buffer.from(first!.data).toString('utf8')) as [string, unknown][];
    expect(pairs.length).toBe(Number(first!.header.get('Aleph-Batch')));
    expect(pairs[1]).toEqual(['agent.delta', { index: 1, text: texts[1] }]);
    // And a batch such a node wrote (one line) is read.
    const headers = natsHeaders();
    headers.set('Aleph-Batch', '2');
    headers.set('Aleph-Seq', '1');
    headers.set('Aleph-Session', 'run-before');
    const body = JSON.stringify([
      ['agent.step', { n: 1 }],
      ['agent.delta', { text: 'é' }],
    ]);
    await connection.js.publish(`${connection.names.eventsPrefix}run-before`, body, { headers });
    await expect.poll(() => got.length, { timeout: 10_000 }).toBe(42);
    expect(got.slice(40).map(({ topic, seq, data }) => [topic, seq, data])).toEqual([
      ['agent.step', 1, { n: 1 }],
      ['agent.delta', 2, { text: 'é' }],
    ]);
    live.unsubscribe();
  });

  it("a step's events, published together when the session's stream is idle, go as one message, in order", async () => {
    const cluster = name();
    const connection = await node(cluster, 'a');
    const bus = await JetStreamEventBus.open(connection);
    const got: BusEvent[] = [];
    const live = bus.subscribe({ topics: ['agent.*'] }, (event) => void got.push(event));
    await live.ready;
    const topics = ['agent.tool', 'agent.step', 'agent.act'];
    const seqs = await Promise.all(topics.map((topic) => bus.publish(topic, 'run-step', { topic })));
    expect(seqs).toEqual([1, 2, 3]);
    await expect.poll(() => got.map((event) => event.topic), { timeout: 10_000 }).toEqual(topics);
    expect((await connection.jsm.streams.info(`${cluster}_events`)).state.messages).toBe(1);
    // At once when asked: the first goes alone, the rest with the next write.
    const eager = await JetStreamEventBus.open(connection, { batchDelayMs: 0 });
    await Promise.all(topics.map((topic) => eager.publish(topic, 'run-eager', { topic })));
    expect((await connection.jsm.streams.info(`${cluster}_events`)).state.messages).toBe(3);
    live.unsubscribe();
  });

  it("events waiting for their batch go with the node's next write to NATS, not after the whole delay", async () => {
    const cluster = name();
    const connection = await node(cluster, 'a');
    // Waiting a minute at most: only the writes below can send them sooner.
    const bus = await JetStreamEventBus.open(connection, { batchDelayMs: 60_000 });
    const sessions = await JetStreamSessionStore.open(connection);
    const run = await sessions.create();
    const step = bus.publish('agent.step', run, { turn: 1 });
    const exit = bus.publish('pty.exit', 'pty-1', { exitCode: 0 });
    await sessions.append(run, user('go on'));
    expect(await step).toBe(1);
    expect(await exit).toBe(1);
    // Another session's batch is written with them too.
    const later = bus.publish('agent.delta', run, { text: 'a' });
    const own = bus.publish('pty.exit', 'pty-2', { exitCode: 0 });
    await new Promise((resolve) => setTimeout(resolve, 100));
    const eager = await JetStreamEventBus.open(connection, { batchDelayMs: 0 });
    expect(await eager.publish('pty.exit', 'pty-3', { exitCode: 0 })).toBe(1);
    expect([await later, await own]).toEqual([2, 1]);
  }, 20_000);

  it("a subscriber busy past a consumer's inactive threshold gets every later event, and leaves no consumer when it ends", async () => {
    const cluster = name();
    const connection = await node(cluster, 'a');
    const bus = await JetStreamEventBus.open(connection);
    const consumers = async (): Promise<string[]> => {
      const names: string[] = [];
      for await (const info of connection.jsm.consumers.list(`${cluster}_events`)) names.push(info.name);
      return names;
    };
    const got: number[] = [];
    const busy = bus.subscribe({ topics: ['agent.*'] }, async (event) => {
      got.push(event.seq);
      // Busy for 8 s on its first event (its node stopped, a slow client): nothing is pulled meanwhile.
      if (event.seq === 1) await new Promise((resolve) => setTimeout(resolve, 8_000));
    });
    await busy.ready;
    for (let index = 0; index < 300; index++) void bus.publish('agent.step', 'run-busy', { index });
    await expect.poll(() => got.length, { timeout: 30_000 }).toBe(300);
    expect(got).toEqual(Array.from({ length: 300 }, (_, index) => index + 1));
    busy.unsubscribe();
    // Its consumers are deleted as it ends (a library ordered consumer that recreated itself stays
    // five minutes, and one that did not stays until the server's inactive threshold).
    await expect.poll(consumers, { timeout: 2_000, interval: 100 }).toEqual([]);
  });

  it('moves a run to another node when its node stops renewing, and the old node is fenced', async () => {
    const cluster = name();
    const connectionA = await node(cluster, 'a', 1);
    const connectionB = await node(cluster, 'b', 1);
    const queueA = await JetStreamRunQueue.open(connectionA, { secret: SECRET });
    const queueB = await JetStreamRunQueue.open(connectionB, { secret: SECRET });
    const taken: { node: string; redelivered: boolean }[] = [];
    let aSignal: AbortSignal | undefined;
    queueA.serve(async (_ticket, lease) => {
      taken.push({ node: lease.node, redelivered: lease.redelivered });
      aSignal = lease.signal;
      await new Promise<void>((resolve) => lease.signal.addEventListener('abort', () => resolve()));
    });
    const ticket: RunTicket = { runId: 'run-1', sessionId: 's-1', request: { prompt: 'p' } };
    await queueA.submit(ticket);
    await expect.poll(() => taken.length, { timeout: 10_000 }).toBe(1);
    expect((await queueB.holder('run-1'))?.node).toBe('a');
    // Node a stops (as under SIGSTOP): no renewals reach NATS. Simulated by closing its socket.
    await connectionA.nc.close();
    queueB.serve((_ticket, lease) => {
      taken.push({ node: lease.node, redelivered: lease.redelivered });
      return Promise.resolve();
    });
    await expect.poll(() => taken.length, { timeout: 10_000 }).toBe(2);
    expect(taken).toEqual([
      { node: 'a', redelivered: false },
      { node: 'b', redelivered: true },
    ]);
    expect(aSignal?.aborted).toBe(false); // a cannot even learn it: it is cut off — its appends are fenced instead
    await queueB.close();
    await queueA.close();
  });

  it('a closing node hands back the run it stopped, once, and takes no run after; close() waits for its handlers', async () => {
    const cluster = name();
    const a = await JetStreamRunQueue.open(await node(cluster, 'a'), { secret: SECRET });
    const taken: { node: string; redelivered: boolean }[] = [];
    let handling = 0;
    a.serve(async (_ticket, lease) => {
      taken.push({ node: lease.node, redelivered: lease.redelivered });
      handling += 1;
      await new Promise<void>((resolve) => lease.signal.addEventListener('abort', () => resolve()));
      await new Promise((resolve) => setTimeout(resolve, 200)); // a handler that takes a while to stop
      handling -= 1;
    });
    await a.submit({ runId: 'run-h', sessionId: 's', request: {} });
    await expect.poll(() => a.running, { timeout: 10_000 }).toBe(1);
    await a.close();
    expect(handling).toBe(0);
    expect(a.running).toBe(0);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(taken).toEqual([{ node: 'a', redelivered: false }]);
    // Handed back: another node takes it.
    const b = await JetStreamRunQueue.open(await node(cluster, 'b'), { secret: SECRET });
    b.serve((_ticket, lease) => {
      taken.push({ node: lease.node, redelivered: lease.redelivered });
      return Promise.resolve();
    });
    await expect.poll(() => taken.length, { timeout: 10_000 }).toBe(2);
    expect(taken[1]).toEqual({ node: 'b', redelivered: true });
    await b.close();
  });

  it('a run whose handler returned before the close is done: it is not run again', async () => {
    const cluster = name();
    const a = await JetStreamRunQueue.open(await node(cluster, 'a'), { secret: SECRET });
    const runs: string[] = [];
    a.serve((ticket) => {
      runs.push(ticket.runId);
      return Promise.resolve();
    });
    await a.submit({ runId: 'run-d', sessionId: 's', request: {} });
    await expect.poll(() => runs.length, { timeout: 10_000 }).toBe(1);
    await a.close();
    const b = await JetStreamRunQueue.open(await node(cluster, 'b'), { secret: SECRET });
    b.serve((ticket) => {
      runs.push(ticket.runId);
      return Promise.resolve();
    });
    await new Promise((resolve) => setTimeout(resolve, 3000));
    expect(runs).toEqual(['run-d']);
    await b.close();
  });

  it('cancels a run on the node that holds it', async () => {
    const cluster = name();
    const a = await JetStreamRunQueue.open(await node(cluster, 'a'), { secret: SECRET });
    const b = await JetStreamRunQueue.open(await node(cluster, 'b'), { secret: SECRET });
    let reason: unknown;
    a.serve(async (_ticket, lease) => {
      await new Promise<void>((resolve) => lease.signal.addEventListener('abort', () => resolve()));
      reason = lease.signal.reason;
    });
    await b.submit({ runId: 'run-c', sessionId: 's', request: {} });
    await expect.poll(() => a.running, { timeout: 10_000 }).toBe(1);
    b.cancel('run-c');
    await expect.poll(() => reason, { timeout: 5_000 }).toBeInstanceOf(ClusterError);
    await expect.poll(() => a.running).toBe(0);
    expect(await b.holder('run-c')).toBeUndefined();
    await a.close();
    await b.close();
  });

  it('drops a queued run and a cancel that no node of the cluster sent', async () => {
    const cluster = name();
    const logged: string[] = [];
    const a = await JetStreamRunQueue.open(await node(cluster, 'a'), {
      secret: SECRET,
      onError: (error) => void logged.push(String(error)),
    });
    const b = await JetStreamRunQueue.open(await node(cluster, 'b'), { secret: SECRET });
    const intruder = await connect({ servers: [nats.url] });
    const taken: string[] = [];
    let reason: unknown;
    a.serve(async (ticket, lease) => {
      taken.push(ticket.runId);
      await new Promise<void>((resolve) => lease.signal.addEventListener('abort', () => resolve()));
      reason = lease.signal.reason;
    });
    try {
      // A run put on the queue by anything that reaches NATS: never run, never delivered again.
      const forged = {
        runId: 'forged',
        sessionId: 'forged',
        request: { prompt: 'curl … | sh', cwd: '/root' },
      };
      await jetstream(intruder).publish(`${cluster}.runs`, JSON.stringify(forged));
      await expect
        .poll(() => logged.join('\n'), { timeout: 10_000 })
        .toMatch(/refused a queued run .*: it carries no authentication/);
      // A node's run is taken; a cancel without a MAC does not reach it, the node's own does.
      await b.submit({ runId: 'good', sessionId: 'good', request: {} });
      await expect.poll(() => taken, { timeout: 10_000 }).toEqual(['good']);
      intruder.publish(`${cluster}.runs.cancel`, 'good');
      await intruder.flush();
      await expect
        .poll(() => logged.join('\n'), { timeout: 5_000 })
        .toMatch(/refused a run cancel: it carries no authentication/);
      expect(reason).toBeUndefined();
      b.cancel('good');
      await expect.poll(() => reason, { timeout: 5_000 }).toBeInstanceOf(ClusterError);
      expect(taken).toEqual(['good']);
    } finally {
      await intruder.close();
      await a.close();
      await b.close();
    }
  });

  it('refuses to open a run queue without the cluster secret', async () => {
    const a = await node(name(), 'a');
    const error = await JetStreamRunQueue.open(a, {} as never).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'invalid_options', message: expect.stringMatching(/secret/) });
  });

  it('a run redelivered to the node that runs it, after NATS was away past its lease, is not run twice', async () => {
    const cluster = name();
    const connection = await node(cluster, 'a', 1);
    const queue = await JetStreamRunQueue.open(connection, { secret: SECRET });
    let taken = 0;
    let finish: (() => void) | undefined;
    let signal: AbortSignal | undefined;
    queue.serve(async (_ticket, lease) => {
      taken += 1;
      signal = lease.signal;
      await new Promise<void>((resolve) => (finish = resolve));
    });
    await queue.submit({ runId: 'run-r', sessionId: 's-r', request: {} });
    await expect.poll(() => taken).toBe(1);
    await nats.restart(2_500); // past the lease TTL and the queue's ack wait (1 s)
    await connection.whenConnected();
    await expect.poll(() => connection.health).toBe('ok');
    // The message comes back (its ack wait passed): the node holds the run again, and runs it once.
    await expect.poll(async () => (await queue.holder('run-r'))?.node).toBe('a');
    await new Promise((resolve) => setTimeout(resolve, 3_000));
    expect(taken).toBe(1);
    expect(signal?.aborted).toBe(false);
    finish?.();
    await expect.poll(() => queue.running).toBe(0);
    // Acknowledged once it ended: no delivery comes back.
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    expect(taken).toBe(1);
    expect(await queue.holder('run-r')).toBeUndefined();
    await queue.close();
  });

  it('loses no stored event across a nats-server restart', async () => {
    const cluster = name();
    const connection = await node(cluster, 'a');
    const bus = await JetStreamEventBus.open(connection);
    for (let index = 0; index < 50; index++) await bus.publish('agent.step', 'r', index);
    await nats.restart();
    await connection.whenConnected();
    await expect.poll(() => connection.health, { timeout: 10_000 }).toBe('ok');
    for (let index = 50; index < 100; index++) await bus.publish('agent.step', 'r', index);
    const got: unknown[] = [];
    const subscription = bus.subscribe(
      { topics: ['agent.*'], sessionId: 'r', afterSeq: 0 },
      (event) => void got.push(event.data),
    );
    await expect.poll(() => got.length, { timeout: 10_000 }).toBe(100);
    subscription.unsubscribe();
    expect(got).toEqual(Array.from({ length: 100 }, (_, index) => index));
  });

  it('refuses a forwarded terminal call without a valid MAC, a stale one and a replay: the terminal receives only the good one, and nothing sent carries the secret', async () => {
    const cluster = name();
    const a = await node(cluster, 'a');
    const b = await node(cluster, 'b');
    const busA = await JetStreamEventBus.open(a);
    const busB = await JetStreamEventBus.open(b);
    const disposable = (): Disposable => ({ [Symbol.dispose]: () => undefined });
    const session: HostSession = {
      id: 'typed-into',
      pid: process.pid,
      command: 'test',
      args: [],
      cols: 80,
      rows: 24,
      createdAt: Date.now(),
      scrollback: { start: 0, end: 0, read: () => ({ offset: 0, data: Buffer.alloc(0) }) },
      exitInfo: undefined,
      onData: disposable,
      onExit: disposable,
      hold: disposable,
      watch: disposable,
    };
    const typed: string[] = [];
    const called: string[] = [];
    const logged: string[] = [];
    const owner = await ClusterTerminals.open(a, busA, {
      secret: SECRET,
      onError: (error) => void logged.push(String(error)),
    });
    const front = await ClusterTerminals.open(b, busB, { secret: SECRET });
    // Anything that reaches NATS (no cluster credentials needed here): it sees and sends every subject.
    const intruder = await connect({ servers: [nats.url] });
    const traffic: string[] = [];
    const tap = intruder.subscribe('>', {
      callback: (_error, message) =>
        void traffic.push(
          `${message.subject} ${message.headers === undefined ? '' : [...message.headers].join(' ')} ${Buffer.from(message.data).toString('latin1')}`,
        ),
    });
    const inbox = `${cluster}.node.a.pty`;
    const copies: Msg[] = [];
    const copy = intruder.subscribe(inbox, { callback: (_error, message) => void copies.push(message) });
    await intruder.flush();
    try {
      owner.attach({
        on: () => undefined,
        off: () => undefined,
        get: (id) => (id === session.id ? session : undefined),
        list: () => [session],
        callLocal: (method, params) => {
          called.push(method);
          if (method === 'pty.input')
            typed.push(Buffer.from((params as { data: string }).data, 'base64').toString());
          return Promise.resolve({ bytes: 0 });
        },
      });
      const input = (text: string): string =>
        JSON.stringify({
          m: 'pty.input',
          p: { sessionId: session.id, data: Buffer.from(text).toString('base64') },
        });
      const refusal = async (body: string, headers?: MsgHdrs) =>
        JSON.parse(
          (await intruder.request(inbox, body, { timeout: 5_000, ...(headers ? { headers } : {}) })).string(),
        ) as {
          e?: { code: string; message: string; data: { reason: string } };
        };
      // No MAC at all.
      expect((await refusal(input('rm -rf ~\r'))).e).toMatchObject({
        code: 'invalid_request',
        message: expect.stringMatching(/node a refused the forwarded call: it carries no authentication/),
        data: { reason: 'unauthenticated' },
      });
      // A MAC under another secret.
      const body = Buffer.from(input('wrong key\r'));
      expect(
        (
          await refusal(
            input('wrong key\r'),
            new ForwardAuth('not-the-cluster-secret', cluster).sign(inbox, body),
          )
        ).e?.data.reason,
      ).toBe('bad_mac');
      // The right secret, but a minute old.
      const old = new ForwardAuth(SECRET, cluster, () => Date.now() - 60_000);
      const late = Buffer.from(input('late\r'));
      expect((await refusal(input('late\r'), old.sign(inbox, late))).e?.data.reason).toBe('stale');
      // Nor is a terminal forked: on the node, outside any sandbox, as the server's user.
      const spawn = JSON.stringify({
        m: 'pty.spawn',
        p: { command: '/bin/sh', args: [], cols: 80, rows: 24 },
      });
      expect((await refusal(spawn)).e?.data.reason).toBe('unauthenticated');
      expect(typed).toEqual([]);
      expect(called).toEqual([]);
      // A node of the cluster: its call works.
      await expect
        .poll(
          () =>
            front
              .call('pty.input', {
                sessionId: session.id,
                data: Buffer.from('ls\r').toString('base64'),
              } as never)
              .then(
                () => true,
                () => false,
              ),
          { timeout: 10_000 },
        )
        .toBe(true);
      expect(typed).toEqual(['ls\r']);
      // That call, sent again as it was seen on the wire: a replay.
      const seen = copies.findLast((message) => message.string().includes('"pty.input"')); // the node's call
      expect(seen).toBeDefined();
      const again = natsHeaders();
      for (const [key, values] of seen!.headers ?? []) for (const value of values) again.append(key, value);
      expect((await refusal(seen!.string(), again)).e?.data.reason).toBe('replayed');
      expect(typed).toEqual(['ls\r']);
      expect(logged.join('\n')).toMatch(
        /refused a forwarded call on .*\.node\.a\.pty: it carries no authentication/,
      );
      // Nothing on the wire carries the secret (nor the key derived from it).
      await intruder.flush();
      expect(traffic.length).toBeGreaterThan(5);
      for (const line of traffic) expect(line.includes(SECRET)).toBe(false);
    } finally {
      tap.unsubscribe();
      copy.unsubscribe();
      await intruder.close();
      await front.close();
      await owner.close();
    }
  });

  it("takes a forwarded call's answer only when a node of the cluster signed it: one forged by anything else on NATS is refused, saying why", async () => {
    const cluster = name();
    await node(cluster, 'a'); // a live node whose calls nothing of the cluster answers
    const b = await node(cluster, 'b');
    const logged: string[] = [];
    const front = await ClusterTerminals.open(b, await JetStreamEventBus.open(b), {
      secret: SECRET,
      onError: (error) => void logged.push(String(error)),
    });
    // Anything that reaches NATS answers the calls sent to node a first.
    const intruder = await connect({ servers: [nats.url] });
    const inbox = `${cluster}.node.a.pty`;
    const forged = JSON.stringify({ r: { sessionId: 'forged', pid: 1 } });
    let sign: ((reply: string, data: Uint8Array) => MsgHdrs) | undefined;
    const answer = intruder.subscribe(inbox, {
      callback: (_error, message) => {
        const data = Buffer.from(forged);
        message.respond(data, sign === undefined ? {} : { headers: sign(message.reply ?? '', data) });
      },
    });
    await intruder.flush();
    try {
      const spawn = (): Promise<unknown> =>
        front.spawn('a', { command: '/bin/sh', args: [], cols: 80, rows: 24 }).catch((e: unknown) => e);
      await expect
        .poll(async () => ((await spawn()) as { data?: { reason?: string } }).data?.reason, {
          timeout: 10_000,
        })
        .toBe('unauthenticated');
      const unsigned = (await spawn()) as { code: string; message: string; data: Record<string, unknown> };
      expect(unsigned).toMatchObject({
        code: 'invalid_request',
        message: 'the answer to pty.spawn from node a was refused: it carries no authentication',
        data: { reason: 'unauthenticated', node: 'a' },
      });
      // Signed, but under another secret.
      const other = new ForwardAuth('not-the-cluster-secret', cluster);
      sign = (reply, data) => other.sign(reply, data);
      expect(((await spawn()) as { data: { reason: string } }).data.reason).toBe('bad_mac');
      expect(logged.join('\n')).toMatch(
        /refused node a's answer to pty\.spawn on _INBOX\.\S+: it carries no authentication/,
      );
    } finally {
      answer.unsubscribe();
      await intruder.close();
      await front.close();
    }
  });

  it('refuses to open terminals without the cluster secret', async () => {
    const a = await node(name(), 'a');
    const error = await ClusterTerminals.open(a, await JetStreamEventBus.open(a), {} as never).catch(
      (caught: unknown) => caught,
    );
    expect(error).toMatchObject({ code: 'invalid_options', message: expect.stringMatching(/secret/) });
  });

  it("a follower whose client read nothing for longer than a consumer's inactive threshold goes on where it was", async () => {
    const cluster = name();
    const a = await node(cluster, 'a');
    const b = await node(cluster, 'b');
    const busA = await JetStreamEventBus.open(a);
    const busB = await JetStreamEventBus.open(b);
    const listeners = new Set<(chunk: Buffer, offset: number) => void>();
    const disposable = (): Disposable => ({ [Symbol.dispose]: () => undefined });
    let written = 0;
    const session: HostSession = {
      id: 'slow-reader',
      pid: process.pid,
      command: 'test',
      args: [],
      cols: 80,
      rows: 24,
      createdAt: Date.now(),
      scrollback: { start: 0, end: 0, read: () => ({ offset: written, data: Buffer.alloc(0) }) },
      exitInfo: undefined,
      onData: (listener) => (listeners.add(listener), { [Symbol.dispose]: () => listeners.delete(listener) }),
      onExit: disposable,
      hold: disposable,
      watch: disposable,
    };
    const host: TerminalHost = {
      on: () => undefined,
      off: () => undefined,
      get: (id) => (id === session.id ? session : undefined),
      list: () => [session],
      callLocal: () => Promise.reject(new Error('not here')),
    };
    const owner = await ClusterTerminals.open(a, busA, { secret: SECRET });
    const front = await ClusterTerminals.open(b, busB, { secret: SECRET });
    try {
      owner.attach(host);
      // The session's registration reaches the other node through NATS: follow once it is known there.
      await expect.poll(() => front.has(session.id), { timeout: 10_000 }).toBe(true);
      let received = 0;
      let acked = 0;
      const viewer: RemoteViewer = {
        id: 'v',
        open: true,
        sessions: new Set([session.id]),
        wants: () => true,
        sendOutput: (_id, _offset, data) => void (received += data.length),
        backlog: () => received - acked,
        acked: () => acked,
      };
      // The terminal's registration reaches the other node through the registrations' bucket.
      await expect
        .poll(
          () =>
            front.follow(viewer, session.id, 0).then(
              () => true,
              () => false,
            ),
          { timeout: 10_000 },
        )
        .toBe(true);
      // 8 MiB written at once; the client reads ~1 MiB of it and then nothing for 8 s.
      for (let index = 0; index < 128; index++) {
        const chunk = Buffer.alloc(64 * 1024, index % 256);
        for (const listener of listeners) listener(chunk, written);
        written += chunk.length;
      }
      await expect.poll(() => received, { timeout: 30_000 }).toBeGreaterThan(1024 * 1024);
      await new Promise((resolve) => setTimeout(resolve, 8_000));
      // It reads on: every byte arrives.
      await expect
        .poll(() => ((acked = received), front.ack(viewer, session.id, acked), received), {
          timeout: 60_000,
          interval: 100,
        })
        .toBe(written);
    } finally {
      await front.close();
      await owner.close();
    }
  }, 120_000);

  it('a node whose process was stalled past the lease TTL does not take a live node for lost', async () => {
    const cluster = name();
    const a = await node(cluster, 'a');
    const b = await node(cluster, 'b');
    const busA = await JetStreamEventBus.open(a);
    const busB = await JetStreamEventBus.open(b);
    const listeners = new Set<(chunk: Buffer, offset: number) => void>();
    const disposable = (): Disposable => ({ [Symbol.dispose]: () => undefined });
    let written = 0;
    const session: HostSession = {
      id: 'stalled',
      pid: process.pid,
      command: 'test',
      args: [],
      cols: 80,
      rows: 24,
      createdAt: Date.now(),
      scrollback: { start: 0, end: 0, read: () => ({ offset: written, data: Buffer.alloc(0) }) },
      exitInfo: undefined,
      onData: (listener) => (listeners.add(listener), { [Symbol.dispose]: () => listeners.delete(listener) }),
      onExit: disposable,
      hold: disposable,
      watch: disposable,
    };
    const owner = await ClusterTerminals.open(a, busA, { secret: SECRET });
    const front = await ClusterTerminals.open(b, busB, { secret: SECRET });
    const exits: BusEvent[] = [];
    const spy = busB.subscribe({ topics: ['pty.exit'] }, (event) => void exits.push(event));
    await spy.ready;
    try {
      owner.attach({
        on: () => undefined,
        off: () => undefined,
        get: (id) => (id === session.id ? session : undefined),
        list: () => [session],
        callLocal: () => Promise.reject(new Error('not here')),
      });
      let received = 0;
      const viewer: RemoteViewer = {
        id: 'v',
        open: true,
        sessions: new Set([session.id]),
        wants: () => true,
        sendOutput: (_id, _offset, data) => void (received += data.length),
        backlog: () => 0,
        acked: () => undefined,
      };
      await front.follow(viewer, session.id, 0);
      const write = (): void => {
        const chunk = Buffer.alloc(1024, 120);
        for (const listener of listeners) listener(chunk, written);
        written += chunk.length;
      };
      write();
      await expect.poll(() => received, { timeout: 10_000 }).toBe(written);
      // The whole process (both nodes) stalls past the 2 s TTL, as a stopped or starved node does.
      const until = Date.now() + 3_000;
      while (Date.now() < until);
      await new Promise((resolve) => setTimeout(resolve, 3_000));
      write();
      await expect.poll(() => received, { timeout: 10_000 }).toBe(written);
      expect(exits).toEqual([]);
    } finally {
      spy.unsubscribe();
      await front.close();
      await owner.close();
    }
  }, 60_000);

  it('a follower whose client reads a message every two seconds gets every byte', async () => {
    const cluster = name();
    const a = await node(cluster, 'a');
    const b = await node(cluster, 'b');
    const busA = await JetStreamEventBus.open(a);
    const busB = await JetStreamEventBus.open(b);
    const listeners = new Set<(chunk: Buffer, offset: number) => void>();
    const disposable = (): Disposable => ({ [Symbol.dispose]: () => undefined });
    let written = 0;
    const session: HostSession = {
      id: 'trickle-reader',
      pid: process.pid,
      command: 'test',
      args: [],
      cols: 80,
      rows: 24,
      createdAt: Date.now(),
      scrollback: { start: 0, end: 0, read: () => ({ offset: written, data: Buffer.alloc(0) }) },
      exitInfo: undefined,
      onData: (listener) => (listeners.add(listener), { [Symbol.dispose]: () => listeners.delete(listener) }),
      onExit: disposable,
      hold: disposable,
      watch: disposable,
    };
    const host: TerminalHost = {
      on: () => undefined,
      off: () => undefined,
      get: (id) => (id === session.id ? session : undefined),
      list: () => [session],
      callLocal: () => Promise.reject(new Error('not here')),
    };
    const owner = await ClusterTerminals.open(a, busA, { secret: SECRET });
    const front = await ClusterTerminals.open(b, busB, { secret: SECRET });
    try {
      owner.attach(host);
      // The session's registration reaches the other node through NATS: follow once it is known there.
      await expect.poll(() => front.has(session.id), { timeout: 10_000 }).toBe(true);
      let received = 0;
      let messages = 0;
      let busyUntil = 0;
      const viewer: RemoteViewer = {
        id: 'v',
        open: true,
        sessions: new Set([session.id]),
        wants: () => true,
        sendOutput: (_id, _offset, data) => {
          const before = Math.floor(received / QUARTER_MIB);
          received += data.length;
          // Each 256 KiB the client gets keeps it busy for 2 s (the first ten times): a feed waits on
          // it less than the 2.5 s after which it takes a new consumer, ten times in a row.
          if (Math.floor(received / QUARTER_MIB) > before && ++messages <= 10) busyUntil = Date.now() + 2_000;
        },
        backlog: () => (Date.now() < busyUntil ? 8 * 1024 * 1024 : 0),
        acked: () => received,
      };
      await front.follow(viewer, session.id, 0);
      for (let index = 0; index < 128; index++) {
        const chunk = Buffer.alloc(64 * 1024, index % 256);
        for (const listener of listeners) listener(chunk, written);
        written += chunk.length;
      }
      await expect
        .poll(() => (front.ack(viewer, session.id, received), received), { timeout: 110_000, interval: 200 })
        .toBe(written);
    } finally {
      await front.close();
      await owner.close();
    }
  }, 120_000);
});
