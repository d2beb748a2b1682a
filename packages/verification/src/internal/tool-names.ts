// Aleph's tools under Claude Code's names and input shapes, so a PreToolUse/PostToolUse matcher
// written for Claude Code (`Bash`, `Edit|Write`) matches, and `tool_input.command` /
// `tool_input.file_path` (absolute, as Claude Code gives it) read as hooks expect. A tool with no
// Claude Code equivalent keeps its own name and arguments.
import { isAbsolute, relative, resolve } from 'node:path';

type Fields = Record<string, unknown>;

interface ToolMapping {
  readonly claude: string;
  toClaude(args: Fields, projectDir: string): Fields;
  fromClaude(input: Fields, projectDir: string): Fields;
}

const absolute = (projectDir: string, path: unknown): unknown =>
  typeof path === 'string' && !isAbsolute(path) ? resolve(projectDir, path) : path;

/** Back to a project-relative path when it lies inside the project; otherwise as given. */
const projectRelative = (projectDir: string, path: unknown): unknown => {
  if (typeof path !== 'string' || !isAbsolute(path)) return path;
  const inside = relative(projectDir, path);
  return inside.startsWith('..') || isAbsolute(inside) ? path : inside === '' ? '.' : inside;
};

const defined = (fields: Fields): Fields =>
  Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));

/** A file tool: Aleph's `path` is Claude Code's absolute `file_path`; the other fields keep their names. */
const fileTool = (claude: string, keys: readonly string[]): ToolMapping => ({
  claude,
  toClaude: ({ path, ...rest }, projectDir) => defined({ file_path: absolute(projectDir, path), ...rest }),
  fromClaude: (input, projectDir) =>
    defined({
      path: projectRelative(projectDir, input['file_path']),
      ...Object.fromEntries(keys.map((key) => [key, input[key]])),
    }),
});

const MAPPINGS: Readonly<Record<string, ToolMapping>> = {
  shell: {
    claude: 'Bash',
    toClaude: ({ command, timeout_secs }) =>
      defined({ command, timeout: typeof timeout_secs === 'number' ? timeout_secs * 1000 : undefined }),
    fromClaude: ({ command, timeout }) =>
      defined({ command, timeout_secs: typeof timeout === 'number' ? timeout / 1000 : undefined }),
  },
  read_file: fileTool('Read', []),
  write_file: fileTool('Write', ['content']),
  edit_file: fileTool('Edit', ['old_string', 'new_string']),
  list_files: {
    claude: 'LS',
    toClaude: ({ path }, projectDir) => ({ path: absolute(projectDir, path ?? '.') }),
    fromClaude: ({ path }, projectDir) => defined({ path: projectRelative(projectDir, path) }),
  },
  spawn_agent: {
    claude: 'Task',
    toClaude: ({ prompt }) => ({ prompt }),
    fromClaude: ({ prompt }) => ({ prompt }),
  },
};

const fields = (value: unknown): Fields =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Fields) : {};

/** Claude Code's name for an Aleph tool (`shell` → `Bash`), or the tool's own name. */
export function claudeToolName(alephName: string): string {
  return MAPPINGS[alephName]?.claude ?? alephName;
}

export function toClaudeInput(alephName: string, args: unknown, projectDir: string): unknown {
  const mapping = MAPPINGS[alephName];
  return mapping === undefined ? args : mapping.toClaude(fields(args), projectDir);
}

/** A hook's `updatedInput` (merged over the input it was shown) back into Aleph's arguments. */
export function fromClaudeInput(alephName: string, input: Fields, projectDir: string): unknown {
  const mapping = MAPPINGS[alephName];
  return mapping === undefined ? input : mapping.fromClaude(input, projectDir);
}
