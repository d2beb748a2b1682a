// Every way a helper or a program can fail to start, each in a PID namespace of its own (so that a
// stray signal could only reach what the case started): the helpers without their exec bit,
// missing, not a program, built for another machine, dying at once, killed at once; a program
// missing, without its exec bit, built for another machine, on a noexec mount; no descriptors left
// (EMFILE); no processes left for the user (EAGAIN, as an unprivileged user, for the server and for
// the helper). Beside the stand-in server run two sentinels of the same user, one in its process
// group and one in a session of its own, which log every signal they get. Each case must end with
// the program's output or a clear `spawn_failed`, then closeAll(); no crash, both sentinels alive
// and never signalled. The package runs from a copy, as installed, so its helpers can be broken.
import { execFileSync, spawnSync } from 'node:child_process';
import {
  chmodSync,
  copyFileSync,
  cpSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const PACKAGE = new URL('..', import.meta.url).pathname;
const NODE_PTY = dirname(createRequire(import.meta.url).resolve('node-pty/package.json'));
const MARK = 'hello-from-the-pty';

// The stand-in server. argv: case, package dir, signal log, program (a path), leave-free fds.
const DRIVER = String.raw`
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync, readdirSync, readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
const [, , kase, pkg, log, program] = process.argv;
const result = { warnings: [] };
process.on('warning', (warning) => result.warnings.push(warning.message));
process.on('uncaughtException', (error) => { console.log(JSON.stringify({ crash: String(error?.stack ?? error) })); process.exit(3); });
const traps = ['HUP', 'INT', 'TERM', 'CONT', 'QUIT', 'USR1', 'USR2', 'ALRM'].map((name) => 'trap "echo ' + name + ' >> ' + log + '" ' + name).join('; ');
const sentinel = (detached) => spawn('/bin/sh', ['-c', traps + '; echo up >> ' + log + '.up; while :; do sleep 0.1; done'], { detached, stdio: 'ignore' });
const sentinels = [sentinel(false), sentinel(true)];
const alive = (pid) => { try { return !/^\d+ \(.*\) [ZX]/.test(readFileSync('/proc/' + pid + '/stat', 'utf8')); } catch { return false; } };
const until = async (predicate, ms = 5000) => { for (const end = Date.now() + ms; !predicate() && Date.now() < end;) await new Promise((r) => setTimeout(r, 10)); };
await until(() => { try { return readFileSync(log + '.up', 'utf8').split('\n').length > 2; } catch { return false; } });
await readFile('/proc/self/stat'); // the thread pool runs before any limit
const { PtyManager } = await import(pkg + '/dist/index.js');
const childrenOf = (pid) => readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => { try { const s = readFileSync('/proc/' + p + '/stat', 'utf8'); return s.slice(s.lastIndexOf(')') + 2).split(' ')[1] === String(pid); } catch { return false; } });
const helperPid = () => childrenOf(process.pid).find((p) => { try { return readFileSync('/proc/' + p + '/cmdline', 'latin1').includes('aleph-pty-spawner'); } catch { return false; } });
const filler = [];
let manager;
if (kase === 'eagain-server') {
  execFileSync('prlimit', ['--pid', String(process.pid), '--nproc=0:0']);
  manager = new PtyManager({ killStepMs: 100 });
} else if (kase === 'eagain-helper' || kase === 'helper-killed') {
  manager = new PtyManager({ killStepMs: 100 });
  await until(() => helperPid() !== undefined);
  const helper = helperPid();
  result.helperStarted = helper !== undefined;
  if (kase === 'helper-killed') process.kill(Number(helper), 'SIGKILL');
  else execFileSync('prlimit', ['--pid', String(helper), '--nproc=0:0']);
} else if (kase.startsWith('emfile')) {
  const free = Number(kase.split('-')[1]);
  try { for (;;) filler.push(openSync('/dev/null', 'r')); } catch {}
  for (const fd of filler.splice(filler.length - free)) closeSync(fd);
  manager = new PtyManager({ killStepMs: 100 });
} else manager = new PtyManager({ killStepMs: 100 });
try {
  const session = manager.spawn({ command: program, args: program.endsWith('sh') ? ['-c', 'echo ${MARK}; sleep 0.5'] : ['${MARK}'], cols: 80, rows: 24 });
  let output = '';
  session.onData((chunk) => (output += chunk.toString('utf8')));
  // echo may have ended and been reaped already: its parent is then unknown, not an error
  try { result.viaHelper = readFileSync('/proc/' + session.pid + '/stat', 'utf8').split(') ')[1].split(' ')[1] !== String(process.pid); } catch {}
  result.exit = await Promise.race([session.exited, new Promise((r) => setTimeout(() => r('timeout'), 5000))]);
  result.output = output;
} catch (error) {
  result.error = { name: error.name, code: error.code, message: error.message };
}
await manager.closeAll();
for (const fd of filler) closeSync(fd);
result.sentinels = sentinels.map((child) => alive(child.pid));
result.signals = readFileSync(log, { encoding: 'utf8', flag: 'a+' });
for (const child of sentinels) child.kill('SIGKILL');
console.log(JSON.stringify(result));
process.exit(0);
`;

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'aleph-pty-faults-'));
  chmodSync(root, 0o777); // the unprivileged cases read the package and write their logs here
  writeFileSync(join(root, 'driver.mjs'), DRIVER);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A copy of the package as installed (dist + package.json, node-pty beside it), broken by `breakIt`. */
