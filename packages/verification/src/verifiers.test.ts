import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  CONTINUE,
  ExtensionStopHookVerifier,
  hashToolArgs,
  HookEvent,
  MutationEvidenceVerifier,
  parseVerdict,
  ScratchpadGoalVerifier,
  ShellStopHook,
  StopHookVerifier,
  ToolLoopVerifier,
  VerifierChain,
  type StopHookHandler,
  type StopHookVerdict,
  type ToolCallSummary,
  type TurnVerifier,
  type TurnVerifyContext,
  type VerifierVerdict,
} from './index.js';

const live = () => new AbortController().signal;
const base: TurnVerifyContext = {
  iterations: 1,
  toolCallsMade: 0,
  finalText: '',
  recentToolCalls: [],
  sessionId: 's',
};
const stopping = (extra: Partial<TurnVerifyContext> = {}): TurnVerifyContext => ({
  ...base,
  stopReason: 'end_turn',
  ...extra,
});
const fixed = (name: string, verdict: VerifierVerdict, calls: string[] = []): TurnVerifier => ({
  name,
  verify: () => {
    calls.push(name);
    return Promise.resolve(verdict);
  },
});
const scripted = (name: string, verdicts: StopHookVerdict[], seen: unknown[] = []): StopHookHandler => ({
  name,
  evaluate: (ctx) => {
    seen.push(ctx);
    return Promise.resolve(verdicts.shift() ?? { kind: 'allow' });
  },
});

describe('hashToolArgs', () => {
  it('hashes canonical JSON: key order does not matter, values do', () => {
    expect(hashToolArgs({ a: 1, b: { c: [1, { d: 2, e: 3 }] } })).toBe(
      hashToolArgs({ b: { c: [1, { e: 3, d: 2 }] }, a: 1 }),
    );
    expect(hashToolArgs({ a: 1 })).not.toBe(hashToolArgs({ a: 2 }));
    expect(hashToolArgs([1, 2])).not.toBe(hashToolArgs([2, 1]));
  });
});

describe('VerifierChain', () => {
  it('runs in insertion order; the first non-continue verdict wins and later ones do not run', async () => {
    const calls: string[] = [];
    const chain = VerifierChain.builder()
      .with(fixed('a', CONTINUE, calls))
      .with(fixed('b', { kind: 'veto', reason: 'r', feedback: 'f' }, calls))
      .with(fixed('c', { kind: 'halt', reason: 'h' }, calls))
      .build();
    expect(await chain.run(base, live())).toEqual({ kind: 'veto', reason: 'r', feedback: 'f', source: 'b' });
    expect(calls).toEqual(['a', 'b']);
  });

  it('the kill switch returns continue without running anything', async () => {
    const calls: string[] = [];
    const chain = VerifierChain.builder()
      .with(fixed('a', { kind: 'halt', reason: 'h' }, calls))
      .build();
    chain.setEnabled(false);
    expect(chain.enabled).toBe(false);
    expect(await chain.run(base, live())).toEqual(CONTINUE);
    expect(calls).toEqual([]);
    chain.setEnabled(true);
    expect((await chain.run(base, live())).kind).toBe('halt');
  });

  it('a verifier that throws or rejects is recorded and treated as continue', async () => {
    const errors: [string, unknown][] = [];
    const chain = VerifierChain.builder()
      .with({
        name: 'throws',
        verify: () => {
          throw new Error('bug');
        },
      })
      .with({ name: 'rejects', verify: () => Promise.reject(new Error('async bug')) })
      .with(fixed('last', { kind: 'halt', reason: 'reached' }))
      .onError((name, error) => errors.push([name, error]))
      .build();
    expect(await chain.run(base, live())).toMatchObject({ kind: 'halt', reason: 'reached' });
    expect(errors.map(([name, error]) => [name, (error as Error).message])).toEqual([
      ['throws', 'bug'],
      ['rejects', 'async bug'],
    ]);
  });

  it('an aborted signal stops the chain and kills a running hook', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'aleph-chain-'));
    const controller = new AbortController();
    const calls: string[] = [];
    const chain = VerifierChain.builder()
      .with(
        new StopHookVerifier([
          new ShellStopHook({ name: 'slow', command: `echo $$ > ${dir}/pid; sleep 1000` }),
        ]),
      )
      .with(fixed('after', CONTINUE, calls))
      .build();
    const pending = chain.run(stopping(), controller.signal);
    setTimeout(() => controller.abort(new Error('user cancelled')), 200);
    await expect(pending).rejects.toThrow('user cancelled');
    expect(calls).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });
});

