// The idle server's resident memory, quickly: starts the server as users do (bin/aleph-server, the
// tool-calls bench's config: an OpenAI-compatible provider, the sandbox required), waits until it is
// idle, and sums the resident set of the server and its spawn helpers (aleph-pty-*), as ps would.
// Prints each start's figures (the server's anonymous and file-backed pages apart) and the median.
// `ROUNDS` starts (default 5), `WAIT_MS` after the start lines (default 1000, as the bench waits).
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';

const ROUNDS = Number(process.env['ROUNDS'] ?? 5);
const WAIT_MS = Number(process.env['WAIT_MS'] ?? 1000);
const LAUNCHER = join(import.meta.dirname, '../bin/aleph-server');
const CONFIG = `
[gateway]
port = 0

[agent]
provider = "openai-compatible"
model = "scripted"
base_url = "http://127.0.0.1:9/v1"

[sandbox]
mode = "required"

[power]
inhibit_sleep = false
`;

const load = (): string =>
  loadavg()
    .map((value) => value.toFixed(2))
    .join(' ');
const mib = (kib: number): string => (kib / 1024).toFixed(1);

/** A /proc/<pid>/status field in KiB; 0 once the process is gone. */
function statusKib(pid: number, field: string): number {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/** The server's spawn helpers: its children named aleph-pty-*. */
function helpersOf(pid: number): number[] {
  return readdirSync(`/proc/${pid}/task`)
    .flatMap((thread) => readFileSync(`/proc/${pid}/task/${thread}/children`, 'utf8').split(' '))
    .filter(Boolean)
    .map(Number)
    .filter((child) => {
      try {
        return readFileSync(`/proc/${child}/comm`, 'utf8').startsWith('aleph-pty');
      } catch {
        return false;
      }
    });
}

async function idleOnce(): Promise<number> {
  const state = mkdtempSync(join(tmpdir(), 'aleph-idle-rss-'));
  writeFileSync(join(state, 'aleph.toml'), CONFIG);
  const child = spawn(LAUNCHER, ['--config', join(state, 'aleph.toml')], {
    env: { ...process.env, ALEPH_STATE_DIR: state, ALEPH_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  try {
    let printed = '';
    await new Promise<void>((resolve, reject) => {
      child.stdout.on('data', (chunk: Buffer) => {
        printed += chunk.toString();
        if (/^provider: |^no LLM provider/m.test(printed)) resolve();
      });
      void exited.then(() => reject(new Error(`the server exited: ${printed}`)));
    });
    await new Promise((resolve) => setTimeout(resolve, WAIT_MS));
    const pid = child.pid!;
    const helpers = helpersOf(pid).map((helper) => statusKib(helper, 'VmRSS'));
    const server = statusKib(pid, 'VmRSS');
    const total = server + helpers.reduce((sum, kib) => sum + kib, 0);
    console.log(
      `${mib(total)} MiB: server ${mib(server)} (anonymous ${mib(statusKib(pid, 'RssAnon'))}, files ${mib(statusKib(pid, 'RssFile'))}), helpers ${helpers.map(mib).join(' + ')}`,
    );
    return total;
  } finally {
    child.kill('SIGTERM');
    await exited;
    rmSync(state, { recursive: true, force: true });
  }
}

console.log(
  `# idle server + spawn helpers, resident (${ROUNDS} starts, ${WAIT_MS} ms after start; load ${load()})`,
);
const totals: number[] = [];
for (let round = 0; round < ROUNDS; round += 1) totals.push(await idleOnce());
totals.sort((a, b) => a - b);
console.log(`median ${mib(totals[Math.floor(totals.length / 2)]!)} MiB (load ${load()})`);
