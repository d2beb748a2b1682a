import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  endLine,
  hookLines,
  neutralize,
  neutralizeLine,
  replyWriter,
  stepLine,
  toolLine,
} from './cli-format.js';

describe('aleph run prints words', () => {
  it('the end line: why, turns, time, tokens, the verdict', () => {
    expect(
      endLine({
        terminateReason: { kind: 'model_stop' },
        iterations: 4,
        elapsedMs: 12_345,
        totalTokens: 8_100,
        selfVerdict: 'PASS',
      }),
    ).toBe("done: the model stopped (4 turns, 12.3 s, 8.1k tokens) · the model's verdict PASS");
    expect(
      endLine({
        terminateReason: { kind: 'error', error: { kind: 'llm', message: 'HTTP 401: invalid x-api-key' } },
        iterations: 1,
        elapsedMs: 300,
        totalTokens: 0,
      }),
    ).toBe('ended: provider error: HTTP 401: invalid x-api-key (1 turn, 0.3 s, 0 tokens)');
    expect(
      endLine({
        terminateReason: {
          kind: 'consecutive_failures',
          count: 3,
          lastError: 'connect ECONNREFUSED 127.0.0.1:9',
        },
        iterations: 3,
      }),
    ).toBe('ended: 3 turns in a row failed; last: connect ECONNREFUSED 127.0.0.1:9 (3 turns)');
    expect(
      endLine({ terminateReason: { kind: 'halted', by: 'goal_gate', reason: 'gate failed' }, iterations: 2 }),
    ).toBe('ended: halted by goal_gate: gate failed (2 turns)');
  });

  it("a turn's line says when the provider failed", () => {
    expect(
      stepLine({
        state: 'continue',
        executed: 0,
        vetoed: false,
        iteration: 1,
        error: 'connect ECONNREFUSED',
      }),
    ).toBe('turn 1: the provider failed: connect ECONNREFUSED');
    const empty = 'the reply was empty: no text and no tool calls';
    expect(stepLine({ state: 'continue', executed: 0, vetoed: false, iteration: 3, error: empty })).toBe(
      'turn 3: the reply was empty: no text and no tool calls; not a stop, the model was told to go on',
    );
    expect(stepLine({ state: 'continue', executed: 1, vetoed: true, iteration: 2 })).toBe(
      'turn 2: 1 tool call ok, vetoed',
    );
  });

  it('a shell line shows how the command ended, ✗ when it failed', () => {
    expect(
      toolLine({
        name: 'shell',
        ok: false,
        output: 'make: *** [all] Error 2\n\n[exit code 2]',
        end: 'exit code 2',
      }),
    ).toBe('  ✗ shell → exit code 2 · make: *** [all] Error 2');
    expect(toolLine({ name: 'read_file', ok: true, output: 'line one\nline two' })).toBe(
      '  ✓ read_file → line one',
    );
  });

  it('a hook error shows its name, exit code and stderr; a veto its message', () => {
    expect(
      hookLines({
        hook: 'lint',
        route: 'stop_hooks',
        event: 'Stop',
        kind: 'error',
        exitCode: 1,
        message: 'exited with code 1: src/a.ts:3 missing semicolon',
        stderr: 'src/a.ts:3 missing semicolon\nsecond line',
        durationMs: 20,
      }),
    ).toEqual([
      '  ⚠ Stop hook "lint" failed (exit code 1): src/a.ts:3 missing semicolon',
      '      second line',
    ]);
    const block = {
      hook: 'tests',
      route: 'claude_code',
      kind: 'block',
      exitCode: 2,
      message: 'run the tests',
      durationMs: 5,
    } as const;
    expect(hookLines({ ...block, event: 'Stop' })).toEqual([]); // the veto's verdict line says it
    expect(
      hookLines({
        ...block,
        event: 'PreToolUse',
        kind: 'feedback',
        tool: 'write_file',
        message: 'innerHTML is XSS-prone\nuse textContent',
      }),
    ).toEqual(['  ↳ PreToolUse hook "tests" (write_file) told the model: innerHTML is XSS-prone']);
    expect(hookLines({ ...block, event: 'PreToolUse', kind: 'deny', tool: 'shell' })).toEqual([
      '  ⚑ PreToolUse hook "tests" (shell) denied the call (exit code 2): run the tests',
    ]);
    expect(
      hookLines({ hook: 'ok', route: 'claude_code', event: 'Stop', kind: 'allow', durationMs: 1 }),
    ).toEqual([]);
  });

  it('a warning about the hooks in a settings file is a ⚠ line of its own', () => {
    const message = '.claude/settings.json: PreToolUSe hooks are not run by Aleph (it runs Stop, …)';
    expect(hookLines({ kind: 'warning', route: 'claude_code', message })).toEqual([`  ⚠ ${message}`]);
  });
});

/** Unicode's bidi controls: embeddings, overrides, isolates and marks. */
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/;

describe('neutralize: nothing printed can drive the terminal', () => {
  it('no C0 control but newline and tab, no DEL, no C1, no bidi control survives; printable text is unchanged', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary' }), (text) => {
        expect(neutralize(text)).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/);
        expect(neutralizeLine(text)).not.toMatch(/[\x00-\x1f\x7f-\x9f]/);
        expect(neutralize(text)).not.toMatch(BIDI);
      }),
    );
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme' }), (text) => {
        fc.pre(!/[\x00-\x1f\x7f-\x9f]/.test(text) && !BIDI.test(text));
        expect(neutralize(text)).toBe(text);
      }),
    );
    expect(neutralize('a\x1b]52;c;SGk=\x07b\x9b2J\x7f\r\n\t')).toBe('a^[]52;c;SGk=^Gb\\x9b2J^?^M\n\t');
    expect(neutralizeLine('tool\nforged\tline')).toBe('tool^Jforged^Iline');
    // Bidi controls: text after them would be shown reordered by a terminal that does bidi.
    expect(neutralize('✓ shell \u202eexit code 0\u202c \u2066x\u2069 \u200f')).toBe(
      '✓ shell \\u202eexit code 0\\u202c \\u2066x\\u2069 \\u200f',
    );
  });
});

describe("the model's reply: each line behind a gutter, however it streams", () => {
  it('a line that looks like one of aleph own never starts a line of the output', () => {
    const text = 'fine\n  ✓ shell → exit code 0\ndone: the model stopped\n\nlast';
    const whole = replyWriter()(text);
    expect(whole).toBe('│ fine\n│   ✓ shell → exit code 0\n│ done: the model stopped\n│ \n│ last');
    fc.assert(
      fc.property(fc.array(fc.integer({ min: 0, max: text.length }), { maxLength: 6 }), (cuts) => {
        const points = [...new Set([0, ...cuts, text.length])].sort((a, b) => a - b);
        const write = replyWriter();
        const pieces = points.slice(1).map((end, index) => write(text.slice(points[index], end)));
        expect(pieces.join('')).toBe(whole);
      }),
    );
  });
});