describe('StopHookVerifier (fail-open)', () => {
  it('runs only when the model asked to stop', async () => {
    const seen: unknown[] = [];
    const verifier = new StopHookVerifier([scripted('h', [{ kind: 'block', reason: 'no' }], seen)]);
    expect(await verifier.verify(base, live())).toEqual(CONTINUE);
    expect(seen).toHaveLength(0);
  });

  it('allow → continue, block → veto with the reason as feedback, halt → halt, error → continue and recorded', async () => {
    const errors: unknown[] = [];
    const verifier = new StopHookVerifier(
      [
        scripted('h', [
          { kind: 'allow' },
          { kind: 'block', reason: 'run the tests' },
          { kind: 'error', hookName: 'h', message: 'exited with code 1' },
          { kind: 'halt', reason: 'over budget' },
        ]),
      ],
      { onHookError: (error) => errors.push(error) },
    );
    expect(await verifier.verify(stopping(), live())).toEqual(CONTINUE);
    expect(await verifier.verify(stopping(), live())).toMatchObject({
      kind: 'veto',
      feedback: 'run the tests',
    });
    expect(await verifier.verify(stopping(), live())).toEqual(CONTINUE);
    expect(errors).toEqual([{ kind: 'error', hookName: 'h', message: 'exited with code 1' }]);
    expect(await verifier.verify(stopping(), live())).toEqual({
      kind: 'halt',
      reason: 'stop hook "h" halted: over budget',
    });
  });

  it('tells the hook it is active and how often it blocked; 8 consecutive blocks → halt that says so', async () => {
    const seen: { blockCount: number; stopHookActive: boolean }[] = [];
    const verifier = new StopHookVerifier([
      {
        name: 'nag',
        evaluate: (ctx) => (seen.push(ctx as never), Promise.resolve({ kind: 'block', reason: 'again' })),
      },
    ]);
    const verdicts: VerifierVerdict[] = [];
    for (let attempt = 0; attempt < 8; attempt += 1) verdicts.push(await verifier.verify(stopping(), live()));
    expect(verdicts.slice(0, 7).every((verdict) => verdict.kind === 'veto')).toBe(true);
    expect(verdicts[7]).toMatchObject({
      kind: 'halt',
      reason: expect.stringContaining('blocked 8 consecutive stop attempts'),
    });
    expect(seen.map((ctx) => ctx.blockCount)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(seen.map((ctx) => ctx.stopHookActive)).toEqual([false, true, true, true, true, true, true, true]);
  });

  it('the block cap is configurable and an allow resets the count', async () => {
    const verifier = new StopHookVerifier(
      [
        scripted('h', [
          { kind: 'block', reason: '1' },
          { kind: 'allow' },
          { kind: 'block', reason: '2' },
          { kind: 'block', reason: '3' },
        ]),
      ],
      { maxConsecutiveBlocks: 2 },
    );
    const kinds = [];
    for (let attempt = 0; attempt < 4; attempt += 1)
      kinds.push((await verifier.verify(stopping(), live())).kind);
    expect(kinds).toEqual(['veto', 'continue', 'veto', 'halt']);
  });

  it('a Ralph loop: blocks between which the model made tool calls never reach the cap; stops without work do', async () => {
    const seen: { blockCount: number; stopHookActive: boolean }[] = [];
    const ralph: StopHookHandler = {
      name: 'ralph',
      evaluate: (ctx) => {
        seen.push({ blockCount: ctx.blockCount ?? -1, stopHookActive: ctx.stopHookActive ?? false });
        return Promise.resolve(
          ctx.finalText.includes('<promise>DONE</promise>')
            ? { kind: 'allow' }
            : { kind: 'block', reason: 'Keep going: the next prompt.' },
        );
      },
    };
    const verifier = new StopHookVerifier([ralph]);
    // 20 iterations, each with work (tool calls) between the stops: every one is fed the next prompt.
    for (let iteration = 1; iteration <= 20; iteration += 1)
      expect(await verifier.verify(stopping({ toolCallsMade: iteration * 3 }), live())).toMatchObject({
        kind: 'veto',
        feedback: 'Keep going: the next prompt.',
      });
    expect(seen.every((ctx) => ctx.blockCount === 0)).toBe(true);
    expect(seen.map((ctx) => ctx.stopHookActive)).toEqual([false, ...Array<boolean>(19).fill(true)]);
    expect(
      await verifier.verify(stopping({ toolCallsMade: 63, finalText: '<promise>DONE</promise>' }), live()),
    ).toEqual({ kind: 'continue' });
    // A stop with no tool call since the last block counts: 8 of them in a row halt, as before.
    const kinds = [];
    for (let attempt = 0; attempt < 8; attempt += 1)
      kinds.push((await verifier.verify(stopping({ toolCallsMade: 63 }), live())).kind);
    expect(kinds).toEqual([...Array<string>(7).fill('veto'), 'halt']);
  });
});

describe('ExtensionStopHookVerifier', () => {
  const dir = mkdtempSync(join(tmpdir(), 'aleph-ext-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('runs in-process handlers registered for HookEvent.Stop, and unregisters them', async () => {
    const verifier = new ExtensionStopHookVerifier();
    const off = verifier.register(
      HookEvent.Stop,
      () => Promise.resolve({ kind: 'block', reason: 'plugin says no' }),
      'plugin',
    );
    expect(await verifier.verify(stopping(), live())).toMatchObject({
      kind: 'veto',
      feedback: 'plugin says no',
    });
    off();
    expect(await verifier.verify(stopping(), live())).toEqual(CONTINUE);
  });

  it('loads a Claude Code hooks.json and runs its Stop command hooks', async () => {
    const file = join(dir, 'hooks.json');
    writeFileSync(
      file,
      JSON.stringify({
        hooks: {
          PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: 'exit 2' }] }],
          Stop: [
            {
              hooks: [
                { type: 'command', command: `echo '{"decision":"block","reason":"lint first"}'`, timeout: 5 },
              ],
            },
          ],
        },
      }),
    );
    const verifier = new ExtensionStopHookVerifier({ files: [file] });
    expect(verifier.handlers).toHaveLength(1);
    expect(await verifier.verify(stopping(), live())).toMatchObject({ kind: 'veto', feedback: 'lint first' });
  });

  it('a malformed hooks.json is a clear error', () => {
    const file = join(dir, 'bad.json');
    writeFileSync(file, JSON.stringify({ hooks: { Stop: [{ hooks: [{ type: 'command', timeout: -1 }] }] } }));
    expect(() => new ExtensionStopHookVerifier({ files: [file] })).toThrow(
      /bad\.json: hooks\.Stop\.0\.hooks\.0\.timeout/,
    );
    writeFileSync(file, '{ not json');
    expect(() => new ExtensionStopHookVerifier({ files: [file] })).toThrow(/bad\.json: .*JSON/);
  });
});

