// A project file the model can write (`.mcp.json`), read by @aleph/sandbox's readModelWritableFile:
// inside the project, under no denied path, a regular file of bounded size, never blocking.
import { realpathSync } from 'node:fs';
import { MODEL_FILE_MAX_BYTES, readModelWritableFile } from '@aleph/sandbox';

/** Bytes of a project `.mcp.json` read at most (larger: refused, not cut). */
export const PROJECT_FILE_MAX_BYTES = MODEL_FILE_MAX_BYTES;

/**
 * The file's text; undefined when nothing is at `path`; `{ problem }` (naming the file, never
 * quoting it) when it is there but not read.
 */
export function readProjectFile(
  path: string,
  root: string,
  denied: readonly string[] = [],
): string | undefined | { readonly problem: string } {
  const read = readModelWritableFile(path, { roots: [root], denied });
  if (read.kind === 'missing') return undefined;
  if (read.kind === 'read') return read.text;
  const refused = (why: string): { problem: string } => ({ problem: `${path}: ${why}; not read` });
  const project = (): string => {
    try {
      return realpathSync(root);
    } catch {
      return root;
    }
  };
  if (read.why === 'outside') return refused(`is a link to a path outside the project (${project()})`);
  if (read.why === 'denied') return refused(`lies under ${read.under}, a path the sandbox denies`);
  return refused(read.reason);
}
