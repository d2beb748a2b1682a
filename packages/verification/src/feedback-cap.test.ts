// A hook's text fed to the model fits one turn: a multi-megabyte block reason or test log is cut to
// its head and tail (OUTPUT_CAP_BYTES) on every route, so the context budget never drops it whole.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildStopHooksFromConfig,
  ClaudeCodeToolHooks,
  discoverClaudeCodeHooks,
  effectiveGate,
  ExtensionStopHookVerifier,
  gateVeto,
  OUTPUT_CAP_BYTES,
  type StopHookContext,
  type TurnVerifyContext,
} from './index.js';

/** What fits a turn with room to spare; the old cap (1 MiB) was ~262k tokens, more than any context. */
const FITS_A_TURN = 32 * 1024;
const TWO_MIB = 2 * 1024 * 1024;
const live = () => new AbortController().signal;
let project = '';

beforeAll(() => {
  project = mkdtempSync(join(tmpdir(), 'aleph-cap-'));
  // A test run's log on stderr, exit 2: the first line and the failures at the end matter.
  writeFileSync(
    join(project, 'log.sh'),
    `printf 'FIRST LINE\\n' >&2; head -c ${TWO_MIB} /dev/zero | tr '\\0' x >&2; printf '\\nLAST: 3 tests failed\\n' >&2; exit 2\n`,
  );
  writeFileSync(
    join(project, 'json.sh'),
    `printf '{"decision":"block","reason":"FIRST LINE '; head -c ${TWO_MIB} /dev/zero | tr '\\0' y; printf ' LAST: 3 tests failed"}'\n`,
  );
  const command = (script: string) => [{ hooks: [{ type: 'command', command: `sh ${script}` }] }];
  mkdirSync(join(project, '.claude'));
  writeFileSync(
    join(project, '.claude', 'settings.json'),
    JSON.stringify({
      hooks: {
        Stop: command('json.sh'),
        PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: 'sh log.sh' }] }],
        PostToolUse: [{ matcher: 'Write', hooks: [{ type: 'command', command: 'sh log.sh' }] }],
      },
    }),
  );
});
afterAll(() => rmSync(project, { recursive: true, force: true }));

function expectHeadAndTail(text: string): void {
  expect(Buffer.byteLength(text)).toBeLessThanOrEqual(FITS_A_TURN);
  expect(text).toContain('FIRST LINE');
  expect(text).toContain('LAST: 3 tests failed');
  expect(text).toMatch(/\n\[… \d+ bytes cut …\]\n/);
}

const turn = (over: Partial<TurnVerifyContext> = {}): TurnVerifyContext => ({
  iterations: 1,
  toolCallsMade: 0,
  finalText: 'done',
  recentToolCalls: [],
  stopReason: 'end_turn',
  sessionId: 's',
  projectDir: project,
  ...over,
});

describe('what a hook feeds the model fits a turn: head and tail, with what was cut said', () => {
  it('the cap itself is 16–32 KiB', () => {
    expect(OUTPUT_CAP_BYTES).toBeGreaterThanOrEqual(16 * 1024);
    expect(OUTPUT_CAP_BYTES).toBeLessThanOrEqual(FITS_A_TURN - 64);
  });

  it('[[stop_hooks]]: a 2 MiB test log on stderr (exit 2) blocks with its first line and its end', async () => {
    const verifier = buildStopHooksFromConfig(
      {
        stop_hooks: [
          { name: 'tests', command: 'sh log.sh' },
          { name: 'again', command: 'sh log.sh' },
        ],
      },
      { cwd: project },
    );
    const verdict = await verifier!.verify(turn(), live());
    expect(verdict.kind).toBe('veto');
    if (verdict.kind !== 'veto') return;
    expectHeadAndTail(verdict.feedback); // two hooks' reasons together still fit
    expect(Buffer.byteLength(verdict.reason)).toBeLessThan(1024); // the log's reason line: a summary
  });

  it('Claude Code Stop: {"decision":"block"} with a 2 MiB reason is parsed whole, then capped', async () => {
    const hooks = discoverClaudeCodeHooks({ projectDir: project, home: null });
    const stop = new ExtensionStopHookVerifier({ hooks });
    const verdict = await stop.verify(turn(), live());
    expect(verdict.kind).toBe('veto');
    if (verdict.kind === 'veto') expectHeadAndTail(verdict.feedback);
    const sub = new ExtensionStopHookVerifier({ hooks, event: 'SubagentStop' });
    expect(await sub.verify(turn(), live())).toEqual({ kind: 'continue' }); // no SubagentStop hook here
  });

  it('PreToolUse deny reason and PostToolUse feedback', async () => {
    const tools = new ClaudeCodeToolHooks(discoverClaudeCodeHooks({ projectDir: project, home: null }), {
      projectDir: project,
    });
    const denied = await tools.before({ id: 'c1', name: 'shell', args: { command: 'ls' } });
    expect(denied.kind).toBe('deny');
    if (denied.kind === 'deny') expectHeadAndTail(denied.reason);
    const after = await tools.after(
      { id: 'c2', name: 'write_file', args: { path: 'a', content: '' } },
      {
        output: 'ok',
      },
    );
    expectHeadAndTail(after ? after.feedback : '');
  });

  it('the goal gate', async () => {
    const ctx: StopHookContext = { finalText: 'done', iterations: 1, toolCallsMade: 0, projectDir: project };
    const verdict = await gateVeto(effectiveGate('sh log.sh', undefined, { cwd: project }), ctx, live());
    expect(verdict.kind).toBe('veto');
    if (verdict.kind === 'veto') expectHeadAndTail(verdict.feedback);
  });
});
