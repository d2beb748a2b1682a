// A project or plugin directory's name is a name, never shell text: `${CLAUDE_PROJECT_DIR}` and
// `${CLAUDE_PLUGIN_ROOT}` reach a shell-form hook in any quotes (a plugin single-quotes them), and a
// directory called `it's $(touch PWNED) "q"` neither runs a command nor breaks the hook.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { runCommandHook } from './internal/command-hook.js';

const root = mkdtempSync(join(tmpdir(), 'aleph-hook-quoting-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

const awkward = ['it\'s $(touch PWNED) "q" `touch TICKED` $HOME', 'plain', 'a b\\c'];

it.each(awkward)(
  'a hook in a project dir named %j runs, in every quoting, and runs nothing else',
  async (name) => {
    const project = join(root, name);
    const plugin = join(project, 'plugin root');
    mkdirSync(join(project, '.claude', 'hooks'), { recursive: true });
    mkdirSync(plugin, { recursive: true });
    for (const dir of [join(project, '.claude', 'hooks'), plugin]) {
      writeFileSync(join(dir, 'x.sh'), '#!/bin/sh\nprintf \'ran %s with [%s]\\n\' "$0" "$1"\n');
      chmodSync(join(dir, 'x.sh'), 0o755);
    }
    const commands = [
      '"${CLAUDE_PROJECT_DIR}/.claude/hooks/x.sh" one',
      "'${CLAUDE_PROJECT_DIR}/.claude/hooks/x.sh' 'two'",
      '"$CLAUDE_PROJECT_DIR"/.claude/hooks/x.sh three',
      "'${CLAUDE_PLUGIN_ROOT}/x.sh' \"fo'ur\"",
      "sh -c 'exec \"$0\" five' '${CLAUDE_PLUGIN_ROOT}/x.sh'",
    ];
    const ran: string[] = [];
    for (const command of commands) {
      const { outcome } = await runCommandHook(
        { command, timeoutMs: 10_000, pluginRoot: plugin },
        { hook_event_name: 'Stop' },
        project,
        new AbortController().signal,
      );
      expect(outcome).toMatchObject({ kind: 'exited', code: 0 });
      ran.push((outcome as { stdout: string }).stdout.trim());
    }
    expect(ran).toEqual([
      `ran ${project}/.claude/hooks/x.sh with [one]`,
      `ran ${project}/.claude/hooks/x.sh with [two]`,
      `ran ${project}/.claude/hooks/x.sh with [three]`,
      `ran ${plugin}/x.sh with [fo'ur]`,
      `ran ${plugin}/x.sh with [five]`,
    ]);
    expect(existsSync(join(project, 'PWNED'))).toBe(false);
    expect(existsSync(join(project, 'TICKED'))).toBe(false);
  },
);

it("a bare '$CLAUDE_PROJECT_DIR' in single quotes stays literal, as sh has it", async () => {
  const { outcome } = await runCommandHook(
    { command: 'echo \'$CLAUDE_PROJECT_DIR\' "$CLAUDE_PROJECT_DIR"', timeoutMs: 10_000 },
    {},
    root,
    new AbortController().signal,
  );
  expect(outcome).toMatchObject({ kind: 'exited', code: 0, stdout: `$CLAUDE_PROJECT_DIR ${root}\n` });
});
