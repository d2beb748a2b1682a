// Limits and the datagram route under real bubblewrap, as root and as an unprivileged user (the
// sandbox made in a child process run as `nobody` through setpriv). Limits are set low here: a fork
// bomb and a 10 GiB allocation end with a clear error, and this process keeps running meanwhile.
import { spawn, spawnSync } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createSandbox, type SandboxPolicy } from './index.js';
import { commandsCpuGroup, freeCommandCgroups } from './internal/limits.js';

const linux = process.platform === 'linux';
const root = realpathSync(mkdtempSync('/var/tmp/aleph-limits-test-'));
chmodSync(root, 0o755); // the unprivileged runs read the runner here
const NOBODY = 65534;
const asRoot = process.getuid?.() === 0;
const hasSetpriv = spawnSync('setpriv', ['--version']).status === 0;
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Ran {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
  /** How many times this process's event loop ticked while the command ran (it stayed alive). */
  readonly ticks: number;
}

const RUNNER = join(root, 'runner.ts');
writeFileSync(
  RUNNER,
  `import { spawnSync } from 'node:child_process';
import { createSandbox } from ${JSON.stringify(resolve(import.meta.dirname, 'index.ts'))};
const [policy, script, cwd] = JSON.parse(process.argv[2]);
const box = createSandbox(policy, { mode: 'required', home: cwd });
const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', script], cwd, env: process.env });
const ran = spawnSync(wrapped.file, wrapped.args, { cwd, env: wrapped.env, encoding: 'utf8', timeout: 60000, killSignal: 'SIGKILL' });
wrapped.release();
process.stdout.write(JSON.stringify({ status: ran.status, stdout: ran.stdout, stderr: ran.stderr, processesBy: box.limits.processesBy }));
`,
);

