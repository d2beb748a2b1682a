// Claude Code hooks run unchanged: real hooks (bash + jq reading a Claude Code transcript, python3,
// node with an `args` array), laid out as a project with `.claude/settings.json`, each run on both
// routes (`[[stop_hooks]]` and Claude Code settings). Every expected verdict is what Claude Code's
// documented contract gives (https://docs.claude.com/en/docs/claude-code/hooks).
import { cpSync, mkdirSync, mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildStopHooksFromConfig,
  CLAUDE_CODE_HOOK_TIMEOUT_MS,
  ClaudeCodeToolHooks,
  DEFAULT_HOOK_TIMEOUT_MS,
  discoverClaudeCodeHooks,
  effectiveGate,
  ExtensionStopHookVerifier,
  gateVeto,
  loadHooksFile,
  matcherMatches,
  MutationEvidenceVerifier,
  OUTPUT_CAP_BYTES,
  type CommandWrapper,
  type HookOutcome,
  type StopHookContext,
  type ShellStopHook,
  type StopHookVerdict,
  type TurnVerifyContext,
  VerifierChain,
} from './index.js';

const FIXTURES = fileURLToPath(new URL('../fixtures/', import.meta.url));
const live = () => new AbortController().signal;
let root: string;
let project: string;
let home: string;
let plugin: string;

