// A settings file's matcher and "if" rule may be the model's (a project's `.claude`), and so are the
// tool names, commands and paths they are tried on: patterns that take V8's backtracking engine
// exponential (or n^k) time must not hold the server's event loop. Each case below took V8 (and
// picomatch) many seconds for a short text; here it is over at once, with the same answers.
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
import { ClaudeCodeToolHooks, discoverClaudeCodeHooks, matcherMatches, type HookOutcome } from './index.js';

let project: string;
beforeEach(() => {
  project = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-patterns-')));
  mkdirSync(join(project, '.claude'), { recursive: true });
});
afterEach(() => rmSync(project, { recursive: true, force: true }));

/** A PreToolUse hook with `matcher` and `if` that logs the call to ran.log and denies it. */
function denyingHook(matcher: string, ifRule?: string): ClaudeCodeToolHooks {
  const log = join(project, 'guard.sh');
  writeFileSync(log, '#!/bin/sh\necho ran >> "$CLAUDE_PROJECT_DIR/ran.log"\necho denied >&2\nexit 2\n');
  chmodSync(log, 0o755);
  const hook = { type: 'command', command: log, ...(ifRule === undefined ? {} : { if: ifRule }) };
  writeFileSync(
    join(project, '.claude', 'settings.json'),
    JSON.stringify({ hooks: { PreToolUse: [{ matcher, hooks: [hook] }] } }),
  );
  const outcomes: HookOutcome[] = [];
  return new ClaudeCodeToolHooks(discoverClaudeCodeHooks({ projectDir: project, home: null }), {
    projectDir: project,
    onHookOutcome: (outcome) => outcomes.push(outcome),
  });
}

const runs = (): number => {
  try {
    return readFileSync(join(project, 'ran.log'), 'utf8').split('\n').filter(Boolean).length;
  } catch {
    return 0;
  }
};

describe('hostile matcher and "if" patterns are matched in linear time', () => {
  it('a matcher with a quantified alternation, tried on a long tool name', async () => {
    const hooks = denyingHook('(a|a)+$');
    // V8: about 2^30 steps for this name, tens of seconds of a blocked event loop.
    expect(await hooks.before({ id: 'm', name: `${'a'.repeat(29)}!`, args: {} })).toEqual({ kind: 'allow' });
    expect(await hooks.before({ id: 'm', name: 'aaaa', args: {} })).toEqual({
      kind: 'deny',
      reason: 'denied',
    });
    expect(runs()).toBe(1);
    expect(matcherMatches('(a+)+$', [`${'a'.repeat(5000)}!`])).toBe(false);
  }, 5000);

  it('a Bash "if" rule with many wildcards, tried on a long command', async () => {
    const hooks = denyingHook('Bash', 'Bash(*a*a*a*a*a*a*b)');
    // V8: `^.*a.*a.*a.*a.*a.*a.*b$` takes about n^7/5040 steps on n letters a.
    expect(await hooks.before({ id: 's', name: 'shell', args: { command: 'a'.repeat(64) } })).toEqual({
      kind: 'allow',
    });
    expect(await hooks.before({ id: 's', name: 'shell', args: { command: 'xaaaaaaby' } })).toEqual({
      kind: 'allow',
    });
    expect(await hooks.before({ id: 's', name: 'shell', args: { command: 'xaaaaaaab' } })).toEqual({
      kind: 'deny',
      reason: 'denied',
    });
    expect(runs()).toBe(1);
  }, 5000);

  it('a Read "if" rule with many wildcards, tried on a long file name', async () => {
    const hooks = denyingHook('Read', `Read(${'*a'.repeat(12)}*b)`);
    const read = (path: string) => ({ id: 'r', name: 'read_file', args: { path } });
    // picomatch: its regex for this glob held V8 for seconds on a 32-letter name.
    expect(await hooks.before(read(`${'a'.repeat(32)}c`))).toEqual({ kind: 'allow' });
    expect(await hooks.before(read(`deep/${'a'.repeat(12)}b`))).toEqual({ kind: 'deny', reason: 'denied' });
    expect(runs()).toBe(1);
  }, 5000);

  it('a matcher with a backreference or a lookaround is refused at load with a warning, and matches nothing', async () => {
    writeFileSync(
      join(project, '.claude', 'settings.json'),
      JSON.stringify({
        hooks: {
          PreToolUse: [
            { matcher: '^(a+)\\1$', hooks: [{ type: 'command', command: 'exit 2' }] },
            { matcher: 'Ba(?=sh)', hooks: [{ type: 'command', command: 'exit 2' }] },
          ],
        },
      }),
    );
    const found = discoverClaudeCodeHooks({ projectDir: project, home: null });
    expect(found.warnings).toEqual([
      '.claude/settings.json#PreToolUse[0].hooks[0]: matcher "^(a+)\\\\1$" uses a backreference, which Aleph does not match (it can take exponential time); it matches nothing',
      '.claude/settings.json#PreToolUse[1].hooks[0]: matcher "Ba(?=sh)" uses a lookaround, which Aleph does not match (it can take exponential time); it matches nothing',
    ]);
    const hooks = new ClaudeCodeToolHooks(found, { projectDir: project });
    expect(await hooks.before({ id: 'm', name: 'aaaa', args: {} })).toEqual({ kind: 'allow' });
    expect(await hooks.before({ id: 's', name: 'shell', args: { command: 'ls' } })).toEqual({
      kind: 'allow',
    });
  });

  it('"*" is the match-all matcher Claude Code documents: no warning, and it runs for every tool', async () => {
    writeFileSync(
      join(project, '.claude', 'settings.json'),
      JSON.stringify({
        hooks: {
          PreToolUse: [{ matcher: '*', hooks: [{ type: 'command', command: 'echo all >&2; exit 2' }] }],
        },
      }),
    );
    const found = discoverClaudeCodeHooks({ projectDir: project, home: null });
    expect(found.warnings).toEqual([]);
    const hooks = new ClaudeCodeToolHooks(found, { projectDir: project });
    expect(await hooks.before({ id: 's', name: 'shell', args: { command: 'ls' } })).toEqual({
      kind: 'deny',
      reason: 'all',
    });
  });
});
