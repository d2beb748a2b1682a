// ClaudeCodeToolHooks against Claude Code's documented PreToolUse/PostToolUse contract, with real
// hook scripts (sh, python3) in a temp project's `.claude/settings.json`: `continue: false` stops
// the run (https://code.claude.com/docs/en/hooks#json-output).
import { chmodSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
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
