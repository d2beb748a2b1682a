// Claude Code hooks in a real server run: `.claude/settings.json` in the run's project root is
// found, a PreToolUse hook denies a write, a Stop hook sees Claude Code's stdin (transcript_path,
// cwd, CLAUDE_PROJECT_DIR), a Stop hook that exits 1 is not silent, and every hook run is an
// agent.hook event.
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
import { connectGateway, type GatewayClient } from '@aleph/gateway/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFakeLlm, writeCatStop, type FakeLlm } from '../test/fake-llm.js';
import { CLI, runToExit, startServerProcess, type ServerProcess } from '../test/server-process.js';
import { loadConfig } from './config.js';

let llm: FakeLlm;
let work: string;
let server: ServerProcess | undefined;
let client: GatewayClient | undefined;

beforeAll(async () => {
  llm = await startFakeLlm(writeCatStop);
  work = realpathSync(mkdtempSync(join(tmpdir(), 'aleph-hooks-e2e-')));
});
afterAll(async () => {
  await client?.close();
  await server?.stop();
  if (server) rmSync(server.stateDir, { recursive: true, force: true });
  await llm.close();
  rmSync(work, { recursive: true, force: true });
});

describe('Claude Code hooks in a server run', () => {
  it('finds .claude/settings.json in the project root; deny, stdin, exit 1 and outcomes as Claude Code gives them', async () => {
    const project = join(work, 'project');
    mkdirSync(join(project, '.claude'), { recursive: true });
    const settings = {
      hooks: {
        PreToolUse: [
          {
            matcher: 'Write',
            hooks: [
              {
                type: 'command',
                command: `jq -r .tool_input.file_path | grep -q frozen && { echo "frozen files stay as they are" >&2; exit 2; }; exit 0`,
              },
            ],
          },
        ],
        Stop: [
          {
            hooks: [
              { type: 'command', command: 'cat > "$CLAUDE_PROJECT_DIR/stop-stdin.json"' },
              { type: 'command', command: 'echo "3 tests failed" >&2; exit 1' },
            ],
          },
        ],
      },
    };
    writeFileSync(join(project, '.claude', 'settings.json'), JSON.stringify(settings));
    const emptyConfigDir = join(work, 'claude-config');
    mkdirSync(emptyConfigDir);
    server = await startServerProcess(
      `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\nmax_iterations = 12\n\n[power]\ninhibit_sleep = false\n`,
      { CLAUDE_CONFIG_DIR: emptyConfigDir },
    );
    client = await connectGateway(server.url, { token: server.token });
    await client.subscribe(['agent.*']);
    const hooks: Record<string, any>[] = [];
    const tools: Record<string, any>[] = [];
    let done: Record<string, any> | undefined;
    client.onEvent((topic, params) => {
      const event = params as Record<string, any>;
      if (topic === 'agent.hook') hooks.push(event);
      if (topic === 'agent.tool') tools.push(event);
      if (topic === 'agent.done') done = event;
    });
    const { runId, sessionId } = await client.request<{ runId: string; sessionId: string }>('agent.run', {
      prompt: 'create the file frozen.txt',
      cwd: project,
    });
    await expect.poll(() => done, { timeout: 30_000 }).toBeDefined();

    expect(existsSync(join(project, 'frozen.txt'))).toBe(false);
    expect(tools[0]).toMatchObject({
      name: 'write_file',
      ok: false,
      output: expect.stringContaining('frozen files stay'),
    });
    expect(hooks).toEqual(
      expect.arrayContaining([
        expect.objectContaining({
          runId,
          hook: '.claude/settings.json#PreToolUse[0].hooks[0]',
          route: 'claude_code',
          event: 'PreToolUse',
          tool: 'write_file',
          kind: 'deny',
          exitCode: 2,
        }),
        expect.objectContaining({
          runId,
          hook: '.claude/settings.json#Stop[0].hooks[1]',
          event: 'Stop',
          kind: 'error',
          exitCode: 1,
          stderr: '3 tests failed',
        }),
      ]),
    );
    const stdin = JSON.parse(readFileSync(join(project, 'stop-stdin.json'), 'utf8'));
    expect(stdin).toMatchObject({
      session_id: sessionId,
      cwd: project,
      hook_event_name: 'Stop',
      stop_hook_active: false,
      last_assistant_message: expect.stringContaining('VERDICT'),
    });
    expect(typeof stdin.permission_mode).toBe('string');
    // The transcript Claude Code hooks read: JSONL with the assistant's text blocks.
    const transcript = readFileSync(stdin.transcript_path, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line));
    expect(transcript.some((line) => line.type === 'assistant' && line.message.role === 'assistant')).toBe(
      true,
    );
  });

  it('a spawn_agent run gets SubagentStop hooks (told so on stdin), the parent run Stop hooks', async () => {
    const brain = startFakeLlm((conversation) => {
      const task = conversation.find((turn) => turn.role === 'user')?.text ?? '';
      if (task.startsWith('CHILD')) return { text: 'child done' };
      return conversation.at(-1)?.role === 'tool'
        ? { text: 'parent done' }
        : { call: { name: 'spawn_agent', args: { prompt: 'CHILD: say done' } } };
    });
    const llm2 = await brain;
    const project = join(work, 'subagent-project');
    mkdirSync(join(project, '.claude'), { recursive: true });
    const record = (event: string) => ({
      hooks: [
        {
          type: 'command',
          command: `cat >> "$CLAUDE_PROJECT_DIR/${event}.jsonl"; echo >> "$CLAUDE_PROJECT_DIR/${event}.jsonl"`,
        },
      ],
    });
    writeFileSync(
      join(project, '.claude', 'settings.json'),
      JSON.stringify({ hooks: { Stop: [record('stop')], SubagentStop: [record('subagent-stop')] } }),
    );
    try {
      // The same recorder as a `[[stop_hooks]]` entry: it gets SubagentStop for the child too.
      const record2 = 'cat >> stop-hooks.jsonl; echo >> stop-hooks.jsonl';
      const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm2.baseUrl}"\n\n[power]\ninhibit_sleep = false\n\n[[stop_hooks]]\nname = "record"\ncommand = "${record2}"\n`;
      const child = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'claude-config') });
      const sub = await connectGateway(child.url, { token: child.token });
      try {
        await sub.subscribe(['agent.*']);
        let done: Record<string, any> | undefined;
        sub.onEvent((topic, params) => topic === 'agent.done' && (done = params as Record<string, any>));
        const run = await sub.request<{ sessionId: string }>('agent.run', {
          prompt: 'delegate',
          cwd: project,
        });
        await expect.poll(() => done, { timeout: 30_000 }).toBeDefined();
        const lines = (file: string) =>
          readFileSync(join(project, file), 'utf8')
            .split('\n')
            .filter(Boolean)
            .map((line) => JSON.parse(line));
        expect(lines('subagent-stop.jsonl')).toEqual([
          expect.objectContaining({ hook_event_name: 'SubagentStop', last_assistant_message: 'child done' }),
        ]);
        expect(lines('stop.jsonl')).toEqual([
          expect.objectContaining({ hook_event_name: 'Stop', last_assistant_message: 'parent done' }),
        ]);
        // As in Claude Code: SubagentStop's session_id/transcript_path are the parent's, agent_* the child's.
        const [parent, child] = [lines('stop.jsonl')[0], lines('subagent-stop.jsonl')[0]];
        expect(parent.session_id).toBe(run.sessionId);
        expect(child).toMatchObject({ session_id: run.sessionId, transcript_path: parent.transcript_path });
        expect(child.agent_id).toMatch(/./);
        expect(child.agent_id).not.toBe(run.sessionId);
        expect(child.agent_transcript_path).toMatch(/./);
        expect(child.agent_transcript_path).not.toBe(parent.transcript_path);
        // `[[stop_hooks]]`: the same events and sessions as the Claude Code route (was Stop, the child's own).
        const own = lines('stop-hooks.jsonl').map((line) => [line.hook_event_name, line.session_id]);
        expect(own.sort()).toEqual([
          ['Stop', run.sessionId],
          ['SubagentStop', run.sessionId],
        ]);
      } finally {
        await sub.close();
        await child.stop();
        rmSync(child.stateDir, { recursive: true, force: true });
      }
    } finally {
      await llm2.close();
    }
  });

  it("a plugin's single-quoted '${CLAUDE_PLUGIN_ROOT}' command runs, and its PreToolUse additionalContext reaches the model", async () => {
    // The shape of Anthropic's security-guidance plugin: its hooks.json command, a stand-in script.
    const plugin = join(work, 'security-guidance');
    mkdirSync(join(plugin, '.claude-plugin'), { recursive: true });
    mkdirSync(join(plugin, 'hooks'));
    writeFileSync(join(plugin, '.claude-plugin', 'plugin.json'), '{"name": "security-guidance"}');
    const command = "python3 '${CLAUDE_PLUGIN_ROOT}/hooks/security_reminder_hook.py'";
    const group = { matcher: 'Edit|Write|MultiEdit', hooks: [{ type: 'command', command }] };
    writeFileSync(join(plugin, 'hooks', 'hooks.json'), JSON.stringify({ hooks: { PreToolUse: [group] } }));
    const reminder = 'Security Warning: innerHTML with untrusted content can lead to XSS.';
    writeFileSync(
      join(plugin, 'hooks', 'security_reminder_hook.py'),
      `import json, sys\nevent = json.load(sys.stdin)\nif ".innerHTML =" in event["tool_input"].get("content", ""):\n    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "additionalContext": ${JSON.stringify(reminder)}}}))\n`,
    );
    const project = join(work, 'plugin-project');
    mkdirSync(project);
    const llm3 = await startFakeLlm((conversation) => {
      const last = conversation.at(-1);
      if (last?.role === 'user' && conversation.some((turn) => turn.role === 'tool'))
        return { text: `Noted: ${last.text}\nVERDICT: PASS` };
      if (last?.role === 'tool') return { text: 'Wrote it.\nVERDICT: PASS' };
      return { call: { name: 'write_file', args: { path: 'x.js', content: 'el.innerHTML = x;\n' } } };
    });
    const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm3.baseUrl}"\n\n[hooks]\nfiles = ["${join(plugin, 'hooks', 'hooks.json')}"]\n\n[power]\ninhibit_sleep = false\n`;
    const child = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'claude-config') });
    const sub = await connectGateway(child.url, { token: child.token });
    try {
      await sub.subscribe(['agent.*']);
      const hooks: Record<string, any>[] = [];
      let done: Record<string, any> | undefined;
      sub.onEvent((topic, params) => {
        if (topic === 'agent.hook') hooks.push(params as Record<string, any>);
        if (topic === 'agent.done') done = params as Record<string, any>;
      });
      await sub.request('agent.run', { prompt: 'write x.js', cwd: project });
      await expect.poll(() => done, { timeout: 30_000 }).toBeDefined();
      expect(readFileSync(join(project, 'x.js'), 'utf8')).toBe('el.innerHTML = x;\n');
      expect(hooks).toEqual([
        expect.objectContaining({ event: 'PreToolUse', tool: 'write_file', kind: 'feedback', exitCode: 0 }),
      ]);
      const seen = JSON.stringify(llm3.requests.at(-1)?.body.messages);
      expect(seen).toContain(reminder);
    } finally {
      await sub.close();
      await child.stop();
      rmSync(child.stateDir, { recursive: true, force: true });
      await llm3.close();
    }
  });

  it('a PreToolUse "continue": false stops the run: the call is not run, `aleph run` prints stopReason, the model never sees it', async () => {
    const project = join(work, 'kill-switch-project');
    mkdirSync(join(project, '.claude', 'hooks'), { recursive: true });
    writeFileSync(join(project, 'deploy.sh'), '#!/bin/sh\ntouch deployed\n', { mode: 0o755 });
    // A kill switch as Claude Code's docs write one: JSON on stdout, exit 0.
    writeFileSync(
      join(project, '.claude', 'hooks', 'freeze.sh'),
      `#!/bin/sh\njq -r .tool_input.command | grep -q deploy || exit 0\necho '{"continue": false, "stopReason": "Deploys are frozen until Monday"}'\n`,
      { mode: 0o755 },
    );
    const settings = {
      hooks: {
        PreToolUse: [
          {
            matcher: 'Bash',
            hooks: [{ type: 'command', command: '"$CLAUDE_PROJECT_DIR"/.claude/hooks/freeze.sh' }],
          },
        ],
      },
    };
    writeFileSync(join(project, '.claude', 'settings.json'), JSON.stringify(settings));
    const llm4 = await startFakeLlm((conversation) =>
      conversation.some((turn) => turn.role === 'tool')
        ? { call: { name: 'shell', args: { command: './deploy.sh' } } }
        : { call: { name: 'shell', args: { command: 'echo checked > checked.txt' } } },
    );
    const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm4.baseUrl}"\nmax_iterations = 6\n\n[power]\ninhibit_sleep = false\n`;
    const child = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'claude-config') });
    try {
      const result = await runToExit([CLI, 'run', 'check, then deploy', '--cwd', project], {
        ALEPH_URL: child.url,
        ALEPH_TOKEN: child.token,
      });
      if (process.env['ALEPH_PRINT_TRANSCRIPT']) console.log(result.stdout);
      expect(existsSync(join(project, 'checked.txt'))).toBe(true);
      expect(existsSync(join(project, 'deployed'))).toBe(false); // the stopped call never ran
      expect(result.stdout).toMatch(
        /⚑ PreToolUse hook "\.claude\/settings\.json#PreToolUse\[0\]\.hooks\[0\]" \(shell\) halted the run.*: Deploys are frozen until Monday/,
      );
      expect(result.stdout).toMatch(
        /ended: halted by PreToolUse hook: Deploys are frozen until Monday \(2 turns, /,
      );
      expect(result.code).toBe(1);
      // No Think after the stop, and the stop reason is for the user only.
      expect(llm4.requests).toHaveLength(2);
      expect(JSON.stringify(llm4.requests.map((request) => request.body))).not.toContain('frozen');
    } finally {
      await child.stop();
      rmSync(child.stateDir, { recursive: true, force: true });
      await llm4.close();
    }
  });

  it("a hook that will not run as written (a typo'd event, an event Aleph does not run, onFailure) is a ⚠ line of `aleph run`, naming the file", async () => {
    const project = join(work, 'warnings-project');
    mkdirSync(join(project, '.claude'), { recursive: true });
    const hook = (command: string, extra: object = {}) => [
      { hooks: [{ type: 'command', command, ...extra }] },
    ];
    const settings = {
      hooks: {
        PreToolUSe: hook('exit 2'),
        PermissionRequest: hook('echo hi'),
        Stop: hook('exit 0', { onFailure: 'block' }),
      },
    };
    writeFileSync(join(project, '.claude', 'settings.local.json'), JSON.stringify(settings));
    const config = `[gateway]\nport = 0\n\n[agent]\nprovider = "openai-compatible"\nmodel = "fake-coder"\nbase_url = "${llm.baseUrl}"\nmax_iterations = 6\n\n[power]\ninhibit_sleep = false\n`;
    const child = await startServerProcess(config, { CLAUDE_CONFIG_DIR: join(work, 'claude-config') });
    try {
      const result = await runToExit([CLI, 'run', 'create the file w.txt', '--cwd', project], {
        ALEPH_URL: child.url,
        ALEPH_TOKEN: child.token,
      });
      if (process.env['ALEPH_PRINT_TRANSCRIPT']) console.log(result.stdout);
      expect(result.code).toBe(0);
      const warnings = result.stdout.split('\n').filter((line) => line.startsWith('  ⚠ '));
      expect(warnings).toEqual([
        expect.stringMatching(
          /^ {2}⚠ \.claude\/settings\.local\.json: PreToolUSe hooks are not run by Aleph \(it runs .*PreToolUse/,
        ),
        expect.stringMatching(
          /^ {2}⚠ \.claude\/settings\.local\.json: PermissionRequest hooks are not run by Aleph/,
        ),
        expect.stringMatching(
          /^ {2}⚠ \.claude\/settings\.local\.json#Stop\[0\]\.hooks\[0\]: "onFailure" is not read by Aleph/,
        ),
      ]);
      // Said before the first turn, once.
      expect(result.stdout.indexOf('⚠')).toBeLessThan(result.stdout.indexOf('turn 1'));
    } finally {
      await child.stop();
      rmSync(child.stateDir, { recursive: true, force: true });
    }
  });

  it("resolves [hooks] files from the config file's folder, not from where the server started", () => {
    const folder = join(work, 'config-folder');
    mkdirSync(folder);
    writeFileSync(join(folder, 'aleph.toml'), '[hooks]\nfiles = ["hooks/extra.json", "/abs/x.json"]\n');
    const { config } = loadConfig({ path: join(folder, 'aleph.toml'), cwd: work });
    expect(config.hooks.files).toEqual([join(folder, 'hooks', 'extra.json'), '/abs/x.json']);
  });
});
