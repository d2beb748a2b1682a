// Claude Code's session hooks in a real server run, from `.claude/settings.json`: SessionStart runs
// once per session with Claude Code's stdin before the first turn (its stdout reaches the model),
// `resume` for a follow-up; UserPromptSubmit adds context or blocks the prompt (the model is never
// called, `aleph run` says why and exits 1); Notification and SessionEnd run when the run ends.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { startFakeLlm, type Brain, type FakeLlm } from '../test/fake-llm.js';
import { CLI, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';

let work: string;
let llm: FakeLlm;
let server: ServerProcess;
const brain: Brain = (conversation) =>
  conversation.some((turn) => turn.role === 'tool')
    ? { text: 'Listed.\nVERDICT: PASS' }
    : { call: { name: 'shell', args: { command: 'echo listing' } } };

beforeAll(async () => {
  work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-session-hooks-e2e-')));
  llm = await startFakeLlm(brain);
  const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\nmax_iterations = 6\n\n[power]\ninhibit_sleep = false\n`;
  server = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'no-claude') });
});
afterAll(async () => {
  await server.stop();
  rmSync(server.stateDir, { recursive: true, force: true });
  await llm.close();
  rmSync(work, { recursive: true, force: true });
});

const record = (name: string) =>
  `cat >> "$CLAUDE_PROJECT_DIR/${name}"; echo >> "$CLAUDE_PROJECT_DIR/${name}"`;
const recorded = (project: string, name: string): Record<string, unknown>[] =>
  readFileSync(join(project, name), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, unknown>);

function project(name: string, hooks: Record<string, { matcher?: string; command: string }[]>): string {
  const folder = join(work, name);
  mkdirSync(join(folder, '.claude'), { recursive: true });
  const groups = Object.fromEntries(
    Object.entries(hooks).map(([event, list]) => [
      event,
      list.map(({ matcher, command }) => ({
        ...(matcher === undefined ? {} : { matcher }),
        hooks: [{ type: 'command', command }],
      })),
    ]),
  );
  writeFileSync(join(folder, '.claude', 'settings.json'), JSON.stringify({ hooks: groups }));
  return folder;
}

const run = (cwd: string, ...args: string[]) =>
  runToExit([CLI, 'run', ...args, '--cwd', cwd], { ALEPH_URL: server.url, ALEPH_TOKEN: server.token });

it('SessionStart once per session before the first turn, with its context; UserPromptSubmit context; Notification and SessionEnd at the end', async () => {
  const cwd = project('session', {
    SessionStart: [
      { matcher: 'startup|resume', command: `${record('start.jsonl')}; echo "BASELINE-4242: 3 tests fail"` },
    ],
    UserPromptSubmit: [
      {
        command: `${record('prompt.jsonl')}; echo '{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"PROMPT-CONTEXT-99"}}'`,
      },
    ],
    Notification: [{ matcher: 'idle_prompt', command: record('notify.jsonl') }],
    SessionEnd: [{ command: record('end.jsonl') }],
  });
  const before = llm.requests.length;
  const result = await run(cwd, 'list the files');
  expect(result.code, result.stdout + result.stderr).toBe(0);
  // Two turns (a call, then the stop), one SessionStart, before the first request.
  const requests = llm.requests.slice(before);
  expect(requests.length).toBe(2);
  const system = String(requests[0]!.body.messages[0].content);
  expect(system).toContain('BASELINE-4242: 3 tests fail');
  expect(system).toContain('PROMPT-CONTEXT-99');
  expect(result.stdout).toContain(
    'SessionStart hook ".claude/settings.json#SessionStart[0].hooks[0]" told the model',
  );
  const [start, ...more] = recorded(cwd, 'start.jsonl');
  expect(more).toEqual([]);
  expect(start).toEqual({
    session_id: expect.any(String),
    transcript_path: expect.stringMatching(/\.jsonl$/),
    cwd,
    permission_mode: 'bypassPermissions',
    hook_event_name: 'SessionStart',
    prompt_id: expect.any(String),
    source: 'startup',
    model: 'fake-coder',
  });
  expect(existsSync(start!['transcript_path'] as string)).toBe(true);
  expect(recorded(cwd, 'prompt.jsonl')).toEqual([
    expect.objectContaining({
      hook_event_name: 'UserPromptSubmit',
      prompt: 'list the files',
      session_id: start!['session_id'],
    }),
  ]);
  expect(recorded(cwd, 'notify.jsonl')).toEqual([
    expect.objectContaining({
      hook_event_name: 'Notification',
      notification_type: 'idle_prompt',
      session_id: start!['session_id'],
    }),
  ]);
  expect(recorded(cwd, 'end.jsonl')).toEqual([
    expect.objectContaining({
      hook_event_name: 'SessionEnd',
      reason: 'other',
      session_id: start!['session_id'],
    }),
  ]);

  // A follow-up in the same session: SessionStart again, as Claude Code's `resume`.
  const followUp = await run(cwd, '--continue', 'and again');
  expect(followUp.code, followUp.stdout + followUp.stderr).toBe(0);
  expect(recorded(cwd, 'start.jsonl').map((event) => [event['source'], event['session_id']])).toEqual([
    ['startup', start!['session_id']],
    ['resume', start!['session_id']],
  ]);
}, 150_000); // four server runs' worth of hooks on a loaded machine

it('a UserPromptSubmit hook that exits 2 blocks the prompt: the model is never called, aleph run says why and exits 1', async () => {
  const cwd = project('blocked', {
    UserPromptSubmit: [{ command: 'echo "no deploys on Friday" >&2; exit 2' }],
    SessionEnd: [{ command: record('end.jsonl') }],
  });
  const before = llm.requests.length;
  const result = await run(cwd, 'deploy to production');
  expect(result.code).toBe(1);
  expect(llm.requests.length).toBe(before);
  expect(result.stdout).toMatch(/halted by UserPromptSubmit hook blocked the prompt: no deploys on Friday/);
  expect(recorded(cwd, 'end.jsonl')).toEqual([expect.objectContaining({ reason: 'other' })]);
});

it('a Stop hook\'s "continue": false ends the run as the stop it was: stopReason shown, exit 0; its stdin has prompt_id', async () => {
  const cwd = project('stop-continue', {
    Stop: [
      {
        command: `${record('stop.jsonl')}; echo '{"continue": false, "stopReason": "Budget for today is used up"}'`,
      },
    ],
  });
  const result = await run(cwd, 'list the files');
  expect(result.code, result.stdout + result.stderr).toBe(0);
  expect(result.stdout).toContain(
    'the model stopped; a Stop hook ended the session: Budget for today is used up',
  );
  const [stop, ...more] = recorded(cwd, 'stop.jsonl');
  expect(more).toEqual([]);
  expect(stop).toMatchObject({
    hook_event_name: 'Stop',
    prompt_id: expect.any(String),
    stop_hook_active: false,
  });
});

it('a PreCompact hook (trigger auto) runs before the history is compacted to fit the context budget', async () => {
  const cwd = project('compact', { PreCompact: [{ matcher: 'auto', command: record('compact.jsonl') }] });
  const small = await startFakeLlm(() => ({ text: 'Done.\nVERDICT: PASS' }));
  const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${small.baseUrl}"\nmax_iterations = 3\nmax_context_tokens = 200\n\n[power]\ninhibit_sleep = false\n`;
  const tight = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'no-claude') });
  try {
    const result = await runToExit(
      [CLI, 'run', `summarise: ${'lorem ipsum dolor '.repeat(200)}`, '--cwd', cwd],
      {
        ALEPH_URL: tight.url,
        ALEPH_TOKEN: tight.token,
      },
    );
    expect(result.code, result.stdout + result.stderr).toBe(0);
    expect(recorded(cwd, 'compact.jsonl')).toEqual([
      expect.objectContaining({ hook_event_name: 'PreCompact', trigger: 'auto', custom_instructions: '' }),
    ]);
  } finally {
    await tight.stop();
    rmSync(tight.stateDir, { recursive: true, force: true });
    await small.close();
  }
}, 150_000);