/** Runs `script` confined by `policy`, in the sandbox made by this process (root) or by one run as nobody. */
function confined(user: 'root' | 'nobody', policy: SandboxPolicy, script: string): Promise<Ran> {
  const cwd = join(root, `${user}-${Math.random().toString(36).slice(2)}`);
  mkdirSync(cwd);
  let file: string;
  let args: string[];
  let release = (): void => {};
  if (user === 'root') {
    const wrapped = createSandbox(policy, { mode: 'required', home: cwd }).wrap({
      file: '/bin/sh',
      args: ['-c', script],
      cwd,
      env: process.env,
    });
    ({ file, release } = wrapped);
    args = [...wrapped.args];
  } else {
    chownSync(cwd, NOBODY, NOBODY);
    const tsx = resolve(import.meta.dirname, '../node_modules/.bin/tsx');
    file = 'setpriv';
    args = [
      `--reuid=${NOBODY}`,
      `--regid=${NOBODY}`,
      '--clear-groups',
      '--',
      tsx,
      RUNNER,
      JSON.stringify([policy, script, cwd]),
    ];
  }
  return new Promise((resolveRan, reject) => {
    let ticks = 0;
    const ticker = setInterval(() => (ticks += 1), 20);
    const child = spawn(file, args, {
      cwd,
      env: { ...process.env, HOME: cwd },
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    const guard = setTimeout(() => child.pid !== undefined && process.kill(-child.pid, 'SIGKILL'), 90_000);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    child.on('error', reject).on('close', (status) => {
      clearInterval(ticker);
      clearTimeout(guard);
      release();
      if (user === 'root') return resolveRan({ status, stdout, stderr, ticks });
      try {
        resolveRan({ ...(JSON.parse(stdout) as Omit<Ran, 'ticks'>), ticks });
      } catch {
        reject(new Error(`runner failed (${status}): ${stderr}`));
      }
    });
  });
}

const users = [
  ...(asRoot && createSandbox({ network: 'off' }, { mode: 'required' }).limits.processesBy === 'cgroup'
    ? (['root'] as const)
    : []),
  ...(asRoot && hasSetpriv ? (['nobody'] as const) : []),
];

describe.skipIf(!linux || users.length === 0).each(users)('limits, as %s', (user) => {
  it('a fork bomb is held to the process limit and ends with a clear error', async () => {
    const ran = await confined(
      user,
      { network: 'off', limits: { processes: 24 } },
      // The bomb runs until the command's main process ends: then the whole PID namespace goes.
      `bash -c ':(){ :|:& };: ; sleep 2; echo main-still-here' 2>&1 | grep -m1 -o 'Resource temporarily unavailable'; echo end`,
    );
    expect(ran.stdout).toMatch(/Resource temporarily unavailable\n(.|\n)*end\n$/);
    if (user === 'root')
      expect(ran.stderr).toMatch(/the process limit \(24 tasks\) was reached: some forks failed/);
    expect(ran.ticks).toBeGreaterThan(0);
  });

  it('a 10 GiB allocation fails at once with the memory limit set low', async () => {
    const ran = await confined(
      user,
      { network: 'off', limits: { memoryBytes: 256 * 1024 ** 2 } },
      `python3 -c 'b = bytearray(10 * 2**30)'; node -e 'Buffer.alloc(2 ** 31)' 2>&1 | grep -o -m1 'Cannot allocate memory\\|allocation failed\\|out of memory'`,
    );
    expect(ran.stderr).toMatch(/MemoryError/);
    expect(ran.stdout).toMatch(/Cannot allocate memory|allocation failed|out of memory/);
  });

  it('a file past the size limit ends the command, and says why', async () => {
    const ran = await confined(
      user,
      { network: 'off', limits: { fileSizeBytes: 4096 } },
      'head -c 100000 /dev/zero > big',
    );
    expect(ran.status).toBe(153);
    expect(ran.stderr).toMatch(
      /aleph sandbox: killed by SIGXFSZ: a file reached the size limit \(4096 bytes\)/,
    );
  });

  // What is written to a tmpfs is memory: unsized, /tmp took half the host's RAM.
  it('a write past the size of /tmp or /dev/shm fails with ENOSPC; /dev and /run are read-only; nothing is left', async () => {
    const policy: SandboxPolicy = { network: 'off', limits: { tmpBytes: 4 * 1024 ** 2 } };
    const ran = await confined(
      user,
      policy,
      'df -k /tmp /dev/shm | tail -n +2 | while read -r fs size rest; do echo "size $size"; done; ' +
        'head -c 3000000 /dev/zero > /dev/shm/half && echo shm-written; ' +
        'touch /dev/x /run/x; ' +
        'dd if=/dev/zero of=/tmp/fill bs=1M count=16',
    );
    expect(ran.stdout).toBe('size 4096\nsize 4096\nshm-written\n');
    expect(ran.stderr).toMatch(/touch: cannot touch '\/dev\/x': Read-only file system/);
    expect(ran.stderr).toMatch(/touch: cannot touch '\/run\/x': Read-only file system/);
    expect(ran.stderr).toMatch(/dd: error writing '\/tmp\/fill': No space left on device/);
    expect(ran.status).not.toBe(0);
    const next = await confined(user, policy, 'ls -A /tmp /dev/shm');
    expect(next.stdout, next.stderr + String(next.status)).toBe('/dev/shm:\n\n/tmp:\n');
  });

  it('inside, every process has the limits: data, file size, CPU time (soft, hard a second later)', async () => {
    const ran = await confined(
      user,
      { network: 'off', limits: { memoryBytes: 256 * 1024 ** 2, fileSizeBytes: 4096, cpuSeconds: 7 } },
      "sh -c 'grep -E \"^Max (cpu time|file size|data size)\" /proc/self/limits' | tr -s ' '",
    );
    expect(ran.stdout).toBe(
      'Max cpu time 7 8 seconds \nMax file size 4096 4096 bytes \nMax data size 268435456 268435456 bytes \n',
    );
  });

  it('a process past its CPU time ends, and says why', async () => {
    const ran = await confined(user, { network: 'off', limits: { cpuSeconds: 1 } }, 'while :; do :; done');
    expect(ran.status).toBe(152);
    expect(ran.stderr).toMatch(/aleph sandbox: killed by SIGXCPU: a process used its CPU time limit \(1 s\)/);
  });
});

describe.skipIf(!linux)('the datagram route to host sockets', () => {
  /** A host Unix datagram socket; resolves with what it received within a second of `send` ending. */
  async function hostDatagram(network: 'on' | 'off'): Promise<{ received: string; stderr: string }> {
    const path = join(root, `dgram-${network}.sock`);
    const receiver = spawn(
      'python3',
      [
        '-c',
        `import socket, sys\ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\ns.bind(${JSON.stringify(path)})\nprint('ready', flush=True)\ns.settimeout(float(sys.argv[1]))\ntry:\n  print(s.recv(100).decode(), flush=True)\nexcept socket.timeout:\n  pass`,
        '60',
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    const closed = new Promise((done) => receiver.on('close', done));
    let out = '';
    receiver.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    while (!out.includes('ready')) await new Promise((ready) => setTimeout(ready, 20));
    const sender =
      `import socket\n` +
      `for kind in (socket.SOCK_DGRAM, socket.SOCK_RAW):\n` +
      `  try:\n` +
      `    a, b = socket.socketpair(socket.AF_UNIX, kind)\n` +
      `    a.sendto(b'escaped', ${JSON.stringify(path)})\n` +
      `  except OSError as error:\n` +
      `    print(kind, error)\n`;
    const wrapped = createSandbox({ network }, { mode: 'required' }).wrap({
      file: 'python3',
      args: ['-c', sender],
      cwd: root,
      env: process.env,
    });
    const ran = spawnSync(wrapped.file, wrapped.args, { cwd: root, env: wrapped.env, encoding: 'utf8' });
    wrapped.release();
    // A datagram sent is queued at once: a moment later it is there, or it never came.
    await new Promise((settled) => setTimeout(settled, 500));
    receiver.kill();
    await closed;
    return { received: out.replace('ready\n', '').trim() || 'nothing', stderr: ran.stdout + ran.stderr };
  }

  it('network off: a datagram socketpair is refused, nothing reaches a host datagram socket', async () => {
    const { received, stderr } = await hostDatagram('off');
    expect(received).toBe('nothing');
    expect(stderr).toMatch(/Operation not permitted/);
  });

  it('network off: only the families the namespace confines open (AF_INET, AF_INET6, AF_NETLINK)', () => {
    const families = ['AF_INET', 'AF_INET6', 'AF_NETLINK', 'AF_UNIX', 'AF_VSOCK', 'AF_ALG', 'AF_TIPC'];
    const probe =
      `import socket\n` +
      `for name in ${JSON.stringify(families)}:\n` +
      `  kind = socket.SOCK_RAW if name == 'AF_NETLINK' else socket.SOCK_SEQPACKET if name in ('AF_ALG', 'AF_TIPC') else socket.SOCK_STREAM\n` +
      `  try:\n` +
      `    socket.socket(getattr(socket, name), kind).close()\n` +
      `    print(name, 'ok')\n` +
      `  except OSError as error:\n` +
      `    print(name, error.strerror)\n`;
    const opened = (network: 'on' | 'off'): string[] => {
      const wrapped = createSandbox({ network }, { mode: 'required' }).wrap({
        file: 'python3',
        args: ['-c', probe],
        cwd: root,
        env: process.env,
      });
      const ran = spawnSync(wrapped.file, wrapped.args, { cwd: root, env: wrapped.env, encoding: 'utf8' });
      wrapped.release();
      return ran.stdout.split('\n').filter((line) => line.endsWith(' ok'));
    };
    expect(opened('off')).toEqual(['AF_INET ok', 'AF_INET6 ok', 'AF_NETLINK ok']);
    // With the network on, the others open (or fail for the kernel's own reasons, never the filter's).
    expect(opened('on')).toEqual(expect.arrayContaining(['AF_INET ok', 'AF_UNIX ok']));
  });

  it('network on: the same send arrives (what the filter refuses above is real)', async () => {
    const { received, stderr } = await hostDatagram('on');
    expect(received, stderr).toBe('escaped');
  });
});

// With the kernel's autogroups each command (a session of its own) would weigh as much as the process
// that starts them: together, in one CPU group, they weigh as one.
const cpuGroup = linux && asRoot ? commandsCpuGroup() : undefined;
describe.skipIf(cpuGroup === undefined)('the CPU group of the confined commands, as root', () => {
  it('every confined command of this process runs in its one CPU group', async () => {
    const box = createSandbox({ network: 'off' }, { mode: 'required' });
    const started = [0, 1].map(() => {
      const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'sleep 5'], cwd: root, env: process.env });
      const child = spawn(wrapped.file, wrapped.args, { cwd: root, env: wrapped.env, stdio: 'ignore' });
      const ended = new Promise((settled) => child.on('close', settled)).then(() => wrapped.release());
      return { pid: child.pid, ended };
    });
    const members = (): string[] => readFileSync(join(cpuGroup!, 'cgroup.procs'), 'utf8').split('\n');
    // The sh around bwrap joins first and waits for the command: it is there while the command runs.
    await expect
      .poll(() => started.every(({ pid }) => members().includes(String(pid))), {
        timeout: 30_000,
        interval: 20,
      })
      .toBe(true);
    await Promise.all(started.map(({ ended }) => ended));
  });

  it('weighs as one task of the niceness asked for, and is named to spawners that join it first', async () => {
    const box = createSandbox({ network: 'off' }, { mode: 'required', nice: 10 });
    expect(box.cpuGroup).toMatch(/-cpu10$/);
    // A nice-10 task's weight: a tenth of a nice-0 one's (1024), the server's.
    expect(readFileSync(join(box.cpuGroup!, 'cpu.shares'), 'utf8').trim()).toBe('110');
    expect(createSandbox({ network: 'off' }, { mode: 'required' }).cpuGroup).toBe(cpuGroup);
    expect(readFileSync(join(cpuGroup!, 'cpu.shares'), 'utf8').trim()).toBe('1024');
    const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'sleep 5'], cwd: root, env: process.env });
    const child = spawn(wrapped.file, wrapped.args, { cwd: root, env: wrapped.env, stdio: 'ignore' });
    const ended = new Promise((settled) => child.on('close', settled)).then(() => wrapped.release());
    const members = (): string[] => readFileSync(join(box.cpuGroup!, 'cgroup.procs'), 'utf8').split('\n');
    await expect
      .poll(() => members().includes(String(child.pid)), { timeout: 30_000, interval: 20 })
      .toBe(true);
    await ended;
  });
});

