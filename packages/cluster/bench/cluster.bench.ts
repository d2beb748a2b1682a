// Throughput to a client of another node against the in-process path, on one machine: 64 MiB of a
// terminal's output on its real cluster path (the output stream, with flow control), and 64 MiB of
// events (4 KiB chunks) through the cluster's event bus, beside the same bytes through an
// in-process EventEmitter (the embedded bus's delivery). Also a session-store append (what each step of a cluster run adds) against nothing.
// Prints figures and ratios; the target lines say whether they hold. Beside each throughput, the CPU
// time it took (this process, which is both nodes, and nats-server; Linux), which a loaded machine
// changes less than the time.
import { EventEmitter } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import type { RemoteViewer } from '@aleph/gateway';
import {
  ClusterTerminals,
  connectCluster,
  JetStreamEventBus,
  JetStreamSessionStore,
  type ClusterConnection,
  type HostSession,
  type TerminalHost,
} from '../src/index.js';
import { natsServerBinary, startNatsServer } from '../src/testing.js';

const MIB = 1024 * 1024;
const TOTAL = Number(process.env.CLUSTER_BENCH_MIB ?? 64) * MIB;
const CHUNK = 4096;
/** The cluster's shared secret: the nodes authenticate the calls, reports and announcements they send each other. */
const SECRET = 'bench-cluster-secret-0123456789';

/** nats-server's CPU time so far (ms; the one this bench started: the newest), from /proc. */
function natsCpuMs(): number | undefined {
  try {
    const pid = Math.max(
      ...readdirSync('/proc')
        .filter((entry) => /^\d+$/.test(entry))
        .filter((entry) => {
          try {
            return readFileSync(`/proc/${entry}/comm`, 'utf8').trim() === 'nats-server';
          } catch {
            return false; // gone meanwhile
          }
        })
        .map(Number),
    );
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // clock ticks of 10 ms
  } catch {
    return undefined;
  }
}

/** Runs `work`; answers its result and the CPU time it took here and in nats-server, as a phrase. */
async function withCpu<T>(work: () => Promise<T>): Promise<[T, string]> {
  const process0 = process.cpuUsage();
  const nats0 = natsCpuMs();
  const result = await work();
  const used = process.cpuUsage(process0);
  const nats1 = natsCpuMs();
  const nats =
    nats0 === undefined || nats1 === undefined ? '' : `, nats-server ${(nats1 - nats0).toFixed(0)} ms`;
  return [result, `CPU: both nodes ${((used.user + used.system) / 1000).toFixed(0)} ms${nats}`];
}

function chunk(index: number): Buffer {
  const buffer = Buffer.alloc(CHUNK, 97 + (index % 26));
  buffer.writeUInt32LE(index, 0);
  return buffer;
}

async function inProcess(): Promise<{ mbps: number; sha: string }> {
  const emitter = new EventEmitter();
  const hash = createHash('sha256');
  let received = 0;
  const done = new Promise<void>((resolve) =>
    emitter.on('pty.output', (data: Buffer) => {
      hash.update(data);
      received += data.length;
      if (received >= TOTAL) resolve();
    }),
  );
  const started = performance.now();
  for (let index = 0; index * CHUNK < TOTAL; index++) emitter.emit('pty.output', chunk(index));
  await done;
  return { mbps: TOTAL / MIB / ((performance.now() - started) / 1000), sha: hash.digest('hex') };
}

/**
 * A terminal's output on its real cluster path: node a's terminal (a stand-in pty that honours
 * holds) appends to the output stream; a client of node b follows it from offset 0 and acknowledges
 * every 128 KiB as the typed client does. Answers MB/s and the sha256 of what arrived.
 */
