import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  isShellSafe,
  KILL_GRACE_MS,
  OUTPUT_CAP_BYTES,
  ShellStopHook,
  shellSafetyProblem,
  type StopHookContext,
} from './index.js';

const ctx: StopHookContext = {
  finalText: 'done. VERDICT: PASS',
  iterations: 3,
  toolCallsMade: 4,
  stopReason: 'end_turn',
  sessionId: 'session-1',
  stopHookActive: true,
  blockCount: 1,
};
const live = () => new AbortController().signal;
let dir: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'aleph-hooks-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Running, not merely a zombie waiting for init to reap it. */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

const hook = (command: string, timeoutMs?: number) =>
  new ShellStopHook({ name: 'h', command, ...(timeoutMs ? { timeoutMs } : {}) });

describe('ShellStopHook exit codes', () => {
  it('0 → allow', async () => {
    expect(await hook('exit 0').evaluate(ctx, live())).toEqual({ kind: 'allow' });
  });
  it('2 → block with the reason from stderr', async () => {
    expect(await hook('echo "tests fail" >&2; echo ignored; exit 2').evaluate(ctx, live())).toEqual({
      kind: 'block',
      reason: 'tests fail',
    });
  });
  it('2 → block with stderr only: stdout is ignored, and empty stderr is an empty-reason block (as Claude Code)', async () => {
    expect(await hook('echo from-stdout; exit 2').evaluate(ctx, live())).toEqual({
      kind: 'block',
      reason: '',
    });
    expect(await hook('exit 2').evaluate(ctx, live())).toEqual({ kind: 'block', reason: '' });
  });
  it('3 → halt', async () => {
    expect(await hook('echo "budget spent" >&2; exit 3').evaluate(ctx, live())).toEqual({
      kind: 'halt',
      reason: 'budget spent',
    });
  });
  it('1 → error naming the code', async () => {
    expect(await hook('echo boom >&2; exit 1').evaluate(ctx, live())).toEqual({
      kind: 'error',
      hookName: 'h',
      message: 'exited with code 1: boom',
      output: 'boom',
    });
  });
  it('127 (command not found) → error', async () => {
    const verdict = await hook('definitely-not-a-command-aleph').evaluate(ctx, live());
    expect(verdict).toMatchObject({
      kind: 'error',
      message: expect.stringMatching(/^exited with code 127 \(command not found\)/),
    });
  });
  it('killed by SIGKILL → error naming the signal', async () => {
    expect(await hook('kill -9 $$').evaluate(ctx, live())).toEqual({
      kind: 'error',
      hookName: 'h',
      message: 'killed by signal SIGKILL',
    });
  });
  it('a cwd that does not exist → error (spawn failure)', async () => {
    const verdict = await new ShellStopHook({
      name: 'h',
      command: 'true',
      cwd: join(dir, 'missing'),
    }).evaluate(ctx, live());
    expect(verdict).toMatchObject({
      kind: 'error',
      message: expect.stringContaining('could not be started'),
    });
  });
});

