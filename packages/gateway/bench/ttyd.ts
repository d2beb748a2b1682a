// The gateway side by side with ttyd (the C web terminal most like it), in alternating rounds, when
// a ttyd is found (`TTYD=<path>`, else `ttyd` on PATH); otherwise it says it skipped it. Both are
// driven by plain `ws` clients in this process that count bytes and nothing else, and both run the
// same programs: `cat` of the payload for throughput, `stty raw -echo; exec cat` for the echo (a
// program echoes, not the tty), `sleep` for idle sessions. CPU and memory are read from /proc for
// the server and its helpers, as `ps` shows them — the programs under test are not counted.
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { delimiter, join } from 'node:path';
import { WebSocket } from 'ws';
import { connectGateway, PROTOCOL_VERSION } from '../src/client.js';
import { readBinaryFrame } from '../src/internal/binary-frames.js';
import { roundTrips } from './round-trips.js';

const MiB = 1024 * 1024;
const ECHO_PROGRAM = ['/bin/sh', '-c', 'stty raw -echo; exec cat'];

/** `TTYD`, else `ttyd` on PATH; undefined when there is none. */
export function findTtyd(): string | undefined {
  const candidates = process.env['TTYD']
    ? [process.env['TTYD']]
    : (process.env['PATH'] ?? '').split(delimiter).map((folder) => join(folder, 'ttyd'));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

interface Stat {
  readonly ppid: number;
  readonly cpuMicros: number;
  readonly rssBytes: number;
}

function stat(pid: number): Stat | undefined {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    const ticks = Number(fields[11]) + Number(fields[12]); // utime + stime
    return { ppid: Number(fields[1]), cpuMicros: (ticks * 1e6) / 100, rssBytes: Number(fields[21]) * 4096 };
  } catch {
    return undefined; // gone
  }
}

/**
 * The server process and its helpers — its descendants, less the programs under test and theirs —
 * as `ps` lists them: CPU used so far and resident memory, summed.
 */
export function serverTree(
  pid: number,
  programs: ReadonlySet<number>,
): { cpuMicros: number; rssBytes: number } {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const info = stat(Number(entry));
    if (info !== undefined) children.set(info.ppid, [...(children.get(info.ppid) ?? []), Number(entry)]);
  }
  const total = { cpuMicros: 0, rssBytes: 0 };
  const visit = (at: number): void => {
    if (programs.has(at)) return;
    const info = stat(at);
    if (info === undefined) return;
    total.cpuMicros += info.cpuMicros;
    total.rssBytes += info.rssBytes;
    for (const child of children.get(at) ?? []) visit(child);
  };
  visit(pid);
  return total;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
    server.once('error', reject);
  });
}

