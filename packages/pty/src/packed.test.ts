// The package as a consumer gets it: `pnpm pack` (which drops the helpers' exec bits), then
// `npm install` of the tarball into a plain npm project. There a PtySession echoes, and closeAll()
// leaves a sentinel of the same user alive and unsignalled — as packed, with the helpers deleted,
// and with a helper made non-executable again. Each run in a PID namespace of its own. And packing
// a package that was never built fails, saying so.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const PACKAGE = new URL('..', import.meta.url).pathname;
const MARK = 'echoed-by-the-packed-package';

// The consumer's program: a sentinel logging every signal it gets, one echo, closeAll().
const CONSUMER = String.raw`
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { PtyManager } from '@aleph/pty';
const log = process.argv[2];
const warnings = [];
process.on('warning', (warning) => warnings.push(warning.message));
writeFileSync(log, '');
const traps = ['HUP', 'INT', 'TERM', 'CONT'].map((name) => 'trap "echo ' + name + ' >> ' + log + '" ' + name).join('; ');
const sentinel = spawn('/bin/sh', ['-c', traps + '; while :; do sleep 0.1; done'], { stdio: 'ignore' });
await new Promise((resolve) => setTimeout(resolve, 300));
const manager = new PtyManager({ killStepMs: 100 });
const session = manager.spawn({ command: '/bin/echo', args: ['${MARK}'], cols: 80, rows: 24 });
let output = '';
session.onData((chunk) => (output += chunk.toString('utf8')));
const exit = await session.exited;
await manager.closeAll();
const alive = !/^\d+ \(.*\) [ZX]/.test(readFileSync('/proc/' + sentinel.pid + '/stat', 'utf8'));
const signals = readFileSync(log, 'utf8');
sentinel.kill('SIGKILL');
console.log(JSON.stringify({ output, exit, alive, signals, warnings }));
process.exit(0);
`;

let root: string;
let project: string;
const native = () => join(project, 'node_modules/@aleph/pty/dist/native');

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'aleph-pty-packed-'));
  project = join(root, 'consumer');
  execFileSync('pnpm', ['pack', '--pack-destination', root], { cwd: PACKAGE, stdio: 'pipe' });
  const tarball = readdirSync(root).find((name) => name.endsWith('.tgz'));
  execFileSync('mkdir', [project]);
  writeFileSync(
    join(project, 'package.json'),
    JSON.stringify({ name: 'consumer', private: true, type: 'module', allowScripts: { 'node-pty': true } }),
  );
  writeFileSync(join(project, 'consumer.mjs'), CONSUMER);
  // A plain npm project; node-pty builds or installs as it does for any consumer.
  execFileSync('npm', ['install', '--no-audit', '--no-fund', join(root, tarball!)], {
    cwd: project,
    stdio: 'pipe',
    env: { ...process.env, npm_config_yes: 'true' },
  });
}, 600_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

function consume(): { output: string; exit: unknown; alive: boolean; signals: string; warnings: string[] } {
  const result = spawnSync(
    'setsid',
    [
      '--wait',
      'unshare',
      '--pid',
      '--fork',
      '--mount-proc',
      'sh',
      '-c',
      `${process.execPath} consumer.mjs ${join(root, 'signals')}`,
    ],
    { cwd: project, encoding: 'utf8', timeout: 60_000, env: { ...process.env, ALEPH_PTY_FORK: '0' } },
  );
  const line = result.stdout.trim().split('\n').at(-1) ?? '';
  try {
    return JSON.parse(line) as ReturnType<typeof consume>;
  } catch {
    throw new Error(`the consumer gave no result: ${result.stdout}\n${result.stderr}`);
  }
}

const canUnshare =
  process.platform === 'linux' &&
  spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true']).status === 0;

describe.runIf(canUnshare)('the packed package, installed with npm', () => {
  it('ships its helpers without exec bits (pnpm pack drops them): they get them back and run', () => {
    const outcome = consume();
    expect(outcome).toMatchObject({ alive: true, signals: '', warnings: [] });
    expect(outcome.output).toContain(MARK);
    expect(outcome.exit).toEqual({ exitCode: 0, signal: null, reason: 'exited' });
  });

  it('with a helper made non-executable again: the same', () => {
    chmodSync(join(native(), 'aleph-pty-spawner'), 0o644);
    const outcome = consume();
    expect(outcome).toMatchObject({ alive: true, signals: '', warnings: [] });
    expect(outcome.output).toContain(MARK);
  });

  it('with the helpers deleted: node-pty spawns, one warning says what is lost', () => {
    for (const name of readdirSync(native())) rmSync(join(native(), name));
    const outcome = consume();
    expect(outcome).toMatchObject({ alive: true, signals: '' });
    expect(outcome.output).toContain(MARK);
    expect(outcome.warnings).toHaveLength(1);
    expect(outcome.warnings[0]).toMatch(
      /aleph-pty-spawner is missing; .*aleph-pty-watchdog is missing\. Without these helpers: each spawn forks the server.*a server killed by SIGKILL leaves its terminals running\. To build them for this machine \(a C compiler is needed\): sh .*build-native\.sh$/,
    );
  });

  it('the shipped build script builds them for this machine', () => {
    execFileSync('sh', [join(project, 'node_modules/@aleph/pty/src/internal/build-native.sh')], {
      stdio: 'pipe',
    });
    const outcome = consume();
    expect(outcome).toMatchObject({ alive: true, signals: '', warnings: [] });
    expect(outcome.output).toContain(MARK);
  });
});

it('packing a package that was never built fails, saying so', () => {
  const unbuilt = join(root, 'unbuilt');
  execFileSync('mkdir', [unbuilt]);
  copyFileSync(join(PACKAGE, 'package.json'), join(unbuilt, 'package.json'));
  const result = spawnSync('pnpm', ['pack', '--pack-destination', unbuilt], {
    cwd: unbuilt,
    encoding: 'utf8',
  });
  expect(result.status).not.toBe(0);
  expect(result.stderr + result.stdout).toContain('@aleph/pty: dist/ is not built');
  expect(readdirSync(unbuilt).some((name) => name.endsWith('.tgz'))).toBe(false);
});