async function terminalOutput(
  a: ClusterConnection,
  b: ClusterConnection,
  busA: JetStreamEventBus,
  busB: JetStreamEventBus,
): Promise<{ mbps: number; sha: string }> {
  const READ = 16 * 1024; // a pty read
  const listeners = new Set<(chunk: Buffer, offset: number) => void>();
  let holds = 0;
  let released: () => void = () => undefined;
  const disposable = (dispose = (): void => undefined): Disposable => ({ [Symbol.dispose]: dispose });
  const session: HostSession = {
    id: 'bench-terminal',
    pid: process.pid,
    command: 'bench',
    args: [],
    cols: 80,
    rows: 24,
    createdAt: Date.now(),
    // Keeps nothing: a viewer reads what is written after it follows.
    scrollback: {
      start: 0,
      end: 0,
      read() {
        return { offset: this.end, data: Buffer.alloc(0) };
      },
    },
    exitInfo: undefined,
    onData: (listener) => (listeners.add(listener), disposable(() => listeners.delete(listener))),
    onExit: () => disposable(),
    hold: () => {
      holds += 1;
      return disposable(() => {
        holds -= 1;
        if (holds === 0) released();
      });
    },
    watch: () => disposable(),
  };
  // Its manager spawns nothing more: the one session is listed at attach.
  const host: TerminalHost = {
    on: () => undefined,
    off: () => undefined,
    get: (id) => (id === session.id ? session : undefined),
    list: () => [session],
    callLocal: () => Promise.reject(new Error('not in this bench')),
  };
  const owner = await ClusterTerminals.open(a, busA, { secret: SECRET, maxBytes: 2 * TOTAL + 64 * MIB });
  const front = await ClusterTerminals.open(b, busB, { secret: SECRET, maxBytes: 2 * TOTAL + 64 * MIB });
  owner.attach(host);
  const hash = createHash('sha256');
  let received = 0;
  let resolveDone: () => void = () => undefined;
  const done = new Promise<void>((resolve) => (resolveDone = resolve));
  let acked = 0;
  const viewer: RemoteViewer = {
    id: 'bench-viewer',
    open: true,
    sessions: new Set([session.id]),
    wants: () => true,
    sendOutput(_id, _offset, data) {
      hash.update(data);
      received += data.length;
      if (received - acked >= 128 * 1024) {
        acked = received;
        front.ack(viewer, session.id, acked);
      }
      if (received >= TOTAL) resolveDone();
    },
    backlog: () => received - acked,
    acked: () => acked,
  };
  await front.follow(viewer, session.id, 0);
  const started = performance.now();
  let end = 0;
  for (let index = 0; end < TOTAL; index++) {
    if (holds > 0) await new Promise<void>((resolve) => (released = resolve));
    const data = Buffer.alloc(READ, 97 + (index % 26));
    data.writeUInt32LE(index, 0);
    for (const listener of listeners) listener(data, end);
    end += READ;
    Object.assign(session.scrollback, { start: end, end });
    if (index % 16 === 15) await new Promise((resolve) => setImmediate(resolve));
  }
  await done;
  const seconds = (performance.now() - started) / 1000;
  await front.close();
  await owner.close();
  return { mbps: TOTAL / MIB / seconds, sha: hash.digest('hex') };
}

