// ClaudeCodeSessionHooks against Claude Code's documented session events, with real hook commands
// in a temp project's `.claude/settings.json`: each event's stdin fields, matchers on source /
// trigger / notification type / reason, context from plain stdout or `additionalContext`, a
// UserPromptSubmit block (exit 2 or `decision: "block"`), `continue: false`, and a broken hook
// reported without changing anything.
import { mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ClaudeCodeSessionHooks, discoverClaudeCodeHooks, type HookOutcome } from './index.js';

let project: string;
beforeEach(() => {
  project = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-session-hooks-')));
  mkdirSync(join(project, '.claude'), { recursive: true });
});
afterEach(() => rmSync(project, { recursive: true, force: true }));

/** A settings file: each event's groups as `[matcher, command]` pairs. */
function settings(hooks: Record<string, [string | undefined, string][]>): void {
  const groups = Object.fromEntries(
    Object.entries(hooks).map(([event, list]) => [
      event,
      list.map(([matcher, command]) => ({
        ...(matcher === undefined ? {} : { matcher }),
        hooks: [{ type: 'command', command }],
      })),
    ]),
  );
  writeFileSync(join(project, '.claude', 'settings.json'), JSON.stringify({ hooks: groups }));
}

function sessionHooks(outcomes: HookOutcome[] = []): ClaudeCodeSessionHooks {
  const found = discoverClaudeCodeHooks({ projectDir: project, home: null });
  expect(found.warnings).toEqual([]);
  return new ClaudeCodeSessionHooks(found, {
    projectDir: project,
    promptId: 'run-1',
    onHookOutcome: (outcome) => outcomes.push(outcome),
  });
}

/** The JSON lines a recording hook appended to `name`. */
const recorded = (name: string): Record<string, unknown>[] =>
  readFileSync(join(project, name), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);

const record = (name: string) =>
  `cat >> "$CLAUDE_PROJECT_DIR/${name}"; echo >> "$CLAUDE_PROJECT_DIR/${name}"`;

describe('SessionStart', () => {
  it("gets Claude Code's stdin; only hooks whose matcher names the source run; stdout is context", async () => {
    settings({
      SessionStart: [
        ['startup', `${record('start.jsonl')}; echo "baseline: 3 failing tests"`],
        ['resume|compact', `${record('resume.jsonl')}; echo RESUMED`],
        [
          undefined,
          `printf '%s' '{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"from JSON"}}'`,
        ],
      ],
    });
    const hooks = sessionHooks();
    expect(hooks.has('SessionStart')).toBe(true);
    expect(hooks.has('PreCompact')).toBe(false);
    const decision = await hooks.sessionStart({
      sessionId: 'session-1',
      transcriptPath: '/tmp/t.jsonl',
      source: 'startup',
      model: 'fake-coder',
    });
    expect(decision).toEqual({ kind: 'continue', context: 'baseline: 3 failing tests\n\nfrom JSON' });
    expect(recorded('start.jsonl')).toEqual([
      {
        session_id: 'session-1',
        transcript_path: '/tmp/t.jsonl',
        cwd: project,
        permission_mode: 'bypassPermissions',
        hook_event_name: 'SessionStart',
        prompt_id: 'run-1',
        source: 'startup',
        model: 'fake-coder',
      },
    ]);
    expect(() => readFileSync(join(project, 'resume.jsonl'))).toThrow(); // its matcher names other sources
    expect((await hooks.sessionStart({ sessionId: 'session-1', source: 'resume' })).kind).toBe('continue');
    expect(recorded('resume.jsonl')).toMatchObject([{ source: 'resume' }]);
  });

  it('exit 2 does not block (stderr is for the user); `continue: false` stops; a failing hook is an error outcome', async () => {
    settings({
      SessionStart: [
        [undefined, 'echo "not a blocker" >&2; exit 2'],
        [undefined, 'echo broken >&2; exit 1'],
      ],
    });
    const outcomes: HookOutcome[] = [];
    expect(await sessionHooks(outcomes).sessionStart({ sessionId: 's', source: 'startup' })).toEqual({
      kind: 'continue',
    });
    expect(outcomes.map((outcome) => [outcome.event, outcome.kind, outcome.message])).toEqual([
      ['SessionStart', 'allow', 'not a blocker'],
      ['SessionStart', 'error', 'exited with code 1: broken'],
    ]);
    settings({
      SessionStart: [[undefined, `echo '{"continue": false, "stopReason": "repository is locked"}'`]],
    });
    expect(await sessionHooks().sessionStart({ sessionId: 's', source: 'startup' })).toEqual({
      kind: 'stop',
      reason: 'repository is locked',
    });
  });
});

