import { describe, expect, it } from 'vitest';
import {
  buildStopHooksFromConfig,
  effectiveGate,
  gateVeto,
  StopHookVerifier,
  VerificationError,
  type StopHookHandler,
  type StopHookVerdict,
} from './index.js';

const live = () => new AbortController().signal;
const hookCtx = { finalText: 'x', iterations: 1, toolCallsMade: 0, stopReason: 'end_turn' };

describe('buildStopHooksFromConfig', () => {
  it('builds a StopHookVerifier from [[stop_hooks]]', async () => {
    const verifier = buildStopHooksFromConfig(`
[[stop_hooks]]
name = "lint-check"
command = "echo lint failed >&2; exit 2"
timeout_secs = 60

[[stop_hooks]]
name = "ok"
command = "true"
`);
    expect(verifier).toBeInstanceOf(StopHookVerifier);
    expect(verifier?.hooks.map((hook) => hook.name)).toEqual(['lint-check', 'ok']);
    const verdict = await verifier?.verify(
      { iterations: 1, toolCallsMade: 0, finalText: '', recentToolCalls: [], stopReason: 'end_turn' },
      live(),
    );
    expect(verdict).toMatchObject({ kind: 'veto', feedback: 'lint failed' });
  });

  it('no entries → null (the stage is skipped)', () => {
    expect(buildStopHooksFromConfig('')).toBeNull();
    expect(buildStopHooksFromConfig({ stop_hooks: [] })).toBeNull();
    expect(buildStopHooksFromConfig('[gateway]\nport = 1')).toBeNull();
  });

  it.each([
    [
      '[[stop_hooks]]\nname = "a"\ncommand = "true"\n[[stop_hooks]]\nname = "b"\ncommand = "true"\ntimeout_secs = -5',
      'stop_hooks[1].timeout_secs must be a positive number',
    ],
    [
      '[[stop_hooks]]\nname = "a"\ncommand = "true"\ntimeout_secs = "60"',
      'stop_hooks[0].timeout_secs must be a positive number',
    ],
    ['[[stop_hooks]]\nname = "a"', 'stop_hooks[0].command must be a string'],
    ['[[stop_hooks]]\nname = "a"\ncommand = ""', 'stop_hooks[0].command must not be empty'],
    [
      '[[stop_hooks]]\nname = "a"\ncommand = "true"\ntimeout = 3',
      'stop_hooks[0] has an unknown key "timeout"',
    ],
    ['stop_hooks = "true"', 'stop_hooks must be an array of tables ([[stop_hooks]])'],
  ])('a bad entry names the entry and the field: %#', (toml, message) => {
    expect(() => buildStopHooksFromConfig(toml)).toThrow(new VerificationError('invalid_config', message));
  });

  it('invalid TOML says where', () => {
    expect(() => buildStopHooksFromConfig('[[stop_hooks]\nname = ')).toThrow(
      /^invalid TOML \(line 1, column \d+\)/,
    );
  });
});

describe('goal gate (fail-closed)', () => {
  const gate = (verdicts: StopHookVerdict[]): StopHookHandler => ({
    name: 'g',
    evaluate: () => Promise.resolve(verdicts.shift() ?? { kind: 'allow' }),
  });

  it('allow → continue; block, halt and error → veto', async () => {
    expect((await gateVeto([gate([{ kind: 'allow' }])], hookCtx, live())).kind).toBe('continue');
    expect(await gateVeto([gate([{ kind: 'block', reason: 'tests fail' }])], hookCtx, live())).toMatchObject({
      kind: 'veto',
      feedback: expect.stringContaining('tests fail'),
    });
    expect((await gateVeto([gate([{ kind: 'halt', reason: 'x' }])], hookCtx, live())).kind).toBe('veto');
    expect(
      await gateVeto(
        [gate([{ kind: 'error', hookName: 'g', message: 'exited with code 1' }])],
        hookCtx,
        live(),
      ),
    ).toMatchObject({
      kind: 'veto',
      reason: 'goal gate "g" did not pass (exited with code 1): completion cannot be claimed',
    });
  });

  it("a gate command that fails (a test runner's exit 1) shows the model what it printed, its stdout too", async () => {
    const [global] = effectiveGate(
      "printf 'FAIL src/a.test.ts > adds\\n'; echo 'warning: slow' >&2; exit 1",
      undefined,
      {},
    );
    const verdict = await gateVeto([global!], hookCtx, live());
    expect(verdict).toMatchObject({
      kind: 'veto',
      reason:
        'goal gate "[agent] gate_command" did not pass (exited with code 1: warning: slow): completion cannot be claimed',
    });
    expect((verdict as { feedback: string }).feedback).toMatch(
      /did not pass \(exited with code 1: warning: slow\).*\nWhat it printed:\nFAIL src\/a\.test\.ts > adds\nwarning: slow$/s,
    );
  });

  it('3 consecutive gate errors → halt; a success resets the count', async () => {
    const state = { consecutiveErrors: 0 };
    const error: StopHookVerdict = { kind: 'error', hookName: 'g', message: 'boom' };
    const g = gate([error, error, { kind: 'allow' }, error, error, error]);
    const kinds = [];
    for (let attempt = 0; attempt < 6; attempt += 1)
      kinds.push((await gateVeto([g], hookCtx, live(), { state })).kind);
    expect(kinds).toEqual(['veto', 'veto', 'continue', 'veto', 'veto', 'halt']);
  });

  it('gate errors with tool calls between them are not consecutive: a model working on the cause is not halted', async () => {
    const state = { consecutiveErrors: 0 };
    const error: StopHookVerdict = { kind: 'error', hookName: 'g', message: 'exited with code 1' };
    const g = gate([error, error, error, error, error, error]);
    const kinds = [];
    for (const toolCallsMade of [1, 3, 5, 5, 5, 9])
      kinds.push((await gateVeto([g], { ...hookCtx, toolCallsMade }, live(), { state })).kind);
    expect(kinds).toEqual(['veto', 'veto', 'veto', 'veto', 'halt', 'veto']);
  });

  it('effectiveGate: the model\'s gate with ";" is refused, not allowed; the user\'s own gate is a shell command', async () => {
    const gates = effectiveGate('true && test -d /', 'true; rm -rf /tmp/nothing');
    expect(gates.map((g) => g.name)).toEqual(['[agent] gate_command', "the goal's gate_command"]);
    const verdict = await gateVeto(gates, hookCtx, live());
    expect(verdict).toMatchObject({
      kind: 'veto',
      feedback: expect.stringContaining('shell metacharacter ";"'),
    });
    expect(effectiveGate(undefined, undefined)).toEqual([]);
    expect((await gateVeto(effectiveGate('test -d / && true', undefined), hookCtx, live())).kind).toBe(
      'continue',
    );
    expect((await gateVeto(effectiveGate('true; false', undefined), hookCtx, live())).kind).toBe('veto');
    expect((await gateVeto(effectiveGate('test -d /', undefined), hookCtx, live())).kind).toBe('continue');
    expect((await gateVeto(effectiveGate(undefined, 'test -d /nonexistent-dir'), hookCtx, live())).kind).toBe(
      'veto',
    );
  });
});
