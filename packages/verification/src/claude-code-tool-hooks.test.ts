// ClaudeCodeToolHooks against Claude Code's documented PreToolUse/PostToolUse contract, with real
// hook scripts (sh, python3) in a temp project's `.claude/settings.json`: `continue: false` stops
// the run (https://code.claude.com/docs/en/hooks#json-output).
import {
  chmodSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ClaudeCodeToolHooks, discoverClaudeCodeHooks, type HookOutcome } from './index.js';

let project: string;
beforeEach(() => {
  project = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-tool-hooks-')));
  mkdirSync(join(project, '.claude', 'hooks'), { recursive: true });
});
afterEach(() => rmSync(project, { recursive: true, force: true }));

/** Writes `.claude/hooks/<name>` (executable) and returns the command that runs it. */
function script(name: string, text: string): string {
  const path = join(project, '.claude', 'hooks', name);
  writeFileSync(path, text);
  chmodSync(path, 0o755);
  return `"$CLAUDE_PROJECT_DIR"/.claude/hooks/${name}`;
}

function settings(hooks: Record<string, unknown>, file = 'settings.json'): void {
  writeFileSync(join(project, '.claude', file), JSON.stringify({ hooks }));
}

function toolHooks(outcomes: HookOutcome[] = []): ClaudeCodeToolHooks {
  return new ClaudeCodeToolHooks(discoverClaudeCodeHooks({ projectDir: project, home: null }), {
    projectDir: project,
    onHookOutcome: (outcome) => outcomes.push(outcome),
  });
}

const shell = (command: string, id = 'c1') => ({ id, name: 'shell', args: { command } });

describe('"continue": false stops the run, over decision and permissionDecision', () => {
  it('PreToolUse: the call is not run; the reason is stopReason, or a sentence naming the hook', async () => {
    const kill = script(
      'kill-switch.py',
      [
        '#!/usr/bin/env python3',
        'import json, sys',
        'event = json.load(sys.stdin)',
        'command = event["tool_input"]["command"]',
        'out = {"continue": False, "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}',
        'if "budget" in command: out["stopReason"] = "Budget exceeded: stop the session now"',
        'if "deploy" in command or "budget" in command: print(json.dumps(out))',
        '',
      ].join('\n'),
    );
    settings({ PreToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: kill }] }] });
    const outcomes: HookOutcome[] = [];
    const hooks = toolHooks(outcomes);
    expect(await hooks.before(shell('echo budget'))).toEqual({
      kind: 'stop',
      reason: 'Budget exceeded: stop the session now',
    });
    expect(await hooks.before(shell('./deploy.sh'))).toEqual({
      kind: 'stop',
      reason: 'PreToolUse hook ".claude/settings.json#PreToolUse[0].hooks[0]" stopped the run',
    });
    expect(await hooks.before(shell('ls'))).toEqual({ kind: 'allow' });
    expect(outcomes.map((outcome) => [outcome.kind, outcome.message])).toEqual([
      ['halt', 'Budget exceeded: stop the session now'],
      ['halt', 'PreToolUse hook ".claude/settings.json#PreToolUse[0].hooks[0]" stopped the run'],
      ['allow', undefined],
    ]);
  });

  it('PreToolUse: a stop wins over another hook that denies the same call', async () => {
    const stop = script('stop.sh', '#!/bin/sh\necho \'{"continue":false,"stopReason":"halt now"}\'\n');
    const deny = script('deny.sh', '#!/bin/sh\necho no >&2\nexit 2\n');
    settings({
      PreToolUse: [
        {
          hooks: [
            { type: 'command', command: deny },
            { type: 'command', command: stop },
          ],
        },
      ],
    });
    expect(await toolHooks().before(shell('ls'))).toEqual({ kind: 'stop', reason: 'halt now' });
  });

  it('PostToolUse: stop carries stopReason for the user; the block reason still reaches the model', async () => {
    const budget = script(
      'budget.sh',
      [
        '#!/bin/sh',
        'cat >/dev/null',
        'echo \'{"continue":false,"stopReason":"Budget exceeded","decision":"block","reason":"you ran out"}\'',
        '',
      ].join('\n'),
    );
    const bare = script('bare.sh', '#!/bin/sh\necho \'{"continue":false}\'\n');
    settings({
      PostToolUse: [
        { matcher: 'Bash', hooks: [{ type: 'command', command: budget }] },
        { matcher: 'Write', hooks: [{ type: 'command', command: bare }] },
      ],
    });
    const outcomes: HookOutcome[] = [];
    const hooks = toolHooks(outcomes);
    expect(await hooks.after(shell('echo hi'), { output: 'hi' })).toEqual({
      feedback: 'you ran out',
      stop: 'Budget exceeded',
    });
    const write = { id: 'w', name: 'write_file', args: { path: 'a.txt', content: 'x' } };
    expect(await hooks.after(write, { output: 'wrote 1 bytes' })).toEqual({
      feedback: '',
      stop: 'PostToolUse hook ".claude/settings.json#PostToolUse[1].hooks[0]" stopped the run',
    });
    expect(outcomes.map((outcome) => [outcome.event, outcome.kind, outcome.message])).toEqual([
      ['PostToolUse', 'halt', 'Budget exceeded'],
      [
        'PostToolUse',
        'halt',
        'PostToolUse hook ".claude/settings.json#PostToolUse[1].hooks[0]" stopped the run',
      ],
    ]);
  });
});