describe('ShellStopHook process control', () => {
  it('a timeout kills the process group, even a grandchild holding stdout', async () => {
    const pidFile = join(dir, 'grandchild.pid');
    const started = Date.now();
    const verdict = await hook(`sleep 1000 & echo $! > ${pidFile}; wait`, 300).evaluate(ctx, live());
    const elapsed = Date.now() - started;
    expect(verdict).toMatchObject({
      kind: 'error',
      message: 'timed out after 300 ms; its process group was killed',
    });
    // Returned within timeout + grace (a correctness bound, generous for loaded machines).
    expect(elapsed).toBeLessThan(300 + KILL_GRACE_MS + 2000);
    const grandchild = Number(readFileSync(pidFile, 'utf8'));
    await new Promise((r) => setTimeout(r, KILL_GRACE_MS + 100));
    expect(alive(grandchild)).toBe(false);
  });

  it('a hook that exits but leaves a grandchild holding stdout returns and leaves nothing behind', async () => {
    const pidFile = join(dir, 'orphan.pid');
    const verdict = await hook(`sleep 1000 & echo $! > ${pidFile}; exit 0`, 10_000).evaluate(ctx, live());
    expect(verdict).toEqual({ kind: 'allow' });
    const grandchild = Number(readFileSync(pidFile, 'utf8'));
    await new Promise((r) => setTimeout(r, KILL_GRACE_MS + 100));
    expect(alive(grandchild)).toBe(false);
  });

  it('an abort mid-run kills the hook and reports cancellation', async () => {
    const pidFile = join(dir, 'aborted.pid');
    const controller = new AbortController();
    const pending = hook(`echo $$ > ${pidFile}; sleep 1000`, 60_000).evaluate(ctx, controller.signal);
    await new Promise((r) => setTimeout(r, 200));
    controller.abort();
    expect(await pending).toEqual({
      kind: 'error',
      hookName: 'h',
      message: 'cancelled; its process group was killed',
    });
    await new Promise((r) => setTimeout(r, 100));
    expect(alive(Number(readFileSync(pidFile, 'utf8')))).toBe(false);
  });

  it('an already-aborted signal runs nothing', async () => {
    const marker = join(dir, 'never');
    const verdict = await hook(`touch ${marker}`).evaluate(ctx, AbortSignal.abort());
    expect(verdict).toMatchObject({ kind: 'error', message: expect.stringContaining('cancelled') });
    expect(() => readFileSync(marker)).toThrow();
  });

  it('reads at most the output cap of 100 MB printed, and still gets the verdict', async () => {
    const verdict = await hook('head -c 100000000 /dev/zero | tr "\\0" x >&2; exit 2', 30_000).evaluate(
      ctx,
      live(),
    );
    expect(verdict.kind).toBe('block');
    if (verdict.kind !== 'block') return;
    expect(verdict.reason).toMatch(/^x+\n\[… \d+ bytes cut …\]\nx+$/);
    expect(verdict.reason.replace(/\n\[.*\]\n/, '')).toHaveLength(OUTPUT_CAP_BYTES);
  });
});

describe('ShellStopHook input and Claude Code compatibility', () => {
  it('gives the context as snake_case JSON on stdin, with Claude Code fields', async () => {
    const script = join(dir, 'echo-stdin.mjs');
    writeFileSync(
      script,
      `let s='';process.stdin.on('data',d=>s+=d).on('end',()=>{process.stderr.write(s);process.exit(2)})`,
    );
    const verdict = await hook(`node ${script}`).evaluate(ctx, live());
    expect(verdict.kind).toBe('block');
    if (verdict.kind !== 'block') return;
    expect(JSON.parse(verdict.reason)).toEqual({
      hook_event_name: 'Stop',
      cwd: process.cwd(),
      permission_mode: 'default',
      last_assistant_message: 'done. VERDICT: PASS',
      final_text: 'done. VERDICT: PASS',
      iterations: 3,
      tool_calls_made: 4,
      stop_reason: 'end_turn',
      session_id: 'session-1',
      stop_hook_active: true,
      block_count: 1,
    });
  });

  it('runs a Claude Code Stop hook unchanged: block JSON on stdout at exit 0', async () => {
    // The shape of a typical Claude Code Stop hook: reads stdin with jq-like logic, prints a decision.
    const script = join(dir, 'claude-stop.sh');
    writeFileSync(
      script,
      `#!/bin/sh
input=$(cat)
case "$input" in
  *'"stop_hook_active":true'*) exit 0 ;;
esac
echo '{"decision": "block", "reason": "Run the test suite before finishing."}'
`,
    );
    chmodSync(script, 0o755);
    const first = await hook(script).evaluate({ ...ctx, stopHookActive: false }, live());
    expect(first).toEqual({ kind: 'block', reason: 'Run the test suite before finishing.' });
    expect(await hook(script).evaluate({ ...ctx, stopHookActive: true }, live())).toEqual({ kind: 'allow' });
  });

  it('Claude Code {"continue": false} → halt; unrelated stdout → allow', async () => {
    expect(await hook(`echo '{"continue":false,"stopReason":"quota"}'`).evaluate(ctx, live())).toEqual({
      kind: 'halt',
      reason: 'quota',
      stop: true,
    });
    expect(await hook(`echo 'all good {'`).evaluate(ctx, live())).toEqual({ kind: 'allow' });
  });
});