it('refuses a niceness for the commands that nice(1) would not take', () => {
  expect(() => createSandbox({ network: 'off' }, { mode: 'required', nice: 20 })).toThrow(
    /nice must be an integer from 0 to 19, got 20/,
  );
});

const hasUnshare = spawnSync('unshare', ['--version']).status === 0;
const cgroupLimits =
  linux && asRoot && createSandbox({ network: 'off' }, { mode: 'required' }).limits.processesBy === 'cgroup';
describe.skipIf(!cgroupLimits || !hasUnshare)('cgroups shared with another PID namespace', () => {
  it("a process of another PID namespace never removes this process's command cgroups", () => {
    const box = createSandbox({ network: 'off' }, { mode: 'required' });
    const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'echo ran'], cwd: root, env: process.env });
    // Meanwhile a process in a PID namespace of its own, where this process's pid does not exist,
    // takes its cgroups (removing those it takes for a dead process's).
    const sweeper = join(root, 'sweeper.ts');
    writeFileSync(
      sweeper,
      `import { commandsCpuGroup, findPidsCgroup } from ${JSON.stringify(resolve(import.meta.dirname, 'internal/limits.ts'))};\n` +
        `findPidsCgroup();\ncommandsCpuGroup();\n`,
    );
    const tsx = resolve(import.meta.dirname, '../node_modules/.bin/tsx');
    const swept = spawnSync('unshare', ['--pid', '--fork', '--mount-proc', tsx, sweeper], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    expect(swept.status, swept.stderr).toBe(0);
    const ran = spawnSync(wrapped.file, wrapped.args, { cwd: root, env: wrapped.env, encoding: 'utf8' });
    wrapped.release();
    expect(ran.stderr).toBe('');
    expect(ran.stdout).toBe('ran\n');
    expect(ran.status).toBe(0);
  });
});