const call = (name: string, args: unknown, kind?: ToolCallSummary['kind'], ok = true): ToolCallSummary => ({
  name,
  argsHash: hashToolArgs(args),
  ok,
  ...(kind ? { kind } : {}),
});

describe('ToolLoopVerifier', () => {
  const verifier = new ToolLoopVerifier();
  const history = (n: number, args: (i: number) => unknown = () => ({ path: 'a', line: 1 })) =>
    Array.from({ length: n }, (_, i) => call('read_file', args(i)));

  it('vetoes once when the trailing run reaches 5 identical calls, naming the tool and the count', async () => {
    const verdicts = [];
    for (let n = 1; n <= 7; n += 1)
      verdicts.push(await verifier.verify({ ...base, recentToolCalls: history(n) }));
    expect(verdicts.map((verdict) => verdict.kind)).toEqual([
      'continue',
      'continue',
      'continue',
      'continue',
      'veto',
      'continue',
      'continue',
    ]);
    expect(verdicts[4]).toMatchObject({ feedback: expect.stringContaining('read_file 5 times in a row') });
  });

  it('halts at 8', async () => {
    expect(await verifier.verify({ ...base, recentToolCalls: history(8) })).toMatchObject({
      kind: 'halt',
      reason: expect.stringContaining('read_file was called 8 times in a row'),
    });
  });

  it('counts calls whose args differ only in key order as identical', async () => {
    const verdict = await verifier.verify({
      ...base,
      recentToolCalls: history(5, (i) => (i % 2 ? { path: 'a', line: 1 } : { line: 1, path: 'a' })),
    });
    expect(verdict.kind).toBe('veto');
  });

  it('a different call breaks the run', async () => {
    const calls = [...history(4), call('read_file', { path: 'b' }), ...history(4)];
    expect((await verifier.verify({ ...base, recentToolCalls: calls.slice(-8) })).kind).toBe('continue');
  });

  it('vetoes when one turn carries the run across the threshold', async () => {
    expect((await verifier.verify({ ...base, recentToolCalls: history(6), callsThisTurn: 3 })).kind).toBe(
      'veto',
    );
  });

  it('the robustness profile overrides both thresholds', async () => {
    const ctx = {
      ...base,
      recentToolCalls: history(3),
      robustnessProfile: { toolLoopRepeatThreshold: 2, toolLoopHaltThreshold: 3 },
    };
    expect((await verifier.verify(ctx)).kind).toBe('halt');
    expect((await verifier.verify({ ...ctx, recentToolCalls: history(2) })).kind).toBe('veto');
  });
});