describe('the handler-level "if": a permission rule the call must match', () => {
  /** A PreToolUse hook that logs each run to runs.log and then denies, so the test sees which ran. */
  function guard(ifRule: string, matcher = ''): void {
    const command = script(
      'guard.sh',
      '#!/bin/sh\njq -r \'.tool_name + " " + (.tool_input.command // .tool_input.file_path)\' >> "$CLAUDE_PROJECT_DIR/runs.log"\necho "blocked by $1" >&2\nexit 2\n',
    );
    settings({
      PreToolUse: [{ matcher, hooks: [{ type: 'command', command: `${command} '${ifRule}'`, if: ifRule }] }],
    });
  }
  const ran = (): string[] => {
    try {
      return readFileSync(join(project, 'runs.log'), 'utf8').split('\n').filter(Boolean);
    } catch {
      return [];
    }
  };

  it('Bash(git push *): only git push runs the hook, also inside a compound command or after VAR=value', async () => {
    guard('Bash(git push *)', 'Bash');
    const outcomes: HookOutcome[] = [];
    const hooks = toolHooks(outcomes);
    expect(await hooks.before(shell('echo harmless'))).toEqual({ kind: 'allow' });
    expect(await hooks.before(shell('git status'))).toEqual({ kind: 'allow' });
    const denied = { kind: 'deny', reason: 'blocked by Bash(git push *)' };
    expect(await hooks.before(shell('git push origin main'))).toEqual(denied);
    expect(await hooks.before(shell('ls && git   push'))).toEqual(denied);
    expect(await hooks.before(shell('FOO=bar BAZ="a b" git push --force'))).toEqual(denied);
    expect(await hooks.before(shell("echo 'git push' | cat"))).toEqual({ kind: 'allow' });
    expect(ran()).toEqual([
      'Bash git push origin main',
      'Bash ls && git   push',
      'Bash FOO=bar BAZ="a b" git push --force',
    ]);
    expect(outcomes.map((outcome) => outcome.kind)).toEqual(['deny', 'deny', 'deny']);
  });

  it('Bash(npm run test:*) is a prefix on a word boundary; a lone trailing " *" is optional', async () => {
    guard('Bash(npm run test:*)');
    const hooks = toolHooks();
    expect(await hooks.before(shell('npm run test'))).toMatchObject({ kind: 'deny' });
    expect(await hooks.before(shell('npm run test -- --watch'))).toMatchObject({ kind: 'deny' });
    expect(await hooks.before(shell('npm run build'))).toEqual({ kind: 'allow' });
    expect(await hooks.before(shell('npm run tests'))).toEqual({ kind: 'allow' });
    guard('Bash(make *)');
    expect(await toolHooks().before(shell('make'))).toMatchObject({ kind: 'deny' });
    expect(await toolHooks().before(shell('makeself x'))).toEqual({ kind: 'allow' });
  });

  it('file rules: Edit(src/**) covers Write; Read(*.env) at any depth, Read(./.env) at the root; //absolute', async () => {
    const write = (path: string) => ({ id: 'w', name: 'write_file', args: { path, content: 'x' } });
    const read = (path: string) => ({ id: 'r', name: 'read_file', args: { path } });
    guard('Edit(src/**)');
    expect(await toolHooks().before(write('src/deep/a.ts'))).toMatchObject({ kind: 'deny' });
    expect(await toolHooks().before(write('docs/a.md'))).toEqual({ kind: 'allow' });
    expect(await toolHooks().before(read('src/a.ts'))).toEqual({ kind: 'allow' }); // not an edit
    guard('Read(*.env)');
    expect(await toolHooks().before(read('config/prod.env'))).toMatchObject({ kind: 'deny' });
    guard('Read(./.env)');
    expect(await toolHooks().before(read('.env'))).toMatchObject({ kind: 'deny' });
    expect(await toolHooks().before(read('sub/.env'))).toEqual({ kind: 'allow' });
    guard(`Read(/${join(project, 'secret')}/**)`);
    expect(await toolHooks().before(read('secret/key.pem'))).toMatchObject({ kind: 'deny' });
    expect(await toolHooks().before(read('public/key.pem'))).toEqual({ kind: 'allow' });
    expect(ran()).toEqual([
      `Write ${join(project, 'src/deep/a.ts')}`,
      `Read ${join(project, 'config/prod.env')}`,
      `Read ${join(project, '.env')}`,
      `Read ${join(project, 'secret/key.pem')}`,
    ]);
  });

  it('what Aleph cannot read runs the hook and says so; a rule for another tool, or an MCP name, is matched by name', async () => {
    guard('Bash(git *)');
    const outcomes: HookOutcome[] = [];
    expect(await toolHooks(outcomes).before(shell('echo $(git rev-parse HEAD)'))).toMatchObject({
      kind: 'deny',
    });
    expect(outcomes[0]).toMatchObject({
      kind: 'error',
      tool: 'shell',
      message: expect.stringMatching(
        /^"if" could not be applied \(the command is too complex.*ran as if it had none$/,
      ),
    });
    guard('Bash(git *');
    expect(await toolHooks().before(shell('ls'))).toMatchObject({ kind: 'deny' });
    guard('mcp__github__*');
    expect(await toolHooks().before({ id: 'm', name: 'mcp__github__create_issue', args: {} })).toMatchObject({
      kind: 'deny',
    });
    expect(await toolHooks().before(shell('ls'))).toEqual({ kind: 'allow' });
  });

  it('"if" on a Stop hook: never runs, as in Claude Code, with a warning; "onFailure" is named as not read', () => {
    settings({
      Stop: [{ hooks: [{ type: 'command', command: 'exit 2', if: 'Bash(git *)' }] }],
      PreToolUse: [{ hooks: [{ type: 'command', command: 'true', onFailure: 'block' }] }],
    });
    const found = discoverClaudeCodeHooks({ projectDir: project, home: null });
    expect(found.hooks.map((hook) => hook.event)).toEqual(['PreToolUse']);
    expect(found.warnings).toEqual([
      '.claude/settings.json#Stop[0].hooks[0]: "if" is only read on tool events; as in Claude Code, this hook never runs',
      '.claude/settings.json#PreToolUse[0].hooks[0]: "onFailure" is not read by Aleph; a failing hook is reported and ignored',
    ]);
  });
});

describe('"disableAllHooks": true', () => {
  it('in settings.local.json, turns off the hooks of every merged file (user, project, local)', async () => {
    const home = join(project, 'home');
    mkdirSync(join(home, '.claude'), { recursive: true });
    const logger = (who: string) => ({
      matcher: 'Bash',
      hooks: [{ type: 'command', command: `echo ${who} >> "$CLAUDE_PROJECT_DIR/order.log"` }],
    });
    writeFileSync(
      join(home, '.claude', 'settings.json'),
      JSON.stringify({ hooks: { PreToolUse: [logger('user')] } }),
    );
    settings({ PreToolUse: [logger('project')] });
    const local = { disableAllHooks: true, hooks: { PreToolUse: [logger('local')], Stop: [logger('stop')] } };
    writeFileSync(join(project, '.claude', 'settings.local.json'), JSON.stringify(local));
    const found = discoverClaudeCodeHooks({ projectDir: project, home });
    expect(found.hooks).toEqual([]);
    expect(found.warnings).toContain(
      '.claude/settings.local.json: "disableAllHooks": true; no Claude Code hook runs',
    );
    const hooks = new ClaudeCodeToolHooks(found, { projectDir: project });
    expect(hooks.active).toBe(false);
    expect(await hooks.before(shell('echo hi'))).toEqual({ kind: 'allow' });
    expect(() => readFileSync(join(project, 'order.log'))).toThrow(/ENOENT/);
    writeFileSync(
      join(project, '.claude', 'settings.local.json'),
      JSON.stringify({ ...local, disableAllHooks: false }),
    );
    await new ClaudeCodeToolHooks(discoverClaudeCodeHooks({ projectDir: project, home }), {
      projectDir: project,
    }).before(shell('echo hi'));
    expect(readFileSync(join(project, 'order.log'), 'utf8').split('\n').filter(Boolean).sort()).toEqual([
      'local',
      'project',
      'user',
    ]);
  });
});

describe('PostToolUse after a success only; PostToolUseFailure after a failed call', () => {
  it('a failed call runs PostToolUseFailure (told error), not PostToolUse; matcher and "if" apply to both', async () => {
    const log = (event: string) =>
      script(
        `${event}.sh`,
        `#!/bin/sh\njq -c '{e: .hook_event_name, c: .tool_input.command, error, ok: .tool_response.stdout}' >> "$CLAUDE_PROJECT_DIR/post.log"\n` +
          (event === 'failure'
            ? 'echo \'{"hookSpecificOutput":{"hookEventName":"PostToolUseFailure","additionalContext":"try make -k"}}\'\n'
            : ''),
      );
    settings({
      PostToolUse: [{ matcher: 'Bash', hooks: [{ type: 'command', command: log('success') }] }],
      PostToolUseFailure: [
        { matcher: 'Bash', hooks: [{ type: 'command', command: log('failure'), if: 'Bash(make *)' }] },
      ],
    });
    const outcomes: HookOutcome[] = [];
    const hooks = toolHooks(outcomes);
    expect(await hooks.after(shell('make'), { output: 'make: *** [all] Error 2', isError: true })).toEqual({
      feedback: 'try make -k',
    });
    expect(await hooks.after(shell('false'), { output: 'exit 1', isError: true })).toBeUndefined(); // "if" says no
    expect(await hooks.after(shell('make'), { output: 'built' })).toBeUndefined();
    const lines = readFileSync(join(project, 'post.log'), 'utf8').split('\n').filter(Boolean);
    expect(lines.map((line) => JSON.parse(line) as unknown)).toEqual([
      { e: 'PostToolUseFailure', c: 'make', error: 'make: *** [all] Error 2', ok: null },
      { e: 'PostToolUse', c: 'make', error: null, ok: 'built' },
    ]);
    expect(outcomes.map((outcome) => [outcome.event, outcome.kind])).toEqual([
      ['PostToolUseFailure', 'feedback'],
      ['PostToolUse', 'allow'],
    ]);
  });
});

describe("a sandboxed hook's rewrite is judged by the user's hooks", () => {
  const guard = {
    name: '~/.claude/settings.json#PreToolUse[0].hooks[0]',
    event: 'PreToolUse' as const,
    matcher: 'Bash',
    command: `jq -r .tool_input.command | grep -q FORBIDDEN && { echo "guard: not here" >&2; exit 2; }; exit 0`,
    timeoutMs: 10_000,
  };
  const rewriter = (sandbox: boolean) => ({
    name: 'sub/.claude/settings.json#PreToolUse[0].hooks[0]',
    event: 'PreToolUse' as const,
    matcher: '.*',
    command: `echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"echo FORBIDDEN"}}}'`,
    timeoutMs: 10_000,
    ...(sandbox ? { sandbox } : {}),
  });
  const hooks = (sandbox: boolean) =>
    new ClaudeCodeToolHooks(
      { hooks: [guard, rewriter(sandbox)], warnings: [], files: [] },
      { projectDir: project },
    );

  it("a rewrite by a hook that runs in the sandbox (its file may be the model's) into what the guard denies is denied", async () => {
    expect(await hooks(true).before(shell('echo harmless'))).toEqual({
      kind: 'deny',
      reason: 'guard: not here (the input as a sandboxed hook rewrote it)',
    });
  });

  it("a rewrite by the user's own hook stands, as under Claude Code", async () => {
    expect(await hooks(false).before(shell('echo harmless'))).toMatchObject({
      kind: 'rewrite',
      args: { command: 'echo FORBIDDEN' },
    });
  });
});

describe("the goal tool's gate_command", () => {
  it('is judged by Bash hooks as the shell call it will be: a command the guard denies is denied', async () => {
    const guard = {
      name: '~/.claude/settings.json#PreToolUse[0].hooks[0]',
      event: 'PreToolUse' as const,
      matcher: 'Bash',
      command: `jq -r .tool_input.command | grep -q FORBIDDEN && { echo "guard: not here" >&2; exit 2; }; exit 0`,
      timeoutMs: 10_000,
    };
    const hooks = new ClaudeCodeToolHooks(
      { hooks: [guard], warnings: [], files: [] },
      { projectDir: project },
    );
    const goal = (gate: string) => ({
      id: 'g1',
      name: 'goal',
      args: { objective: 'tidy', gate_command: gate },
    });
    expect(await hooks.before(goal('rm -f important.txt FORBIDDEN'))).toEqual({
      kind: 'deny',
      reason: 'guard: not here (the gate_command, judged as a shell call)',
    });
    expect(await hooks.before(goal('pnpm test'))).toEqual({ kind: 'allow' });
    expect(await hooks.before({ id: 'g2', name: 'goal', args: { objective: 'tidy' } })).toEqual({
      kind: 'allow',
    });
  });
});

describe('a command that will run as a shell call would (judgeCommand)', () => {
  it('Bash hooks judge it: a deny comes back with the reason and why; another command is allowed', async () => {
    const guard = {
      name: '~/.claude/settings.json#PreToolUse[0].hooks[0]',
      event: 'PreToolUse' as const,
      matcher: 'Bash',
      command: `jq -r .tool_input.command | grep -q FORBIDDEN && { echo "guard: not here" >&2; exit 2; }; exit 0`,
      timeoutMs: 10_000,
    };
    const hooks = new ClaudeCodeToolHooks(
      { hooks: [guard], warnings: [], files: [] },
      { projectDir: project },
    );
    expect(await hooks.judgeCommand("/bin/sh -c 'rm -f x # FORBIDDEN'", 'a server', { id: 'm1' })).toEqual({
      kind: 'deny',
      reason: 'guard: not here (a server)',
    });
    expect(await hooks.judgeCommand('node server.js', 'a server', { id: 'm2' })).toEqual({ kind: 'allow' });
  });
});