describe.skipIf(!cgroupLimits)('limits as root', () => {
  // RLIMIT_NPROC binds nothing for uid 0 (the pids cgroup counts): the wrapper's ulimit sets the rest.
  it('are set by the wrapper, with no prlimit process', () => {
    const box = createSandbox({ network: 'off' }, { mode: 'required' });
    const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'true'], cwd: root, env: process.env });
    wrapped.release();
    expect(wrapped.args.some((arg) => arg.endsWith('/prlimit'))).toBe(false);
    expect(wrapped.args[1]).toMatch(/ulimit -d 8388608 && ulimit -f 134217728 && ulimit -S -t 86400/);
  });
});

describe.skipIf(!cgroupLimits)("a command's pids cgroup, as root", () => {
  const cgroupOf = (args: readonly string[]): string => {
    const dir = args.find((arg) => /\/aleph-sandbox-\d+-\d+-\d+$/.test(arg));
    expect(dir).toBeDefined();
    return dir!;
  };
  const run = (wrapped: { file: string; args: readonly string[]; env: Record<string, string> }) =>
    new Promise<{ status: number | null; stderr: string }>((done) => {
      const child = spawn(wrapped.file, wrapped.args, { cwd: root, env: wrapped.env, stdio: 'pipe' });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.on('close', (status) => done({ status, stderr }));
    });
  const tasksIn = (dir: string): number => Number(readFileSync(join(dir, 'pids.current'), 'utf8'));

  it('is made by its wrapper with the limit, holds the command while it runs, and is taken again by the next command once released', async () => {
    const box = createSandbox({ network: 'off', limits: { processes: 77 } }, { mode: 'required' });
    const wrapped = box.wrap({ file: '/bin/sh', args: ['-c', 'sleep 2'], cwd: root, env: process.env });
    const dir = cgroupOf(wrapped.args);
    // made by the command's wrapper, not here; or one a released command left, empty
    expect(existsSync(dir) ? tasksIn(dir) : 0).toBe(0);
    const child = spawn(wrapped.file, wrapped.args, { cwd: root, env: wrapped.env, stdio: 'ignore' });
    const ended = new Promise((settled) => child.on('close', settled));
    const tasks = (): string[] => {
      try {
        return readFileSync(join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean);
      } catch {
        return [];
      }
    };
    await expect
      .poll(() => tasks().includes(String(child.pid)), { timeout: 30_000, interval: 20 })
      .toBe(true);
    expect(readFileSync(join(dir, 'pids.max'), 'utf8').trim()).toBe('77');
    // Not free while it runs: another command gets a cgroup of its own.
    const meanwhile = box.wrap({ file: '/bin/sh', args: ['-c', 'true'], cwd: root, env: process.env });
    expect(cgroupOf(meanwhile.args)).not.toBe(dir);
    meanwhile.release();
    expect(await ended).toBe(0);
    wrapped.release();
    // Found empty (on the thread pool), it is free, and the next command takes it.
    await expect.poll(() => freeCommandCgroups().includes(dir), { timeout: 10_000, interval: 20 }).toBe(true);
    expect(tasksIn(dir)).toBe(0);
    const next = box.wrap({ file: '/bin/sh', args: ['-c', 'true'], cwd: root, env: process.env });
    expect(cgroupOf(next.args)).toBe(dir);
    next.release();
  });

  it('a command that reached the limit says so; the next command in its cgroup does not', async () => {
    const box = createSandbox({ network: 'off', limits: { processes: 8 } }, { mode: 'required' });
    const script = 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 1 & done 2>/dev/null; wait';
    const first = box.wrap({ file: '/bin/sh', args: ['-c', script], cwd: root, env: process.env });
    const dir = cgroupOf(first.args);
    expect((await run(first)).stderr).toMatch(/the process limit \(8 tasks\) was reached: some forks failed/);
    first.release();
    await expect.poll(() => freeCommandCgroups().includes(dir), { timeout: 10_000, interval: 20 }).toBe(true);
    const next = box.wrap({ file: '/bin/sh', args: ['-c', 'echo fine'], cwd: root, env: process.env });
    expect(cgroupOf(next.args)).toBe(dir);
    expect(await run(next)).toEqual({ status: 0, stderr: '' });
    next.release();
  });
});
