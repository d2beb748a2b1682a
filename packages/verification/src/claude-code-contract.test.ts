// The rest of Claude Code's hook contract, each case through real hook processes: stop_hook_active
// set only by a Stop hook's block, tool_response in the shapes of Bash/Read/Write/Edit with
// duration_ms, CLAUDECODE and CLAUDE_CODE_SESSION_ID, prompt_id on stdin.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, expect, it } from 'vitest';
import { ClaudeCodeToolHooks } from './claude-code-tool-hooks.js';
import { MutationEvidenceVerifier } from './mutation-evidence-verifier.js';
import { ShellStopHook } from './stop-hooks.js';
import { StopHookVerifier } from './stop-hook-verifier.js';
import type { TurnVerifyContext } from './turn-verifier.js';
import { VerifierChain } from './verifier-chain.js';

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});
const tempDir = (): string => {
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-contract-')));
  dirs.push(dir);
  return dir;
};
const signal = new AbortController().signal;

it('a Stop hook that blocks only when stop_hook_active is false blocks after an evidence nudge', async () => {
  const dir = tempDir();
  // Blocks once armed, unless the model is continuing because of a Stop hook (the usual loop guard).
  const command = `input=$(cat); echo "$input" >> stdin.log; [ -f armed ] || exit 0; echo "$input" | grep -q '"stop_hook_active":false' && { echo "run the checks first" >&2; exit 2; }; exit 0`;
  const chain = VerifierChain.builder()
    .with(new StopHookVerifier([new ShellStopHook({ name: 'guard', command, route: 'claude_code' })]))
    .with(new MutationEvidenceVerifier())
    .build();
  const stop = (toolCallsMade: number): TurnVerifyContext => ({
    iterations: toolCallsMade + 1,
    toolCallsMade,
    finalText: 'done',
    recentToolCalls: [{ name: 'write_file', argsHash: 'a', ok: true, kind: 'mutation' }],
    stopReason: 'end_turn',
    sessionId: 's1',
    projectDir: dir,
  });
  // 1. The hook allows (not armed); Aleph's evidence nudge vetoes the stop.
  expect(await chain.run(stop(1), signal)).toMatchObject({ kind: 'veto', source: 'mutation_evidence' });
  writeFileSync(join(dir, 'armed'), '');
  // 2. After the nudge the hook is told stop_hook_active: false, and blocks.
  expect(await chain.run(stop(1), signal)).toMatchObject({
    kind: 'veto',
    source: 'stop_hooks',
    feedback: 'run the checks first',
  });
  // 3. After its own block it is told true, and lets the stop through.
  expect(await chain.run(stop(1), signal)).toEqual({ kind: 'continue' });
  const seen = readFileSync(join(dir, 'stdin.log'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line).stop_hook_active);
  expect(seen).toEqual([false, false, true]);
});

it('PostToolUse: tool_response in Claude Code shapes, duration_ms, prompt_id, CLAUDECODE and CLAUDE_CODE_SESSION_ID', async () => {
  const dir = tempDir();
  writeFileSync(join(dir, 'old.txt'), 'before\n');
  const hooks = new ClaudeCodeToolHooks(
    [
      {
        name: 'record',
        event: 'PostToolUse',
        command: `jq -c --arg cc "$CLAUDECODE" --arg sid "$CLAUDE_CODE_SESSION_ID" '{tool_name, tool_response, duration_ms, prompt_id, cc: $cc, sid: $sid}' >> post.log`,
        timeoutMs: 10_000,
      },
    ],
    { projectDir: dir, promptId: 'prompt-7' },
  );
  const ctx = { sessionId: 'sess-1', signal, projectDir: dir, durationMs: 42 };
  await hooks.after(
    { id: 'c1', name: 'shell', args: { command: 'echo hi' } },
    { output: 'hi\nthere\n[exit code 0]' },
    ctx,
  );
  await hooks.before({ id: 'c2', name: 'write_file', args: { path: 'old.txt', content: 'after\n' } }, ctx);
  await hooks.after(
    { id: 'c2', name: 'write_file', args: { path: 'old.txt', content: 'after\n' } },
    { output: 'wrote 6 bytes' },
    ctx,
  );
  await hooks.after({ id: 'c3', name: 'read_file', args: { path: 'old.txt' } }, { output: 'after\n' }, ctx);
  const lines = readFileSync(join(dir, 'post.log'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
  expect(lines[0]).toEqual({
    tool_name: 'Bash',
    tool_response: {
      stdout: 'hi\nthere',
      stderr: '',
      interrupted: false,
      isImage: false,
      noOutputExpected: false,
    },
    duration_ms: 42,
    prompt_id: 'prompt-7',
    cc: '1',
    sid: 'sess-1',
  });
  expect(lines[1]).toMatchObject({
    tool_name: 'Write',
    tool_response: {
      type: 'update',
      filePath: join(dir, 'old.txt'),
      content: 'after\n',
      originalFile: 'before\n',
    },
  });
  expect(lines[2]).toMatchObject({
    tool_name: 'Read',
    tool_response: {
      type: 'text',
      file: { filePath: join(dir, 'old.txt'), content: 'after\n', startLine: 1 },
    },
  });
});

it('PostToolUse of a write to a FIFO or a link to /dev/zero: the file before is not read, nothing blocks', async () => {
  const dir = tempDir();
  execFileSync('mkfifo', [join(dir, 'pipe')]);
  symlinkSync('/dev/zero', join(dir, 'zero'));
  const hooks = new ClaudeCodeToolHooks(
    [
      {
        name: 'record',
        event: 'PostToolUse',
        command: 'jq -c .tool_response >> post.log',
        timeoutMs: 10_000,
      },
    ],
    { projectDir: dir, promptId: 'p' },
  );
  const ctx = { sessionId: 's', signal, projectDir: dir, durationMs: 1 };
  for (const path of ['pipe', 'zero']) {
    const call = { id: path, name: 'write_file', args: { path, content: 'x' } };
    await hooks.before(call, ctx); // a blocking read would hang here (the test's timeout)
    await hooks.after(call, { output: 'refused' }, ctx);
  }
  const lines = readFileSync(join(dir, 'post.log'), 'utf8').trim().split('\n');
  expect(lines.map((line) => JSON.parse(line))).toMatchObject([
    { type: 'update', filePath: join(dir, 'pipe') },
    { type: 'update', filePath: join(dir, 'zero') },
  ]);
}, 30_000);