describe('UserPromptSubmit', () => {
  it('gets the prompt; plain stdout and additionalContext are context', async () => {
    settings({
      UserPromptSubmit: [
        [undefined, `${record('prompt.jsonl')}; echo "current branch: main"`],
        [
          undefined,
          `echo '{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"ticket ABC-1"}}'`,
        ],
      ],
    });
    const decision = await sessionHooks().userPromptSubmit({ sessionId: 's', prompt: 'fix the tests' });
    expect(decision).toEqual({ kind: 'continue', context: 'current branch: main\n\nticket ABC-1' });
    expect(recorded('prompt.jsonl')).toEqual([
      expect.objectContaining({
        hook_event_name: 'UserPromptSubmit',
        prompt: 'fix the tests',
        session_id: 's',
      }),
    ]);
  });

  it('exit 2 blocks with stderr; `decision: "block"` with its reason; `continue: false` stops, over both', async () => {
    settings({ UserPromptSubmit: [[undefined, 'echo "no secrets in prompts" >&2; exit 2']] });
    const outcomes: HookOutcome[] = [];
    expect(await sessionHooks(outcomes).userPromptSubmit({ sessionId: 's', prompt: 'x' })).toEqual({
      kind: 'block',
      reason: 'no secrets in prompts',
    });
    expect(outcomes).toMatchObject([{ event: 'UserPromptSubmit', kind: 'block', exitCode: 2 }]);
    settings({
      UserPromptSubmit: [[undefined, `echo '{"decision": "block", "reason": "outside office hours"}'`]],
    });
    expect(await sessionHooks().userPromptSubmit({ sessionId: 's', prompt: 'x' })).toEqual({
      kind: 'block',
      reason: 'outside office hours',
    });
    settings({
      UserPromptSubmit: [
        [undefined, `echo '{"decision": "block", "reason": "r"}'`],
        [undefined, `echo '{"continue": false}'`],
      ],
    });
    const stopped = await sessionHooks().userPromptSubmit({ sessionId: 's', prompt: 'x' });
    expect(stopped).toEqual({
      kind: 'stop',
      reason: 'UserPromptSubmit hook .claude/settings.json#UserPromptSubmit[1].hooks[0] stopped the run',
    });
  });
});

it('PreCompact, Notification and SessionEnd get their fields, matched on trigger, type and reason; they decide nothing', async () => {
  settings({
    PreCompact: [
      ['auto', record('compact.jsonl')],
      ['manual', 'exit 1'],
    ],
    Notification: [
      ['idle_prompt', record('notify.jsonl')],
      ['permission_prompt', 'exit 1'],
    ],
    SessionEnd: [[undefined, `${record('end.jsonl')}; exit 2`]],
  });
  const outcomes: HookOutcome[] = [];
  const hooks = sessionHooks(outcomes);
  await hooks.preCompact({ sessionId: 's', trigger: 'auto' });
  await hooks.notification({ sessionId: 's', message: 'waiting', notificationType: 'idle_prompt' });
  await hooks.sessionEnd({ sessionId: 's', reason: 'other' });
  expect(recorded('compact.jsonl')).toEqual([
    expect.objectContaining({ hook_event_name: 'PreCompact', trigger: 'auto', custom_instructions: '' }),
  ]);
  expect(recorded('notify.jsonl')).toEqual([
    expect.objectContaining({
      hook_event_name: 'Notification',
      message: 'waiting',
      notification_type: 'idle_prompt',
    }),
  ]);
  expect(recorded('end.jsonl')).toEqual([
    expect.objectContaining({ hook_event_name: 'SessionEnd', reason: 'other', session_id: 's' }),
  ]);
  expect(outcomes.map((outcome) => [outcome.event, outcome.kind])).toEqual([
    ['PreCompact', 'allow'],
    ['Notification', 'allow'],
    ['SessionEnd', 'allow'],
  ]);
});
