// PostToolUse `tool_response` in the shape of Claude Code's own tool: Bash's `{stdout, stderr,
// interrupted, isImage, noOutputExpected}` for `shell` (a terminal merges the two streams: all of it
// is `stdout`), Read's `{type: "text", file: {…}}`, Write's and Edit's records; any other tool keeps
// Aleph's `{output, is_error}`.
import { isAbsolute, resolve } from 'node:path';

/** The file as it was before a write or edit (read by the hooks' `before`), for `originalFile`. */
export interface FileBefore {
  readonly existed: boolean;
  readonly original: string | null;
}

type Fields = Record<string, unknown>;

const absolute = (projectDir: string, path: unknown): unknown =>
  typeof path === 'string' && !isAbsolute(path) ? resolve(projectDir, path) : path;

export function claudeToolResponse(
  alephName: string,
  args: unknown,
  output: string,
  projectDir: string,
  before: FileBefore | undefined,
): unknown {
  const input = (args !== null && typeof args === 'object' ? args : {}) as Fields;
  switch (alephName) {
    case 'shell': {
      // The shell tool's last line says how the command ended: `[exit code 0]`, `[timed out …]`.
      const end = /\n\[([^\]\n]+)\]$/.exec(output);
      const stdout = end === null ? output : output.slice(0, end.index);
      const interrupted = end !== null && /^(timed out|cancelled|killed)/.test(end[1] ?? '');
      return { stdout, stderr: '', interrupted, isImage: false, noOutputExpected: false };
    }
    case 'read_file': {
      const lines = output === '' ? 0 : output.split('\n').length;
      return {
        type: 'text',
        file: {
          filePath: absolute(projectDir, input['path']),
          content: output,
          numLines: lines,
          startLine: 1,
          totalLines: lines,
        },
      };
    }
    case 'write_file':
      return {
        type: before?.existed === true ? 'update' : 'create',
        filePath: absolute(projectDir, input['path']),
        content: input['content'],
        structuredPatch: [],
        originalFile: before?.original ?? null,
      };
    case 'edit_file':
      return {
        filePath: absolute(projectDir, input['path']),
        oldString: input['old_string'],
        newString: input['new_string'],
        originalFile: before?.original ?? null,
        structuredPatch: [],
        userModified: false,
        replaceAll: false,
      };
    default:
      return { output, is_error: false };
  }
}
