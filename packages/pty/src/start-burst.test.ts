// Many start() at once on one manager: the requests to the spawn helper queue and are written as its
// pipe drains, so no start() waits for the helper, whatever it does. Each case runs a stand-in
// server (fixtures/start-burst.mjs, on the built package) in a session and PID namespace of its
// own: it stops and kills the helper, and what is left running there after closeAll() is listed.
import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const DRIVER = new URL('../fixtures/start-burst.mjs', import.meta.url).pathname;
const DIST = new URL('../dist/index.js', import.meta.url).pathname;
const dirs: string[] = [];
afterAll(() => dirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

interface Outcome {
  crash?: string;
  helperStarted: boolean;
  returned?: boolean;
  started: number;
  rejected?: string[];
  errors?: string[];
  parents?: string[];
  exitCodes?: number[];
  wrongOutput?: string[];
  helperGone?: boolean;
  ran?: string[];
  nextHelper?: boolean;
  maxGapMs: number;
  left: string[];
}

async function run(kase: string): Promise<Outcome> {
  const dir = mkdtempSync(join(tmpdir(), 'aleph-pty-burst-'));
  dirs.push(dir);
  const { stdout, stderr } = await promisify(execFile)(
    'setsid',
    ['--wait', 'unshare', '--pid', '--fork', '--mount-proc', process.execPath, DRIVER, kase, DIST, dir],
    { timeout: 100_000, maxBuffer: 16 * 1024 * 1024, env: { ...process.env, ALEPH_PTY_FORK: '0' } },
  );
  const line = stdout.trim().split('\n').at(-1) ?? '';
  try {
    const outcome = JSON.parse(line) as Outcome;
    expect(outcome.crash).toBeUndefined();
    expect(outcome.helperStarted).toBe(true);
    return outcome;
  } catch (error) {
    throw new Error(`no result from ${kase}: ${stdout}\n${stderr}`, { cause: error });
  }
}

const canUnshare =
  process.platform === 'linux' &&
  spawnSync('unshare', ['--pid', '--fork', '--mount-proc', 'true']).status === 0;

describe.runIf(canUnshare)('a burst of start() on one manager', () => {
  it('150 at once (three larger than the pipe): every one runs from the helper with its own arguments and environment; none left', async () => {
    const outcome = await run('burst');
    expect(outcome.returned).toBe(true);
    expect(outcome.rejected).toEqual([]);
    expect(outcome.started).toBe(150);
    expect(outcome.parents).toEqual(['helper']);
    expect(outcome.wrongOutput).toEqual([]);
    expect(outcome.exitCodes).toEqual([0]);
    expect(outcome.left).toEqual([]);
    console.log(`150 starts at once: the event loop's longest gap was ${outcome.maxGapMs} ms`);
  }, 120_000);

  it('the helper stopped with its pipe full: every start() returns at once, then runs through node-pty; none left', async () => {
    // With a blocking write to the pipe, the 9th start() would wait for the stopped helper for good.
    const outcome = await run('stopped');
    expect(outcome.returned).toBe(true);
    expect(outcome.rejected).toEqual([]);
    expect(outcome.started).toBe(40);
    expect(outcome.parents).toEqual(['server']);
    expect(outcome.wrongOutput).toEqual([]);
    expect(outcome.exitCodes).toEqual([0]);
    expect(outcome.helperGone).toBe(true);
    expect(outcome.left).toEqual([]);
  }, 120_000);

  it('the helper killed with 40 starts queued: each fails with a clear spawn_failed, none of them runs, the next start gets a new helper', async () => {
    const outcome = await run('killed');
    expect(outcome.returned).toBe(true);
    expect(outcome.started).toBe(0);
    expect(outcome.errors).toEqual([
      'PtyError spawn_failed: could not start /bin/sh: the spawn helper exited before answering; the program was not started again',
    ]);
    expect(outcome.ran).toEqual([]);
    expect(outcome.nextHelper).toBe(true);
    expect(outcome.wrongOutput).toEqual([]);
    expect(outcome.left).toEqual([]);
  }, 120_000);
});
