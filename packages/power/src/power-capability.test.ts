import { spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createPowerCapability } from './index.js';

// A stand-in for systemd-inhibit / caffeinate: records its argv and pid, then behaves like the real
// one (runs the trailing command, or for caffeinate just blocks until its stdin or parent goes).
const FAKE = `#!/bin/sh
printf '%s\\n' "$*" >> "$FAKE_LOG"
echo $$ >> "$FAKE_PIDS"
case "$(basename "$0")" in
  caffeinate) exec cat >/dev/null ;;
  *) for last; do :; done; "$last" >/dev/null ;;
esac
`;

/** Running: not gone, and not a zombie waiting to be reaped (it has exited then, on Linux). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return process.platform !== 'linux'; // no /proc here: signal 0 is all we have
  }
}

async function until(predicate: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

let dir: string;
let env: NodeJS.ProcessEnv;
/** The complete lines of a file the fake appends to (the shell creates it before it writes). */
const lines = (file: string): string[] =>
  existsSync(join(dir, file)) ? readFileSync(join(dir, file), 'utf8').split('\n').slice(0, -1) : [];
const log = (): string[] => lines('argv.log');
const pids = (): number[] => lines('pids').map(Number);

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'aleph-power-'));
  for (const name of ['systemd-inhibit', 'caffeinate']) {
    writeFileSync(join(dir, name), FAKE);
    chmodSync(join(dir, name), 0o755);
  }
  env = {
    ...process.env,
    PATH: `${dir}:${process.env['PATH'] ?? ''}`,
    FAKE_LOG: join(dir, 'argv.log'),
    FAKE_PIDS: join(dir, 'pids'),
  };
  delete env['ALEPH_INHIBIT_SLEEP'];
});

afterEach(() => {
  for (const pid of pids()) if (alive(pid)) process.kill(pid, 'SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe.each([
  ['linux', 'systemd-inhibit'],
  ['darwin', 'caffeinate'],
] as const)('on %s (%s)', (platform, backend) => {
  it('two guards share one helper, which ends with the last release', async () => {
    const power = createPowerCapability({ platform, env, onWarning: () => {} });
    const first = power.inhibitSleep('Aleph agent loop');
    const second = power.inhibitSleep('another turn');
    await until(() => pids().length === 1, 'the helper to start');
    const [pid] = pids() as [number];
    expect(power.status()).toMatchObject({ backend, guardsHeld: 2, asserting: true });

    first.release();
    first.release(); // idempotent: must not drop the second guard's assertion
    expect(power.status().guardsHeld).toBe(1);
    await new Promise((r) => setTimeout(r, 100));
    expect(alive(pid)).toBe(true);

    second[Symbol.dispose]();
    await until(() => !alive(pid), 'the helper to exit after the last release');
    expect(log()).toHaveLength(1);
    expect(power.status()).toMatchObject({ guardsHeld: 0, asserting: false });
  });

  it('dies with its parent when the parent is SIGKILLed', async () => {
    const entry = resolve(import.meta.dirname, '../dist/index.js');
    const script = `
      const { createPowerCapability } = await import(${JSON.stringify(entry)});
      createPowerCapability({ platform: ${JSON.stringify(platform)} }).inhibitSleep('held by child');
      console.log('ready');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      env,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((ok) => child.stdout.once('data', () => ok()));
    await until(() => pids().length === 1, 'the helper to start');
    const [pid] = pids() as [number];
    child.kill('SIGKILL');
    await until(() => !alive(pid), 'the helper to die with its parent');
  });
});

it('passes the reason and the documented flags to systemd-inhibit', async () => {
  const power = createPowerCapability({ platform: 'linux', env, onWarning: () => {} });
  using _guard = power.inhibitSleep('Aleph agent loop');
  await until(() => log().length === 1, 'argv to be recorded');
  expect(log()[0]).toBe('--what=idle:sleep --who=Aleph --why=Aleph agent loop --mode=block cat');
});

it('passes -i -w <our pid> to caffeinate', async () => {
  const power = createPowerCapability({ platform: 'darwin', env, onWarning: () => {} });
  using _guard = power.inhibitSleep('Aleph agent loop');
  await until(() => log().length === 1, 'argv to be recorded');
  expect(log()[0]).toBe(`-i -w ${process.pid}`);
});

it('degrades to a no-op with one warning when the binary is missing', async () => {
  const warnings: string[] = [];
  const power = createPowerCapability({
    platform: 'linux',
    env: { ...env, PATH: join(dir, 'empty') },
    onWarning: (message) => warnings.push(message),
  });
  const first = power.inhibitSleep('one');
  await until(() => warnings.length === 1, 'the warning');
  first.release();
  power.inhibitSleep('two').release();
  power.inhibitSleep('three').release();
  await new Promise((r) => setTimeout(r, 100));
  expect(warnings).toEqual(['sleep inhibitor is a no-op: systemd-inhibit not found on PATH']);
  expect(power.status()).toMatchObject({ backend: 'noop', guardsHeld: 0 });
});

it('degrades with one warning when the helper fails (no logind, as in a container)', async () => {
  rmSync(join(dir, 'systemd-inhibit'));
  writeFileSync(join(dir, 'systemd-inhibit'), '#!/bin/sh\necho "Failed to connect to bus" >&2\nexit 1\n');
  chmodSync(join(dir, 'systemd-inhibit'), 0o755);
  const warnings: string[] = [];
  const power = createPowerCapability({ platform: 'linux', env, onWarning: (m) => warnings.push(m) });
  using _guard = power.inhibitSleep('turn');
  await until(() => warnings.length === 1, 'the warning');
  expect(warnings[0]).toContain('Failed to connect to bus');
  expect(power.status().backend).toBe('noop');
});

it.each([
  ['enabled: false', { enabled: false }, {}],
  ['ALEPH_INHIBIT_SLEEP=0', {}, { ALEPH_INHIBIT_SLEEP: '0' }],
])('spawns nothing when opted out with %s', async (_label, options, extraEnv) => {
  const warnings: string[] = [];
  const power = createPowerCapability({
    platform: 'linux',
    env: { ...env, ...extraEnv },
    onWarning: (m) => warnings.push(m),
    ...options,
  });
  using guard = power.inhibitSleep('turn');
  await new Promise((r) => setTimeout(r, 150));
  expect(pids()).toEqual([]);
  expect(warnings).toEqual([]);
  expect(power.status()).toMatchObject({ backend: 'noop', enabled: false, guardsHeld: 1 });
  expect(guard.released).toBe(false);
});

it('never throws on a platform without a backend', () => {
  const warnings: string[] = [];
  const power = createPowerCapability({ platform: 'aix', env, onWarning: (m) => warnings.push(m) });
  expect(() => power.inhibitSleep('turn').release()).not.toThrow();
  expect(warnings).toEqual(['sleep inhibitor is a no-op: no sleep-inhibit backend for platform aix']);
});