beforeAll(() => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-claude-code-')));
  project = join(root, 'project');
  home = join(root, 'home');
  plugin = join(root, 'plugin');
  cpSync(join(FIXTURES, 'claude-project'), project, { recursive: true });
  cpSync(join(FIXTURES, 'home'), home, { recursive: true });
  cpSync(join(FIXTURES, 'plugin'), plugin, { recursive: true });
  cpSync(join(FIXTURES, 'security-plugin'), join(root, 'security-plugin'), { recursive: true });
  mkdirSync(join(root, 'plain-project'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

const stopCtx = (over: Partial<StopHookContext> = {}): StopHookContext => ({
  finalText: 'One test still fails.',
  iterations: 2,
  toolCallsMade: 1,
  stopReason: 'end_turn',
  sessionId: 's1',
  projectDir: project,
  transcriptPath: join(project, 'transcripts', 'working.jsonl'),
  permissionMode: 'default',
  ...over,
});

/** The Claude Code route: one entry in a settings file, read by the settings parser. */
let fileCount = 0;
function viaSettings(entry: Record<string, unknown>, outcomes?: HookOutcome[]): ShellStopHook {
  const file = join(root, `settings-${(fileCount += 1)}.json`);
  writeFileSync(file, JSON.stringify({ hooks: { Stop: [{ hooks: [{ type: 'command', ...entry }] }] } }));
  const hooks = loadHooksFile(file, outcomes ? { onHookOutcome: (outcome) => outcomes.push(outcome) } : {});
  expect(hooks).toHaveLength(1);
  return hooks[0]!;
}

function writeSettings(name: string, timeout: number): string {
  const file = join(root, name);
  writeFileSync(
    file,
    JSON.stringify({ hooks: { Stop: [{ hooks: [{ type: 'command', command: 'true', timeout }] }] } }),
  );
  return file;
}

/** The `[[stop_hooks]]` route: the same command in aleph.toml, run in the project root. */
function viaStopHooks(command: string, timeoutSecs?: number): ShellStopHook {
  const verifier = buildStopHooksFromConfig(
    { stop_hooks: [{ name: 'h', command, ...(timeoutSecs ? { timeout_secs: timeoutSecs } : {}) }] },
    { cwd: project },
  );
  return verifier!.hooks[0] as ShellStopHook;
}

async function bothRoutes(
  entry: { command: string; args?: string[] },
  ctx: StopHookContext,
): Promise<[StopHookVerdict, StopHookVerdict]> {
  const shellCommand = [entry.command, ...(entry.args ?? [])].join(' ');
  return [
    await viaSettings(entry).evaluate(ctx, live()),
    await viaStopHooks(shellCommand).evaluate(ctx, live()),
  ];
}

/** Running, not merely a zombie nobody has reaped. */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX]/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}
const pidsIn = (file: string): number[] => readFileSync(file, 'utf8').split('\n').filter(Boolean).map(Number);

describe('the Stop contract, on both routes', () => {
  it('bash under set -u reads CLAUDE_PROJECT_DIR and the transcript with jq, and runs in the project root', async () => {
    const entry = { command: 'bash .claude/hooks/promise-check.sh' };
    const block = {
      kind: 'block',
      reason: 'No <promise>DONE</promise> yet; you last said: One test still fails.',
    };
    expect(await bothRoutes(entry, stopCtx())).toEqual([block, block]);
    const done = stopCtx({ transcriptPath: join(project, 'transcripts', 'done.jsonl') });
    expect(await bothRoutes(entry, done)).toEqual([{ kind: 'allow' }, { kind: 'allow' }]);
  });

  it('python3 reads last_assistant_message and stop_hook_active; exit 2 blocks with stderr', async () => {
    const entry = { command: '"$CLAUDE_PROJECT_DIR"/.claude/hooks/require-tests.py' };
    const block = { kind: 'block', reason: 'Run the test suite and report that the tests pass.' };
    expect(await bothRoutes(entry, stopCtx())).toEqual([block, block]);
    expect(await bothRoutes(entry, stopCtx({ finalText: 'Done: the tests pass.' }))).toEqual([
      { kind: 'allow' },
      { kind: 'allow' },
    ]);
    expect(await bothRoutes(entry, stopCtx({ stopHookActive: true }))).toEqual([
      { kind: 'allow' },
      { kind: 'allow' },
    ]);
  }, 120_000); // six python3 starts: seconds each on a loaded machine

  it("stop_hook_active is true only after a Stop hook's block, never after Aleph's own nudge", async () => {
    // The hook blocks when stop_hook_active is false; Aleph's evidence nudge must not make it true.
    const chain = VerifierChain.builder()
      .with(
        buildStopHooksFromConfig(
          { stop_hooks: [{ name: 'tests', command: 'python3 .claude/hooks/require-tests.py' }] },
          { cwd: project },
        ),
      )
      .with(new MutationEvidenceVerifier())
      .build();
    const stop: TurnVerifyContext = {
      iterations: 2,
      toolCallsMade: 1,
      finalText: 'One test still fails.',
      recentToolCalls: [{ name: 'write_file', argsHash: 'a', ok: true, kind: 'mutation' }],
      stopReason: 'end_turn',
      sessionId: 's-active',
      projectDir: project,
    };
    const verdicts = [];
    for (let attempt = 0; attempt < 3; attempt += 1) verdicts.push(await chain.run(stop, live()));
    expect(verdicts.map((verdict) => (verdict.kind === 'continue' ? 'continue' : verdict.source))).toEqual([
      'stop_hooks', // stop_hook_active false: the hook blocks
      'mutation_evidence', // true (its own block): the hook allows; Aleph's evidence nudge vetoes
      'stop_hooks', // false again (the nudge is not a Stop hook's block): the hook blocks, as under Claude Code
    ]);
  });

  it('an args array is passed as arguments (node, never reading stdin)', async () => {
    const entry = { command: 'node', args: ['.claude/hooks/args-hook', '--block', 'args', 'reached', 'me'] };
    const block = { kind: 'block', reason: 'args reached me' };
    expect(await bothRoutes(entry, stopCtx())).toEqual([block, block]);
  });

  it('the JSON is parsed whole before any cap: a 1.5 MiB reason still blocks, capped for the model (head and tail)', async () => {
    for (const verdict of await bothRoutes({ command: 'sh .claude/hooks/big-reason.sh' }, stopCtx())) {
      expect(verdict.kind).toBe('block');
      if (verdict.kind !== 'block') continue;
      // Head and tail, OUTPUT_CAP_BYTES in all, and how much was cut between them.
      const cut = 1572864 - OUTPUT_CAP_BYTES;
      const head = Math.floor(OUTPUT_CAP_BYTES / 3);
      expect(verdict.reason).toBe(
        `${'y'.repeat(head)}\n[… ${cut} bytes cut …]\n${'y'.repeat(OUTPUT_CAP_BYTES - head)}`,
      );
    }
  });

  it('exit 2 with only stdout: stdout and its JSON are ignored, an empty-reason block', async () => {
    const block = { kind: 'block', reason: '' };
    expect(await bothRoutes({ command: 'sh .claude/hooks/stdout-exit2.sh' }, stopCtx())).toEqual([
      block,
      block,
    ]);
  });

  it('exit 3 is a non-blocking error on the Claude Code route, a halt only for [[stop_hooks]]', async () => {
    expect(await bothRoutes({ command: 'sh .claude/hooks/exit-code.sh 3' }, stopCtx())).toEqual([
      {
        kind: 'error',
        hookName: expect.stringContaining('#Stop[0].hooks[0]'),
        message: 'exited with code 3: exiting 3',
        output: 'exiting 3',
      },
      { kind: 'halt', reason: 'exiting 3' },
    ]);
  });

  it('exit 1 is a non-blocking error on both, naming the code and stderr', async () => {
    const [settings, stopHooks] = await bothRoutes({ command: 'sh .claude/hooks/exit-code.sh 1' }, stopCtx());
    expect(settings).toMatchObject({ kind: 'error', message: 'exited with code 1: exiting 1' });
    expect(stopHooks).toEqual({
      kind: 'error',
      hookName: 'h',
      message: 'exited with code 1: exiting 1',
      output: 'exiting 1',
    });
  });

  it('continue:false halts with stopReason and overrides decision; systemMessage is kept; plain text allows', async () => {
    const halt = `echo '{"continue":false,"stopReason":"quota","decision":"block","reason":"x","systemMessage":"hi"}'`;
    const expected = { kind: 'halt', reason: 'quota', stop: true, systemMessage: 'hi' };
    expect(await bothRoutes({ command: halt }, stopCtx())).toEqual([expected, expected]);
    const note = `echo '{"systemMessage":"lint is slow","suppressOutput":true}'`;
    const allowed = { kind: 'allow', systemMessage: 'lint is slow' };
    expect(await bothRoutes({ command: note }, stopCtx())).toEqual([allowed, allowed]);
    expect(await bothRoutes({ command: 'echo all good; echo "{ not json"' }, stopCtx())).toEqual([
      { kind: 'allow' },
      { kind: 'allow' },
    ]);
  });

  it('default timeouts: 600 s on the Claude Code route, 60 s for [[stop_hooks]]; `timeout` is in seconds', () => {
    expect(viaSettings({ command: 'true' }).timeoutMs).toBe(CLAUDE_CODE_HOOK_TIMEOUT_MS);
    expect(CLAUDE_CODE_HOOK_TIMEOUT_MS).toBe(600_000);
    expect(viaSettings({ command: 'true', timeout: 30 }).timeoutMs).toBe(30_000);
    expect(viaStopHooks('true').timeoutMs).toBe(DEFAULT_HOOK_TIMEOUT_MS);
  });

  it('a `timeout` past the longest Node.js timer is clamped with a warning, never fired at once', async () => {
    // 2147484 s * 1000 overflows a 32-bit timer: unclamped, setTimeout fires after 1 ms and a
    // blocking hook "times out" (an error, so the stop is allowed). Clamped, the hook's verdict stands.
    for (const timeout of [2_147_484, 1e12, 1e308]) {
      const hook = viaSettings({ command: `sleep 0.2; echo "not yet" >&2; exit 2`, timeout });
      expect(hook.timeoutMs).toBe(2_147_483_000);
      expect(await hook.evaluate(stopCtx(), live())).toEqual({ kind: 'block', reason: 'not yet' });
    }
    const file = join(root, 'huge-timeout.json');
    writeFileSync(
      file,
      '{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"true","timeout":1e400}]}]}}',
    );
    expect(() => loadHooksFile(file)).toThrow(/timeout/); // Infinity (JSON 1e400) is not a number of seconds
    const found = discoverClaudeCodeHooks({
      projectDir: join(root, 'plain-project'),
      home: null,
      files: [writeSettings('clamped.json', 2_147_484)],
    });
    expect(found.warnings).toEqual([
      `${join(root, 'clamped.json')}#Stop[0].hooks[0]: timeout 2147484 s is longer than Node.js can wait; 2147483 s is used`,
    ]);
  });
});

describe('kill on timeout or cancel: the whole group is gone before the verdict returns', () => {
  it('a TERM-ignoring hook and its TERM-ignoring grandchild, on timeout (both routes)', async () => {
    for (const [index, make] of [
      (command: string) => viaSettings({ command, timeout: 3 }), // room to start both on a loaded machine
      (command: string) => viaStopHooks(command, 3),
    ].entries()) {
      const pids = join(root, `timeout-${index}.pids`);
      const verdict = await make(`sh .claude/hooks/term-ignorer.sh ${pids}`).evaluate(stopCtx(), live());
      expect(verdict).toMatchObject({
        kind: 'error',
        message: 'timed out after 3000 ms; its process group was killed',
      });
      expect(pidsIn(pids)).toHaveLength(2);
      expect(pidsIn(pids).filter(alive)).toEqual([]); // checked at once: no grace after the verdict
    }
  });

  it('when the sh -c wrapper exits first, its TERM-ignoring children still go before the verdict', async () => {
    const pids = join(root, 'wrapper.pids');
    const command =
      `sh .claude/hooks/term-ignorer.sh ${pids} & ` +
      `while [ "$(cat ${pids} 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.05; done; exit 0`;
    expect(await viaSettings({ command }).evaluate(stopCtx(), live())).toEqual({ kind: 'allow' });
    expect(pidsIn(pids).filter(alive)).toEqual([]);
  });

  it('on cancel', async () => {
    const pids = join(root, 'cancel.pids');
    const controller = new AbortController();
    const pending = viaSettings({ command: `sh .claude/hooks/term-ignorer.sh ${pids}` }).evaluate(
      stopCtx(),
      controller.signal,
    );
    while (readFileSafe(pids).split('\n').filter(Boolean).length < 2)
      await new Promise((r) => setTimeout(r, 20));
    controller.abort();
    expect(await pending).toMatchObject({
      kind: 'error',
      message: 'cancelled; its process group was killed',
    });
    expect(pidsIn(pids).filter(alive)).toEqual([]);
  });
});

function readFileSafe(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

describe('settings discovery like Claude Code', () => {
  it('reads ~/.claude/settings.json, .claude/settings.json, .claude/settings.local.json, named files and plugins; warns by name', () => {
    const found = discoverClaudeCodeHooks({ projectDir: project, home, plugins: [plugin] });
    expect(found.files).toEqual([
      join(home, '.claude', 'settings.json'),
      join(project, '.claude', 'settings.json'),
      join(project, '.claude', 'settings.local.json'),
      join(plugin, 'hooks', 'hooks.json'),
    ]);
    expect(found.hooks.filter((hook) => hook.event === 'Stop').map((hook) => hook.name)).toEqual([
      '~/.claude/settings.json#Stop[0].hooks[0]',
      '.claude/settings.json#Stop[0].hooks[0]',
      '.claude/settings.json#Stop[0].hooks[1]',
      '.claude/settings.json#Stop[0].hooks[2]',
      '.claude/settings.local.json#Stop[0].hooks[0]',
      `${join(plugin, 'hooks', 'hooks.json')}#Stop[0].hooks[0]`,
    ]);
    expect(found.warnings).toEqual([
      '.claude/settings.json#Stop[0].hooks[3]: type "prompt" hooks are not run by Aleph (only "command"); skipped',
      '.claude/settings.json: PermissionRequest hooks are not run by Aleph (it runs Stop, SubagentStop, PreToolUse, PostToolUse, PostToolUseFailure, SessionStart, UserPromptSubmit, PreCompact, Notification, SessionEnd)',
    ]);
  });

  it('user settings follow CLAUDE_CONFIG_DIR when it is set, as in Claude Code', () => {
    process.env['CLAUDE_CONFIG_DIR'] = join(home, '.claude');
    try {
      expect(discoverClaudeCodeHooks({ projectDir: project }).files[0]).toBe(
        join(home, '.claude', 'settings.json'),
      );
    } finally {
      delete process.env['CLAUDE_CONFIG_DIR'];
    }
  });

  it('a named hooks/hooks.json of a plugin gets CLAUDE_PLUGIN_ROOT; identical hooks run once', () => {
    const file = join(plugin, 'hooks', 'hooks.json');
    const found = discoverClaudeCodeHooks({
      projectDir: project,
      home: null,
      files: [file],
      plugins: [plugin],
    });
    const stop = found.hooks.filter((hook) => hook.event === 'Stop' && hook.pluginRoot !== undefined);
    expect(stop).toHaveLength(1);
    expect(stop[0]?.pluginRoot).toBe(plugin);
  });

  it('a named file that does not exist, or bad JSON, is an error naming it', () => {
    expect(() =>
      discoverClaudeCodeHooks({ projectDir: project, home: null, files: [join(root, 'nope.json')] }),
    ).toThrow(/nope\.json/);
    const bad = join(root, 'bad.json');
    writeFileSync(bad, '{"hooks": {"Stop": "no"}}');
    expect(() => discoverClaudeCodeHooks({ projectDir: project, home: null, files: [bad] })).toThrow(
      /bad\.json: hooks\.Stop/,
    );
  });

  it('the whole project through ExtensionStopHookVerifier: every hook in the project root, each outcome observed', async () => {
    const outcomes: HookOutcome[] = [];
    const verifier = new ExtensionStopHookVerifier({
      hooks: discoverClaudeCodeHooks({ projectDir: project, home, plugins: [plugin] }),
      onHookOutcome: (outcome) => outcomes.push(outcome),
    });
    const verdict = await verifier.verify(
      { ...stopCtx(), recentToolCalls: [], stopReason: 'end_turn' } as never,
      live(),
    );
    expect(verdict.kind).toBe('veto');
    if (verdict.kind !== 'veto') return;
    expect(verdict.feedback.split('\n\n')).toEqual([
      'No <promise>DONE</promise> yet; you last said: One test still fails.',
      'Run the test suite and report that the tests pass.',
      'args reached me',
      `plugin root ${plugin}; ran in ${project}`,
    ]);
    expect(verdict.reason).toMatch(
      /^stop hook ".claude\/settings.json#Stop\[0\]\.hooks\[0\]", .* blocked the stop \(1 in a row\): No <promise>/,
    );
    expect(outcomes.map((outcome) => [outcome.kind, outcome.systemMessage ?? outcome.exitCode])).toEqual(
      expect.arrayContaining([
        ['allow', 'user settings ran'],
        ['allow', 'local settings ran'],
        ['block', 2],
        ['block', 0],
      ]),
    );
    expect(outcomes).toHaveLength(6);
    expect(outcomes.every((outcome) => outcome.route === 'claude_code' && outcome.event === 'Stop')).toBe(
      true,
    );
  });

  it('SubagentStop hooks run for a spawn_agent run, told so on stdin', async () => {
    const verifier = new ExtensionStopHookVerifier({
      hooks: discoverClaudeCodeHooks({ projectDir: project, home: null }),
      event: 'SubagentStop',
    });
    const verdict = await verifier.verify({ ...stopCtx(), recentToolCalls: [] } as never, live());
    expect(verdict).toMatchObject({
      kind: 'veto',
      feedback: 'Run the test suite and report that the tests pass.',
    });
    const echo = viaSettings({ command: 'cat >&2; exit 2' });
    const said = await echo.evaluate(stopCtx({ event: 'SubagentStop' }), live());
    expect(said.kind === 'block' && JSON.parse(said.reason)).toMatchObject({
      session_id: 's1',
      transcript_path: join(project, 'transcripts', 'working.jsonl'),
      cwd: project,
      permission_mode: 'default',
      hook_event_name: 'SubagentStop',
      stop_hook_active: false,
      last_assistant_message: 'One test still fails.',
      agent_id: 's1',
    });
  });

  it("SubagentStop stdin: session_id/transcript_path are the parent's, agent_id/agent_transcript_path the sub-agent's", async () => {
    const file = join(root, 'subagent-echo.json');
    const echo = { hooks: [{ type: 'command', command: 'cat >&2; exit 2' }] };
    writeFileSync(file, JSON.stringify({ hooks: { SubagentStop: [echo] } }));
    const verifier = new ExtensionStopHookVerifier({
      hooks: discoverClaudeCodeHooks({ projectDir: root, home: null, files: [file] }),
      event: 'SubagentStop',
      parent: { sessionId: 'parent-1', transcriptPath: '/t/parent-1.jsonl' },
    });
    const child = {
      ...stopCtx({ sessionId: 'child-1', transcriptPath: '/t/child-1.jsonl' }),
      recentToolCalls: [],
    };
    const verdict = await verifier.verify(child as never, live());
    expect(verdict.kind === 'veto' && JSON.parse(verdict.feedback)).toMatchObject({
      hook_event_name: 'SubagentStop',
      session_id: 'parent-1',
      transcript_path: '/t/parent-1.jsonl',
      agent_id: 'child-1',
      agent_transcript_path: '/t/child-1.jsonl',
    });
  });
});

describe('what a hook sees and what the caller observes', () => {
  it('the environment: no stripped secret; CLAUDE_PROJECT_DIR; a wrap runs the command through the sandbox, told the transcript', async () => {
    process.env['ALEPH_TOKEN_TEST_SECRET'] = 'leak';
    try {
      const readable: (readonly string[] | undefined)[] = [];
      const wrap: CommandWrapper = (command) => {
        readable.push(command.readable);
        return {
          file: 'env',
          args: ['WRAPPED=yes', command.file, ...command.args],
          cwd: command.cwd,
          env: Object.fromEntries(
            Object.entries(command.env).filter((pair): pair is [string, string] => pair[1] !== undefined),
          ),
        };
      };
      const hook = buildStopHooksFromConfig(
        { stop_hooks: [{ name: 'env', command: 'env >&2; exit 2', sandbox: true }] },
        { cwd: project, stripEnv: ['ALEPH_TOKEN_TEST_SECRET'], wrap },
      )!.hooks[0]!;
      const verdict = await hook.evaluate(stopCtx(), live());
      const reason = verdict.kind === 'block' ? verdict.reason : '';
      expect(reason).not.toContain('ALEPH_TOKEN_TEST_SECRET');
      expect(reason).toContain(`CLAUDE_PROJECT_DIR=${project}`);
      expect(reason).toContain('WRAPPED=yes');
      // A sandbox hides the state dir: it is told which transcript the hook must still read.
      expect(readable).toEqual([[stopCtx().transcriptPath]]);
    } finally {
      delete process.env['ALEPH_TOKEN_TEST_SECRET'];
    }
  });

  it('the goal gate runs the model-set gate_command through wrap, fail-closed', async () => {
    const wrap: CommandWrapper = (command) => ({
      ...command,
      env: { ...(command.env as Record<string, string>), WRAPPED: '1' },
    });
    const outcomes: HookOutcome[] = [];
    const gates = effectiveGate(undefined, 'printenv WRAPPED', {
      cwd: project,
      wrap,
      onHookOutcome: (outcome) => outcomes.push(outcome),
    });
    expect(await gateVeto(gates, stopCtx(), live())).toEqual({ kind: 'continue' });
    const unwrapped = effectiveGate(undefined, 'printenv WRAPPED', { cwd: project });
    expect(await gateVeto(unwrapped, stopCtx(), live())).toMatchObject({ kind: 'veto' });
    expect(outcomes).toEqual([
      expect.objectContaining({ hook: "the goal's gate_command", route: 'gate', kind: 'allow', exitCode: 0 }),
    ]);
  });

  it('an exit-1 hook is observed: name, route, exit code, first lines of stderr', async () => {
    const outcomes: HookOutcome[] = [];
    await viaSettings({ command: 'printf "one\\ntwo\\n" >&2; exit 1' }, outcomes).evaluate(stopCtx(), live());
    expect(outcomes).toEqual([
      expect.objectContaining({
        hook: expect.stringContaining('#Stop[0].hooks[0]'),
        route: 'claude_code',
        event: 'Stop',
        kind: 'error',
        exitCode: 1,
        stderr: 'one\ntwo',
        message: 'exited with code 1: one\ntwo',
        sessionId: 's1',
      }),
    ]);
  });
});

describe('PreToolUse / PostToolUse with matchers on Aleph tool names', () => {
  const toolHooks = (outcomes?: HookOutcome[]) =>
    new ClaudeCodeToolHooks(discoverClaudeCodeHooks({ projectDir: project, home: null }), {
      projectDir: project,
      ...(outcomes ? { onHookOutcome: (outcome: HookOutcome) => outcomes.push(outcome) } : {}),
    });
  const call = (name: string, args: unknown) => ({ id: 'call-1', name, args });

  it('Bash → shell: exit 2 denies with stderr, permissionDecision deny/ask deny with the reason, updatedInput rewrites', async () => {
    const hooks = toolHooks();
    expect(await hooks.before(call('shell', { command: 'rm -rf /' }))).toEqual({
      kind: 'deny',
      reason: 'rm -rf is not allowed here',
    });
    expect(await hooks.before(call('shell', { command: 'sudo ls' }))).toEqual({
      kind: 'deny',
      reason: 'no sudo',
    });
    expect(await hooks.before(call('shell', { command: 'curl example.com' }))).toEqual({
      kind: 'deny',
      reason: expect.stringMatching(
        /asked for the user's confirmation, and no user is present to give it: network access$/,
      ),
    });
    expect(await hooks.before(call('shell', { command: 'npm test', timeout_secs: 5 }))).toEqual({
      kind: 'rewrite',
      args: { command: 'pnpm test', timeout_secs: 5 },
    });
    expect(await hooks.before(call('shell', { command: 'ls' }))).toEqual({ kind: 'allow' });
  });

  it('Edit|Write → edit_file / write_file, with file_path absolute; a tool no matcher names runs no hook', async () => {
    const outcomes: HookOutcome[] = [];
    const hooks = toolHooks(outcomes);
    expect(await hooks.before(call('write_file', { path: 'src/shared/a.ts', content: 'x' }))).toEqual({
      kind: 'deny',
      reason: `${join(project, 'src', 'shared', 'a.ts')} is frozen`,
    });
    expect(
      await hooks.before(call('edit_file', { path: 'src/app.ts', old_string: 'a', new_string: 'b' })),
    ).toEqual({
      kind: 'allow',
    });
    expect(outcomes.map((outcome) => [outcome.event, outcome.tool, outcome.kind])).toEqual([
      ['PreToolUse', 'write_file', 'deny'],
      ['PreToolUse', 'edit_file', 'allow'],
    ]);
    expect(await hooks.before(call('read_file', { path: 'a' }))).toEqual({ kind: 'allow' });
    expect(outcomes).toHaveLength(2);
  });

  it('PostToolUse: exit 2 → stderr as feedback; additionalContext → feedback; no match → nothing', async () => {
    const hooks = toolHooks();
    const result = { output: 'wrote 1 bytes' };
    expect(await hooks.after(call('write_file', { path: 'x.py', content: '' }), result)).toEqual({
      feedback: `lint: ${join(project, 'x.py')} has no type hints`,
    });
    expect(await hooks.after(call('write_file', { path: 'a.md', content: '' }), result)).toEqual({
      feedback: `wrote ${join(project, 'a.md')}`,
    });
    expect(await hooks.after(call('shell', { command: 'ls' }), result)).toBeUndefined();
  });

  it("matchers: exact names and A|B, a regex, '*' and empty for all; either the Claude Code or the Aleph name", () => {
    expect(matcherMatches('Bash', ['Bash', 'shell'])).toBe(true);
    expect(matcherMatches('shell', ['Bash', 'shell'])).toBe(true);
    expect(matcherMatches('Edit|Write', ['Write', 'write_file'])).toBe(true);
    expect(matcherMatches('Edit', ['MultiEdit'])).toBe(false);
    expect(matcherMatches('Notebook.*', ['NotebookEdit'])).toBe(true);
    expect(matcherMatches('*', ['Read'])).toBe(true);
    expect(matcherMatches('', ['Read'])).toBe(true);
    expect(matcherMatches(undefined, ['Read'])).toBe(true);
    expect(matcherMatches('(', ['Read'])).toBe(false);
  });
});

/** A project with no hooks of its own, and the security-guidance stand-in plugin. */
function securityHooks(outcomes: HookOutcome[]): ClaudeCodeToolHooks {
  const projectDir = join(root, 'plain-project');
  const plugins = [join(root, 'security-plugin')];
  return new ClaudeCodeToolHooks(discoverClaudeCodeHooks({ projectDir, home: null, plugins }), {
    projectDir,
    onHookOutcome: (outcome) => outcomes.push(outcome),
  });
}

describe('${CLAUDE_…} placeholders are replaced in the command text, as Claude Code does', () => {
  it("a plugin that single-quotes '${CLAUDE_PLUGIN_ROOT}' (security-guidance's hooks.json) runs its script", async () => {
    const outcomes: HookOutcome[] = [];
    const hooks = securityHooks(outcomes);
    const write = (content: string) => ({ id: 'w', name: 'write_file', args: { path: 'ok.txt', content } });
    expect(await hooks.before(write('plain text'))).toEqual({ kind: 'allow' });
    expect(outcomes.map((outcome) => [outcome.kind, outcome.exitCode])).toEqual([['allow', 0]]);
    expect(await hooks.before(write('eval(input)'))).toEqual({
      kind: 'deny',
      reason: 'Security Warning: eval() executes arbitrary code.',
    });
  });

  it("PreToolUse additionalContext reaches the model: the call's feedback in after(), or with a deny reason", async () => {
    const outcomes: HookOutcome[] = [];
    const hooks = securityHooks(outcomes);
    const reminder = 'Security Warning: innerHTML with untrusted content can lead to XSS.';
    const call = { id: 'c7', name: 'write_file', args: { path: 'x.js', content: 'el.innerHTML = x;' } };
    expect(await hooks.before(call)).toEqual({ kind: 'allow' });
    expect(outcomes.at(-1)).toMatchObject({ event: 'PreToolUse', kind: 'feedback', message: reminder });
    expect(await hooks.after(call, { output: 'wrote 17 bytes to x.js' })).toEqual({ feedback: reminder });
    expect(await hooks.after(call, { output: 'again' })).toBeUndefined(); // given once
    const file = join(root, 'deny-with-context.json');
    const json = {
      hookSpecificOutput: {
        hookEventName: 'PreToolUse',
        permissionDecision: 'deny',
        permissionDecisionReason: 'not here',
        additionalContext: 'write under build/ instead',
      },
    };
    const command = `echo '${JSON.stringify(json)}'`;
    writeFileSync(
      file,
      JSON.stringify({ hooks: { PreToolUse: [{ hooks: [{ type: 'command', command }] }] } }),
    );
    const denying = new ClaudeCodeToolHooks(
      discoverClaudeCodeHooks({ projectDir: project, home: null, files: [file] }).hooks.filter((hook) =>
        hook.name.startsWith(file),
      ),
      { projectDir: project },
    );
    expect(await denying.before({ ...call, args: { path: 'y.txt', content: '' } })).toEqual({
      kind: 'deny',
      reason: 'not here\n\nwrite under build/ instead',
    });
  });

  it("'${CLAUDE_PROJECT_DIR}' in a settings command and in [[stop_hooks]]; a bare $CLAUDE_PROJECT_DIR is the shell's", async () => {
    const command = "sh '${CLAUDE_PROJECT_DIR}/.claude/hooks/exit-code.sh' 2";
    const block = { kind: 'block', reason: 'exiting 2' };
    expect(await viaSettings({ command }).evaluate(stopCtx(), live())).toEqual(block);
    expect(await viaStopHooks(command).evaluate(stopCtx(), live())).toEqual(block);
    const bare = viaSettings({ command: 'echo \'$CLAUDE_PROJECT_DIR\' "$CLAUDE_PROJECT_DIR" >&2; exit 2' });
    expect(await bare.evaluate(stopCtx(), live())).toEqual({
      kind: 'block',
      reason: `$CLAUDE_PROJECT_DIR ${project}`,
    });
  });
});