function install(name: string, breakIt: (native: string) => void = () => {}): string {
  const pkg = join(root, name);
  cpSync(join(PACKAGE, 'dist'), join(pkg, 'dist'), { recursive: true });
  cpSync(join(PACKAGE, 'src/internal'), join(pkg, 'src/internal'), { recursive: true });
  copyFileSync(join(PACKAGE, 'package.json'), join(pkg, 'package.json'));
  mkdirSync(join(pkg, 'node_modules'));
  symlinkSync(NODE_PTY, join(pkg, 'node_modules/node-pty'));
  breakIt(join(pkg, 'dist/native'));
  return pkg;
}

const HELPERS = ['aleph-pty-spawner', 'aleph-pty-watchdog'];
/** `file`, copied, with its ELF machine changed to another architecture's. */
function otherArchitecture(from: string, to: string): void {
  const bytes = readFileSync(from);
  bytes.writeUInt16LE(bytes.readUInt16LE(18) === 183 ? 62 : 183, 18); // arm64 <-> x86-64
  writeFileSync(to, bytes, { mode: 0o755 });
}

interface Outcome {
  crash?: string;
  error?: { name: string; code: string; message: string };
  output?: string;
  exit?: unknown;
  viaHelper?: boolean;
  helperStarted?: boolean;
  warnings: string[];
  sentinels: boolean[];
  signals: string;
}

/** Runs the driver for `kase` in a PID namespace of its own; `prefix` runs in it first (as root). */
function run(
  kase: string,
  pkg: string,
  program: string,
  options: { prefix?: string; user?: boolean } = {},
): Outcome {
  const log = join(root, `${kase}.signals`);
  for (const file of [log, `${log}.up`]) {
    writeFileSync(file, '');
    chmodSync(file, 0o666);
  }
  const node = `${options.user ? 'setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all env HOME=/nonexistent ' : ''}${process.execPath}`;
  const script = `${options.prefix ?? ''} ${node} ${root}/driver.mjs ${kase} ${pkg} ${log} ${program}; echo "driver exit $?" >&2`;
  const result = spawnSync(
    'setsid',
    ['--wait', 'unshare', '--pid', '--fork', '--mount-proc', 'sh', '-c', script],
    {
      encoding: 'utf8',
      timeout: 60_000,
      env: { ...process.env, ALEPH_PTY_FORK: '0' },
    },
  );
  const line = result.stdout.trim().split('\n').at(-1) ?? '';
  try {
    return JSON.parse(line) as Outcome;
  } catch {
    throw new Error(`no result from ${kase}: ${result.stdout}\n${result.stderr}`);
  }
}

function expectHarmless(outcome: Outcome): void {
  expect(outcome.crash).toBeUndefined();
  expect(outcome.sentinels).toEqual([true, true]);
  expect(outcome.signals).toBe('');
}

const canUnshare =
  process.platform === 'linux' &&
  spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true']).status === 0;