/** A ttyd serving `command` on loopback (writable, so keys reach the program). */
async function startTtyd(
  binary: string,
  command: string[],
): Promise<{ port: number; process: ChildProcess }> {
  const port = await freePort();
  const child = spawn(binary, ['-p', String(port), '-i', 'lo', '-W', '-d', '0', ...command], {
    stdio: ['ignore', 'ignore', 'ignore'],
  });
  for (let attempt = 0; attempt < 200; attempt += 1) {
    const listening = await new Promise<boolean>((resolve) => {
      const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`, ['tty']);
      socket.once('open', () => (socket.close(), resolve(true)));
      socket.once('error', () => resolve(false));
    });
    if (listening) return { port, process: child };
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  child.kill();
  throw new Error(`ttyd did not listen on ${port}`);
}

/** A ttyd client: the program starts on the first (JSON) message; output frames are '0' + bytes. */
async function ttydClient(port: number, onOutput: (bytes: number, data: Buffer) => void): Promise<WebSocket> {
  const socket = new WebSocket(`ws://127.0.0.1:${port}/ws`, ['tty'], { perMessageDeflate: false });
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  socket.on('message', (frame: Buffer) => {
    if (frame[0] === 0x30) onOutput(frame.length - 1, frame);
  });
  socket.send(Buffer.from(JSON.stringify({ AuthToken: '', columns: 200, rows: 50 })));
  return socket;
}

/** A gateway client as plain as the ttyd one: binary frames, counts bytes, no acks. */
async function gatewayClient(
  url: string,
): Promise<{ socket: WebSocket; call: (method: string, params: object) => Promise<any> }> {
  const socket = new WebSocket(url, [PROTOCOL_VERSION], {
    headers: { authorization: 'Bearer bench' },
    perMessageDeflate: false,
  });
  await new Promise((resolve, reject) => socket.once('open', resolve).once('error', reject));
  let next = 1;
  const pending = new Map<number, (result: unknown) => void>();
  socket.on('message', (frame: Buffer, binary: boolean) => {
    if (binary) return;
    const message = JSON.parse(frame.toString()) as { id?: number; result?: unknown };
    if (typeof message.id === 'number') pending.get(message.id)?.(message.result);
  });
  const call = (method: string, params: object) =>
    new Promise<any>((resolve) => {
      const id = next++;
      pending.set(id, resolve);
      socket.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  await call('pty.binary', {});
  await call('events.subscribe', { topics: ['pty.*'] });
  return { socket, call };
}

const median = (values: number[]): number =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const pct = (values: number[], p: number): number =>
  [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(p * values.length))]!;

export interface SideBySide {
  readonly ttyd: string;
  readonly gatewayUrl: string;
  readonly gatewayPid: number;
  readonly file: string;
  readonly rounds: number;
  /** A fresh gateway process for the memory rounds (one that ran floods holds memory it may return). */
  readonly startGateway: () => Promise<{ url: string; pid: number; stop: () => Promise<void> }>;
}

/** One throughput round each: MiB/s as received, and server CPU (µs) per MiB. */
async function throughputRounds(options: SideBySide, cat: { port: number; process: ChildProcess }) {
  const figures = {
    ttyd: [] as number[],
    gateway: [] as number[],
    ttydCpu: [] as number[],
    gatewayCpu: [] as number[],
  };
  const gateway = await gatewayClient(options.gatewayUrl);
  for (let round = -1; round < options.rounds; round += 1) {
    // ttyd: a connection runs the cat; the socket closes when it exits.
    let bytes = 0;
    const ttydBefore = stat(cat.process.pid!)!.cpuMicros;
    let start = performance.now();
    const socket = await ttydClient(cat.port, (count) => (bytes += count));
    await new Promise((resolve) => socket.once('close', resolve));
    const ttydSeconds = (performance.now() - start) / 1000;
    const ttydCpu = stat(cat.process.pid!)!.cpuMicros - ttydBefore;
    // the gateway: pty.spawn of the same cat; done at its pty.exit.
    let gatewayBytes = 0;
    const programs = new Set<number>();
    const before = serverTree(options.gatewayPid, programs).cpuMicros;
    start = performance.now();
    const done = new Promise<void>((resolve) => {
      const onFrame = (frame: Buffer, binary: boolean): void => {
        if (binary) {
          const read = readBinaryFrame(frame);
          if (typeof read !== 'string') gatewayBytes += read.data.length;
        } else if (frame.includes('"pty.exit"')) {
          gateway.socket.off('message', onFrame);
          resolve();
        }
      };
      gateway.socket.on('message', onFrame);
    });
    const spawned = await gateway.call('pty.spawn', {
      command: '/bin/cat',
      args: [options.file],
      cols: 200,
      rows: 50,
    });
    programs.add(spawned.pid);
    await done;
    const gatewaySeconds = (performance.now() - start) / 1000;
    const gatewayCpu = serverTree(options.gatewayPid, programs).cpuMicros - before;
    if (round < 0) continue; // warm-up
    figures.ttyd.push(bytes / MiB / ttydSeconds);
    figures.ttydCpu.push(ttydCpu / (bytes / MiB));
    figures.gateway.push(gatewayBytes / MiB / gatewaySeconds);
    figures.gatewayCpu.push(gatewayCpu / (gatewayBytes / MiB));
  }
  gateway.socket.close();
  return figures;
}

/** Alternating echo rounds: round-trip times, and server CPU (µs) per round trip. */
async function echoRounds(options: SideBySide, echo: { port: number; process: ChildProcess }) {
  const TRIPS = 1000;
  const ttydTrips = roundTrips(() => ttyd.send(Buffer.from('0x')));
  const ttyd = await ttydClient(echo.port, () => ttydTrips.arrived());
  const client = await connectGateway(options.gatewayUrl, { token: 'bench' });
  await client.subscribe(['pty.*']);
  const program = await client.spawn({
    command: ECHO_PROGRAM[0]!,
    args: ECHO_PROGRAM.slice(1),
    cols: 80,
    rows: 24,
  });
  const keys = roundTrips(() => client.type(program.sessionId, 'x'));
  client.onOutput((output) => output.sessionId === program.sessionId && keys.arrived());
  const programs = new Set([program.pid]);
  await ttydTrips.time(3000, 0);
  await keys.time(3000, 0);
  const figures = { ttyd: [] as number[][], gateway: [] as number[][], ttydCpu: 0, gatewayCpu: 0 };
  for (let round = 0; round < options.rounds; round += 1) {
    const ttydBefore = stat(echo.process.pid!)!.cpuMicros;
    figures.ttyd.push(await ttydTrips.time(0, TRIPS));
    figures.ttydCpu += stat(echo.process.pid!)!.cpuMicros - ttydBefore;
    const before = serverTree(options.gatewayPid, programs).cpuMicros;
    figures.gateway.push(await keys.time(0, TRIPS));
    figures.gatewayCpu += serverTree(options.gatewayPid, programs).cpuMicros - before;
  }
  ttyd.close();
  await client.closeSession(program.sessionId);
  await client.close();
  const trips = options.rounds * TRIPS;
  return { ...figures, ttydCpu: figures.ttydCpu / trips, gatewayCpu: figures.gatewayCpu / trips };
}

/**
 * Memory per idle session: the server and its helpers at 0 and at 64 idle sessions (`sleep`), in
 * three alternating rounds (ttyd, then a fresh gateway process) after one to warm up, each from
 * the resident size just before its sessions start; medians. (In the gateway that ran the floods
 * before, a round could read below zero: its allocator returned memory while the sessions started.)
 */
async function memoryPerSession(options: SideBySide, sleeper: { port: number; process: ChildProcess }) {
  const COUNT = 64;
  const settle = () => new Promise((resolve) => setTimeout(resolve, 500));
  const ttydPid = sleeper.process.pid!;
  const gateway = await options.startGateway();
  const client = await connectGateway(gateway.url, { token: 'bench' });
  await client.subscribe(['pty.*']);
  const rounds = { ttyd: [] as number[], gateway: [] as number[], ttydIdle: 0, gatewayIdle: 0 };
  for (let round = -1; round < 3; round += 1) {
    if (round === 0) rounds.ttyd.length = rounds.gateway.length = 0; // round -1 warms both up
    await settle();
    const ttydZero = stat(ttydPid)!.rssBytes;
    const sockets = [];
    for (let i = 0; i < COUNT; i += 1) sockets.push(await ttydClient(sleeper.port, () => {}));
    await settle();
    rounds.ttyd.push((stat(ttydPid)!.rssBytes - ttydZero) / COUNT);
    for (const socket of sockets) socket.close();
    if (round === 0) rounds.ttydIdle = ttydZero;

    const programs = new Set<number>();
    await client.request('bench.memory', {}); // a full GC in the gateway first
    await settle();
    const zero = serverTree(gateway.pid, programs).rssBytes;
    const ids = [];
    for (let i = 0; i < COUNT; i += 1) {
      const spawned = await client.spawn({ command: '/bin/sleep', args: ['1000'], cols: 80, rows: 24 });
      programs.add(spawned.pid);
      ids.push(spawned.sessionId);
    }
    await settle();
    await client.request('bench.memory', {});
    rounds.gateway.push((serverTree(gateway.pid, programs).rssBytes - zero) / COUNT);
    for (const id of ids) await client.closeSession(id);
    if (round === 0) rounds.gatewayIdle = zero;
  }
  await client.close();
  await gateway.stop();
  return {
    ttyd: median(rounds.ttyd),
    gateway: median(rounds.gateway),
    ttydIdle: rounds.ttydIdle,
    gatewayIdle: rounds.gatewayIdle,
  };
}

export async function sideBySide(options: SideBySide): Promise<void> {
  const cat = await startTtyd(options.ttyd, ['/bin/cat', options.file]);
  const echo = await startTtyd(options.ttyd, ECHO_PROGRAM);
  const sleeper = await startTtyd(options.ttyd, ['/bin/sleep', '1000']);
  try {
    const through = await throughputRounds(options, cat);
    const ratio = median(through.gateway) / median(through.ttyd);
    const cpuRatio = median(through.gatewayCpu) / median(through.ttydCpu);
    console.log(
      `vs ttyd, throughput (cat of the payload, ${options.rounds} alternating rounds after one each to warm up, medians; plain ws clients that count bytes): ttyd ${median(through.ttyd).toFixed(1)} MiB/s at ${(median(through.ttydCpu) / 1000).toFixed(1)} ms server CPU per MiB; gateway ${median(through.gateway).toFixed(1)} MiB/s at ${(median(through.gatewayCpu) / 1000).toFixed(1)} ms per MiB; throughput ${ratio.toFixed(2)}× ttyd's (target ≥ 1.0: ${ratio >= 1 ? 'holds' : 'MISSED'}), CPU per byte ${cpuRatio.toFixed(2)}× (target ≤ 1.0: ${cpuRatio <= 1 ? 'holds' : 'MISSED'})`,
    );
    const echoes = await echoRounds(options, echo);
    const p = (samples: number[][], at: number) => median(samples.map((round) => pct(round, at)));
    const keyRatio = echoes.gatewayCpu / echoes.ttydCpu;
    console.log(
      `vs ttyd, echo (\`stty raw -echo; exec cat\`, ${options.rounds} alternating rounds of 1000 after 3000 each to warm up): ttyd p50 ${p(echoes.ttyd, 0.5).toFixed(3)} ms p99 ${p(echoes.ttyd, 0.99).toFixed(3)} ms, ${echoes.ttydCpu.toFixed(0)} µs server CPU per round trip; gateway (binary frames) p50 ${p(echoes.gateway, 0.5).toFixed(3)} ms p99 ${p(echoes.gateway, 0.99).toFixed(3)} ms, ${echoes.gatewayCpu.toFixed(0)} µs; CPU per keystroke ${keyRatio.toFixed(2)}× ttyd's (target ≤ 1.5: ${keyRatio <= 1.5 ? 'holds' : 'MISSED'})`,
    );
    const memory = await memoryPerSession(options, sleeper);
    const kib = (bytes: number) => (bytes / 1024).toFixed(0);
    console.log(
      `vs ttyd, memory (RSS of the server and its helpers, as ps lists them; 64 idle sessions running sleep, a fresh gateway, medians of 3 alternating rounds after a warm-up): idle ttyd ${(memory.ttydIdle / MiB).toFixed(1)} MiB, gateway ${(memory.gatewayIdle / MiB).toFixed(1)} MiB; per idle session ttyd ${kib(memory.ttyd)} KiB, gateway ${kib(memory.gateway)} KiB (target ≤ 32 KiB: ${memory.gateway <= 32 * 1024 ? 'holds' : 'MISSED'})`,
    );
  } finally {
    for (const server of [cat, echo, sleeper]) server.process.kill('SIGTERM');
  }
}
