// Builds a throw-away workspace on disk for proving that each shape rule can fail.
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export function makeWorkspace(files: Record<string, string | object>): string {
  const root = mkdtempSync(join(tmpdir(), 'aleph-shape-'));
  for (const [path, content] of Object.entries(files)) {
    const full = join(root, path);
    mkdirSync(dirname(full), { recursive: true });
    writeFileSync(full, typeof content === 'string' ? content : JSON.stringify(content));
  }
  return root;
}
