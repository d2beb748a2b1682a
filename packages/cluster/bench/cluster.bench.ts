// Event throughput of the cluster bus against the in-process path, on one machine: 64 MiB of
// terminal-like output (4 KiB chunks) published by one node and read by a client of another node
// through JetStream, beside the same bytes through an in-process EventEmitter (the embedded bus's
// delivery). Also a session-store append (what each step of a cluster run adds) against nothing.
// Prints figures and ratios; the target lines say whether they hold.
import { EventEmitter } from 'node:events';
import { createHash } from 'node:crypto';
import { connectCluster, JetStreamEventBus, JetStreamSessionStore } from '../src/index.js';
import { natsServerBinary, startNatsServer } from '../src/testing.js';

const MIB = 1024 * 1024;
const TOTAL = Number(process.env.CLUSTER_BENCH_MIB ?? 64) * MIB;
const CHUNK = 4096;

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
    const pending: Promise<number>[] = [];
    for (let index = 0; index * CHUNK < TOTAL; index++) {
      pending.push(busA.publish('pty.output', 'bench', { data: chunk(index).toString('base64') }));
      if (pending.length >= 256) await pending.shift();
    }
    await Promise.all(pending);
    await done;
    const seconds = (performance.now() - started) / 1000;
    subscription.unsubscribe();
    const mbps = TOTAL / MIB / seconds;
    const sha = hash.digest('hex');
    console.log(
      `events, ${TOTAL / MIB} MiB in 4 KiB chunks to a client of another node: JetStream ${mbps.toFixed(1)} MB/s, in-process ${local.mbps.toFixed(0)} MB/s (${(mbps / local.mbps).toFixed(3)}x); bytes equal: ${sha === local.sha}`,
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
    await a.close();
    await b.close();
  } finally {
    await nats.dispose();
  }
}

await main();
