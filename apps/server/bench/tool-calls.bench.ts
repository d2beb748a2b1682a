// pnpm bench (apps/server): a tool call on the path users run — the real server process (dist/main.js),
// the sandbox required, `shell` through the agents' terminal pool, the session store and the events —
// driven by an instant scripted model speaking OpenAI's streamed chat completions (scripted-model.ts,
// a process of its own). Each run makes CALLS `shell` calls (`true 1` … `true N`), then the model
// stops; LEVELS runs at once (5 runs in all at least),
// after a warm-up not measured: one run, then (WARM=1, the default) every level once, so that the
// figures are those of a server whose optimizing compiler has caught up with its code (V8's
// optimizing compiler took 12-18% of a fresh server's CPU through its first few hundred calls; WARM=0:
// one run only, the figures of a fresh server). Beside it, in the same round and over the same
// model, the AI SDK's own loop running the same commands through child_process (sdk-shell-peer.ts).
// Reports, per level: calls/s, CPU per call of the server (and with its spawn helpers) and of the
// peer, the CPU of all the bench's processes per call (the commands with bubblewrap, the model, the
// bench: from it, how far concurrency can go on this machine's cores), and meanwhile a `pty.list`
// sent every 50 ms: its p99. Medians of ROUNDS rounds, the order of
// the two systems alternating; the idle server's resident set with its helpers. PROF=1 writes a CPU
// profile of the server per round (--cpu-prof) into PROF_DIR. AGENT_NICE=N: the server's `[pty] agent_nice`.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { allCpuOf, cpuOf as cpusOf, MIN_RUNS, runPool } from './pool.js';

const ROUNDS = Number(process.env['ROUNDS'] ?? 3);
const WARM = process.env['WARM'] ?? '1';
const CALLS = Number(process.env['CALLS'] ?? 10);
const LEVELS = (process.env['LEVELS'] ?? '1,10,50').split(',').map(Number);
/** `[pty] agent_nice` for the server (unset: its default). */
const AGENT_NICE = process.env['AGENT_NICE'];
const PROF_DIR =
  process.env['PROF'] === '1' ? (process.env['PROF_DIR'] ?? '/tmp/aleph-tool-calls-prof') : undefined;
const HERE = import.meta.dirname;
const LAUNCHER = join(HERE, '../bin/aleph-server');

interface Level {
  readonly level: number;
  readonly runs: number;
  readonly stops: number;
  readonly calls: number;
  readonly wallMs: number;
  /** The server process (all its threads); with its spawn helpers (not the programs they run). */
  readonly cpuMs: number;
  readonly helpersCpuMs?: number;
  /**
   * Every process of the bench's: the system's own, the commands (reaped by the spawn helpers, or
   * the peer), the scripted model and this bench's process.
   */
  readonly allCpuMs?: number;
  /** Server: pty.list round trips every 50 ms, p99; peer: its event loop's delay p99. */
  readonly probeP99Ms: number;
}

const load = (): string =>
  loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');
const median = (values: readonly number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
};
const percentile = (values: readonly number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? NaN;
};

/** A process's own CPU (utime + stime, not its reaped children's), in ms; 0 once gone. */
const cpuOf = (pid: number): number => cpusOf(pid).own;

