import {
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ToolService } from '@aleph/harness';
import { PtyManager } from '@aleph/pty';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { builtinTools, SHELL_OUTPUT_CAP, type Goal } from './tools.js';

let dir: string;
const ptys = new PtyManager({ killStepMs: 100 });
const goals = new Map<string, Goal>();
let tools: ToolService;
const ctx = { signal: new AbortController().signal, sessionId: 's1' };
beforeAll(() => {
  dir = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-tools-')));
  tools = new ToolService(builtinTools({ cwd: dir, ptyManager: ptys, goals, defaultShellTimeoutMs: 10_000 }));
});
afterAll(async () => {
  await ptys.closeAll();
  rmSync(dir, { recursive: true, force: true });
});

const call = async (name: string, args: unknown) => {
  const parsed = tools.parse(name, args);
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.tool.execute(parsed.args, ctx);
};

describe('built-in tools', () => {
  it('write_file, read_file, edit_file (exact, unique), list_files', async () => {
    expect(await call('write_file', { path: 'src/a.txt', content: 'one two two' })).toEqual({
      output: 'wrote 11 bytes to src/a.txt',
    });
    expect(await call('read_file', { path: 'src/a.txt' })).toEqual({ output: 'one two two' });
    expect(await call('edit_file', { path: 'src/a.txt', old_string: 'two', new_string: '2' })).toMatchObject({
      isError: true,
      output: expect.stringContaining('occurs 2 times'),
    });
    expect(await call('edit_file', { path: 'src/a.txt', old_string: 'one', new_string: '$1' })).toEqual({
      output: 'edited src/a.txt',
    });
    expect(readFileSync(join(dir, 'src/a.txt'), 'utf8')).toBe('$1 two two');
    expect(await call('list_files', {})).toMatchObject({ output: expect.stringContaining('src/') });
  });

  it('confines paths to the working directory, symlinks included', async () => {
    mkdirSync(join(dir, 'inside'), { recursive: true });
    symlinkSync('/etc', join(dir, 'inside', 'escape'));
    for (const path of ['../outside.txt', '/etc/passwd', 'inside/escape/passwd']) {
      expect(await call('read_file', { path })).toMatchObject({
        isError: true,
        output: expect.stringContaining('outside the working directory'),
      });
    }
    expect(await call('write_file', { path: 'inside/escape/x', content: 'x' })).toMatchObject({
      isError: true,
    });
  });

  it('shell runs in a pty from the shared manager, returns the exit code, caps output', async () => {
    writeFileSync(join(dir, 'f.txt'), 'file body\n');
    let watched: string | undefined;
    const local = new ToolService(
      builtinTools({
        cwd: dir,
        ptyManager: ptys,
        goals,
        defaultShellTimeoutMs: 10_000,
        onShell: (info) => (watched = info.ptySessionId),
      }),
    );
    const parsed = local.parse('shell', { command: 'cat f.txt; exit 3' });
    if (!parsed.ok) throw new Error(parsed.error);
    const result = await parsed.tool.execute(parsed.args, ctx);
    expect(result.output).toBe('file body\n\n[exit code 3]');
    expect(watched).toBeDefined();
    const big = await call('shell', { command: 'head -c 300000 /dev/zero | tr "\\0" y' });
    expect(big.output.length).toBeLessThan(SHELL_OUTPUT_CAP + 200);
    expect(big.output).toContain('characters cut');
  });

  it('shell: a command past its timeout is killed and reported', async () => {
    const result = await call('shell', { command: 'sleep 100', timeout_secs: 0.3 });
    expect(result).toMatchObject({
      isError: true,
      output: expect.stringContaining('timed out after 300 ms'),
    });
  });

  it('todo returns the execution list for the to-do gate; goal refuses an unsafe gate command', async () => {
    const todo = await call('todo', {
      items: [
        { text: 'write', status: 'done' },
        { text: 'test', status: 'open' },
      ],
    });
    expect(todo.scratchpad).toEqual([
      { text: 'write', status: 'done' },
      { text: 'test', status: 'open' },
    ]);
    expect(await call('goal', { objective: 'x', gate_command: 'pnpm test; rm -rf /' })).toMatchObject({
      isError: true,
      output: expect.stringContaining('";"'),
    });
    expect(goals.has('s1')).toBe(false);
    expect(await call('goal', { objective: 'x', gate_command: 'test -f f.txt' })).toEqual({
      output: 'goal recorded; gate: test -f f.txt',
    });
    expect(goals.get('s1')).toEqual({ objective: 'x', gateCommand: 'test -f f.txt' });
  });
});