if (!canUnshare)
  console.warn('fault injection skipped: this user cannot create PID namespaces (unshare --pid)');

describe.runIf(canUnshare)('a helper that cannot start', () => {
  const cases: [string, (native: string) => void][] = [
    ['without its exec bit', (native) => HELPERS.forEach((name) => chmodSync(join(native, name), 0o644))],
    ['missing', (native) => HELPERS.forEach((name) => rmSync(join(native, name)))],
    [
      'not a program',
      (native) =>
        HELPERS.forEach((name) =>
          writeFileSync(join(native, name), 'echo ( not a program\n', { mode: 0o755 }),
        ),
    ],
    [
      'built for another machine',
      (native) => HELPERS.forEach((name) => otherArchitecture(join(native, name), join(native, name))),
    ],
    [
      'that dies at once',
      (native) => HELPERS.forEach((name) => copyFileSync('/bin/false', join(native, name))),
    ],
  ];
  for (const [name, breakIt] of cases)
    it(`${name}: the program still runs, closeAll() signals nothing else`, () => {
      const kase = `helper-${name.replaceAll(' ', '-')}`;
      const outcome = run(kase, install(kase, breakIt), '/bin/sh');
      expectHarmless(outcome);
      expect(outcome.error).toBeUndefined();
      expect(outcome.output).toContain(MARK);
      expect(outcome.exit).toMatchObject({ exitCode: 0, reason: 'exited' });
      if (name === 'without its exec bit') {
        // The bit is given back: the helpers run, and nothing is lost, so nothing is said.
        expect(outcome.viaHelper).toBe(true);
        expect(outcome.warnings).toEqual([]);
      } else {
        expect(outcome.viaHelper).toBe(false);
        // Once for each helper, saying what is lost: found unusable together, in one warning; the
        // watchdog dying at once, in a second.
        expect(outcome.warnings).toHaveLength(name === 'that dies at once' ? 2 : 1);
        const said = outcome.warnings.join('\n');
        expect(said).toMatch(/^@aleph\/pty: .*aleph-pty-spawner .*Without .*each spawn forks the server/);
        expect(said).toMatch(/aleph-pty-watchdog .*a server killed by SIGKILL leaves its terminals running/s);
      }
    });

  it('the watchdog alone refused by the loader (built for a newer glibc): one warning saying what is lost', () => {
    const kase = 'watchdog-newer-glibc';
    const pkg = install(kase, (native) => {
      const file = join(native, 'aleph-pty-watchdog');
      const bytes = readFileSync(file);
      const needed = bytes.indexOf('GLIBC_2.');
      expect(needed).toBeGreaterThan(0);
      bytes.write('GLIBC_9.99', needed, 'latin1'); // as long as the name it replaces: no libc has it
      writeFileSync(file, bytes, { mode: 0o755 });
    });
    const outcome = run(kase, pkg, '/bin/sh');
    expectHarmless(outcome);
    expect(outcome.output).toContain(MARK);
    expect(outcome.viaHelper).toBe(true);
    expect(outcome.warnings).toHaveLength(1);
    expect(outcome.warnings[0]).toMatch(
      /^@aleph\/pty: \S+aleph-pty-watchdog exited with code \d+ as soon as it started\. Without this helper: a server killed by SIGKILL leaves its terminals running/,
    );
  });

  const noExecBit = (native: string) => HELPERS.forEach((name) => chmodSync(join(native, name), 0o644));
  it('without its exec bit, in a package the user cannot change: an executable copy runs', () => {
    const pkg = install('helper-read-only', noExecBit);
    mkdirSync(join(root, 'user-tmp'), { mode: 0o777 });
    chmodSync(join(root, 'user-tmp'), 0o777);
    const outcome = run('helper-read-only', pkg, '/bin/sh', {
      user: true,
      prefix: `export TMPDIR=${root}/user-tmp &&`,
    });
    expectHarmless(outcome);
    expect(outcome.output).toContain(MARK);
    expect(outcome.viaHelper).toBe(true);
    expect(outcome.warnings).toEqual([]);
  });

  it('without its exec bit, read-only, and only a noexec TMPDIR for a copy: node-pty, one warning', () => {
    const pkg = install('helper-noexec-tmp', noExecBit);
    const tmp = join(root, 'noexec-tmp');
    const outcome = run('helper-noexec-tmp', pkg, '/bin/sh', {
      user: true,
      prefix: `mkdir -p ${tmp} && mount -t tmpfs -o noexec,mode=1777 tmpfs ${tmp} && export TMPDIR=${tmp} &&`,
    });
    expectHarmless(outcome);
    expect(outcome.output).toContain(MARK);
    expect(outcome.viaHelper).toBe(false);
    expect(outcome.warnings).toHaveLength(1);
    expect(outcome.warnings[0]).toMatch(/is not executable, and no executable copy could be made/);
  });

  it('killed at once: the program still runs, closeAll() signals nothing else', () => {
    const outcome = run('helper-killed', install('helper-killed'), '/bin/sh');
    expectHarmless(outcome);
    expect(outcome.helperStarted).toBe(true);
    expect(outcome.output).toContain(MARK);
  });
});