function rssOf(pid: number): number {
  try {
    return Number(/^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * 1024;
  } catch {
    return 0;
  }
}

/** The server's spawn helpers: its children named aleph-pty-*. */
function helpersOf(server: number): number[] {
  const children = readdirSync(`/proc/${server}/task`).flatMap((thread) =>
    readFileSync(`/proc/${server}/task/${thread}/children`, 'utf8').split(' ').filter(Boolean).map(Number),
  );
  return children.filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/comm`, 'utf8').startsWith('aleph-pty');
    } catch {
      return false;
    }
  });
}

/** Every process this bench started: none outlives it, however it ends. */
const children = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of children) child.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => {
    for (const child of children) child.kill('SIGTERM');
    process.exit(1);
  });

/** The scripted model's process, once it printed its URL. */
async function scriptedModel(): Promise<{ baseUrl: string; pid: number; stop(): void; failures(): number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(HERE, 'scripted-model.ts')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let failures = 0;
  child.stderr.on('data', (chunk: Buffer) => {
    failures += (chunk.toString().match(/^FAILED /gm) ?? []).length;
    process.stderr.write(chunk);
  });
  const lines = createInterface({ input: child.stdout });
  const baseUrl = await new Promise<string>((resolve, reject) => {
    lines.once('line', resolve);
    child.once('exit', (code) => reject(new Error(`the scripted model exited with ${code}`)));
  });
  return { baseUrl, pid: child.pid!, stop: () => void child.kill('SIGTERM'), failures: () => failures };
}

function serverConfig(baseUrl: string): string {
  return `
[gateway]
port = 0

[pty]
agent_max_sessions = ${Math.max(...LEVELS) + 8}
${AGENT_NICE === undefined ? '' : `agent_nice = ${AGENT_NICE}`}

[agent]
provider = "openai-compatible"
model = "scripted"
base_url = "${baseUrl}"
max_iterations = ${CALLS + 5}

[sandbox]
mode = "required"

[power]
inhibit_sleep = false
`;
}

/**
 * The real server as users start it (bin/aleph-server, what `pnpm start` runs: dist/main.js with its
 * allocator setting; with `flags`, node's, dist/main.js run with the same setting), with a config and a state dir of its own.
 */
async function startServer(
  config: string,
  flags: readonly string[],
): Promise<{ url: string; token: string; child: ChildProcess; stop(): Promise<void> }> {
  const state = mkdtempSync(join(tmpdir(), 'aleph-bench-state-'));
  writeFileSync(join(state, 'aleph.toml'), config);
  const env = { ...process.env, ALEPH_STATE_DIR: state, ALEPH_LOG_LEVEL: 'warn' };
  const args = ['--config', join(state, 'aleph.toml')];
  // Node refuses --cpu-prof in NODE_OPTIONS: with flags, node runs dist/main.js as the launcher would.
  const child =
    flags.length === 0
      ? spawn(LAUNCHER, args, { env, stdio: ['ignore', 'pipe', 'inherit'] })
      : spawn(process.execPath, [...flags, join(HERE, '../dist/main.js'), ...args], {
          env: { ...env, MALLOC_ARENA_MAX: '1', ALEPH_LAUNCHER_SET: 'MALLOC_ARENA_MAX' },
          stdio: ['ignore', 'pipe', 'inherit'],
        });
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  children.add(child);
  void exited.then(() => children.delete(child));
  let printed = '';
  const lines = createInterface({ input: child.stdout });
  const [, url = '', token = ''] = await new Promise<RegExpExecArray>((resolve, reject) => {
    lines.on('line', (line) => {
      printed += `${line}\n`;
      const found = /listening on (\S+)[\s\S]*token: (\S+)/.exec(printed);
      if (found) resolve(found);
    });
    void exited.then((code) => reject(new Error(`the server exited with ${code}: ${printed}`)));
  });
  lines.removeAllListeners('line');
  child.stdout.resume();
  return {
    url,
    token,
    child,
    async stop() {
      if (child.exitCode === null) child.kill('SIGTERM');
      await exited;
      rmSync(state, { recursive: true, force: true });
    },
  };
}

/** Sends `pty.list` every 50 ms until stopped: the round trips in ms, and the answers that were errors. */
function probe(client: GatewayClient): { stop(): Promise<{ times: number[]; errors: string[] }> } {
  const times: number[] = [];
  const errors: string[] = [];
  const pending: Promise<void>[] = [];
  const timer = setInterval(() => {
    const sent = performance.now();
    pending.push(
      client.request('pty.list', {}).then(
        () => void times.push(performance.now() - sent),
        (error: Error) => {
          errors.push(error.message);
          times.push(Number.POSITIVE_INFINITY); // no answer: counts as the slowest
        },
      ),
    );
  }, 50);
  return {
    async stop() {
      clearInterval(timer);
      await Promise.all(pending);
      return { times, errors };
    },
  };
}

async function serverRound(
  baseUrl: string,
  work: string,
  round: number,
  modelPid: number,
): Promise<{ levels: Level[]; idleRss: number }> {
  const flags = PROF_DIR
    ? ['--cpu-prof', `--cpu-prof-dir=${PROF_DIR}`, `--cpu-prof-name=server-${round}.cpuprofile`]
    : [];
  const server = await startServer(serverConfig(baseUrl), flags);
  const pid = server.child.pid!;
  try {
    await new Promise((resolve) => setTimeout(resolve, 1000)); // settled: the helpers started
    const idleRss = rssOf(pid) + helpersOf(pid).reduce((sum, helper) => sum + rssOf(helper), 0);
    const client = await connectGateway(server.url, { token: server.token });
    const prober = await connectGateway(server.url, { token: server.token });
    const ended = new Map<string, (kind: string) => void>();
    const early = new Map<string, string>();
    client.onEvent((topic, params) => {
      if (topic !== 'agent.done') return;
      const { runId, terminateReason } = params as { runId: string; terminateReason: { kind: string } };
      const waiter = ended.get(runId);
      if (waiter) waiter(terminateReason.kind);
      else early.set(runId, terminateReason.kind);
    });
    await client.subscribe(['agent.done']);
    const oneRun = async (): Promise<boolean> => {
      const { runId } = await client.request<{ runId: string }>('agent.run', {
        prompt: `calls ${CALLS}`,
        cwd: work,
      });
      const kind = early.get(runId) ?? (await new Promise<string>((resolve) => ended.set(runId, resolve)));
      ended.delete(runId);
      return kind === 'model_stop';
    };
    await oneRun(); // warm: not measured
    if (WARM === '1') for (const level of LEVELS) await runPool(level, oneRun);
    const levels: Level[] = [];
    for (const level of LEVELS) {
      const helpers = helpersOf(pid);
      const helperCpu = (): number => helpers.reduce((sum, helper) => sum + cpuOf(helper), 0);
      const everything = (): number => allCpuOf([pid, ...helpers, modelPid, 'self']);
      const [cpu, helpersCpu, all] = [cpuOf(pid), helperCpu(), everything()];
      const probing = probe(prober);
      const started = performance.now();
      const stops = await runPool(level, oneRun);
      const wallMs = performance.now() - started;
      const { times, errors } = await probing.stop();
      if (errors.length > 0)
        process.stderr.write(`pty.list: ${errors.length} errors, the first: ${errors[0]}\n`);
      levels.push({
        level,
        runs: stops.length,
        stops: stops.filter(Boolean).length,
        calls: stops.length * CALLS,
        wallMs,
        cpuMs: cpuOf(pid) - cpu,
        helpersCpuMs: helperCpu() - helpersCpu,
        allCpuMs: everything() - all,
        probeP99Ms: percentile(times, 99),
      });
      process.stderr.write(
        `server: ${level} at once done in ${(wallMs / 1000).toFixed(1)} s (load ${load()})\n`,
      );
    }
    await client.close();
    await prober.close();
    return { levels, idleRss };
  } finally {
    await server.stop();
  }
}

async function peerRound(baseUrl: string, modelPid: number): Promise<Level[]> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', join(HERE, 'sdk-shell-peer.ts'), baseUrl, String(CALLS), ...LEVELS.map(String)],
    { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, WARM, MODEL_PID: String(modelPid) } },
  );
  children.add(child);
  child.once('exit', () => children.delete(child));
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`the SDK peer exited with ${code}`);
  return output
    .trim()
    .split('\n')
    .map((line) => {
      const figures = JSON.parse(line) as Omit<Level, 'probeP99Ms'> & { lagP99Ms: number };
      return { ...figures, probeP99Ms: figures.lagP99Ms };
    });
}

console.log(
  `# @aleph/server: ${CALLS} sandboxed shell calls a run on the server's path, at ${LEVELS.join(', ')} runs at once (at least ${MIN_RUNS} runs a level; ${ROUNDS} rounds; warm-up: ${WARM === '1' ? 'one run, then every level once' : 'one run'}; load ${load()})`,
);
const model = await scriptedModel();
const work = realpathSync(mkdtempSync('/var/tmp/aleph-tool-calls-'));
const server: Level[][] = [];
const peer: Level[][] = [];
const idle: number[] = [];
try {
  for (let round = 0; round < ROUNDS; round += 1) {
    const order = round % 2 === 0 ? ['server', 'peer'] : ['peer', 'server'];
    for (const system of order) {
      if (system === 'server') {
        const { levels, idleRss } = await serverRound(model.baseUrl, work, round, model.pid);
        server.push(levels);
        idle.push(idleRss);
      } else {
        peer.push(await peerRound(model.baseUrl, model.pid));
      }
    }
    process.stderr.write(`round ${round + 1}/${ROUNDS} done (load ${load()})\n`);
  }
} finally {
  model.stop();
  rmSync(work, { recursive: true, force: true });
}

interface Summary {
  callsPerSecond: number;
  cpuPerCallMs: number;
  withHelpersPerCallMs: number | undefined;
  probeP99Ms: number;
  allPerCallMs: number;
  stops: string;
}
function summarize(rounds: Level[][], level: number): Summary {
  const at = rounds.map((levels) => levels.find((figures) => figures.level === level)!);
  return {
    callsPerSecond: median(at.map((figures) => figures.calls / (figures.wallMs / 1000))),
    cpuPerCallMs: median(at.map((figures) => figures.cpuMs / figures.calls)),
    withHelpersPerCallMs:
      at[0]?.helpersCpuMs === undefined
        ? undefined
        : median(at.map((figures) => (figures.cpuMs + (figures.helpersCpuMs ?? 0)) / figures.calls)),
    probeP99Ms: median(at.map((figures) => figures.probeP99Ms)),
    allPerCallMs: median(at.map((figures) => (figures.allCpuMs ?? NaN) / figures.calls)),
    stops: `${at.reduce((sum, figures) => sum + figures.stops, 0)}/${at.reduce((sum, figures) => sum + figures.runs, 0)}`,
  };
}

const pad = (text: string, width: number): string => text.padEnd(width);
console.log(
  `${pad('system', 36)}${pad('at once', 9)}${pad('calls/s', 10)}${pad('cpu ms/call', 13)}${pad('+helpers', 10)}${pad('all', 9)}${pad('p99 ms', 9)}model stops`,
);
const rows: [string, Level[][], string][] = [
  ['server (sandboxed shell, pty)', server, 'pty.list every 50 ms'],
  ['AI SDK loop + child_process', peer, 'its event loop delay'],
];
for (const level of LEVELS) {
  for (const [label, rounds] of rows) {
    const figures = summarize(rounds, level);
    console.log(
      `${pad(label, 36)}${pad(String(level), 9)}${pad(figures.callsPerSecond.toFixed(1), 10)}${pad(figures.cpuPerCallMs.toFixed(2), 13)}${pad(figures.withHelpersPerCallMs?.toFixed(2) ?? '—', 10)}${pad(figures.allPerCallMs.toFixed(1), 9)}${pad(figures.probeP99Ms.toFixed(1), 9)}${figures.stops}`,
    );
  }
}
console.log(
  `all: the CPU of every process of the bench's per call (the system, the commands with bubblewrap, the scripted model, the bench), ms; p99: the server's is a pty.list round trip every 50 ms; the peer's its event loop's delay`,
);
for (const level of LEVELS) {
  const [ours, theirs] = [summarize(server, level), summarize(peer, level)];
  console.log(
    `ratio at ${level} at once: server/peer calls/s ${(ours.callsPerSecond / theirs.callsPerSecond).toFixed(2)}×, CPU per call ${(ours.cpuPerCallMs / theirs.cpuPerCallMs).toFixed(2)}× (with helpers ${((ours.withHelpersPerCallMs ?? NaN) / theirs.cpuPerCallMs).toFixed(2)}×)`,
  );
}
const verdict = (ok: boolean): string => (ok ? 'ok' : 'MISSED');
const top = Math.max(...LEVELS);
const [one, most] = [summarize(server, Math.min(...LEVELS)), summarize(server, top)];
const mib = median(idle) / 2 ** 20;
const allStopped = server.flat().every((figures) => figures.stops === figures.runs) && model.failures() === 0;
console.log(
  `target: server CPU per call at ${top} at once: ${most.cpuPerCallMs.toFixed(2)} ms (target ≤ 2 ms) ${verdict(most.cpuPerCallMs <= 2)}`,
);
// One run at a time already keeps (machine CPU per call × calls/s) of the cores busy: concurrency
// can add at most what is left of them.
const cores = availableParallelism();
const ceiling = cores / ((one.allPerCallMs * one.callsPerSecond) / 1000);
console.log(
  `one run at a time keeps ${((one.allPerCallMs * one.callsPerSecond) / 1000).toFixed(2)} of ${cores} cores busy (${one.allPerCallMs.toFixed(1)} ms of CPU a call in all): concurrency can reach at most ${ceiling.toFixed(2)}× its calls/s here`,
);
console.log(
  `target: calls/s at ${top} at once over 1 run at a time: ${(most.callsPerSecond / one.callsPerSecond).toFixed(2)}× (target ≥ 3×) ${verdict(most.callsPerSecond >= 3 * one.callsPerSecond)}`,
);
console.log(
  `target: pty.list p99 at ${top} at once: ${most.probeP99Ms.toFixed(1)} ms (target ≤ 20 ms) ${verdict(most.probeP99Ms <= 20)}`,
);
console.log(
  `target: every run ends with the model's stop: ${allStopped ? 'yes' : `no (${model.failures()} failed commands)`} ${verdict(allStopped)}`,
);
console.log(
  `target: idle server + helpers resident: ${mib.toFixed(1)} MiB (rounds ${idle.map((bytes) => (bytes / 2 ** 20).toFixed(1)).join(' ')}; target ≤ 60 MiB) ${verdict(mib <= 60)}`,
);
console.log(`load at the end: ${load()}`);
