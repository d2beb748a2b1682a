// The project's own hooks files (`.claude/settings.json`, `settings.local.json`) may be the model's
// (a subfolder's `.claude` is writable to a run above it): they are read only when their real path
// lies in the project and under no denied path (a warning naming the file, never its content,
// else), and the hooks of one the caller names (`sandboxFile`: it changed while the model's
// commands could write it) run through the runner's `wrap` (the sandbox), for every event. The
// rest run as the user.
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
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  ClaudeCodeSessionHooks,
  ClaudeCodeToolHooks,
  claudeCodeStopHooks,
  discoverClaudeCodeHooks,
} from './index.js';
import type { CommandWrapper } from './internal/run-process.js';

let root = '';
let project = '';
let home = '';

beforeEach(() => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-project-hooks-')));
  project = join(root, 'project');
  home = join(root, 'home');
  mkdirSync(join(project, '.claude'), { recursive: true });
  mkdirSync(join(home, '.claude'), { recursive: true });
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A settings file whose hooks append `<who>:<wrapped or not>` to `<event>.log` in the project. */
function settings(path: string, who: string): void {
  const hook = (event: string) => [
    {
      ...(event === 'PreToolUse' ? { matcher: 'Bash' } : {}),
      hooks: [
        { type: 'command', command: `echo "${who}:\${WRAPPED:-no}" >> "$CLAUDE_PROJECT_DIR/${event}.log"` },
      ],
    },
  ];
  const events = ['Stop', 'PreToolUse', 'SessionStart'];
  writeFileSync(path, JSON.stringify({ hooks: Object.fromEntries(events.map((e) => [e, hook(e)])) }));
}

const log = (event: string): string[] =>
  readFileSync(join(project, `${event}.log`), 'utf8')
    .trim()
    .split('\n')
    .sort();

/** A stand-in sandbox: the command runs with WRAPPED=yes. */
const wrap: CommandWrapper = (command) => ({
  file: 'env',
  args: ['WRAPPED=yes', command.file, ...command.args],
  cwd: command.cwd,
  env: Object.fromEntries(
    Object.entries(command.env).filter((pair): pair is [string, string] => pair[1] !== undefined),
  ),
});

describe("the project's own hooks files", () => {
  it("one the caller names runs through wrap for Stop, tool and session events; the user's run as the user", async () => {
    settings(join(home, '.claude', 'settings.json'), 'user');
    settings(join(project, '.claude', 'settings.json'), 'project');
    const asked: string[] = [];
    const found = discoverClaudeCodeHooks({
      projectDir: project,
      home,
      sandboxFile: (file) => {
        asked.push(file);
        return file.startsWith(project)
          ? 'changed during agent run r1 in /p: its hooks run in the sandbox'
          : undefined;
      },
    });
    expect(asked).toEqual([
      join(home, '.claude', 'settings.json'),
      join(project, '.claude', 'settings.json'),
    ]);
    expect(found.warnings).toEqual([
      '.claude/settings.json: changed during agent run r1 in /p: its hooks run in the sandbox',
    ]);
    expect(found.hooks.map((hook) => [hook.event, hook.sandbox === true])).toEqual([
      ['Stop', false],
      ['PreToolUse', false],
      ['SessionStart', false],
      ['Stop', true],
      ['PreToolUse', true],
      ['SessionStart', true],
    ]);
    const signal = new AbortController().signal;
    for (const hook of claudeCodeStopHooks(found, 'Stop', { wrap }))
      await hook.evaluate(
        { finalText: 'done', iterations: 1, toolCallsMade: 0, stopReason: 'end_turn', projectDir: project },
        signal,
      );
    expect(log('Stop')).toEqual(['project:yes', 'user:no']);
    const tools = new ClaudeCodeToolHooks(found, { projectDir: project, wrap });
    expect(await tools.before({ id: 'c1', name: 'shell', args: { command: 'ls' } })).toEqual({
      kind: 'allow',
    });
    expect(log('PreToolUse')).toEqual(['project:yes', 'user:no']);
    const session = new ClaudeCodeSessionHooks(found, { projectDir: project, wrap });
    await session.sessionStart({ sessionId: 's1', source: 'startup' });
    expect(log('SessionStart')).toEqual(['project:yes', 'user:no']);
  });

  it('one the caller does not name runs as the user, as before', async () => {
    settings(join(project, '.claude', 'settings.json'), 'project');
    const found = discoverClaudeCodeHooks({
      projectDir: project,
      home: null,
      sandboxFile: () => undefined,
    });
    expect(found.warnings).toEqual([]);
    const session = new ClaudeCodeSessionHooks(found, { projectDir: project, wrap });
    await session.sessionStart({ sessionId: 's1', source: 'startup' });
    expect(log('SessionStart')).toEqual(['project:no']);
  });

  it('bad JSON is an error naming the file and the position, never quoting it', () => {
    writeFileSync(join(project, '.claude', 'settings.json'), 'SECRET-TEXT {');
    expect(() => discoverClaudeCodeHooks({ projectDir: project, home: null })).toThrow(
      new RegExp(`^${join(project, '.claude', 'settings.json')}: not valid JSON$`),
    );
    writeFileSync(join(project, '.claude', 'settings.json'), '{"SECRET":1,}');
    expect(() => discoverClaudeCodeHooks({ projectDir: project, home: null })).toThrow(
      /settings\.json: not valid JSON at position 12( \(line 1 column 13\))?$/,
    );
  });

  it('a link out of the project, or to a denied path in it, is skipped with a warning that quotes nothing', () => {
    const outside = join(root, 'outside.json');
    writeFileSync(outside, 'outside-SECRET {');
    symlinkSync(outside, join(project, '.claude', 'settings.json'));
    mkdirSync(join(project, 'secret'));
    writeFileSync(join(project, 'secret', 'key'), 'denied-SECRET {');
    symlinkSync(join(project, 'secret', 'key'), join(project, '.claude', 'settings.local.json'));
    const found = discoverClaudeCodeHooks({
      projectDir: project,
      home: null,
      deniedPaths: [join(project, 'secret')],
    });
    expect(found.hooks).toEqual([]);
    expect(found.warnings).toEqual([
      `.claude/settings.json: is a link to a path outside ${project}; skipped`,
      `.claude/settings.local.json: lies under ${join(project, 'secret')}, a denied path; skipped`,
    ]);
    expect(found.files).toEqual([]);
    // The user's own settings may link anywhere (a dotfiles repository).
    settings(join(root, 'dotfiles.json'), 'user');
    symlinkSync(join(root, 'dotfiles.json'), join(home, '.claude', 'settings.json'));
    const withUser = discoverClaudeCodeHooks({
      projectDir: project,
      home,
      deniedPaths: [join(project, 'secret')],
    });
    expect(withUser.hooks).toHaveLength(3);
  });
});

describe('hooks files the model may have written, outside the project', () => {
  it("the user's settings file, a link into a folder a run could write, runs its hooks in the sandbox", async () => {
    // Dotfiles: ~/.claude/settings.json is a link into a folder agent runs worked in.
    mkdirSync(join(root, 'dotfiles', 'claude'), { recursive: true });
    settings(join(root, 'dotfiles', 'claude', 'settings.json'), 'user');
    symlinkSync(join(root, 'dotfiles', 'claude', 'settings.json'), join(home, '.claude', 'settings.json'));
    const asked: string[] = [];
    const found = discoverClaudeCodeHooks({
      projectDir: project,
      home,
      sandboxFile: (file) => {
        asked.push(file);
        return 'changed during agent run r2 in /dotfiles: its hooks run in the sandbox';
      },
    });
    expect(asked).toEqual([join(home, '.claude', 'settings.json')]);
    expect(found.warnings).toEqual([
      '~/.claude/settings.json: changed during agent run r2 in /dotfiles: its hooks run in the sandbox',
    ]);
    expect(found.hooks.every((hook) => hook.sandbox === true)).toBe(true);
    const session = new ClaudeCodeSessionHooks(found, { projectDir: project, wrap });
    await session.sessionStart({ sessionId: 's1', source: 'startup' });
    expect(log('SessionStart')).toEqual(['user:yes']);
  });

  it("a file the caller names cannot turn the other files' hooks off with disableAllHooks", () => {
    settings(join(home, '.claude', 'settings.json'), 'user');
    mkdirSync(join(project, 'sub', '.claude'), { recursive: true });
    writeFileSync(
      join(project, 'sub', '.claude', 'settings.json'),
      JSON.stringify({ disableAllHooks: true }),
    );
    const sub = join(project, 'sub');
    const found = discoverClaudeCodeHooks({
      projectDir: sub,
      home,
      sandboxFile: (file) => (file.startsWith(sub) ? 'changed during agent run r3 in /p' : undefined),
    });
    expect(found.warnings).toEqual([
      '.claude/settings.json: changed during agent run r3 in /p',
      '.claude/settings.json: "disableAllHooks": true is not obeyed: the file may be the model\'s',
    ]);
    expect(found.hooks.map((hook) => [hook.event, hook.sandbox === true])).toEqual([
      ['Stop', false],
      ['PreToolUse', false],
      ['SessionStart', false],
    ]);
    // The user's own file still turns every hook off.
    writeFileSync(join(home, '.claude', 'settings.json'), JSON.stringify({ disableAllHooks: true }));
    expect(discoverClaudeCodeHooks({ projectDir: sub, home, sandboxFile: () => undefined }).hooks).toEqual(
      [],
    );
  });
});