describe('isShellSafe', () => {
  it("accepts letters, digits, space and / - . _ : ' =", () => {
    expect(isShellSafe('pnpm test --filter=@x')).toBe(false); // @ is not on the list
    expect(isShellSafe("pnpm run test:unit --reporter=dot ./src/a_b.ts 'x'")).toBe(true);
    expect(isShellSafe('')).toBe(false);
    expect(isShellSafe('   ')).toBe(false);
  });

  it.each([
    '\n',
    '\t',
    ';',
    '|',
    '&',
    '$',
    '<',
    '>',
    '\\',
    '`',
    '(',
    ')',
    '*',
    '?',
    '{',
    '}',
    '[',
    ']',
    '!',
    '#',
    '~',
    '"',
    'é',
    '\u00a0',
  ])('rejects %j anywhere in a command', (character) => {
    expect(isShellSafe(`pnpm test${character}`)).toBe(false);
    expect(isShellSafe(`${character}pnpm test`)).toBe(false);
  });

  const safeChar = fc.constantFrom(..."abcxyzABCXYZ0189 /-._:'=".split(''));
  it('property: any string of allowed characters (not blank) is safe', () => {
    fc.assert(
      fc.property(fc.array(safeChar, { minLength: 1, maxLength: 60 }), (chars) => {
        const command = chars.join('');
        return isShellSafe(command) === (command.trim() !== '');
      }),
    );
  });

  it('property: inserting any other character makes it unsafe', () => {
    const unsafe = fc
      .string({ unit: 'binary', minLength: 1, maxLength: 1 })
      .filter((c) => !/^[A-Za-z0-9 /\-._:'=]$/.test(c));
    fc.assert(
      fc.property(fc.array(safeChar, { maxLength: 30 }), unsafe, fc.nat(), (chars, bad, at) => {
        const position = chars.length === 0 ? 0 : at % (chars.length + 1);
        const command = [...chars.slice(0, position), bad, ...chars.slice(position)].join('');
        return !isShellSafe(command);
      }),
    );
  });

  it('property: shellSafetyProblem explains exactly what isShellSafe rejects', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 40 }), (command) => {
        const problem = shellSafetyProblem(command);
        return (problem === undefined) === isShellSafe(command);
      }),
    );
    expect(shellSafetyProblem('make test; rm -rf /')).toBe(
      'the command contains the shell metacharacter ";"',
    );
  });

  it('property: a safe command run by sh never runs a second command', () => {
    // Safe strings cannot chain commands: sh sees exactly one simple command (or a quoting error).
    fc.assert(
      fc.property(fc.array(safeChar, { minLength: 1, maxLength: 20 }), (chars) => {
        const command = `echo ${chars.join('')}`;
        fc.pre(isShellSafe(command));
        try {
          const out = execFileSync('sh', ['-c', command], {
            encoding: 'utf8',
            stdio: ['ignore', 'pipe', 'ignore'],
          });
          return out.split('\n').filter(Boolean).length <= 1;
        } catch {
          return true; // an unbalanced quote is a syntax error, not an injection
        }
      }),
      { numRuns: 40 },
    );
  });

  it('shellSafe(...) routes an unsafe command to error and never runs it', async () => {
    const marker = join(dir, 'injected');
    const gate = ShellStopHook.shellSafe({ name: 'gate', command: `true; touch ${marker}` });
    expect(await gate.evaluate(ctx, live())).toEqual({
      kind: 'error',
      hookName: 'gate',
      message: 'refused: the command contains the shell metacharacter ";"',
    });
    expect(() => readFileSync(marker)).toThrow();
    expect(
      await ShellStopHook.shellSafe({ name: 'gate', command: 'test -d /' }).evaluate(ctx, live()),
    ).toEqual({
      kind: 'allow',
    });
  });
});
