// One command hook run, as Claude Code runs it: in the project root, `CLAUDE_PROJECT_DIR` (and
// `CLAUDE_PLUGIN_ROOT` for a plugin's hook) set, the event as JSON on stdin. `${CLAUDE_…}` reaches the
// command even single-quoted (a plugin's habit), never as shell text; a `command` alone goes through
// `sh -c`, with `args` it is executed directly. The server's secrets (`stripEnv`) never reach it; `wrap` sandboxes it.
import { firstLines } from '../hook-outcome.js';
import { runProcess, type CommandWrapper, type ProcessOutcome } from './run-process.js';

export interface CommandHookSpec {
  readonly command: string;
  /** Arguments for `command`, executed without a shell (`${CLAUDE_PLUGIN_ROOT}` substituted). */
  readonly args?: readonly string[] | undefined;
  readonly timeoutMs: number;
  /** Where it runs; the run's project root when absent. */
  readonly cwd?: string | undefined;
  readonly env?: Readonly<Record<string, string>> | undefined;
  /** Environment variables removed from the child's environment (e.g. `ALEPH_TOKEN`, the API key). */
  readonly stripEnv?: readonly string[] | undefined;
  readonly wrap?: CommandWrapper | undefined;
  /** A plugin hook's plugin folder: `CLAUDE_PLUGIN_ROOT`. */
  readonly pluginRoot?: string | undefined;
  /** A hook of Claude Code's settings: `CLAUDECODE=1` and `CLAUDE_CODE_SESSION_ID` (stdin's `session_id`). */
  readonly claudeCode?: boolean | undefined;
}

export interface CommandHookRun {
  readonly outcome: ProcessOutcome;
  readonly durationMs: number;
}

/** `${CLAUDE_…}` and `$CLAUDE_…` replaced by their values: the `args` form, where no shell reads them. */
function substitute(value: string, variables: Readonly<Record<string, string>>): string {
  return value.replace(/\$\{(\w+)\}|\$(\w+)/g, (whole, braced?: string, plain?: string) => {
    const name = braced ?? plain ?? '';
    return name.startsWith('CLAUDE_') && variables[name] !== undefined ? variables[name] : whole;
  });
}

/**
 * The shell form: `${CLAUDE_…}` reaches the script whatever quotes it sits in (a plugin writes
 * `'${CLAUDE_PLUGIN_ROOT}/x.py'`), and the value is never parsed as shell text (a project dir named
 * `it's $(…)` stays a name). The shell expands it from the environment outside single quotes; inside
 * them it becomes `'"${CLAUDE_…}"'`: close the quote, expand, reopen.
 */
function substituteInShell(command: string, variables: Readonly<Record<string, string>>): string {
  let out = '';
  let quote: "'" | '"' | undefined;
  for (let index = 0; index < command.length; index += 1) {
    const char = command[index]!;
    if (quote === "'") {
      const placeholder = /^\$\{(CLAUDE_\w+)\}/.exec(command.slice(index, index + 64));
      if (placeholder !== null && variables[placeholder[1]!] !== undefined) {
        out += `'"\${${placeholder[1]}}"'`;
        index += placeholder[0].length - 1;
        continue;
      }
      if (char === "'") quote = undefined;
    } else if (char === '\\') {
      out += char + (command[index + 1] ?? '');
      index += 1;
      continue;
    } else if (char === quote) quote = undefined;
    else if (quote === undefined && (char === "'" || char === '"')) quote = char;
    out += char;
  }
  return out;
}

export async function runCommandHook(
  spec: CommandHookSpec,
  input: Readonly<Record<string, unknown>>,
  projectDir: string | undefined,
  signal: AbortSignal,
): Promise<CommandHookRun> {
  const cwd = spec.cwd ?? projectDir ?? process.cwd();
  const claude: Record<string, string> = { CLAUDE_PROJECT_DIR: projectDir ?? cwd };
  if (spec.pluginRoot !== undefined) claude['CLAUDE_PLUGIN_ROOT'] = spec.pluginRoot;
  if (spec.claudeCode === true) {
    claude['CLAUDECODE'] = '1';
    claude['CLAUDE_CODE_SESSION_ID'] = typeof input['session_id'] === 'string' ? input['session_id'] : '';
  }
  const env: Record<string, string | undefined> = { ...process.env, ...spec.env };
  for (const name of spec.stripEnv ?? []) delete env[name];
  Object.assign(env, claude, { PWD: cwd }); // not the server's own PWD
  // A sandbox hides the state dir; the transcripts a hook is told of stay readable.
  const readable = [input['transcript_path'], input['agent_transcript_path']].filter(
    (path): path is string => typeof path === 'string',
  );
  const started = Date.now();
  const outcome = await runProcess({
    command:
      spec.args === undefined
        ? { file: 'sh', args: ['-c', substituteInShell(spec.command, claude)], cwd, env, readable }
        : {
            file: substitute(spec.command, claude),
            args: spec.args.map((arg) => substitute(arg, claude)),
            cwd,
            env,
            readable,
          },
    stdin: JSON.stringify(input),
    timeoutMs: spec.timeoutMs,
    signal,
    wrap: spec.wrap,
  });
  return { outcome, durationMs: Date.now() - started };
}

/** The words for an outcome that is neither a clean exit 0 nor a 2, as a non-blocking error says it. */
export function describeFailure(outcome: ProcessOutcome, timeoutMs: number): string {
  switch (outcome.kind) {
    case 'exited':
      return (
        `exited with code ${outcome.code}${outcome.code === 127 ? ' (command not found)' : ''}` +
        (outcome.stderr.trim() ? `: ${outcome.stderr.trim().slice(0, 500)}` : '')
      );
    case 'signaled':
      return `killed by signal ${outcome.signal}`;
    case 'timed_out':
      return `timed out after ${timeoutMs} ms; its process group was killed`;
    case 'aborted':
      return 'cancelled; its process group was killed';
    case 'spawn_failed':
      return `could not be started: ${outcome.message}`;
    default: {
      const unreachable: never = outcome;
      return unreachable;
    }
  }
}

/** The facts of a run a HookOutcome carries: exit code or signal, the first lines of stderr. */
export function processFacts(outcome: ProcessOutcome | undefined): {
  exitCode?: number;
  signal?: string;
  stderr?: string;
} {
  if (outcome === undefined || (outcome.kind !== 'exited' && outcome.kind !== 'signaled')) return {};
  const stderr = outcome.stderr.trim() === '' ? {} : { stderr: firstLines(outcome.stderr) };
  return outcome.kind === 'exited'
    ? { exitCode: outcome.code, ...stderr }
    : { signal: outcome.signal, ...stderr };
}