describe.runIf(canUnshare)('a program that cannot start', () => {
  let pkg: string;
  beforeAll(() => {
    pkg = install('programs');
    copyFileSync('/bin/echo', join(root, 'echo-no-exec-bit'));
    chmodSync(join(root, 'echo-no-exec-bit'), 0o644);
    otherArchitecture('/bin/echo', join(root, 'echo-other-machine'));
  });

  const cases: [string, string, RegExp, string?][] = [
    ['missing', '/nonexistent/program', /^could not start|no such executable/],
    ['without its exec bit', 'echo-no-exec-bit', /not executable/],
    ['built for another machine', 'echo-other-machine', /is built for (arm64|x64), this machine is/],
    [
      'on a noexec mount',
      'noexec/echo',
      /not executable/,
      'mkdir -p NOEXEC && mount -t tmpfs -o noexec tmpfs NOEXEC && cp /bin/echo NOEXEC/echo && TMPDIR=NOEXEC && export TMPDIR &&',
    ],
  ];
  for (const [name, program, message, prefix] of cases)
    it(`${name}: a clear spawn_failed, nothing else signalled`, () => {
      const path = program.startsWith('/') ? program : join(root, program);
      const outcome = run(`program-${name.replaceAll(' ', '-')}`, pkg, path, {
        ...(prefix === undefined ? {} : { prefix: prefix.replaceAll('NOEXEC', join(root, 'noexec')) }),
      });
      expectHarmless(outcome);
      expect(outcome.error).toMatchObject({ name: 'PtyError', code: 'spawn_failed' });
      expect(outcome.error?.message).toMatch(message);
    });
});

describe.runIf(canUnshare)('no resources left', () => {
  let pkg: string;
  beforeAll(() => {
    pkg = install('resources');
    execFileSync('chmod', ['-R', 'a+rX', root]);
  });

  for (const free of [0, 3, 8])
    it(`no descriptors left (EMFILE, ${free} free): the program runs or a clear spawn_failed`, () => {
      const outcome = run(`emfile-${free}`, pkg, '/bin/echo', { prefix: 'ulimit -n 256 &&' });
      expectHarmless(outcome);
      if (outcome.error === undefined) expect(outcome.output).toContain(MARK);
      else expect(outcome.error).toMatchObject({ name: 'PtyError', code: 'spawn_failed' });
    });

  it('no processes left for the user (EAGAIN) before the helper started: a clear spawn_failed', () => {
    const outcome = run('eagain-server', pkg, '/bin/echo', { user: true });
    expectHarmless(outcome);
    expect(outcome.error).toMatchObject({ name: 'PtyError', code: 'spawn_failed' });
    expect(outcome.error?.message).toMatch(/could not start \/bin\/echo/);
  });

  it('no processes left for the helper (EAGAIN): a clear spawn_failed', () => {
    const outcome = run('eagain-helper', pkg, '/bin/echo', { user: true });
    expectHarmless(outcome);
    expect(outcome.helperStarted).toBe(true);
    expect(outcome.error).toMatchObject({ name: 'PtyError', code: 'spawn_failed' });
    expect(outcome.error?.message).toMatch(/fork: Resource temporarily unavailable/);
  });
});