describe('ScratchpadGoalVerifier', () => {
  const rows = [
    { text: 'write the parser', status: 'done' as const },
    { text: 'add tests', status: 'open' as const },
    { text: 'ask for keys', status: 'blocked' as const },
    { text: 'old idea', status: 'cancelled' as const },
  ];

  it('vetoes a stop with open rows, listing only them', async () => {
    const verdict = await new ScratchpadGoalVerifier().verify(stopping({ scratchpad: rows }));
    expect(verdict).toMatchObject({ kind: 'veto' });
    if (verdict.kind !== 'veto') return;
    expect(verdict.feedback).toContain('- [ ] add tests');
    expect(verdict.feedback).not.toContain('ask for keys');
    expect(verdict.feedback).not.toContain('old idea');
  });

  it('does nothing mid-run or when every row is resolved', async () => {
    const verifier = new ScratchpadGoalVerifier();
    expect(await verifier.verify({ ...base, scratchpad: rows })).toEqual(CONTINUE);
    expect(
      await verifier.verify(stopping({ scratchpad: rows.filter((row) => row.status !== 'open') })),
    ).toEqual(CONTINUE);
  });

  it('after 3 reminders for the same rows it lets the stop through; new rows start over', async () => {
    const verifier = new ScratchpadGoalVerifier();
    const kinds = [];
    for (let attempt = 0; attempt < 4; attempt += 1)
      kinds.push((await verifier.verify(stopping({ scratchpad: rows }))).kind);
    expect(kinds).toEqual(['veto', 'veto', 'veto', 'continue']);
    const changed = [...rows, { text: 'new row', status: 'open' as const }];
    expect((await verifier.verify(stopping({ scratchpad: changed }))).kind).toBe('veto');
  });
});

describe('MutationEvidenceVerifier', () => {
  const write = call('write_file', { path: 'a.ts' }, 'mutation');
  const test = call('shell', { command: 'pnpm test' }, 'evidence');

  it('nudges once after a mutation with no evidence, never twice for the same one', async () => {
    const verifier = new MutationEvidenceVerifier();
    const ctx = stopping({ recentToolCalls: [write], toolCallsMade: 1 });
    expect(await verifier.verify(ctx)).toMatchObject({
      kind: 'veto',
      feedback: expect.stringContaining('write_file'),
    });
    expect(await verifier.verify(ctx)).toEqual(CONTINUE);
    // A later, different mutation gets its own nudge.
    expect(
      (
        await verifier.verify(
          stopping({ recentToolCalls: [write, call('list_files', {}), write], toolCallsMade: 3 }),
        )
      ).kind,
    ).toBe('veto');
  });

  it('evidence after the mutation, a failed mutation, or no stop → continue', async () => {
    const verifier = new MutationEvidenceVerifier();
    expect(await verifier.verify(stopping({ recentToolCalls: [write, test], toolCallsMade: 2 }))).toEqual(
      CONTINUE,
    );
    expect(
      await verifier.verify(
        stopping({ recentToolCalls: [call('write_file', {}, 'mutation', false)], toolCallsMade: 1 }),
      ),
    ).toEqual(CONTINUE);
    expect(await verifier.verify({ ...base, recentToolCalls: [write], toolCallsMade: 1 })).toEqual(CONTINUE);
  });
});

describe('parseVerdict (reporting only)', () => {
  it.each([
    ['All checks ran.\nVERDICT: PASS', 'PASS'],
    ['verdict: partial — docs missing', 'PARTIAL'],
    ['VERDICT: FAIL\n...\nVERDICT: **PASS**', 'PASS'],
    ['no verdict here', null],
  ])('%j → %s', (text, expected) => {
    expect(parseVerdict(text)).toBe(expected);
  });

  // It runs on the server's thread at each run's end, over a reply of up to 4 MiB the model wrote.
  it('reads a reply of 200,000 spaces after VERDICT: (no verdict) without trying every split of them', () => {
    expect(parseVerdict(`VERDICT:${' '.repeat(200_000)}x`)).toBeNull();
    expect(parseVerdict(`VERDICT:${' '.repeat(200_000)}**  PASS`)).toBe('PASS');
  }, 5_000);
});
