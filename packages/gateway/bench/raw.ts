// The raw baseline in a process of its own: node-pty read in-process, with nothing in between.
// It runs apart from the benchmark's client because node-pty forks the process that spawns (forkpty):
// every page of that process is then copy-on-write for a while, which would slow down whatever
// that process measures next. Takes one command a line on stdin, answers one JSON line.
import { createInterface } from 'node:readline';
import * as nodePty from 'node-pty';
import { roundTrips } from './round-trips.js';

const MiB = 1024 * 1024;

/** MiB/s of `cat file` read through node-pty. */
async function throughput(file: string): Promise<number> {
  const start = performance.now();
  let bytes = 0;
  await new Promise<void>((resolve) => {
    const pty = nodePty.spawn('/bin/cat', [file], { cols: 200, rows: 50, encoding: null });
    pty.onData((data: string | Buffer) => (bytes += data.length));
    pty.onExit(() => resolve());
  });
  return bytes / MiB / ((performance.now() - start) / 1000);
}

/** Round trips through one `cat`, kept from call to call, in ms: `warmUp` of them first, unmeasured, then `rounds`. */
let cat: { pty: nodePty.IPty; trips: ReturnType<typeof roundTrips> } | undefined;
async function echo(warmUp: number, rounds: number): Promise<number[]> {
  if (cat === undefined) {
    const pty = nodePty.spawn('/bin/cat', [], { cols: 80, rows: 24, encoding: null });
    const trips = roundTrips(() => pty.write('x'));
    pty.onData(trips.arrived);
    cat = { pty, trips };
  }
  return cat.trips.time(warmUp, rounds);
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  const [command, ...args] = line.split(' ');
  const result =
    command === 'throughput' ? await throughput(args[0]!) : await echo(Number(args[0]), Number(args[1]));
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
cat?.pty.kill('SIGKILL');