async function main(): Promise<void> {
  if (natsServerBinary() === undefined) {
    console.log('cluster bench: skipped (no nats-server; install the Debian package nats-server)');
    return;
  }
  console.log(`load: ${(await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').trim()}`);
  const nats = await startNatsServer();
  try {
    const a = await connectCluster({ servers: [nats.url], name: 'bench', node: 'a' });
    const b = await connectCluster({ servers: [nats.url], name: 'bench', node: 'b' });
    const busA = await JetStreamEventBus.open(a, { maxBytes: 2 * TOTAL + 64 * MIB });
    const busB = await JetStreamEventBus.open(b, { maxBytes: 2 * TOTAL + 64 * MIB });
    const local = await inProcess();

    const [terminal, terminalCpu] = await withCpu(() => terminalOutput(a, b, busA, busB));
    console.log(
      `terminal output, ${TOTAL / MIB} MiB to a client of another node (the output stream, flow-controlled): ${terminal.mbps.toFixed(1)} MB/s, in-process ${local.mbps.toFixed(0)} MB/s (${(terminal.mbps / local.mbps).toFixed(3)}x); ${terminalCpu}`,
    );
    console.log(`  target >= 50 MB/s: ${terminal.mbps >= 50 ? 'holds' : 'MISSED'}`);

    const hash = createHash('sha256');
    let received = 0;
    let resolveDone: () => void = () => undefined;
    const done = new Promise<void>((resolve) => (resolveDone = resolve));
    const subscription = busB.subscribe({ topics: ['pty.output'], sessionId: 'bench' }, (event) => {
      const bytes = Buffer.from((event.data as { data: string }).data, 'base64');
      hash.update(bytes);
      received += bytes.length;
      if (received >= TOTAL) resolveDone();
    });
    await subscription.ready;
    const started = performance.now();
    const [, eventsCpu] = await withCpu(async () => {
      const pending: Promise<number>[] = [];
      for (let index = 0; index * CHUNK < TOTAL; index++) {
        pending.push(busA.publish('pty.output', 'bench', { data: chunk(index).toString('base64') }));
        if (pending.length >= 256) await pending.shift();
      }
      await Promise.all(pending);
      await done;
    });
    const seconds = (performance.now() - started) / 1000;
    subscription.unsubscribe();
    const mbps = TOTAL / MIB / seconds;
    const sha = hash.digest('hex');
    console.log(
      `events, ${TOTAL / MIB} MiB in 4 KiB chunks to a client of another node: JetStream ${mbps.toFixed(1)} MB/s, in-process ${local.mbps.toFixed(0)} MB/s (${(mbps / local.mbps).toFixed(3)}x); bytes equal: ${sha === local.sha}; ${eventsCpu}`,
    );
    console.log(`  target >= 50 MB/s: ${mbps >= 50 ? 'holds' : 'MISSED'}`);

    const store = await JetStreamSessionStore.open(a);
    const id = await store.create();
    const samples: number[] = [];
    for (let index = 0; index < 500; index++) {
      const t = performance.now();
      await store.append(id, { type: 'user', content: `step ${index}` } as never);
      samples.push(performance.now() - t);
    }
    samples.sort((x, y) => x - y);
    const p50 = samples[Math.floor(samples.length / 2)] ?? 0;
    const p99 = samples[Math.floor(samples.length * 0.99)] ?? 0;
    console.log(
      `session append (fenced, acknowledged by JetStream): p50 ${p50.toFixed(3)} ms, p99 ${p99.toFixed(3)} ms`,
    );
    // A step's log as a run writes it: the model's reply naming a tool call, the tool's result, the
    // turn's end, then the turn's flush (the harness awaits each append, then the flush).
    const stepSamples: number[] = [];
    for (let index = 0; index < 300; index++) {
      const t = performance.now();
      await store.append(id, {
        type: 'assistant',
        content: '',
        toolCalls: [{ id: `c${index}`, name: 'shell', args: {} }],
      } as never);
      await store.append(id, {
        type: 'tool_result',
        callId: `c${index}`,
        name: 'shell',
        output: 'ok',
        isError: false,
      } as never);
      await store.append(id, { type: 'turn_step', step: { iteration: index } } as never);
      await store.flush(id);
      stepSamples.push(performance.now() - t);
    }
    stepSamples.sort((x, y) => x - y);
    console.log(
      `a step's log (reply with a tool call, its result, the turn's end, flush): p50 ${(stepSamples[150] ?? 0).toFixed(3)} ms, p99 ${(stepSamples[297] ?? 0).toFixed(3)} ms`,
    );
    // A step's cluster work as a run does it, with pauses where the model and the command take
    // their time: the run's events on the bus (a client of the node subscribed to all), its log's
    // two writes, a terminal's end; the CPU time per step of this process (the node) and nats-server.
    const watched = busA.subscribe({ topics: ['*'] }, () => undefined);
    await watched.ready;
    const run = await store.create();
    const pause = (): Promise<unknown> => new Promise((resolve) => setTimeout(resolve, 1));
    const runStep = async (index: number): Promise<void> => {
      const turn = { runId: run, sessionId: run, turn: index };
      void busA.publish('agent.step', run, { ...turn, step: { iteration: index, state: 'continue' } });
      await pause(); // the model's answer
      void busA.publish('agent.delta', run, { ...turn, seq: 0, kind: 'tool', text: 'shell' });
      void busA.publish('agent.delta', run, { ...turn, seq: 1, kind: 'tool', text: '{}' });
      const call = { id: `s${index}`, name: 'shell', args: { command: 'true' } };
      await store.append(run, { type: 'assistant', content: '', toolCalls: [call] } as never);
      void busA.publish('agent.act', run, { ...turn, calls: [{ callId: call.id, name: 'shell' }] });
      await pause(); // the command's terminal starts
      void busA.publish('agent.shell', run, { ...turn, sessionId: `pty-${index}`, command: 'true' });
      await pause(); // and ends
      void busA.publish('pty.exit', `pty-${index}`, { sessionId: `pty-${index}`, exitCode: 0, signal: null });
      const output = 'ok\n'.repeat(100);
      await store.append(run, {
        type: 'tool_result',
        callId: call.id,
        name: 'shell',
        output,
        isError: false,
      } as never);
      void busA.publish('agent.tool', run, { ...turn, callId: call.id, name: 'shell', ok: true, output });
      await store.append(run, { type: 'turn_step', step: { iteration: index } } as never);
      await store.flush(run);
    };
    for (let index = 0; index < 30; index++) await runStep(index); // warm-up
    const STEP_COUNT = 400;
    const [, stepCpu] = await withCpu(async () => {
      for (let index = 30; index < 30 + STEP_COUNT; index++) await runStep(index);
    });
    watched.unsubscribe();
    const perStep = (phrase: string): string =>
      phrase.replace(/(\d+) ms/g, (_, ms: string) => `${(Number(ms) / STEP_COUNT).toFixed(2)} ms`);
    console.log(
      `a step's cluster work (two log writes, seven events, a subscriber), per step: ${perStep(stepCpu).replace('both nodes', 'the node')}`,
    );
    await a.close();
    await b.close();
  } finally {
    await nats.dispose();
  }
}

await main();
